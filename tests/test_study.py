"""cfjax.study (through experiments.marginalisation's command line) on a tiny configuration: the files exist, results.json has the
required keys and predictor names, and the reported numbers equal cfjax.metrics on the saved
predictions."""

from __future__ import annotations

import json
import os
import re

import numpy as np
import pytest

import cfjax as cf
from cfjax import metrics as cm
from cfjax import study
from cfjax.study import paper as P
from cfjax.study import report as R
from experiments import marginalisation as mg

TINY = study.Config(size=32, n_train=256, n_val=128, test_per_cell=16, n_natural=96, features=(4, 8), steps=20,
                 batch_size=16, eval_every=10, patience=2, warmup=2, bootstrap=10, prop1_resamples=40, chunk=256)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("marginalisation"))
    mg.main(["--out", out, "--seeds", "2"], config=TINY)
    with open(os.path.join(out, "results.json")) as f:
        return out, json.load(f)


def test_files_and_keys(run):
    out, res = run
    for name in ("report.md", "results.json"):
        assert os.path.getsize(os.path.join(out, name)) > 0
    assert os.path.isdir(os.path.join(out, "checkpoints", "site_A"))
    assert os.path.isdir(os.path.join(out, "checkpoints", "site_B"))
    assert set(res["settings"]) == {"A", "B", "A->B"}
    for setting, r in res["settings"].items():
        slug = R._slug(setting)
        for f in (f"predictions_{slug}.npz", f"reliability_{slug}.png", f"scatter_{slug}.png"):
            assert os.path.getsize(os.path.join(out, f)) > 0, f
        assert list(r["auc"]) == list(cf.predictors.PAPER_NAMES)
        assert all(len(v) == 2 for v in r["auc"].values())
        assert set(r["delta_auc"]) == {"sex", "age_group", "race"}
        for v in r["delta_auc"].values():
            assert list(v) == list(cf.predictors.PAPER_NAMES)
        for metric in P.RISKS + P.CALIBRATION + tuple(f for f, _ in P.STABILITY):
            assert 0 <= r["ctc"][metric] <= 9
        assert set(r["correlations"]["sex"]) == {f for f, _ in P.STABILITY}
        assert set(r["ranking_agreement"]) == {"s_flip~risk_orig", "s_flip~risk_cm", "s_var~risk_orig",
                                               "s_var~risk_cm"}


def test_numbers_equal_metrics_on_saved_predictions(run):
    out, res = run
    for setting, r in res["settings"].items():
        data = np.load(os.path.join(out, f"predictions_{R._slug(setting)}.npz"))
        names = [str(n) for n in data["names"]]
        p_obs, p_cf, y = data["p_obs"], data["p_cf"], data["y"]
        assert names == list(cf.predictors.PAPER_NAMES)
        assert p_cf.shape == p_obs.shape + (16,)
        per_seed = np.zeros((len(names), 2))
        for i, name in enumerate(names):
            for s in range(2):
                ref = cm.evaluate(p_obs[i, s], p_cf[i, s], y).to_dict()
                got = r["per_seed"]
                for field, value in ref.items():
                    if field == "risk_cvar":
                        for a, v in value.items():
                            np.testing.assert_allclose(got[f"cvar_{a:g}"][name][s], v, rtol=1e-5, atol=1e-6)
                    elif np.isfinite(value):
                        np.testing.assert_allclose(got[field][name][s], value, rtol=1e-5, atol=1e-6,
                                                   err_msg=f"{setting} {name} {field}")
                per_seed[i, s] = ref["risk_orig"]
                np.testing.assert_allclose(r["auc"][name][s], float(cm.auc(p_obs[i, s], y)), atol=1e-6)
                np.testing.assert_allclose(r["delta_auc"]["sex"][name][s],
                                           float(cm.delta_auc(p_obs[i, s], y, data["sex"])), atol=1e-6)
                np.testing.assert_allclose(r["delta_auc"]["age_group"][name][s],
                                           float(cm.delta_auc(p_obs[i, s], y, cf.data.age_group(data["age"]))),
                                           atol=1e-6)
        chains = [[names.index(p) for p in c] for c in cm.PAPER_CHAINS]
        assert r["ctc"]["risk_orig"] == pytest.approx(float(cm.correct_transition_count(per_seed.T, chains)))
        # the report's risk table shows the seed means
        with open(os.path.join(out, "report.md")) as f:
            report = f.read()
        section = report.split(f"## Setting {setting}:")[1].split("### Risk")[1]
        row = re.search(r"^\| basic \| ([0-9.]+) \[", section, re.M)
        assert row is not None
        assert float(row.group(1)) == pytest.approx(per_seed[0].mean(), abs=5e-4)


def test_proposition1_against_numpy(run):
    out, res = run
    r = res["settings"]["A"]
    data = np.load(os.path.join(out, "predictions_A.npz"))
    race, p_obs = data["race"], data["p_obs"]
    n_z = np.bincount(race, minlength=3)
    assert r["proposition1"]["n_z"] == n_z.tolist()
    sigma2 = p_obs[0, 0][race == 2].var(ddof=1)
    np.testing.assert_allclose(r["proposition1"]["bound_obs"]["basic"][0][2], sigma2 / n_z[2], rtol=1e-4)
    np.testing.assert_allclose(r["proposition1"]["bound_cf"]["basic"][0][2], sigma2 / len(race), rtol=1e-4)
