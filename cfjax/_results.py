"""Plain-Python views of result objects: ``to_dict`` values and short ``repr`` strings.

``plain`` turns arrays (JAX or numpy), numpy scalars and nested dicts, tuples and lists into
floats, ints, bools, strings and lists, so that ``json.dumps`` takes them; ``brief`` writes a
value for a ``repr``: a number to 4 significant digits, a short vector in full, anything
larger (or a traced value) as its dtype and shape only.
"""

from __future__ import annotations

from typing import Any, Iterable

import jax
import numpy as np

#: Vectors up to this many entries are written out in a repr; larger arrays by shape.
_SHORT = 4


def plain(value: Any, *, strict: bool = False) -> Any:
    """JSON-ready plain Python of ``value`` (arrays become (nested) lists, scalars numbers).

    ``strict=True`` also turns NaN and infinities into None (strict JSON has neither);
    otherwise they stay floats, as in :meth:`cfjax.metrics.MarginalisationReport.to_dict`.
    """
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float):
        return None if strict and not np.isfinite(value) else value
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, dict):
        return {str(k): plain(v, strict=strict) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v, strict=strict) for v in value]
    if isinstance(value, jax.core.Tracer):
        raise TypeError("to_dict needs concrete values, not traced ones (call it outside jit/vmap)")
    if isinstance(value, (jax.Array, np.ndarray)):
        a = np.asarray(jax.device_get(value))
        if strict and a.dtype.kind in "fc":
            a = a.astype(np.float64)
            return (float(a) if np.isfinite(a) else None) if a.ndim == 0 \
                else np.where(np.isfinite(a), a, None).tolist()
        return a.tolist() if a.ndim else a.item()
    return value


def strict_plain(value: Any) -> Any:
    """:func:`plain` with ``strict=True``: non-finite numbers become None."""
    return plain(value, strict=True)


def headline(value: Any, digits: int = 4) -> str:
    """A number for a ``repr``: ``1.23e-05``; an array's shape when it is not a single concrete
    number (inside ``jit``/``vmap``, or batched)."""
    if isinstance(value, jax.core.Tracer):
        return f"traced{tuple(np.shape(value))}"
    arr = np.asarray(value)
    if arr.size == 1:
        return f"{float(arr.reshape(())):.{digits}g}"
    return f"array{arr.shape}"


def spec(value: Any) -> str:
    """``float32[2, 5]``: an array's dtype and shape."""
    shape = ", ".join(str(s) for s in np.shape(value))
    return f"{np.dtype(getattr(value, 'dtype', np.asarray(value).dtype)).name}[{shape}]"


def brief(value: Any) -> str:
    """A short rendering of a number or array for a repr (never a whole large array)."""
    if isinstance(value, (bool, int, str)) or value is None:
        return repr(value)
    if isinstance(value, float):
        return f"{value:.4g}"
    if not hasattr(value, "shape"):  # another result object: its own (short) repr
        text = repr(value)
        return text if len(text) <= 120 else text[:117] + "..."
    if isinstance(value, jax.core.Tracer):
        return spec(value)
    a = np.asarray(jax.device_get(value))
    if a.ndim == 0:
        return f"{a.item():.4g}" if a.dtype.kind in "fc" else repr(a.item())
    if a.ndim == 1 and a.size <= _SHORT and a.dtype.kind in "fiub":
        inner = ", ".join(f"{v:.4g}" if a.dtype.kind == "f" else str(v) for v in a.tolist())
        return f"[{inner}]"
    return spec(a)


def fields_repr(name: str, items: Iterable[tuple[str, Any]]) -> str:
    """``Name(a=0.5, b=float32[3, 4])`` from ``(field, value)`` pairs, values via :func:`brief`."""
    return f"{name}(" + ", ".join(f"{k}={brief(v)}" for k, v in items) + ")"


def sized(value: Any) -> Any:
    """A data field for a repr: a list of strings by its length, arrays by dtype and shape."""
    if isinstance(value, list):
        return Raw(f"list[{len(value)}]")
    if hasattr(value, "shape") and np.size(value) > 1:
        return Raw(spec(value))
    return value


class Raw(str):
    """A string that a repr shows without quotes."""

    def __repr__(self) -> str:
        return str(self)
