"""What every subcommand shares: numbers in results.json and reports as their own dtype prints
them (a float32 0.836 is written 0.836, not its float64 expansion 0.8360000252723694), and rows
named the same way in every message."""

from __future__ import annotations

import json

import numpy as np

from cfjax.io import plain_floats
from cfjax._results import plain
from cfjax.cli import common


def _to_json(value):
    """What cfjax's JSON writers write (``cfjax.cli.common.write_json``)."""
    return plain(value, strict=True, shortest=True)


def test_float32_numbers_are_written_as_their_shortest_decimal(rng):
    x = rng.uniform(-1e3, 1e3, 500).astype(np.float32)
    x[:5] = [0.836, 0.1, 1e-30, 3.4e38, -0.0]
    text = json.dumps(_to_json({"a": x, "s": x[0], "grid": x.reshape(20, 25)}))
    back = json.loads(text)
    # the same float32 values come back, in at most float32's 9 significant digits each
    np.testing.assert_array_equal(np.asarray(back["a"], np.float32), x)
    np.testing.assert_array_equal(np.asarray(back["grid"], np.float32), x.reshape(20, 25))
    assert back["s"] == 0.836 and back["a"][:2] == [0.836, 0.1]
    for v in back["a"]:
        digits = repr(v).lstrip("-").split("e")[0].replace(".", "").lstrip("0")
        assert len(digits) <= 9, v
    # each is the shortest decimal that rounds to that float32 (numpy's own shortest repr)
    assert [repr(v) for v in back["a"][5:50]] == [repr(float(str(v))) for v in x[5:50]]


def test_float64_numbers_are_unchanged(rng):
    x = rng.normal(size=200)
    back = json.loads(json.dumps(_to_json({"a": x, "s": np.float64(x[0]), "p": float(x[1])})))
    np.testing.assert_array_equal(np.asarray(back["a"]), x)
    assert back["s"] == x[0] and back["p"] == x[1]


def test_non_finite_numbers_are_null_and_integers_stay_integers():
    v = _to_json({"f": np.asarray([np.nan, np.inf, 1.5], np.float32), "i": np.arange(3, dtype=np.int32),
                        "s": np.float32(np.nan)})
    assert v == {"f": [None, None, 1.5], "i": [0, 1, 2], "s": None}
    assert plain_floats(np.asarray([1, 2])) == [1, 2]


def test_the_study_writes_float32_as_its_shortest_decimal(rng):
    x = rng.uniform(size=(3, 4)).astype(np.float32)
    g = rng.normal(size=5)  # genuine float64 numbers (means of float32 values, ...)
    back = plain({"auc": x, "one": np.float32(0.836), "cast": x.astype(np.float64),
                  "py": float(np.float32(0.836)), "f64": g}, strict=True, shortest=True, float32_values=True,
                 private=False)
    assert back["one"] == 0.836 and back["py"] == 0.836  # a float32 result cast to a Python float
    np.testing.assert_array_equal(np.asarray(back["auc"], np.float32), x)
    assert back["auc"][0][0] == float(str(x[0, 0]))
    assert back["cast"] == back["auc"]  # a float32 array kept as float64
    assert back["f64"] == g.tolist()  # float64 values that are not float32 values are untouched


def test_rows_are_data_rows_counted_from_one():
    assert common.data_row(0) == "row 1" and common.data_row(9) == "row 10"
