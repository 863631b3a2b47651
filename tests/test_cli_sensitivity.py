"""``cfjax sensitivity``: results.json equals the library called directly, the CSV's column order
and the graph file's format (YAML or JSON) change nothing, the same seed gives byte-identical JSON,
and every user mistake is one line naming the file, column or option."""

from __future__ import annotations

import json

import jax
import numpy as np
import pandas as pd
import pytest

import cfjax.sensitivity as S
from cfjax.cli import main
from cfjax.sensitivity.cfu import bivariate_correlation


def _run(args, capsys):
    try:
        main(args)
        code = 0
    except SystemExit as e:
        code = e.code
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _frame(rng, n=300):
    """A law-school-shaped SCM with correlated errors and a text sensitive attribute."""
    a = np.where(rng.random(n) < 0.6, 1.0, -1.0)
    e = rng.multivariate_normal([0.0, 0.0], [[1.0, 0.35], [0.35, 0.49]], size=n)
    g = 0.6 * a + e[:, 0]
    l = 0.4 * a + 0.7 * g + 0.35 * g**2 + e[:, 1]
    y = g + 0.5 * l + 0.3 * g * l + 0.5 * rng.standard_normal(n)
    return pd.DataFrame({"race": np.where(a > 0, "white", "black"), "gpa": g, "lsat": l, "fya": y})


YAML = "nodes:\n  gpa: [race]\n  lsat: [race, gpa]\n"
ARGS = ["--sensitive", "race", "--target", "fya", "--categories", "race=black,white", "--quick", "--bootstrap", "6"]


@pytest.fixture
def x64():
    previous = bool(jax.config.jax_enable_x64)
    jax.config.update("jax_enable_x64", True)
    yield
    jax.config.update("jax_enable_x64", previous)


def _library(frame, res):
    """The same analysis through the library, with the options results.json records."""
    st = res["settings"]
    settings = S.FitConfig(**{k: tuple(v) if isinstance(v, list) else v for k, v in st["fit"].items()})
    prob = S.from_frame(frame, {"gpa": ["race"], "lsat": ["race", "gpa"]}, sensitive="race", target="fya",
                        categories={"race": ["black", "white"]})
    model = S.fit(prob.graph, prob.data, settings)
    key = jax.random.key(res["seed"])
    config = S.SearchConfig(**st["search"])
    wc = S.worst_case(model, np.asarray(st["budgets"]), key=key, config=config)
    inv = S.inverse_budget(model, float(model.baseline_unfairness["blind"]), key=key, config=config, worst=wc,
                           **st["inverse"])
    sweep = {}
    for lam in st["sweep_lambdas"]:
        m = S.fit(prob.graph, prob.data, settings.replace(lam=float(lam), equation_degrees=model.degrees))
        sweep[lam] = [float(S.cfu(m, P)) for P in np.asarray(wc.P)] + [S.cfu_at_zero_correlation(m)]
    return model, wc, inv, sweep


def st_budgets(res):
    return res["settings"]["budgets"]


def _close(a, b):
    a, b = (np.asarray([np.nan if v is None else v for v in np.ravel(x)], np.float64) for x in (a, b))
    np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-15)


def test_matches_library_column_order_graph_format_bytes(rng, tmp_path, capsys, x64):
    frame = _frame(rng)
    frame.to_csv(tmp_path / "data.csv", index=False)
    frame[["fya", "lsat", "race", "gpa"]].to_csv(tmp_path / "shuffled.csv", index=False)
    (tmp_path / "graph.yaml").write_text(YAML)
    (tmp_path / "graph.json").write_text(json.dumps({"lsat": ["race", "gpa"], "gpa": ["race"]}))
    code, _, err = _run(["sensitivity", str(tmp_path / "data.csv"), "--graph", str(tmp_path / "graph.yaml"), *ARGS,
                         "--seed", "1", "--out", str(tmp_path / "a")], capsys)
    assert code == 0, err
    res = json.loads((tmp_path / "a" / "results.json").read_text())
    assert {"report.md", "results.json"} <= {p.name for p in (tmp_path / "a").iterdir()}
    model, wc, inv, sweep = _library(frame, res)
    _close(res["worst_case"]["cfu"], wc.cfu)
    _close(res["worst_case"]["P"], wc.P)
    # the curve's budgets: the even grid and every benchmark's (the worst case at a benchmark is on the curve)
    bench = S.benchmarks(model, k=tuple(res["settings"]["benchmarks"]))
    assert res["benchmarks"] == json.loads(json.dumps(bench.to_dict()))
    implied = np.asarray(bench.p_max)[np.asarray(bench.feasible) & (np.asarray(bench.p_max) > 0)]
    np.testing.assert_allclose(res["worst_case"]["p_max"], np.unique(np.concatenate([np.linspace(0.0, 0.99, 4), implied])))
    assert implied.size >= 1  # race is a parent of both features
    for name in ("unconstrained", "blind"):  # each baseline's own worst case, over the same budgets
        other = S.worst_case(model.scoring(name), np.asarray(st_budgets(res)), key=jax.random.key(res["seed"]),
                             config=S.SearchConfig(**res["settings"]["search"]))
        _close(res["predictors"][name]["cfu"], other.cfu)
        assert np.all(np.asarray(other.cfu) > np.asarray(wc.cfu))  # the fair predictor buys something
    iv = res["intervals"]
    assert iv["resamples"] == 6 and len(iv["low"]["worst_case"]) == len(wc.cfu)
    lo, hi = (np.asarray([np.nan if v is None else v for v in iv[s]["worst_case"]]) for s in ("low", "high"))
    assert np.all(lo[1:] <= hi[1:]) and np.all(lo[1:] > 0)
    for k, v in model.baseline_unfairness.items():
        _close(res["baselines"][k], v)
        _close(res["model"]["baseline_unfairness"][k], v)
    assert res["model"]["degrees"] == list(model.degrees)
    _close(res["model"]["theta"], model.theta)
    expect_inv = inv.to_dict()
    assert res["inverse"]["reached"] == expect_inv["reached"]
    assert (res["inverse"]["p_max"] is None) == (expect_inv["p_max"] is None)
    _close(res["inverse"]["max_cfu"], expect_inv["max_cfu"])
    if not expect_inv["reached"]:
        assert res["inverse"]["p_max"] is None
    for row in res["lambda_sweep"]:
        _close(row["cfu_at_worst_case_P"], sweep[row["lam"]][:-1])
        _close(row["cfu_at_zero_correlation"], sweep[row["lam"]][-1])  # each row's floor beside it
    # the curve's floor, the CFU at zero correlation, beside it in results.json and the report
    _close(res["worst_case"]["cfu_at_zero_correlation"], wc.cfu_at_zero_correlation)
    _close(res["inverse"]["cfu_at_zero_correlation"], wc.cfu_at_zero_correlation)
    report = (tmp_path / "a" / "report.md").read_text()
    assert f"CFU at zero correlation (P = I, the floor of the curve, which no worst case is below): " \
           f"{wc.cfu_at_zero_correlation:.4g}." in report
    assert "| λ | CFU at zero correlation |" in report
    # λ = 0 (collinear embeddings: race² is the intercept) is the least-squares fit, never NaN. Each
    # child's features span its parents' equations and the parents (lsat's quadratic embedding of
    # race and gpa holds 1, race, race² and gpa): unpenalised, Model B with correlated errors is a
    # reparameterisation of Model A, so its CFU is 0 up to rounding.
    sweep_rows = {row["lam"]: row["cfu_at_worst_case_P"] for row in res["lambda_sweep"]}
    assert all(v is not None and np.isfinite(v) for row in sweep_rows.values() for v in row), sweep_rows
    assert all(row["undefined"] is None for row in res["lambda_sweep"])
    assert max(sweep_rows[0.0]) <= 1e-9 * max(sweep_rows[res["model"]["lam"]])
    # the curve grows with the budget and starts near 0 (P = I, up to the paper's Model A's GLS step)
    cfu = np.asarray(res["worst_case"]["cfu"])
    assert np.all(np.diff(cfu) >= 0) and cfu[0] < 1e-6 * cfu[-1]
    # shuffled columns and the JSON graph file: the same numbers
    code, _, err = _run(["sensitivity", str(tmp_path / "shuffled.csv"), "--graph", str(tmp_path / "graph.json"),
                         *ARGS, "--seed", "1", "--out", str(tmp_path / "b")], capsys)
    assert code == 0, err
    res_b = json.loads((tmp_path / "b" / "results.json").read_text())
    for key in ("model", "worst_case", "inverse", "baselines", "lambda_sweep", "settings"):
        assert res_b[key] == res[key], key
    # the same seed again: byte-identical JSON
    code, _, err = _run(["sensitivity", str(tmp_path / "data.csv"), "--graph", str(tmp_path / "graph.yaml"), *ARGS,
                         "--seed", "1", "--out", str(tmp_path / "c")], capsys)
    assert code == 0, err
    assert (tmp_path / "c" / "results.json").read_bytes() == (tmp_path / "a" / "results.json").read_bytes()


def test_sweep_marks_cfu_undefined_where_the_fit_interpolates(x64):
    # Five rows: unpenalised, lsat's quadratic embedding (1, race, gpa, race·gpa, gpa², race² being
    # the intercept) has five independent columns and fits lsat exactly: Model A's residual
    # standard deviation is 0, and CFU divides by it (penalised rows: the test above).
    from types import SimpleNamespace

    from cfjax.sensitivity.analysis import lambda_sweep
    from cfjax.sensitivity.report import report_markdown

    r = np.random.default_rng(0)
    a = np.array([1.0, -1.0, 1.0, -1.0, 1.0])
    g = a + r.normal(size=5)
    l = g + r.normal(size=5)
    prob = SimpleNamespace(graph=S.FairnessGraph({"gpa": ["A"], "lsat": ["A", "gpa"]}),
                           data=S.make_data(a, np.stack([g, l], 1), l + r.normal(size=5)))
    settings = S.FitConfig(degrees=(2,), lambdas=(1.0,), predictor_degrees=(1,), predictor_lambdas=(1.0,), folds=2)
    wc = SimpleNamespace(P=np.stack([np.eye(2), np.asarray(bivariate_correlation(0.5))]))
    [exact] = lambda_sweep(prob, settings, SimpleNamespace(degrees=(2, 2)), [0.0], wc)
    assert exact["cfu_at_worst_case_P"] == [None, None]
    assert exact["undefined"].startswith("undefined: the fit interpolates lsat")
    assert exact["cfu_at_zero_correlation"] is None  # no floor where CFU is undefined
    penalised = dict(exact, lam=1.0, cfu_at_worst_case_P=[0.0, 0.5], cfu_at_zero_correlation=0.01, undefined=None)
    floored = dict(penalised, lam=100.0, cfu_at_zero_correlation=0.4, floor_dominates=True)
    res = {"inputs": dict(data="d.csv", graph="g.yaml", sensitive="race", target="fya"), "seed": 0, "quick": True,
           "model": dict(n=5, features=["gpa", "lsat"], parents=[["race"], ["race", "gpa"]], lam=1.0,
                         degrees=[2, 2], predictor_degree=1),
           "worst_case": dict(p_max=[0.0, 0.5], cfu=[0.0, 1.0], restart_ratio=[1.0, 1.0], min_eig=1e-3),
           "inverse": dict(reached=False, lo=0.5, max_cfu=1.0, max_cfu_p_max=0.5, level=2.0),
           "baselines": {"blind": 2.0}, "lambda_sweep": [exact, penalised, floored], "warnings": []}
    text = report_markdown(res, False)
    assert "| 0 | undefined | undefined |" in text and "- λ = 0: CFU undefined: the fit interpolates lsat" in text
    assert "| 1 | 0.01 | 0.5 |" in text and "λ = 1:" not in text
    # a row whose floor carries it says so; a curve without a stated floor says "—"
    assert "| 100 | 0.4 | 0.5 |" in text and "- λ = 100: the CFU at zero correlation (0.4) is more than a tenth" in text
    assert "CFU at zero correlation (P = I, the floor of the curve, which no worst case is below): —." in text


def test_user_mistakes_one_line(rng, tmp_path, capsys):
    frame = _frame(rng, 40)
    frame.to_csv(tmp_path / "data.csv", index=False)
    nan = frame.copy()
    nan.loc[7, "lsat"] = np.nan
    nan.to_csv(tmp_path / "nan.csv", index=False)
    (tmp_path / "graph.yaml").write_text(YAML)
    (tmp_path / "unknown.yaml").write_text("gpa: [race]\nlsat: [race, gpa, sat]\n")
    (tmp_path / "target.yaml").write_text("gpa: [race]\nlsat: [race, fya]\n")
    (tmp_path / "broken.yaml").write_text("gpa: [race\n")
    (tmp_path / "list.json").write_text("[1, 2]")
    data, graph = str(tmp_path / "data.csv"), str(tmp_path / "graph.yaml")
    cases = [
        (["sensitivity", str(tmp_path / "none.csv"), "--graph", graph, *ARGS], "none.csv"),
        (["sensitivity", data, "--graph", str(tmp_path / "none.yaml"), *ARGS], "none.yaml"),
        (["sensitivity", data, "--graph", str(tmp_path / "unknown.yaml"), *ARGS], ("unknown.yaml", "sat")),
        (["sensitivity", data, "--graph", str(tmp_path / "target.yaml"), *ARGS], ("target.yaml", "fya")),
        (["sensitivity", data, "--graph", str(tmp_path / "broken.yaml"), *ARGS], "broken.yaml"),
        (["sensitivity", data, "--graph", str(tmp_path / "list.json"), *ARGS], "list.json"),
        # the NaN is in the eighth data row: row 8, 1-based as `cfjax evaluate` counts
        (["sensitivity", str(tmp_path / "nan.csv"), "--graph", graph, *ARGS], ("nan.csv", "lsat", "first at row 8.")),
        (["sensitivity", data, "--graph", graph, *ARGS[:2], "--target", "score", *ARGS[4:]], "score"),
        (["sensitivity", data, "--graph", graph, *ARGS[:4], "--categories", "race=white"], "race"),
        (["sensitivity", data, "--graph", graph, *ARGS[:4], "--categories", "race"], "--categories"),
        (["sensitivity", data, "--graph", graph, *ARGS, "--budgets", "1"], "--budgets"),
        (["sensitivity", data, "--graph", graph, *ARGS, "--bogus"], "--bogus"),
        (["sensitivity", data, *ARGS], "--graph"),
        (["sensitivity", data, "--graph", graph, *ARGS, "--benchmarks", "1,-2"], "--benchmarks"),
        (["sensitivity", data, "--graph", graph, *ARGS, "--benchmarks", "two"], "--benchmarks"),
        (["sensitivity", data, "--graph", graph, *ARGS, "--bootstrap", "-1"], "--bootstrap"),
        (["sensitivity", data, "--graph", graph, *ARGS, "--contour", "gpa:lsat"], "--contour"),
        (["sensitivity", data, "--graph", graph, *ARGS, "--contour", "gpa:lsat,lsat:gpa"], ("--contour", "one error")),
    ]
    for args, name in cases:
        code, _, err = _run([*args, "--out", str(tmp_path / "never")], capsys)
        assert code != 0, args
        assert "Traceback" not in err
        assert len(err.strip().splitlines()) == 1, err
        for part in (name,) if isinstance(name, str) else name:
            assert part in err, (part, err)
    assert not (tmp_path / "never").exists()  # nothing created on a mistake
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "keep.txt").write_text("")
    code, _, err = _run(["sensitivity", data, "--graph", graph, *ARGS, "--out", str(tmp_path / "full")], capsys)
    assert code != 0 and "--out" in err and len(err.strip().splitlines()) == 1


def test_help_has_an_example(capsys):
    """The example itself runs in tests/test_cli_install.py (in a fresh interpreter with only
    what ``make demo`` installs), which also checks what it writes."""
    from cfjax.cli.sensitivity import command

    code, out, _ = _run(["sensitivity", "--help"], capsys)
    assert code == 0 and "Example" in out and "cfjax sensitivity" in out
    text = command.epilog.replace("\b", "").replace("\\\n", "")
    lines = [ln.strip() for ln in text.split("Example", 1)[1].splitlines()[1:] if ln.strip()]
    assert any(ln.startswith("cfjax sensitivity ") and "--out" in ln for ln in lines), lines


def test_demo_warning_bullets_quote_the_budgets_of_its_table(rng):
    # The demo's bullets once quoted the library's messages ("p_max = 0.198") beside a table
    # printing 0.20, and the inverse searches' own budgets, which are in no table.
    import re
    from types import SimpleNamespace

    from cfjax.cli.demo import _search_notes, _sensitivity_section

    budgets = np.unique(np.append(np.linspace(0.0, 0.99, int(rng.integers(4, 9))), 0.5))
    ratio = rng.uniform(1.0, 5.0, budgets.size)
    apart = rng.choice(budgets.size - 1, 2, replace=False)
    ratio[apart] = rng.uniform(11.0, 400.0, 2)
    cfu = np.sort(rng.uniform(0.01, 1.0, budgets.size))
    cfu[-1] = -np.inf  # a budget where no restart ended finite
    floor = float(cfu[0])  # the curve's lowest point (its note, when it carries the curve, quotes no budget)
    wc = SimpleNamespace(p_max=budgets, cfu=cfu, restart_ratio=ratio, cfu_at_zero_correlation=floor)
    notes = _search_notes(wc, SimpleNamespace(fair_pred=np.ones(3)), inverse_warnings=3)
    s = {"n": 100, "true_correlation": 0.5, "true_cfu": 0.1, "baselines": {"blind": 1.0}, "model": {"lam": 1.0},
         "inverse": {"blind_baseline": {"reached": False, "level": 1.0, "max_cfu": 0.9}},
         "worst_case": {"p_max": budgets.tolist(), "cfu": [None if not np.isfinite(v) else float(v) for v in cfu],
                        "cfu_at_zero_correlation": floor}, "warnings": notes}
    text = "\n".join(_sensitivity_section(s))
    table = next(line for line in text.splitlines() if line.startswith("| p_max |")).split("|")[2:-1]
    in_table = {cell.strip() for cell in table}
    bullets = text.split("The search warned", 1)[1]
    quoted = re.findall(r"p_max = ((?:[0-9.]+(?: \([0-9.]+x\))?(?:, )?)+)", bullets)
    budgets_quoted = {b.split(" ")[0] for group in quoted for b in group.split(", ") if b}
    assert len(budgets_quoted) == 3 and budgets_quoted <= in_table, (budgets_quoted, in_table)
    assert "warned 3 time(s)" in bullets and "inverse" in bullets
    assert f"CFU at zero correlation (P = I), is {floor:.3g}" in text


def test_contour_of_three_features_equals_the_library(rng, tmp_path, capsys, x64):
    n = 200
    a = np.where(rng.random(n) < 0.5, 1.0, -1.0)
    e = rng.multivariate_normal(np.zeros(3), [[1, 0.3, 0.1], [0.3, 1, -0.2], [0.1, -0.2, 1]], size=n)
    o = 0.5 * a + e[:, 0]
    m = 0.3 * a + 0.6 * o + 0.2 * o**2 + e[:, 1]
    j = -0.2 * a + 0.4 * o + 0.3 * m + e[:, 2]
    frame = pd.DataFrame({"sex": np.where(a > 0, "f", "m"), "O": o, "M": m, "J": j, "y": o + m + j})
    frame.to_csv(tmp_path / "d.csv", index=False)
    (tmp_path / "g.yaml").write_text("O: [sex]\nM: [sex, O]\nJ: [sex, O, M]\n")
    code, _, err = _run(["sensitivity", str(tmp_path / "d.csv"), "--graph", str(tmp_path / "g.yaml"), "--sensitive",
                         "sex", "--target", "y", "--categories", "sex=m,f", "--quick", "--bootstrap", "0",
                         "--contour", "O:M,M:J", "--out", str(tmp_path / "out")], capsys)
    assert code == 0, err
    res = json.loads((tmp_path / "out" / "results.json").read_text())
    assert res["intervals"] is None and res["contour"]["pairs"] == [["O", "M"], ["M", "J"]]
    prob = S.from_frame(frame, {"O": ["sex"], "M": ["sex", "O"], "J": ["sex", "O", "M"]}, sensitive="sex",
                        target="y", categories={"sex": ["m", "f"]})
    settings = S.FitConfig(**{k: tuple(v) if isinstance(v, list) else v for k, v in res["settings"]["fit"].items()})
    surface = S.cfu_surface(S.fit(prob.graph, prob.data, settings), (("O", "M"), ("M", "J")), 15)
    _close(res["contour"]["cfu"], surface.cfu)
    assert {"contour.png", "contour.pdf"} <= {p.name for p in (tmp_path / "out").iterdir()}
    assert "![contour](contour.png)" in (tmp_path / "out" / "report.md").read_text()
