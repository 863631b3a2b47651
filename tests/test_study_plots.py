"""The study's ΔAUC-against-stability figures and their intervals (cfjax.study.plots,
cfjax.study.correlations): the intervals against loops over the same resamples, and the figures
drawn from small real results (the library's reports, ΔAUC and correlations on synthetic
predictions, as :func:`cfjax.study.evaluate_setting` computes them)."""

from __future__ import annotations

import copy
import itertools
import json
import re

import jax
import numpy as np
import pytest
from scipy import stats
from sklearn.metrics import roc_auc_score

import cfjax as cf
from cfjax import metrics as cm
from cfjax._results import plain
from cfjax.study import correlations as sc
from cfjax.study import evaluation as mg
from cfjax.study import plots
from cfjax.study import report_figures as R
from cfjax.study.paper import ATTRIBUTES, DELTA_NAMES, STABILITY

matplotlib = pytest.importorskip("matplotlib")
from matplotlib.collections import LineCollection  # noqa: E402
from matplotlib.text import Text  # noqa: E402

GROUPS = {"sex": 2, "age_group": 3, "race": 3}


def _codes(n: int) -> dict[str, np.ndarray]:
    """Stratum codes where every stratum holds both labels (units 2i and 2i + 1 share them)."""
    i = np.arange(n)
    return {"sex": (i // 2) % 2, "age_group": (i // 4) % 3, "race": (i // 12) % 3}


def _setting(rng, n: int = 96, seeds: int = 3, resamples: int = 40) -> dict:
    """One setting's results from the library on synthetic predictions of the ten predictors: a
    predictor-specific sex shortcut makes its counterfactual predictions move with do(sex)."""
    names = list(cf.study.families.PAPER_NAMES)
    n_pred = len(names)
    codes = _codes(n)
    y = (np.arange(n) % 2).astype(np.int32)
    sex = codes["sex"]
    bias = rng.uniform(0.0, 2.0, size=(n_pred, 1, 1))
    logit = (2.0 * (2 * y - 1) * (1 - 0.3 * bias * sex) + bias * (2 * sex - 1)
             + rng.normal(size=(n_pred, seeds, n)))
    sex_k = np.array([0, 0, 1, 1])
    logit_cf = logit[..., None] + bias[..., None] * 2 * (sex_k - sex[:, None])  # (P, S, N, K)
    p_obs = (1 / (1 + np.exp(-logit))).astype(np.float32)
    p_cf = (1 / (1 + np.exp(-logit_cf))).astype(np.float32)
    flat_obs, flat_cf = p_obs.reshape(n_pred * seeds, n), p_cf.reshape(n_pred * seeds, n, 4)
    key = jax.random.key(int(rng.integers(2**31)))
    boot = jax.vmap(lambda po, pc: cm.evaluate_bootstrap(po, pc, y, key=key, resamples=resamples))(
        flat_obs, flat_cf)
    per_seed = mg._report_fields(boot.estimate, n_pred, seeds)
    reps = mg._report_fields(boot.replicates, n_pred, seeds)  # (10, S, B)
    ci = {f: np.stack([np.percentile(v.mean(axis=1), 2.5, axis=-1), np.percentile(v.mean(axis=1), 97.5, axis=-1)],
                      axis=-1) for f, v in reps.items()}
    groups = {a: (codes[a], g) for a, g in GROUPS.items()}
    delta = {}
    for a, g in GROUPS.items():
        strat = jax.vmap(lambda p, c=codes[a], g=g: cm.stratified_auc(p, y, c, num_groups=g))(flat_obs)
        delta[a] = np.asarray(strat.max(axis=-1) - strat.min(axis=-1), np.float64).reshape(n_pred, seeds)
    delta_ci = sc.delta_auc_interval(p_obs, y, groups, key=key, resamples=resamples)
    rows = [names.index(p) for p in DELTA_NAMES]
    corr = {a: {f: sc.correlation(delta[a][rows], per_seed[f][rows], key=key, resamples=resamples)
                for f, _ in STABILITY} for a in ATTRIBUTES}
    return {"names": names, "seeds": list(range(seeds)), "per_seed": per_seed, "ci95_seed_mean": ci,
            "delta_auc": delta, "delta_auc_ci95_seed_mean": delta_ci, "correlations": corr}


@pytest.fixture(scope="module")
def setting():
    """One setting's results, built once for the figure tests (they check invariants of any data)."""
    return _setting(np.random.default_rng(20261205))


# ------------------------------------------------------------------------- intervals
def _pearson_or_nan(a, b):
    return np.nan if np.ptp(a) == 0 or np.ptp(b) == 0 else stats.pearsonr(a, b)[0]


def test_correlation_matches_a_loop_over_the_same_resamples(rng):
    x = rng.uniform(size=(7, 3))
    y = 2 * x + 0.3 * rng.normal(size=(7, 3))  # a clear association, as ΔAUC and s_flip in the study
    seed, b = int(rng.integers(2**31)), 300
    c = sc.correlation(x, y, key=seed, resamples=b)
    idx = np.asarray(cm.bootstrap_indices(7, b, key=seed))
    r_b = np.array([_pearson_or_nan(x[i].ravel(), y[i].ravel()) for i in idx])
    rho_b = np.array([stats.spearmanr(x[i].ravel(), y[i].ravel())[0] for i in idx])
    np.testing.assert_allclose(c["pearson"], stats.pearsonr(x.ravel(), y.ravel())[0], rtol=1e-12)
    np.testing.assert_allclose(c["spearman"], stats.spearmanr(x.ravel(), y.ravel())[0], rtol=1e-12)
    np.testing.assert_allclose(c["pearson_interval"], np.percentile(r_b, [2.5, 97.5]), rtol=1e-10)
    np.testing.assert_allclose(c["spearman_interval"], np.percentile(rho_b, [2.5, 97.5]), rtol=1e-10)
    assert c["pearson_interval"][0] <= c["pearson"] <= c["pearson_interval"][1]
    assert c["resamples"] == c["defined_resamples"] == b and c["interval_over"] == "predictors"


def test_correlation_leaves_out_resamples_without_a_correlation(rng):
    # only predictor 0 varies: a resample that misses it has constant pairs, so no r
    x = np.zeros((4, 2))
    x[0] = rng.uniform(1, 2, size=2)
    y = x + rng.uniform(size=(4, 2))
    c = sc.correlation(x, y, key=3, resamples=200)
    idx = np.asarray(cm.bootstrap_indices(4, 200, key=3))
    r_b = np.array([_pearson_or_nan(x[i].ravel(), y[i].ravel()) for i in idx])
    assert c["defined_resamples"] == int(np.isfinite(r_b).sum()) < 200
    np.testing.assert_allclose(c["pearson_interval"], np.percentile(r_b[np.isfinite(r_b)], [2.5, 97.5]),
                               rtol=1e-10)
    flat = sc.correlation(np.ones((3, 2)), rng.uniform(size=(3, 2)), key=0, resamples=10)
    assert np.isnan(flat["pearson"]) and np.isnan(flat["pearson_interval"]).all()
    # an undefined ΔAUC (a stratum with one class): no correlation, as scipy says
    x[1, 0] = np.nan
    c = sc.correlation(x, y, key=3, resamples=50)
    assert np.isnan([c["pearson"], c["spearman"], *c["pearson_interval"], *c["spearman_interval"]]).all()
    assert c["defined_resamples"] == 0


@pytest.mark.parametrize("kwargs, name", [
    ({"x": np.zeros((3, 2)), "y": np.zeros((3, 3))}, "y"),
    ({"x": np.zeros(6), "y": np.zeros(6)}, "x"),
    ({"x": np.zeros((1, 3)), "y": np.zeros((1, 3))}, "x"),
    ({"x": np.zeros((3, 2)), "y": np.zeros((3, 2)), "resamples": 0}, "resamples"),
    ({"x": np.zeros((3, 2)), "y": np.zeros((3, 2)), "level": 1.0}, "level"),
])
def test_correlation_rejects_bad_arguments(kwargs, name):
    with pytest.raises(cf.ValidationError, match=f"`{name}`"):
        sc.correlation(key=0, **kwargs)


def test_delta_auc_interval_matches_a_loop_over_the_same_resamples(rng):
    n, b = 48, 15
    codes = _codes(n)
    y = (np.arange(n) % 2).astype(np.int32)
    p = rng.uniform(size=(2, 2, n)).astype(np.float32)
    seed = int(rng.integers(2**31))
    got = sc.delta_auc_interval(p, y, {a: (codes[a], g) for a, g in GROUPS.items()}, key=seed, resamples=b)
    idx = np.asarray(cm.bootstrap_indices(n, b, key=seed))
    for a, g in GROUPS.items():
        means = np.full((b, 2), np.nan)
        for r, i in enumerate(idx):
            yy, cc = y[i], codes[a][i]
            if any(len(np.unique(yy[cc == s])) < 2 for s in range(g)):
                continue  # a stratum without both classes: no ΔAUC in this resample
            aucs = np.array([[[roc_auc_score(yy[cc == s], p[j, k][i][cc == s]) for s in range(g)]
                              for k in range(2)] for j in range(2)])  # (P, S, G)
            means[r] = (aucs.max(-1) - aucs.min(-1)).mean(-1)
        want = np.stack([np.nanpercentile(means, 2.5, axis=0), np.nanpercentile(means, 97.5, axis=0)], axis=-1)
        np.testing.assert_allclose(got[a], want, atol=1e-5)


# ------------------------------------------------------------------------- figures
def _no_overlapping_tick_labels(fig) -> None:
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            boxes = [t.get_window_extent(renderer) for t in axis.get_ticklabels() if t.get_visible() and t.get_text()]
            assert len(boxes) >= 2
            for u, v in itertools.combinations(boxes, 2):
                assert not u.overlaps(v), [t.get_text() for t in axis.get_ticklabels()]


def _segments(ax):
    """Horizontal and vertical bars of a panel, as sorted ((x0, y0), (x1, y1)) tuples."""
    out = []
    for coll in ax.collections:
        if isinstance(coll, LineCollection):
            out += [tuple(map(tuple, np.round(s, 9))) for s in coll.get_segments()]
    return out


def test_figure_draws_every_point_with_its_intervals(setting):
    res = setting
    fig = plots.delta_auc_figure(res, title="setting A")
    assert len(fig.axes) == len(plots.MAIN_PANELS)
    rows = [res["names"].index(p) for p in DELTA_NAMES]
    for ax, (attr, metric) in zip(fig.axes, plots.MAIN_PANELS):
        assert ax.get_xlabel().startswith(plots.METRIC_LABELS[metric]) and ax.get_ylabel().startswith("ΔAUC over sex")
        c = res["correlations"][attr][metric]
        lo, hi = c["pearson_interval"]
        assert f"r = {c['pearson']:.2f} [{lo:.2f}, {hi:.2f}]" in ax.get_title()
        d = res["delta_auc"][attr][rows].mean(1)
        v = res["per_seed"][metric][rows].mean(1)
        d_ci, v_ci = res["delta_auc_ci95_seed_mean"][attr][rows], res["ci95_seed_mean"][metric][rows]
        want = [((v_ci[i, 0], d[i]), (v_ci[i, 1], d[i])) for i in range(7)]
        want += [((v[i], d_ci[i, 0]), (v[i], d_ci[i, 1])) for i in range(7)]
        got = _segments(ax)
        assert len(got) == 14
        np.testing.assert_allclose(np.array(sorted(got)), np.round(np.array(sorted(want)), 9), atol=1e-9)
        markers = [ln for ln in ax.get_lines() if ln.get_label() in {plots._style(p)[2] for p in DELTA_NAMES}]
        np.testing.assert_allclose([ln.get_xdata()[0] for ln in markers], v)
        np.testing.assert_allclose([ln.get_ydata()[0] for ln in markers], d)
    (legend,) = fig.legends
    handles, texts = legend.legend_handles, [t.get_text() for t in legend.get_texts()]
    assert len(handles) == len(texts) == len(DELTA_NAMES) + 1 and all(h is not None for h in handles)
    assert texts[:len(DELTA_NAMES)] == [plots._style(p)[2] for p in DELTA_NAMES]
    assert all(h.get_label() == t for h, t in zip(handles[:len(DELTA_NAMES)], texts))
    sizes = [t.get_fontsize() for t in fig.findobj(Text) if t.get_text() and t.get_visible()]
    assert min(sizes) >= 8
    _no_overlapping_tick_labels(fig)
    matplotlib.pyplot.close(fig)


def test_tiny_values_get_an_offset_not_colliding_decimals(setting):
    res = copy.deepcopy(setting)
    res["per_seed"]["s_var"] = res["per_seed"]["s_var"] * 1e-5 + 2.5e-3  # learned settings' 0.0025…
    res["ci95_seed_mean"]["s_var"] = res["ci95_seed_mean"]["s_var"] * 1e-5 + 2.5e-3
    fig = plots.delta_auc_figure(res, [("sex", "s_var")])
    _no_overlapping_tick_labels(fig)
    plain_text = [re.sub(r"\\mathdefault|[${}]", "", t.get_text()) for t in fig.axes[0].get_xticklabels()]
    assert max(map(len, plain_text)) <= 4, plain_text  # "2", "4", …, the offset × 10^k beside them
    matplotlib.pyplot.close(fig)


def test_supplementary_and_results_json_form(setting):
    res = setting
    fig = plots.delta_auc_figure(res, plots.SUPPLEMENTARY_PANELS)
    assert len(fig.axes) == len(plots.SUPPLEMENTARY_PANELS) == len(ATTRIBUTES) * len(STABILITY) - 4
    assert {(a, f) for a in ATTRIBUTES for f, _ in STABILITY} == set(plots.MAIN_PANELS + plots.SUPPLEMENTARY_PANELS)
    assert all(ax.get_xlabel() and ax.get_ylabel() for ax in fig.axes)
    matplotlib.pyplot.close(fig)
    # a setting as results.json holds it (keyed by predictor) draws the same points
    def named(v):
        return {p: v[i] for i, p in enumerate(res["names"])}

    loaded = {"names": res["names"], "correlations": res["correlations"],
              **{f: {k: named(v) for k, v in res[f].items()}
                 for f in ("per_seed", "ci95_seed_mean", "delta_auc", "delta_auc_ci95_seed_mean")}}
    loaded = json.loads(json.dumps(plain(loaded, strict=True)))
    a, b = plots.delta_auc_figure(res), plots.delta_auc_figure(loaded)
    for u, v in zip(a.axes, b.axes):
        np.testing.assert_allclose(np.array(sorted(_segments(u))), np.array(sorted(_segments(v))), atol=1e-6)
        assert u.get_title() == v.get_title()
    # into the caller's axes
    plt = matplotlib.pyplot
    own, axes = plt.subplots(1, 2)
    assert plots.delta_auc_figure(res, plots.MAIN_PANELS[:2], axes=axes) is own
    for f in (a, b, own):
        plt.close(f)


def test_scatter_figure_writes_both_figures_and_the_caption_concludes(setting, tmp_path):
    res = copy.deepcopy(setting)
    written = R.scatter_figure(res, str(tmp_path / "scatter_A.png"), "Setting A")
    assert sorted(p.rsplit("/", 1)[-1] for p in written) == ["scatter_A.pdf", "scatter_A.png",
                                                              "scatter_A_supplementary.pdf",
                                                              "scatter_A_supplementary.png"]
    for p in written:
        with open(p, "rb") as f:
            assert f.read(4) in (b"\x89PNG", b"%PDF")
    cs = res["correlations"]["sex"]
    cs["s_flip"]["pearson_interval"] = [0.2, 0.9]
    cs["s_var"]["pearson_interval"] = [-0.8, -0.1]
    cs["d_obs"]["pearson_interval"] = [-0.3, 0.6]
    cs["score_shift"]["pearson_interval"] = [float("nan"), float("nan")]
    text = R.scatter_caption(res, "scatter_A_supplementary.png")
    assert "r's interval lies above 0 for s_flip:" in text and "; it lies below 0 for s_var:" in text
    assert "; it includes 0 for d_obs:" in text and "; it is undefined for score_shift." in text
    assert "(scatter_A_supplementary.png)" in text
    cs["s_flip"]["pearson_interval"] = [-0.1, 0.9]
    assert "r's interval lies below 0 for s_var:" in R.scatter_caption(res)


def test_bad_arguments_name_the_argument(setting):
    res = setting
    cases = [({"panels": [("sex", "nope")]}, "panels"), ({"panels": [("colour", "s_var")]}, "panels"),
             ({"panels": []}, "panels"), ({"panels": 3}, "panels"), ({"ncols": 0}, "ncols"),
             ({"axes": [1, 2]}, "axes")]
    for kwargs, name in cases:
        with pytest.raises(cf.ValidationError, match=f"`{name}`"):
            plots.delta_auc_figure(res, **kwargs)
    for bad in ({k: v for k, v in res.items() if k != "delta_auc_ci95_seed_mean"}, [res],
                dict(res, names=res["names"][1:])):
        with pytest.raises(cf.ValidationError, match="`res`"):
            plots.delta_auc_figure(bad)
