"""The README's demo numbers are generated from the committed demo results: the section between
the demo-numbers markers is exactly what ``experiments.demo_readme`` renders from
``docs/demo_results.json``, and its check fails on a README that differs. (That a fresh
``make demo`` reproduces docs/demo_results.json is ``python -m experiments.demo_readme --check
results/demo``, which ``make demo`` runs; the quick demo's results.json is summarised in
tests/test_study.py.)"""

from __future__ import annotations

import copy
import json
import os

import pytest

from experiments import demo_readme as D


@pytest.fixture(scope="module")
def doc():
    with open(D.RESULTS, encoding="utf-8") as f:
        return json.load(f)


def test_readme_section_is_what_the_committed_results_render(doc):
    with open(D.README, encoding="utf-8") as f:
        section = D.readme_section(f.read())
    assert section == D.render(doc), "README.md's demo section is stale: python -m experiments.demo_readme RUN"


def test_the_committed_results_are_the_full_demo_with_measured_times(doc):
    n, run = doc["numbers"], doc["run"]
    assert n["quick"] is False and n["seed"] == 0
    sec = run["seconds"]
    assert sec["total"] >= sec["marginalisation"] + sec["sensitivity"] + sec["representations"] - 1e-6
    assert run["cpus"] >= 1 and len(run["date"]) == 10
    # the demo's basic classifiers pass the chance check in every setting
    assert all(c["warning"] is None and c["ci95"][0] > 0.5 for c in n["study"]["basic_classifier"].values())


def test_check_passes_and_fails_on_a_changed_readme(tmp_path, monkeypatch, doc, capsys):
    with open(D.README, encoding="utf-8") as f:
        text = f.read()
    readme = tmp_path / "README.md"
    readme.write_text(text, encoding="utf-8")
    monkeypatch.setattr(D, "README", str(readme))
    assert D.main(["--check"]) == 0
    # a README rendered from other numbers (one CTC half a transition higher) is stale
    stale = copy.deepcopy(doc)
    stale["numbers"]["study"]["ctc"]["A"]["risk_orig"] += 0.5
    assert D.render(stale) != D.render(doc)
    readme.write_text(D.replace_section(text, D.render(stale)), encoding="utf-8")
    assert D.main(["--check"]) == 1
    assert "differs" in capsys.readouterr().out


def test_check_compares_a_run_with_the_committed_numbers(tmp_path, monkeypatch, doc, capsys):
    """A run folder whose summary renders like the committed one passes; one number changed fails."""
    run = tmp_path / "run"
    run.mkdir()
    monkeypatch.setattr(D, "summary", lambda results: results["numbers"])
    fresh = copy.deepcopy(doc)
    (run / "results.json").write_text(json.dumps({"quick": False, "numbers": fresh["numbers"]}), encoding="utf-8")
    (run / "run_times.json").write_text(json.dumps(fresh["run"]), encoding="utf-8")
    with open(D.GRID, "rb") as f:
        (run / "counterfactual_grid.png").write_bytes(f.read())
    assert D.main(["--check", str(run)]) == 0
    assert "reproduced" in capsys.readouterr().out
    fresh["numbers"]["study"]["ctc"]["A->B"]["risk_cm"] += 0.5
    (run / "results.json").write_text(json.dumps({"quick": False, "numbers": fresh["numbers"]}), encoding="utf-8")
    assert D.main(["--check", str(run)]) == 1
    assert "differ from the README's" in capsys.readouterr().out


@pytest.mark.parametrize("deltas, expected", [
    ({"risk_cm": (1, 1, 1), "risk_ie": (0.5, 2, 1)}, "reproduces"),
    ({"risk_cm": (-0.5, -1, -1), "risk_ie": (0, 0.5, 0)}, "does not fully reproduce"),
])
def test_verdict_follows_the_ctc(deltas, expected):
    ctc = {name: {"risk_orig": 6.0, **{f: 6.0 + d[i] for f, d in deltas.items()}}
           for i, name in enumerate(D.SETTINGS)}
    text = D._verdict(ctc)
    assert expected in text
    for f, lab in (("risk_cm", "R_CM"), ("risk_ie", "R_IE")):
        beats = [D._name(n) for i, n in enumerate(D.SETTINGS) if deltas[f][i] > 0]
        below = [D._name(n) for i, n in enumerate(D.SETTINGS) if deltas[f][i] < 0]
        part = text.split(lab + " ")[1].split(";")[0]
        if len(beats) == 3:
            assert "beats it in all three settings" in part
        elif len(below) == 3:
            assert "is below it in all three settings" in part
        else:
            for name in beats:
                assert name in part.split("beats it on ")[1].split(",")[0]


def test_section_markers_are_required(tmp_path):
    with pytest.raises(ValueError, match="markers"):
        D.readme_section("no markers here")
    assert os.path.exists(D.GRID)


def test_a_results_json_without_the_quoted_numbers_is_refused(tmp_path):
    (tmp_path / "results.json").write_text(json.dumps({"quick": False, "seed": 0, "marginalisation": {}}),
                                           encoding="utf-8")
    with pytest.raises(SystemExit, match="lacks 'study'"):
        D.from_run(str(tmp_path))
