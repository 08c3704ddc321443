"""Benchmarks behind ``callshield bench``: distributions beside a same-run baseline."""
