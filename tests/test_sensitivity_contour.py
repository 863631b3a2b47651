"""The CFU surface over two error correlations (cfu_surface) against pointwise cfu calls at
correlation matrices built by hand, its infeasible points against numpy's eigenvalues, a
baseline-scored model, the result's plain-Python view, and clear errors for bad arguments."""

import json

import jax
import numpy as np
import pytest

import cfjax as cf
from cfjax._checks import ValidationError

S = cf.sensitivity
PAIRS = (("O", "M"), ("M", "J"))
FIXED = S.FitConfig(equation_degrees=(1, 2, 1), lam=0.5, predictor_degrees=(2,), predictor_lambdas=(1.0,))


def three_feature_problem(rng, n=160):
    """A → O, (A, O) → M, (A, O, M) → J with correlated errors and a non-linear equation."""
    a = np.where(rng.integers(0, 2, n) == 1, 1.0, -1.0)
    e = rng.multivariate_normal(np.zeros(3), [[1, 0.3, 0.2], [0.3, 1, -0.2], [0.2, -0.2, 1]], size=n)
    o = 0.5 * a + e[:, 0]
    mm = 0.3 * a + 0.6 * o + 0.2 * o**2 + e[:, 1]
    j = -0.2 * a + 0.4 * o + 0.3 * mm + e[:, 2]
    y = o + mm + 0.5 * j + 0.2 * o * mm + rng.normal(size=n)
    graph = S.FairnessGraph({"O": ["A"], "M": ["A", "O"], "J": ["A", "O", "M"]})
    return graph, S.make_data(a, np.stack([o, mm, j], 1), y)


def by_hand(base, features, pairs, x, y):
    """The correlation matrix of one grid point, entry by entry (reference)."""
    P = np.array(base, np.float64)
    for (u, v), value in zip(pairs, (x, y)):
        i, k = features.index(u), features.index(v)
        P[i, k] = P[k, i] = value
    return P


@pytest.fixture(scope="module")
def model():
    with jax.enable_x64(True):
        graph, data = three_feature_problem(np.random.default_rng(11))
        yield S.fit(graph, data, FIXED)


# ----------------------------------------------------------------------------- values
def test_surface_is_cfu_at_each_point_and_nan_exactly_where_not_positive_definite(rng, x64):
    graph, data = three_feature_problem(rng)
    model = S.fit(graph, data, FIXED)
    inner = np.linspace(-0.85, 0.85, 35)
    grid = np.sort(np.r_[-0.95, 0.0, 0.95, rng.choice(inner[np.abs(inner) > 0.01], 3, replace=False)])
    base = np.eye(3)
    base[0, 2] = base[2, 0] = rng.uniform(-0.6, 0.6)  # P[O, J], held fixed
    min_eig = float(rng.choice([1e-3, 0.05]))
    pairs = PAIRS if rng.integers(2) else (("M", "J"), ("J", "O"))  # either axis order, either orientation
    with np.errstate(all="ignore"):
        surface = S.cfu_surface(model, pairs, grid, base=base, min_eig=min_eig)
    z = np.asarray(surface.cfu)
    assert z.shape == (6, 6) and surface.pairs == pairs and surface.predictor == "fair"
    np.testing.assert_array_equal(surface.x, grid)
    np.testing.assert_array_equal(surface.y, grid)
    # rows along y, columns along x; NaN exactly where numpy's smallest eigenvalue is below the margin
    Ps = [[by_hand(base, graph.features, pairs, grid[j], grid[i]) for j in range(6)] for i in range(6)]
    low = np.array([[np.linalg.eigvalsh(P)[0] < min_eig for P in row] for row in Ps])
    np.testing.assert_array_equal(np.isnan(z), low)
    np.testing.assert_array_equal(np.asarray(surface.feasible), ~low)
    zero = int(np.flatnonzero(grid == 0.0)[0])
    assert low[-1, -1] and not low[zero, zero]  # (0.95, 0.95) is never positive definite here, (0, 0) always is
    # the feasible values are cfu at that P (a few points: each pointwise call is eager)
    ok = np.argwhere(~low)
    for i, j in ok[rng.choice(len(ok), min(4, len(ok)), replace=False)]:
        expected = float(S.cfu(model, Ps[i][j]))
        np.testing.assert_allclose(z[i, j], expected, rtol=1e-7, atol=1e-13)
        np.testing.assert_array_equal(surface.correlation(i, j), Ps[i][j])


def test_grouped_fits_equal_one_vmap(model, x64, monkeypatch):
    """Where platform.run_group groups the vmapped Model B fits (XLA:CPU with its
    concurrency-optimised scheduler on, where wider vmaps stall), the surface is the same."""
    from cfjax.sensitivity import contour

    whole = np.asarray(S.cfu_surface(model, PAIRS, 7).cfu)
    asked = []
    monkeypatch.setattr(cf.platform, "run_group", lambda n: asked.append(n) or (3 if n > 3 else None))
    contour._surface.clear_cache()  # the group is chosen when the program is traced
    grouped = np.asarray(S.cfu_surface(model, PAIRS, 7).cfu)
    assert asked == [49]  # 7 x 7 points in one chunk, mapped in groups of 3
    np.testing.assert_array_equal(np.isnan(grouped), np.isnan(whole))
    np.testing.assert_allclose(grouped, whole, rtol=1e-10)


def test_a_baseline_scored_model_and_the_default_grid(model, x64):
    blind = model.scoring("blind")
    surface = S.cfu_surface(blind, PAIRS, 5)
    np.testing.assert_allclose(surface.x, [-2 / 3, -1 / 3, 0.0, 1 / 3, 2 / 3], atol=1e-15)
    assert surface.predictor == "blind"
    z = np.asarray(surface.cfu)
    for i, j in [(2, 2), (1, 3), (4, 0)]:
        P = by_hand(np.eye(3), model.graph.features, PAIRS, surface.x[j], surface.y[i])
        np.testing.assert_allclose(z[i, j], float(S.cfu(blind, P)), rtol=1e-7)
    # the blind predictor sees the features A causes: unfair at every correlation, unlike the fair one
    fair = np.asarray(S.cfu_surface(model, PAIRS, 5).cfu)
    both = np.isfinite(z) & np.isfinite(fair)
    assert (z[both] > fair[both]).all() and z[2, 2] > 1e3 * fair[2, 2]  # at P = I the fair one is at its floor


def test_plain_python_and_repr(model, x64):
    surface = S.cfu_surface(model, PAIRS, [-0.9, 0.0, 0.9])
    out = json.loads(json.dumps(surface.to_dict()))
    z = np.asarray(surface.cfu)
    assert out["pairs"] == [["O", "M"], ["M", "J"]] and out["features"] == ["O", "M", "J"]
    assert [[v is None for v in row] for row in out["cfu"]] == np.isnan(z).tolist()
    assert out["cfu"][1][1] == pytest.approx(float(z[1, 1]))
    assert out["feasible"] == np.asarray(surface.feasible).tolist() and out["min_eig"] == 1e-3
    text = repr(surface)
    assert text.startswith("Surface(predictor=fair, x=P[O,M] (3), y=P[M,J] (3)") and "\n" not in text
    assert f"feasible {int(np.isfinite(z).sum())}/9" in text


# ----------------------------------------------------------------------------- errors
BAD = {
    "pairs": [(("O", "M"),), (("O", "M"), ("M", "O")), (("O", "O"), ("M", "J")), (("O", "X"), ("M", "J")),
              "OM", (("O", "M"), 3), (("A", "O"), ("M", "J"))],
    "grid": [1, [0.5], [0.0, 1.0], [0.5, 0.2], [[0.1, 0.2]], [0.1, np.nan], True],
    "base": [np.eye(2), np.full((3, 3), 0.5), np.array([[1, 0.2, 0], [0.3, 1, 0], [0, 0, 1]]),
             np.array([[1, 0, 1.0], [0, 1, 0], [1.0, 0, 1]])],
    "min_eig": [0.0, 1.5],
}


@pytest.mark.parametrize("name,value", [(k, v) for k, vs in BAD.items() for v in vs])
def test_bad_arguments_name_the_argument(model, name, value):
    kwargs = dict(pairs=PAIRS, grid=[-0.5, 0.5])
    kwargs[name] = value
    with pytest.raises(ValueError, match=f"`{name}`"):
        S.cfu_surface(model, kwargs.pop("pairs"), kwargs.pop("grid"), **kwargs)


def test_two_features_point_to_cfu_grid():
    with jax.enable_x64(True):
        prob = S.synthetic(120, correlation=0.3, key=0)
        small = S.fit(prob.graph, prob.data, S.FitConfig(equation_degrees=(1, 1), lam=1.0, predictor_degrees=(1,),
                                                        predictor_lambdas=(1.0,)))
    assert small.graph.m == 2
    with pytest.raises(ValidationError, match="`model`.*cfu_grid"):
        S.cfu_surface(small, (("G", "L"), ("L", "G")), 5)
