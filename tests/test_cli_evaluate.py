"""``cfjax evaluate``: npz and CSV inputs agree with each other and with cfjax.metrics.evaluate;
ΔAUC against a brute-force pair count; label-free files; counterfactual labels; deterministic JSON; every user
mistake ends in one line naming the file and column, exit code 2, no traceback."""

from __future__ import annotations

import json
import os
import sys

import numpy as np
import pytest

from cfjax.cli import main
from cfjax.metrics.files import load_predictions
from cfjax.metrics import evaluate
from cfjax.metrics.report import LABEL_FIELDS

N, K = 60, 4  # one shape everywhere: the compiled programs are shared by the tests


def _run(argv, capsys):
    try:
        main(["evaluate", *(str(a) for a in argv)])
        code = 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 1
    out, err = capsys.readouterr()
    return code, out, err


def _data(rng, labels=True):
    """Scores, labels, a sex column and weights (non-uniform weights everywhere, so the tests
    share one compiled bootstrap)."""
    p_cf = rng.uniform(0.02, 0.98, (N, K)).astype(np.float32)
    p_obs = np.clip(p_cf[:, 0] + rng.normal(0, 0.05, N), 0, 1).astype(np.float32)
    y = (rng.uniform(size=N) < p_obs).astype(np.int32)
    y[:2], y[2:4] = 0, 1
    sex = np.tile([0, 1], N // 2)
    sex[:4] = [0, 1, 0, 1]  # both labels in both groups
    d = {"p_obs": p_obs, "p_cf": p_cf, "group_sex": sex,
         "weights": rng.dirichlet(np.ones(K)).astype(np.float32)}
    if labels:
        d["y"] = y
    return d


def _write_csv(path, d, extra=None):
    cols = {"p_obs": d["p_obs"], **{f"p_cf_{j}": d["p_cf"][:, j] for j in range(d["p_cf"].shape[1])}}
    if "y" in d:
        cols["y"] = d["y"]
    cols["sex"] = d["group_sex"]
    cols.update(extra or {})
    names = list(cols)
    lines = [",".join(names)]
    for i in range(len(d["p_obs"])):
        lines.append(",".join(repr(float(cols[c][i])) if np.asarray(cols[c]).dtype.kind == "f"
                              else str(cols[c][i]) for c in names))
    path.write_text("\n".join(lines) + "\n")
    return path


def _auc_pairs(p, y):
    """AUC by counting every (positive, negative) pair, ties counting one half."""
    pos, neg = p[y == 1], p[y == 0]
    diff = pos[:, None].astype(np.float64) - neg[None, :]
    return float(((diff > 0) + 0.5 * (diff == 0)).mean())


def test_npz_and_csv_agree_with_evaluate(rng, tmp_path, capsys):
    d = _data(rng)
    w = d["weights"]
    npz = tmp_path / "preds.npz"
    np.savez(npz, **d)
    csv = _write_csv(tmp_path / "preds.csv", d)
    weights = ",".join(repr(float(v)) for v in w)
    code, out, err = _run([npz, "--out", tmp_path / "a", "--quick", "--resamples", 20], capsys)
    assert code == 0, err
    code, out, err = _run([csv, "--out", tmp_path / "b", "--quick", "--resamples", 20,
                           "--weights", weights, "--group", "sex"], capsys)
    assert code == 0, err
    a = json.loads((tmp_path / "a" / "results.json").read_text())
    b = json.loads((tmp_path / "b" / "results.json").read_text())
    for key in ("estimate", "low", "high", "groups"):
        assert json.dumps(a[key]) == json.dumps(b[key]), key
    assert a["input"]["format"] == "npz" and b["input"]["format"] == "csv"
    assert a["input"]["weights"] == pytest.approx(w.tolist())

    direct = evaluate(d["p_obs"], d["p_cf"], d["y"], weights=w).to_dict()
    assert set(a["estimate"]) == set(direct)
    for name, v in direct.items():
        if isinstance(v, dict):
            for alpha, x in v.items():
                assert a["estimate"][name][str(alpha)] == pytest.approx(x, rel=1e-5, abs=1e-6)
        else:
            assert a["estimate"][name] == pytest.approx(v, rel=1e-5, abs=1e-6), name

    g = a["groups"]["sex"]
    assert g["values"] == [0, 1] and sum(g["counts"]) == N
    p_bar = d["p_cf"].astype(np.float64) @ w.astype(np.float64)
    for which, p in (("obs", d["p_obs"]), ("cm", p_bar)):
        aucs = [_auc_pairs(p[d["group_sex"] == s], d["y"][d["group_sex"] == s]) for s in (0, 1)]
        assert g[f"auc_{which}"] == pytest.approx(aucs, abs=1e-5)
        assert g[f"delta_auc_{which}"] == pytest.approx(max(aucs) - min(aucs), abs=1e-5)
    report = (tmp_path / "a" / "report.md").read_text()
    assert "risk_cvar (alpha=0.25)" in report and "ΔAUC" in report and "20 resamples" in report


def test_without_labels_reports_stability_only(rng, tmp_path, capsys):
    d = _data(rng, labels=False)
    npz = tmp_path / "nolabels.npz"
    np.savez(npz, **d)
    code, out, err = _run([npz, "--out", tmp_path / "o", "--resamples", 20], capsys)
    assert code == 0, err
    r = json.loads((tmp_path / "o" / "results.json").read_text())
    direct = evaluate(d["p_obs"], d["p_cf"], weights=d["weights"]).to_dict()
    stability = {k: v for k, v in direct.items() if k not in LABEL_FIELDS}
    assert set(r["estimate"]) == set(stability) and set(r["low"]) == set(stability)
    for name, v in stability.items():
        assert r["estimate"][name] == pytest.approx(v, rel=1e-5, abs=1e-6), name
    assert r["input"]["labels"] is False and r["groups"] == {} and r["figures"] == []
    report = (tmp_path / "o" / "report.md").read_text()
    assert "stability fields only" in report and "risk_cm" not in report


def test_same_seed_same_bytes(rng, tmp_path, capsys):
    npz = tmp_path / "preds.npz"
    np.savez(npz, **_data(rng))
    seed = int(rng.integers(0, 1000))
    for name, s in (("one", seed), ("two", seed), ("other", seed + 1)):
        code, _, err = _run([npz, "--out", tmp_path / name, "--seed", s, "--quick", "--resamples", 20], capsys)
        assert code == 0, err
    one, two, other = ((tmp_path / n / "results.json").read_bytes() for n in ("one", "two", "other"))
    assert one == two
    assert json.loads(one)["low"] != json.loads(other)["low"]  # the seed draws the resamples


def test_figures_and_missing_matplotlib(rng, tmp_path, capsys, monkeypatch):
    npz = tmp_path / "preds.npz"
    np.savez(npz, **_data(rng))
    try:
        import matplotlib  # noqa: F401
        have = True
    except ImportError:
        have = False
    code, _, err = _run([npz, "--out", tmp_path / "fig", "--resamples", 20], capsys)
    assert code == 0, err
    r = json.loads((tmp_path / "fig" / "results.json").read_text())
    curve = r["reliability"]["obs"]
    assert len(curve["t"]) == 21 and 0 <= curve["smooth_ece"] <= 1
    assert all(0 <= v <= 1 for k in ("mean_label", "low", "high") for v in curve[k])  # a mean label
    if have:
        assert r["figures"] == ["reliability.png", "reliability.pdf"]
        for f in r["figures"]:
            assert (tmp_path / "fig" / f).read_bytes()[:4] in (b"\x89PNG", b"%PDF")
    for mod in ("matplotlib", "matplotlib.figure", "matplotlib.backends.backend_agg"):
        monkeypatch.setitem(sys.modules, mod, None)
    code, _, err = _run([npz, "--out", tmp_path / "nofig", "--resamples", 20], capsys)
    assert code == 0, err
    assert not any(f.endswith(".png") for f in os.listdir(tmp_path / "nofig"))
    notes = [line for line in (tmp_path / "nofig" / "report.md").read_text().splitlines() if "matplotlib" in line]
    assert len(notes) == 1 and "not installed" in notes[0]


def test_existing_out_refused(rng, tmp_path, capsys):
    npz = tmp_path / "preds.npz"
    np.savez(npz, **_data(rng))
    out = tmp_path / "full"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    code, _, err = _run([npz, "--out", out, "--quick", "--resamples", 5], capsys)
    assert code == 2 and "--force" in err and str(out) in err
    assert os.listdir(out) == ["keep.txt"]


def _mistakes(tmp_path, d):
    """(argv, words the one-line error must contain)."""
    cases = []
    cases.append(([tmp_path / "absent.npz"], ["absent.npz", "no such file"]))
    txt = tmp_path / "preds.txt"
    txt.write_text("p_obs\n0.5\n")
    cases.append(([txt], ["preds.txt", "extension"]))
    f = tmp_path / "junk.npz"
    f.write_text("not an archive")
    cases.append(([f], ["junk.npz", "not a .npz"]))
    f = tmp_path / "nocf.npz"
    np.savez(f, p_obs=d["p_obs"], y=d["y"])
    cases.append(([f], ["nocf.npz", "'p_cf'", "p_obs, y"]))
    f = _write_csv(tmp_path / "noobs.csv", {**d, "p_obs": d["p_obs"]})
    f.write_text(f.read_text().replace("p_obs,", "score,", 1))
    cases.append(([f], ["noobs.csv", "'p_obs'", "score, p_cf_0"]))
    f = _write_csv(tmp_path / "gap.csv", d)
    f.write_text(f.read_text().replace("p_cf_1,", "p_cf_9,", 1))
    cases.append(([f], ["gap.csv", "p_cf_1"]))
    f = tmp_path / "shape.npz"
    np.savez(f, p_obs=d["p_obs"], p_cf=d["p_cf"][:-1])
    cases.append(([f], ["shape.npz", "'p_cf'", f"{N - 1}"]))
    f = tmp_path / "flat.npz"
    np.savez(f, p_obs=d["p_obs"], p_cf=d["p_obs"])
    cases.append(([f], ["flat.npz", "'p_cf'", "shape"]))
    bad = d["p_cf"].copy()
    bad[7, 2] = np.nan
    f = _write_csv(tmp_path / "nan.csv", {**d, "p_cf": bad})
    cases.append(([f], ["nan.csv", "'p_cf_2'", "row 8"]))
    f = _write_csv(tmp_path / "range.csv", {**d, "p_obs": d["p_obs"] + 1.5})
    cases.append(([f], ["range.csv", "'p_obs'", "[0, 1]"]))
    f = tmp_path / "labels.npz"
    np.savez(f, **{**d, "y": d["y"] * 2})
    cases.append(([f], ["labels.npz", "'y'", "0 or 1"]))
    f = _write_csv(tmp_path / "onegroup.csv", {**d, "group_sex": np.zeros(N, np.int64)})
    cases.append(([f, "--group", "sex"], ["onegroup.csv", "'sex'", "one value"]))
    f = _write_csv(tmp_path / "onelabel.csv", {**d, "group_sex": (d["y"] == 1) + 2 * (np.arange(N) < 10)})
    cases.append(([f, "--group", "sex"], ["onelabel.csv", "'sex'", "both labels"]))
    f = _write_csv(tmp_path / "ok.csv", d)
    cases.append(([f, "--group", "site"], ["ok.csv", "'site'", "no column 'site' or 'group_site'"]))
    cases.append(([f, "--predictor", "basic"], ["ok.csv", "--predictor", "a table holds one"]))
    short = tmp_path / "short.csv"
    lines = f.read_text().splitlines()
    lines[5] = ",".join(lines[5].split(",")[:-1])  # data row 5 lacks its last field
    short.write_text("\n".join(lines) + "\n")
    cases.append(([short], ["short.csv", "row 5 has", "fields"]))
    bad = d["p_cf"].copy()
    bad[10, 3] = np.nan
    f = tmp_path / "nan.npz"
    np.savez(f, **{**d, "p_cf": bad})
    cases.append(([f], ["nan.npz", "'p_cf'", "row 11, intervention k = 3"]))
    y_cf = np.repeat(d["y"][:, None], K, 1).astype(np.float64)
    y_cf[4, 1] = np.nan
    f = _write_csv(tmp_path / "ycf.csv", d, extra={f"y_cf_{j}": y_cf[:, j] for j in range(K)})
    cases.append(([f], ["ycf.csv", "column 'y_cf_1'", "row 5"]))
    several = tmp_path / "several.npz"
    np.savez(several, **_several(d))
    cases.append(([several], ["several.npz", "3 predictors × 2 training seeds", "--predictor NAME", "basic, sex0.80"]))
    cases.append(([several, "--predictor", "sex0.8"], ["several.npz", "'sex0.8'", "basic, sex0.80, age0.90"]))
    cases.append(([several, "--predictor", "basic", "--predictor-seed", "5"], ["--predictor-seed 5", "0, 1"]))
    f = tmp_path / "one.npz"
    np.savez(f, **d)
    cases.append(([f, "--predictor", "basic"], ["one.npz", "single predictor"]))
    cases.append(([f, "--weights", "0.5,0.5"], ["weights", f"{K} values"]))
    cases.append(([f, "--weights", "a,b"], ["--weights", "numbers"]))
    f = _write_csv(tmp_path / "text.csv", d, extra={"y": np.array(["yes"] * N)})
    cases.append(([f], ["text.csv", "'y'", "numbers", "'yes'"]))
    return cases


def _several(d, predictors=("basic", "sex0.80", "age0.90"), seeds=(0, 1)):
    """``d``'s units in the layout cfjax.study.run (cfjax demo) writes its predictions in
    (format 2): ``p_obs (P, S, n)``, ``p_cf (P, S, n, K)``, ``y_cf (n, K)``, attributes without
    a prefix."""
    P, S = len(predictors), len(seeds)
    shift = np.linspace(-0.05, 0.05, P * S, dtype=np.float32).reshape(P, S, 1)
    p_obs = np.clip(d["p_obs"][None, None] + shift, 0, 1).astype(np.float32)
    p_cf = np.clip(d["p_cf"][None, None] - shift[..., None], 0, 1).astype(np.float32)
    y_cf = np.repeat(d["y"][:, None], K, 1)
    y_cf[::3, 1::2] = 1 - y_cf[::3, 1::2]  # some labels change under the interventions
    race = np.arange(N) % 3
    return {"format_version": np.int32(2), "names": np.array(predictors), "seeds": np.array(seeds),
            "p_obs": p_obs, "p_cf": p_cf,
            "p_race": np.repeat(p_obs[..., None], 3, -1), "y": d["y"], "y_cf": y_cf, "sex": d["group_sex"],
            "age": np.linspace(20, 90, N), "race": race, "weights": d["weights"].astype(np.float64)}


def test_user_mistakes_are_one_line(rng, tmp_path, capsys):
    d = _data(rng)
    for argv, words in _mistakes(tmp_path, d):
        code, out, err = _run([*argv, "--out", tmp_path / "never"], capsys)
        assert code == 2, (argv, err)
        assert "Traceback" not in out + err, argv
        lines = err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("cfjax: error: "), (argv, err)
        for w in words:
            assert w in lines[0], (w, lines[0])
        assert not (tmp_path / "never").exists()


def test_parquet(rng, tmp_path, capsys):
    pd = pytest.importorskip("pandas")
    d = _data(rng)
    frame = pd.DataFrame({"p_obs": d["p_obs"], **{f"p_cf_{j}": d["p_cf"][:, j] for j in range(K)},
                          "y": d["y"], "sex": d["group_sex"]})
    path = tmp_path / "preds.parquet"
    try:
        frame.to_parquet(path)
    except ImportError:  # no parquet engine: the command says what to install
        path.write_bytes(b"PAR1")
        code, out, err = _run([path, "--out", tmp_path / "o"], capsys)
        assert code == 2 and "Traceback" not in out + err
        assert "preds.parquet" in err and "pyarrow" in err and len(err.strip().splitlines()) == 1
        return
    loaded = load_predictions(str(path), ("sex",))
    np.testing.assert_array_equal(loaded["p_cf"], d["p_cf"])
    np.testing.assert_array_equal(loaded["y"], d["y"])
    np.testing.assert_array_equal(loaded["groups"]["sex"], d["group_sex"])


def test_multiclass_npz_checks(rng, tmp_path, capsys):
    """Class probabilities load from npz (the full run costs another compilation, so only the
    loading and its errors are tested here)."""
    p_cf = rng.dirichlet(np.ones(3), (N, K)).astype(np.float32)
    y = rng.integers(0, 3, N)
    npz = tmp_path / "classes.npz"
    np.savez(npz, p_obs=p_cf[:, 0], p_cf=p_cf, y=y)
    data = load_predictions(str(npz))
    assert data["classes"] == 3 and data["p_cf"].shape == (N, K, 3)
    np.testing.assert_array_equal(data["y"], y)
    np.savez(npz, p_obs=p_cf[:, 0], p_cf=p_cf, y=y + 1)
    code, _, err = _run([npz, "--out", tmp_path / "o"], capsys)
    assert code == 2 and "0..2" in err and "'y'" in err and "classes.npz" in err
    np.savez(npz, p_obs=p_cf[:, 0] * 0.5, p_cf=p_cf, y=y)
    code, _, err = _run([npz, "--out", tmp_path / "o"], capsys)
    assert code == 2 and "sum to 1" in err and "'p_obs'" in err and "Traceback" not in err
    np.savez(npz, p_obs=p_cf[:, 0], p_cf=p_cf, y=y)
    code, _, err = _run([npz, "--out", tmp_path / "o", "--tau", 0.3], capsys)
    assert code == 2 and "--tau" in err and not (tmp_path / "o").exists()


def test_help_and_example_file(rng, tmp_path, capsys):
    code, out, _ = _run(["--help"], capsys)
    assert code == 0 and "cfjax evaluate preds.npz --out results/evaluate" in out
    for ext in ("npz", "csv"):
        path = tmp_path / f"example.{ext}"
        code, out, err = _run(["--example-file", path, "--seed", int(rng.integers(100))], capsys)
        assert code == 0, err
        data = load_predictions(str(path), ("sex",) if ext == "csv" else ())
        assert data["p_cf"].ndim == 2 and data["y"] is not None and "sex" in data["groups"]
    code, _, err = _run(["--example-file", tmp_path / "example.npz"], capsys)
    assert code == 2 and "--force" in err
    w = rng.dirichlet(np.ones(8))
    (tmp_path / "w.txt").write_text("\n".join(repr(float(v)) for v in w) + "\n")
    np.save(tmp_path / "w.npy", w)
    for spec in (",".join(repr(float(v)) for v in w), str(tmp_path / "w.txt"), str(tmp_path / "w.npy")):
        got = load_predictions(str(tmp_path / "example.csv"), weights=spec)["weights"]
        np.testing.assert_array_equal(got, w.astype(np.float32))


def test_counterfactual_labels(rng, tmp_path, capsys):
    """y_cf (npz array or CSV columns y_cf_*) is read and passed on: the same numbers from both
    files, equal to evaluate(..., y_cf=y_cf); the marginalised reliability diagram is drawn
    against ȳ = y_cf @ q."""
    from cfjax.metrics import smooth_ece

    d = _data(rng)
    w = d["weights"]
    y_cf = np.where(rng.uniform(size=(N, K)) < 0.2, 1 - d["y"][:, None], d["y"][:, None]).astype(np.int32)
    npz = tmp_path / "ycf.npz"
    np.savez(npz, y_cf=y_cf, **d)
    csv = _write_csv(tmp_path / "ycf.csv", d, extra={f"y_cf_{j}": y_cf[:, j] for j in range(K)})
    weights = ",".join(repr(float(v)) for v in w)
    code, out, err = _run([npz, "--out", tmp_path / "a", "--quick", "--resamples", 20], capsys)
    assert code == 0, err
    assert "Counterfactual labels" in out
    code, _, err = _run([csv, "--out", tmp_path / "b", "--quick", "--resamples", 20, "--weights", weights], capsys)
    assert code == 0, err
    a = json.loads((tmp_path / "a" / "results.json").read_text())
    b = json.loads((tmp_path / "b" / "results.json").read_text())
    for key in ("estimate", "low", "high", "reliability"):
        assert json.dumps(a[key]) == json.dumps(b[key]), key
    assert a["input"]["counterfactual_labels"] is True and a["estimate"]["labels"] == "counterfactual"
    direct = evaluate(d["p_obs"], d["p_cf"], d["y"], y_cf=y_cf, weights=w).to_dict()
    assert set(a["estimate"]) == set(direct)
    for name, v in direct.items():
        if isinstance(v, dict):
            for alpha, x in v.items():
                assert a["estimate"][name][str(alpha)] == pytest.approx(x, rel=1e-5, abs=1e-6)
        elif name != "labels":
            assert a["estimate"][name] == pytest.approx(v, rel=1e-5, abs=1e-6), name
    plain = evaluate(d["p_obs"], d["p_cf"], d["y"], weights=w).to_dict()
    assert a["estimate"]["risk_orig"] == pytest.approx(plain["risk_orig"], rel=1e-5)
    y_bar = np.clip(y_cf @ w.astype(np.float64), 0, 1)
    p_bar = (d["p_cf"].astype(np.float64) @ w.astype(np.float64)).astype(np.float32)
    assert a["reliability"]["cm"]["smooth_ece"] == pytest.approx(
        float(smooth_ece(p_bar, y_bar.astype(np.float32))), rel=1e-5)
    assert "counterfactual labels given" in (tmp_path / "a" / "report.md").read_text()
    # mistakes: no y, a wrong shape, a wrong label, a gap in the columns
    cases = [(dict(y_cf=y_cf, **{k: v for k, v in d.items() if k != "y"}), ["'y_cf'", "without", "'y'"]),
             (dict(y_cf=y_cf[:, :-1], **d), ["'y_cf'", f"({N}, {K})"]),
             (dict(y_cf=y_cf * 2, **d), ["'y_cf'", "0 or 1"])]
    for i, (arrays, words) in enumerate(cases):
        np.savez(tmp_path / f"bad{i}.npz", **arrays)
        code, out, err = _run([tmp_path / f"bad{i}.npz", "--out", tmp_path / "never"], capsys)
        assert code == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in out + err, err
        assert all(word in err for word in words), (words, err)
    f = _write_csv(tmp_path / "gap.csv", d, extra={"y_cf_0": y_cf[:, 0], "y_cf_2": y_cf[:, 2]})
    code, _, err = _run([f, "--out", tmp_path / "never"], capsys)
    assert code == 2 and "y_cf_1" in err
    assert not (tmp_path / "never").exists()


def test_a_file_of_several_predictors_round_trips(rng, tmp_path, capsys):
    """A predictions file as cfjax demo writes it (10 predictors × seeds × n; here 3 × 2) through
    `cfjax evaluate --predictor NAME --predictor-seed S`: the numbers of that predictor alone
    (cfjax.metrics.evaluate with the file's y_cf (n, K) as it is), ΔAUC over the attribute named with
    --group against a pair count, and the same results.json numbers as a one-predictor file."""
    d = _data(rng)
    several = _several(d)
    path = tmp_path / "predictions_A.npz"
    np.savez(path, **several)
    i, j = 2, 1  # age0.90, training seed 1
    code, out, err = _run([path, "--predictor", "age0.90", "--predictor-seed", 1, "--group", "sex", "--quick",
                           "--resamples", 20, "--out", tmp_path / "a"], capsys)
    assert code == 0, err
    res = json.loads((tmp_path / "a" / "results.json").read_text())
    p_obs, p_cf, y_cf = several["p_obs"][i, j], several["p_cf"][i, j], several["y_cf"]
    direct = evaluate(p_obs, p_cf, d["y"], y_cf=y_cf, weights=several["weights"].astype(np.float32)).to_dict()
    for name, value in direct.items():
        if name == "labels":
            continue
        got = res["estimate"][name]
        if isinstance(value, dict):
            assert got == pytest.approx({str(a): v for a, v in value.items()}, rel=1e-5, abs=1e-6), name
        else:
            assert got == pytest.approx(value, rel=1e-5, abs=1e-6, nan_ok=True), name
    sex = several["sex"]
    aucs = [_auc_pairs(p_obs[sex == g], d["y"][sex == g]) for g in (0, 1)]
    assert res["groups"]["sex"]["delta_auc_obs"] == pytest.approx(max(aucs) - min(aucs), abs=1e-6)
    assert res["input"]["predictor"] == {"name": "age0.90", "seed": 1, "predictors": 3, "seeds": 2}
    assert sorted(res["input"]["not_read"]) == ["array 'age'", "array 'p_race'", "array 'race'"]
    report = (tmp_path / "a" / "report.md").read_text()
    assert "Predictor 'age0.90', training seed 1 (of the file's 3 predictors × 2 seeds)" in report
    # the same predictor saved alone, in the one-predictor layout: the same numbers
    one = tmp_path / "one.npz"
    np.savez(one, p_obs=p_obs, p_cf=p_cf, y=d["y"], y_cf=y_cf, weights=several["weights"], group_sex=sex)
    code, _, err = _run([one, "--quick", "--resamples", 20, "--out", tmp_path / "b"], capsys)
    assert code == 0, err
    alone = json.loads((tmp_path / "b" / "results.json").read_text())
    for part in ("estimate", "low", "high", "groups", "reliability"):
        assert res[part] == alone[part], part
    # the default training seed is the file's first
    code, _, err = _run([path, "--predictor", "age0.90", "--quick", "--resamples", 20, "--out", tmp_path / "c"], capsys)
    first = json.loads((tmp_path / "c" / "results.json").read_text())
    assert code == 0 and first["input"]["predictor"]["seed"] == 0
    assert first["estimate"]["s_var"] == pytest.approx(float(evaluate(several["p_obs"][i, 0], several["p_cf"][i, 0],
                                                                      weights=several["weights"]).s_var), rel=1e-5)


@pytest.mark.parametrize("named", [(), ("site",), ("sex", "site")])
def test_group_columns_follow_one_rule_in_every_format(rng, tmp_path, capsys, named):
    """npz arrays and CSV columns alike: without --group every group_<name> is a group, with it
    the named ones (NAME or group_NAME); what is not read is listed, never dropped silently."""
    d = _data(rng)
    site = np.tile([0, 1, 1], N // 3 + 1)[:N]
    site[:4] = [0, 0, 1, 1]
    site[4:8] = [0, 0, 1, 1]
    d["y"][4:8] = [0, 1, 0, 1]  # both labels in both sites
    npz = tmp_path / "preds.npz"
    np.savez(npz, **d, site=site, note=np.arange(N))
    csv = _write_csv(tmp_path / "preds.csv", {**d, "group_sex": d["group_sex"]}, extra={"site": site,
                                                                                       "note": np.arange(N)})
    csv.write_text(csv.read_text().replace(",sex,", ",group_sex,", 1))
    groups = [a for g in named for a in ("--group", g)]
    results = {}
    for path in (npz, csv):
        out = tmp_path / path.suffix[1:] / "_".join(named or ("none",))
        code, _, err = _run([path, *groups, "--weights", ",".join(repr(float(v)) for v in d["weights"]), "--quick",
                             "--resamples", 20, "--out", out], capsys)
        assert code == 0, err
        results[path.suffix] = json.loads((out / "results.json").read_text())
    expect = set(named) if named else {"sex"}
    for res in results.values():
        assert set(res["groups"]) == expect
        unread = {u.split()[1].strip("'") for u in res["input"]["not_read"]}
        assert unread == {"site", "note", "group_sex"} - {"group_sex" if g == "sex" else g for g in expect}
        assert any("Not read from the file" in n for n in res["notes"])
    a, b = results[".npz"], results[".csv"]
    assert a["groups"].keys() == b["groups"].keys()
    for g in a["groups"]:
        assert a["groups"][g]["delta_auc_obs"] == pytest.approx(b["groups"][g]["delta_auc_obs"], abs=1e-6)


def test_the_study_predictions_file_round_trips(rng, tmp_path):
    """cfjax.study.predictions.save_predictions (what the study and cfjax demo write) stores y_cf (n, K), units
    first, with format_version 2, and load_predictions gives back each predictor's arrays as they
    were written, with no transpose."""
    from cfjax import study
    from cfjax.metrics import files as cli_predictions
    from cfjax.study import predictions as study_predictions

    assert cli_predictions.FORMAT_VERSION == study_predictions.FORMAT_VERSION == 2
    d = _data(rng)
    several = _several(d)
    path = tmp_path / "predictions_A.npz"
    study.predictions.save_predictions(str(path), **{k: v for k, v in several.items() if k != "format_version"})
    with np.load(path) as z:
        assert int(z["format_version"]) == 2 and z["y_cf"].shape == (N, K)
        np.testing.assert_array_equal(z["y_cf"], several["y_cf"])
    for i, name in enumerate(several["names"]):
        for j, seed in enumerate(several["seeds"]):
            got = load_predictions(str(path), predictor=str(name), predictor_seed=int(seed))
            np.testing.assert_array_equal(got["p_obs"], several["p_obs"][i, j])
            np.testing.assert_array_equal(got["p_cf"], several["p_cf"][i, j])
            np.testing.assert_array_equal(got["y_cf"], several["y_cf"])
            np.testing.assert_array_equal(got["y"], d["y"])
            assert "array 'format_version'" not in got["unused"]
    with pytest.raises(ValueError, match="`y_cf`"):  # the old layout is refused at writing too
        study.predictions.save_predictions(str(tmp_path / "old.npz"), **{**{k: v for k, v in several.items()
                                                                if k != "format_version"},
                                                             "y_cf": several["y_cf"].T})


def test_a_format_1_predictions_file_is_refused_with_its_conversion(rng, tmp_path, capsys):
    """A file of several predictors written before y_cf became (n, K) (no format_version, y_cf
    (K, n)) is refused in one line that says how to convert it; converted as it says, it reads
    as the format 2 file; a format_version other than 2 is refused."""
    d = _data(rng)
    several = _several(d)
    old = {k: v for k, v in several.items() if k != "format_version"}
    old["y_cf"] = several["y_cf"].T  # format 1: one row per intervention
    path = tmp_path / "predictions_old.npz"
    np.savez(path, **old)
    code, out, err = _run([path, "--predictor", "basic", "--out", tmp_path / "never"], capsys)
    assert code == 2 and "Traceback" not in out + err and len(err.strip().splitlines()) == 1
    for words in ("predictions_old.npz", "format_version", "(K, n)", "(n, K)", "d['y_cf'] = d['y_cf'].T"):
        assert words in err, (words, err)
    assert not (tmp_path / "never").exists()
    converted = dict(np.load(path))  # the conversion the message gives
    converted["y_cf"] = converted["y_cf"].T
    converted["format_version"] = 2
    np.savez(path, **converted)
    got = load_predictions(str(path), predictor="sex0.80", predictor_seed=1)
    np.testing.assert_array_equal(got["y_cf"], several["y_cf"])
    for bad in (3, 1):
        np.savez(path, **{**several, "format_version": np.int32(bad)})
        code, _, err = _run([path, "--predictor", "basic", "--out", tmp_path / "never"], capsys)
        assert code == 2 and f"'format_version' is {bad}" in err, err
