"""The whole sensitivity analysis of one fairness problem, as ``cfjax sensitivity`` runs it: the
working model (:func:`~cfjax.sensitivity.fit`), every predictor's worst-case CFU over the budgets
(:func:`~cfjax.sensitivity.worst_case`), the inverse question for the blind baseline's unfairness
(:func:`~cfjax.sensitivity.inverse_budget`), a ridge-penalty sweep, the benchmarks
(:func:`~cfjax.sensitivity.benchmarks`), bootstrap intervals
(:func:`~cfjax.sensitivity.bootstrap`) and a CFU surface (:func:`~cfjax.sensitivity.cfu_surface`).

:func:`analyse` returns an :class:`Analysis`: its ``to_dict()`` is plain Python for a JSON file,
:meth:`Analysis.report_markdown` the report (:mod:`cfjax.sensitivity.report`) and
:meth:`Analysis.figures` the curve and the contour.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from cfjax._results import plain
from cfjax.sensitivity.report import _fmt, report_markdown
from cfjax.typing import KeyLike, MeshLike

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from cfjax.sensitivity.benchmarks import Benchmarks
    from cfjax.sensitivity.bootstrap import Intervals
    from cfjax.sensitivity.contour import Surface
    from cfjax.sensitivity.datasets import Problem
    from cfjax.sensitivity.fitting import FairModel, FitConfig
    from cfjax.sensitivity.search import WorstCase

__all__ = [
    "Analysis",
    "analyse",
    "fit_config",
    "search_options",
    "lambda_sweep",
    "SWEEP_LAMBDAS",
    "QUICK_SWEEP_LAMBDAS",
    "INTERPOLATES",
]

#: The λ grid of the sweep (the CV choice is added), and its reduced form with ``quick``.
SWEEP_LAMBDAS = (0.0, 1e-4, 1e-2, 1.0, 1e2, 1e4)
QUICK_SWEEP_LAMBDAS = (0.0, 1e-2, 1e2)
#: A feature whose Model A residual standard deviation is at most this fraction of its own is
#: fitted exactly (up to rounding): the fit interpolates it.
INTERPOLATES = 1e-6


def fit_config(quick: bool) -> FitConfig:
    """The model selection of the analysis: the paper's recipe, or with ``quick`` quadratic
    equations and predictor, λ by CV over three values."""
    from cfjax.sensitivity.fitting import FitConfig

    if quick:
        return FitConfig(degrees=(2,), lambdas=(1e-2, 1.0, 1e2), predictor_degrees=(2,))
    return FitConfig()


def search_options(quick: bool, restarts: int) -> dict[str, Any]:
    """The fields of the :class:`~cfjax.sensitivity.SearchConfig` the analysis searches with
    (``quick``: a small search, for small data), as its ``to_dict()`` records
    them (``settings.search``): ``SearchConfig(**search_options(...))``."""
    if quick:
        return dict(restarts=restarts, steps=20, boundary_starts=2, polish=5, patience=10)
    return dict(restarts=restarts, steps=500)


def _config_dict(config: Any) -> dict[str, Any]:
    return {
        f.name: (list(v) if isinstance(v := getattr(config, f.name), tuple) else v)
        for f in dataclasses.fields(config)
    }


def lambda_sweep(
    problem: Any, config: FitConfig, model: Any, lams: Sequence[float], wc: Any
) -> list[dict[str, Any]]:
    """CFU as a function of the shared ridge penalty of Models A and B (degrees fixed at the CV
    choice): at each λ, the CFU at the worst-case correlations ``wc.P`` found at the CV choice
    (one per budget), the CFU at zero correlation (P = I, the row's floor: 0 without a penalty)
    and the baselines' unfairness.

    CFU divides by the residual standard deviations (Model A's GLS and Model B's σ): where the
    fit interpolates a feature (an unpenalised embedding with as many independent columns as
    rows), that deviation is 0 and CFU is undefined. Such a row's CFU is null and its
    ``undefined`` says why; ``undefined`` also gives the cause of any other non-finite CFU
    (null otherwise): the model (A or B) and the feature whose fit is not finite. A row's
    ``floor_dominates`` is true where its floor is more than a tenth of its CFUs' range: the
    penalty, not confounding, carries that row.

    Args:
      problem: the fairness problem (its ``graph`` and ``data``).
      config: the model selection the model was fitted with.
      model: the fitted model (its ``degrees``).
      lams: the penalties λ of the rows.
      wc: the worst case at the CV choice (its ``P`` and, when it has them, ``p_max``).

    Returns:
      One row per λ, plain Python.
    """
    from cfjax.sensitivity import linear
    from cfjax.sensitivity.cfu import cfu_at_zero_correlation, cfu_of, negligible_cfu
    from cfjax.sensitivity.diagnostics import ConvergenceWarning, floor_dominates
    from cfjax.sensitivity.fitting import fit

    X = np.asarray(problem.data.X, np.float64)
    scale = X.std(0)
    features = list(problem.graph.features)
    p_max = getattr(wc, "p_max", None)
    rows = []
    for lam in lams:
        with warnings.catch_warnings():  # a row that is not finite says why in its `undefined`
            warnings.simplefilter("ignore", ConvergenceWarning)
            m = fit(
                problem.graph,
                problem.data,
                config.replace(lam=float(lam), equation_degrees=model.degrees),
            )
            # the ridge residuals' spread, from the data (Model A's σ is NaN where rounding makes
            # the variance of residuals that are 0 slightly negative)
            ridge_w = m.design.blocks(m.model_a.w_ridge)
            start = np.cumsum((0,) + m.design.sizes)
            F = np.asarray(m.design.F, np.float64)
            ratio = np.array(
                [
                    np.std(
                        X[:, j] - F[:, start[j] : start[j + 1]] @ np.asarray(ridge_w[j], np.float64)
                    )
                    for j in range(len(features))
                ]
            ) / np.where(scale > 0, scale, 1.0)
            exact = [f for f, r in zip(features, ratio) if r <= INTERPOLATES]
            sigma_a = np.asarray(m.model_a.sigma, np.float64)
            broken = [
                f
                for j, f in enumerate(features)
                if f not in exact
                and not (np.isfinite(sigma_a[j]) and np.isfinite(np.asarray(m.model_a.w)).all())
            ]
            why, floor, dominates = None, None, False
            cfu: list[Any]
            if exact or broken:
                cfu = [None] * len(wc.P)
                why = (
                    f"undefined: the fit interpolates {', '.join(exact)} (residual standard deviation "
                    f"{_fmt(min(ratio))} of the feature's own), and CFU divides by it"
                    if exact
                    else f"not finite: Model A's fit of {', '.join(broken)} is not finite at this λ (σ "
                    f"{', '.join(_fmt(sigma_a[features.index(f)]) for f in broken)})"
                )
            else:
                fits = [
                    linear.fit_model_b(m.design, P, m.lam, names=features) for P in np.asarray(wc.P)
                ]
                cfu = plain([cfu_of(m, mb) for mb in fits], strict=True, shortest=True)
                floor = plain(cfu_at_zero_correlation(m), strict=True, shortest=True)
                if any(v is None for v in cfu):
                    why = _why_not_finite(features, fits, cfu, p_max)
                dominates = floor_dominates(
                    np.nan if floor is None else floor,
                    [np.nan if v is None else v for v in cfu],
                    negligible_cfu(m),
                )
        rows.append(
            {
                "lam": float(lam),
                "cfu_at_worst_case_P": cfu,
                "cfu_at_zero_correlation": floor,
                "floor_dominates": dominates,
                "undefined": why,
                "blind": float(m.baseline_unfairness["blind"]),
                "unconstrained": float(m.baseline_unfairness["unconstrained"]),
            }
        )
    return rows


def _why_not_finite(features: list[str], fits: list[Any], cfu: list[Any], p_max: Any) -> str:
    """The cause of a sweep row's first CFU that is not finite: the feature whose Model B fit is
    not finite (its σ solve found no finite minimum), or, with every fit finite, CFU itself."""
    for i, (mb, value) in enumerate(zip(fits, cfu)):
        if value is not None:
            continue
        at = f" at the worst-case P of p_max = {p_max[i]:.3f}" if p_max is not None else ""
        sigma = np.asarray(mb.sigma, np.float64)
        bad = [f for j, f in enumerate(features) if not np.isfinite(sigma[j])]
        if bad or not np.isfinite(np.asarray(mb.w)).all():
            shown = bad or features
            return (
                f"not finite: Model B's fit of {', '.join(shown)} is not finite at this λ{at} (σ "
                f"{', '.join(_fmt(sigma[features.index(f)]) for f in shown)}): its σ solve found no finite "
                "minimum of the profile likelihood"
            )
        return (
            f"not finite: Model A and Model B are finite at this λ{at}, but CFU is not (σ of Model B "
            f"{', '.join(_fmt(v) for v in sigma)}): extreme values in the data"
        )
    return "not finite"


@dataclasses.dataclass(frozen=True)
class Analysis:
    """Result of :func:`analyse`.

    Attributes:
      results: everything as plain Python (what :meth:`to_dict` returns): ``settings``,
        ``model``, ``worst_case`` (the fair predictor's, with ``floor_dominates``), ``inverse``,
        ``baselines``, ``lambda_sweep``, ``warnings``, ``predictors`` (the baselines' own worst
        cases), ``benchmarks``, ``intervals`` and ``contour`` (None where not computed).
      model: the fitted :class:`~cfjax.sensitivity.FairModel`.
      worst_case: predictor name → its :class:`~cfjax.sensitivity.WorstCase` (the fair one first).
      benchmarks: the :class:`~cfjax.sensitivity.Benchmarks`, or None.
      intervals: the bootstrap :class:`~cfjax.sensitivity.Intervals`, or None.
      surface: the :class:`~cfjax.sensitivity.Surface`, or None.
    """

    results: dict[str, Any]
    model: FairModel
    worst_case: dict[str, WorstCase]
    benchmarks: Benchmarks | None = None
    intervals: Intervals | None = None
    surface: Surface | None = None

    def to_dict(self) -> dict[str, Any]:
        """Everything as JSON-ready plain Python (non-finite numbers as None)."""
        return self.results

    def report_markdown(
        self, figure: bool | str | None = None, header: dict[str, Any] | None = None
    ) -> str:
        """The report (:func:`cfjax.sensitivity.report.report_markdown` of :meth:`to_dict`,
        ``header``'s entries added: ``inputs``, ``seed``, ``quick``)."""
        return report_markdown({**(header or {}), **self.results}, figure)

    def figures(self) -> tuple[dict[str, Figure], str]:
        """The figures (needs matplotlib): ``"curve"``, every predictor's worst case with the
        fair one's bootstrap band and the benchmarks marked, and ``"contour"`` with a surface;
        and the curve's caption (what to conclude from it)."""
        from cfjax.sensitivity.contour_plot import plot_contour
        from cfjax.sensitivity.plots import CurveStyle, curve_caption, plot_curve

        curves, iv, bench = self.worst_case, self.intervals, self.benchmarks
        marks = {} if bench is None else bench.marks()
        bands = (
            {}
            if iv is None
            else dict(
                low={"fair": np.asarray(iv.low["worst_case"])},
                high={"fair": np.asarray(iv.high["worst_case"])},
            )
        )
        out = {
            "curve": plot_curve(
                curves,
                benchmarks=marks or None,
                style=CurveStyle(title="Worst-case counterfactual unfairness"),
                **bands,
            )
        }
        if self.surface is not None:
            points = {} if bench is None else bench.marked_correlations()
            out["contour"] = plot_contour(
                self.surface,
                benchmarks=points or None,
                worst=curves["fair"],
                title="Counterfactual unfairness over two error correlations",
            )
        return out, curve_caption(curves, benchmarks=marks or None)


def analyse(
    problem: Problem | Any,
    *,
    key: KeyLike,
    budgets: int = 16,
    restarts: int = 4,
    quick: bool = False,
    benchmarks: Sequence[float] = (1.0, 2.0, 3.0),
    resamples: int = 200,
    contour: tuple[tuple[str, str], tuple[str, str]] | None = None,
    mesh: MeshLike = None,
    log: Callable[[str], None] | None = None,
) -> Analysis:
    """The whole sensitivity analysis of one fairness problem (``cfjax sensitivity``'s).

    Fits the working model (degrees and λ by CV), then the worst-case CFU of the fair predictor
    and of the two baselines over the budgets, the smallest budget reaching the blind
    baseline's unfairness, a λ sweep, the benchmarks, bootstrap intervals and, with
    ``contour``, CFU over two error correlations. The curve's budgets are the evenly spaced
    grid and every benchmark's budget, so that the worst case at each benchmark is on the
    curve. Run it in float64 (``jax.enable_x64``). The warnings of the library
    (:class:`~cfjax.sensitivity.ConvergenceWarning`,
    :class:`~cfjax.sensitivity.ShrinkageWarning`,
    :class:`~cfjax.sensitivity.DegenerateProblemWarning`) are collected into the result's
    ``warnings``, each message once.

    Args:
      problem: the fairness problem (its ``graph`` and ``data``; e.g. from
        :func:`~cfjax.sensitivity.from_frame`).
      key: the searches' key: a typed key, raw key data or an int seed.
      budgets: the number of evenly spaced budgets p_max in [0, 0.99].
      restarts: optimiser restarts per budget.
      quick: a reduced recipe (:func:`fit_config`, :func:`search_options`, a shorter λ sweep
        and a coarser inverse bisection and surface), for small data.
      benchmarks: the multiples k of the benchmarks (``()``: none).
      resamples: bootstrap resamples of the units (0: no intervals).
      contour: two feature pairs for a CFU surface, or None.
      mesh: the devices the searches' runs are split over (None: one).
      log: receives a line as each stage starts.

    Returns:
      An :class:`Analysis`.
    """
    import jax

    from cfjax._core.keys import as_key
    from cfjax.sensitivity import fitting as _fitting
    from cfjax.sensitivity import problem as _problem
    from cfjax.sensitivity.benchmarks import benchmarks as _benchmarks
    from cfjax.sensitivity.bootstrap import bootstrap
    from cfjax.sensitivity.cfu import negligible_cfu
    from cfjax.sensitivity.contour import cfu_surface
    from cfjax.sensitivity.diagnostics import (
        ConvergenceWarning,
        DegenerateProblemWarning,
        ShrinkageWarning,
        floor_dominates,
    )
    from cfjax.sensitivity.inverse import inverse_budget
    from cfjax.sensitivity.search import worst_case
    from cfjax.sensitivity.search_config import SearchConfig

    say = log if log is not None else (lambda message: None)
    multiples = tuple(benchmarks)
    config = fit_config(quick)
    search = search_options(quick, restarts)
    search_config = SearchConfig(**search)
    key = as_key(key, "key")
    grid = np.linspace(0.0, 0.99, budgets)
    kinds = (ConvergenceWarning, ShrinkageWarning, DegenerateProblemWarning)
    with warnings.catch_warnings(record=True) as caught:
        for kind in kinds:
            warnings.simplefilter("always", kind)
        _problem._warn_if_degenerate(problem.graph)  # a degenerate graph: in the warnings
        say(
            f"fitting the working model, the fair predictor and the baselines on {problem.data.X.shape[0]} rows "
            "(degrees and λ by cross-validation)"
        )
        model = _fitting.fit(problem.graph, problem.data, config)
        bench = None
        if multiples:
            say(
                f"benchmarks: confounders {', '.join(f'{k:g}' for k in multiples)} times as strong as each observed "
                "parent"
            )
            bench = _benchmarks(model, k=multiples)
            p_bench = np.asarray(bench.p_max)[np.asarray(bench.feasible)]
            grid = np.unique(np.concatenate([grid, p_bench[(p_bench > 0) & (p_bench < 1)]]))
        say(
            f"worst-case CFU: {grid.size} budgets × {restarts} restart(s), {search['steps']} steps each, for the fair "
            "predictor and the two baselines (the first search compiles)"
        )
        wc = worst_case(model, grid, key=key, config=search_config, mesh=mesh)
        others = {
            p: worst_case(model.scoring(p), grid, key=key, config=search_config, mesh=mesh)
            for p in _fitting.PREDICTORS
            if p != "fair"
        }
        baselines = {k: float(v) for k, v in model.baseline_unfairness.items()}
        say(
            "inverse question: the smallest budget whose worst case reaches the blind baseline's unfairness"
        )
        inv = inverse_budget(  # the fair predictor's curve is the coarse one: bisection only
            model,
            baselines["blind"],
            key=key,
            config=search_config,
            mesh=mesh,
            worst=wc,
            tol=0.1 if quick else 1e-3,
        )
        lam = model.lam if not isinstance(model.lam, tuple) else model.lam[0]
        lams = sorted({*(QUICK_SWEEP_LAMBDAS if quick else SWEEP_LAMBDAS), float(lam)})
        say(f"λ sweep: the model refitted at {len(lams)} ridge penalties")
        sweep = lambda_sweep(problem, config, model, lams, wc)
        intervals = None
        if resamples:
            say(
                f"bootstrap: {resamples} resamples of the units, every model refitted (one vmapped program)"
            )
            intervals = bootstrap(
                model,
                grid,
                key=jax.random.fold_in(key, 7),
                resamples=resamples,
                worst=wc,
                benchmarks=multiples,
                levels={"blind": "blind"},
                mesh=mesh,
            )
        surface = None
        if contour is not None:
            say(f"contour: CFU over the correlations of {contour[0]} and {contour[1]}")
            surface = cfu_surface(model, contour, 15 if quick else 39)
    # the floor beside the curve, and whether it carries the curve (worst_case warned then)
    worst = {
        **wc.to_dict(),
        "floor_dominates": floor_dominates(
            wc.cfu_at_zero_correlation, np.asarray(wc.cfu), negligible_cfu(model)
        ),
    }
    seen: list[str] = []
    for w in caught:
        if issubclass(w.category, kinds) and str(w.message) not in seen:
            seen.append(str(w.message))
    res = {
        "settings": {
            "fit": _config_dict(config),
            "budgets": grid.tolist(),
            "search": search,
            "inverse": {"tol": 0.1 if quick else 1e-3},  # its coarse curve: worst_case's
            "sweep_lambdas": lams,
            "benchmarks": list(multiples),
            "resamples": resamples,
            "contour": None if contour is None else [list(p) for p in contour],
        },
        "model": model.to_dict(),
        "worst_case": worst,
        "inverse": inv.to_dict(),
        "baselines": baselines,
        "lambda_sweep": sweep,
        "warnings": seen,
        "predictors": {p: w.to_dict() for p, w in others.items()},
        "benchmarks": None if bench is None else bench.to_dict(),
        "intervals": None if intervals is None else intervals.to_dict(),
        "contour": None if surface is None else surface.to_dict(),
    }
    return Analysis(
        plain(res, strict=True, shortest=True),
        model,
        {"fair": wc, **others},
        bench,
        intervals,
        surface,
    )
