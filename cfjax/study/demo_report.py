"""``cfjax demo``'s report: the sensitivity section (paper 001 on the built-in synthetic SCM,
with the search's warnings quoted as its table prints the budgets) and the whole ``report.md``,
whose other sections are the pillars' own (:func:`cfjax.study.report.summary_section`,
:func:`cfjax.representations.report.splits_section`,
:func:`cfjax.study.cftraining_report.summary_section`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from cfjax.sensitivity import FairModel, WorstCase

__all__ = ["search_notes", "sensitivity_section", "report_markdown"]


def _budget(p: float) -> str:
    """A budget as the demo's report prints it, in its table and in every note."""
    return f"{p:.3g}"


def search_notes(wc: WorstCase, model: FairModel, inverse_warnings: int) -> list[str]:
    """The demo search's warnings, every budget quoted as the report's table prints it: the
    curve's budgets whose worst case no second restart confirmed (after the search's adaptive
    rounds) or found no finite CFU, whether the CFU at zero correlation carries the curve, and
    how often the inverse question's searches (at budgets of their own) warned."""
    from cfjax.sensitivity.cfu import negligible_cfu
    from cfjax.sensitivity.diagnostics import floor_dominates

    p, cfu = np.asarray(wc.p_max, np.float64), np.asarray(wc.cfu, np.float64)
    ratio = np.asarray(wc.restart_ratio, np.float64)
    notes = []
    none = np.flatnonzero(~np.isfinite(cfu))
    if none.size:
        notes.append(
            "no restart ended with a finite CFU at p_max = "
            + ", ".join(_budget(p[i]) for i in none)
            + " (n/a in the table)"
        )
    # worst_case's own test: two restarts agree on the worst case (its adaptive rounds add restarts until they do)
    confirmed, rounds = getattr(wc, "confirmed", None), getattr(wc, "rounds", None)
    confirmed = (
        ~(ratio > 10) if confirmed is None else np.asarray(confirmed, bool)
    )  # without rounds: the old test
    apart = np.flatnonzero(~confirmed & np.isfinite(cfu))
    if apart.size:
        rounds = np.zeros(p.shape, int) if rounds is None else np.asarray(rounds)
        notes.append(
            "the worst case at p_max = "
            + ", ".join(f"{_budget(p[i])} ({ratio[i]:.3g}x)" for i in apart)
            + " rests on one restart (the best restart's CFU over the second best's), after "
            + ", ".join(str(int(rounds[i])) for i in apart)
            + " adaptive round(s) of more restarts there: "
            "more steps may find a larger one"
        )
    floor = wc.cfu_at_zero_correlation
    if floor_dominates(floor, cfu, negligible_cfu(model)):
        notes.append(
            f"the CFU at zero correlation ({floor:.3g}) is more than a tenth of the curve's range: the "
            "ridge penalty, not confounding, carries the curve"
        )
    if inverse_warnings:
        notes.append(
            f"the inverse question's searches, at budgets of their own (`inverse` in results.json), warned "
            f"{inverse_warnings} time(s) that a worst case rested on one restart or found no finite CFU"
        )
    return notes


def _f(x: Any, digits: int = 3) -> str:
    return (
        "n/a" if x is None or (isinstance(x, float) and not np.isfinite(x)) else f"{x:.{digits}f}"
    )


def _g(x: Any) -> str:
    return "n/a" if x is None or (isinstance(x, float) and not np.isfinite(x)) else f"{x:.3g}"


def _at(wc: dict[str, Any], p: float) -> float | None:
    hits = [c for q, c in zip(wc["p_max"], wc["cfu"]) if abs(q - p) < 1e-9]
    return hits[0] if hits else None


def _inverse_line(name: str, inv: dict[str, Any]) -> str:
    what = {
        "true_correlation_cfu": "the CFU at the true correlation",
        "blind_baseline": "the blind baseline's unfairness",
    }[name]
    if inv.get("reached"):
        return f"{what} ({_g(inv['level'])}) from p_max = {_f(inv['p_max'], 3)}"
    return (
        f"{what} ({_g(inv['level'])}) is not reached below p_max = 0.99 (largest worst case "
        f"{_g(inv.get('max_cfu'))})"
    )


def sensitivity_section(
    s: Mapping[str, Any],
    title: str = "Sensitivity of counterfactual fairness to unmeasured confounding (paper 001)",
) -> list[str]:
    """The demo's sensitivity section (its lines, from a blank line and the ``## title``
    heading): the worst-case CFU curve with its interval and the baselines' curves, the CFU at
    the true correlation, the inverse question, the benchmarks, the figure and the search's
    warnings; ``s`` as the demo's ``results.json`` holds it under ``sensitivity``."""
    wc, inv = s["worst_case"], s["inverse"]
    lines = [
        "",
        f"## {title}",
        "",
        f"The built-in synthetic SCM (n = {s['n']}; A → G → L with correlated errors, true correlation "
        f"{s['true_correlation']}). The fair predictor's counterfactual unfairness (CFU) would be 0 if the "
        "errors were uncorrelated (Model A) and the model unpenalised; the curve is its worst case over every "
        "correlation within the budget p_max, found by a differentiable search. Its floor, the CFU at zero "
        f"correlation (P = I), is {_g(wc.get('cfu_at_zero_correlation'))}: at a ridge penalty λ > 0 (here λ = "
        f"{_g(s['model']['lam'])}) the penalty's shrinkage artefact, not unfairness caused by confounding.",
        "",
        "| p_max | " + " | ".join(_budget(p) for p in wc["p_max"]) + " |",
        "|---|" + "---|" * len(wc["p_max"]),
        "| worst-case CFU | " + " | ".join(_g(v) for v in wc["cfu"]) + " |",
    ]
    iv = s.get("intervals")
    if iv:
        lines.append(
            f"| {iv['level']:.0%} interval ({iv['resamples']} resamples) | "
            + " | ".join(
                f"[{_g(a)}, {_g(b)}]"
                for a, b in zip(iv["low"]["worst_case"], iv["high"]["worst_case"])
            )
            + " |"
        )
    for name, other in (s.get("predictors") or {}).items():
        lines.append(
            f"| {name} predictor's worst case | " + " | ".join(_g(v) for v in other["cfu"]) + " |"
        )
    lines += [
        "",
        f"- CFU at the true correlation (0.5): {_g(s['true_cfu'])}; the worst case within p_max = 0.5 is "
        f"{_g(_at(wc, 0.5))} (a search over every correlation matrix within the budget, so at least as large)."
        if _at(wc, 0.5) is not None
        else f"- CFU at the true correlation (0.5): {_g(s['true_cfu'])}.",
        "- Baselines' unfairness (mean squared difference from the fair predictor): "
        + ", ".join(f"{k} {_g(v)}" for k, v in s["baselines"].items())
        + ".",
        "- Inverse question, the smallest budget whose worst case reaches a level: "
        + "; ".join(_inverse_line(name, v) for name, v in inv.items())
        + ".",
    ]
    if s.get("benchmarks"):
        lines.append("- " + _benchmark_line(s["benchmarks"], iv))
    if s.get("predictors"):
        lines.append(
            "- The baselines' own worst-case CFU (how much their output moves between a unit's factual and "
            "counterfactual worlds) stays near "
            + " and ".join(f"{_g(min(v['cfu']))} ({k})" for k, v in s["predictors"].items())
            + " at every budget: what the fair predictor buys."
        )
    lines += ["", "![worst-case CFU curve](cfu_curve.png)"]
    if s.get("caption"):  # what to conclude from the figure (cfu_curve.pdf: the same, vector)
        lines += ["", f"*Figure: {s['caption']}*"]
    if s.get("warnings"):
        lines += [
            "",
            "The search warned (a small demo search; `cfjax sensitivity` and `worst_case` take more "
            "restarts and steps):",
            "",
        ] + [f"- {w}" for w in s["warnings"]]
    return lines


def _benchmark_line(b: dict[str, Any], iv: dict[str, Any] | None) -> str:
    """The demo's benchmarks in words: the budget each multiple of each yardstick implies (with
    its interval), the CFU there, or why no such confounder exists."""
    parts = []
    for v, z in enumerate(b["yardsticks"]):
        for i, k in enumerate(b["k"]):
            if not b["feasible"][v][i] or not b["p_max"][v][i]:
                short = (
                    "impossible (it would explain all of a feature's error variance)"
                    if not b["feasible"][v][i]
                    else "no correlation (it causes one feature)"
                )
                parts.append(f"{k:g} × {z}: {short}")
                continue
            ci = ""
            if iv and "benchmark_budget" in iv["low"]:
                ci = f" [{_f(iv['low']['benchmark_budget'][v][i], 3)}, {_f(iv['high']['benchmark_budget'][v][i], 3)}]"
            parts.append(
                f"{k:g} × {z}: p_max {_f(b['p_max'][v][i], 3)}{ci}, CFU there {_g(b['cfu'][v][i])}"
            )
    return (
        "Benchmarks, a confounder k times as strong as an observed parent (its partial R² in each feature's "
        "equation; definitions §3.9): " + "; ".join(parts) + "."
    )


def report_markdown(
    results: Mapping[str, Any], study: Mapping[str, Any], times: Mapping[str, float]
) -> str:
    """The demo's ``report.md``: its four sections and its files.

    Args:
      results: what the demo's ``results.json`` holds.
      study: :func:`cfjax.study.run`'s results (arrays indexed by predictor).
      times: the stages' wall times in seconds, by name.
    """
    from cfjax.representations.report import splits_section
    from cfjax.study import cftraining_report
    from cfjax.study.report import summary_section

    lines = [
        "# cfjax demo",
        "",
        f"Generated by `{results['command']}` (seed {results['seed']}); built-in synthetic data, nothing "
        "downloaded. Run times: " + ", ".join(f"{k} {v:.0f} s" for k, v in times.items()) + ".",
        "",
    ]
    lines += summary_section(
        study,
        results["marginalisation"].get("grid"),
        title="1. Counterfactual marginalisation of trained classifiers (paper 000)",
    )
    lines += sensitivity_section(
        results["sensitivity"],
        title="2. Sensitivity of counterfactual fairness to unmeasured confounding (paper 001)",
    )
    lines += splits_section(
        results["representations"], title="3. Counterfactual representations (paper 002)"
    )
    if "training" in results:
        lines += cftraining_report.summary_section(
            results["training"], title="4. Counterfactual training against the sex shortcut"
        )
    lines += [
        "",
        "## Files",
        "",
        "`results.json` (every number above and the study's), `run_times.json`, "
        "`counterfactual_grid.png` (and `.pdf`), "
        "`cfu_curve.png`, "
        "`marginalisation/` (the study: report.md, results.json, reliability and ΔAUC-vs-stability figures "
        "per setting, predictions, orbax checkpoints of the classifiers and generators).",
    ]
    return "\n".join(lines) + "\n"
