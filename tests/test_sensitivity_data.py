"""Law school and NHS loaders (on files the tests write, and on the shared data when present)
and the synthetic SCM."""

import os

import numpy as np
import pytest

import cfjax as cf

S = cf.sensitivity
DATA = os.path.join(os.path.dirname(__file__), "..", "..", "shared", "data")


def write_law_csv(path, rows):
    lines = [",race,sex,LSAT,UGPA,region_first,ZFYA,sander_index,first_pf"]
    lines += [f"{i},{race},1,{lsat},{ugpa},GL,{zfya},0.5,1.0" for i, (race, lsat, ugpa, zfya) in enumerate(rows)]
    path.write_text("\n".join(lines) + "\n")


def test_law_school_loader_follows_the_paper_recipe(tmp_path, rng):
    rows = [(rng.choice(["White", "Black", "Asian"]), rng.integers(20, 48), rng.uniform(2, 4), rng.normal())
            for _ in range(40)]
    path = tmp_path / "law.csv"
    write_law_csv(path, rows)
    prob = S.load_law_school(path)
    assert prob.graph.features == ("G", "L") and prob.graph.parents == (("A",), ("A", "G"))
    white = np.array([r[0] == "White" for r in rows])
    np.testing.assert_array_equal(np.asarray(prob.data.a)[:, 0], np.where(white, 1.0, -1.0))
    ugpa = np.array([r[2] for r in rows])
    np.testing.assert_allclose(prob.data.X[:, 0], (ugpa - ugpa.mean()) / ugpa.std(), rtol=1e-6)
    np.testing.assert_allclose(prob.data.y, [r[3] for r in rows], rtol=1e-6)
    zero_one = S.load_law_school(path, sensitive_coding="01", standardise="sample")
    np.testing.assert_array_equal(np.asarray(zero_one.data.a)[:, 0], white.astype(float))
    np.testing.assert_allclose(zero_one.data.X[:, 0], (ugpa - ugpa.mean()) / ugpa.std(ddof=1), rtol=1e-6)


def test_loaders_reject_bad_files(tmp_path):
    bad = tmp_path / "law.csv"
    bad.write_text(",race,UGPA,ZFYA\n0,White,3.0,0.1\n")
    with pytest.raises(ValueError, match=r"missing \['LSAT'\]"):
        S.load_law_school(bad)
    with pytest.raises(ValueError, match="existing"):
        S.load_law_school(tmp_path / "nope.csv")
    with pytest.raises(ValueError, match="sensitive_coding"):
        write_law_csv(bad, [("White", 30, 3.0, 0.1), ("Black", 35, 3.5, 0.2)])
        S.load_law_school(bad, sensitive_coding="yes")
    npz = tmp_path / "nhs.npz"
    np.savez(npz, data=np.ones((3, 2)), colnames=np.array(["race", "health"]))
    with pytest.raises(ValueError, match="missing"):
        S.load_nhs(npz)


def test_nhs_loader_follows_the_paper_recipe(tmp_path, rng):
    n = 60
    table = np.column_stack([rng.integers(1, 3, n), rng.integers(1, 3, (n, 4)), rng.uniform(1, 5, (n, 4))])
    npz = tmp_path / "nhs.npz"
    np.savez(npz, data=table, colnames=np.array(["race", "gender", "sex_orient", "disability", "age", "job_sat",
                                                 "manager_sat", "org_sat", "health"]))
    prob = S.load_nhs(npz)
    assert prob.graph.features == ("O", "M", "J")
    assert prob.graph.parents == (("A",), ("A", "O"), ("A", "O", "M"))
    np.testing.assert_array_equal(np.asarray(prob.data.a)[:, 0], 2 * table[:, 0] - 3)
    org = table[:, 7]
    np.testing.assert_allclose(prob.data.X[:, 0], (org - org.mean()) / org.std(), rtol=1e-6)
    np.testing.assert_allclose(prob.data.y, table[:, 8], rtol=1e-6)


@pytest.mark.skipif(not os.path.isfile(os.path.join(DATA, "lawschool.csv")),
                    reason="the shared law school data is not beside this checkout")
def test_shared_law_school_file():
    prob = S.load_law_school(os.path.join(DATA, "lawschool.csv"))
    assert prob.data.n == 21_791
    assert int((np.asarray(prob.data.a)[:, 0] == 1).sum()) == 18_285  # White
    np.testing.assert_allclose(np.asarray(prob.data.X).mean(0), 0, atol=1e-5)


@pytest.mark.skipif(not os.path.isfile(os.path.join(DATA, "nhs.npz")),
                    reason="the shared NHS data is not beside this checkout")
def test_shared_nhs_file():
    prob = S.load_nhs(os.path.join(DATA, "nhs.npz"))
    assert prob.data.n == 209_112
    assert int((np.asarray(prob.data.a)[:, 0] == -1).sum()) == 8_526  # race 1


def test_synthetic_scm_has_the_requested_error_correlation():
    prob = S.synthetic(20_000, correlation=-0.3, key=2)
    a, X = np.asarray(prob.data.a)[:, 0], np.asarray(prob.data.X, np.float64)
    eg = X[:, 0] - 0.6 * a
    el = X[:, 1] - (0.4 * a + 0.7 * X[:, 0] + 0.35 * X[:, 0] ** 2)
    assert np.corrcoef(eg, el)[0, 1] == pytest.approx(-0.3, abs=0.02)
    np.testing.assert_allclose(prob.true_correlation, [[1, -0.3], [-0.3, 1]])
    with pytest.raises(ValueError, match="correlation"):
        S.synthetic(10, correlation=1.5)
