"""The full counterfactual-marginalisation report of one predictor (paper 000, SPEC §1)."""

from __future__ import annotations

import functools
import math
from typing import Any, Sequence

import jax
import jax.numpy as jnp
from flax import struct

from cfjax import _checks
from cfjax.metrics import _arrays, _inputs
from cfjax.metrics.calibration import _bins, _brier
from cfjax.metrics.ranking import _kendall_tau_b, _spearman
from cfjax.metrics.risk import binary_bce, cvar_risks_kn, losses_kn
from cfjax.metrics.smooth_calibration import _smooth_ece
from cfjax.metrics.stability import d_obs, mean_abs_shift, s_flip_kn, s_var_kn

__all__ = ["MarginalisationReport", "evaluate", "LABEL_FIELDS"]

#: Report fields that need labels; NaN when ``evaluate`` is called with ``y=None``.
LABEL_FIELDS = (
    "risk_orig", "risk_cm", "risk_ie", "risk_cvar", "risk_wc",
    "brier_orig", "ece_orig", "mce_orig", "smece_orig", "brier_cm", "ece_cm", "mce_cm", "smece_cm",
)


@struct.dataclass
class MarginalisationReport:
    """Every SPEC §1 metric of one predictor (or of a batch, with a leading axis, under vmap).

    Scalars, except ``risk_cvar`` which has shape ``(len(alphas),)``, aligned with the static
    field ``alphas``. ``ece_*``/``mce_*`` use equal-width bins; ``smece_*`` is the smooth ECE
    (:func:`~cfjax.metrics.smooth_ece`, its bandwidth chosen automatically) of ``p_obs``
    (``orig``) and of the marginalised ``p_bar`` (``cm``).
    """

    risk_orig: jax.Array
    risk_cm: jax.Array
    risk_ie: jax.Array
    risk_cvar: jax.Array
    risk_wc: jax.Array
    brier_orig: jax.Array
    ece_orig: jax.Array
    mce_orig: jax.Array
    smece_orig: jax.Array
    brier_cm: jax.Array
    ece_cm: jax.Array
    mce_cm: jax.Array
    smece_cm: jax.Array
    s_var: jax.Array
    s_flip: jax.Array
    d_obs: jax.Array
    score_shift: jax.Array
    spearman: jax.Array
    kendall_tau_b: jax.Array
    rank_change: jax.Array
    alphas: tuple[float, ...] = struct.field(pytree_node=False, default=(0.5, 0.25, 0.1))

    def to_dict(self) -> dict[str, Any]:
        """Plain Python numbers: floats for scalar fields, ``{alpha: float}`` for
        ``risk_cvar``. For a batched report (leading predictor axis) each float becomes a
        list of floats."""
        out: dict[str, Any] = {}
        for name in self.__dataclass_fields__:
            if name == "alphas":
                continue
            value = jax.device_get(getattr(self, name))
            if name == "risk_cvar":
                cols = [value[..., j] for j in range(len(self.alphas))]
                out[name] = {a: _plain(c) for a, c in zip(self.alphas, cols)}
            else:
                out[name] = _plain(value)
        return out


def check_options(alphas: Sequence[float], n_bins: int, tau: Any) -> tuple[tuple[float, ...], int]:
    """Validate the options shared by ``evaluate`` and ``evaluate_many``."""
    _checks.check_threshold("tau", tau)
    return _checks.check_alphas("alphas", alphas), _checks.check_positive_int("n_bins", n_bins)


def _plain(value: Any) -> Any:
    return value.tolist() if getattr(value, "ndim", 0) else float(value)


def evaluate(
    p_obs: Any,
    p_cf: Any,
    y: Any = None,
    *,
    weights: Any = None,
    tau: Any = 0.5,
    alphas: Sequence[float] = (0.5, 0.25, 0.1),
    n_bins: int = 15,
) -> MarginalisationReport:
    """Evaluate a predictor by counterfactual marginalisation over K interventions.

    Args:
      p_obs: ``(n,)`` predictions on the observed images, ``g(x_i)``.
      p_cf: ``(n, K)`` predictions on the counterfactuals, ``g(x̃_i(ã_k))``.
      y: ``(n,)`` labels in {0, 1}, or None for the label-free stability fields only.
      weights: ``(K,)`` intervention weights q (non-negative, sum 1); uniform when None.
      tau: decision threshold for ``s_flip`` and ``d_obs``.
      alphas: CVaR levels in (0, 1].
      n_bins: number of equal-width calibration bins.

    Returns:
      A :class:`MarginalisationReport`; label fields are NaN when ``y`` is None.

    Jittable and vmappable: ``jax.vmap(lambda po, pc: evaluate(po, pc, y))(P_obs, P_cf)``
    evaluates many predictors at once (value checks are skipped on traced inputs; shape
    checks always run).

    Example:
      >>> import numpy as np
      >>> rng = np.random.default_rng(0)
      >>> p_cf = rng.uniform(size=(100, 16)).astype(np.float32)
      >>> r = evaluate(p_cf[:, 0], p_cf, rng.integers(0, 2, 100))
      >>> bool(r.risk_cm <= r.risk_ie <= r.risk_wc)
      True
    """
    alphas, n_bins = check_options(alphas, n_bins, tau)
    p_obs, p_cf, y, q = _inputs.prepare(p_obs=p_obs, p_cf=p_cf, y=y, weights=weights)
    tau = jnp.asarray(tau, p_obs.dtype)
    return _evaluate(p_obs, p_cf, y, q, tau, alphas=alphas, n_bins=n_bins,
                     uniform=weights is None)


@functools.partial(jax.jit, static_argnames=("alphas", "n_bins", "uniform"))
def _evaluate(p_obs, p_cf, y, q, tau, *, alphas, n_bins, uniform) -> MarginalisationReport:
    dtype = p_obs.dtype
    x = p_cf.T  # (K, n): the intervention-major layout of the kernels
    p_bar = q @ x
    bounds_obs = _arrays.rank_bounds(p_obs)
    bounds_bar = _arrays.rank_bounds(p_bar)
    ranks_obs = _arrays.average_ranks_from_bounds(*bounds_obs, dtype)
    ranks_bar = _arrays.average_ranks_from_bounds(*bounds_bar, dtype)
    stability = dict(
        s_var=s_var_kn(x, q, p_bar),
        s_flip=s_flip_kn(p_obs, x, q, tau),
        d_obs=d_obs(p_obs, p_bar, tau),
        score_shift=mean_abs_shift(p_obs, p_bar),
        spearman=_spearman(ranks_obs, ranks_bar),
        kendall_tau_b=_kendall_tau_b(bounds_obs, bounds_bar, dtype),
        rank_change=jnp.mean(jnp.abs(ranks_obs - ranks_bar)),
    )
    if y is None:
        nan = jnp.full((), math.nan, dtype)
        labelled = {f: nan for f in LABEL_FIELDS}
        labelled["risk_cvar"] = jnp.full((len(alphas),), math.nan, dtype)
    else:
        losses = losses_kn(x, y)  # (K, n)
        labelled = dict(
            risk_orig=jnp.mean(binary_bce(p_obs, y)),
            risk_cm=jnp.mean(binary_bce(p_bar, y)),
            risk_ie=jnp.mean(q @ losses),
            risk_cvar=cvar_risks_kn(losses, q, alphas, uniform=uniform),
            risk_wc=jnp.mean(jnp.max(losses, axis=0)),
        )
        for suffix, p in (("orig", p_obs), ("cm", p_bar)):
            count, sum_p, sum_y = _bins(p, y, n_bins)
            gap = jnp.abs(sum_y - sum_p)
            labelled[f"brier_{suffix}"] = _brier(p, y)
            labelled[f"ece_{suffix}"] = jnp.sum(gap) / p.shape[0]
            labelled[f"mce_{suffix}"] = jnp.max(jnp.where(count > 0, gap / jnp.maximum(count, 1), 0))
            labelled[f"smece_{suffix}"] = _smooth_ece(p, y)[0]
    return MarginalisationReport(**labelled, **stability, alphas=alphas)
