"""Plain Python for results a user keeps: JSON-serialisable values and one-line numbers."""

from __future__ import annotations

from typing import Any

import jax
import numpy as np


def plain(value: Any) -> Any:
    """JSON-serialisable plain Python from arrays, numbers, tuples and dicts: floats (ints and
    bools kept), nested lists; non-finite floats become None (strict JSON has no NaN or inf)."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, (int, np.integer)):
        return int(value)
    arr = np.asarray(jax.device_get(value))
    if arr.dtype.kind in "biu":
        return arr.tolist()
    arr = arr.astype(np.float64)
    if arr.ndim == 0:
        return float(arr) if np.isfinite(arr) else None
    return np.where(np.isfinite(arr), arr, None).tolist()


def headline(value: Any, digits: int = 4) -> str:
    """A number for a ``repr``: ``1.23e-05``; an array's shape when it is not a single concrete
    number (inside ``jit``/``vmap``, or batched)."""
    try:
        arr = np.asarray(value)
        if arr.size == 1:
            return f"{float(arr.reshape(())):.{digits}g}"
        return f"array{arr.shape}"
    except Exception:  # a tracer: no value to show
        return f"traced{tuple(np.shape(value))}"
