"""The training arm's report (:func:`cfjax.study.cftraining.run_arm` writes it): the arm's
metrics and their labels (:data:`METRICS`), the findings measured from its rows, ``report.md``
(:func:`arm_report`), the arm's section of ``cfjax demo``'s report (:func:`summary_section`) and
the figure of the counterfactual sex effect per method (``sex_effect.png``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = [
    "METRICS",
    "arm_report",
    "summary_section",
]

#: the arm's metrics, their labels, and whether larger is better (None: closer to 0)
METRICS = (
    ("auc_a", "AUC site A", True),
    ("auc_b", "AUC site B", True),
    ("delta_auc_sex", "ΔAUC sex", False),
    ("sex_effect", "CF sex effect", None),
    ("risk_cm", "R_CM", False),
    ("s_flip", "s_flip", False),
)


def _row(results: dict[str, Any], method: str, bias: float) -> dict[str, Any] | None:
    for r in results["rows"]:
        if r["method"] == method and r["bias"] == bias:
            return r
    return None


def findings(results: dict[str, Any]) -> list[str]:
    """Sentences measured from the rows: per α, which methods bring the counterfactual sex
    effect back to the unbiased classifier's (its mean inside the method's interval) and at
    what AUC, against the biased basic classifier."""
    ref = _row(results, "unbiased", 0.0)
    lines: list[str] = []
    if ref is None:
        return lines
    e0 = ref["sex_effect"]["mean"]
    biases = sorted({r["bias"] for r in results["rows"] if r["bias"] > 0})
    for alpha in biases:
        basic = _row(results, "basic", alpha)
        assert basic is not None  # every α > 0 has a basic row
        rows = [r for r in results["rows"] if r["bias"] == alpha and r["method"] != "basic"]
        back = [r for r in rows if r["sex_effect"]["ci95"][0] <= e0 <= r["sex_effect"]["ci95"][1]]
        best = min(rows, key=lambda r: abs(r["sex_effect"]["mean"] - e0)) if rows else None
        text = (
            f"α = {alpha:g}: basic's sex effect is {basic['sex_effect']['mean']:+.3f} "
            f"[{basic['sex_effect']['ci95'][0]:+.3f}, {basic['sex_effect']['ci95'][1]:+.3f}] against the unbiased "
            f"classifier's {e0:+.3f}; AUC on site A {basic['auc_a']['mean']:.3f}. "
        )
        if back:
            text += (
                "Back to the unbiased effect within the interval: "
                + ", ".join(
                    f"{r['method']} ({r['sex_effect']['mean']:+.3f}, AUC {r['auc_a']['mean']:.3f} "
                    f"[{r['auc_a']['ci95'][0]:.3f}, {r['auc_a']['ci95'][1]:.3f}])"
                    for r in back
                )
                + ". "
            )
        else:
            text += "No method brings it back within its interval. "
        if best is not None:
            text += f"Closest: {best['method']} ({best['sex_effect']['mean']:+.3f})."
        learned = [
            (r, _row(results, r["method"][: -len(" (learned)")], alpha))
            for r in rows
            if r["method"].endswith(" (learned)")
        ]
        if learned:
            text += (
                " Learned against exact counterfactuals: "
                + "; ".join(
                    f"{r['method']} {r['sex_effect']['mean']:+.3f} (AUC {r['auc_a']['mean']:.3f}) against "
                    f"{e['sex_effect']['mean']:+.3f} (AUC {e['auc_a']['mean']:.3f})"
                    for r, e in learned
                    if e
                )
                + "."
            )
        lines.append(text)
    return lines


def _fmt(v: dict[str, Any], digits: int = 3) -> str:
    return f"{v['mean']:.{digits}f} [{v['ci95'][0]:.{digits}f}, {v['ci95'][1]:.{digits}f}]"


def arm_report(results: dict[str, Any]) -> str:
    """The arm's report (markdown): one table per bias strength and the findings."""
    cfg = results["config"]
    lines = [
        "# Counterfactual training against a sex shortcut",
        "",
        f"Site A of the synthetic chest SCM ({cfg['study']['size']}×{cfg['study']['size']} images, "
        f"{cfg['study']['n_train']} training units before the corruption), seeds {cfg['seeds']}, K = "
        f"{results['k']} counterfactuals per training unit (do(sex, age), effusion held). Every number is the "
        f"seed mean with a 95% percentile bootstrap interval over test units ({results['n_test_a']} on site A's "
        f"balanced split, {results['n_test_b']} on site B's natural set) and seeds. The CF sex effect is "
        "mean p(do(F)) − p(do(M)) on site A's exact test counterfactuals; R_CM and s_flip as in paper 000.",
        "",
    ]
    head = "| method | " + " | ".join(label for _, label, _ in METRICS) + " |"
    sep = "|---" * (len(METRICS) + 1) + "|"
    ref = _row(results, "unbiased", 0.0)
    for alpha in sorted({r["bias"] for r in results["rows"] if r["bias"] > 0}):
        lines += [f"## α = {alpha:g}", "", head, sep]
        rows = ([ref] if ref else []) + [r for r in results["rows"] if r["bias"] == alpha]
        for r in rows:
            name = "unbiased (reference)" if r["bias"] == 0 else r["method"]
            lines.append(f"| {name} | " + " | ".join(_fmt(r[m]) for m, _, _ in METRICS) + " |")
        lines.append("")
    lines += (
        ["## Findings", ""]
        + [f"- {f}" for f in results["findings"]]
        + ["", "![](sex_effect.png)", ""]
    )
    return "\n".join(lines)


def summary_section(
    results: Mapping[str, Any],
    title: str = "Counterfactual training against the sex shortcut",
    folder: str = "training",
) -> list[str]:
    """The arm in one table, for a report that links to its full one (``cfjax demo``'s fourth
    section): the strongest bias's methods and the unbiased reference on site A and B, with the
    findings and the arm's figure (in ``folder``, relative to the report); its lines, from a
    blank line and the ``## title`` heading. ``results``:
    :func:`~cfjax.study.cftraining.run_arm`'s, as plain values."""
    shown = ("auc_a", "auc_b", "sex_effect", "s_flip")
    labels = {m: label for m, label, _ in METRICS}
    alpha = max(r["bias"] for r in results["rows"])
    rows = [r for r in results["rows"] if r["bias"] in (0.0, alpha)]
    lines = [
        "",
        f"## {title}",
        "",
        f"The study's site-A training pool with paper 000's sex corruption at α = {alpha:g}; each method "
        f"trained with {len(rows[0]['auc_a']['per_seed'])} seeds as one vmapped ensemble per counterfactual "
        f"source, K = {results['k']} counterfactuals per training "
        "unit rendered (exact) or decoded (learned) inside the training step. Seed means [95% bootstrap "
        "intervals over test units and seeds]; the CF sex effect is mean p(do(F)) − p(do(M)) on site A's exact "
        f"test counterfactuals (`{folder}/report.md` has every metric).",
        "",
        "| method | " + " | ".join(labels[m] for m in shown) + " |",
        "|---" * (len(shown) + 1) + "|",
    ]
    for r in rows:
        name = "unbiased (reference)" if r["bias"] == 0 else r["method"]
        lines.append(
            f"| {name} | "
            + " | ".join(
                f"{r[m]['mean']:.3f} [{r[m]['ci95'][0]:.3f}, {r[m]['ci95'][1]:.3f}]" for m in shown
            )
            + " |"
        )
    lines += [
        "",
        *[f"- {f}" for f in results["findings"]],
        "",
        f"![CF sex effect per method]({folder}/sex_effect.png)",
    ]
    return lines


def _figure(results: dict[str, Any], path: str) -> None:
    """The counterfactual sex effect of every method per α, with its interval; the unbiased
    classifier's as a line."""
    from cfjax import figures

    plt = figures.pyplot()
    biases = sorted({r["bias"] for r in results["rows"] if r["bias"] > 0})
    methods = list(dict.fromkeys(r["method"] for r in results["rows"] if r["bias"] > 0))
    fig, ax = plt.subplots(figsize=(1.0 + 0.55 * len(methods), 3.2))
    width = 0.8 / max(len(biases), 1)
    for j, alpha in enumerate(biases):
        xs: list[float] = []
        ys: list[float] = []
        err: list[list[float]] = [[], []]
        for i, meth in enumerate(methods):
            r = _row(results, meth, alpha)
            if r is None:
                continue
            e = r["sex_effect"]
            xs.append(i + (j - (len(biases) - 1) / 2) * width)
            ys.append(e["mean"])
            err[0].append(e["mean"] - e["ci95"][0])
            err[1].append(e["ci95"][1] - e["mean"])
        ax.errorbar(xs, ys, yerr=err, fmt="o", ms=3, capsize=2, label=f"α = {alpha:g}")
    ref = _row(results, "unbiased", 0.0)
    if ref is not None:
        ax.axhline(ref["sex_effect"]["mean"], color="0.3", lw=0.8, ls="--", label="unbiased")
    ax.set_xticks(range(len(methods)))
    ax.set_xticklabels(methods, rotation=45, ha="right", fontsize=7)
    ax.set_ylabel("CF sex effect\nmean p(do(F)) − p(do(M))", fontsize=8)
    ax.legend(fontsize=7, frameon=False)
    fig.tight_layout()
    figures.save_figure(fig, path)
    plt.close(fig)
