"""``cfjax cfr``: results.json equals the library called directly (TPR-gap against a numpy loop),
.npy files and .npz names agree, label-free output without true counterfactuals, byte-identical
JSON for the same seed, and every user mistake is one line naming the option."""

from __future__ import annotations

import json

import jax.numpy as jnp
import numpy as np
import pytest

import cfjax.representations as R
from cfjax.cli import main


def _run(args, capsys):
    try:
        main(args)
        code = 0
    except SystemExit as e:
        code = e.code
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _run_example(command, capsys):
    """Run the ``--help`` example of ``command`` in the current folder: its ``python -c`` lines
    with exec, shell lines with bash, its ``cfjax`` line in-process; returns that line's args."""
    import shlex
    import subprocess

    text = command.epilog.replace("\b", "").replace("\\\n", "")
    lines = [ln.strip() for ln in text.split("Example", 1)[1].splitlines()[1:] if ln.strip()]
    args = None
    for line in lines:
        tokens = shlex.split(line)
        if tokens[0] == "python":
            assert tokens[1] == "-c"
            exec(tokens[2], {})
        elif tokens[0] == "cfjax":
            args = tokens[1:]
            code, _, err = _run(args, capsys)
            assert code == 0, err
        else:
            subprocess.run(["bash", "-c", line], check=True)
    assert args is not None
    return args


def _data(rng, n=200, d=6):
    z = rng.integers(0, 2, n)
    z[:2] = [0, 1]
    y = rng.integers(0, 2, n)
    y[:2] = [1, 0]
    h = rng.normal(size=(n, d))
    X, X_cf = h.copy(), h.copy()
    X[:, 0] += 2.0 * z
    X_cf[:, 0] += 2.0 * (1 - z)
    X[:, 1] += 1.5 * y
    X_cf[:, 1] += 1.5 * y
    return X.astype(np.float32), z, y, X_cf.astype(np.float32)


@pytest.fixture
def files(rng, tmp_path):
    X, z, y, X_cf = _data(rng)
    np.savez(tmp_path / "emb.npz", X=X, z=z, y=y, X_cf=X_cf)
    for name, v in (("X", X), ("z", z), ("y", y), ("X_cf", X_cf)):
        np.save(tmp_path / f"{name}.npy", v)
    return tmp_path, (X, z, y, X_cf)


def _tpr_gap_loop(y, y_pred, z, value):
    gaps = []
    for c in range(int(max(y.max(), y_pred.max())) + 1):
        rates = []
        for group in (z == value, z != value):
            sel = group & (y == c)
            rates.append(np.mean(y_pred[sel] == c) if sel.any() else np.nan)
        gaps.append(rates[0] - rates[1])
    return np.array(gaps)


def test_results_equal_library_and_npy_npz_agree(files, capsys):
    path, (X, z, y, X_cf) = files
    code, _, err = _run([
        "cfr", str(path / "emb.npz"), "--concept", "z", "--labels", "y", "--true-counterfactuals", "X_cf",
        "--draws", "4", "--out", str(path / "a")], capsys)
    assert code == 0, err
    res = json.loads((path / "a" / "results.json").read_text())["results"]
    model = R.fit_cfr(X, z)
    clf = R.train_logistic(X, y, n_classes=2)
    p_obs, p_true = clf(jnp.asarray(X)), clf(jnp.asarray(X_cf))
    p_cfr = clf(R.counterfactuals(model, X, (1 - z).astype(np.int32)))
    expect = R.score(p_obs, p_true, p_cfr).to_dict()
    for k, v in expect.items():
        np.testing.assert_allclose(res["scores"][k], v, rtol=1e-5, atol=1e-7, err_msg=k)
    y_pred = np.argmax(np.asarray(p_obs), 1)
    np.testing.assert_allclose(res["accuracy"], np.mean(y_pred == y), rtol=1e-6)
    np.testing.assert_allclose(res["tpr_gap"]["1"], _tpr_gap_loop(y, y_pred, z, 1), atol=1e-6)
    text = (path / "a" / "report.md").read_text()
    assert "PIP" in text and "TPR-gap" in text
    code, _, err = _run([
        "cfr", str(path / "X.npy"), "--concept", str(path / "z.npy"), "--labels", str(path / "y.npy"),
        "--true-counterfactuals", str(path / "X_cf.npy"), "--draws", "4", "--out", str(path / "b")], capsys)
    assert code == 0, err
    res_b = json.loads((path / "b" / "results.json").read_text())["results"]
    assert res_b == res


def test_label_free_and_byte_identical(files, capsys):
    path, _ = files
    outs = []
    for name in ("c", "d"):
        code, _, err = _run(["cfr", str(path / "emb.npz"), "--concept", "z", "--labels", "y", "--draws", "4",
                             "--seed", "3", "--out", str(path / name)], capsys)
        assert code == 0, err
        outs.append((path / name / "results.json").read_bytes())
    assert outs[0] == outs[1]
    res = json.loads(outs[0])["results"]
    assert "scores" not in res and res["true_counterfactuals"] is False
    assert set(res["label_free"]) >= {"ate_cfr", "mean_effect_cfr", "decision_change_cfr", "ate_cfr_stochastic"}
    assert "No true counterfactual" in (path / "c" / "report.md").read_text()


def test_three_valued_concept_sends_every_unit_to_each_value(rng, tmp_path, capsys):
    # No target per unit (k = 3, no --counterfactual-concept): every unit sent to each value v,
    # scored against the library's CFRs to v computed unit by unit with per-unit targets.
    n = 150
    z = np.arange(n) % 3
    y = rng.integers(0, 2, n)
    X = rng.normal(size=(n, 5))
    X[:, 0] += 2.0 * (z == 1)
    X[:, 1] += 2.0 * (z == 2) + 1.5 * y
    X = X.astype(np.float32)
    np.savez(tmp_path / "emb3.npz", X=X, z=z, y=y)
    code, _, err = _run(["cfr", str(tmp_path / "emb3.npz"), "--concept", "z", "--labels", "y", "--draws", "0",
                         "--out", str(tmp_path / "k3")], capsys)
    assert code == 0, err
    res = json.loads((tmp_path / "k3" / "results.json").read_text())["results"]
    model = R.fit_cfr(X, z, n_values=3)
    clf = R.train_logistic(X, y, n_classes=2)
    p_obs = clf(jnp.asarray(X))
    assert sorted(res["label_free_by_target_value"]) == ["0", "1", "2"]
    for v in range(3):
        p_v = clf(R.counterfactuals(model, X, np.full(n, v, np.int32)))
        got = res["label_free_by_target_value"][str(v)]
        np.testing.assert_allclose(got["ate_cfr"], float(R.ate(p_obs, p_v)), rtol=1e-5, atol=1e-7)
        np.testing.assert_allclose(got["mean_effect_cfr"], np.asarray(R.mean_effect(p_obs, p_v)), atol=1e-6)


def test_user_mistakes_one_line(files, capsys):
    path, (X, z, y, X_cf) = files
    bad = X.copy()
    bad[3, 2] = np.nan
    np.save(path / "nan.npy", bad)
    np.save(path / "short.npy", y[:-5])
    np.save(path / "frac.npy", y + 0.5)
    np.save(path / "cf_shape.npy", X_cf[:, :3])
    base = ["cfr", str(path / "emb.npz"), "--concept", "z", "--labels", "y"]
    cases = [
        (["cfr", str(path / "missing.npz"), "--concept", "z", "--labels", "y"], "missing.npz"),
        ([*base[:4], "--labels", "nope"], "--labels"),
        (["cfr", str(path / "nan.npy"), "--concept", str(path / "z.npy"), "--labels", str(path / "y.npy")],
         "EMBEDDINGS"),
        # rows counted from 1, as in every subcommand: unit 3 is row 4
        (["cfr", str(path / "nan.npy"), "--concept", str(path / "z.npy"), "--labels", str(path / "y.npy")],
         "(first at row 4)"),
        ([*base[:4], "--labels", str(path / "short.npy")], "--labels"),
        ([*base[:4], "--labels", str(path / "frac.npy")], "--labels"),
        ([*base, "--true-counterfactuals", str(path / "cf_shape.npy")], "--true-counterfactuals"),
        ([*base, "--bogus", "1"], "--bogus"),
        ([*base, "--method", "pca"], "--method"),
    ]
    for args, name in cases:
        code, _, err = _run([*args, "--out", str(path / "never")], capsys)
        assert code != 0, args
        assert "Traceback" not in err
        assert len(err.strip().splitlines()) == 1, err
        assert name in err, (name, err)
    assert not (path / "never").exists()  # nothing created on a mistake


def test_help_example_runs(tmp_path, monkeypatch, capsys):
    from cfjax.cli.cfr import command

    code, out, _ = _run(["cfr", "--help"], capsys)
    assert code == 0 and "Example" in out and "cfjax cfr" in out
    monkeypatch.chdir(tmp_path)
    args = _run_example(command, capsys)
    res = json.loads((tmp_path / args[args.index("--out") + 1] / "results.json").read_text())
    assert res["results"]["true_counterfactuals"] is True and "pip" in res["results"]["scores"]
