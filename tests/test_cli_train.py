"""``cfjax train``: its objectives parsed (and bad ones refused with one line naming
``--objective``, before anything is trained), the reweighting baseline's weights making sex and
the label independent, a runnable example in --help. (The arm itself runs end to end in the
quick demo, section 4: tests/test_study.py.)"""

from __future__ import annotations

import numpy as np
import pytest

from cfjax.cli import main
from cfjax.cli.common import UserError
from cfjax.cli.train import parse_objective
from cfjax.predictors import Objective
from cfjax.study.cftraining import independence_weights


def _run(argv, capsys):
    try:
        main(["train", *(str(a) for a in argv)])
        code = 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 1
    out, err = capsys.readouterr()
    return code, out, err


def test_objectives_parse():
    assert parse_objective("augment") == Objective("augment")
    assert parse_objective("cf_risk") == Objective("cf_risk")
    assert parse_objective("cvar:0.25") == Objective("cvar", alpha=0.25)
    assert parse_objective("cvar") == Objective("cvar", alpha=1.0)
    assert parse_objective("variance:1") == Objective("variance", 1.0)
    assert parse_objective("flip:0.5") == Objective("flip", 0.5)


@pytest.mark.parametrize("text, says", [
    ("nonsense", "one of"), ("variance", "variance:STRENGTH"), ("variance:x", "NAME:NUMBER"),
    ("variance:-1", "strength"), ("cvar:0", "alpha"), ("cvar:1.5", "alpha"), ("augment:2", "takes no value"),
    ("basic", "counterfactual objective"), ("variance:0", "counterfactual objective"),
    ("group_dro", "counterfactual objective"),
])
def test_bad_objectives_are_one_line_naming_the_option(text, says, tmp_path, capsys):
    with pytest.raises(UserError, match=says):
        parse_objective(text)
    code, _, err = _run(["--objective", text, "--out", tmp_path / "t", "--quick"], capsys)
    assert code == 2 and "--objective" in err and "Traceback" not in err
    assert not (tmp_path / "t").exists()  # refused before anything was written


def test_help_has_a_runnable_example(capsys):
    code, out, _ = _run(["--help"], capsys)
    assert code == 0 and "cfjax train --out results/train --quick" in out and "--objective" in out


def test_independence_weights_make_sex_and_label_independent(rng):
    n = 2000
    sex = rng.integers(0, 2, n)
    y = (rng.uniform(size=n) < np.where(sex == 1, 0.8, 0.2)).astype(int)  # strongly dependent
    mask = rng.uniform(size=n) < 0.7
    w = independence_weights(sex, y, mask)
    assert (w[~mask] == 0).all() and (w[mask] > 0).all()
    joint = np.array([[w[(sex == a) & (y == b)].sum() for b in (0, 1)] for a in (0, 1)]) / w.sum()
    np.testing.assert_allclose(joint, np.outer(joint.sum(1), joint.sum(0)), atol=1e-12)
    # the weighted marginals are the kept units' own
    kept = np.array([[np.sum(mask & (sex == a) & (y == b)) for b in (0, 1)] for a in (0, 1)]) / mask.sum()
    np.testing.assert_allclose(joint.sum(1), kept.sum(1), atol=1e-12)
    np.testing.assert_allclose(joint.sum(0), kept.sum(0), atol=1e-12)
    # a unit-by-unit loop gives the same weights
    ref = np.zeros(n)
    for i in np.flatnonzero(mask):
        ref[i] = kept.sum(1)[sex[i]] * kept.sum(0)[y[i]] / kept[sex[i], y[i]]
    np.testing.assert_allclose(w, ref, rtol=1e-12)
