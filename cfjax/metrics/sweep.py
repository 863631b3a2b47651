"""Many predictors at once: one evaluation mapped over the predictor axis, split over devices."""

from __future__ import annotations

from typing import Any, Sequence

import jax.numpy as jnp
import numpy as np

from cfjax import _checks
from cfjax import distributed as _dist
from cfjax import platform
from cfjax.metrics import _arrays, _stages
from cfjax.metrics._report_types import MarginalisationReport

__all__ = ["evaluate_many"]


def evaluate_many(
    p_obs: Any,
    p_cf: Any,
    y: Any = None,
    *,
    weights: Any = None,
    tau: Any = 0.5,
    alphas: Sequence[float] = (0.5, 0.25, 0.1),
    n_bins: int = 15,
    mesh: Any = None,
    predictor_chunk: int | None | str = "auto",
) -> MarginalisationReport:
    """:func:`~cfjax.metrics.evaluate` for P predictors on the same units, with shared or
    per-predictor labels.

    Args:
      p_obs: ``(P, n)`` predictions on the observed units, one row per predictor.
      p_cf: ``(P, n, K)`` predictions on the counterfactuals.
      y: labels in {0, 1}: ``(n,)`` shared by all predictors, or ``(P, n)``, row j the labels
        of predictor j (e.g. one-vs-rest classifiers, class c scored against ``y == c``);
        None for the label-free fields only.
      weights, tau, alphas, n_bins: as in ``evaluate`` (shared by all predictors).
      mesh: None (the default device), a device count, a sequence of devices or a one-axis
        ``jax.sharding.Mesh`` to split the predictors over (:func:`cfjax.distributed.map_batch`;
        the labels shared by all predictors whole on every device). Several CPU devices exist
        only if the caller asked XLA for them (:func:`cfjax.distributed.host_devices`).
      predictor_chunk: predictors evaluated together on a device. ``None``: all of a device's
        predictors in one vmap (best on accelerators); an int: chunks of that many, one after
        another, which keeps each predictor's working set in cache (best on CPU). ``"auto"``:
        :func:`cfjax.platform.default_predictor_batch` (1 on CPU, None elsewhere).

    Returns:
      A report whose every field has a leading axis of length P.

    Binary scores with labels assumed invariant; for class probabilities or counterfactual
    labels ``y_cf``, ``jax.vmap`` :func:`~cfjax.metrics.evaluate` over the predictor axis.

    Example:
      >>> import numpy as np
      >>> rng = np.random.default_rng(0)
      >>> p_cf = rng.uniform(size=(3, 50, 16)).astype(np.float32)
      >>> evaluate_many(p_cf[..., 0], p_cf, rng.integers(0, 2, 50)).risk_cvar.shape
      (3, 3)

      One-vs-rest scores of 3 classes, each against its own labels ``y == c``:

      >>> y = rng.integers(0, 3, 50)
      >>> y_ovr = (y[None, :] == np.arange(3)[:, None]).astype(np.int32)  # (P, n)
      >>> evaluate_many(p_cf[..., 0], p_cf, y_ovr).risk_orig.shape
      (3,)
    """
    alphas, n_bins = _stages.check_options(alphas, n_bins, tau)
    _checks.check_ndim("p_obs", p_obs, 2, "of shape (P, n)")
    _checks.check_ndim("p_cf", p_cf, 3, "of shape (P, n, K)")
    _checks.check_nonempty("p_obs", p_obs)
    _checks.check_nonempty("p_cf", p_cf)
    n_pred, n = np.shape(p_obs)
    if np.shape(p_cf)[:2] != (n_pred, n):
        _checks.fail("p_cf", f"shape ({n_pred}, {n}, K) to match `p_obs` {np.shape(p_obs)}",
                     f"shape {np.shape(p_cf)}")
    _checks.check_probabilities("p_obs", p_obs)
    _checks.check_probabilities("p_cf", p_cf)
    per_predictor = _check_sweep_labels(y, n_pred, n)
    dtype = _arrays.float_dtype(p_obs, p_cf)
    where = _dist.as_mesh(mesh)
    if predictor_chunk == "auto":
        predictor_chunk = platform.default_predictor_batch(None if where is None else list(where.devices.flat))
    elif predictor_chunk is not None:
        predictor_chunk = _checks.check_positive_int("predictor_chunk", predictor_chunk)
    split = {"p_obs": jnp.asarray(p_obs).astype(dtype), "p_cf": jnp.asarray(p_cf).astype(dtype)}
    shared = {"q": _arrays.resolve_weights(weights, np.shape(p_cf)[2], dtype), "tau": jnp.asarray(tau, dtype)}
    if y is not None:
        (split if per_predictor else shared)["y"] = _arrays.as_float(y, dtype)
    return _dist.map_batch(_stages.BatchReports(alphas, n_bins, weights is None), split, shared=(shared,), mesh=where,
                           chunk_size=predictor_chunk)


def _check_sweep_labels(y: Any, n_pred: int, n: int) -> bool:
    """Validate ``y``: None, shared ``(n,)`` or per predictor ``(P, n)``, values in {0, 1}.
    Returns whether the labels are per predictor."""
    if y is None:
        return False
    if np.shape(y) not in ((n,), (n_pred, n)):
        _checks.fail("y", f"labels of shape ({n},), shared by all predictors, or "
                     f"({n_pred}, {n}), one row per predictor (P, n) like `p_obs`",
                     f"shape {np.shape(y)}")
    _checks.check_binary_labels("y", y)
    return np.ndim(y) == 2
