"""The study's predictions file, ``predictions_<setting>.npz``: every predictor × seed's scores on
one setting's test units, in the layout ``cfjax evaluate`` reads (``--predictor NAME``).

Arrays (units before interventions, ``docs/contract.md``):

- ``format_version``: :data:`FORMAT_VERSION` (a scalar);
- ``names (P,)``, ``seeds (S,)``: the predictors and their training seeds;
- ``p_obs (P, S, N)``, ``p_cf (P, S, N, K)``: factual and counterfactual scores;
- ``y (N,)``, ``y_cf (N, K)``: factual and counterfactual labels;
- ``weights (K,)``: the interventions' weights;
- any further arrays of one value per unit or per predictor × seed × unit (``p_race (P, S, N,
  3)``, ``sex``, ``age``, ``race``).

Format 1 (files without ``format_version``, written before this one) held ``y_cf`` as ``(K, N)``;
``cfjax evaluate`` refuses such a file with a message that says how to convert it.
"""

from __future__ import annotations

import io

import numpy as np
import numpy.typing as npt

from cfjax import _checks
from cfjax.io import atomic_write_bytes

__all__ = ["FORMAT_VERSION", "save_predictions"]

#: the layout version written in ``format_version`` (2: ``y_cf (N, K)``; 1, unmarked: ``(K, N)``)
FORMAT_VERSION = 2


def save_predictions(
    path: str,
    *,
    names: npt.ArrayLike,
    seeds: npt.ArrayLike,
    p_obs: npt.ArrayLike,
    p_cf: npt.ArrayLike,
    y: npt.ArrayLike,
    y_cf: npt.ArrayLike,
    weights: npt.ArrayLike,
    **arrays: npt.ArrayLike,
) -> None:
    """Write a predictions file (compressed ``.npz``, atomically) after checking its shapes.

    Args:
      path: the file to write.
      names, seeds: ``(P,)`` predictor names and ``(S,)`` training seeds.
      p_obs, p_cf: ``(P, S, N)`` and ``(P, S, N, K)`` scores.
      y, y_cf: ``(N,)`` and ``(N, K)`` labels.
      weights: ``(K,)`` intervention weights.
      **arrays: further arrays (attributes, other scores) stored under their names.

    Raises:
      ValidationError: an array of another shape, naming it.

    Example:
      >>> import os, tempfile
      >>> path = os.path.join(tempfile.mkdtemp(), "predictions_A.npz")
      >>> save_predictions(path, names=["basic"], seeds=[0], p_obs=np.full((1, 1, 3), 0.5),
      ...                  p_cf=np.full((1, 1, 3, 2), 0.5), y=[0, 1, 1], y_cf=[[0, 0], [1, 1], [1, 0]],
      ...                  weights=[0.5, 0.5])
      >>> with np.load(path) as z:
      ...     int(z["format_version"]), z["y_cf"].shape
      (2, (3, 2))
    """
    names, seeds = np.asarray(names), np.asarray(seeds)
    p_obs, p_cf, y, y_cf, weights = (np.asarray(a) for a in (p_obs, p_cf, y, y_cf, weights))
    for name, a, what in (
        ("names", names, "(P,)"),
        ("seeds", seeds, "(S,)"),
        ("y", y, "(N,)"),
        ("weights", weights, "(K,)"),
    ):
        _checks.check_ndim(name, a, 1, f"of shape {what}")
    n_pred, n_seeds, n, k = len(names), len(seeds), len(y), len(weights)
    sizes = f"P = {n_pred} predictors, S = {n_seeds} seeds, N = {n} units, K = {k} interventions"
    _checks.check_shape("p_obs", p_obs, (n_pred, n_seeds, n), f"scores (P, S, N) ({sizes})")
    _checks.check_shape("p_cf", p_cf, (n_pred, n_seeds, n, k), f"scores (P, S, N, K) ({sizes})")
    _checks.check_shape(
        "y_cf", y_cf, (n, k), f"labels (N, K), units before interventions ({sizes})"
    )
    buf = io.BytesIO()
    np.savez_compressed(
        buf,
        format_version=np.int32(FORMAT_VERSION),
        names=names,
        seeds=seeds,
        p_obs=p_obs,
        p_cf=p_cf,
        y=y,
        y_cf=y_cf,
        weights=weights,
        **arrays,  # type: ignore[arg-type]  # the stub's allow_pickle: bool
    )
    atomic_write_bytes(path, buf.getvalue())
