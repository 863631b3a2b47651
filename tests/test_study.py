"""``cfjax demo --quick`` end to end (a subprocess, as a user runs it) and cfjax.study through
it: the demo's report has its sections and figures, results.json every pillar; the study's files
exist and its numbers equal cfjax.metrics on its saved predictions. experiments.marginalisation's
command line is checked to call cfjax.study.run with its options."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest

import cfjax as cf
from cfjax import metrics as cm
from cfjax import study
from cfjax.study import paper as P
from cfjax.study import report_figures as R
from experiments import marginalisation as mg

PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("demo") / "results")
    proc = subprocess.run([sys.executable, "-m", "cfjax.cli", "demo", "--quick", "--out", out],
                          capture_output=True, text=True, timeout=1200)
    assert proc.returncode == 0, proc.stderr[-3000:]
    with open(os.path.join(out, "results.json")) as f:
        return out, json.load(f), proc.stdout


@pytest.fixture(scope="module")
def run(demo):
    out = os.path.join(demo[0], "marginalisation")
    with open(os.path.join(out, "results.json")) as f:
        return out, json.load(f)


def test_demo_report_sections_figures_and_summary(demo):
    out, res, stdout = demo
    with open(os.path.join(out, "report.md")) as f:
        report = f.read()
    for heading in ("## 1. Counterfactual marginalisation", "## 2. Sensitivity of counterfactual fairness",
                    "## 3. Counterfactual representations", "## 4. Counterfactual training"):
        assert heading in report
    figures = re.findall(r"!\[[^\]]*\]\(([^)]+\.png)\)", report)
    for needed in ("counterfactual_grid.png", "cfu_curve.png", "marginalisation/reliability_A.png",
                   "marginalisation/scatter_A.png", "training/sex_effect.png"):
        assert needed in figures
    for fig in figures:
        with open(os.path.join(out, fig), "rb") as f:
            assert f.read(8) == PNG, fig
    assert "report: " + os.path.join(out, "report.md") in stdout
    assert set(res) >= {"command", "seed", "quick", "scale", "marginalisation", "sensitivity", "representations",
                        "training"}
    # the report's CTC table is the study's
    ctc = res["marginalisation"]["study"]["settings"]["A"]["ctc"]
    row = re.search(r"^\| A \| ([0-9.]+) \| ([0-9.]+) \| ([0-9.]+) \|", report, re.M)
    assert [float(v) for v in row.groups()] == pytest.approx([ctc["risk_orig"], ctc["risk_cm"], ctc["risk_ie"]],
                                                             abs=5e-3)
    # learned counterfactuals were scored, and the grid holds exact and learned rows
    assert set(res["marginalisation"]["study"]["learned"]["comparison"]) == {"A", "B", "A->B"}
    assert res["marginalisation"]["grid"]["learned"] is True
    # run times stay out of results.json (same seed, same bytes)
    assert "wall_time_s" not in json.dumps(res) and '"seconds"' not in json.dumps(res)


def test_demo_training_arm_rows_and_intervals(demo):
    """Section 4: every method of the demo's arm has a row per bias with seed means inside their
    intervals, the learned rows are the learned objectives, and the report's table is the rows'."""
    out, res, _ = demo
    t = res["training"]
    arm = res["scale"]["arm"]
    methods = {(r["method"], r["bias"]) for r in t["rows"]}
    assert ("unbiased", 0.0) in methods
    for alpha in arm["biases"]:
        expected = {"basic", "reweight", "group_dro 0.01", "augment", "variance 1", "augment (learned)"}
        assert {m for m, b in methods if b == alpha} == expected
    for r in t["rows"]:
        for name in ("auc_a", "auc_b", "delta_auc_sex", "sex_effect", "risk_cm", "s_flip"):
            v = r[name]
            assert len(v["per_seed"]) == len(arm["seeds"])
            assert np.mean(v["per_seed"]) == pytest.approx(v["mean"], abs=1e-9)
            assert v["ci95"][0] <= v["ci95"][1]
        assert 0.0 <= r["s_flip"]["mean"] <= 1.0 and -1.0 <= r["sex_effect"]["mean"] <= 1.0
    with open(os.path.join(out, "report.md")) as f:
        report = f.read()
    basic = next(r for r in t["rows"] if r["method"] == "basic")
    assert f"| basic | {basic['auc_a']['mean']:.3f} [" in report


def test_demo_sensitivity_answers_are_consistent(demo):
    s = demo[1]["sensitivity"]
    wc = s["worst_case"]
    cfu = np.asarray(wc["cfu"], np.float64)
    assert np.all(np.diff(cfu) >= -1e-12 * max(1.0, cfu.max()))  # nested budgets: the worst case grows
    assert cfu[0] == pytest.approx(0.0, abs=1e-12)  # p_max = 0 is Model A: counterfactually fair
    at_half = cfu[np.flatnonzero(np.isclose(wc["p_max"], 0.5))[0]]
    assert at_half >= s["true_cfu"] * (1 - 1e-3)  # the worst case within |p| <= 0.5 covers the truth
    inv = s["inverse"]["true_correlation_cfu"]
    tol = s["settings"]["inverse_tol"]
    assert inv["reached"] and inv["p_max"] <= 0.5 + tol  # the true confounding needs at most its own budget


def test_demo_representations_scores(demo):
    reps = demo[1]["representations"]
    for split, v in reps["splits"].items():
        sc = v["scores"]
        for key in ("pip", "pip_baseline"):
            assert 0.0 <= sc[key] <= 1.0
        assert sc["atv"] >= 0 and sc["atv_baseline"] >= 0
    # the balanced split's concept is removed from x⊥: read no better than the majority class, give or take
    ro = reps["splits"]["balanced"]["concept_readout"]
    assert ro["accuracy_from_x_perp"] <= ro["majority"] + 0.05 and ro["accuracy_from_x"] >= 0.9


def test_demo_refuses_a_non_empty_out(demo):
    proc = subprocess.run([sys.executable, "-m", "cfjax.cli", "demo", "--quick", "--out", demo[0]],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and "--force" in proc.stderr


def test_experiments_command_line_calls_the_study(monkeypatch):
    calls = []
    monkeypatch.setattr(study, "run", lambda *a, **k: calls.append((a, k)) or {})
    mg.main(["--quick", "--seeds", "2", "--out", "somewhere", "--learned", "--counterfactual-label", "follows"])
    (args, kwargs), = calls
    assert args[:4] == (study.QUICK, "somewhere", (0, 1), "follows")
    assert kwargs["generator"] == study.GENERATOR_QUICK and kwargs["quick"] is True
    assert kwargs["command"].startswith("python -m experiments.marginalisation --quick")
    with pytest.raises(SystemExit):
        mg.main(["--seeds", "1"])


@pytest.mark.parametrize("key", [-1, 1.5, "0", np.zeros(3)])
def test_run_refuses_a_bad_key_before_any_work(tmp_path, key):
    with pytest.raises(cf.ValidationError, match="`key`"):
        study.run(study.QUICK, str(tmp_path / "out"), key=key)
    assert not (tmp_path / "out").exists()


def test_files_and_keys(run):
    out, res = run
    for name in ("report.md", "results.json"):
        assert os.path.getsize(os.path.join(out, name)) > 0
    assert os.path.isdir(os.path.join(out, "checkpoints", "site_A"))
    assert os.path.isdir(os.path.join(out, "checkpoints", "site_B"))
    assert os.path.isdir(os.path.join(out, "checkpoints", "generator_site_A"))
    assert set(res["settings"]) == {"A", "B", "A->B"}
    for setting, r in res["settings"].items():
        slug = R._slug(setting)
        for f in (f"predictions_{slug}.npz", f"reliability_{slug}.png", f"scatter_{slug}.png"):
            assert os.path.getsize(os.path.join(out, f)) > 0, f
        assert list(r["auc"]) == list(cf.study.families.PAPER_NAMES)
        assert all(len(v) == 2 for v in r["auc"].values())
        assert set(r["delta_auc"]) == {"sex", "age_group", "race"}
        for v in r["delta_auc"].values():
            assert list(v) == list(cf.study.families.PAPER_NAMES)
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
        assert names == list(cf.study.families.PAPER_NAMES)
        assert p_cf.shape == p_obs.shape + (16,)
        assert int(data["format_version"]) == 2 and data["y_cf"].shape == (len(y), 16)  # units first
        np.testing.assert_array_equal(data["y_cf"], np.broadcast_to(y[:, None], (len(y), 16)))  # label held
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
                                           float(cm.delta_auc(p_obs[i, s], y, cf.study.splits.age_group(data["age"]))),
                                           atol=1e-6)
        chains = [[names.index(p) for p in c] for c in study.families.PAPER_CHAINS]
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


def test_weak_basic_classifiers_are_flagged_in_both_reports(demo, run):
    """The check of each setting's basic classifier, recomputed from results.json: flagged exactly
    when its AUC's bootstrap interval reaches 0.5 or its test AUC is more than max(0.1, the
    interval's width) below its validation AUC, and then a warning bullet in the demo's and the
    study's reports (the quick demo's classifiers barely train, so some are)."""
    out, _, _ = demo
    res = run[1]
    with open(os.path.join(out, "report.md")) as f:
        demo_report = f.read()
    with open(os.path.join(run[0], "report.md")) as f:
        study_report = f.read()
    for name, train_site, _ in P.SETTINGS:
        r, tr = res["settings"][name], res["training"][train_site]
        auc = np.mean(r["auc"]["basic"])
        lo, hi = r["auc_ci95_seed_mean"]["basic"]
        assert lo <= hi and set(r["auc_ci95_seed_mean"]) == set(cf.study.families.PAPER_NAMES)
        val = np.mean([v for m, v in zip(tr["members"], tr["best_val_auc"]) if m == "basic"])
        flagged = lo <= 0.5 or val - auc > max(0.1, hi - lo)
        check = res["classifier_checks"][name]
        assert check["auc"] == pytest.approx(auc) and check["validation_auc"] == pytest.approx(val)
        assert (check["warning"] is not None) == flagged
        bullet = f"- **Warning.** setting {name}: the basic classifier's test AUC is {auc:.3f}"
        assert (bullet in demo_report) == flagged and (bullet in study_report) == flagged
    assert ("## Warnings" in study_report) == any(c["warning"] for c in res["classifier_checks"].values())


def test_readme_numbers_render_from_a_demo_results_json(demo):
    """experiments.demo_readme reads the fields it quotes from a demo's results.json."""
    from experiments import demo_readme as DR

    out, res, _ = demo
    with open(os.path.join(out, "run_times.json")) as f:
        times = json.load(f)
    assert set(times["seconds"]) == {"marginalisation", "sensitivity", "representations", "training", "total"}
    text = " ".join(DR.render({"numbers": DR.summary(res), "run": times}).split())
    st = res["marginalisation"]["study"]
    ctc = st["settings"]["A->B"]["ctc"]
    assert ("trained on A, tested on B " + " / ".join(f"{ctc[f]:.1f}" for f in DR.CTC_FIELDS)) in text
    b = st["classifier_checks"]["B"]
    assert f"B {b['auc']:.2f} [{b['ci95'][0]:.2f}, {b['ci95'][1]:.2f}] ({b['validation_auc']:.2f})" in text
    ag = res["representations"]["splits"]["aggressive"]["scores"]
    assert f"PIP {ag['pip']:.2f} vs {ag['pip_baseline']:.2f}" in text
    assert f"ran in {times['seconds']['total']:.0f} s" in text
    with pytest.raises(SystemExit, match="quick"):
        DR.from_run(out)
