"""The sensitivity figure (plot_curve, curve_caption) on a small real worst case and on random
curves: labelled axes, a visible artist behind every legend entry, the baselines apart in pixels
or on axes of their own, nothing drawn below the floor, bands where intervals are given, the
caption's numbers against the curve's, and clear errors for bad arguments. No golden images."""

import os

import jax
import numpy as np
import pytest

import cfjax as cf
from cfjax._checks import ValidationError
from cfjax import figures
from cfjax.sensitivity.cfu import negligible_cfu

pytest.importorskip("matplotlib")
S = cf.sensitivity
BUDGETS = [0.0, 0.3, 0.6, 0.9]


@pytest.fixture(scope="module")
def search():
    """A fitted working model (fixed degrees and λ: no CV) and a short worst-case search."""
    with jax.enable_x64(True):
        prob = S.synthetic(200, correlation=0.5, key=0)
        model = S.fit(prob.graph, prob.data, S.Settings(equation_degrees=(2, 2), lam=1.0, predictor_degrees=(2,),
                                                       predictor_lambdas=(1.0,)))
        # a short search: one restart, no screening of boundary starts, no polish (fewer programs to compile)
        wc = S.worst_case(model, BUDGETS, key=0, restarts=1, steps=20, polish=0, screen_corners=False,
                          warn_ratio=None)
        true = float(S.cfu(model, prob.true_correlation))
    return model, wc, true


# ----------------------------------------------------------------------------- helpers
def _points(artist):
    """The (x, y) data points an artist draws, in data coordinates, finite only."""
    if hasattr(artist, "get_xydata"):
        xy = np.asarray(artist.get_xydata(), np.float64)
    else:
        xy = np.concatenate([np.asarray(p.vertices, np.float64) for p in artist.get_paths()] or [np.zeros((0, 2))])
    return xy[np.isfinite(xy).all(axis=1)]


def _data_artists(fig):
    """Every line and filled band whose y is data, with its axes (horizontal lines across the
    axes too; the broken axis' marks, drawn in axes coordinates, are not data)."""
    return [(ax, a) for ax in fig.axes for a in list(ax.lines) + list(ax.collections)
            if a.get_transform() in (ax.transData, ax.get_yaxis_transform())]


def _inside(ax, artist):
    xy = _points(artist)
    (x0, x1), (y0, y1) = sorted(ax.get_xlim()), sorted(ax.get_ylim())
    if artist.get_transform() == ax.get_yaxis_transform():  # x in axes coordinates
        x0, x1 = 0.0, 1.0
    return ((xy[:, 0] >= x0) & (xy[:, 0] <= x1) & (xy[:, 1] >= y0) & (xy[:, 1] <= y1)).any()


def check_legends(fig):
    """Every legend entry names an artist of the figure that is visible and has a point in view;
    returns the entries."""
    fig.canvas.draw()
    by_label = {}
    for ax, a in _data_artists(fig):
        by_label.setdefault(a.get_label(), []).append((ax, a))
    entries = []
    for legend in list(fig.legends) + [ax.get_legend() for ax in fig.axes]:
        for text in [] if legend is None else legend.get_texts():
            label = text.get_text()
            assert label in by_label, f"legend entry {label!r} has no artist"
            assert any(a.get_visible() and _inside(owner, a) for owner, a in by_label[label]), \
                f"legend entry {label!r}: nothing of it is in view"
            entries.append(label)
    return entries


def check_labelled(fig):
    assert fig.axes[0].get_ylabel()
    assert any(ax.get_xlabel() for ax in fig.axes)
    for ax in fig.axes:
        assert ax.get_ylabel(), "an axes without a y label"
        for t in ax.get_xticklabels() + ax.get_yticklabels():
            assert t.get_fontsize() >= 8


def check_floor(fig, floor):
    """No data point of any line or band below the floor (up to rounding of the drawing)."""
    for _, a in _data_artists(fig):
        y = _points(a)[:, 1]
        assert (y >= floor * (1 - 1e-9)).all(), f"{a.get_label()!r} drawn below the floor {floor:g}: {y.min():g}"


def baseline_pixel_gap(fig, names):
    """The largest, over axes holding every baseline's own line, of the smallest vertical distance
    in pixels between two of them (0 when no axes holds them all)."""
    fig.canvas.draw()
    best = 0.0
    for ax in fig.axes:
        lines = {a.get_label(): a for a in ax.lines}
        if all(f"{n} baseline" in lines for n in names):
            ys = [ax.transData.transform(lines[f"{n} baseline"].get_xydata())[:, 1] for n in names]
            gap = min(np.min(np.abs(a - b)) for i, a in enumerate(ys) for b in ys[i + 1:])
            best = max(best, float(gap))
    return best


# ----------------------------------------------------------------------------- a real worst case
def test_worst_case_figure_draws_every_predictor_above_the_floor(search, tmp_path):
    model, wc, true = search
    floor = max(float(wc.cfu_at_zero_correlation), negligible_cfu(model))
    fig = S.plot_curve(wc, model=model, true_value=(0.5, true), title="worst case")
    check_labelled(fig)
    entries = check_legends(fig)
    names = list(model.baseline_unfairness)
    assert "worst-case CFU" in entries and "true confounding" in entries
    assert any(all(n in e for n in names) for e in entries) or all(f"{n} baseline" in entries for n in names)
    # both baselines can be told apart: a few pixels between their lines on some axes
    assert baseline_pixel_gap(fig, names) >= 3
    check_floor(fig, floor)
    # at p_max = 0 (P = I) the worst case is the CFU at zero correlation: at or below the floor, drawn at it
    assert float(np.asarray(wc.cfu)[0]) <= floor * (1 + 1e-6)  # to rounding: drawn at the floor
    marks = [a for _, a in _data_artists(fig) if a.get_label() == "at or below the floor (drawn at it)"]
    assert marks and np.allclose(marks[0].get_ydata(), floor, rtol=0)
    assert any(e.startswith("numerical floor") for e in entries)
    # the curve itself: the worst case above the floor, where it is
    curve = fig.axes[0].lines[0]
    shown = np.asarray(curve.get_ydata(), np.float64)
    above = np.asarray(wc.cfu) > floor * (1 + 1e-6)
    np.testing.assert_array_equal(shown[above], np.asarray(wc.cfu)[above])
    paths = figures.save_figure(fig, os.path.join(tmp_path, "curve.png"))
    assert [os.path.basename(p) for p in paths] == ["curve.png", "curve.pdf"]
    assert all(os.path.getsize(p) > 1000 for p in paths)


def test_bands_are_drawn_where_intervals_are_given(search):
    model, wc, _ = search
    cfu = np.asarray(wc.cfu)
    base = {k: float(v) for k, v in model.baseline_unfairness.items()}
    bands = {k: (0.9 * v, 1.1 * v) for k, v in base.items()}
    fig = S.plot_curve(wc, model=model, lower=0.5 * cfu, upper=2 * cfu, baseline_bands=bands)
    entries = check_legends(fig)
    assert "worst-case CFU: interval" in entries
    assert all(f"{k} baseline: interval" in entries for k in base)
    band = [a for _, a in _data_artists(fig) if a.get_label() == "worst-case CFU: interval"]
    assert len(band) == 1
    floor = max(float(wc.cfu_at_zero_correlation), negligible_cfu(model))
    check_floor(fig, floor)
    # the band spans the interval where it is above the floor
    y = _points(band[0])[:, 1]
    assert np.isclose(y.max(), 2 * cfu.max())
    # no band without an interval
    fig = S.plot_curve(wc, model=model)
    assert not any(a.get_label().endswith("interval") for _, a in _data_artists(fig))


def test_caption_quotes_the_curve_and_the_baselines(search):
    model, wc, _ = search
    text = S.curve_caption(wc, model=model)
    cfu, base = np.asarray(wc.cfu), model.baseline_unfairness
    low = min(base, key=base.get)
    assert f"({low}, " in text and "does not depend on the error correlation P" in text
    assert f"{base[low] / cfu.max():.3g}" in text  # the curve stays below the baseline by this factor
    assert f"p_max = {max(BUDGETS):.3g}" in text


# ----------------------------------------------------------------------------- arrays
def test_random_curves_are_never_drawn_below_their_floor(rng):
    x = np.sort(rng.uniform(0, 0.99, 9))
    floor = 10.0 ** rng.uniform(-18, -6)
    y = 10.0 ** rng.uniform(np.log10(floor) - 3, np.log10(floor) + 6, 9)
    y[rng.integers(0, 9)] = np.nan
    baselines = {"unconstrained": float(10 ** rng.uniform(-1, 1))}
    baselines["blind"] = baselines["unconstrained"] * (1 + rng.uniform(-1e-3, 1e-3))  # within a pixel
    fig = S.plot_curve(x, y, baselines=baselines, floor=floor, lower=y / 2, upper=y * 2)
    check_labelled(fig)
    check_legends(fig)
    check_floor(fig, floor)
    assert baseline_pixel_gap(fig, list(baselines)) >= 3
    # the y range is the data's above the floor: its scale only log where they span two decades
    above = np.concatenate([y, y / 2, y * 2, list(baselines.values())])
    above = above[np.isfinite(above) & (above > floor)]
    log = np.log10(above.max() / above.min()) >= 2
    assert fig.axes[0].get_yscale() == ("log" if log else "linear")
    lo, hi = fig.axes[0].get_ylim()
    assert lo <= above.min() and hi >= above.max()
    if log and (y[np.isfinite(y)] <= floor).any():  # a floor far below gets a strip of its own
        assert (lo <= floor) or len(fig.axes) >= 2


def test_small_span_above_the_floor_is_linear_and_separate_baselines_stay_on_one_axes():
    x = np.linspace(0, 0.9, 4)
    fig = S.plot_curve(x, [0.0, 1.0e-3, 1.2e-3, 1.5e-3], floor=1e-4, baselines={"blind": 2e-3, "unconstrained": 3e-3})
    ax = fig.axes[0]
    assert ax.get_yscale() == "linear" and len(fig.axes) == 1
    check_legends(fig)
    check_floor(fig, 1e-4)
    assert ax.get_ylim()[0] <= 1e-4  # the value at the floor is in view
    assert baseline_pixel_gap(fig, ["blind", "unconstrained"]) >= 3


def test_existing_axes_and_several_curves():
    plt = figures.pyplot()
    fig, ax = plt.subplots()
    x = np.linspace(0, 0.9, 5)
    out = S.plot_curve(x, {"recipe A": [1e-9, 1e-8, 1e-7, 1e-6, 1e-5], "recipe B": [2e-9, 3e-8, 1e-7, 2e-6, 4e-5]},
                       lower={"recipe B": [1e-9] * 5}, upper={"recipe B": [1e-4] * 5}, ax=ax, xlabel="p")
    assert out is fig and fig.axes == [ax]
    assert ax.get_yscale() == "log" and ax.get_xlabel() == "p"
    entries = check_legends(fig)
    assert entries[:3] == ["recipe A", "recipe B", "recipe B: interval"]
    plt.close(fig)


def test_caption_says_from_which_budget_a_baseline_is_reached():
    text = S.curve_caption([0.0, 0.5, 0.9], [1e-6, 1e-4, 3.0], baselines={"blind": 2.0, "unconstrained": 2.5},
                           floor=1e-6)
    assert "reaches the blind baseline's unfairness (2) at p_max = 0.9" in text
    assert "up to 0.5" in text and f"{2.0 / 1e-4:.3g}" in text
    assert "1 of 3 values at or below it" in text


BAD = {
    "x": dict(x=np.zeros((2, 2)), cfu=np.zeros((2, 2))),
    "cfu": dict(cfu=[1.0, 2.0]),
    "upper": dict(lower=[1e-3] * 4),
    "lower": dict(lower=[2.0] * 4, upper=[1.0] * 4),
    "floor": dict(floor=-1.0),
    "baselines": dict(baselines={"blind": float("nan")}),
    "baseline_bands": dict(baselines={"blind": 1.0}, baseline_bands={"unconstrained": (0.5, 1.5)}),
    "true_value": dict(true_value=(0.5,)),
    "ax": dict(ax="the axes"),
    "model": dict(model="a model"),
}


@pytest.mark.parametrize("name", sorted(BAD))
def test_bad_arguments_name_the_argument(name):
    kwargs = dict(x=np.linspace(0, 0.9, 4), cfu=[1e-6, 1e-5, 1e-4, 1e-3])
    kwargs.update(BAD[name])
    with pytest.raises(ValidationError, match=f"`{name}`"):
        S.plot_curve(kwargs.pop("x"), kwargs.pop("cfu"), **kwargs)


def test_a_worst_case_takes_no_separate_cfu(search):
    _, wc, _ = search
    with pytest.raises(ValidationError, match="`cfu`"):
        S.plot_curve(wc, np.asarray(wc.cfu))
