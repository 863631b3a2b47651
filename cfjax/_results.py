"""Plain-Python views of result objects: ``to_dict`` values and short ``repr`` strings.

``plain`` turns arrays (JAX or numpy), numpy scalars and nested dicts, tuples and lists into
floats, ints, bools, strings and lists, so that ``json.dumps`` takes them; ``brief`` writes a
value for a ``repr``: a number to 4 significant digits, a short vector in full, anything
larger (or a traced value) as its dtype and shape only.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import numpy as np

from cfjax.io import plain_floats

#: Vectors up to this many entries are written out in a repr; larger arrays by shape.
_SHORT = 4


def plain(
    value: Any,
    *,
    strict: bool = False,
    shortest: bool = False,
    float32_values: bool = False,
    private: bool = True,
) -> Any:
    """JSON-ready plain Python of ``value`` (arrays become (nested) lists, scalars numbers, an
    object with a ``to_dict`` method its ``to_dict()``): cfjax's one conversion to JSON.

    Args:
      value: a number, array, string, None, or a dict / list / tuple of them (nested).
      strict: NaN and infinities become None (strict JSON has neither); otherwise they stay
        floats, as in :meth:`cfjax.metrics.MarginalisationReport.to_dict`.
      shortest: float32 numbers as their shortest decimal (:func:`cfjax.io.plain_floats`: 0.836,
        not 0.8360000252723694); float64 numbers unchanged.
      float32_values: with ``shortest``, a float64 number that is exactly a float32 value (a
        float32 result kept as float64) is written as that float32's shortest decimal too.
      private: False drops the dict keys that start with ``_``.

    Example:
      >>> import numpy as np
      >>> plain({"a": np.float32(0.836), "b": np.asarray([np.nan, 2.0])}, strict=True, shortest=True)
      {'a': 0.836, 'b': [None, 2.0]}
    """
    import jax  # here, not at the top: `cfjax --help` answers without importing jax

    kw = dict(strict=strict, shortest=shortest, float32_values=float32_values, private=private)
    if shortest and isinstance(value, (float, np.floating)):
        value = plain_floats(value, float32_values)
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float):
        return None if strict and not np.isfinite(value) else value
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, dict):
        return {
            str(k): plain(v, **kw)
            for k, v in value.items()
            if private or not str(k).startswith("_")
        }
    if isinstance(value, (list, tuple)):
        return [plain(v, **kw) for v in value]
    if isinstance(value, jax.core.Tracer):
        raise TypeError("to_dict needs concrete values, not traced ones (call it outside jit/vmap)")
    if isinstance(value, (jax.Array, np.ndarray)):
        a = np.asarray(jax.device_get(value))
        if shortest and a.dtype.kind == "f":
            out = plain_floats(a, float32_values)
            return _finite_or_none(out) if strict else out
        if strict and a.dtype.kind in "fc":
            a = a.astype(np.float64)
            return (
                (float(a) if np.isfinite(a) else None)
                if a.ndim == 0
                else _finite_or_none(a.tolist())
            )
        return a.tolist() if a.ndim else a.item()
    if hasattr(value, "to_dict") and not isinstance(value, type):
        return plain(value.to_dict(), **kw)
    return value


def _finite_or_none(x: Any) -> Any:
    """Nested lists of floats with NaN and infinities as None."""
    if isinstance(x, list):
        return [_finite_or_none(v) for v in x]
    return None if isinstance(x, float) and not math.isfinite(x) else x


def strict_plain(value: Any) -> Any:
    """:func:`plain` with ``strict=True``: non-finite numbers become None."""
    return plain(value, strict=True)


def headline(value: Any, digits: int = 4) -> str:
    """A number for a ``repr``: ``1.23e-05``; an array's shape when it is not a single concrete
    number (inside ``jit``/``vmap``, or batched)."""
    import jax

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
    import jax

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
