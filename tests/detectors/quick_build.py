"""Helpers for tests that run ``train-synthetic`` up to the training-window draw."""

from __future__ import annotations


class DrawnError(Exception):
    """Raised by the stand-in window draw (the ``stop_at_the_draw`` fixture): the build
    stops there."""
