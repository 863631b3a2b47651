"""The fitted working model of a counterfactual-fairness problem (paper 001, definitions §3):
Model A, the counterfactually fair predictor on its residuals and the two baselines, their
degrees and λ chosen by cross-validation.

Data flow: :class:`~cfjax.sensitivity.FairnessGraph` + :class:`~cfjax.sensitivity.FairnessData`
(:mod:`cfjax.sensitivity.problem`) → :func:`fit` (its options a :class:`FitConfig`) →
:class:`FairModel` (a pytree; every later computation — the CFU of a correlation matrix, the
worst-case search — is a pure function of it). :func:`embeddings` are the equations' polynomial
embeddings of their parents, :func:`predictor_inputs` the fair predictor's inputs.
"""

from __future__ import annotations

import dataclasses
import functools
import warnings
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from cfjax import _checks, _deprecations
from cfjax._core import training as _training
from cfjax._results import headline
from cfjax._results import strict_plain as plain
from cfjax.sensitivity import ridge
from cfjax.sensitivity.diagnostics import ConvergenceWarning
from cfjax.sensitivity.linear import (
    Design,
    ModelA,
    design,
    fit_model_a,
    fit_model_b,
    polynomial_features,
)
from cfjax.sensitivity.problem import DistinctUnits, FairnessData, FairnessGraph, distinct_units
from cfjax.typing import KeyLike

__all__ = [
    "FitConfig",
    "FairModel",
    "fit",
    "embeddings",
    "predictor_inputs",
    "PREDICTORS",
]


PREDICTORS = ("fair", "unconstrained", "blind")
"""The predictors whose counterfactual unfairness cfjax scores: the counterfactually fair one
(a ridge on Model A's residuals), the unconstrained baseline (a ridge on A and X) and the blind
one (a ridge on X)."""


@dataclasses.dataclass(frozen=True)
class FitConfig:
    """Model selection of paper 001, the options of :func:`fit` (defaults: the paper's
    law-school recipe); frozen and hashable.

    ``degrees``: candidate polynomial degrees per equation; ``lambdas``: candidate ridge
    penalties; ``shared_lambda``: one λ for all equations (the paper) or one per equation;
    ``lam``: the penalty of Models A and B fixed instead of chosen (a λ sweep; 0 = unpenalised,
    solved by pseudo-inverse): the degrees are still chosen by CV over ``lambdas`` unless
    ``equation_degrees`` fixes them too; ``predictor_*``:
    the same for the fair predictor and the baselines; ``folds``, ``shuffle``, ``key``: K-fold
    CV on the rows in order (the paper, scikit-learn's default) or shuffled, the folds drawn
    with ``key`` (an int seed or a PRNG key). ``model_a``:
    ``"paper"`` (definitions §3: ridge, then one GLS refit with the ridge residuals' variances) or
    ``"ml"`` (the independent-errors maximum-likelihood fit, i.e. Model B at P = I). With
    ``"paper"`` and λ > 0, Model B at P = I differs from Model A (its σ is the profile-likelihood
    optimum, and the ridge shrinks by λ against the precision 1/σ²), so CFU(I) is not zero: the
    ridge floor (:func:`~cfjax.sensitivity.cfu_at_zero_correlation`), about 1e-8 of CFU at
    p = 0.5 in the tests' small-λ fits but a large part of the curve at large λ; at λ = 0, and
    with ``"ml"`` at any λ, CFU(I) = 0 up to float error. ``cv_score``: what CV maximises — ``"r2"`` (the
    paper's recipe: scikit-learn's ``GridSearchCV(cv=5)`` with its default scoring, held-out R²
    averaged over folds; a shared-λ Model A is one estimator, scored by the R² of all equations'
    held-out targets stacked together, the fair predictor and the baselines by the R² of their own
    target) or ``"mse"`` (held-out mean squared error averaged over folds, minimised; stacked the
    same way, which for a shared λ is the equations' summed MSE up to the factor 1/m).
    """

    degrees: tuple[int, ...] = (1, 2, 3, 4)
    lambdas: tuple[float, ...] = tuple(float(v) for v in np.logspace(-4, 4, 10))
    shared_lambda: bool = True
    lam: float | None = None
    equation_degrees: tuple[int, ...] | None = None
    predictor_degrees: tuple[int, ...] = (1, 2, 3, 4)
    predictor_lambdas: tuple[float, ...] | None = None  # None: the same as `lambdas`
    folds: int = 5
    shuffle: bool = False
    key: KeyLike = 0
    model_a: str = "paper"
    cv_score: str = "r2"

    def __post_init__(self):
        ridge.check_score("config.cv_score", self.cv_score)

    def replace(self, **changes: Any) -> FitConfig:
        """A copy with ``changes`` (field name → value)."""
        return dataclasses.replace(self, **changes)


@struct.dataclass
class FairModel:
    """The fitted working model: everything CFU needs, as one pytree.

    ``lam``: the ridge penalty of Models A and B (scalar or per equation); ``model_a``: Model A
    (``w`` is w†, ``residuals`` ε̂); ``theta``: the fair predictor's coefficients on
    :func:`predictor_inputs`; ``fair_pred``: its predictions ``(n,)``; ``baselines``: name →
    predictions of the unconstrained (A, X) and blind (X) predictors; ``baseline_unfairness``:
    name → ``mean_i (f_θ(ε̂_i) − ŷ^b_i)²`` (floats); ``selection``: the CV choices and tables;
    ``distinct``: the data's distinct rows (A, x) and their counts
    (:func:`~cfjax.sensitivity.problem.distinct_units`; None when every row is distinct, and in a
    bootstrap's refits), over which CFU's mean is taken, weighted, with the same value as over
    all units. ``predictor_index``: the scored predictor's index in :data:`PREDICTORS` (an int32
    leaf, so one compiled search serves every predictor; :meth:`scoring` sets it, ``scored``
    names it).

    **Baseline unfairness and CFU measure different things.** Both are mean squared
    differences of predictions, in squared units of the target y, but:

    - ``baseline_unfairness[name]`` compares two *different predictors* on the *factual* data:
      the fair predictor f_θ(ε̂_i) against a baseline that sees A and the features
      (``"unconstrained"``, a ridge on (A, X)) or the features A causes (``"blind"``, a ridge
      on X). It is the squared gap between them, mostly the part of the baseline's prediction
      carried by A, directly or through its descendants, which the fair predictor removes. It
      does not depend on any error correlation P.
    - CFU (:func:`~cfjax.sensitivity.cfu`, :func:`~cfjax.sensitivity.worst_case`) compares
      *one predictor*, the fair one, with *itself* in two worlds of each unit: its factual A
      and a counterfactual A, the counterfactual features propagated under Model B, whose
      errors are correlated by P (unmeasured confounding). If Model A were right (P = I), CFU
      would be 0 without a ridge penalty; at λ > 0 it is the ridge floor there
      (:func:`~cfjax.sensitivity.cfu_at_zero_correlation`, see :class:`FitConfig`), and it grows
      only as far as confounding makes Model A's residuals ε̂ leak A.

    So the two differ by orders of magnitude as a rule: on :func:`~cfjax.sensitivity.synthetic`
    data (5,000 units, the paper's recipe) the baselines' values are near 1.9 while the
    worst-case CFU is about 1e-9 at budget 0.5 and below 1e-7 up to 0.92. A baseline of
    1.78 beside a CFU of 8e-5 reads: the blind predictor differs from the fair one by about
    √1.78 ≈ 1.3 units of y (root mean square), while under that confounding a change of A moves
    the fair predictor's own prediction by about √8e-5 ≈ 0.009 units of y. The baseline is the
    reference level of the sensitivity curve (:func:`~cfjax.sensitivity.inverse_budget`: how
    much confounding would make the fair predictor as unfair as a baseline); a curve that stays
    far below it means that level is not reached within the budgets searched.

    :meth:`to_dict` gives the fitted choices and coefficients as plain Python (no per-unit
    arrays); the ``repr`` is one short line.
    """

    graph: FairnessGraph = struct.field(pytree_node=False)
    degrees: tuple[int, ...] = struct.field(pytree_node=False)
    predictor_degree: int = struct.field(pytree_node=False)
    data: FairnessData
    design: Design
    lam: float | tuple = struct.field(pytree_node=False)  # static: λ = 0 picks the pseudo-inverse
    model_a: ModelA
    theta: jax.Array
    fair_pred: jax.Array
    baselines: dict
    baseline_unfairness: dict
    selection: dict  # CV choices and tables (leaves; never used inside compiled code)
    baseline_theta: dict = None  # type: ignore[assignment]  # name -> coefficients on the baseline's polynomial inputs
    baseline_degrees: tuple = struct.field(pytree_node=False, default=())  # ((name, degree), ...)
    # The scored predictor (:meth:`scoring`) as its index in PREDICTORS, an int32 leaf rather than
    # static structure: every predictor's CFU then runs in the same compiled programs (a search
    # compiled for the fair predictor serves the baselines). None reads as the fair predictor.
    predictor_index: jax.Array | None = None
    distinct: DistinctUnits | None = None  # the distinct rows (A, x): CFU's mean is taken over them

    if TYPE_CHECKING:  # flax.struct adds it

        def replace(self, **changes: Any) -> FairModel: ...

    def scoring(self, predictor: str) -> FairModel:
        """The same model with CFU scored on ``predictor`` (one of :data:`PREDICTORS`):
        :func:`~cfjax.sensitivity.cfu`, :func:`~cfjax.sensitivity.worst_case` and everything
        built on them then measure how much that predictor's output moves between each unit's
        factual and counterfactual worlds. ``"fair"`` (the default) is paper 001's CFU; the
        baselines' CFU under the same Model B counterfactuals shows what the fair predictor buys
        at each budget (the unconstrained predictor sees A itself, so its CFU stays large at
        every correlation).

        Example:
          >>> PREDICTORS
          ('fair', 'unconstrained', 'blind')
        """
        if predictor not in PREDICTORS:
            _checks.fail("predictor", f"one of {list(PREDICTORS)}", repr(predictor))
        if predictor != "fair" and predictor not in dict(self.baseline_degrees):
            _checks.fail("predictor", "a baseline this model was fitted with", repr(predictor))
        return self.replace(predictor_index=jnp.asarray(PREDICTORS.index(predictor), jnp.int32))

    @property
    def scored(self) -> str:
        """The scored predictor's name (one of :data:`PREDICTORS`; :meth:`scoring` sets it)."""
        return "fair" if self.predictor_index is None else PREDICTORS[int(self.predictor_index)]

    def predict(self, a: jax.Array, x: jax.Array, residuals: jax.Array) -> jax.Array:
        """One unit's prediction by the scored predictor (:meth:`scoring`) from A's code
        ``a (q,)``, its features ``x (m,)`` and their Model A residuals ``residuals (m,)``;
        lift over units with ``jax.vmap``. Traceable in the scored predictor too: inside a
        program whose input the model is, a ``lax.switch`` over :data:`PREDICTORS`."""

        def fair() -> jax.Array:
            inputs = predictor_inputs(self.graph, residuals, x)
            return polynomial_features(inputs, self.predictor_degree) @ self.theta

        def baseline(name: str) -> jax.Array:
            z = jnp.concatenate([a, x]) if name == "unconstrained" else x
            degree = dict(self.baseline_degrees)[name]
            return polynomial_features(z, degree) @ self.baseline_theta[name]

        if self.predictor_index is None or _checks.is_concrete(self.predictor_index):
            name = self.scored  # known: no branch to trace (an eager lax.switch compiles per call)
            return fair() if name == "fair" else baseline(name)
        fitted = dict(self.baseline_degrees)
        branches = [fair] + [
            functools.partial(baseline, name) if name in fitted else fair for name in PREDICTORS[1:]
        ]  # a baseline the model lacks cannot be scored (scoring refuses it)
        return jax.lax.switch(self.predictor_index, branches)

    @property
    def scored_pred(self) -> jax.Array:
        """The scored predictor's factual predictions, ``(n,)``."""
        if self.predictor_index is None or _checks.is_concrete(self.predictor_index):
            return self.fair_pred if self.scored == "fair" else self.baselines[self.scored]
        preds = [self.fair_pred] + [
            self.baselines.get(name, self.fair_pred) for name in PREDICTORS[1:]
        ]
        return jnp.stack(preds)[self.predictor_index]

    def to_dict(self) -> dict[str, Any]:
        """The fit as JSON-serialisable plain Python: the graph (``features``, ``parents``,
        ``sensitive``, ``fair``), ``n``, the chosen ``degrees``, ``lam`` and
        ``predictor_degree``, Model A's ``sigma`` and coefficients ``w`` (one list per
        equation), the fair predictor's ``theta``, ``baseline_unfairness`` and ``selection``
        (CV tables as nested lists). Per-unit arrays (data, residuals, predictions) are left
        out; non-finite numbers become None."""
        g = self.graph
        return {
            "features": list(g.features),
            "parents": [list(p) for p in g.parents],
            "sensitive": g.sensitive,
            "fair": list(g.fair),
            "n": int(self.data.X.shape[0]),
            "degrees": list(self.degrees),
            "lam": plain(self.lam),
            "predictor_degree": int(self.predictor_degree),
            "sigma": plain(self.model_a.sigma),
            "w": [plain(w) for w in self.design.blocks(self.model_a.w)],
            "theta": plain(self.theta),
            "baseline_unfairness": {k: plain(v) for k, v in self.baseline_unfairness.items()},
            "selection": plain(self.selection),
        }

    def __repr__(self) -> str:
        base = ", ".join(f"{k}={headline(v)}" for k, v in self.baseline_unfairness.items())
        lam = (
            headline(self.lam)
            if not isinstance(self.lam, tuple)
            else "(" + ", ".join(map(headline, self.lam)) + ")"
        )
        return (
            f"FairModel(n={self.data.X.shape[0]}, features={list(self.graph.features)}, "
            f"degrees={self.degrees}, lam={lam}, predictor_degree={self.predictor_degree}, "
            f"baseline_unfairness={{{base}}})"
        )


def embeddings(
    graph: FairnessGraph, degrees: Sequence[int], a: jax.Array, X: jax.Array
) -> list[jax.Array]:
    """Each equation's polynomial embedding of its parents for every unit: ``[(n, F_j)]``.
    ``a (n, q)`` are A's codes."""
    return _embeddings(graph, tuple(int(d) for d in degrees), a, X)


@functools.partial(jax.jit, static_argnums=(0, 1))
def _embeddings(
    graph: FairnessGraph, degrees: tuple[int, ...], a: jax.Array, X: jax.Array
) -> list[jax.Array]:
    """:func:`embeddings` as one compiled program per graph, degrees and shapes."""
    return [
        jax.vmap(lambda ai, xi, j=j: _embed(graph, degrees, j, ai, xi))(a, X)
        for j in range(graph.m)
    ]


def _embed(
    graph: FairnessGraph,
    degrees: Sequence[int],
    j: int,
    a: jax.Array,
    x: jax.Array | Sequence[jax.Array],
) -> jax.Array:
    """One unit's embedding ``φ_j`` of feature j's parents (A's codes and parent features)."""
    parts = []
    for p in graph.parents[j]:
        parts.append(a if p == graph.sensitive else x[graph.index(p)][None])
    z = jnp.concatenate(parts) if parts else jnp.zeros((0,), a.dtype)
    return polynomial_features(z, degrees[j])


def predictor_inputs(graph: FairnessGraph, residuals: jax.Array, X: jax.Array) -> jax.Array:
    """The fair predictor's inputs: the residual ε̂_j of every feature, except fair features
    (path-specific variant), which enter as themselves. Shape ``(n, m)``."""
    mask = jnp.asarray(graph.fair_mask)
    return jnp.where(mask, X, residuals)


def _fold_fit(old: dict[str, Any], kwargs: dict[str, Any]) -> str:
    """:func:`fit`'s old keyword ``settings`` into ``config``."""
    unknown = [k for k in old if k != "settings"]
    if unknown:
        raise TypeError(f"fit() got an unexpected keyword argument {unknown[0]!r}")
    kwargs["config"] = old["settings"]
    return "config="


@_training.legacy_keywords(_fold_fit)
def fit(graph: FairnessGraph, data: FairnessData, config: FitConfig = FitConfig()) -> FairModel:  # noqa: B008
    """Select degrees and λ by CV, fit Model A, the fair predictor and the two baselines.

    With a shared λ the equations are one estimator, as in the paper's code: CV searches the
    grid λ × one degree per equation, scoring each candidate on all equations' held-out targets
    together (``config.cv_score``: their stacked R², or their stacked MSE). That score is a
    sum over equations per fold, so for each λ every equation takes its own best degree, and the
    best λ follows (ties: the first in grid order, λ outermost, as ``GridSearchCV``). With
    ``shared_lambda=False`` each equation picks its degree and λ on its own target. Model A
    (ridge, then GLS with the residual variances) uses that λ; Model B later uses the same. The
    fair predictor is a polynomial ridge on :func:`predictor_inputs`; the unconstrained baseline
    on (A, X), the blind one on X, each with degree and penalty by the same CV on its own target.
    A baseline's unfairness is its mean squared difference from the fair predictor on the
    factual data, ``mean_i (f_θ(ε̂_i) − ŷ^b_i)²``, in squared units of y: the gap between two
    predictors, not a counterfactual quantity like CFU, which compares the fair predictor with
    itself across a unit's factual and counterfactual A under confounding and is typically
    orders of magnitude smaller (see :class:`FairModel`).

    ``selection`` holds the choices and the CV tables: ``equation_cv (m, degrees, lambdas)``,
    each equation's own CV score; ``lambda_cv (lambdas,)``, the shared-λ estimator's stacked
    score at each λ's best degrees (None without a shared λ); and the fair predictor's and
    baselines' degree, λ and best CV ``score`` (all in the units of ``config.cv_score``).
    """
    if not isinstance(graph, FairnessGraph):
        _checks.fail("graph", "a FairnessGraph", type(graph).__name__)
    if not isinstance(data, FairnessData):
        _checks.fail("data", "FairnessData from make_data", type(data).__name__)
    if data.X.shape[1] != graph.m:
        _checks.fail(
            "data.X",
            f"{graph.m} columns, one per feature {list(graph.features)}",
            f"{data.X.shape[1]}",
        )
    if data.names is not None and tuple(data.names) != graph.features:
        same = sorted(data.names) == sorted(graph.features)
        _checks.fail(
            "data",
            f"feature columns named {list(graph.features)}, in the graph's topological order",
            f"columns {list(data.names)}"
            + (
                " (the same names in another order: reorder X's columns, "
                "or build the data with from_frame)"
                if same
                else ""
            ),
        )
    s = config
    fold = ridge.fold_ids(data.n, s.folds, s.shuffle, key=s.key)
    lambdas = ridge._check_lambdas(s.lambdas)
    a = data.a
    score = ridge.check_score("config.cv_score", s.cv_score)
    table = lambda_cv = None
    if s.equation_degrees is not None:
        if len(s.equation_degrees) != graph.m:
            _checks.fail(
                "config.equation_degrees",
                f"{graph.m} degrees, one per feature",
                repr(s.equation_degrees),
            )
        deg_choice = [
            _checks.check_positive_int("config.equation_degrees", v) for v in s.equation_degrees
        ]
        lam_choice = np.full(graph.m, np.nan)
    else:
        # Held-out sum of squared errors per equation, degree, penalty and fold: (m, degrees, L, folds).
        sse = np.stack(
            [
                np.stack(
                    [
                        ridge.fold_errors(_equation(graph, data, j, d), data.X[:, j], lambdas, fold)
                        for d in s.degrees
                    ]
                )
                for j in range(graph.m)
            ]
        )
        own = [ridge.fold_totals(data.X[:, j], fold) for j in range(graph.m)]
        table = np.stack(
            [ridge.fold_scores(sse[j], *own[j], score).mean(-1) for j in range(graph.m)]
        )
        if s.shared_lambda:
            total, count = ridge.fold_totals(data.X, fold)  # all equations' targets stacked
            # Stacked score per fold = 1 − Σ_j SSE_j / SS_tot (R²) or Σ_j SSE_j / count (MSE): each
            # equation's share, averaged over folds, is minimised by its own degree.
            with np.errstate(divide="ignore", invalid="ignore"):
                share = (sse / (total if score == "r2" else count)).mean(-1)  # (m, degrees, L)
            best_d = np.stack(
                [
                    [ridge.best_index(share[j, :, k], "mse")[0] for k in range(lambdas.size)]
                    for j in range(graph.m)
                ]
            )  # (m, L)
            stacked = sum(
                sse[j, best_d[j], np.arange(lambdas.size)] for j in range(graph.m)
            )  # (L, folds)
            lambda_cv = ridge.fold_scores(stacked, total, count, score).mean(-1)
            k = ridge.best_index(lambda_cv, score)[0]
            lam_idx = np.full(graph.m, k)
            deg_idx = best_d[:, k]
        else:
            deg_idx, lam_idx = np.array(
                [ridge.best_index(table[j], score) for j in range(graph.m)]
            ).T
        lam_choice = lambdas[lam_idx]
        deg_choice = [s.degrees[i] for i in deg_idx]
    if s.lam is not None:
        if not (np.isfinite(s.lam) and s.lam >= 0):
            _checks.fail("config.lam", "a non-negative penalty", repr(s.lam))
        lam_choice = np.full(graph.m, float(s.lam))
    elif np.isnan(lam_choice).any():
        _checks.fail("config.lam", "a penalty when equation_degrees are fixed", "None")
    degrees = tuple(int(d) for d in deg_choice)
    lam = (
        float(lam_choice[0])
        if np.all(lam_choice == lam_choice[0])
        else tuple(float(v) for v in lam_choice)
    )
    d = design(embeddings(graph, degrees, a, data.X), data.X)
    lam_arg = lam if isinstance(lam, float) else jnp.asarray(lam, data.X.dtype)
    if s.model_a not in ("paper", "ml"):
        _checks.fail("config.model_a", "'paper' or 'ml'", repr(s.model_a))
    model_a = fit_model_a(d, lam_arg)
    if s.model_a == "ml":
        b = fit_model_b(
            d, jnp.eye(graph.m, dtype=d.G.dtype), lam_arg, newton_steps=50, names=graph.features
        )
        model_a = ModelA(model_a.w_ridge, b.sigma, b.w, b.residuals)
    else:
        _warn_if_model_a_not_finite(graph, d, model_a, lam)
    p_lambdas = s.predictor_lambdas if s.predictor_lambdas is not None else s.lambdas
    cv: dict[str, Any] = dict(
        degrees=s.predictor_degrees,
        lambdas=p_lambdas,
        folds=s.folds,
        shuffle=s.shuffle,
        key=s.key,
        score=score,
    )
    Z = predictor_inputs(graph, model_a.residuals, data.X)
    fair = ridge.ridge_cv(Z, data.y, **cv)
    fair_pred = ridge.polynomial_predict(Z, fair.degree, fair.theta)
    baselines, unfairness, chosen, thetas, b_degrees = {}, {}, {}, {}, []
    for name, inputs in (
        ("unconstrained", jnp.concatenate([a, data.X], axis=1)),
        ("blind", data.X),
    ):
        base = ridge.ridge_cv(inputs, data.y, **cv)
        baselines[name] = ridge.polynomial_predict(inputs, base.degree, base.theta)
        thetas[name] = base.theta
        b_degrees.append((name, int(base.degree)))
        unfairness[name] = float(jnp.mean((fair_pred - baselines[name]) ** 2))
        chosen[name] = _choice(base)
    selection = {
        "degrees": degrees,
        "lam": lam_choice.tolist(),
        "equation_cv": table,
        "lambda_cv": lambda_cv,
        "predictor": _choice(fair),
        "baselines": chosen,
    }
    return FairModel(
        graph,
        degrees,
        fair.degree,
        data,
        d,
        lam,
        model_a,
        fair.theta,
        fair_pred,
        baselines,
        unfairness,
        selection,
        thetas,
        tuple(b_degrees),
        jnp.asarray(0, jnp.int32),
        distinct=distinct_units(data),
    )


def _warn_if_model_a_not_finite(graph: FairnessGraph, d: Design, model_a: ModelA, lam: Any) -> None:
    """:class:`ConvergenceWarning` naming λ and each feature whose Model A fit is not finite."""
    sigma = np.asarray(model_a.sigma)
    blocks = [np.asarray(w) for w in d.blocks(model_a.w)]
    bad = [
        j for j in range(graph.m) if not (np.isfinite(sigma[j]) and np.isfinite(blocks[j]).all())
    ]
    if not bad:
        return
    lam_text = (
        headline(lam) if not isinstance(lam, tuple) else "(" + ", ".join(map(headline, lam)) + ")"
    )
    X, F = np.asarray(d.X, np.float64), np.asarray(d.F, np.float64)
    start = np.cumsum((0,) + d.sizes)
    ridge_w = np.asarray(model_a.w_ridge, np.float64)
    spread = [
        np.var(X[:, j] - F[:, start[j] : start[j + 1]] @ ridge_w[start[j] : start[j + 1]])
        / max(float(np.var(X[:, j])), 1e-300)
        for j in bad
    ]
    why = (
        "its ridge residuals are 0 to rounding (the fit interpolates it: sigma = 0) and the GLS refit divides by "
        "their variance"
        if all(v <= 1e-10 for v in spread)
        else "its residual variance is not finite"
    )
    warnings.warn(
        f"fit: Model A at lambda = {lam_text} is not finite for {', '.join(repr(graph.features[j]) for j in bad)}"
        f" (sigma {', '.join(headline(sigma[j]) for j in bad)}): {why}; every CFU of this model is NaN "
        "(a larger lambda or a lower degree avoids it)",
        ConvergenceWarning,
        stacklevel=3,
    )


def _choice(fit: ridge.RidgeFit) -> dict:
    """A CV-chosen ridge's degree, penalty and best mean CV score."""
    return {
        "degree": fit.degree,
        "lam": fit.lam,
        "score": float(fit.scores[ridge.best_index(fit.scores, fit.score)]),
    }


def _equation(graph: FairnessGraph, data: FairnessData, j: int, degree: int) -> jax.Array:
    degrees = [degree] * graph.m
    return jax.vmap(lambda ai, xi: _embed(graph, degrees, j, ai, xi))(data.a, data.X)


#: The old name of :class:`FitConfig`, for one release.
_DEPRECATED = {"Settings": ("cfjax.sensitivity.FitConfig", FitConfig)}
__getattr__ = _deprecations.getattr_for(__name__, _DEPRECATED)
