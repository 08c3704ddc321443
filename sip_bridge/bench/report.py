"""Distribution summaries and printing shared by every benchmark."""

from __future__ import annotations

import json
import platform
import sys
from collections.abc import Iterable
from typing import Any

import numpy as np


def summarize(samples: Iterable[float], unit: str = "us") -> dict[str, Any]:
    """p50/p90/p99/p99.9/max/mean of a sample set; p99.9 only with >= 1,000 samples."""
    arr = np.asarray(list(samples) if not isinstance(samples, np.ndarray) else samples, float)
    if arr.size == 0:
        return {"n": 0, "unit": unit}
    out: dict[str, Any] = {
        "n": int(arr.size),
        "unit": unit,
        "mean": float(arr.mean()),
        "p50": float(np.percentile(arr, 50)),
        "p90": float(np.percentile(arr, 90)),
        "p99": float(np.percentile(arr, 99)),
        "max": float(arr.max()),
    }
    if arr.size >= 1000:
        out["p99.9"] = float(np.percentile(arr, 99.9))
    return out


def machine() -> dict[str, Any]:
    import os

    return {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
    }


def emit(result: dict[str, Any], as_json: bool) -> None:
    result = {"machine": machine(), **result}
    if as_json:
        print(json.dumps(result, indent=2, sort_keys=False))
        return
    _print_tree(result)


def _print_tree(obj: Any, indent: int = 0) -> None:
    pad = "  " * indent
    if isinstance(obj, dict):
        for key, value in obj.items():
            if isinstance(value, dict | list):
                print(f"{pad}{key}:")
                _print_tree(value, indent + 1)
            else:
                print(f"{pad}{key}: {_fmt(value)}")
    elif isinstance(obj, list):
        for item in obj:
            _print_tree(item, indent)
            print()
    else:
        print(f"{pad}{_fmt(obj)}")


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.3f}"
    return str(value)
