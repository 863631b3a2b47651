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
from cfjax.sensitivity._curve import _num  # the captions' number format

pytest.importorskip("matplotlib")
S = cf.sensitivity
BUDGETS = [0.0, 0.3, 0.6, 0.9]


@pytest.fixture(scope="module")
def search():
    """A fitted working model (fixed degrees and λ: no CV) and a short worst-case search."""
    with jax.enable_x64(True):
        prob = S.synthetic(200, correlation=0.5, key=0)
        model = S.fit(prob.graph, prob.data, S.FitConfig(equation_degrees=(2, 2), lam=1.0, predictor_degrees=(2,),
                                                       predictor_lambdas=(1.0,)))
        # a short search: one restart, no screening of boundary starts, no polish (fewer programs to compile)
        wc = S.worst_case(model, BUDGETS, key=0,
                          config=S.SearchConfig(restarts=1, steps=20, polish=0, screen_corners=False, warn_ratio=None))
        true = float(S.cfu(model, prob.true_correlation))
    return model, wc, true


@pytest.fixture(autouse=True)
def _close_figures():
    """Each test's figures closed after it (``--seeds`` runs many)."""
    yield
    figures.pyplot().close("all")


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
    fig = S.plot_curve(wc, model=model, true_value=(0.5, true), style=S.CurveStyle(title="worst case"))
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
    fig = S.plot_curve(wc, model=model, low=0.5 * cfu, high=2 * cfu, baseline_bands=bands)
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
    fig = S.plot_curve(x, y, baselines=baselines, floor=floor, low=y / 2, high=y * 2)
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
                       low={"recipe B": [1e-9] * 5}, high={"recipe B": [1e-4] * 5}, ax=ax,
                       style=S.CurveStyle(xlabel="p"))
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
    "high": dict(low=[1e-3] * 4),
    "low": dict(low=[2.0] * 4, high=[1.0] * 4),
    "style": dict(style="a title"),
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


def test_the_old_keywords_warn_and_draw_the_same():
    x, y = np.linspace(0, 0.9, 4), np.array([1e-6, 1e-5, 1e-4, 1e-3])
    new = S.plot_curve(x, y, low=y / 2, high=y * 2, style=S.CurveStyle(xlabel="p", title="t", label="c"))
    with pytest.warns(DeprecationWarning, match=r"plot_curve\(.*lower=.*\) is deprecated.*low=, high=, "
                                                r"style=CurveStyle\("):
        old = S.plot_curve(x, y, lower=y / 2, upper=y * 2, xlabel="p", title="t", label="c")
    assert old.axes[0].get_xlabel() == new.axes[0].get_xlabel() == "p"
    assert old.axes[0].get_title() == new.axes[0].get_title() == "t"
    assert [h.get_label() for h in old.legends[0].legend_handles] == [h.get_label() for h in new.legends[0].legend_handles]
    with pytest.raises(TypeError, match="bogus"):
        S.plot_curve(x, y, bogus=1)


def test_a_worst_case_takes_no_separate_cfu(search):
    _, wc, _ = search
    with pytest.raises(ValidationError, match="`cfu`"):
        S.plot_curve(wc, np.asarray(wc.cfu))


# ----------------------------------------------------------------------------- every predictor, benchmarks
def hand_worst_case(p_max, cfu, floor, P=None):
    """A WorstCase built by hand (no search): its budgets, worst cases, P's and floor."""
    p_max, cfu = np.asarray(p_max, np.float64), np.asarray(cfu, np.float64)
    B = p_max.size
    P = np.tile(np.eye(3), (B, 1, 1)) if P is None else np.asarray(P, np.float64)
    return S.WorstCase(p_max=p_max, cfu=cfu, P=P, eigenvalues=np.linalg.eigvalsh(P), restart_cfu=cfu[:, None],
                       restart_ratio=np.full(B, np.nan), steps=np.zeros((B, 1), np.int32),
                       history=np.zeros((B, 1, 1)), min_eig=1e-3, cfu_at_zero_correlation=floor)


def predictor_curves(rng):
    """Three predictors' worst cases over one budget grid: the fair one rising from its floor,
    the baselines orders of magnitude above it."""
    p = np.linspace(0.0, 0.9, 6)
    floor = 10.0 ** rng.uniform(-14, -10)
    fair = np.r_[floor, floor * 10.0 ** np.cumsum(rng.uniform(0.5, 2.0, 5))]
    blind = 10.0 ** rng.uniform(-0.5, 0.5) * (1 + p)
    unconstrained = blind * 10.0 ** rng.uniform(0.2, 1.0)
    return p, {"blind": hand_worst_case(p, blind, 0.9 * blind[0]), "fair": hand_worst_case(p, fair, floor),
               "unconstrained": hand_worst_case(p, unconstrained, 0.9 * unconstrained[0])}


def test_every_predictor_on_one_curve_with_bands(rng):
    p, cases = predictor_curves(rng)
    low = {k: 0.5 * np.asarray(cases[k].cfu) for k in ("fair", "blind")}
    high = {k: 2.0 * np.asarray(cases[k].cfu) for k in ("fair", "blind")}
    fig = S.plot_curve(cases, low=low, high=high)
    check_labelled(fig)
    entries = check_legends(fig)
    ax = fig.axes[0]
    lines = {line.get_label(): line for line in ax.lines}
    # one line per predictor, the fair one first, each the predictor's worst case (the fair one above its floor)
    assert ax.lines[0].get_label() == "fair predictor"
    floor = float(cases["fair"].cfu_at_zero_correlation)  # the lowest floor of the three
    for name, wc in cases.items():
        assert f"{name} predictor" in entries
        shown, y = np.asarray(lines[f"{name} predictor"].get_ydata(), np.float64), np.asarray(wc.cfu)
        above = y > floor * (1 + 1e-6)
        np.testing.assert_array_equal(shown[above], y[above])
        np.testing.assert_array_equal(lines[f"{name} predictor"].get_xdata(), p)
    assert not any(label.endswith(" baseline") for label in lines)  # no flat lines: none were given
    # bands where intervals were given: from the low to the high end
    for name in ("fair", "blind"):
        (band,) = [a for _, a in _data_artists(fig) if a.get_label() == f"{name} predictor: interval"]
        y = _points(band)[:, 1]
        assert np.isclose(y.max(), high[name].max()) and y.min() >= floor * (1 - 1e-9)
        if name == "blind":
            assert np.isclose(y.min(), low[name].min())
    assert not any(a.get_label() == "unconstrained predictor: interval" for _, a in _data_artists(fig))
    check_floor(fig, floor)
    assert ax.get_yscale() == "log"
    # the caption compares the baselines' worst cases with the fair one's, budget by budget
    text = S.curve_caption(cases)
    fair = np.maximum(np.asarray(cases["fair"].cfu), floor)
    r = np.asarray(cases["blind"].cfu) / fair
    assert text.startswith("The fair predictor's worst-case CFU rises from its numerical floor")
    assert f"blind predictor's worst-case CFU is {_num(np.min(cases['blind'].cfu))} to " in text
    assert f"{_num(r.min())} to {_num(r.max())} times the fair predictor's" in text


def test_benchmarks_on_the_curve(rng):
    p, cases = predictor_curves(rng)
    marks = {"A ×1": float(rng.uniform(0.1, 0.4)), "A ×2": (float(rng.uniform(0.5, 0.8)), 1e-3)}
    fig = S.plot_curve(cases["fair"], benchmarks=marks, baselines={"blind": 2.0})
    ax = fig.axes[0]
    check_legends(fig)
    for label, value in marks.items():
        at = value if isinstance(value, float) else value[0]
        (vline,) = [a for a in ax.lines if a.get_label() == f"_benchmark {label}"]
        np.testing.assert_array_equal(vline.get_xdata(), [at, at])
        (text,) = [t for t in ax.texts if t.get_text() == label]
        assert text.xy[0] == at
    (dot,) = [a for a in ax.lines if a.get_label() == "_benchmark A ×2: CFU"]
    np.testing.assert_array_equal(dot.get_xydata(), [marks["A ×2"]])
    assert not any(a.get_label() == "_benchmark A ×1: CFU" for a in ax.lines)  # no CFU given: no marker
    # the caption: the curve's value at the first (interpolated), the given CFU at the second
    text = S.curve_caption(cases["fair"], benchmarks=marks)
    y = np.asarray(cases["fair"].cfu)
    at = _num(np.interp(marks['A ×1'], p, y))
    assert f"Benchmarks: A ×1 at p_max = {marks['A ×1']:.3g} (worst-case CFU about {at}, interpolated)" in text
    assert f"A ×2 at p_max = {marks['A ×2'][0]:.3g} (CFU 0.001)" in text
    # several predictors: the model's baseline unfairness is not drawn unless given
    fig = S.plot_curve(cases, benchmarks=marks, baselines={"blind": 2.0})
    assert [a.get_label() for a in fig.axes[0].lines if a.get_label().endswith("baseline")] == ["blind baseline"]


def test_model_baselines_are_not_drawn_beside_every_predictor(search, rng):
    model, _, _ = search
    _, cases = predictor_curves(rng)
    labels = [a.get_label() for ax in S.plot_curve(cases, model=model).axes for a in ax.lines]
    assert not any(label.endswith(" baseline") for label in labels)
    assert {"fair predictor", "blind predictor", "unconstrained predictor"} <= set(labels)


CURVE_BAD = {
    "x": dict(x={"fair": "a worst case"}),
    "x['blind']": dict(other_budgets=True),
    "label": dict(style=S.CurveStyle(label="mine")),
    "benchmarks": dict(benchmarks={"A": (0.2, 0.1, 3.0)}),
}


@pytest.mark.parametrize("name", sorted(CURVE_BAD))
def test_bad_predictor_curves_and_benchmarks_name_the_argument(name):
    p = [0.0, 0.5]
    cases = {"fair": hand_worst_case(p, [1e-9, 1e-6], 1e-9), "blind": hand_worst_case(p, [1.0, 2.0], 1.0)}
    kwargs = dict(CURVE_BAD[name])
    if kwargs.pop("other_budgets", False):
        cases["blind"] = hand_worst_case([0.0, 0.6], [1.0, 2.0], 1.0)
    x = kwargs.pop("x", cases)
    with pytest.raises(ValidationError, match=f"`{name}`" if "[" not in name else r"`x\['blind'\]`"):
        S.plot_curve(x, **kwargs)


# ----------------------------------------------------------------------------- contours
GRID = np.linspace(-0.9, 0.9, 13)


def hand_surface(rng, min_eig=1e-3):
    """A Surface built by hand: P[O, M] = x, P[M, J] = y, P[O, J] = 0; CFU spanning decades where
    P is usable, NaN elsewhere."""
    X, Y = np.meshgrid(GRID, GRID)  # rows along y
    eig = 1 - np.sqrt(X**2 + Y**2)  # the smallest eigenvalue of [[1, x, 0], [x, 1, y], [0, y, 1]]
    feasible = eig >= min_eig
    scale = 10.0 ** rng.uniform(-9, -5)
    z = np.where(feasible, scale * 10.0 ** (4 * (X**2 + Y**2) + 0.3 * X), np.nan)
    return S.Surface(x=GRID, y=GRID, cfu=z, feasible=feasible, base=np.eye(3), pairs=(("O", "M"), ("M", "J")),
                     features=("O", "M", "J"), min_eig=min_eig, predictor="fair", rounding=1e-20), z, feasible


def test_contour_figure_draws_the_surface_the_infeasible_region_and_the_marks(rng, tmp_path):
    surface, z, feasible = hand_surface(rng)
    P1 = np.eye(3)
    P1[0, 1] = P1[1, 0] = 0.3  # read at the pairs: (0.3, -0.2)
    P1[1, 2] = P1[2, 1] = -0.2
    P_wc = np.tile(np.eye(3), (3, 1, 1))
    P_wc[:, 0, 1] = P_wc[:, 1, 0] = [0.1, 0.4, 0.6]
    P_wc[:, 1, 2] = P_wc[:, 2, 1] = [-0.1, -0.3, 0.5]
    wc = hand_worst_case([0.2, 0.6, 0.4], [1e-8, 1e-5, 1e-6], 1e-9, P=P_wc[[0, 2, 1]])
    benchmarks = {"A ×1": (0.25, 0.1), "A ×2": P1}
    fig = S.plot_contour(surface, benchmarks=benchmarks, worst=wc, title="surface")
    ax = fig.axes[0]
    assert ax.get_xlabel() == "error correlation P[O, M]" and ax.get_ylabel() == "error correlation P[M, J]"
    assert ax.get_title() == "surface"
    # the CFU's filled contours: a log scale (the values span decades) whose levels cover the data
    from matplotlib.colors import LogNorm
    from matplotlib.contour import QuadContourSet

    sets = [c for c in ax.collections if isinstance(c, QuadContourSet)]
    filled = [c for c in sets if c.filled and tuple(c.hatches) == (None,)]
    (cfu_set,) = [c for c in filled if isinstance(c.norm, LogNorm)]
    finite = z[np.isfinite(z)]
    assert cfu_set.levels[0] <= finite.min() and cfu_set.levels[-1] >= finite.max()
    assert np.allclose(np.diff(np.log10(cfu_set.levels)), np.diff(np.log10(cfu_set.levels))[0])
    # the infeasible region: hatched, holding every infeasible grid point and no feasible one
    (hatched,) = [c for c in sets if c.filled and c.hatches[0] == "///"]
    X, Y = np.meshgrid(GRID, GRID)
    pts = np.stack([X.ravel(), Y.ravel()], 1) * (1 - 1e-6)  # a hair inside the frame
    inside = np.zeros(len(pts), bool)
    for path in hatched.get_paths():
        inside |= path.contains_points(pts)
    np.testing.assert_array_equal(inside, ~feasible.ravel())
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert legend[0].startswith("not positive definite (smallest eigenvalue < 0.001)")
    assert "benchmarks" in legend and "worst case (by budget)" in legend
    # the benchmarks: markers at their two correlations (a P read at the pairs), with their labels
    for label, where in (("A ×1", (0.25, 0.1)), ("A ×2", (0.3, -0.2))):
        (mark,) = [a for a in ax.lines if a.get_label() == f"_benchmark {label}"]
        np.testing.assert_allclose(mark.get_xydata(), [where])
        (text,) = [t for t in ax.texts if t.get_text() == label]
        np.testing.assert_allclose(text.xy, where)
    # the worst case: one point per budget, in order of budget, each labelled
    (line,) = [a for a in ax.lines if a.get_label() == "worst case (by budget)"]
    np.testing.assert_allclose(line.get_xydata(), np.stack([P_wc[:, 0, 1], P_wc[:, 1, 2]], 1))
    assert sorted(t.get_text() for t in ax.texts if t.get_text().startswith("p_max")) == \
        ["p_max = 0.2", "p_max = 0.4", "p_max = 0.6"]
    paths = figures.save_figure(fig, os.path.join(tmp_path, "contour.png"))
    assert all(os.path.getsize(p) > 1000 for p in paths)
    # one budget only
    fig = S.plot_contour(surface, worst=wc, budgets=0.6)
    (line,) = [a for a in fig.axes[0].lines if a.get_label().startswith("worst case")]
    np.testing.assert_allclose(line.get_xydata(), [[0.6, 0.5]])


def test_contour_on_a_linear_scale_in_given_axes(rng):
    surface, z, _ = hand_surface(rng)
    flat = surface.replace(cfu=np.where(np.isfinite(z), 1.0 + 0.1 * np.nan_to_num(z) / np.nanmax(z), np.nan))
    plt = figures.pyplot()
    fig, ax = plt.subplots()
    assert S.plot_contour(flat, ax=ax) is fig and fig.axes == [ax]  # no colour bar in given axes
    from matplotlib.contour import QuadContourSet

    (cfu_set,) = [c for c in ax.collections
                  if isinstance(c, QuadContourSet) and c.filled and tuple(c.hatches) == (None,)]
    finite = np.asarray(flat.cfu)[np.isfinite(flat.cfu)]
    assert type(cfu_set.norm).__name__ == "Normalize"  # linear: the data span less than two decades
    assert np.isclose(cfu_set.levels[0], finite.min()) and np.isclose(cfu_set.levels[-1], finite.max())
    assert ax.get_legend() is not None
    plt.close(fig)
    # every value rounding: one level from 0 to the rounding level, said so on the colour bar
    noise = surface.replace(cfu=np.where(np.isfinite(z), 1e-22, np.nan), rounding=1e-20)
    fig = S.plot_contour(noise)
    (cfu_set,) = [c for c in fig.axes[0].collections
                  if isinstance(c, QuadContourSet) and c.filled and tuple(c.hatches) == (None,)]
    np.testing.assert_array_equal(cfu_set.levels, [0.0, 1e-20])
    assert fig.axes[1].get_ylabel().endswith("all rounding (<= 1e-20)")


CONTOUR_BAD = {
    "surface": dict(surface="a surface"),
    "benchmarks": dict(benchmarks={"A": (0.1, np.nan)}),
    "worst": dict(worst=np.eye(2)),
    "budgets": dict(budgets=0.5),
    "ax": dict(ax="the axes"),
}


@pytest.mark.parametrize("name", sorted(CONTOUR_BAD))
def test_bad_contour_arguments_name_the_argument(rng, name):
    kwargs = dict(CONTOUR_BAD[name])
    surface = kwargs.pop("surface", None) or hand_surface(rng)[0]
    if name == "budgets":
        kwargs["worst"] = hand_worst_case([0.2, 0.6], [1e-8, 1e-6], 1e-9)
    with pytest.raises(ValidationError, match=f"`{name}`"):
        S.plot_contour(surface, **kwargs)
