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


# --- make_data and from_frame: every bad input names its argument ----------------------------------------------

def small_problem(rng, n=8):
    a = np.tile([0.0, 1.0], n // 2)
    X = rng.normal(size=(n, 2))
    return a, X, X.sum(1) + rng.normal(size=n)


MAKE_DATA_CASES = [
    # (what is wrong, the argument named, a change to (a, X, y, keyword arguments))
    ("NaN in a", "a", lambda a, X, y: (np.where(np.arange(a.size) == 2, np.nan, a), X, y, {})),
    ("inf in a", "a", lambda a, X, y: (np.where(np.arange(a.size) == 5, np.inf, a), X, y, {})),
    ("None in a", "a", lambda a, X, y: (np.array(["x", None] + ["x", "y"] * 3, object), X, y, {"codes": "one_hot"})),
    ("NaN in an object a", "a", lambda a, X, y: (np.array([0, 1, float("nan")] + [0, 1] * 2 + [0], object), X, y,
                                                 {})),
    ("numbers and text in a", "a", lambda a, X, y: (np.array(["x", 1] * 4, object), X, y, {"codes": "one_hot"})),
    ("complex a", "a", lambda a, X, y: (a + 1j, X, y, {})),
    ("ragged a", "a", lambda a, X, y: ([[0.0], [1.0, 2.0]] + [[0.0]] * 6, X, y, {})),
    ("a of shape (n, 1)", "a", lambda a, X, y: (a[:, None], X, y, {})),
    ("empty a", "a", lambda a, X, y: (a[:0], X, y, {})),
    ("NaN in X", "X", lambda a, X, y: (a, np.where(np.arange(X.size).reshape(X.shape) == 3, np.nan, X), y, {})),
    ("X of n - 1 rows", "X", lambda a, X, y: (a, X[:-1], y, {})),
    ("1-d X", "X", lambda a, X, y: (a, X[:, 0], y, {})),
    ("ragged X", "X", lambda a, X, y: (a, [list(r) for r in X[:-1]] + [[1.0]], y, {})),
    ("complex X", "X", lambda a, X, y: (a, X + 1j, y, {})),
    ("NaN in y", "y", lambda a, X, y: (a, X, np.where(np.arange(y.size) == 0, np.nan, y), {})),
    ("inf in y", "y", lambda a, X, y: (a, X, np.where(np.arange(y.size) == 7, -np.inf, y), {})),
    ("y of n + 1 units", "y", lambda a, X, y: (a, X, np.append(y, 0.0), {})),
    ("y of shape (n, 1)", "y", lambda a, X, y: (a, X, y[:, None], {})),
    ("text y", "y", lambda a, X, y: (a, X, np.array(list("abcdefgh")), {})),
    ("complex y", "y", lambda a, X, y: (a, X, y + 1j, {})),
    ("NaN code", "codes", lambda a, X, y: (a, X, y, {"codes": [0.0, np.nan]})),
    ("text codes", "codes", lambda a, X, y: (a, X, y, {"codes": ["low", "high"]})),
    ("three codes for two groups", "codes", lambda a, X, y: (a, X, y, {"codes": [0.0, 1.0, 2.0]})),
    ("one name for two columns", "names", lambda a, X, y: (a, X, y, {"names": ["G"]})),
]


@pytest.mark.parametrize("what, arg, change", MAKE_DATA_CASES, ids=[c[0] for c in MAKE_DATA_CASES])
def test_make_data_names_each_bad_argument(rng, what, arg, change):
    a, X, y, kwargs = change(*small_problem(rng))
    with pytest.raises(cf._checks.ValidationError, match=f"`{arg}`: expected"):
        S.make_data(a, X, y, **kwargs)


def test_a_nan_sensitive_value_is_named_with_its_row_not_made_a_group(rng):
    a, X, y = small_problem(rng)
    a[4] = np.nan
    with pytest.raises(cf._checks.ValidationError, match=r"`a`: expected a finite group label for every unit, "
                                                         r"got 1 NaN or infinite value\(s\), the first at row 5 "
                                                         r"\(1-based; a\[4\]\)"):
        S.make_data(a, X, y)


def test_an_object_array_of_numbers_is_the_same_sensitive_attribute(rng):
    a, X, y = small_problem(rng)
    numbers = S.make_data(a, X, y)
    objects = S.make_data(np.array([int(v) for v in a], object), X, y)
    np.testing.assert_array_equal(objects.group, numbers.group)
    np.testing.assert_array_equal(objects.codes, numbers.codes)


class Table(dict):
    """A table as from_frame reads one (a pandas DataFrame works the same)."""
    columns = property(lambda self: list(self))


def test_from_frame_names_an_empty_table(rng):
    table = Table(race=np.zeros(0), gpa=np.zeros(0), lsat=np.zeros(0), fya=np.zeros(0))
    with pytest.raises(cf._checks.ValidationError, match=r"`frame`: expected a table with at least one row, "
                                                         r"got 0 rows"):
        S.from_frame(table, {"lsat": ["race", "gpa"], "gpa": ["race"]}, sensitive="race", target="fya")
