"""Counterfactual unfairness of the fair predictor when the errors are correlated by P
(paper 001, definitions §3).

For a correlation matrix P: fit Model B (w*, σ) by :func:`fit_model_b`, take its residuals
δ̂, propagate each unit's counterfactual ``a → a'`` through the graph in topological order
(``x'_j = φ_j(a', x'_pa)ᵀ w*_j + δ̂_j``), read the counterfactual through Model A's eyes
(``ε̂' = x' − Φ' w†``) and average ``(f_θ(ε̂) − f_θ(ε̂'))²``. A categorical A averages over every
other level; binary A has one. Every step is written for one unit and lifted with vmap; CFU is
differentiable in P (Model B's σ solve implicitly).
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from cfjax import _checks
from cfjax.sensitivity.correlation import check_correlation
from cfjax.sensitivity.fitting import FairModel, _embed
from cfjax.sensitivity.linear import ModelB, _layout, fit_model_b

_CHUNK = 8192  # units per vmapped chunk in cfu_of

__all__ = [
    "counterfactual_features",
    "cfu",
    "cfu_of",
    "cfu_grid",
    "bivariate_correlation",
    "cfu_at_zero_correlation",
    "negligible_cfu",
]


def _unit_counterfactual(
    model: FairModel, a_cf: jax.Array, x: jax.Array, delta: jax.Array, w_star: list[jax.Array]
) -> tuple[jax.Array, jax.Array]:
    """One unit's counterfactual features under Model B and their Model A residuals.

    ``a_cf (q,)``: A's counterfactual code; ``x (m,)``: factual features; ``delta (m,)``:
    Model B residuals. Returns ``(x' (m,), ε̂' (m,))``. Fair features (path-specific variant)
    keep their factual value.
    """
    g = model.graph
    w_dag = model.design.blocks(model.model_a.w)
    x_cf = [x[j] for j in range(g.m)]  # scalars, not an array updated in place: no scatters
    eps_cf = []
    for j in range(g.m):  # topological order: the graph's static structure
        if g.fair_mask[j]:
            eps_cf.append(x[j])
            continue
        phi = _embed(g, model.degrees, j, a_cf, x_cf)
        x_cf[j] = phi @ w_star[j] + delta[j]
        eps_cf.append(x_cf[j] - phi @ w_dag[j])
    return jnp.stack(x_cf), jnp.stack(eps_cf)


def counterfactual_features(
    model: FairModel, model_b: ModelB, level: Any
) -> tuple[jax.Array, jax.Array]:
    """Every unit's counterfactual features had A been ``level`` (an index into the data's
    codes, scalar or ``(n,)``), under Model B: ``(x' (n, m), ε̂' (n, m))``."""
    data = model.data
    level = jnp.broadcast_to(jnp.asarray(level, jnp.int32), (data.n,))
    w_star = model.design.blocks(model_b.w)
    return jax.vmap(lambda c, x, d: _unit_counterfactual(model, c, x, d, w_star))(
        data.codes[level], data.X, model_b.residuals
    )


def cfu_of(model: FairModel, model_b: ModelB, units: jax.Array | None = None) -> jax.Array:
    """CFU given a fitted Model B: ``mean_i mean_{a' ≠ a_i} (f_θ(ε̂_i) − f_θ(ε̂'_i))²``, over all
    units or the index array ``units`` (a minibatch). Over all units it is computed on the
    model's distinct rows (A, x), weighted by their counts (``FairModel.distinct``): the same
    mean, since every term depends on a unit's A and x only; on weighted rows (a bootstrap
    resample's, ``Design.weight``) the mean is weighted. For a baseline
    (:meth:`~cfjax.sensitivity.FairModel.scoring`) the same mean of ``(f_b(a_i, x_i) −
    f_b(a', x'_i))²`` (the blind baseline sees x only)."""
    data = model.data
    c = data.codes.shape[0]
    w_star = model.design.blocks(model_b.w)
    group, X, F, fair_pred = data.group, data.X, model.design.F, model.scored_pred
    count = None if units is not None else model.design.weight  # rows standing for many units
    if units is None and model.distinct is not None:  # the distinct rows, weighted: the same mean
        units, count = model.distinct.index, model.distinct.count
    if units is not None:  # only these units' residuals are computed
        group, X, F, fair_pred = group[units], X[units], F[units], fair_pred[units]
    delta = X - F @ _layout(model.design, model_b.w)

    def unit(g, x, d, f):
        def world(level):
            x_cf, eps_cf = _unit_counterfactual(model, data.codes[level], x, d, w_star)
            return (f - model.predict(data.codes[level], x_cf, eps_cf)) ** 2

        others = (g + 1 + jnp.arange(c - 1, dtype=g.dtype)) % c  # every level but the unit's own
        return jnp.mean(jax.vmap(world)(others))

    # Units in chunks (vmapped within, scanned across) and rematerialised for gradients:
    # memory stays bounded however many units and however many runs are vmapped over this.
    if group.shape[0] <= _CHUNK:
        per_unit = jax.vmap(unit)(group, X, delta, fair_pred)
    else:
        per_unit = jax.lax.map(
            lambda args: jax.checkpoint(unit)(*args),
            (group, X, delta, fair_pred),
            batch_size=_CHUNK,
        )
    return jnp.mean(per_unit) if count is None else jnp.sum(count * per_unit) / jnp.sum(count)


def cfu(
    model: FairModel,
    P: Any,
    *,
    units: jax.Array | None = None,
    log_sigma0: Any = None,
    newton_steps: int = 30,
) -> jax.Array:
    """Counterfactual unfairness of the fair predictor if the errors had correlation ``P``
    (definitions §3). Traceable and differentiable in P; a concrete P is validated first
    (symmetric, unit diagonal, positive definite) — a non-PD P raises instead of being used.
    Called eagerly, a Model B fit that is not finite warns (:class:`~cfjax.sensitivity.ConvergenceWarning`, naming
    λ and the feature) instead of returning NaN in silence."""
    if _checks.is_concrete(P):
        check_correlation(P, min_eig=1e-12)
        _check_size(model, np.shape(P))
    P = jnp.asarray(P, model.data.X.dtype)
    model_b = fit_model_b(
        model.design,
        P,
        model.lam,
        log_sigma0=log_sigma0,
        newton_steps=newton_steps,
        names=model.graph.features,
    )
    return cfu_of(model, model_b, units)


_cfu_of = jax.jit(cfu_of)


def cfu_at_zero_correlation(model: FairModel) -> float:
    """The CFU at zero error correlation, ``P = I``: the floor of every CFU curve of ``model``
    (every budget contains I, so no worst case is below it), as a float.

    Without a ridge penalty (λ = 0) Model B at P = I is Model A and this is 0 (to rounding); so
    it is with ``FitConfig(model_a="ml")``, whose Model A is Model B at P = I. With the paper's
    Model A and λ > 0 it is not: the ridge shrinks each equation by its penalty λ against the
    precision 1/σ², and Model B's σ at P = I (the profile-likelihood optimum) is not Model A's
    (the ridge residuals' spread), so the two fits differ (w* ≠ w†) and a change of A moves the
    fair predictor. That floor is the penalty's shrinkage artefact, not unfairness caused by
    confounding (definitions §3.5): read a curve as its rise above it.
    :func:`~cfjax.sensitivity.worst_case` reports it beside its curve and warns
    (:class:`~cfjax.sensitivity.ShrinkageWarning`) where it is more than a tenth of the
    curve's range."""
    eye = jnp.eye(model.graph.m, dtype=model.data.X.dtype)
    model_b = fit_model_b(model.design, eye, model.lam, names=model.graph.features)
    return float(_cfu_of(model, model_b))


def negligible_cfu(model: FairModel) -> float:
    """A CFU at or below which a value is rounding, not a number: the float's machine epsilon
    times the mean squared fair prediction (CFU is a mean squared change of that prediction)."""
    pred = np.asarray(model.fair_pred)
    return float(np.finfo(pred.dtype).eps * np.mean(pred.astype(np.float64) ** 2))


def bivariate_correlation(p: Any, dtype=None) -> jax.Array:
    """``[[1, p], [p, 1]]``."""
    p = jnp.asarray(p, dtype)
    one = jnp.ones_like(p)
    return jnp.stack([jnp.stack([one, p]), jnp.stack([p, one])])


def cfu_grid(
    model: FairModel, ps: Any, *, min_eig: float = 1e-3, newton_steps: int = 30
) -> jax.Array:
    """The bivariate tool: CFU at ``P = [[1, p], [p, 1]]`` for every p of the grid ``ps``, in
    one vmapped call. Points with ``1 − |p| < min_eig`` (P too close to singular, where CFU is
    not defined with a margin) come back as NaN, never silently evaluated."""
    if model.graph.m != 2:
        _checks.fail(
            "model",
            "two confounded features for the bivariate grid (use worst_case otherwise)",
            f"{model.graph.m} features",
        )
    ps = jnp.asarray(ps, model.data.X.dtype)
    if ps.ndim != 1:
        _checks.fail("ps", "a 1-d grid of correlations", f"shape {ps.shape}")
    return _grid(model, ps, min_eig, newton_steps)


@functools.partial(jax.jit, static_argnums=(2, 3))
def _grid(model, ps, min_eig, newton_steps):
    ok = 1.0 - jnp.abs(ps) >= min_eig
    safe = jnp.where(ok, ps, 0.0)

    def one(p):
        P = bivariate_correlation(p, model.data.X.dtype)
        return cfu_of(model, fit_model_b(model.design, P, model.lam, newton_steps=newton_steps))

    return jnp.where(ok, jax.vmap(one)(safe), jnp.nan)


def _check_size(model: FairModel, shape: tuple[int, ...]) -> None:
    m = model.graph.m
    if shape != (m, m):
        _checks.fail(
            "P",
            f"a {m} x {m} correlation matrix over {list(model.graph.features)}",
            f"shape {shape}",
        )
