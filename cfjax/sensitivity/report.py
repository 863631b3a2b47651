"""The report of a sensitivity analysis (:func:`cfjax.sensitivity.analyse`), in markdown, as
``cfjax sensitivity`` writes it to ``report.md``: rendered from the analysis' plain results
(:meth:`~cfjax.sensitivity.analysis.Analysis.to_dict`), so a results.json renders again alike."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

__all__ = ["report_markdown", "FLOOR_SHARE_TEXT", "SWEEP_BUDGETS"]

#: Budgets whose worst-case P the report's sweep table shows (the nearest on the grid).
SWEEP_BUDGETS = (0.5, 0.9)


def _fmt(x: Any) -> str:
    if x is None:
        return "—"
    x = float(x)
    return "NaN" if not np.isfinite(x) else f"{x:.4g}"


def _nearest(values: list[float], target: float) -> int:
    return int(np.argmin(np.abs(np.asarray(values) - target)))


FLOOR_SHARE_TEXT = "a tenth"  # cfjax.sensitivity.diagnostics.FLOOR_SHARE in words


def report_markdown(res: Mapping[str, Any], figure: bool | str | None = None) -> str:
    """The report of an analysis, in markdown: the model, the baselines, the worst-case curve
    (with its intervals, the baselines' own worst cases and the benchmarks on it), the
    benchmarks, the inverse question, the λ sweep, the contour and the warnings.

    Args:
      res: :meth:`Analysis.to_dict() <cfjax.sensitivity.analysis.Analysis.to_dict>`, with the
        command's ``inputs`` (``data``, ``graph``, ``sensitive``, ``target``), ``seed`` and
        ``quick``, as ``cfjax sensitivity``'s results.json holds it.
      figure: whether ``curve.png`` was drawn, or its caption (drawn, and what to conclude).

    Returns:
      The report's text.
    """
    inp, m, wc, inv = res["inputs"], res["model"], res["worst_case"], res["inverse"]
    cols = sorted({_nearest(wc["p_max"], b) for b in SWEEP_BUDGETS})
    lines = [
        "# Sensitivity of counterfactual fairness to unmeasured confounding",
        "",
        f"Data `{inp['data']}` ({m['n']} rows), graph `{inp['graph']}`; sensitive attribute "
        f"`{inp['sensitive']}`, target `{inp['target']}`, seed {res['seed']}"
        f"{', reduced search (--quick)' if res['quick'] else ''}. Float64.",
        "",
        "Features in the graph's order, with their parents:",
        "",
    ]
    lines += [
        f"- `{f}` <- {', '.join(f'`{p}`' for p in ps)}"
        for f, ps in zip(m["features"], m["parents"])
    ]
    lam = m["lam"]
    lines += [
        "",
        f"Cross-validation chose equation degrees {m['degrees']}, shared ridge penalty λ = "
        f"{_fmt(lam) if not isinstance(lam, list) else lam}, and fair-predictor degree "
        f"{m['predictor_degree']}.",
        "",
        "## Baselines",
        "",
        "A baseline's unfairness is its mean squared difference from the fair predictor on the factual "
        "data (squared units of the target): a gap between two predictors, the level of concern for the "
        "curve below, not a counterfactual quantity.",
        "",
        "| baseline | unfairness |",
        "|---|---|",
    ]
    lines += [f"| {k} | {_fmt(v)} |" for k, v in sorted(res["baselines"].items())]
    lines += [
        "",
        "## Worst-case counterfactual unfairness",
        "",
        "CFU is the mean squared change of the fair predictor between each unit and its counterfactual "
        "(the other value of the sensitive attribute) when the model's errors are correlated by P; the "
        "worst case maximises it over every correlation matrix whose off-diagonal entries are at most "
        f"p_max in absolute value (smallest eigenvalue at least {_fmt(wc['min_eig'])}).",
        "",
    ]
    floor = wc.get("cfu_at_zero_correlation")
    lines += [
        f"CFU at zero correlation (P = I, the floor of the curve, which no worst case is below): "
        f"{_fmt(floor)}. It is 0 without a ridge penalty; at λ > 0 it is the penalty's shrinkage artefact "
        "(Model B's fit at P = I is not Model A's), not unfairness caused by confounding: read the curve as "
        "its rise above the floor.",
        "",
    ]
    if wc.get("floor_dominates"):
        lines += [
            f"**The floor is more than {FLOOR_SHARE_TEXT} of the curve's range: the ridge penalty, not "
            "confounding, carries this curve** (see Warnings).",
            "",
        ]
    if figure:
        lines += ["![worst-case CFU](curve.png)", ""]
        if isinstance(figure, str):  # the figure's caption: what to conclude from it
            lines += [f"*Figure: {figure}* (vector: `curve.pdf`)", ""]
    iv, others = res.get("intervals"), res.get("predictors") or {}
    marks = _marks_at(res)
    head = (
        "| p_max | worst-case CFU"
        + (f" [{iv['level']:.0%} interval]" if iv else "")
        + " | above the floor | "
    )
    head += (
        " | ".join(f"{p}: worst-case CFU" for p in others)
        + (" | " if others else "")
        + "restart ratio |"
    )
    lines += [head, "|---|---|---|" + "---|" * len(others) + "---|"]
    for i, (p, c, r) in enumerate(zip(wc["p_max"], wc["cfu"], wc["restart_ratio"])):
        cell = _fmt(c) + (
            f" [{_fmt(iv['low']['worst_case'][i])}, {_fmt(iv['high']['worst_case'][i])}]"
            if iv
            else ""
        )
        where = f" ({', '.join(marks[i])})" if marks.get(i) else ""
        lines.append(
            f"| {p:.3f}{where} | {cell} | {_fmt(None if c is None or floor is None else c - floor)} | "
            + "".join(f"{_fmt(w['cfu'][i])} | " for w in others.values())
            + f"{_fmt(r)} |"
        )
    if others:
        lines += [
            "",
            "Each baseline's column is its own worst case (CFU scored on that predictor: how much its output "
            "moves between a unit's factual and counterfactual worlds); the unconstrained predictor sees the "
            "sensitive attribute itself, so its CFU is large at every budget. The gap to the fair predictor's "
            "column is what the fair predictor buys.",
        ]
    lines += _benchmark_lines(res)
    if inv["reached"]:
        ans = f"p_max = {_fmt(inv['p_max'])} (bracket ({_fmt(inv['lo'])}, {_fmt(inv['hi'])}])"
    else:
        ans = (
            f"not reached within p_max <= {_fmt(inv['lo'])}; the largest worst-case CFU found is "
            f"{_fmt(inv['max_cfu'])} at p_max = {_fmt(inv['max_cfu_p_max'])}"
        )
    if iv and "inverse/blind" in iv["estimate"]:
        missed = iv["not_reached"].get("inverse/blind")
        ans += (
            f". Bootstrap ({iv['resamples']} resamples, each with its own blind unfairness, bisected to within "
            f"{_fmt(iv['resolution'])}): {_fmt(iv['estimate']['inverse/blind'])} "
            f"[{_fmt(iv['low']['inverse/blind'])}, {_fmt(iv['high']['inverse/blind'])}]"
            + (f", not reached in {missed} of them" if missed else "")
        )
    lines += [
        "",
        "## Inverse question",
        "",
        f"The smallest budget whose worst-case CFU reaches the blind baseline's unfairness "
        f"({_fmt(inv['level'])}): {ans}.",
        "",
        "## Ridge-penalty diagnostic (λ sweep)",
        "",
        "Models A and B share λ; degrees fixed at the CV choice; λ = 0 is solved by pseudo-inverse. When "
        "each child's features span its parents', an unpenalised Model B with correlated errors is a "
        "reparameterisation of Model A and CFU is 0 up to float error: the curve then measures what the "
        "penalty does as much as confounding, so read it next to this table.",
        "",
        'CFU ("undefined" where the fit leaves it so, e.g. where it interpolates a feature: null in '
        "`results.json`, with the reason in the row's `undefined`) at the correlations the search found "
        "at the CV choice, for the budgets nearest 0.5 and 0.9 (every budget in `results.json`), beside "
        "each row's CFU at zero correlation (P = I, its floor):",
        "",
        "| λ | CFU at zero correlation | "
        + " | ".join(f"CFU at the worst-case P of p_max = {wc['p_max'][i]:.3f}" for i in cols)
        + " | blind baseline |",
        "|---|---|" + "---|" * len(cols) + "---|",
    ]
    notes = []
    for row in res["lambda_sweep"]:
        cells = [_fmt(row["cfu_at_worst_case_P"][i]) for i in cols]
        if row.get("undefined"):
            cells = ["undefined" if c in ("—", "NaN") else c for c in cells]
            notes.append(f"- λ = {_fmt(row['lam'])}: CFU {row['undefined']}.")
        elif row.get("floor_dominates"):
            notes.append(
                f"- λ = {_fmt(row['lam'])}: the CFU at zero correlation ({_fmt(row['cfu_at_zero_correlation'])}) "
                f"is more than {FLOOR_SHARE_TEXT} of this row's range: the penalty's shrinkage, not "
                "confounding, carries it."
            )
        floor_cell = (
            "undefined" if row.get("undefined") else _fmt(row.get("cfu_at_zero_correlation"))
        )
        lines.append(
            f"| {_fmt(row['lam'])} | {floor_cell} | "
            + " | ".join(cells)
            + f" | {_fmt(row['blind'])} |"
        )
    if notes:
        lines += [""] + notes
    if res.get("contour"):
        lines += [
            "",
            "## Two error correlations",
            "",
            "![contour](contour.png)",
            "",
            f"CFU over the correlations of {' and '.join('-'.join(p) for p in res['contour']['pairs'])} (the other "
            "correlations at 0); hatched: P not positive definite with the margin; markers: the benchmarks and "
            "the worst cases of the curve.",
        ]
    if res["warnings"]:
        lines += ["", "## Warnings", ""] + [f"- {w}" for w in res["warnings"]]
    lines += [
        "",
        "Numbers in `results.json` (`model`, `worst_case`, `predictors`, `benchmarks`, `intervals`, "
        "`inverse`, `baselines`, `lambda_sweep`, `contour`, `settings`).",
        "",
    ]
    return "\n".join(lines)


def _marks_at(res: Mapping[str, Any]) -> dict[int, list[str]]:
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


def _benchmark_lines(res: Mapping[str, Any]) -> list[str]:
    """The report's benchmarks: per yardstick and multiple, the budget it implies, the CFU at that
    correlation and the worst case within the budget, with intervals when bootstrapped."""
    b, iv, wc = res.get("benchmarks"), res.get("intervals"), res["worst_case"]
    if not b:
        return []
    lines = [
        "",
        "## Benchmarks",
        "",
        "How strong is a budget? A confounder that explains k times as much of each feature's variance as an "
        "observed parent does (its partial R² in the feature's equation, given the other parents) induces the "
        "error correlation below (definitions §3.9); its budget reading is the largest |P_jk|. The CFU at it is "
        "the largest over the unknown signs; the worst case within its budget is the curve's value there.",
        "",
        "| yardstick | k | partial R² per child | budget | CFU at the benchmark | worst case within the budget |",
        "|---|---|---|---|---|---|",
    ]

    def cell(name: str, v: int, i: int, value: Any) -> str:
        if not iv or name not in iv["estimate"]:
            return _fmt(value)
        return f"{_fmt(value)} [{_fmt(iv['low'][name][v][i])}, {_fmt(iv['high'][name][v][i])}]"

    for v, z in enumerate(b["yardsticks"]):
        r2 = (
            ", ".join(f"{f} {_fmt(x)}" for f, x in zip(b["features"], b["r2"][v]) if x is not None)
            or "—"
        )
        for i, k in enumerate(b["k"]):
            q = b["p_max"][v][i]
            if not b["feasible"][v][i] or not q:
                lines.append(f"| {z} | {k:g} | {r2} | — | — | {b['reasons'][v][i]} |")
                continue
            j = _nearest(wc["p_max"], q)
            lines.append(
                f"| {z} | {k:g} | {r2} | {cell('benchmark_budget', v, i, q)} | "
                f"{cell('benchmark_cfu', v, i, b['cfu'][v][i])} | {_fmt(wc['cfu'][j])} |"
            )
    for (f, g), rho in zip(b["pairs"], b["pair_correlation"]):
        lines.append(
            f"| identified: {f}, {g} | — | — | {_fmt(abs(rho) if rho is not None else None)} "
            f"(residual correlation {_fmt(rho)}) | — | — |"
        )
    return lines
