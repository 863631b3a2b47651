"""``cfjax evaluate``: a predictions file → the counterfactual-marginalisation report.

The file holds a predictor's scores on n observed units, ``p_obs``, and on each unit's K
counterfactuals, ``p_cf``; optionally the labels ``y``, the counterfactual labels ``y_cf`` (when
an intervention changes the label), the intervention weights and group columns (the file
layouts, the group-column rule and the checks: :mod:`cfjax.metrics.files`). The command
writes ``report.md`` (every field of :func:`cfjax.metrics.evaluate` with percentile bootstrap
intervals from :func:`cfjax.metrics.evaluate_bootstrap`), ``results.json`` (every number,
byte-identical for the same seed), one smoothed reliability diagram of ``p_obs`` and of the
marginalised prediction with bootstrap bands (``reliability.png`` and ``.pdf``, when matplotlib
is installed) and the ΔAUC of each group column.

With counterfactual labels (they need ``y``) the report is :func:`cfjax.metrics.evaluate`'s with
``y_cf``: the interventional, CVaR and worst-case risks score ``p_cf[i, k]`` against
``y_cf[i, k]``, the marginalised prediction is scored against the unit's label averaged over its
counterfactuals, ``ȳ[i] = Σ_k q_k y_cf[i, k]`` (its reliability diagram too), and ``risk_orig``
and the observed calibration against ``y``.
"""

from __future__ import annotations

import os
from typing import Any

import click
import numpy as np

from cfjax._results import plain
from cfjax.cli import common
from cfjax.cli.common import UserError

__all__ = ["command"]

#: Resamples of the bootstrap by default and with ``--quick``.
RESAMPLES, QUICK_RESAMPLES = 1000, 200

_EXAMPLE = """\b
Example:
  cfjax evaluate --example-file preds.npz
  cfjax evaluate preds.npz --out results/evaluate
  cfjax evaluate --example-file preds.csv
  cfjax evaluate preds.csv --group sex --out results/evaluate_csv   # only group_sex
  cfjax evaluate preds.npz --devices 2 --force   # resamples split over 2 devices
  # one of cfjax demo's predictors (10 predictors x 2 seeds in the file):
  # cfjax evaluate results/demo/marginalisation/predictions_A.npz --predictor basic --group sex
"""


# ----------------------------------------------------------------------------- the report
def _strip_labels(d: dict[str, Any], labelled: bool) -> dict[str, Any]:
    from cfjax.metrics.report import LABEL_FIELDS

    return d if labelled else {k: v for k, v in d.items() if k not in LABEL_FIELDS}


def _rows(
    est: dict, low: dict, high: dict, meaning: dict[str, str]
) -> list[tuple[str, Any, Any, Any, str]]:
    """The report table's rows; ``meaning``: :func:`cfjax.metrics.descriptions` (every field
    has one: a field without is a programming error)."""
    rows = []
    for name, value in est.items():
        if name in ("labels", "classes"):
            continue
        if isinstance(value, dict):  # risk_cvar: {alpha: value}
            for a, v in value.items():
                rows.append((f"{name} (alpha={a})", v, low[name][a], high[name][a], meaning[name]))
        else:
            rows.append((name, value, low[name], high[name], meaning[name]))
    return rows


def _fmt(v: Any) -> str:
    return "n/a" if v is None or (isinstance(v, float) and not np.isfinite(v)) else f"{v:.4f}"


def _reliability_inputs(
    p: np.ndarray, labels: np.ndarray, q: np.ndarray, classes: int | None
) -> tuple[np.ndarray, np.ndarray]:
    """The scores and labels of a reliability diagram. Binary scores: ``p`` against ``y (n,)``,
    or against ``ȳ = y_cf @ q`` for counterfactual labels ``(n, K)``. Class probabilities: the
    top-label confidence against whether the argmax class is the label (its probability
    ``Σ_k q_k 1[y_cf[i, k] = argmax]`` for counterfactual labels)."""
    if classes is not None:
        top = p.argmax(-1)
        hit = (labels == top) if labels.ndim == 1 else (labels == top[:, None]) @ q
        return p.max(-1), hit.astype(np.int32) if labels.ndim == 1 else np.clip(hit, 0.0, 1.0)
    return p, labels if labels.ndim == 1 else np.clip(labels @ q, 0.0, 1.0)


def _figures(out: str, bands: dict[str, Any]) -> tuple[list[str], str | None]:
    """One reliability diagram of both predictions (:func:`cfjax.metrics.plots.reliability_diagram`)
    with their bootstrap bands: ``reliability.png`` and ``reliability.pdf`` in ``out``."""
    from cfjax import figures

    try:
        figures.pyplot()
    except ImportError:
        return (
            [],
            "matplotlib is not installed: no reliability figures (pip install 'cfjax[plots]').",
        )
    from matplotlib.figure import Figure

    from cfjax.metrics.plots import reliability_diagram

    fig = reliability_diagram(
        bands["obs"],
        bands.get("cm"),
        labels=("p_obs", "marginalised"),
        title="Smoothed reliability",
    )
    assert isinstance(fig, Figure)  # no ax given: a figure of its own
    return [
        os.path.basename(f) for f in figures.save_figure(fig, os.path.join(out, "reliability.png"))
    ], None


def _evaluate(
    data: dict[str, Any],
    *,
    seed: int,
    resamples: int,
    level: float,
    tau: float,
    figures: bool,
    out: str,
    source: str,
    devices: int | None = None,
    log: Any = lambda message: None,
) -> tuple[dict[str, Any], str]:
    import jax

    from cfjax import distributed, metrics

    p_obs, p_cf, y, y_cf, w = data["p_obs"], data["p_cf"], data["y"], data["y_cf"], data["weights"]
    classes = data["classes"]
    n, k = p_cf.shape[:2]
    log(
        f"every metric on {n} units × K = {k}, with {resamples} bootstrap resamples (the first run compiles)"
    )
    boot = metrics.evaluate_bootstrap(
        p_obs,
        p_cf,
        y,
        y_cf=y_cf,
        key=jax.random.key(seed),
        resamples=resamples,
        level=level,
        weights=w,
        tau=tau,
        mesh=distributed.as_mesh(devices),
    )
    labelled = y is not None
    q = np.full(k, 1.0 / k) if w is None else np.asarray(w, np.float64)
    est, low, high = (
        _strip_labels(r.to_dict(), labelled) for r in (boot.estimate, boot.low, boot.high)
    )
    results: dict[str, Any] = {
        "input": {
            "file": os.path.basename(source),
            "format": data["format"],
            "n": n,
            "K": k,
            "classes": classes,
            "labels": labelled,
            "counterfactual_labels": y_cf is not None,
            "weights": "uniform" if w is None else plain(w, strict=True, shortest=True),
            "predictor": data["predictor"],
            "not_read": data["unused"],
        },
        # class probabilities decide by the argmax: no threshold
        "options": {
            "seed": seed,
            "resamples": resamples,
            "level": level,
            "tau": None if classes else tau,
        },
        "estimate": est,
        "low": low,
        "high": high,
        "groups": {},
        "reliability": {},
    }
    notes: list[str] = []
    if data["unused"]:
        notes.append(
            f"Not read from the file: {', '.join(data['unused'])} (group columns are named with --group, "
            "or named group_<name> to be used without it)."
        )
    if y_cf is not None:
        changed = float(np.mean(y_cf != y[:, None]))
        notes.append(
            f"Counterfactual labels (y_cf; {100 * changed:.1f}% of the n × K differ from y): "
            "risk_ie, risk_cvar and risk_wc score each counterfactual against its own label; "
            "the marginalised prediction's risk, Brier, ECE, smooth ECE and MCE and its "
            "reliability diagram use the unit's label averaged over the interventions; "
            "risk_orig, the observed calibration and ΔAUC use y."
        )
    if not labelled:
        notes.append(
            "No labels (`y`) in the file: only the label-free stability fields are "
            "reported; risks, calibration, reliability diagrams and ΔAUC need labels."
        )
    p_bar = (
        np.asarray(metrics.marginalise(p_cf, w))
        if classes is None
        else np.einsum("k,nkc->nc", q, p_cf)
    )
    curves = {}
    if labelled:
        log(
            "reliability curves"
            + (f" and ΔAUC of {len(data['groups'])} group column(s)" if data["groups"] else "")
        )
        for which, p in (("obs", p_obs), ("cm", p_bar.astype(p_obs.dtype))):
            labels = y_cf if which == "cm" and y_cf is not None else y
            pp, yy = _reliability_inputs(p, labels, q, classes)
            # the report's resamples (same key: the smECE interval is the table's)
            band = metrics.reliability_band(
                pp,
                yy.astype(pp.dtype) if yy.dtype.kind == "f" else yy,
                key=jax.random.key(seed),
                resamples=resamples,
                level=level,
                grid=201,
            )
            curves[which] = band
            c, every = band.curve, slice(None, None, 10)  # 21 of the 201 points in results.json
            results["reliability"][which] = {
                "t": np.asarray(c.t)[every],
                "mean_label": np.asarray(c.mean_label)[every],
                "low": np.asarray(band.low)[every],
                "high": np.asarray(band.high)[every],
                "density": np.asarray(c.density)[every],
                "bandwidth": float(c.bandwidth),
                "smooth_ece": float(c.smooth_ece),
                "smooth_ece_low": float(band.smooth_ece_low),
                "smooth_ece_high": float(band.smooth_ece_high),
            }
        if classes is not None:
            notes.append("Class probabilities: reliability of the top-label confidence.")
    for g, col in data["groups"].items():
        if not labelled:
            break
        if classes is not None:
            notes.append(f"Group {g!r}: ΔAUC needs binary scores; skipped for class probabilities.")
            continue
        values, codes = np.unique(col, return_inverse=True)
        entry = {
            "values": [v.item() if hasattr(v, "item") else v for v in values],
            "counts": np.bincount(codes.reshape(-1), minlength=len(values)),
        }
        for which, p in (("obs", p_obs), ("cm", p_bar.astype(p_obs.dtype))):
            entry[f"auc_{which}"] = np.asarray(
                metrics.stratified_auc(p, y, codes.reshape(-1).astype(np.int32))
            )
            entry[f"delta_auc_{which}"] = float(
                metrics.delta_auc(p, y, codes.reshape(-1).astype(np.int32))
            )
        results["groups"][g] = entry
    files: list[str] = []
    if curves and figures:
        files, note = _figures(out, curves)
        if note:
            notes.append(note)
    elif curves:
        notes.append("Figures skipped (--quick).")
    results["figures"] = files
    results["notes"] = notes
    return results, _markdown(results, source)


def _markdown(r: dict[str, Any], source: str) -> str:
    from cfjax.metrics.report import NOTATION, descriptions

    inp, opt = r["input"], r["options"]
    meaning = descriptions(
        classes=inp["classes"] is not None, counterfactual_labels=inp["counterfactual_labels"]
    )
    decisions = (
        "decisions by the argmax class"
        if inp["classes"]
        else f"decision threshold tau = {opt['tau']:g}"
    )
    pct = f"{100 * opt['level']:g}%"
    chosen = inp["predictor"]
    which = (
        f"Predictor {chosen['name']!r}, training seed {chosen['seed']} (of the file's {chosen['predictors']} "
        f"predictors × {chosen['seeds']} seeds). "
        if chosen
        else ""
    )
    lines = [
        f"# Counterfactual-marginalisation report: {inp['file']}",
        "",
        which
        + f"{inp['n']} units, K = {inp['K']} interventions"
        + (f", {inp['classes']} classes" if inp["classes"] else ", binary scores")
        + f", weights {'uniform' if inp['weights'] == 'uniform' else inp['weights']}, "
        + (
            (
                "labels and counterfactual labels given"
                if inp["counterfactual_labels"]
                else "labels given"
            )
            if inp["labels"]
            else "no labels (stability fields only)"
        )
        + ".",
        f"Intervals: percentile bootstrap over units, {opt['resamples']} resamples, "
        f"level {pct}, seed {opt['seed']}; {decisions}.",
        "",
        f"Definitions (docs/definitions.md §1): {NOTATION}.",
        "",
    ]
    lines += [f"| metric | estimate | {pct} interval | definition |", "|---|---:|---:|---|"]
    for name, v, lo, hi, text in _rows(r["estimate"], r["low"], r["high"], meaning):
        cell = text.replace("|", "\\|")  # absolute values: a bar inside a markdown cell is escaped
        lines.append(f"| {name} | {_fmt(v)} | [{_fmt(lo)}, {_fmt(hi)}] | {cell} |")
    if r["groups"]:
        lines += [
            "",
            "## AUC by group",
            "",
            "ΔAUC = largest minus smallest AUC over a column's groups, of p_obs and of the "
            "marginalised prediction.",
            "",
            "| column | group | units | AUC p_obs | AUC marginalised |",
            "|---|---|---:|---:|---:|",
        ]
        for g, e in r["groups"].items():
            for v, c, a, b in zip(
                e["values"], np.asarray(e["counts"]).tolist(), e["auc_obs"], e["auc_cm"]
            ):
                lines.append(f"| {g} | {v} | {c} | {_fmt(float(a))} | {_fmt(float(b))} |")
            lines.append(
                f"| {g} | **ΔAUC** | | **{_fmt(e['delta_auc_obs'])}** | **{_fmt(e['delta_auc_cm'])}** |"
            )
    if r["figures"]:
        lines += ["", "## Reliability", ""]
        lines += [f"![{f}]({f})" for f in r["figures"] if f.endswith(".png")]
        lines += [
            "",
            f"*The mean label smoothed by a Gaussian kernel (reflected at 0 and 1, width σ\\* of the "
            f"smooth ECE) against the prediction, for p_obs and the marginalised prediction; shaded: "
            f"{pct} bootstrap bands over units (drawn where the kernel holds at least one unit); beneath: the "
            "density of the predictions. Where a curve "
            "leaves the diagonal by more than its band, the predictions are miscalibrated there; where "
            "the two bands overlap, marginalising over the counterfactuals leaves calibration unchanged "
            "within sampling error. Vector version: "
            + ", ".join(f for f in r["figures"] if not f.endswith(".png"))
            + ".*",
        ]
    if r["notes"]:
        lines += ["", "## Notes", ""] + [f"- {n}" for n in r["notes"]]
    return "\n".join(lines) + "\n"


@click.command(epilog=_EXAMPLE, context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("predictions", required=False)
@common.out_option("results/evaluate")
@common.force_option
@common.seed_option
@click.option(
    "--resamples",
    type=click.IntRange(min=1),
    default=None,
    help=f"bootstrap resamples [default: {RESAMPLES}; {QUICK_RESAMPLES} with --quick]",
)
@click.option(
    "--quick", is_flag=True, help=f"a first look: {QUICK_RESAMPLES} resamples, no figures"
)
@click.option(
    "--level",
    type=click.FloatRange(0, 1, min_open=True, max_open=True),
    default=0.95,
    show_default=True,
    help="coverage of the bootstrap intervals",
)
@click.option(
    "--tau",
    type=click.FloatRange(0, 1),
    default=0.5,
    show_default=True,
    help="decision threshold of the binary scores (s_flip, d_obs)",
)
@click.option(
    "--weights",
    default=None,
    metavar="W0,W1,...|FILE",
    help="intervention weights (K values summing to 1), or a file of them; "
    "default: the file's 'weights' array (npz) or uniform",
)
@click.option(
    "--group",
    "groups",
    multiple=True,
    metavar="COL",
    help="a group column or array for ΔAUC, COL or group_COL (repeatable); without --group "
    "every column or array named group_<name>, in every format",
)
@click.option(
    "--predictor",
    default=None,
    metavar="NAME",
    help="in a .npz of several predictors (arrays names, seeds; as cfjax demo writes): the one "
    "to evaluate",
)
@click.option(
    "--predictor-seed",
    type=int,
    default=None,
    metavar="S",
    help="with --predictor: its training seed [default: the file's first]",
)
@click.option(
    "--example-file",
    default=None,
    metavar="PATH",
    help="write a synthetic predictions file (.npz or .csv) to PATH and exit",
)
@common.devices_option
def command(
    predictions,
    out,
    force,
    seed,
    resamples,
    quick,
    level,
    tau,
    weights,
    groups,
    predictor,
    predictor_seed,
    example_file,
    devices,
):
    """Evaluate a predictor on its counterfactuals: PREDICTIONS (.npz, .csv or .parquet) →
    report.md, results.json and reliability diagrams in --out.

    The file holds p_obs (n scores on the observed units), p_cf (the n × K scores on their
    counterfactuals; CSV columns p_cf_0 … p_cf_{K-1}), optionally labels y (0/1), counterfactual
    labels y_cf (n × K; CSV columns y_cf_0 … y_cf_{K-1}), weights and group columns (--group;
    without it, those named group_<name>). Without labels only the stability fields are
    reported. A .npz of several predictors (cfjax demo's marginalisation/predictions_*.npz)
    needs --predictor. Rows in messages are data rows counted from 1.
    """
    devices = common.use_devices(devices)  # before anything starts JAX
    from cfjax.metrics.files import load_predictions, write_example

    if example_file is not None:
        if os.path.exists(example_file) and not force:
            raise UserError(f"--example-file {example_file}: exists; pass --force to overwrite it")
        write_example(example_file, seed=seed)
        click.echo(f"wrote {example_file}; now run: cfjax evaluate {example_file} --out {out}")
        return
    if predictions is None:
        raise UserError(
            "missing PREDICTIONS file (a .npz, .csv or .parquet); "
            "`cfjax evaluate --example-file preds.npz` writes an example"
        )
    data = load_predictions(predictions, tuple(groups), weights, predictor, predictor_seed)
    if data["classes"] is not None and tau != 0.5:
        raise UserError(
            f"--tau {tau:g}: class probabilities decide by the argmax; --tau applies "
            "to binary scores only"
        )
    prepare = common.prepare_out(out, force)
    b = resamples if resamples is not None else (QUICK_RESAMPLES if quick else RESAMPLES)
    results, text = _evaluate(
        data,
        seed=seed,
        resamples=b,
        level=level,
        tau=tau,
        figures=not quick,
        out=prepare,
        source=predictions,
        devices=devices,
        log=common.progress("evaluate"),
    )
    common.write_json(os.path.join(out, "results.json"), results)
    common.write_text(os.path.join(out, "report.md"), text)
    click.echo(
        f"wrote {os.path.join(out, 'report.md')}, results.json"
        + "".join(f", {f}" for f in results["figures"])
    )
    for n in results["notes"]:
        click.echo(n)
