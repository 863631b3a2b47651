"""The PNG writer: read back by an independent chunk parser and zlib."""

import struct
import zlib

import numpy as np
import pytest

from cfjax._io import write_png


def read_png(path):
    data = open(path, "rb").read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, chunks = 8, {}
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos:pos + 4])
        kind = data[pos + 4:pos + 8]
        body = data[pos + 8:pos + 8 + length]
        (crc,) = struct.unpack(">I", data[pos + 8 + length:pos + 12 + length])
        assert crc == zlib.crc32(kind + body)
        chunks[kind] = chunks.get(kind, b"") + body
        pos += 12 + length
    w, h, depth, color = struct.unpack(">IIBB", chunks[b"IHDR"][:10])
    raw = zlib.decompress(chunks[b"IDAT"])
    rows = np.frombuffer(raw, np.uint8).reshape(h, w + 1)
    assert (rows[:, 0] == 0).all() and depth == 8 and color == 0
    return rows[:, 1:]


def test_png_round_trip(tmp_path, rng):
    img = rng.uniform(size=(13, 29))
    path = tmp_path / "sub" / "img.png"
    write_png(path, img)
    np.testing.assert_array_equal(read_png(path), np.round(img * 255).astype(np.uint8))
    assert [p.name for p in path.parent.iterdir()] == ["img.png"]  # no temporary left behind


def test_png_rejects_bad_images(tmp_path):
    with pytest.raises(ValueError, match="image"):
        write_png(tmp_path / "a.png", np.zeros((2, 2, 3)))
    with pytest.raises(ValueError, match="finite"):
        write_png(tmp_path / "a.png", np.full((2, 2), np.nan))
