"""The counterfactual image grid on real counterfactuals of the synthetic chest SCM: its columns
are the intervention axis's labels, its row groups are labelled, the difference panel shows
counterfactual − factual on one symmetric colour scale with one colour bar, the images are at
least 64 px a side, PNG and PDF are written; bad arguments are named."""

from __future__ import annotations

import io
import os

import jax
import numpy as np
import pytest

pytest.importorskip("matplotlib")

import cfjax as cf  # noqa: E402
from cfjax._checks import ValidationError  # noqa: E402
from cfjax import figures  # noqa: E402
from cfjax.scm.plots import column_header, counterfactual_grid  # noqa: E402

SIZE, UNITS = 32, 3
PNG, PDF = b"\x89PNG\r\n\x1a\n", b"%PDF-"


def _chest_run(seed: int, interventions=None, units: int = UNITS):
    """Factual images, counterfactual images by row group (effusion held / following the new
    age: two real sources) and the labelled axis, for a few units of the chest SCM."""
    chest = cf.data.ChestSCM(size=SIZE)
    rec = chest.sample(units, key=seed)
    if interventions is None:
        do, _, axis = cf.scm.intervention_grid({"sex": [0, 1], "age": [30.0, 70.0]}, describe=True)
    else:
        do, axis = interventions, cf.scm.intervention_axis(interventions)
    key = jax.random.key(seed + 1)
    groups = {label: np.asarray(chest.counterfactuals(rec, do, key=key, label=label)["image"])
              for label in ("fixed", "follows")}
    return np.asarray(rec["image"]), groups, axis


@pytest.fixture(scope="module")
def run():
    return _chest_run(0)


def _axes(fig, gid):
    return [ax for ax in fig.axes if ax.get_gid() == gid]


def test_grid_columns_rows_differences_and_files(rng, tmp_path):
    factual, groups, axis = _chest_run(int(rng.integers(0, 2**16)))
    k = len(axis.labels)
    units = [f"case {i}" for i in range(UNITS)]
    fig = counterfactual_grid(factual, groups, axis, unit_labels=units)

    for name, cfs in groups.items():
        image_axes = _axes(fig, f"image:{name}")
        # the columns are the factual image, then the axis's interventions in its order
        assert [ax.get_label() for ax in image_axes] == ["factual", *axis.labels]
        # the row group is named at its left, each unit's row labelled
        assert image_axes[0].get_ylabel() == name
        assert [t.get_text() for t in image_axes[0].get_yticklabels()] == units
        for j, ax in enumerate(image_axes[1:]):  # each column shows the units' j-th counterfactuals
            shown = ax.images[0].get_array()
            values = np.asarray(shown.filled(np.nan) if np.ma.isMaskedArray(shown) else shown)
            np.testing.assert_array_equal(np.sort(values[np.isfinite(values)]), np.sort(cfs[:, j].ravel()))
    # the column headers (on the first row group) give the axis labels back
    top = _axes(fig, f"image:{next(iter(groups))}")
    assert top[0].get_title() == "factual"
    assert ["do(" + ax.get_title().replace("\n", ", ") + ")" for ax in top[1:]] == list(axis.labels)
    assert all(ax.get_title() == "" for name in list(groups)[1:] for ax in _axes(fig, f"image:{name}"))

    # the differences: counterfactual - factual on one symmetric scale, centred at 0
    limit = max(np.abs(cfs - factual[:, None]).max() for cfs in groups.values())
    diff_images = []
    for name, cfs in groups.items():
        diff_axes = _axes(fig, f"difference:{name}")
        assert [ax.get_label() for ax in diff_axes] == list(axis.labels)
        assert diff_axes[0].get_ylabel() == name
        for j, ax in enumerate(diff_axes):
            im = ax.images[0]
            values = np.asarray(im.get_array().filled(np.nan) if np.ma.isMaskedArray(im.get_array())
                                else im.get_array())
            np.testing.assert_allclose(np.sort(values[np.isfinite(values)]),
                                       np.sort((cfs[:, j] - factual).ravel()), atol=1e-7)
            diff_images.append(im)
    for im in diff_images:
        lo, hi = im.get_clim()
        assert lo == pytest.approx(-limit, rel=1e-6) and hi == pytest.approx(limit, rel=1e-6)
        assert im.get_cmap().name.startswith("RdBu_r") and im.norm(0.0) == pytest.approx(0.5)
    # one colour bar, of the differences
    bars = {id(im.colorbar): im.colorbar for ax in fig.axes for im in ax.images if im.colorbar is not None}
    assert len(bars) == 1
    (bar,) = bars.values()
    assert bar.mappable in diff_images and bar.ax.get_ylabel() == "counterfactual − factual"
    # every image at least 64 px a side at the saved resolution
    dpi = 150
    for ax in [ax for ax in fig.axes if ax.get_gid() != "colour bar"]:
        assert ax.get_position().width * fig.get_figwidth() * dpi >= 64
        assert ax.get_position().height * fig.get_figheight() * dpi / UNITS >= 64
    # readable: no text under 8 pt, no two column headers overlapping
    fig.canvas.draw()
    from matplotlib.text import Text

    assert min(t.get_fontsize() for t in fig.findobj(Text) if t.get_text()) >= 8
    boxes = [ax.title.get_window_extent() for ax in top]
    assert all(a.x1 < b.x0 for a, b in zip(boxes, boxes[1:]))

    paths = figures.save_figure(fig, tmp_path / "grid.png", dpi=dpi)
    assert [os.path.basename(p) for p in paths] == ["grid.png", "grid.pdf"]
    with open(paths[0], "rb") as f:
        data = f.read()
    assert data[:8] == PNG
    with open(paths[1], "rb") as f:
        assert f.read(5) == PDF
    from PIL import Image

    with Image.open(io.BytesIO(data)) as img:
        assert img.size[0] >= (k + 1) * 64 and img.size[1] >= 2 * len(groups) * UNITS * 64


def test_null_column_has_no_change_and_mixed_labels_head_in_full(rng):
    """A null intervention reproduces the factual image, so its difference column is 0; labels
    that are not all one do(…) head their columns in full (line breaks aside)."""
    interventions = [{}, {"sex": np.array([0, 1]), "age": np.array([25.0, 85.0])}]
    factual, groups, axis = _chest_run(int(rng.integers(0, 2**16)), interventions)
    assert axis.labels[0] == "null"
    fig = counterfactual_grid(factual, groups, axis)
    top = _axes(fig, "image:fixed")
    assert [ax.get_title().replace("\n", " ") for ax in top[1:]] == list(axis.labels)
    for name in groups:
        null = _axes(fig, f"difference:{name}")[0].images[0].get_array()
        assert np.nanmax(np.abs(np.ma.filled(null, np.nan))) == 0.0
    # the colour limits stay symmetric and come from the changed columns only
    limit = max(np.abs(cfs - factual[:, None]).max() for cfs in groups.values())
    assert _axes(fig, "difference:fixed")[1].images[0].get_clim() == pytest.approx((-limit, limit))


def test_column_header_round_trips():
    assert column_header("do(sex=1, age=40)") == "do(sex=1,\nage=40)"
    assert column_header("do(sex=1, age=40)", short=True) == "sex=1\nage=40"
    assert column_header("do(sex=1) shift(age=+5)", short=True) == "do(sex=1)\nshift(age=+5)"
    assert column_header("null", short=True) == "null"


def test_user_limits_and_labels(run):
    factual, groups, axis = run
    fig = counterfactual_grid(factual, {"exact": groups["fixed"]}, axis, limit=0.5, image_limits=(0.0, 1.0),
                              tile_inches=0.8)
    assert {im.get_clim() for ax in _axes(fig, "difference:exact") for im in ax.images} == {(-0.5, 0.5)}
    assert {im.get_clim() for ax in _axes(fig, "image:exact") for im in ax.images} == {(0.0, 1.0)}
    assert len(_axes(fig, "colour bar")) == 1
    assert [t.get_text() for t in _axes(fig, "image:exact")[0].get_yticklabels()] == [
        f"unit {i + 1}" for i in range(UNITS)]


def _bad(run, key):
    factual, groups, axis = run
    exact = groups["fixed"]
    nan = factual.copy()
    nan[0, 1, 2] = np.nan
    other_axis = cf.scm.intervention_grid({"sex": [0, 1]}, describe=True)[2]
    cases = {
        "factual 2-d": ((factual[0], {"exact": exact}, axis), {}, r"`factual`: expected 3-d"),
        "factual NaN": ((nan, {"exact": exact}, axis), {}, r"`factual`: expected finite"),
        "K mismatch": ((factual, {"exact": exact}, other_axis), {}, r"`counterfactuals\['exact'\]`: expected shape"),
        "units mismatch": ((factual, {"exact": exact[:-1]}, axis), {}, r"`counterfactuals\['exact'\]`"),
        "image mismatch": ((factual, {"exact": exact[..., :-1]}, axis), {}, r"`counterfactuals\['exact'\]`"),
        "cf 3-d": ((factual, {"exact": exact[:, 0]}, axis), {}, r"`counterfactuals\['exact'\]`: expected 4-d"),
        "cf inf": ((factual, {"exact": exact * np.inf}, axis), {}, r"`counterfactuals\['exact'\]`: expected finite"),
        "not a mapping": ((factual, exact, axis), {}, r"`counterfactuals`: expected a non-empty mapping"),
        "empty mapping": ((factual, {}, axis), {}, r"`counterfactuals`: expected a non-empty mapping"),
        "axis": ((factual, {"exact": exact}, list(axis.labels)), {}, r"`axis`: expected a cfjax.scm.InterventionAxis"),
        "unit_labels": ((factual, {"exact": exact}, axis), {"unit_labels": ["a"]}, r"`unit_labels`"),
        "limit": ((factual, {"exact": exact}, axis), {"limit": -1.0}, r"`limit`"),
        "image_limits": ((factual, {"exact": exact}, axis), {"image_limits": (1.0, 0.0)}, r"`image_limits`"),
        "tile_inches": ((factual, {"exact": exact}, axis), {"tile_inches": 0}, r"`tile_inches`"),
    }
    return cases[key]


@pytest.mark.parametrize("case", ["factual 2-d", "factual NaN", "K mismatch", "units mismatch", "image mismatch",
                                  "cf 3-d", "cf inf", "not a mapping", "empty mapping", "axis", "unit_labels",
                                  "limit", "image_limits", "tile_inches"])
def test_bad_arguments_are_named(run, case):
    args, kwargs, match = _bad(run, case)
    with pytest.raises(ValidationError, match=match):
        counterfactual_grid(*args, **kwargs)


def test_demo_grid_writes_png_and_pdf_and_says_what_changed(rng, tmp_path):
    """The demo's grid on site A's chest SCM (exact counterfactuals only, no trained generator):
    PNG and PDF written, the per-intervention change recomputed independently, the caption
    naming the intervention that changes the images most."""
    from cfjax.study.demo import image_grid
    from cfjax.study.report_figures import grid_caption

    seed = int(rng.integers(0, 2**16))
    chest = cf.data.ChestSCM(size=SIZE)
    test = chest.sample(48, key=seed)
    grid = image_grid(chest, test, str(tmp_path / "counterfactual_grid.png"), units=4, key=seed)
    assert sorted(os.listdir(tmp_path)) == ["counterfactual_grid.pdf", "counterfactual_grid.png"]
    with open(tmp_path / "counterfactual_grid.png", "rb") as f:
        assert f.read(8) == PNG
    assert grid["learned"] is False and len(grid["units"]) == 4
    effusion = np.asarray(test["parents"]["effusion"])[grid["units"]]
    assert grid["effusion"] == effusion.tolist() and sorted(effusion.tolist()) == effusion.tolist()
    do, _, axis = cf.scm.intervention_grid({"sex": [0, 1], "age": list(np.linspace(20, 90, 8))}, describe=True)
    assert grid["interventions"] == list(axis.labels)
    sub = {"parents": {v: np.asarray(x)[grid["units"]] for v, x in test["parents"].items()},
           "noise": jax.tree.map(lambda a: a[np.asarray(grid["units"])], test["noise"]),
           "image": np.asarray(test["image"])[grid["units"]]}
    cfs = np.asarray(chest.counterfactuals(sub, do, key=jax.random.key(seed), label="fixed")["image"])
    change = np.abs(cfs - sub["image"][:, None]).mean(axis=(0, 2, 3))
    np.testing.assert_allclose(grid["mean_abs_change"]["exact"], change, rtol=1e-5, atol=1e-7)
    caption = grid_caption(grid)
    most = axis.labels[int(np.argmax(change))]
    assert f"change most under {most}" in caption and "learned" not in caption
