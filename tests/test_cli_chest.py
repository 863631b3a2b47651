"""``cfjax chest``: a valid PNG grid of the expected size, the interventions and parents in
results.json, a refused non-empty --out, a runnable example in --help."""

from __future__ import annotations

import io
import json

import numpy as np
from PIL import Image

from cfjax.cli import main
from cfjax.data import AGES

SIZE, UNITS = 32, 2


def _run(argv, capsys):
    try:
        main(["chest", *(str(a) for a in argv)])
        code = 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 1
    out, err = capsys.readouterr()
    return code, out, err


def _read_png(data: bytes) -> np.ndarray:
    """Decode an 8-bit grayscale PNG with Pillow."""
    with Image.open(io.BytesIO(data)) as img:
        assert img.format == "PNG" and img.mode == "L"
        return np.asarray(img)


def test_chest_grid(rng, tmp_path, capsys):
    seed = int(rng.integers(0, 10_000))
    out = tmp_path / "chest"
    code, stdout, err = _run(["--out", out, "--size", SIZE, "--units", UNITS, "--seed", seed], capsys)
    assert code == 0, err
    k = 2 * len(AGES)
    image = _read_png((out / "grid.png").read_bytes())
    # factual + 4-pixel gap, then K tiles each followed by a 2-pixel gap; rows 2 pixels apart
    assert image.shape == (UNITS * SIZE + 2 * (UNITS - 1), SIZE + 4 + k * (SIZE + 2))
    assert (image[SIZE:SIZE + 2] == 255).all() and (image[:, SIZE:SIZE + 4] == 255).all()
    for r in range(UNITS):  # every tile is an image, not a blank
        for c in range(k + 1):
            x0 = 0 if c == 0 else SIZE + 4 + (c - 1) * (SIZE + 2)
            tile = image[r * (SIZE + 2):r * (SIZE + 2) + SIZE, x0:x0 + SIZE]
            assert tile.std() > 5

    res = json.loads((out / "results.json").read_text())
    assert res["grid"] == {"file": "grid.png", "height": image.shape[0], "width": image.shape[1], "tile": SIZE}
    assert len(res["interventions"]) == k == len(res["columns"]) - 1
    assert [d["age"] for d in res["interventions"][:len(AGES)]] == list(AGES)
    assert [d["sex"] for d in res["interventions"]] == [0] * len(AGES) + [1] * len(AGES)
    assert [u["parents"]["effusion"] for u in res["rows"]] == [0, 1]
    for u in res["rows"]:
        assert len(u["counterfactual_parents"]) == k
        for do, cf in zip(res["interventions"], u["counterfactual_parents"]):
            assert cf["sex"] == do["sex"] and abs(cf["age"] - do["age"]) < 1e-4
            assert cf["race"] == u["parents"]["race"]  # not a descendant of sex or age
            assert cf["effusion"] == u["parents"]["effusion"]  # label held (--label fixed)
    assert res["effusion_changed"] == 0.0
    report = (out / "report.md").read_text()
    assert "![grid](grid.png)" in report and f"{SIZE}×{SIZE}" in report

    (out / "grid.png").write_bytes(b"mine")  # a non-empty --out is refused without --force
    code, _, err = _run(["--out", out, "--size", SIZE, "--units", UNITS], capsys)
    assert code == 2 and "--force" in err and "Traceback" not in err
    assert (out / "grid.png").read_bytes() == b"mine"


def test_chest_help_and_bad_size(capsys):
    code, out, _ = _run(["--help"], capsys)
    assert code == 0 and "cfjax chest --out results/chest" in out
    code, out, err = _run(["--size", 16, "--out", "unused"], capsys)
    assert code == 2 and "--size" in err and "Traceback" not in out + err
