"""The reliability diagram: the kernel average of the labels against a brute-force loop over
units and their mirror images, its range [0, 1] on random and extreme inputs, the bootstrap
band and smooth-ECE interval (against evaluate_bootstrap's), and the figure drawn from them
(labels, legend, plotted values, fonts, bad arguments)."""

import math
import os

import jax
import numpy as np
import pytest

import cfjax as cf
from cfjax.metrics import reliability_band, reliability_curve


def brute_force(t, p, y, sigma):
    """(Σ K y / Σ K, (1/n) Σ K) with K the Gaussian at p_i and its mirrors −p_i and 2 − p_i,
    one unit at a time."""
    num, den = np.zeros(len(t)), np.zeros(len(t))
    for p_i, y_i in zip(np.asarray(p, np.float64), np.asarray(y, np.float64)):
        for image in (-p_i, p_i, 2.0 - p_i):
            k = np.exp(-0.5 * ((np.asarray(t, np.float64) - image) / sigma) ** 2)
            num += k * y_i
            den += k
    return num / den, den / (len(p) * sigma * math.sqrt(2 * math.pi))


def miscalibrated(rng, n):
    p = rng.uniform(size=n)
    return p.astype(np.float32), (rng.uniform(size=n) < p ** 1.5).astype(np.int32)


def extreme_inputs(rng):
    """(name, p, y): few units, all predictions near 0 or near 1, at exactly 0 and 1, soft labels."""
    n = int(rng.integers(1, 6))
    yield "few units", rng.uniform(size=n), rng.integers(0, 2, n)
    yield "near 0", rng.uniform(0, 1e-3, 50), rng.integers(0, 2, 50)
    yield "near 1", 1 - rng.uniform(0, 1e-3, 50), rng.integers(0, 2, 50)
    yield "ends", rng.choice([0.0, 1.0], 30), rng.integers(0, 2, 30)
    yield "one side, labels opposite", rng.uniform(0.9, 1.0, 40), np.zeros(40, np.int32)
    yield "soft labels", rng.uniform(size=80), rng.uniform(size=80)
    p = rng.uniform(size=200)
    yield "random", p, (rng.uniform(size=200) < p).astype(np.int32)


def test_curve_and_band_stay_in_the_unit_interval(rng):
    for name, p, y in extreme_inputs(rng):
        p = p.astype(np.float32)
        y = y.astype(np.float32) if y.dtype.kind == "f" else y
        for bandwidth in (None, 1e-3, 0.3):
            c = reliability_curve(p, y, grid=101, bandwidth=bandwidth)
            mu = np.asarray(c.mean_label)
            assert np.isfinite(mu).all() and mu.min() >= 0 and mu.max() <= 1, (name, bandwidth, mu)
            assert np.isfinite(c.density).all() and np.asarray(c.density).min() >= 0, name
        b = reliability_band(p, y, key=int(rng.integers(0, 2**31)), resamples=40, grid=51)
        for v in (b.low, b.high, b.curve.mean_label):
            v = np.asarray(v)
            assert np.isfinite(v).all() and v.min() >= 0 and v.max() <= 1, name
        assert 0 <= float(b.smooth_ece_low) <= float(b.smooth_ece_high) <= 1, name


def test_one_unit_gives_its_label_everywhere(rng):
    y = int(rng.integers(0, 2))
    c = reliability_curve(np.array([rng.uniform()], np.float32), np.array([y]), grid=11, bandwidth=0.01)
    np.testing.assert_array_equal(c.mean_label, np.full(11, y, np.float32))


@pytest.mark.parametrize("bandwidth", [0.03, 0.2, None])
def test_kernel_average_equals_the_brute_force_loop(rng, x64, bandwidth):
    p = rng.uniform(size=60)
    p[:5] = rng.choice([0.0, 1.0], 5)  # predictions at the ends: their mirror image is themselves
    y = rng.uniform(size=60) if bandwidth == 0.2 else (rng.uniform(size=60) < p).astype(np.int64)
    t = np.concatenate([[0.0, 1.0], rng.uniform(size=15)])
    c = reliability_curve(p, y, grid=t, bandwidth=bandwidth)
    sigma = float(c.bandwidth) if bandwidth is None else bandwidth
    if bandwidth is None:
        assert sigma == pytest.approx(float(cf.metrics.smooth_calibration.smooth_ece_bandwidth(p, y)))
    mu, density = brute_force(t, p, y, sigma)
    np.testing.assert_allclose(c.mean_label, mu, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(c.density, density, rtol=1e-10)
    np.testing.assert_allclose(c.count, density * len(p) * sigma * math.sqrt(2 * math.pi), rtol=1e-10)


def test_far_from_every_prediction_the_curve_is_the_nearest_label():
    # At t = 1 every weight underflows in float32 (distance 0.6 at σ = 0.01): the curve is the
    # label of the nearest prediction (0.4), not NaN.
    p = np.array([0.1, 0.2, 0.4], np.float32)
    c = reliability_curve(p, np.array([1, 1, 0]), grid=np.array([1.0], np.float32), bandwidth=0.01)
    assert float(c.mean_label[0]) == 0.0 and float(c.density[0]) == 0.0


def test_band_contains_the_curve_and_the_interval_the_smooth_ece(rng):
    p, y = miscalibrated(rng, 400)
    b = reliability_band(p, y, key=int(rng.integers(0, 2**31)), resamples=200, grid=101)
    mu = np.asarray(b.curve.mean_label)
    assert (np.asarray(b.low) <= mu + 1e-6).all() and (mu <= np.asarray(b.high) + 1e-6).all()
    assert float(b.smooth_ece_low) <= float(b.curve.smooth_ece) <= float(b.smooth_ece_high)
    assert b.level == 0.95 and b.resamples == 200
    c = reliability_curve(p, y, grid=101)
    np.testing.assert_allclose(b.curve.mean_label, c.mean_label, rtol=1e-6)


def test_smooth_ece_interval_is_evaluate_bootstraps(rng):
    # Same key, same resamples: the same units, so the same smooth-ECE replicates and bounds.
    n, k = 150, 3
    p_cf = rng.uniform(size=(n, k)).astype(np.float32)
    y = (rng.uniform(size=n) < p_cf[:, 0]).astype(np.int32)
    seed = int(rng.integers(0, 2**31))
    report = cf.metrics.evaluate_bootstrap(p_cf[:, 0], p_cf, y, key=seed, resamples=60)
    b = reliability_band(p_cf[:, 0], y, key=jax.random.key(seed), resamples=60, grid=11)
    assert float(b.smooth_ece_low) == pytest.approx(float(report.low.smece_orig), rel=1e-5)
    assert float(b.smooth_ece_high) == pytest.approx(float(report.high.smece_orig), rel=1e-5)


def test_marginalised_soft_labels_jit_and_vmap(rng):
    n, k = 120, 4
    p_cf = rng.uniform(size=(n, k)).astype(np.float32)
    y_bar = (rng.uniform(size=(n, k)) < p_cf).astype(np.float32).mean(axis=1)  # ȳ in [0, 1]
    p_bar = p_cf.mean(axis=1)
    b = reliability_band(p_bar, y_bar, key=3, resamples=30, grid=21)
    jitted = jax.jit(lambda p, y: reliability_band(p, y, key=3, resamples=30, grid=21))(p_bar, y_bar)
    np.testing.assert_allclose(jitted.low, b.low, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(jitted.smooth_ece_high, b.smooth_ece_high, rtol=1e-5)
    both = jax.vmap(lambda p: reliability_band(p, y_bar, key=3, resamples=30, grid=21))(np.stack([p_bar, p_cf[:, 0]]))
    np.testing.assert_allclose(both.high[0], b.high, rtol=1e-5, atol=1e-6)
    assert both.curve.mean_label.shape == (2, 21)


@pytest.mark.parametrize("call, name", [
    (lambda: reliability_band(np.array([0.2, 0.3]), np.array([0, 1]), key=-1), "key"),
    (lambda: reliability_band(np.array([0.2, 0.3]), np.array([0, 1]), key=0, resamples=0), "resamples"),
    (lambda: reliability_band(np.array([0.2, 0.3]), np.array([0, 1]), key=0, level=1.0), "level"),
    (lambda: reliability_band(np.array([0.2, 1.3]), np.array([0, 1]), key=0), "p"),
    (lambda: reliability_band(np.array([0.2, 0.3]), np.array([0, 1.5]), key=0), "y"),
    (lambda: reliability_band(np.array([0.2, 0.3]), np.array([0, 1]), key=0, grid=1), "grid"),
    (lambda: reliability_band(np.array([0.2, 0.3]), np.array([0, 1]), key=0, bandwidth=0.0), "bandwidth"),
    (lambda: reliability_curve(np.array([0.2, 0.3]), np.array([0, 1]), grid=np.ones((2, 2))), "grid"),
])
def test_bad_arguments_name_the_argument(call, name):
    with pytest.raises(cf.ValidationError, match=f"`{name}`"):
        call()


# ----------------------------------------------------------------------------- the figure
plots = pytest.importorskip("cfjax.metrics.plots")
pytest.importorskip("matplotlib")


@pytest.fixture
def bands(rng):
    """The original and the marginalised prediction's bands, on small real results."""
    n, k = 300, 4
    p_cf = rng.uniform(size=(n, k)).astype(np.float32)
    y = (rng.uniform(size=n) < p_cf[:, 0] ** 1.5).astype(np.int32)
    key = int(rng.integers(0, 2**31))
    return (reliability_band(p_cf[:, 0], y, key=key, resamples=50),
            reliability_band(np.asarray(cf.metrics.marginalise(p_cf)), y, key=key, resamples=50))


def _texts(fig):
    for ax in fig.axes:
        yield from [ax.xaxis.label, ax.yaxis.label, ax.title] + ax.get_xticklabels() + ax.get_yticklabels()
        if ax.get_legend() is not None:
            yield from ax.get_legend().get_texts()
            yield ax.get_legend().get_title()


def test_figure_labels_legend_values_and_fonts(bands):
    import matplotlib.pyplot as plt

    fig = plots.reliability_diagram(*bands, title="setting A")
    main, strip = fig.axes[:2]
    assert main.get_ylabel() and strip.get_xlabel() and strip.get_ylabel() and main.get_title() == "setting A"
    assert main.get_xlim() == (0, 1) and main.get_ylim() == (0, 1) and strip.get_xlim() == (0, 1)
    # each legend entry is the label of a line drawn on the axes
    legend = main.get_legend()
    drawn = {a.get_label(): a for a in main.lines}
    texts = [t.get_text() for t in legend.get_texts()]
    assert len(texts) == 3 and all(t in drawn and drawn[t].get_visible() for t in texts)
    lo, hi = float(bands[0].smooth_ece_low), float(bands[0].smooth_ece_high)
    assert texts[1] == f"original, smECE {float(bands[0].curve.smooth_ece):.3f} [{lo:.3f}, {hi:.3f}]"
    assert "95% bootstrap band" in legend.get_title().get_text()
    # every plotted reliability value (curves, diagonal, bands) lies in [0, 1]
    for line in main.lines:
        ys = np.asarray(line.get_ydata(), np.float64)
        assert np.isfinite(ys).any() and np.nanmin(ys) >= 0 and np.nanmax(ys) <= 1
    assert len(main.collections) == 2
    for band in main.collections:
        ys = np.concatenate([path.vertices[:, 1] for path in band.get_paths()])
        assert ys.min() >= 0 and ys.max() <= 1
    sizes = [t.get_fontsize() for t in _texts(fig) if t.get_text()]
    assert sizes and min(sizes) >= 8
    plt.close(fig)


def test_figure_into_given_axes_curves_only_and_saved(bands, tmp_path):
    import matplotlib.pyplot as plt

    from cfjax import figures

    fig, ax = plt.subplots()
    assert plots.reliability_diagram(bands[0].curve, ax=ax) is fig
    assert len(fig.axes) == 2 and fig.axes[1].get_xlabel()  # the density strip appended beneath
    assert ax.get_legend().get_title().get_text() == ""  # no band, no band in the legend
    paths = figures.save_figure(fig, tmp_path / "reliability.png")
    assert [os.path.basename(q) for q in paths] == ["reliability.png", "reliability.pdf"]


@pytest.mark.parametrize("kwargs, name", [
    (dict(original=np.zeros(3)), "original"),
    (dict(marginalised="curve"), "marginalised"),
    (dict(labels=("one",)), "labels"),
    (dict(labels="original"), "labels"),
    (dict(colors=(1, 2)), "colors"),
    (dict(ax="axes"), "ax"),
    (dict(title=3), "title"),
    (dict(min_count=-1.0), "min_count"),
])
def test_figure_bad_arguments_name_the_argument(bands, kwargs, name):
    args = dict(original=bands[0], marginalised=bands[1]) | kwargs
    with pytest.raises(cf.ValidationError, match=f"`{name}`"):
        plots.reliability_diagram(args.pop("original"), **args)


def test_figure_leaves_out_the_curve_beyond_the_predictions(rng):
    import matplotlib.pyplot as plt

    p = rng.uniform(0, 0.3, 200).astype(np.float32)  # nothing above 0.3
    c = reliability_curve(p, (rng.uniform(size=200) < p).astype(np.int32), bandwidth=0.02)
    fig = plots.reliability_diagram(c)
    ys = np.asarray(fig.axes[0].lines[1].get_ydata(), np.float64)
    count, t = np.asarray(c.count), np.asarray(c.t)
    assert np.isnan(ys[count < 1]).all() and np.isfinite(ys[count >= 1]).all()
    assert np.isnan(ys[t > 0.45]).all() and np.isfinite(ys[t < 0.25]).all()
    everywhere = plots.reliability_diagram(c, min_count=0)
    assert np.isfinite(np.asarray(everywhere.axes[0].lines[1].get_ydata(), np.float64)).all()
    plt.close(fig)
    plt.close(everywhere)


def test_figure_refuses_a_batch_of_curves(rng):
    p = rng.uniform(size=(2, 50)).astype(np.float32)
    y = rng.integers(0, 2, 50)
    batch = jax.vmap(lambda q: reliability_curve(q, y, grid=11))(p)
    with pytest.raises(cf.ValidationError, match="`original`"):
        plots.reliability_diagram(batch)


def test_study_reliability_figure(rng, tmp_path):
    from cfjax.study.report_figures import reliability_figure

    names = ["basic", "logit+1", "sex0.95", "age0.95"]
    n = 150
    p_obs = rng.uniform(size=(len(names), n)).astype(np.float32)
    res = {"names": names, "_plots": {"p_obs": p_obs, "p_bar": np.sqrt(p_obs),
                                      "y": (rng.uniform(size=n) < p_obs[0]).astype(np.int32)}}
    paths = reliability_figure(res, str(tmp_path / "reliability_A.png"), "Setting A", resamples=20)
    assert [os.path.basename(q) for q in paths] == ["reliability_A.png", "reliability_A.pdf"]
    assert all(os.path.getsize(q) > 0 for q in paths)
