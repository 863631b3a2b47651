"""The figures' foundation: PNG and PDF written atomically, bad arguments named."""

import os

import numpy as np
import pytest

pytest.importorskip("matplotlib")

from cfjax import figures  # noqa: E402


def _figure():
    plt = figures.pyplot()
    fig, ax = plt.subplots()
    ax.plot(np.arange(3), np.arange(3))
    return fig


def test_save_figure_writes_png_and_pdf_atomically(tmp_path):
    paths = figures.save_figure(_figure(), tmp_path / "sub" / "curve.png")
    assert [os.path.basename(p) for p in paths] == ["curve.png", "curve.pdf"]
    with open(paths[0], "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    with open(paths[1], "rb") as f:
        assert f.read(5) == b"%PDF-"
    # no temporary file left behind
    assert sorted(os.listdir(tmp_path / "sub")) == ["curve.pdf", "curve.png"]


def test_save_figure_keeps_an_unknown_extension_in_the_stem(tmp_path):
    paths = figures.save_figure(_figure(), tmp_path / "run.v1", formats=("png",))
    assert paths == [str(tmp_path / "run.v1.png")]


def test_a_failed_write_leaves_the_old_file(tmp_path, monkeypatch):
    target = tmp_path / "fig.png"
    target.write_bytes(b"old")
    fig = _figure()

    def broken(*args, **kwargs):
        raise RuntimeError("disk full")

    monkeypatch.setattr(fig, "savefig", broken)
    with pytest.raises(RuntimeError):
        figures.save_figure(fig, target)
    assert target.read_bytes() == b"old"
    assert sorted(os.listdir(tmp_path)) == ["fig.png"]


@pytest.mark.parametrize("kwargs, match", [
    ({"formats": ()}, r"`formats`: expected a non-empty sequence"),
    ({"formats": ("jpg",)}, r"`formats`: expected a non-empty sequence"),
    ({"dpi": 0}, r"`dpi`"),
])
def test_bad_arguments_are_named(tmp_path, kwargs, match):
    with pytest.raises(ValueError, match=match):
        figures.save_figure(_figure(), tmp_path / "x.png", **kwargs)
