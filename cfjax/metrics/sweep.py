"""Many predictors at once: one evaluation mapped over the predictor axis, split over devices."""

from __future__ import annotations

from collections.abc import Sequence

import jax.numpy as jnp
import numpy as np

from cfjax import _checks, platform
from cfjax import distributed as _dist
from cfjax.metrics import _arrays, _inputs, _stages
from cfjax.metrics._stages import Report
from cfjax.typing import ArrayLike, MeshLike

__all__ = ["evaluate_many"]


def evaluate_many(
    p_obs: ArrayLike,
    p_cf: ArrayLike,
    y: ArrayLike | None = None,
    *,
    y_cf: ArrayLike | None = None,
    weights: ArrayLike | None = None,
    tau: ArrayLike = 0.5,
    alphas: Sequence[float] = (0.5, 0.25, 0.1),
    n_bins: int = 15,
    mesh: MeshLike = None,
    predictor_chunk: int | None | str = "auto",
) -> Report:
    """:func:`~cfjax.metrics.evaluate` for P predictors on the same units, with shared or
    per-predictor labels: binary scores or class probabilities, labels invariant or
    counterfactual, as ``evaluate`` takes them with a leading predictor axis M.

    Args:
      p_obs: ``(M, n)`` scores on the observed units, one row per predictor (class
        probabilities ``(M, n, C)``).
      p_cf: ``(M, n, K)`` scores on the counterfactuals (``(M, n, K, C)``).
      y: labels (in {0, 1}; class indices for class probabilities): ``(n,)`` shared by all
        predictors, or ``(M, n)``, row j the labels of predictor j (e.g. one-vs-rest
        classifiers, class c scored against ``y == c``); None for the label-free fields only.
      y_cf: counterfactual labels, ``(n, K)`` shared or ``(M, n, K)`` per predictor (with
        ``y``), as in ``evaluate``.
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
      The report ``evaluate`` gives for one predictor, every field with a leading axis of
      length M.

    Example:
      >>> import numpy as np
      >>> rng = np.random.default_rng(0)
      >>> p_cf = rng.uniform(size=(3, 50, 16)).astype(np.float32)
      >>> evaluate_many(p_cf[..., 0], p_cf, rng.integers(0, 2, 50)).risk_cvar.shape
      (3, 3)

      One-vs-rest scores of 3 classes, each against its own labels ``y == c``:

      >>> y = rng.integers(0, 3, 50)
      >>> y_ovr = (y[None, :] == np.arange(3)[:, None]).astype(np.int32)  # (M, n)
      >>> evaluate_many(p_cf[..., 0], p_cf, y_ovr).risk_orig.shape
      (3,)

      Two predictors of class probabilities, labels that change under the interventions:

      >>> probs = rng.dirichlet(np.ones(3), (2, 50, 4)).astype(np.float32)
      >>> r = evaluate_many(probs[:, :, 0], probs, y, y_cf=rng.integers(0, 3, (50, 4)))
      >>> r.classes, r.labels, r.s_tv.shape
      (3, 'counterfactual', (2,))
    """
    alphas, n_bins = _stages.check_options(alphas, n_bins, tau)
    classes = np.ndim(p_cf) == 4 or np.ndim(p_obs) == 3
    _checks.check_ndim(
        "p_obs", p_obs, 3 if classes else 2, "of shape (M, n, C)" if classes else "of shape (M, n)"
    )
    _checks.check_ndim(
        "p_cf",
        p_cf,
        4 if classes else 3,
        "of shape (M, n, K, C)" if classes else "of shape (M, n, K)",
    )
    _checks.check_nonempty("p_obs", p_obs)
    _checks.check_nonempty("p_cf", p_cf)
    n_pred, n = np.shape(p_obs)[:2]
    k = np.shape(p_cf)[2]
    want = (n_pred, n, k) + np.shape(p_obs)[2:]
    if np.shape(p_cf) != want:
        _checks.fail(
            "p_cf",
            f"shape {want} to match `p_obs` {np.shape(p_obs)} (M, n, K{', C' if classes else ''})",
            f"shape {np.shape(p_cf)}",
        )
    y_split = _label_rows("y", y, n_pred, (n,))
    y_cf_split = _label_rows("y_cf", y_cf, n_pred, (n, k))
    # Shapes, options and dtypes checked as one predictor's (the first's rows), then every
    # value of every predictor: the scores in one pass over their (M, n, …) arrays, never
    # flattened (a reshape of a device array is a copy, of M·n·K values here).
    first = lambda v, split: None if v is None else np.asarray(v)[0] if split else v  # noqa: E731
    p_obs_j, p_cf_j = jnp.asarray(p_obs), jnp.asarray(p_cf)
    _, _, _, _, q, tau = _stages.prepare(
        p_obs_j[0], p_cf_j[0], first(y, y_split), first(y_cf, y_cf_split), weights, tau
    )
    for name, v in (("p_obs", p_obs_j), ("p_cf", p_cf_j)):
        _checks.check_probabilities(name, v)
        if classes:
            _inputs.check_simplex_rows(name, v)
    labels = {name: v for name, v in (("y", y), ("y_cf", y_cf)) if v is not None}
    for name, given in labels.items():
        if classes:
            _inputs.check_class_labels(name, given, np.shape(p_obs)[2])
        else:
            _checks.check_binary_labels(name, given)
    cast = (
        (lambda v: jnp.asarray(v).astype(jnp.int32))
        if classes
        else (lambda v: _arrays.as_float(v, q.dtype))
    )  # noqa: E731
    y_f, y_cf_f = (None if v is None else cast(v) for v in (y, y_cf))
    where = _dist.as_mesh(mesh)
    if predictor_chunk == "auto":
        predictor_chunk = platform.default_predictor_batch(
            None if where is None else list(where.devices.flat)
        )
    elif predictor_chunk is not None:
        predictor_chunk = _checks.check_positive_int("predictor_chunk", predictor_chunk)
    split = {"p_obs": p_obs_j.astype(q.dtype), "p_cf": p_cf_j.astype(q.dtype)}
    shared = {"q": q, "tau": tau}
    for name, cast_labels, per_predictor in (("y", y_f, y_split), ("y_cf", y_cf_f, y_cf_split)):
        if cast_labels is not None:
            (split if per_predictor else shared)[name] = cast_labels
    return _dist.map_batch(
        _stages.BatchReports(alphas, n_bins, weights is None),
        split,
        shared=(shared,),
        mesh=where,
        chunk_size=predictor_chunk,
    )


def _label_rows(name: str, v: ArrayLike | None, n_pred: int, shape: tuple[int, ...]) -> bool:
    """Check that labels ``v`` are shared ``shape`` or per predictor ``(M, *shape)``; returns
    whether they are per predictor (False for None)."""
    if v is None:
        return False
    if np.shape(v) not in (shape, (n_pred,) + shape):
        dims = ", ".join(("n", "K")[: len(shape)])
        _checks.fail(
            name,
            f"labels of shape {shape} ({dims}), shared by all predictors, or "
            f"{(n_pred,) + shape} (M, {dims}), one row per predictor",
            f"shape {np.shape(v)}",
        )
    return np.ndim(v) == len(shape) + 1
