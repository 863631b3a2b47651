"""Paper 001's sensitivity analyses as a reviewer asks for them: how strong is the confounding a
budget allows, measured against the data (benchmarks), how sure are the numbers (bootstrap
intervals), and what the fair predictor buys over the baselines at each budget.

For the built-in synthetic SCM (true error correlation 0.5), the law school data and the NHS
staff survey, with the paper's recipe (the settings of :mod:`experiments.sensitivity`):

- benchmarked budgets (definitions §3.9): the error correlation one unmeasured confounder would
  induce if it explained k = 1, 2, 3 times as much of each feature's variance as an observed
  variable does, the CFU there and the worst case within that budget;
- the worst-case CFU of the fair predictor, the unconstrained and the blind baselines over the
  same budgets (each predictor's own worst case);
- percentile bootstrap intervals (units resampled, Models A/B and the predictors refitted with
  the full data's choices) of the fair predictor's worst case at each budget, of the benchmarks'
  budgets and CFU, and of the inverse budget for the blind baseline's unfairness;
- a contour of CFU over two error correlations (NHS: three features), with the region where P is
  not positive definite shaded and the benchmarks and worst cases marked.

Run: ``python -m experiments.sensitivity_review [--data-dir ../shared/data] [--resamples 200]
[--only synthetic law_school nhs] [--quick]`` (float64). Writes ``review.md``, ``review.json`` and
the figures into ``experiments/reports/sensitivity``; ``--only`` rewrites those sections and
keeps the others.
"""

from __future__ import annotations

import argparse
import json
import os
import time

import jax
import numpy as np

jax.config.update("jax_enable_x64", True)

import cfjax as cf  # noqa: E402
import cfjax.sensitivity as S  # noqa: E402
from cfjax.io import atomic_write_bytes  # noqa: E402
from experiments.sensitivity import LAW_SETTINGS, NHS_SETTINGS  # noqa: E402

K = (1.0, 2.0, 3.0)
PAIRS = {"nhs": (("O", "M"), ("M", "J"))}


def strict_plain(x):
    """``x`` as JSON-ready Python: arrays as lists, numbers as floats, NaN and infinities as None."""
    if isinstance(x, dict):
        return {str(k): strict_plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [strict_plain(v) for v in x]
    if isinstance(x, (str, bool, type(None))):
        return x
    a = np.asarray(x)
    if a.ndim:
        return [strict_plain(v) for v in a]
    v = a.item()
    return v if not isinstance(v, float) or np.isfinite(v) else None


def _fmt(x) -> str:
    if x is None:
        return "n/a"
    x = float(x)
    if np.isposinf(x):
        return "not reached"
    return "n/a" if not np.isfinite(x) else f"{x:.3g}"


def _interval(est, lo, hi) -> str:
    return f"{_fmt(est)} [{_fmt(lo)}, {_fmt(hi)}]"


def analyse(name: str, prob, settings, budgets, key, resamples: int, search: dict, out: str,
            boot: dict | None = None, light: bool = False) -> dict:
    """One data set's review: benchmarks, every predictor's curve, intervals, contour; ``light``:
    the benchmarks and the fair predictor's worst case at their budgets only (with intervals
    when ``resamples``)."""
    t0 = time.perf_counter()
    model = S.fit(prob.graph, prob.data, settings)
    t_fit = time.perf_counter() - t0
    bench = S.benchmarks(model, k=K)
    bench_budgets = np.unique(np.asarray(bench.p_max)[np.asarray(bench.feasible) & (np.asarray(bench.p_max) > 0)])
    grid = np.unique(np.concatenate([budgets, bench_budgets]))
    if light:  # the benchmarks and the fair predictor's worst case at their budgets only
        grid = bench_budgets
    t1 = time.perf_counter()
    curves = {p: S.worst_case(model.scoring(p), grid, key=key,
                              config=S.SearchConfig(**search)) for p in (("fair",) if light else S.PREDICTORS)}
    t_curves = time.perf_counter() - t1
    blind = float(model.baseline_unfairness["blind"])
    t2 = time.perf_counter()
    inverse = None if light else S.inverse_budget(model, blind, key=key, config=S.SearchConfig(**search))
    t_inverse = time.perf_counter() - t2
    t3 = time.perf_counter()
    intervals = None
    if resamples:
        intervals = S.bootstrap(model, grid, key=jax.random.fold_in(key, 7), resamples=resamples, worst=curves["fair"],
                                benchmarks=K, levels=None if light else {"blind": "blind"}, **(boot or {}))
    t_boot = time.perf_counter() - t3
    marks = {f"{z} ×{k:g}": float(bench.p_max[v, i]) for v, z in enumerate(bench.yardsticks)
             for i, k in enumerate(bench.k) if bool(bench.feasible[v, i]) and float(bench.p_max[v, i]) > 0}
    at_bench = {label: _at(curves["fair"], p) for label, p in marks.items()}
    common = {"n": prob.data.n, "features": list(prob.graph.features), "parents": [list(p) for p in prob.graph.parents],
              "degrees": list(model.degrees), "lam": model.lam, "baseline_unfairness": model.baseline_unfairness,
              "benchmarks": bench.to_dict(), "worst_case_at_benchmarks": at_bench, "search": search,
              "resamples": resamples, "curves": {p: w.to_dict() for p, w in curves.items()}}
    if light:
        return strict_plain({**common, "light": True, "intervals": None if intervals is None else intervals.to_dict(),
                             "seconds": {"fit": t_fit, "curves": t_curves, "bootstrap": t_boot},
                             "backend": jax.default_backend(), "xla_flags": os.environ.get("XLA_FLAGS", "")})
    fig = S.plot_curve({p: curves[p] for p in S.PREDICTORS}, model=model, benchmarks=marks,
                       low={"fair": intervals.low["worst_case"]}, high={"fair": intervals.high["worst_case"]},
                       style=S.CurveStyle(title=f"{TITLES[name].split(' (')[0]}: worst-case CFU of each predictor "
                                                "(fair: 95% bootstrap band)"))
    cf.figures.save_figure(fig, os.path.join(out, f"review_{name}_curve.png"))
    contour = None
    if name in PAIRS:
        t4 = time.perf_counter()
        surface = S.cfu_surface(model, PAIRS[name], 25 if resamples < 50 else 41)
        P_bench = {f"{z} ×{k:g}": np.asarray(bench.P[v, i]) for v, z in enumerate(bench.yardsticks)
                   for i, k in enumerate(bench.k) if bool(bench.feasible[v, i]) and float(bench.p_max[v, i]) > 0}
        fig = S.plot_contour(surface, benchmarks=P_bench, worst=curves["fair"],
                             title=f"{TITLES[name].split(' (')[0]}: CFU over two error correlations (others 0)")
        cf.figures.save_figure(fig, os.path.join(out, f"review_{name}_contour.png"))
        contour = {"pairs": [list(p) for p in PAIRS[name]], "seconds": time.perf_counter() - t4}
    true = getattr(prob, "true_correlation", None)
    return strict_plain({
        **common, "true_correlation": None if true is None else true,
        "true_cfu": None if true is None else float(S.cfu(model, true)),
        "inverse": inverse.to_dict(), "intervals": intervals.to_dict(), "contour": contour,
        "seconds": {"fit": t_fit, "curves": t_curves, "inverse": t_inverse, "bootstrap": t_boot}})


def _at(wc, p: float) -> float:
    i = int(np.argmin(np.abs(np.asarray(wc.p_max) - p)))
    return float(wc.cfu[i])


def light_section(title: str, r: dict) -> list[str]:
    """The benchmarks and the fair predictor's worst case at their budgets (no intervals)."""
    b, iv = r["benchmarks"], r.get("intervals")
    what = (f"with {iv['resamples']} bootstrap resamples ({iv['level']:.0%} percentile intervals)" if iv else
            "no intervals")
    lines = [f"## {title}", "", f"{r['n']:,} units; equation degrees {r['degrees']}, λ = {_fmt(r['lam'])}. The "
             f"benchmarks and the fair predictor's worst case at their budgets, {what}; no baselines' curves and no "
             "inverse question here (at this size the full review costs hours on 2 CPU cores).", "",
             "| yardstick | k | partial R² per child | budget p_max | CFU at the benchmark | worst-case CFU within "
             "that budget |", "|---|---|---|---|---|---|"]

    def cell(name, v, i, value):
        if not iv or name not in iv["estimate"]:
            return _fmt(value)
        return _interval(value, iv["low"][name][v][i], iv["high"][name][v][i])

    grid = r["curves"]["fair"]["p_max"]
    for v, z in enumerate(b["yardsticks"]):
        r2 = ", ".join(f"{f} {x:.3g}" for f, x in zip(b["features"], b["r2"][v]) if x is not None)
        for i, k in enumerate(b["k"]):
            if not b["feasible"][v][i] or not b["p_max"][v][i]:
                lines.append(f"| {z} | {k:g} | {r2} | — | — | {b['reasons'][v][i]} |")
                continue
            worst = _fmt(r['worst_case_at_benchmarks'].get(f'{z} ×{k:g}'))
            if iv:
                j = int(np.argmin(np.abs(np.asarray(grid) - b["p_max"][v][i])))
                worst = _interval(r["curves"]["fair"]["cfu"][j], iv["low"]["worst_case"][j], iv["high"]["worst_case"][j])
            lines.append(f"| {z} | {k:g} | {r2} | {cell('benchmark_budget', v, i, b['p_max'][v][i])} | "
                         f"{cell('benchmark_cfu', v, i, b['cfu'][v][i])} | {worst} |")
    s = r["seconds"]
    return lines + ["", f"Run times: fit {s['fit']:.0f} s, worst cases at the benchmarks {s['curves']:.0f} s"
                    + (f", bootstrap {s['bootstrap']:.0f} s" if iv else "") + _where(r), ""]


def _where(r: dict) -> str:
    """Where a light section ran: its backend and XLA flags, if recorded."""
    if "backend" not in r:
        return "."
    flags = f"XLA_FLAGS `{r['xla_flags']}`" if r.get("xla_flags") else "XLA's default flags"
    return f" ({r['backend']}, {flags})."


def section(name: str, title: str, r: dict) -> list[str]:
    if r.get("light"):
        return light_section(title, r)
    b, iv, inv = r["benchmarks"], r["intervals"], r["inverse"]
    lines = [f"## {title}", "", f"{r['n']:,} units; features {r['features']} (parents "
             + "; ".join(f"{f} ← {', '.join(p)}" for f, p in zip(r["features"], r["parents"]))
             + f"); equation degrees {r['degrees']}, λ = {_fmt(r['lam'])}. Baselines' unfairness (their mean "
             f"squared difference from the fair predictor): unconstrained {_fmt(r['baseline_unfairness']['unconstrained'])}, "
             f"blind {_fmt(r['baseline_unfairness']['blind'])}.", ""]
    if r.get("true_correlation") is not None:
        lines += [f"True error correlation {np.asarray(r['true_correlation'])[0, 1]:.2f}; CFU at it {_fmt(r['true_cfu'])}.", ""]
    lines += ["### Benchmarks", "",
              "A confounder k times as strong as the yardstick (its partial R² in each feature's equation, given the "
              "other parents, k times the yardstick's) induces the error correlation below; its budget reading is the "
              f"largest |P_jk|. Intervals: {iv['resamples']} bootstrap resamples, {iv['level']:.0%} percentile.", "",
              "| yardstick | k | partial R² per child | budget p_max [interval] | CFU at the benchmark [interval] | "
              "worst-case CFU within that budget |", "|---|---|---|---|---|---|"]
    est_b, lo_b, hi_b = (iv[s].get("benchmark_budget") for s in ("estimate", "low", "high"))
    est_c, lo_c, hi_c = (iv[s].get("benchmark_cfu") for s in ("estimate", "low", "high"))
    for v, z in enumerate(b["yardsticks"]):
        r2 = ", ".join(f"{f} {x:.3g}" for f, x in zip(b["features"], b["r2"][v]) if x is not None)
        for i, k in enumerate(b["k"]):
            label = f"{z} ×{k:g}"
            if not b["feasible"][v][i] or not b["p_max"][v][i]:
                lines.append(f"| {z} | {k:g} | {r2} | — | — | {b['reasons'][v][i]} |")
                continue
            budget = _interval(b["p_max"][v][i], lo_b and lo_b[v][i], hi_b and hi_b[v][i])
            cfu = _interval(b["cfu"][v][i], lo_c and lo_c[v][i], hi_c and hi_c[v][i])
            lines.append(f"| {z} | {k:g} | {r2} | {budget} | {cfu} | {_fmt(r['worst_case_at_benchmarks'].get(label))} |")
    for (a, c), rho in zip(b["pairs"], b["pair_correlation"]):
        lines.append(f"| identified ({a}, {c}) | — | — | residual correlation {_fmt(rho)} | — | — |")
    lines += ["", f"![curve](review_{name}_curve.png)", "", "### Every predictor over the budget", "",
              "| p_max | fair: worst-case CFU [interval] | unconstrained | blind |", "|---|---|---|---|"]
    curves = r["curves"]
    for i, p in enumerate(curves["fair"]["p_max"]):
        lines.append(f"| {p:.3f} | {_interval(curves['fair']['cfu'][i], iv['low']['worst_case'][i], iv['high']['worst_case'][i])}"
                     f" | {_fmt(curves['unconstrained']['cfu'][i])} | {_fmt(curves['blind']['cfu'][i])} |")
    inv_iv = [iv[s].get("inverse/blind") for s in ("estimate", "low", "high")]
    reached = iv["not_reached"].get("inverse/blind")
    answer = (f"p_max = {_fmt(inv['p_max'])}" if inv["reached"] else
              f"not reached within p_max ≤ {_fmt(inv['lo'])} (largest worst case {_fmt(inv['max_cfu'])})")
    if reached == iv["resamples"]:
        boot = f"no resample reached its own blind unfairness within p_max ≤ {max(curves['fair']['p_max']):.2f}"
    else:
        boot = (f"bootstrap (each resample's own blind unfairness, bisected to within {iv['resolution']:.2g}): "
                f"{_interval(*inv_iv)}; {reached or 0} of {iv['resamples']} resamples did not reach it")
    lines += ["", "### Inverse question", "",
              f"The smallest budget whose worst-case CFU reaches the blind baseline's unfairness ({_fmt(inv['level'])}): "
              f"{answer}; {boot}.", ""]
    if r.get("contour"):
        lines += [f"![contour](review_{name}_contour.png)", ""]
    s = r["seconds"]
    lines += [f"Run times: fit {s['fit']:.0f} s, three curves {s['curves']:.0f} s, inverse {s['inverse']:.0f} s, "
              f"bootstrap ({r['resamples']} resamples) {s['bootstrap']:.0f} s.", ""]
    return lines


TITLES = {"synthetic": "Synthetic SCM (true correlation 0.5)", "law_school": "Law school (A → G, A → L, G → L)",
          "nhs": "NHS staff survey (O ← A; M ← A, O; J ← A, O, M)"}


def report(res: dict) -> str:
    lines = ["# cfjax: sensitivity analysis as a reviewer asks for it (paper 001)", "",
             "Generated by `python -m experiments.sensitivity_review` (float64). Definitions §3.7–3.9. The paper's "
             "text available to this project ends before its experiments and states no numbers read off its "
             "Figures 2 and 4; it fixes the shape (CFU 0 at P = I, rising with the budget, the baselines as the "
             "level of concern), which these results show, and proposes no benchmarks or intervals.", ""]
    for name in ("synthetic", "law_school", "nhs"):
        if name in res:
            lines += section(name, TITLES[name], res[name])
    return "\n".join(lines)


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--data-dir", default=os.path.join("..", "shared", "data"))
    ap.add_argument("--out", default=os.path.join("experiments", "reports", "sensitivity"))
    ap.add_argument("--resamples", type=int, default=200)
    ap.add_argument("--nhs-resamples", type=int, default=200,
                    help="bootstrap resamples of the NHS benchmarks (0: none)")
    ap.add_argument("--quick", action="store_true", help="few budgets and resamples")
    ap.add_argument("--only", choices=list(TITLES), nargs="*")
    args = ap.parse_args(argv)
    cf.platform.use_compilation_cache()
    os.makedirs(args.out, exist_ok=True)
    key = jax.random.key(0)
    budgets = np.linspace(0.0, 0.99, 4 if args.quick else 8)
    resamples = 20 if args.quick else args.resamples
    path = os.path.join(args.out, "review.json")
    res = {}
    if args.only and os.path.isfile(path):  # a partial run updates the other sections' report
        with open(path) as f:
            res = json.load(f)
    only = set(args.only or TITLES)
    if "synthetic" in only:
        res["synthetic"] = analyse("synthetic", S.synthetic(5000, correlation=0.5, key=0), LAW_SETTINGS, budgets, key,
                                   resamples, {}, args.out)
    law = os.path.join(args.data_dir, "lawschool.csv")
    if "law_school" in only and os.path.isfile(law):
        res["law_school"] = analyse("law_school", S.load_law_school(law), LAW_SETTINGS, budgets, key, resamples, {},
                                    args.out)
    nhs = os.path.join(args.data_dir, "nhs.npz")
    if "nhs" in only and os.path.isfile(nhs):
        res["nhs"] = analyse("nhs", S.load_nhs(nhs), NHS_SETTINGS, budgets, key,
                             args.nhs_resamples, dict(batch_size=4096, steps=200), args.out, light=True)
    atomic_write_bytes(path, json.dumps(res, indent=1).encode())
    atomic_write_bytes(os.path.join(args.out, "review.md"), report(res).encode())
    print(report(res))
    return res


if __name__ == "__main__":
    main()
