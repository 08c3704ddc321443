"""CallShield media process: ingress adapters wired to the native media core and detectors.

This package is the composition root of the media process (DESIGN.md §1).
"""
