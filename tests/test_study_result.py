"""What :func:`cfjax.study.run` returns: a :class:`cfjax.study.StudyResult`, a read-only mapping of
the JSON-able results whose live objects (the SCMs, the test sets, the generators) are public
fields; the private keys it once returned still resolve for one release, with a warning naming
the field."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import cfjax as cf
from cfjax import study


def _result(rng, learned=True):
    chest = cf.data.ChestSCM(size=32)
    results = {"seed": int(rng.integers(0, 100)), "settings": {"A": {"auc": rng.uniform(size=(10, 2))}}}
    tests = {"A": {"image": rng.uniform(size=(3, 32, 32))}}
    source = study.LearnedSource({}) if learned else None
    return study.StudyResult(results, {"A": chest, "B": chest}, tests, source), results, chest, tests, source


def test_the_result_reads_as_its_results_and_holds_no_private_key(rng):
    res, results, _, _, _ = _result(rng)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # plain reads do not warn
        assert dict(res) == results and len(res) == len(results) and list(res) == list(results)
        assert res["seed"] == results["seed"] and "settings" in res and "_chests" not in list(res)
        np.testing.assert_array_equal(res["settings"]["A"]["auc"], results["settings"]["A"]["auc"])
        assert res.get("learned") is None
    assert not any(k.startswith("_") for k in res)
    with pytest.raises(KeyError):
        res["nothing"]


@pytest.mark.parametrize("old, field", [("_chests", "chests"), ("_tests", "tests"),
                                        ("_learned_source", "learned_source")])
def test_old_private_keys_warn_and_name_the_field(rng, old, field):
    res, *_ = _result(rng)
    with pytest.warns(DeprecationWarning, match=rf"run\(\.\.\.\)\.{field}"):
        assert res[old] is getattr(res, field)
    with pytest.warns(DeprecationWarning, match=field):
        assert old in res


def test_without_generators_the_old_key_is_absent(rng):
    res, *_ = _result(rng, learned=False)
    with pytest.warns(DeprecationWarning):
        assert "_learned_source" not in res
    with pytest.warns(DeprecationWarning), pytest.raises(KeyError):
        res["_learned_source"]


def test_the_result_is_frozen(rng):
    res, *_ = _result(rng)
    with pytest.raises(AttributeError):
        res.chests = {}
