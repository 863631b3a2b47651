"""Input validation shared by every cfjax pillar.

Checks run at the public boundary, on the host, before anything is traced. Shape checks
always run (shapes are static, even under ``jit`` and ``vmap``); value checks (NaN, ranges,
labels, weights) run only when the argument is concrete, because a traced value cannot be
inspected without a host round-trip. Every failure raises :class:`ValidationError`, a
``ValueError`` whose message names the argument, what was expected and what was found.
"""

from __future__ import annotations

import os
import sys
import warnings
from types import FrameType
from typing import Any, NoReturn

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import DTypeLike

from cfjax._errors import PrecisionWarning, ValidationError

__all__ = ["PrecisionWarning", "ValidationError"]


def fail(name: str, expected: str, found: str) -> NoReturn:
    raise ValidationError(f"`{name}`: expected {expected}, got {found}.")


def is_concrete(x: Any) -> bool:
    """True when ``x`` holds values (not a tracer inside ``jit``/``vmap``/``grad``)."""
    return not isinstance(x, jax.core.Tracer)


def shape_of(x: Any) -> tuple[int, ...]:
    return tuple(np.shape(x))


def check_ndim(name: str, x: Any, ndim: int, what: str) -> None:
    shape = shape_of(x)
    if len(shape) != ndim:
        fail(name, f"{ndim}-d array {what}", f"shape {shape}")


def check_shape(name: str, x: Any, shape: tuple[int, ...], what: str, why: str = "") -> None:
    """``x`` of exactly ``shape`` (static: checked under ``jit`` and ``vmap`` too); ``what``
    says what the array holds, ``why`` what fixes its shape (e.g. "one per unit of logits_cf")."""
    found = shape_of(x)
    if found != tuple(shape):
        fail(
            name, f"{what} of shape {tuple(shape)}" + (f", {why}" if why else ""), f"shape {found}"
        )


def as_array(name: str, x: Any, dtype: DTypeLike | None = None) -> np.ndarray:
    """``np.asarray(x, dtype)``, failing with the argument's name where numpy cannot make one
    rectangular array of it (ragged rows, values not convertible to ``dtype``)."""
    try:
        return np.asarray(x, dtype)
    except (TypeError, ValueError) as error:
        want = "a rectangular array" + ("" if dtype is None else f" of {np.dtype(dtype).name}")
        fail(name, want, f"values numpy cannot convert ({str(error).split('. ')[0]})")


def check_nonempty(name: str, x: Any) -> None:
    shape = shape_of(x)
    if any(s == 0 for s in shape):
        fail(name, "a non-empty array", f"shape {shape}")


def check_same_len(name_a: str, a: Any, name_b: str, b: Any) -> None:
    na, nb = shape_of(a)[0], shape_of(b)[0]
    if na != nb:
        raise ValidationError(
            f"`{name_b}`: expected {na} rows to match `{name_a}`, got {nb} "
            f"(shapes {shape_of(a)} and {shape_of(b)})."
        )


@jax.jit
def _all_probabilities(x: jax.Array) -> jax.Array:
    """One fused pass where ``x`` lives (sharded or not): all values in [0, 1], no NaN."""
    return jnp.all((x >= 0) & (x <= 1))  # NaN fails both comparisons


@jax.jit
def _value_summary(x: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    """(NaN count, min, max ignoring NaN): the details, computed only after a failure."""
    nan = jnp.isnan(x)
    lo = jnp.min(jnp.where(nan, jnp.inf, x))
    hi = jnp.max(jnp.where(nan, -jnp.inf, x))
    return jnp.sum(nan), lo, hi


def check_probabilities(name: str, x: Any) -> None:
    """Values in [0, 1], no NaN (concrete inputs only).

    JAX arrays are summarised on their own device(s) in one fused pass, so a large sharded
    batch is never copied to the host just to be checked.
    """
    if not is_concrete(x):
        return
    warn_if_downcast(name, x)
    dtype = np.dtype(getattr(x, "dtype", None) or np.asarray(x).dtype)
    if not np.issubdtype(dtype, np.floating):
        fail(name, "a floating-point array of probabilities", f"dtype {dtype}")
    if isinstance(x, jax.Array):
        if bool(_all_probabilities(x)):
            return
        n_nan, lo, hi = (v.item() for v in _value_summary(x))
    else:
        v = np.asarray(x)
        if v.size and 0 <= v.min() and v.max() <= 1:  # min/max propagate NaN: fails
            return
        n_nan, lo, hi = int(np.isnan(v).sum()), np.nanmin(v), np.nanmax(v)
    if n_nan:
        fail(name, "probabilities without NaN", f"{int(n_nan)} NaN value(s)")
    if lo < 0 or hi > 1:
        fail(name, "probabilities in [0, 1]", f"values in [{lo:.6g}, {hi:.6g}]")


def check_finite(name: str, x: Any) -> None:
    if not is_concrete(x):
        return
    warn_if_downcast(name, x)
    v = np.asarray(x)
    bad = ~np.isfinite(v)
    if bad.any():
        fail(name, "finite values", f"{int(bad.sum())} NaN or infinite value(s)")


def check_binary_labels(name: str, y: Any) -> None:
    if not is_concrete(y):
        return
    v = np.asarray(y)
    if v.dtype == bool:
        return
    if np.issubdtype(v.dtype, np.floating) and np.isnan(v).any():
        fail(name, "labels in {0, 1}", "NaN")
    bad = (v != 0) & (v != 1)
    if bad.any():
        found = np.unique(v[bad])[:5].tolist()
        fail(name, "labels in {0, 1}", f"other values, e.g. {found}")


def check_weights(name: str, w: Any, k: int, atol: float = 1e-5) -> None:
    """A probability vector of length ``k``: non-negative, summing to 1."""
    shape = shape_of(w)
    if shape != (k,):
        fail(name, f"shape ({k},) matching the K axis of the counterfactuals", f"shape {shape}")
    if not is_concrete(w):
        return
    v = np.asarray(w, dtype=np.float64)
    if np.isnan(v).any():
        fail(name, "weights without NaN", "NaN")
    if (v < 0).any():
        fail(name, "non-negative weights", f"minimum {v.min():.6g}")
    if abs(v.sum() - 1.0) > atol:
        fail(name, "weights summing to 1", f"sum {v.sum():.8g}")


def check_alphas(name: str, alphas: Any) -> tuple[float, ...]:
    try:
        values = tuple(float(a) for a in np.atleast_1d(np.asarray(alphas, dtype=np.float64)))
    except (TypeError, ValueError):
        fail(name, "a sequence of levels in (0, 1]", repr(alphas))
    if not values:
        fail(name, "at least one level in (0, 1]", "an empty sequence")
    for a in values:
        if not (0.0 < a <= 1.0):  # also rejects NaN
            fail(name, "levels in (0, 1]", f"{a!r}")
    return values


def check_positive_int(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        fail(name, "an integer >= 1", repr(value))
    return int(value)


def check_positive_float(name: str, value: Any) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float, np.integer, np.floating))
        or not np.isfinite(value)
        or value <= 0
    ):
        fail(name, "a finite number > 0", repr(value))
    return float(value)


def check_threshold(name: str, tau: Any) -> None:
    if not is_concrete(tau):
        return
    t = np.asarray(tau, dtype=np.float64)
    if t.shape != () or not (0.0 <= float(t) <= 1.0):
        fail(name, "a decision threshold in [0, 1]", repr(tau))


_DOWNCAST_WARNED: set[str] = set()  # argument names already warned about, in this process


def warn_if_downcast(name: str, x: Any) -> None:
    """Warn (a :class:`PrecisionWarning`, once per process and argument name) when ``x`` is a
    float64 (or complex128) array that JAX will compute in 32 bits because ``jax_enable_x64``
    is off. Anything without a ``dtype`` (lists, Python numbers) is left alone. Respects
    ``jax.enable_x64`` scopes."""
    dtype = getattr(x, "dtype", None)
    if dtype is None or name in _DOWNCAST_WARNED:
        return
    try:
        dtype = np.dtype(dtype)
    except TypeError:
        return
    if dtype not in (np.dtype(np.float64), np.dtype(np.complex128)):
        return
    if jax.dtypes.canonicalize_dtype(dtype) == dtype:
        return
    _DOWNCAST_WARNED.add(name)
    warnings.warn(
        f"`{name}` is {dtype} but is computed in {jax.dtypes.canonicalize_dtype(dtype)} because "
        'jax_enable_x64 is off; for 64-bit results call jax.config.update("jax_enable_x64", True) '
        "at the start of the program (this warning is shown once per argument name).",
        PrecisionWarning,
        stacklevel=_user_stacklevel(),
    )


def _user_stacklevel() -> int:
    """The ``stacklevel`` for ``warnings.warn`` called right here that points at the first frame
    outside the cfjax package (the user's call), however deep the library's helpers nest."""
    root = os.path.dirname(os.path.abspath(__file__)) + os.sep
    frame: FrameType | None = sys._getframe(2)  # the caller of warnings.warn's caller
    level = 2
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(root):
        frame, level = frame.f_back, level + 1
    return level
