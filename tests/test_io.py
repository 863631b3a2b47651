"""The PNG writer: read back by Pillow, pixel for pixel; atomic; bad images named."""

import numpy as np
import pytest
from PIL import Image

from cfjax.io import write_png


def test_png_round_trip(tmp_path, rng):
    img = rng.uniform(-0.2, 1.2, size=(13, 29))  # values outside [0, 1] are clipped
    path = tmp_path / "sub" / "img.png"
    write_png(path, img)
    with Image.open(path) as read:
        assert read.format == "PNG" and read.mode == "L" and read.size == (29, 13)
        pixels = np.asarray(read)
    np.testing.assert_array_equal(pixels, np.round(np.clip(img, 0, 1) * 255).astype(np.uint8))
    assert [p.name for p in path.parent.iterdir()] == ["img.png"]  # no temporary left behind


def test_png_rejects_bad_images(tmp_path):
    with pytest.raises(ValueError, match="image"):
        write_png(tmp_path / "a.png", np.zeros((2, 2, 3)))
    with pytest.raises(ValueError, match="finite"):
        write_png(tmp_path / "a.png", np.full((2, 2), np.nan))
    assert not list(tmp_path.iterdir())  # nothing written
