"""``cfjax sensitivity``: a CSV and a causal graph → how unfair the counterfactually fair
predictor could become under unmeasured confounding.

The table is read with pandas and turned into a fairness problem by
:func:`cfjax.sensitivity.from_frame` (columns found by name); :func:`cfjax.sensitivity.fit`
selects degrees and the ridge penalty λ by cross-validation and fits the working model, the fair
predictor and the two baselines (unconstrained, blind); :func:`cfjax.sensitivity.worst_case`
draws the worst-case counterfactual unfairness (CFU) over correlation budgets p_max;
:func:`cfjax.sensitivity.inverse_budget` answers the inverse question for the blind baseline's
unfairness; and a λ sweep (degrees fixed at the CV choice) shows how much of the curve the
ridge penalty carries. A reviewer's questions get answers too: how strong the confounding of a
budget is, against the data (:func:`cfjax.sensitivity.benchmarks`: a confounder k times as strong
as an observed parent), the unconstrained and blind baselines' own worst cases over the same
budgets, percentile bootstrap intervals (:func:`cfjax.sensitivity.bootstrap`) and, with
``--contour``, CFU over two error correlations (:func:`cfjax.sensitivity.cfu_surface`).
Everything runs in float64.

Outputs in ``--out``: ``report.md``, ``results.json`` (byte-identical for the same inputs and
seed) and ``curve.png`` and ``curve.pdf`` (when matplotlib is installed), ``contour.png`` and
``contour.pdf`` with ``--contour``.
"""

from __future__ import annotations

import json
import os
import warnings
from typing import Any

import click
import numpy as np

from cfjax._errors import ValidationError
from cfjax._results import plain
from cfjax.cli import common

__all__ = ["command", "read_graph", "parse_categories", "parse_multiples", "parse_pairs", "search_options"]

EXAMPLE = """\b
Example (a CSV with columns race, gpa, lsat, fya, and its graph):
  python -c "import numpy as np, pandas as pd; r = np.random.default_rng(0); \\
  a = r.choice(['white', 'black'], 300); g = 0.6 * (a == 'white') + r.normal(size=300); \\
  l = 0.7 * g + 0.35 * g**2 + r.normal(size=300); y = g + 0.5 * l + r.normal(size=300); \\
  pd.DataFrame(dict(race=a, gpa=g, lsat=l, fya=y)).to_csv('law.csv', index=False)"
  printf 'nodes:\\n  gpa: [race]\\n  lsat: [race, gpa]\\n' > graph.yaml
  cfjax sensitivity law.csv --graph graph.yaml --sensitive race --target fya \\
      --categories race=white,black --quick --out results/sensitivity
  # --devices N splits the budgets x restarts over N devices (the same numbers to rounding)
"""

#: The λ grid of the sweep (the CV choice is added), and its reduced form under ``--quick``.
SWEEP_LAMBDAS = (0.0, 1e-4, 1e-2, 1.0, 1e2, 1e4)
QUICK_SWEEP_LAMBDAS = (0.0, 1e-2, 1e2)
#: Budgets whose worst-case P the report's sweep table shows (the nearest on the grid).
SWEEP_BUDGETS = (0.5, 0.9)


def read_graph(path: str) -> dict[str, list[str]]:
    """The graph file: YAML or JSON, ``{nodes: {name: [parents...]}}`` or just a mapping
    ``name -> parents`` (a single parent may be a plain string, no parents an empty list or
    null). Raises :class:`~cfjax.cli.common.UserError` naming the file."""
    if not os.path.isfile(path):
        raise common.UserError(f"--graph {path!r}: no such file")
    with open(path, encoding="utf-8") as f:
        text = f.read()
    try:
        if path.lower().endswith(".json"):
            raw = json.loads(text)
        else:
            import yaml

            raw = yaml.safe_load(text)
    except Exception as e:  # a parse error of either format
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise common.UserError(f"--graph {path!r}: not valid {'JSON' if path.lower().endswith('.json') else 'YAML'} "
                               f"({first})") from None
    if isinstance(raw, dict) and set(raw) == {"nodes"}:
        raw = raw["nodes"]
    if not isinstance(raw, dict) or not raw:
        raise common.UserError(f"--graph {path!r}: expected a mapping node -> parents (or {{nodes: {{...}}}}), "
                               f"got {type(raw).__name__}")
    graph: dict[str, list[str]] = {}
    for node, parents in raw.items():
        if parents is None:
            parents = []
        elif isinstance(parents, (str, int, float)):
            parents = [parents]
        if not isinstance(parents, list) or not all(isinstance(p, (str, int, float)) for p in parents):
            raise common.UserError(f"--graph {path!r}: the parents of {node!r} must be a list of column names, "
                                   f"got {parents!r}")
        graph[str(node)] = [str(p) for p in parents]
    return graph


def parse_categories(values: tuple[str, ...]) -> dict[str, list[str]]:
    """``COL=a,b,...`` options → ``{COL: [a, b, ...]}`` (levels coded 0, 1, ... in that order)."""
    out: dict[str, list[str]] = {}
    for v in values:
        col, sep, levels = v.partition("=")
        col, parts = col.strip(), [s.strip() for s in levels.split(",")]
        if not sep or not col or not levels.strip() or any(not s for s in parts):
            raise common.UserError(f"--categories {v!r}: expected COLUMN=level,level,... (e.g. race=white,black)")
        if col in out:
            raise common.UserError(f"--categories: column {col!r} given twice")
        out[col] = parts
    return out


def parse_multiples(value: str) -> tuple[float, ...]:
    """``--benchmarks`` ``"1,2,3"`` → ``(1.0, 2.0, 3.0)``; ``"none"`` → ``()``."""
    if value.strip().lower() == "none":
        return ()
    try:
        ks = tuple(float(v) for v in value.split(","))
    except ValueError:
        ks = ()
    if not ks or not all(np.isfinite(k) and k > 0 for k in ks):
        raise common.UserError(f"--benchmarks {value!r}: expected positive multiples separated by commas "
                               "(e.g. 1,2,3), or none")
    return ks


def parse_pairs(value: str | None) -> tuple[tuple[str, str], tuple[str, str]] | None:
    """``--contour`` ``"O:M,M:J"`` → ``(("O", "M"), ("M", "J"))`` (the features are checked
    against the graph by :func:`cfjax.sensitivity.cfu_surface`)."""
    if value is None:
        return None
    pairs = [tuple(s.strip() for s in part.split(":")) for part in value.split(",")]
    if len(pairs) != 2 or any(len(p) != 2 or not all(p) for p in pairs):
        raise common.UserError(f"--contour {value!r}: expected two feature pairs, e.g. O:M,M:J")
    return pairs[0], pairs[1]


def _check_contour(pairs: Any, features: tuple[str, ...]) -> None:
    """``--contour``'s pairs against the graph, before any fitting (a mistake stays one line)."""
    if len(features) < 3:
        raise common.UserError(f"--contour: the graph has {len(features)} features ({', '.join(features)}), one "
                               "error correlation only; a contour needs three features or more (the curve is its "
                               "worst case)")
    for f in (f for p in pairs for f in p):
        if f not in features:
            raise common.UserError(f"--contour: {f!r} is not a feature of the graph ({', '.join(features)})")
    if any(a == b for a, b in pairs) or {*pairs[0]} == {*pairs[1]}:
        raise common.UserError(f"--contour: expected two different pairs of two different features, got "
                               f"{pairs[0][0]}:{pairs[0][1]},{pairs[1][0]}:{pairs[1][1]}")


def search_options(quick: bool, restarts: int) -> dict[str, Any]:
    """The fields of the :class:`cfjax.sensitivity.SearchConfig` the command searches with
    (``--quick``: a small search that runs in seconds on small data), as results.json records
    them (``settings.search``): ``SearchConfig(**search_options(...))``."""
    if quick:
        return dict(restarts=restarts, steps=20, boundary_starts=2, polish=5, patience=10)
    return dict(restarts=restarts, steps=500)


def _settings(quick: bool):
    import cfjax.sensitivity as S

    if quick:  # quadratic equations and predictor, λ by CV over three values
        return S.FitConfig(degrees=(2,), lambdas=(1e-2, 1.0, 1e2), predictor_degrees=(2,))
    return S.FitConfig()


def _settings_dict(settings) -> dict[str, Any]:
    import dataclasses

    return {f.name: (list(v) if isinstance(v := getattr(settings, f.name), tuple) else v)
            for f in dataclasses.fields(settings)}


def _read_frame(path: str, categories: dict[str, list[str]]):
    if not os.path.isfile(path):
        raise common.UserError(f"DATA {path!r}: no such file")
    try:
        import pandas as pd
    except ImportError:
        raise common.UserError("reading a CSV needs pandas: pip install pandas") from None
    try:
        frame = pd.read_csv(path)
    except Exception as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise common.UserError(f"DATA {path!r}: not a readable CSV ({first})") from None
    frame.columns = [str(c).strip() for c in frame.columns]
    for col in categories:
        if col in frame.columns and not frame[col].isna().any():
            frame[col] = frame[col].astype(str).str.strip()  # levels given as text on the command line
    return frame


def _fmt(x: Any) -> str:
    if x is None:
        return "—"
    x = float(x)
    return "NaN" if not np.isfinite(x) else f"{x:.4g}"


#: A feature whose Model A residual standard deviation is at most this fraction of its own is
#: fitted exactly (up to rounding): the fit interpolates it.
INTERPOLATES = 1e-6


def _sweep(prob, settings, model, lams, wc) -> list[dict[str, Any]]:
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
    penalty, not confounding, carries that row."""
    import cfjax.sensitivity as S
    from cfjax.sensitivity.cfu import cfu_of, negligible_cfu
    from cfjax.sensitivity.diagnostics import floor_dominates
    from cfjax.sensitivity.linear import fit_model_b

    X = np.asarray(prob.data.X, np.float64)
    scale = X.std(0)
    features = list(prob.graph.features)
    p_max = getattr(wc, "p_max", None)
    rows = []
    for lam in lams:
        with warnings.catch_warnings():  # a row that is not finite says why in its `undefined`
            warnings.simplefilter("ignore", S.ConvergenceWarning)
            m = S.fit(prob.graph, prob.data, settings.replace(lam=float(lam), equation_degrees=model.degrees))
            # the ridge residuals' spread, from the data (Model A's σ is NaN where rounding makes
            # the variance of residuals that are 0 slightly negative)
            ridge_w = m.design.blocks(m.model_a.w_ridge)
            start = np.cumsum((0,) + m.design.sizes)
            F = np.asarray(m.design.F, np.float64)
            ratio = np.array([np.std(X[:, j] - F[:, start[j]:start[j + 1]] @ np.asarray(ridge_w[j], np.float64))
                              for j in range(len(features))]) / np.where(scale > 0, scale, 1.0)
            exact = [f for f, r in zip(features, ratio) if r <= INTERPOLATES]
            sigma_a = np.asarray(m.model_a.sigma, np.float64)
            broken = [f for j, f in enumerate(features)
                      if f not in exact and not (np.isfinite(sigma_a[j]) and np.isfinite(np.asarray(m.model_a.w)).all())]
            why, floor, dominates = None, None, False
            if exact or broken:
                cfu = [None] * len(wc.P)
                why = (f"undefined: the fit interpolates {', '.join(exact)} (residual standard deviation "
                       f"{_fmt(min(ratio))} of the feature's own), and CFU divides by it" if exact
                       else f"not finite: Model A's fit of {', '.join(broken)} is not finite at this λ (σ "
                            f"{', '.join(_fmt(sigma_a[features.index(f)]) for f in broken)})")
            else:
                fits = [fit_model_b(m.design, P, m.lam, names=features) for P in np.asarray(wc.P)]
                cfu = plain([cfu_of(m, mb) for mb in fits], strict=True, shortest=True)
                floor = plain(S.cfu_at_zero_correlation(m), strict=True, shortest=True)
                if any(v is None for v in cfu):
                    why = _why_not_finite(features, fits, cfu, p_max)
                dominates = floor_dominates(np.nan if floor is None else floor,
                                            [np.nan if v is None else v for v in cfu], negligible_cfu(m))
        rows.append({"lam": float(lam), "cfu_at_worst_case_P": cfu, "cfu_at_zero_correlation": floor,
                     "floor_dominates": dominates, "undefined": why,
                     "blind": float(m.baseline_unfairness["blind"]),
                     "unconstrained": float(m.baseline_unfairness["unconstrained"])})
    return rows


def _why_not_finite(features: list[str], fits: list, cfu: list, p_max: Any) -> str:
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
            return (f"not finite: Model B's fit of {', '.join(shown)} is not finite at this λ{at} (σ "
                    f"{', '.join(_fmt(sigma[features.index(f)]) for f in shown)}): its σ solve found no finite "
                    "minimum of the profile likelihood")
        return (f"not finite: Model A and Model B are finite at this λ{at}, but CFU is not (σ of Model B "
                f"{', '.join(_fmt(v) for v in sigma)}): extreme values in the data")
    return "not finite"


def _nearest(values: list[float], target: float) -> int:
    return int(np.argmin(np.abs(np.asarray(values) - target)))


FLOOR_SHARE_TEXT = "a tenth"  # cfjax.sensitivity.diagnostics.FLOOR_SHARE in words


def _report(res: dict[str, Any], figure: bool | str | None) -> str:
    inp, m, wc, inv = res["inputs"], res["model"], res["worst_case"], res["inverse"]
    cols = sorted({_nearest(wc["p_max"], b) for b in SWEEP_BUDGETS})
    lines = ["# Sensitivity of counterfactual fairness to unmeasured confounding", "",
             f"Data `{inp['data']}` ({m['n']} rows), graph `{inp['graph']}`; sensitive attribute "
             f"`{inp['sensitive']}`, target `{inp['target']}`, seed {res['seed']}"
             f"{', reduced search (--quick)' if res['quick'] else ''}. Float64.", "",
             "Features in the graph's order, with their parents:", ""]
    lines += [f"- `{f}` <- {', '.join(f'`{p}`' for p in ps)}" for f, ps in zip(m["features"], m["parents"])]
    lam = m["lam"]
    lines += ["", f"Cross-validation chose equation degrees {m['degrees']}, shared ridge penalty λ = "
              f"{_fmt(lam) if not isinstance(lam, list) else lam}, and fair-predictor degree "
              f"{m['predictor_degree']}.", "",
              "## Baselines", "",
              "A baseline's unfairness is its mean squared difference from the fair predictor on the factual "
              "data (squared units of the target): a gap between two predictors, the level of concern for the "
              "curve below, not a counterfactual quantity.", "",
              "| baseline | unfairness |", "|---|---|"]
    lines += [f"| {k} | {_fmt(v)} |" for k, v in sorted(res["baselines"].items())]
    lines += ["", "## Worst-case counterfactual unfairness", "",
              "CFU is the mean squared change of the fair predictor between each unit and its counterfactual "
              "(the other value of the sensitive attribute) when the model's errors are correlated by P; the "
              "worst case maximises it over every correlation matrix whose off-diagonal entries are at most "
              f"p_max in absolute value (smallest eigenvalue at least {_fmt(wc['min_eig'])}).", ""]
    floor = wc.get("cfu_at_zero_correlation")
    lines += [f"CFU at zero correlation (P = I, the floor of the curve, which no worst case is below): "
              f"{_fmt(floor)}. It is 0 without a ridge penalty; at λ > 0 it is the penalty's shrinkage artefact "
              "(Model B's fit at P = I is not Model A's), not unfairness caused by confounding: read the curve as "
              "its rise above the floor.", ""]
    if wc.get("floor_dominates"):
        lines += [f"**The floor is more than {FLOOR_SHARE_TEXT} of the curve's range: the ridge penalty, not "
                  "confounding, carries this curve** (see Warnings).", ""]
    if figure:
        lines += ["![worst-case CFU](curve.png)", ""]
        if isinstance(figure, str):  # the figure's caption: what to conclude from it
            lines += [f"*Figure: {figure}* (vector: `curve.pdf`)", ""]
    iv, others = res.get("intervals"), res.get("predictors") or {}
    marks = _marks_at(res)
    head = "| p_max | worst-case CFU" + (f" [{iv['level']:.0%} interval]" if iv else "") + " | above the floor | "
    head += " | ".join(f"{p}: worst-case CFU" for p in others) + (" | " if others else "") + "restart ratio |"
    lines += [head, "|---|---|---|" + "---|" * len(others) + "---|"]
    for i, (p, c, r) in enumerate(zip(wc["p_max"], wc["cfu"], wc["restart_ratio"])):
        cell = _fmt(c) + (f" [{_fmt(iv['low']['worst_case'][i])}, {_fmt(iv['high']['worst_case'][i])}]" if iv else "")
        where = f" ({', '.join(marks[i])})" if marks.get(i) else ""
        lines.append(f"| {p:.3f}{where} | {cell} | {_fmt(None if c is None or floor is None else c - floor)} | "
                     + "".join(f"{_fmt(w['cfu'][i])} | " for w in others.values()) + f"{_fmt(r)} |")
    if others:
        lines += ["", "Each baseline's column is its own worst case (CFU scored on that predictor: how much its output "
                  "moves between a unit's factual and counterfactual worlds); the unconstrained predictor sees the "
                  "sensitive attribute itself, so its CFU is large at every budget. The gap to the fair predictor's "
                  "column is what the fair predictor buys."]
    lines += _benchmark_lines(res)
    if inv["reached"]:
        ans = f"p_max = {_fmt(inv['p_max'])} (bracket ({_fmt(inv['lo'])}, {_fmt(inv['hi'])}])"
    else:
        ans = (f"not reached within p_max <= {_fmt(inv['lo'])}; the largest worst-case CFU found is "
               f"{_fmt(inv['max_cfu'])} at p_max = {_fmt(inv['max_cfu_p_max'])}")
    if iv and "inverse/blind" in iv["estimate"]:
        missed = iv["not_reached"].get("inverse/blind")
        ans += (f". Bootstrap ({iv['resamples']} resamples, each with its own blind unfairness, bisected to within "
                f"{_fmt(iv['resolution'])}): {_fmt(iv['estimate']['inverse/blind'])} "
                f"[{_fmt(iv['low']['inverse/blind'])}, {_fmt(iv['high']['inverse/blind'])}]"
                + (f", not reached in {missed} of them" if missed else ""))
    lines += ["", "## Inverse question", "",
              f"The smallest budget whose worst-case CFU reaches the blind baseline's unfairness "
              f"({_fmt(inv['level'])}): {ans}.", "",
              "## Ridge-penalty diagnostic (λ sweep)", "",
              "Models A and B share λ; degrees fixed at the CV choice; λ = 0 is solved by pseudo-inverse. When "
              "each child's features span its parents', an unpenalised Model B with correlated errors is a "
              "reparameterisation of Model A and CFU is 0 up to float error: the curve then measures what the "
              "penalty does as much as confounding, so read it next to this table.", "",
              "CFU (\"undefined\" where the fit leaves it so, e.g. where it interpolates a feature: null in "
              "`results.json`, with the reason in the row's `undefined`) at the correlations the search found "
              "at the CV choice, for the budgets nearest 0.5 and 0.9 (every budget in `results.json`), beside "
              "each row's CFU at zero correlation (P = I, its floor):", "",
              "| λ | CFU at zero correlation | "
              + " | ".join(f"CFU at the worst-case P of p_max = {wc['p_max'][i]:.3f}" for i in cols)
              + " | blind baseline |", "|---|---|" + "---|" * len(cols) + "---|"]
    notes = []
    for row in res["lambda_sweep"]:
        cells = [_fmt(row["cfu_at_worst_case_P"][i]) for i in cols]
        if row.get("undefined"):
            cells = ["undefined" if c in ("—", "NaN") else c for c in cells]
            notes.append(f"- λ = {_fmt(row['lam'])}: CFU {row['undefined']}.")
        elif row.get("floor_dominates"):
            notes.append(f"- λ = {_fmt(row['lam'])}: the CFU at zero correlation ({_fmt(row['cfu_at_zero_correlation'])}) "
                         f"is more than {FLOOR_SHARE_TEXT} of this row's range: the penalty's shrinkage, not "
                         "confounding, carries it.")
        floor_cell = "undefined" if row.get("undefined") else _fmt(row.get("cfu_at_zero_correlation"))
        lines.append(f"| {_fmt(row['lam'])} | {floor_cell} | " + " | ".join(cells) + f" | {_fmt(row['blind'])} |")
    if notes:
        lines += [""] + notes
    if res.get("contour"):
        lines += ["", "## Two error correlations", "", "![contour](contour.png)", "",
                  f"CFU over the correlations of {' and '.join('-'.join(p) for p in res['contour']['pairs'])} (the other "
                  "correlations at 0); hatched: P not positive definite with the margin; markers: the benchmarks and "
                  "the worst cases of the curve."]
    if res["warnings"]:
        lines += ["", "## Warnings", ""] + [f"- {w}" for w in res["warnings"]]
    lines += ["", "Numbers in `results.json` (`model`, `worst_case`, `predictors`, `benchmarks`, `intervals`, "
              "`inverse`, `baselines`, `lambda_sweep`, `contour`, `settings`).", ""]
    return "\n".join(lines)


def _marks_at(res: dict[str, Any]) -> dict[int, list[str]]:
    """The curve's budgets that are benchmarks: row index → ``["Z ×k", ...]``."""
    b, p = res.get("benchmarks"), res["worst_case"]["p_max"]
    out: dict[int, list[str]] = {}
    if not b:
        return out
    for v, z in enumerate(b["yardsticks"]):
        for i, k in enumerate(b["k"]):
            q = b["p_max"][v][i]
            if b["feasible"][v][i] and q and q < 1:
                out.setdefault(_nearest(p, q), []).append(f"{z} ×{k:g}")
    return out


def _benchmark_lines(res: dict[str, Any]) -> list[str]:
    """The report's benchmarks: per yardstick and multiple, the budget it implies, the CFU at that
    correlation and the worst case within the budget, with intervals when bootstrapped."""
    b, iv, wc = res.get("benchmarks"), res.get("intervals"), res["worst_case"]
    if not b:
        return []
    lines = ["", "## Benchmarks", "",
             "How strong is a budget? A confounder that explains k times as much of each feature's variance as an "
             "observed parent does (its partial R² in the feature's equation, given the other parents) induces the "
             "error correlation below (definitions §3.9); its budget reading is the largest |P_jk|. The CFU at it is "
             "the largest over the unknown signs; the worst case within its budget is the curve's value there.", "",
             "| yardstick | k | partial R² per child | budget | CFU at the benchmark | worst case within the budget |",
             "|---|---|---|---|---|---|"]

    def cell(name, v, i, value):
        if not iv or name not in iv["estimate"]:
            return _fmt(value)
        return f"{_fmt(value)} [{_fmt(iv['low'][name][v][i])}, {_fmt(iv['high'][name][v][i])}]"

    for v, z in enumerate(b["yardsticks"]):
        r2 = ", ".join(f"{f} {_fmt(x)}" for f, x in zip(b["features"], b["r2"][v]) if x is not None) or "—"
        for i, k in enumerate(b["k"]):
            q = b["p_max"][v][i]
            if not b["feasible"][v][i] or not q:
                lines.append(f"| {z} | {k:g} | {r2} | — | — | {b['reasons'][v][i]} |")
                continue
            j = _nearest(wc["p_max"], q)
            lines.append(f"| {z} | {k:g} | {r2} | {cell('benchmark_budget', v, i, q)} | "
                         f"{cell('benchmark_cfu', v, i, b['cfu'][v][i])} | {_fmt(wc['cfu'][j])} |")
    for (f, g), rho in zip(b["pairs"], b["pair_correlation"]):
        lines.append(f"| identified: {f}, {g} | — | — | {_fmt(abs(rho) if rho is not None else None)} "
                     f"(residual correlation {_fmt(rho)}) | — | — |")
    return lines


def benchmark_marks(bench: Any) -> dict[str, tuple[float, float]]:
    """The benchmarks a figure marks: ``"Z ×k"`` → (its budget, the CFU there), for every
    feasible benchmark that induces a correlation."""
    if bench is None:
        return {}
    p, c, ok = (np.asarray(x) for x in (bench.p_max, bench.cfu, bench.feasible))
    return {f"{z} ×{k:g}": (float(p[v, i]), float(c[v, i])) for v, z in enumerate(bench.yardsticks)
            for i, k in enumerate(bench.k) if ok[v, i] and 0 < p[v, i] < 1}


def _save_figures(folder: str, figures_: dict[str, Any]) -> str | None:
    """Draw the worst-case curves (every predictor; the fair one's bootstrap band; the benchmarks
    marked) into ``curve.png`` (and ``.pdf``), and the contour when there is one; returns the
    curve's caption (what to conclude), or None when matplotlib is not installed."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        click.echo("cfjax: matplotlib is not installed; curve.png skipped (pip install matplotlib)", err=True)
        return None
    import cfjax.sensitivity as S
    from cfjax import figures

    curves, iv = figures_["worst_case"], figures_["intervals"]
    marks = benchmark_marks(figures_["benchmarks"])
    bands = {} if iv is None else dict(lower={"fair": np.asarray(iv.low["worst_case"])},
                                       upper={"fair": np.asarray(iv.high["worst_case"])})
    fig = S.plot_curve(curves, benchmarks=marks or None, title="Worst-case counterfactual unfairness", **bands)
    figures.save_figure(fig, os.path.join(folder, "curve.png"))  # curve.png and curve.pdf
    if figures_["surface"] is not None:
        bench = figures_["benchmarks"]
        points = {} if bench is None else {label: np.asarray(bench.P)[v, i] for (label, _), (v, i) in zip(
            benchmark_marks(bench).items(), _mark_index(bench))}
        fig = S.plot_contour(figures_["surface"], benchmarks=points or None, worst=curves["fair"],
                             title="Counterfactual unfairness over two error correlations")
        figures.save_figure(fig, os.path.join(folder, "contour.png"))
    return S.curve_caption(curves, benchmarks=marks or None)


def _mark_index(bench: Any) -> list[tuple[int, int]]:
    """The (yardstick, k) index of each of :func:`benchmark_marks`' entries, in its order."""
    p, ok = np.asarray(bench.p_max), np.asarray(bench.feasible)
    return [(v, i) for v in range(len(bench.yardsticks)) for i in range(len(bench.k)) if ok[v, i] and 0 < p[v, i] < 1]


def analyse(data: str, graph: str, sensitive: str, target: str, categories: dict[str, list[str]], budgets: int,
            restarts: int, quick: bool, seed: int, mesh: Any = None,
            log: Any = lambda message: None, multiples: tuple[float, ...] = (1.0, 2.0, 3.0), resamples: int = 0,
            contour: Any = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """Everything the command computes, as plain Python (``results.json``), and what its figures
    draw (``figures``: each predictor's worst case, the intervals, the benchmarks, the contour).
    Assumes float64 is on. ``seed``: the searches' key (an int seed);
    ``mesh``: the devices their runs are split over (``mesh=`` of
    :func:`cfjax.sensitivity.worst_case`; None: one). ``log`` receives a line as each stage
    starts (once the inputs are read and checked: a user mistake stays one line).
    ``multiples``: the benchmarks' k (``()``: none); ``resamples``: bootstrap resamples (0:
    no intervals); ``contour``: two feature pairs for a CFU surface, or None.

    The curve's budgets are the evenly spaced grid and every benchmark's budget, so that the
    worst case at each benchmark is on the curve."""
    import jax

    import cfjax.sensitivity as S
    from cfjax._core.keys import as_key

    parents = read_graph(graph)
    frame = _read_frame(data, categories)
    try:
        with warnings.catch_warnings(record=True) as caught_graph:  # a degenerate graph: in the report
            warnings.simplefilter("always", S.DegenerateProblemWarning)
            prob = S.from_frame(frame, parents, sensitive=sensitive, target=target, categories=categories or None)
    except ValidationError as e:
        msg = str(e)
        about_graph = msg.startswith(("`graph", "`parents", "`fair", "`sensitive"))
        where = f"--graph {graph!r}" if about_graph else f"DATA {data!r}"
        raise common.UserError(f"{where}: {msg}") from None
    if contour is not None:
        _check_contour(contour, prob.graph.features)
    settings = _settings(quick)
    search = search_options(quick, restarts)
    config = S.SearchConfig(**search)
    key = as_key(seed, "seed")
    grid = np.linspace(0.0, 0.99, budgets)
    kinds = (S.ConvergenceWarning, S.ShrinkageWarning, S.DegenerateProblemWarning)
    with warnings.catch_warnings(record=True) as caught:
        for kind in kinds:
            warnings.simplefilter("always", kind)
        log(f"fitting the working model, the fair predictor and the baselines on {prob.data.X.shape[0]} rows "
            "(degrees and λ by cross-validation)")
        model = S.fit(prob.graph, prob.data, settings)
        bench = None
        if multiples:
            log(f"benchmarks: confounders {', '.join(f'{k:g}' for k in multiples)} times as strong as each observed parent")
            bench = S.benchmarks(model, k=multiples)
            p_bench = np.asarray(bench.p_max)[np.asarray(bench.feasible)]
            grid = np.unique(np.concatenate([grid, p_bench[(p_bench > 0) & (p_bench < 1)]]))
        log(f"worst-case CFU: {grid.size} budgets × {restarts} restart(s), {search['steps']} steps each, for the fair "
            "predictor and the two baselines (the first search compiles)")
        wc = S.worst_case(model, grid, key=key, config=config, mesh=mesh)
        others = {p: S.worst_case(model.scoring(p), grid, key=key, config=config, mesh=mesh)
                  for p in S.PREDICTORS if p != "fair"}
        baselines = {k: float(v) for k, v in model.baseline_unfairness.items()}
        # the coarse curve has as many budgets as the main one (one compilation for both)
        inverse_opts = dict(grid=budgets, hi=0.99, tol=0.1 if quick else 1e-3)
        log("inverse question: the smallest budget whose worst case reaches the blind baseline's unfairness")
        inv = S.inverse_budget(model, baselines["blind"], key=key, config=config, mesh=mesh, **inverse_opts)
        lam = model.lam if not isinstance(model.lam, tuple) else model.lam[0]
        lams = sorted({*(QUICK_SWEEP_LAMBDAS if quick else SWEEP_LAMBDAS), float(lam)})
        log(f"λ sweep: the model refitted at {len(lams)} ridge penalties")
        sweep = _sweep(prob, settings, model, lams, wc)
        intervals = None
        if resamples:
            log(f"bootstrap: {resamples} resamples of the units, every model refitted (one vmapped program)")
            intervals = S.bootstrap(model, grid, key=jax.random.fold_in(key, 7), resamples=resamples, worst=wc,
                                    benchmarks=multiples, levels={"blind": "blind"}, mesh=mesh)
        surface = None
        if contour is not None:
            log(f"contour: CFU over the correlations of {contour[0]} and {contour[1]}")
            try:
                surface = S.cfu_surface(model, contour, 15 if quick else 39)
            except ValidationError as e:
                raise common.UserError(f"--contour: {e}") from None
    from cfjax.sensitivity.cfu import negligible_cfu
    from cfjax.sensitivity.diagnostics import floor_dominates

    # the floor beside the curve, and whether it carries the curve (worst_case warned then)
    worst = {**wc.to_dict(), "floor_dominates": floor_dominates(wc.cfu_at_zero_correlation, np.asarray(wc.cfu),
                                                                negligible_cfu(model))}
    seen: list[str] = []
    for w in [*caught_graph, *caught]:
        if issubclass(w.category, kinds) and str(w.message) not in seen:
            seen.append(str(w.message))
    res = {"command": "sensitivity", "seed": seed, "quick": quick,
           "inputs": {"data": os.path.basename(data), "graph": os.path.basename(graph), "sensitive": sensitive,
                      "target": target, "categories": categories, "graph_parents": parents},
           "settings": {"fit": _settings_dict(settings), "budgets": grid.tolist(), "search": search,
                        "inverse": inverse_opts, "sweep_lambdas": lams},
           "model": model.to_dict(), "worst_case": worst, "inverse": inv.to_dict(),
           "baselines": baselines, "lambda_sweep": sweep, "warnings": seen,
           "predictors": {p: w.to_dict() for p, w in others.items()},
           "benchmarks": None if bench is None else bench.to_dict(),
           "intervals": None if intervals is None else intervals.to_dict(),
           "contour": None if surface is None else surface.to_dict()}
    res["settings"].update(benchmarks=list(multiples), resamples=resamples,
                           contour=None if contour is None else [list(p) for p in contour])
    figures = {"worst_case": {"fair": wc, **others}, "benchmarks": bench, "intervals": intervals, "surface": surface}
    return plain(res, strict=True, shortest=True), figures


@click.command(epilog=EXAMPLE)
@click.argument("data", metavar="DATA")
@click.option("--graph", "graph", required=True, metavar="GRAPH",
              help="YAML or JSON file: {nodes: {feature: [parents...]}} or just feature -> parents, over "
                   "column names (the sensitive attribute among the parents, never the target)")
@click.option("--sensitive", required=True, metavar="A", help="column of the sensitive attribute")
@click.option("--target", required=True, metavar="Y", help="column of the outcome")
@click.option("--categories", multiple=True, metavar="COL=a,b,...",
              help="code a text column: its levels, coded 0, 1, ... in this order (repeatable)")
@click.option("--budgets", type=click.IntRange(min=2), default=None,
              help="number of budgets p_max, evenly spaced in [0, 0.99]  [default: 16; 4 with --quick]")
@click.option("--restarts", type=click.IntRange(min=1), default=None,
              help="optimiser restarts per budget  [default: 4; 1 with --quick]")
@click.option("--quick", is_flag=True,
              help="degree 2 only, λ among 0.01, 1, 100, few budgets and short searches (seconds on small data)")
@click.option("--benchmarks", "benchmarks", default="1,2,3", show_default=True, metavar="K,K,...",
              help="benchmark the budget: the error correlation a confounder K times as strong as each observed "
                   "parent would induce (its partial R² in each feature's equation), marked on the curve; none: skip")
@click.option("--bootstrap", "bootstrap", type=click.IntRange(min=0), default=None, metavar="B",
              help="bootstrap resamples of the units for percentile intervals (every model refitted); 0: none  "
                   "[default: 200; 20 with --quick]")
@click.option("--contour", "contour", default=None, metavar="F:G,G:H",
              help="CFU over the error correlations of two feature pairs (three features or more), the region "
                   "where P is not positive definite shaded: contour.png")
@common.out_option("results/sensitivity")
@common.force_option
@common.seed_option
@common.devices_option
def command(data: str, graph: str, sensitive: str, target: str, categories: tuple[str, ...], budgets: int | None,
            restarts: int | None, quick: bool, benchmarks: str, bootstrap: int | None, contour: str | None, out: str,
            force: bool, seed: int, devices: int | None) -> None:
    """Worst-case counterfactual unfairness of DATA (a CSV) under unmeasured confounding.

    Fits the causal working model on the columns named in GRAPH, the counterfactually fair
    predictor and two baselines, then reports the worst-case CFU of each over correlation
    budgets p_max, benchmarks of those budgets against the observed parents, the smallest
    budget reaching the blind baseline's unfairness, bootstrap intervals and a ridge-penalty
    sweep. Writes report.md, results.json and curve.png (and .pdf) into --out.
    """
    devices = common.use_devices(devices)  # before anything starts JAX
    import jax

    cats = parse_categories(categories)
    multiples = parse_multiples(benchmarks)
    pairs = parse_pairs(contour)
    resamples = bootstrap if bootstrap is not None else (20 if quick else 200)
    budgets = budgets if budgets is not None else (4 if quick else 16)
    restarts = restarts if restarts is not None else (1 if quick else 4)
    if not os.path.isfile(data):
        raise common.UserError(f"DATA {data!r}: no such file")
    if not os.path.isfile(graph):
        raise common.UserError(f"--graph {graph!r}: no such file")
    common.check_out(out, force)
    with jax.enable_x64(True):  # float64 for the command only, restored after
        say = common.progress("sensitivity")
        res, drawn = analyse(data, graph, sensitive, target, cats, budgets, restarts, quick, seed, devices, log=say,
                             multiples=multiples, resamples=resamples, contour=pairs)
        say("writing the report and the figures")
        folder = common.prepare_out(out, force)
        figure = _save_figures(folder, drawn)
    common.write_json(os.path.join(out, "results.json"), res)
    common.write_text(os.path.join(out, "report.md"), _report(res, figure))
    click.echo(f"cfjax sensitivity: wrote {os.path.join(out, 'report.md')} and results.json")
