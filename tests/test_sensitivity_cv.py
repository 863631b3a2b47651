"""Paper 001's model selection against scikit-learn's GridSearchCV: held-out R² (its default
scoring, the paper's recipe) and MSE, a shared-λ Model A scored as one estimator on a stacked
block design, ties broken as GridSearchCV breaks them."""

import jax
import numpy as np
import pytest
from sklearn.base import BaseEstimator, RegressorMixin
from sklearn.linear_model import Ridge
from sklearn.metrics import r2_score
from sklearn.model_selection import GridSearchCV, KFold
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import PolynomialFeatures

import cfjax as cf
from cfjax.sensitivity.fitting import embeddings
from cfjax.sensitivity.ridge import fold_ids, ridge_cv

S = cf.sensitivity
SCORING = {"r2": None, "mse": "neg_mean_squared_error"}  # None: the estimator's own score (R²)
SIGN = {"r2": 1.0, "mse": -1.0}  # our tables hold MSE itself, scikit-learn's its negative


def pipeline_search(Z, y, degrees, lambdas, score, cv=5):
    """GridSearchCV over a PolynomialFeatures -> Ridge(fit_intercept=False) pipeline (reference)."""
    pipe = make_pipeline(PolynomialFeatures(), Ridge(fit_intercept=False))
    grid = {"polynomialfeatures__degree": list(degrees), "ridge__alpha": list(lambdas)}
    return GridSearchCV(pipe, grid, cv=cv, scoring=SCORING[score]).fit(Z, y)


def three_feature_problem(rng, n):
    """A -> O, (A, O) -> M, (A, O, M) -> J, non-linear, with correlated errors."""
    a = rng.choice([-1.0, 1.0], size=n)
    e = rng.multivariate_normal(np.zeros(3), [[1, 0.3, 0.2], [0.3, 1, -0.2], [0.2, -0.2, 1]], size=n)
    scale = rng.uniform(0.5, 2.0, size=3)  # unequal spreads: stacking weighs the equations unequally
    o = scale[0] * (0.5 * a + e[:, 0])
    m = scale[1] * (0.3 * a + 0.6 * o + 0.2 * o**2 + e[:, 1])
    j = scale[2] * (-0.2 * a + 0.4 * o + 0.3 * m - 0.15 * m**2 + 0.5 * e[:, 2])
    y = o + m + 0.5 * j + 0.2 * o * m + rng.normal(size=n)
    graph = S.FairnessGraph({"O": ["A"], "M": ["A", "O"], "J": ["A", "O", "M"]})
    return graph, S.make_data(a, np.stack([o, m, j], 1), y)


class StackedRidge(RegressorMixin, BaseEstimator):
    """Model A's three equations as ONE scikit-learn regressor with a shared penalty (reference).

    A row is one (unit, equation) pair: column 0 the equation's index, then the unit's A and its
    three features. Its design is block-diagonal: equation j's polynomial features of its
    parents in block j, zeros elsewhere; its ``score`` is RegressorMixin's, R² of all rows.
    """

    parents = ([1], [1, 2], [1, 2, 3])  # columns of A, O, M

    def __init__(self, alpha=1.0, degree_0=1, degree_1=1, degree_2=1):
        self.alpha, self.degree_0, self.degree_1, self.degree_2 = alpha, degree_0, degree_1, degree_2

    def _design(self, R):
        degrees = (self.degree_0, self.degree_1, self.degree_2)
        blocks = []
        for j, cols in enumerate(self.parents):
            F = PolynomialFeatures(degrees[j]).fit_transform(R[:, cols])
            blocks.append(np.where((R[:, :1] == j), F, 0.0))
        return np.concatenate(blocks, 1)

    def fit(self, R, t):
        self.ridge_ = Ridge(alpha=self.alpha, fit_intercept=False).fit(self._design(R), t)
        return self

    def predict(self, R):
        return self.ridge_.predict(self._design(R))


def stacked_rows(data):
    """Unit-major (unit, equation) rows and their targets: unit i's equations are rows 3i..3i+2."""
    a, X = np.asarray(data.a)[:, 0], np.asarray(data.X)
    n, m = X.shape
    R = np.concatenate([np.repeat(np.arange(m)[None, :], n, 0).reshape(-1, 1),
                        np.repeat(np.column_stack([a, X]), m, 0)], 1)
    return R, X.reshape(-1)


# ----------------------------------------------------------------------------- single estimators
@pytest.mark.parametrize("score", ["r2", "mse"])
def test_ridge_cv_matches_grid_search(rng, x64, score):
    n = 211  # KFold's first folds one row longer
    Z = rng.normal(size=(n, 2))
    y = Z[:, 0] - 0.5 * Z[:, 1] ** 2 + 0.3 * Z[:, 0] * Z[:, 1] + rng.uniform(0.1, 1.0) * rng.normal(size=n)
    degrees, lambdas = (1, 2, 3), (1e-3, 1.0, 30.0, 1e3)
    ours = ridge_cv(Z, y, degrees=degrees, lambdas=lambdas, score=score)
    grid = pipeline_search(Z, y, degrees, lambdas, score)
    ref = SIGN[score] * grid.cv_results_["mean_test_score"].reshape(len(degrees), len(lambdas))
    np.testing.assert_allclose(ours.scores, ref, rtol=1e-8, atol=1e-10)
    assert (ours.degree, ours.lam) == (grid.best_params_["polynomialfeatures__degree"], grid.best_params_["ridge__alpha"])
    np.testing.assert_allclose(ours.theta, grid.best_estimator_[-1].coef_, rtol=1e-8, atol=1e-10)
    assert ours.score == score


def test_r2_is_the_default_score_and_bad_scores_are_rejected(rng, x64):
    Z = rng.normal(size=(60, 1))
    y = Z[:, 0] ** 2 + rng.normal(size=60)
    ours = ridge_cv(Z, y, degrees=(1, 2), lambdas=(0.1, 10.0))
    grid = pipeline_search(Z, y, (1, 2), (0.1, 10.0), "r2")
    np.testing.assert_allclose(ours.scores.ravel(), grid.cv_results_["mean_test_score"], rtol=1e-8, atol=1e-10)
    assert S.FitConfig().cv_score == "r2"
    for bad in ("R2", "neg_mean_squared_error", None):
        with pytest.raises(cf.ValidationError, match="config.cv_score"):
            S.FitConfig(cv_score=bad)
        with pytest.raises(ValueError, match="`score`"):
            ridge_cv(Z, y, score=bad)


def test_r2_of_a_constant_fold_follows_sklearn():
    # SS_tot = 0: R² is 1 for an exact prediction, else 0 (r2_score's force_finite default).
    got = S.ridge.fold_scores(np.array([[0.0, 0.25]]), np.array([0.0, 0.0]), np.array([2, 2]), "r2")
    np.testing.assert_array_equal(got, [[r2_score([1.0, 1.0], [1.0, 1.0]), r2_score([1.0, 1.0], [1.0, 1.5])]])


class TableScore(RegressorMixin, BaseEstimator):
    """A stand-in whose CV score is a fixed table entry picked by its parameters (reference for
    GridSearchCV's choice among ties and NaN scores)."""

    def __init__(self, i=0, j=0, table=None):
        self.i, self.j, self.table = i, j, table

    def fit(self, X, y):
        return self

    def score(self, X, y):
        return self.table[self.i][self.j]


def test_best_index_breaks_ties_and_nans_as_grid_search(rng):
    for _ in range(20):
        table = rng.integers(0, 3, size=(3, 4)).astype(float)  # many exact ties
        table[rng.random(size=table.shape) < 0.15] = np.nan
        if np.isnan(table).all():
            continue
        for score in ("r2", "mse"):
            entries = SIGN[score] * table  # the estimator's score: larger is better
            grid = GridSearchCV(TableScore(table=entries.tolist()), {"i": [0, 1, 2], "j": [0, 1, 2, 3]}, cv=2,
                                error_score="raise").fit(np.zeros((4, 1)), np.zeros(4))
            assert S.ridge.best_index(table, score) == (grid.best_params_["i"], grid.best_params_["j"])


# ----------------------------------------------------------------------------- Model A, one estimator
@pytest.mark.parametrize("score, n", [("r2", 300), ("r2", 302), ("mse", 300)])
def test_shared_lambda_scores_the_stacked_equations_as_grid_search(rng, x64, score, n):
    graph, data = three_feature_problem(rng, n)
    degrees, lambdas = (1, 2, 3), (1e-2, 1.0, 30.0)
    settings = S.FitConfig(degrees=degrees, lambdas=lambdas, predictor_degrees=(1, 2), cv_score=score)
    model = S.fit(graph, data, settings)

    R, t = stacked_rows(data)
    if n % 5 == 0:
        cv = 5  # KFold(5) on the 3n unit-major rows cuts between units: the same folds as on units
    else:  # the same unit folds, spelled out
        unit = np.repeat(np.arange(n), 3)
        cv = [(np.flatnonzero(np.isin(unit, tr)), np.flatnonzero(np.isin(unit, te)))
              for tr, te in KFold(5).split(np.zeros(n))]
    grid = GridSearchCV(StackedRidge(), {"alpha": list(lambdas), **{f"degree_{j}": list(degrees) for j in range(3)}},
                        cv=cv, scoring=SCORING[score]).fit(R, t)
    ref = SIGN[score] * grid.cv_results_["mean_test_score"].reshape((len(lambdas),) + (len(degrees),) * 3)

    # Every candidate's stacked score from cfjax's per-equation held-out errors.
    fold = fold_ids(n, 5)
    sse = [np.stack([S.ridge.fold_errors(embeddings(graph, (d,) * 3, data.a, data.X)[j], data.X[:, j],
                                         np.asarray(lambdas), fold) for d in degrees]) for j in range(3)]
    stacked = (sse[0].transpose(1, 0, 2)[:, :, None, None, :] + sse[1].transpose(1, 0, 2)[:, None, :, None, :]
               + sse[2].transpose(1, 0, 2)[:, None, None, :, :])  # (λ, d0, d1, d2, folds)
    ours = S.ridge.fold_scores(stacked, *S.ridge.fold_totals(data.X, fold), score).mean(-1)
    np.testing.assert_allclose(ours, ref, rtol=1e-8, atol=1e-10)

    best = grid.best_params_
    assert model.selection["lam"] == [best["alpha"]] * 3
    assert model.degrees == tuple(best[f"degree_{j}"] for j in range(3))
    pick = np.nanmax if score == "r2" else np.nanmin
    np.testing.assert_allclose(model.selection["lambda_cv"], pick(ref.reshape(len(lambdas), -1), axis=1),
                               rtol=1e-8, atol=1e-10)

    # The fair predictor and the baselines: R² (or MSE) of their own target.
    a, X, y = np.asarray(data.a), np.asarray(data.X), np.asarray(data.y)
    for name, Z in (("predictor", np.asarray(model.model_a.residuals)), ("unconstrained", np.column_stack([a, X])),
                    ("blind", X)):
        g = pipeline_search(Z, y, (1, 2), lambdas, score)
        chosen = model.selection["predictor"] if name == "predictor" else model.selection["baselines"][name]
        assert (chosen["degree"], chosen["lam"]) == (g.best_params_["polynomialfeatures__degree"],
                                                     g.best_params_["ridge__alpha"])
        assert chosen["score"] == pytest.approx(SIGN[score] * g.best_score_, rel=1e-8, abs=1e-10)


@pytest.mark.parametrize("score", ["r2", "mse"])
def test_per_equation_lambda_scores_each_equation_on_its_own_target(rng, x64, score):
    graph, data = three_feature_problem(rng, 250)
    degrees, lambdas = (1, 2, 3), (1e-2, 1.0, 30.0)
    settings = S.FitConfig(degrees=degrees, lambdas=lambdas, predictor_degrees=(1,), shared_lambda=False,
                          cv_score=score)
    model = S.fit(graph, data, settings)
    assert model.selection["lambda_cv"] is None
    cols = np.column_stack([np.asarray(data.a), np.asarray(data.X)])  # StackedRidge.parents less its index column
    for j, parents in enumerate(StackedRidge.parents):
        g = pipeline_search(cols[:, [c - 1 for c in parents]], np.asarray(data.X[:, j]), degrees, lambdas, score)
        ref = SIGN[score] * g.cv_results_["mean_test_score"].reshape(len(degrees), len(lambdas))
        np.testing.assert_allclose(model.selection["equation_cv"][j], ref, rtol=1e-8, atol=1e-10)
        assert model.degrees[j] == g.best_params_["polynomialfeatures__degree"]
        assert model.selection["lam"][j] == g.best_params_["ridge__alpha"]


def test_shared_mse_is_the_summed_mse_choice(rng, x64):
    # With MSE the stacked score is the equations' mean MSE: the choice minimises their sum.
    graph, data = three_feature_problem(rng, 300)
    settings = S.FitConfig(degrees=(1, 2), lambdas=(0.1, 10.0), predictor_degrees=(1,), cv_score="mse")
    model = S.fit(graph, data, settings)
    table = model.selection["equation_cv"]  # (m, degrees, lambdas) held-out MSE
    k = int(np.argmin(table.min(1).sum(0)))
    assert model.selection["lam"] == [settings.lambdas[k]] * 3
    assert model.degrees == tuple(settings.degrees[i] for i in table[:, :, k].argmin(1))
    np.testing.assert_allclose(model.selection["lambda_cv"], table.min(1).sum(0) / 3, rtol=1e-10)


def test_fit_is_still_traceable_with_the_selection_record():
    # The model (selection included) is an argument of compiled code: its leaves must be arrays.
    with jax.enable_x64(True):
        prob = S.synthetic(200, correlation=0.3, key=1)
        model = S.fit(prob.graph, prob.data, S.FitConfig(degrees=(1, 2), lambdas=(0.1, 10.0), predictor_degrees=(1,)))
        grid = S.cfu_grid(model, [-0.5, 0.0, 0.5])
    assert np.isfinite(np.asarray(grid)).all() and float(grid[1]) < float(grid[2])
