"""The worst-case search near the eigenvalue margin: a supremum found by a dense grid over the
usable set, the "pd" parameterisation's reach, the margin's closed form, and the convergence
diagnostic (definitions §3)."""

import functools
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.optimize import brentq, minimize

import cfjax as cf
from cfjax.sensitivity.resample import resample_analysis
from cfjax.sensitivity.cfu import bivariate_correlation, cfu_of, negligible_cfu
from cfjax.sensitivity.correlation import boundary_scale, check_correlation, pd_correlation
from cfjax.sensitivity.linear import fit_model_b

S = cf.sensitivity

# Fixed degrees and penalties (no CV): every seed's model has the same static structure, so the
# search compiles once for the whole file. λ > 0 matters: at λ = 0, CFU is 0 for every P.
FIXED = S.FitConfig(equation_degrees=(1, 2, 2), lam=3.0, predictor_degrees=(2,), predictor_lambdas=(1.0,))
P_MAX, MIN_EIG = 0.6, 0.01  # p_max > (1 - min_eig) / 2: half the sign corners are not usable


def random_problem(rng, n=600):
    """A → O, (A, O) → M, (A, O, M) → J with random non-linear equations and correlated errors."""
    a = np.where(rng.random(n) < 0.5, 1.0, -1.0)
    c = rng.uniform(0.2, 0.8, 8) * rng.choice([-1.0, 1.0], 8)
    r = rng.uniform(-0.4, 0.4, 3)
    cov = np.array([[1, r[0], r[1]], [r[0], 1, r[2]], [r[1], r[2], 1]])
    e = rng.multivariate_normal(np.zeros(3), cov, size=n, method="eigh")
    o = c[0] * a + e[:, 0]
    m = c[1] * a + c[2] * o + 0.3 * c[3] * o**2 + e[:, 1]
    j = c[4] * a + c[5] * o + c[6] * m + 0.2 * c[7] * m**2 + e[:, 2]
    y = o + m + 0.5 * j + 0.2 * o * m + rng.normal(size=n)
    graph = S.FairnessGraph({"O": ["A"], "M": ["A", "O"], "J": ["A", "O", "M"]})
    return S.fit(graph, S.make_data(a, np.stack([o, m, j], 1), y), FIXED)


def symmetric(off):
    """The 3 x 3 correlation matrix with off-diagonals (P_01, P_02, P_12)."""
    P = np.eye(3)
    P[0, 1], P[0, 2], P[1, 2] = off
    return np.triu(P) + np.triu(P, 1).T


def ray_end(d, p_max, min_eig):
    """Where the ray from I along off-diagonal direction d leaves the usable set (numpy: the
    box by its largest entry, the margin by bisection on the smallest eigenvalue)."""
    D = symmetric(d) - np.eye(3)
    hi = p_max / np.abs(d).max()
    if np.linalg.eigvalsh(np.eye(3) + hi * D)[0] < min_eig:
        hi = brentq(lambda t: np.linalg.eigvalsh(np.eye(3) + t * D)[0] - min_eig, 0.0, hi, xtol=1e-15)
    return np.eye(3) + hi * D


def cube_faces(g):
    """Off-diagonal directions on the faces of the cube [-1, 1]^3: every ray from I, once."""
    u = np.linspace(-1, 1, g)
    a, b = (x.ravel() for x in np.meshgrid(u, u, indexing="ij"))
    for i in range(3):
        rest = [k for k in range(3) if k != i]
        for sign in (-1.0, 1.0):
            d = np.zeros((g * g, 3))
            d[:, i], d[:, rest[0]], d[:, rest[1]] = sign, a, b
            yield i, sign, rest, d


def _cfu(model, P):
    return cfu_of(model, fit_model_b(model.design, P, model.lam, newton_steps=30))


# Module-level and taking the model as an argument: compiled once for every seed's model (a
# closure over the model would embed its arrays as constants and recompile per seed). Many P are
# evaluated in blocks of one fixed size, 7 at a time (each new shape, a remainder included,
# would compile again).
_CHUNK = 441
_cfu_one = jax.jit(_cfu)
_cfu_chunk = jax.jit(lambda model, Ps: jax.lax.map(functools.partial(_cfu, model), Ps, batch_size=7))


def _cfu_many(model, Ps):
    """CFU at each of ``Ps (k, 3, 3)``, in blocks of ``_CHUNK`` (the last one padded with I)."""
    k = len(Ps)
    Ps = np.concatenate([Ps, np.broadcast_to(np.eye(3), (-k % _CHUNK, 3, 3))])
    return np.concatenate([np.asarray(_cfu_chunk(model, jnp.asarray(c))) for c in np.split(Ps, len(Ps) // _CHUNK)])[:k]


def grid_supremum(model, p_max, min_eig, g=21, refine=4):
    """The largest CFU over the usable set: a dense grid of boundary points (every ray from I to
    where it leaves the set) and a coarse interior grid, then Nelder-Mead on the best boundary
    points' face coordinates."""
    many = functools.partial(_cfu_many, model)  # g = 21: 441 rays per face, one block
    single = functools.partial(_cfu_one, model)
    best = []
    for i, sign, rest, d in cube_faces(g):
        values = many(np.stack([ray_end(x, p_max, min_eig) for x in d]))
        best += [(values[k], sign, i, rest, d[k]) for k in np.argsort(-values)[:refine]]
    best.sort(key=lambda b: -b[0])
    u = np.linspace(-p_max, p_max, 9)
    inner = [symmetric(x) for x in np.stack(np.meshgrid(u, u, u), -1).reshape(-1, 3)]
    inner = [P for P in inner if np.linalg.eigvalsh(P)[0] >= min_eig]
    found = [best[0][0], float(np.max(many(np.stack(inner))))]
    for _, sign, i, rest, d in best[:refine]:
        def minus(x, sign=sign, i=i, rest=rest):
            dd = np.zeros(3)
            dd[i], dd[rest] = sign, np.clip(x, -1, 1)
            return -float(single(jnp.asarray(ray_end(dd, p_max, min_eig))))

        r = minimize(minus, d[rest], method="Nelder-Mead",
                     options=dict(xatol=1e-7, fatol=1e-14, maxiter=300, initial_simplex=d[rest] + 0.05 * np.array(
                         [[0, 0], [1, 0], [0, 1]])))
        found.append(-r.fun)
    return max(found)


def test_a_small_search_reaches_the_supremum_near_the_margin(rng, x64):
    # Half the sign corners are not usable at this budget and margin, and the worst case sits
    # on the margin (often where it meets the budget's edges). Before the search seeded its
    # restarts on the margin and polished along it, 2 restarts x 100 steps stopped at 0.1-1 %
    # of this supremum for most seeds.
    model = random_problem(rng)
    sup = grid_supremum(model, P_MAX, MIN_EIG)
    key = jax.random.key(int(rng.integers(1 << 30)))
    for parameterisation in ("tanh", "pd"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", S.ConvergenceWarning)
            wc = S.worst_case(model, [P_MAX], key=key,
                              config=S.SearchConfig(restarts=2, steps=100, min_eig=MIN_EIG,
                                                    parameterisation=parameterisation))
        found = float(wc.cfu[0])
        assert found >= 0.99 * sup, (parameterisation, found, sup)
        assert found <= 1.01 * sup, (parameterisation, found, sup)  # a usable P: never above the supremum
        P = np.asarray(wc.P[0])
        check_correlation(P, p_max=P_MAX, min_eig=MIN_EIG)
        assert float(S.cfu(model, P)) == pytest.approx(found, rel=1e-6)


# ----------------------------------------------------------------------------- the margin in closed form
def test_boundary_scale_is_where_the_ray_leaves_the_usable_set(rng, x64):
    for _ in range(20):
        m = int(rng.integers(2, 7))
        U = np.triu(rng.uniform(-1, 1, (m, m)), 1)
        D = U + U.T
        p_max, min_eig = rng.uniform(0.05, 0.99), 10 ** rng.uniform(-4, -1)
        # Reference: the box by the largest entry, the margin by bisection on eigenvalues.
        box = p_max / np.abs(D).max()
        lam = lambda t: np.linalg.eigvalsh(np.eye(m) + t * D)[0] - min_eig  # noqa: E731
        ref = box if lam(box) >= 0 else brentq(lam, 0.0, box, xtol=1e-15)
        s = float(boundary_scale(jnp.asarray(D), p_max, min_eig))
        assert s == pytest.approx(ref, rel=1e-9)
        check_correlation(np.eye(m) + s * D, p_max=p_max * (1 + 1e-12), min_eig=min_eig)
    assert np.isinf(float(boundary_scale(jnp.zeros((3, 3)), 0.5)))


def test_the_screened_starts_geometry_on_the_host(rng):
    """The screening's candidates are found in numpy before any program runs: the scale along a
    ray equals boundary_scale's, each ray's end is usable and on the boundary (an entry at the
    budget's edge or the smallest eigenvalue at the margin), and the usable stretch of a line
    ends where a brute-force scan of its smallest eigenvalue does."""
    from cfjax.sensitivity import projection as pj
    from cfjax.sensitivity.correlation import _slack

    for _ in range(10):
        m = int(rng.integers(2, 6))
        U = np.triu(rng.uniform(-1, 1, (8, m, m)), 1)
        D = U + np.swapaxes(U, 1, 2)
        p_max, min_eig = rng.uniform(0.05, 0.99, 8), 10 ** rng.uniform(-4, -1)
        slack = _slack(np.float64, m)
        with jax.enable_x64(True):
            ref = np.array([float(boundary_scale(jnp.asarray(d), p, min_eig)) for d, p in zip(D, p_max)])
        np.testing.assert_allclose(pj._scale(D, p_max, min_eig, slack), ref, rtol=1e-12)
        P = pj._on_boundary(D, p_max, min_eig, slack)
        lam = np.linalg.eigvalsh(P)[:, 0]
        edge = np.abs(P - np.eye(m)).max(axis=(1, 2))
        assert (lam >= min_eig).all() and (edge <= p_max * (1 + 1e-12)).all()
        assert (np.isclose(edge, p_max, rtol=1e-9) | np.isclose(lam, min_eig + slack, atol=1e-9)).all()
        # The usable stretch from I along D, capped at the box: brute force on a fine grid.
        hi = p_max / np.abs(D).max(axis=(1, 2))
        t = pj._last_usable(np.broadcast_to(np.eye(m), D.shape), D, hi, min_eig)
        for k in range(8):
            grid = np.linspace(0, hi[k], 20001)
            ok = np.linalg.eigvalsh(np.eye(m) + grid[:, None, None] * D[k])[:, 0] >= min_eig
            last = grid[np.argmin(ok) - 1] if not ok.all() else hi[k]
            assert t[k] == pytest.approx(last, abs=hi[k] / 20000)


def test_the_random_starts_follow_the_key():
    from cfjax.sensitivity import starts
    from cfjax.sensitivity.parameterisation import _Tanh
    from cfjax.sensitivity.search_config import _Program

    cfg = _Program(P_fn=_Tanh(), shape=(3, 3), mask=tuple(map(tuple, np.tril(np.ones((3, 3), bool)).tolist())),
                   optimizer=None, steps=1, batch_size=None, patience=1, tol=1e-4, min_eig=1e-3, init_scale=0.1,
                   newton_steps=8, warm_start=False, restart_slots=4, log_objective=True, snap=None, corners=(),
                   boundary_starts=0, polish_steps=0, margin_corners=())
    a, b = starts.random_starts(cfg, jax.random.key(3)), starts.random_starts(cfg, jax.random.key(3))
    c = starts.random_starts(cfg, jax.random.key(4))
    np.testing.assert_array_equal(a, b)
    assert not np.allclose(a, c)
    assert a.shape == (4, 3, 3) and (np.triu(a, 1) == 0).all() and (np.diagonal(a, axis1=1, axis2=2) == 1).all()
    below = a[:, np.tril_indices(3, -1)[0], np.tril_indices(3, -1)[1]]  # the paper's spread: 0.1
    assert 0.03 < np.std(below) < 0.3


def margin_corner(rng, p_max, min_eig):
    """A usable 3 x 3 P with two entries at ±p_max and the smallest eigenvalue at the margin
    (the third entry by root finding): unreachable when λ_min must stay ≥ 1 − p_max."""
    s01, s02 = rng.choice([-1.0, 1.0], 2)
    # With P_12 = -s01 s02 p_max the sign pattern is frustrated (λ_min = 1 - 2 p_max < min_eig),
    # with P_12 = +s01 s02 p_max it is not (λ_min = 1 - p_max): the margin lies in between.
    lam = lambda x: np.linalg.eigvalsh(symmetric([s01 * p_max, s02 * p_max, x]))[0] - min_eig  # noqa: E731
    x = brentq(lam, -s01 * s02 * p_max, s01 * s02 * p_max, xtol=1e-15)
    return symmetric([s01 * p_max, s02 * p_max, x])


def test_pd_reaches_the_margin_at_the_budgets_edge(rng, x64):
    for _ in range(10):
        p_max, min_eig = rng.uniform(0.55, 0.85), 10 ** rng.uniform(-3, -1)  # 1 - p_max > min_eig
        Q = margin_corner(rng, p_max, min_eig)
        Q = np.eye(3) + (1 - 1e-12) * (Q - np.eye(3))  # a hair inside the margin (rounding)
        assert np.linalg.eigvalsh(Q)[0] == pytest.approx(min_eig, abs=1e-9)
        assert np.linalg.eigvalsh(Q)[0] < 1 - p_max  # out of reach of P = (1 - p) I + p R
        P = np.asarray(pd_correlation(jnp.linalg.cholesky(jnp.asarray(Q)), p_max, min_eig))
        np.testing.assert_allclose(P, Q, atol=1e-9)
        # A correlation beyond the corner along its ray from I (smallest eigenvalue min_eig / 2)
        # is pulled back onto it.
        t = 1 + 0.5 * min_eig / (1 - min_eig)
        P = np.asarray(pd_correlation(jnp.linalg.cholesky(jnp.asarray(np.eye(3) + t * (Q - np.eye(3)))),
                                        p_max, min_eig))
        np.testing.assert_allclose(P, Q, atol=1e-9)


def test_pd_is_the_identity_on_usable_correlations(rng, x64):
    m = 5
    A = rng.normal(size=(m, m + 2))
    R = (A @ A.T) / np.outer(np.linalg.norm(A, axis=1), np.linalg.norm(A, axis=1))  # rows' correlations
    p_max = min(float(np.abs(R - np.eye(m)).max()) + 0.01, 0.999)
    min_eig = 0.5 * np.linalg.eigvalsh(R)[0]
    np.testing.assert_allclose(pd_correlation(jnp.asarray(A), p_max, min_eig), R, atol=1e-12)


# ----------------------------------------------------------------------------- the diagnostic
@pytest.fixture(scope="module")
def bivariate():
    with jax.enable_x64(True):
        prob = S.synthetic(600, correlation=0.4, key=5)
        yield S.fit(prob.graph, prob.data, S.FitConfig(equation_degrees=(1, 2), lam=3.0, predictor_degrees=(2,),
                                                      predictor_lambdas=(1.0,)))


def test_restart_ratio_compares_the_best_two_restarts_and_warns(bivariate, x64):
    from cfjax.sensitivity import search

    model = bivariate
    budgets = [0.3, 0.8]
    # Without the adaptive rounds the two restarts stay at the two corners, and it warns.
    with pytest.warns(S.ConvergenceWarning, match=r"p_max = 0.8 .*no adaptive rounds \(max_rounds=0\)"):
        wc = S.worst_case(model, budgets, key=jax.random.key(0),
                          config=S.SearchConfig(restarts=2, steps=20, warn_ratio=1.0, max_rounds=0))
    assert np.shape(wc.round_cfu) == (2, 0) and (np.asarray(wc.rounds) == 0).all()
    values = np.sort(np.asarray(wc.restart_cfu), axis=1)[:, ::-1]
    np.testing.assert_allclose(wc.restart_ratio, values[:, 0] / values[:, 1], rtol=1e-12)
    # Two features: the sign corners ±p_max are the two local maxima, two distinct starts.
    corners = np.array([[float(S.cfu(model, bivariate_correlation(s * b))) for s in (1, -1)] for b in budgets])
    np.testing.assert_allclose(np.sort(np.asarray(wc.restart_cfu), 1), np.sort(corners, 1), rtol=1e-6)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        S.worst_case(model, budgets, key=jax.random.key(0),
                     config=S.SearchConfig(restarts=2, steps=20, warn_ratio=None, max_rounds=0))
        S.worst_case(model, budgets, key=jax.random.key(0),
                     config=S.SearchConfig(restarts=2, steps=20, max_rounds=0,
                                           warn_ratio=float(np.max(wc.restart_ratio)) * 1.01))
        # One restart: the ratio is NaN, and NaN never warns (checked on the ratio itself: a search
        # with one restart would compile the search again for its other number of runs).
        one = search._restart_ratio(wc.restart_cfu[:, :1])
        search._warn_if_apart(wc.replace(restart_ratio=one), 1.0)
    assert np.isnan(np.asarray(one)).all() and one.shape == (2,)


def test_a_budget_without_a_finite_worst_case_warns(bivariate, x64):
    """A budget whose every restart ended with a non-finite CFU (cfu −inf) is named in a
    warning, whatever warn_ratio; float32 results name the likely cause and the remedy."""
    from cfjax.sensitivity import search

    wc = S.worst_case(bivariate, [0.3, 0.6], key=jax.random.key(0),
                      config=S.SearchConfig(restarts=2, steps=10, warn_ratio=None))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        search._warn_if_none_finite(wc)  # every budget found a finite worst case: silent
    lost = wc.replace(cfu=wc.cfu.at[1].set(-jnp.inf))
    with pytest.warns(S.ConvergenceWarning, match=r"p_max = 0\.6;.*CFU was NaN") as caught:
        search._warn_if_none_finite(lost)
    assert "0.3" not in str(caught[0].message).split(";")[0]
    as32 = lost.replace(cfu=lost.cfu.astype(jnp.float32))
    with pytest.warns(S.ConvergenceWarning, match="jax_enable_x64"):
        search._warn_if_none_finite(as32)


def test_search_options_are_validated_by_the_config():
    for name, bad in (("boundary_starts", -1), ("warn_ratio", 0.5), ("polish", -2), ("max_rounds", -1),
                      ("max_rounds", 1.5), ("confirm", 0.0), ("confirm", 1.0), ("restarts", 0), ("steps", 2.5),
                      ("min_eig", 1.0), ("batch_size", 0), ("learning_rate", -1.0), ("optimizer", "lbfgs"),
                      ("parameterisation", "cholesky"), ("snap", 1.5), ("warm_start", "yes")):
        with pytest.raises(ValueError, match=rf"SearchConfig\.{name}"):
            S.SearchConfig(**{name: bad})
    with pytest.raises(ValueError, match="momentum"):
        S.SearchConfig(optimizer="adam", momentum=0.9)
    with pytest.raises(ValueError, match="cliques"):
        S.SearchConfig(parameterisation="pd", cliques=np.ones((3, 2), bool))
    # what needs the model is checked by the search
    with pytest.raises(ValueError, match="batch_size"):
        S.worst_case(_tiny_model(), [0.2], key=0, config=S.SearchConfig(batch_size=10**6))


def _tiny_model():
    prob = S.synthetic(50, key=0)
    return S.fit(prob.graph, prob.data, S.FitConfig(degrees=(1,), lambdas=(1.0,), predictor_degrees=(1,),
                                                   predictor_lambdas=(1.0,)))


def test_a_search_config_is_frozen_and_compared_by_value():
    import dataclasses

    import optax

    a, b = S.SearchConfig(restarts=8, cliques=np.array([[1, 0], [1, 1]])), S.SearchConfig(restarts=8,
                                                                                         cliques=((1, 0), (1, 1)))
    assert a == b and hash(a) == hash(b) and a.cliques == ((True, False), (True, True))
    assert S.SearchConfig(tol=1) == S.SearchConfig(tol=1.0) and S.SearchConfig(steps=np.int64(7)).steps == 7
    assert S.SearchConfig(learning_rate=0.1) != S.SearchConfig()
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.restarts = 2
    # An optax transformation is accepted, compared by identity.
    tx = optax.sgd(0.1)
    assert S.SearchConfig(optimizer=tx) == S.SearchConfig(optimizer=tx)
    assert S.SearchConfig(optimizer=optax.sgd(0.1)) != S.SearchConfig(optimizer=optax.sgd(0.1))


def test_equal_configs_built_separately_compile_once(bivariate, x64, caplog):
    """Two equal configurations, built separately (the optimizer named by its hyperparameters):
    the second search compiles nothing, and gives the same answer to the bit."""
    import logging

    def config():
        return S.SearchConfig(restarts=2, steps=7, optimizer="sgd", learning_rate=0.5, momentum=0.9,
                              nesterov=True, warn_ratio=None, max_rounds=0)

    first = S.worst_case(bivariate, [0.3, 0.8], key=jax.random.key(0), config=config())
    with jax.log_compiles(True), caplog.at_level(logging.DEBUG, logger="jax"):
        second = S.worst_case(bivariate, [0.3, 0.8], key=jax.random.key(0), config=config())
    compiled = [r.getMessage() for r in caplog.records if r.getMessage().startswith(("Compiling", "Finished tracing"))]
    assert compiled == []
    np.testing.assert_array_equal(np.asarray(first.cfu), np.asarray(second.cfu))
    np.testing.assert_array_equal(np.asarray(first.history), np.asarray(second.history))


def test_the_old_keyword_arguments_still_work_with_a_warning(bivariate, x64):
    """worst_case(restarts=2, ...) is deprecated: folded into the config, the same answer, and a
    DeprecationWarning naming the new spelling; inverse_budget's too; unknown names stay errors."""
    import optax

    config = S.SearchConfig(restarts=2, steps=7, warn_ratio=None, max_rounds=0)
    new = S.worst_case(bivariate, [0.3, 0.8], key=jax.random.key(0), config=config)
    with pytest.warns(DeprecationWarning, match=r"worst_case\(restarts=2, steps=7, warn_ratio=None, max_rounds=0\) "
                      r"is deprecated.*config=SearchConfig\(restarts=2, steps=7, warn_ratio=None, max_rounds=0\)"):
        old = S.worst_case(bivariate, [0.3, 0.8], key=jax.random.key(0), restarts=2, steps=7, warn_ratio=None,
                           max_rounds=0)
    np.testing.assert_array_equal(np.asarray(old.cfu), np.asarray(new.cfu))
    with pytest.warns(DeprecationWarning, match=r"dataclasses\.replace\(config, steps=7\)"):
        again = S.worst_case(bivariate, [0.3, 0.8], key=jax.random.key(0),
                             config=S.SearchConfig(restarts=2, warn_ratio=None, max_rounds=0), steps=7)
    np.testing.assert_array_equal(np.asarray(again.cfu), np.asarray(new.cfu))
    with pytest.warns(DeprecationWarning, match=r"SearchConfig\(optimizer="):  # an optax object still works
        S.worst_case(bivariate, [0.3], key=0, optimizer=optax.adam(0.05), restarts=1, steps=2, warn_ratio=None,
                     max_rounds=0)
    with pytest.warns(DeprecationWarning, match=r"inverse_budget\(restarts=1"):
        S.inverse_budget(bivariate, 1e9, key=0, hi=0.5, grid=1, restarts=1, steps=2, warn_ratio=None, max_rounds=0)
    with pytest.raises(TypeError, match="unexpected keyword argument 'restart'"):
        S.worst_case(bivariate, [0.3], key=0, restart=2)
    with pytest.raises(ValueError, match="config"):
        S.worst_case(bivariate, [0.3], key=0, config={"restarts": 2})


def test_the_public_functions_take_at_most_twelve_parameters():
    import inspect

    for fn in (S.worst_case, S.inverse_budget, S.bootstrap, resample_analysis):
        assert len(inspect.signature(fn).parameters) <= 12, fn.__name__


def test_every_predictor_runs_in_the_same_compiled_search(bivariate, x64, caplog):
    """The scored predictor is data (an index, not static structure): once one predictor's
    search has run, another predictor's compiles nothing, and each predictor's answer is what its
    own CFU gives at the worst P found."""
    import logging

    config = S.SearchConfig(restarts=2, steps=10, warn_ratio=None, max_rounds=0)
    found = {"fair": S.worst_case(bivariate, [0.3, 0.8], key=jax.random.key(0), config=config)}
    found["blind"] = S.worst_case(bivariate.scoring("blind"), [0.3, 0.8], key=jax.random.key(0), config=config)
    with jax.log_compiles(True), caplog.at_level(logging.DEBUG, logger="jax"):
        found["unconstrained"] = S.worst_case(bivariate.scoring("unconstrained"), [0.3, 0.8],
                                              key=jax.random.key(0), config=config)
    compiled = [r.getMessage() for r in caplog.records if r.getMessage().startswith(("Compiling", "Finished tracing"))]
    assert compiled == []
    for name, wc in found.items():
        model = bivariate.scoring(name)
        assert model.scored == name
        again = [float(S.cfu(model, np.asarray(P))) for P in np.asarray(wc.P)]
        np.testing.assert_allclose(np.asarray(wc.cfu), again, rtol=1e-6)
    assert float(found["unconstrained"].cfu[0]) > 10 * float(found["fair"].cfu[0])


def test_a_new_number_of_budgets_or_restarts_compiles_nothing(bivariate, x64, caplog):
    """Budgets and restarts are data (padded to slots, the padding masked): a search with
    another number of either reuses the compiled programs, and its answers are still the sign
    corners' CFU (two features: the corners ±p_max are the local maxima)."""
    import logging

    def search(budgets, **options):
        config = S.SearchConfig(steps=20, warn_ratio=None, **options)
        return S.worst_case(bivariate, budgets, key=jax.random.key(0), config=config)

    search([0.3, 0.8], restarts=2)
    with jax.log_compiles(True), caplog.at_level(logging.DEBUG, logger="jax"):
        three = search([0.3, 0.5, 0.8], restarts=3)
        one = search([0.8], restarts=1, max_rounds=0)
        rounds = search([0.3, 0.8], restarts=1)  # the adaptive rounds: the same program, other counts
    compiled = [r.getMessage() for r in caplog.records if r.getMessage().startswith(("Compiling", "Finished tracing"))]
    assert compiled == []
    assert np.shape(three.restart_cfu) == (3, 3) and np.shape(three.history) == (3, 3, 20)
    assert np.shape(one.restart_cfu) == (1, 1) and np.isnan(np.asarray(one.restart_ratio)).all()
    corners = np.array([max(float(S.cfu(bivariate, bivariate_correlation(s * b))) for s in (1, -1))
                        for b in (0.3, 0.5, 0.8)])
    np.testing.assert_allclose(three.cfu, corners, rtol=1e-6)
    np.testing.assert_allclose(one.cfu, corners[-1:], rtol=1e-6)
    assert (np.asarray(rounds.rounds) >= 1).all() and np.asarray(rounds.confirmed).all()
    np.testing.assert_allclose(rounds.cfu, corners[[0, 2]], rtol=1e-6)
    # The floor comes from the screening (P = I among the screened points), evaluated by the
    # search's program: cfu()'s value, to rounding (without a penalty it is rounding itself).
    floor = S.cfu_at_zero_correlation(bivariate)
    assert three.cfu_at_zero_correlation == pytest.approx(floor, rel=1e-6, abs=negligible_cfu(bivariate))
    assert one.cfu_at_zero_correlation == three.cfu_at_zero_correlation


def _small_config(m, **kw):
    import optax

    from cfjax.sensitivity.parameterisation import _Tanh
    from cfjax.sensitivity.search_config import _Program

    base = dict(P_fn=_Tanh(), shape=(m, m), mask=tuple(map(tuple, np.tril(np.ones((m, m), bool)).tolist())),
                optimizer=optax.adam(0.05), steps=3, batch_size=None, patience=50, tol=1e-4,
                min_eig=1e-3, init_scale=0.1, newton_steps=8, warm_start=False, restart_slots=4, log_objective=True,
                snap=None, corners=(), boundary_starts=0, polish_steps=0, margin_corners=())
    return _Program(**{**base, **kw})


def test_the_search_program_screens_points_and_falls_back_to_random_starts(bivariate, x64, rng):
    """Screening is the search's own program in its screening phase: the values are cfu()'s at
    the points given. A start that is not usable (here NaN) runs from its random fallback, as if
    that had been its start."""
    from cfjax.sensitivity import runs as program

    cfg = _small_config(2)
    key = jax.random.key(0)
    rho = rng.uniform(-0.9, 0.9, 4)
    points = jnp.asarray(np.stack([np.array([[1.0, r], [r, 1.0]]) for r in rho]))
    p = jnp.full((4,), 0.9)
    used = jnp.asarray([True, True, True, False])
    runs = jax.jit(program.Bound(program.cold_runs, cfg))
    values = np.asarray(runs(p, points, points, used, bivariate, key, jnp.asarray(True))[0])
    want = [float(S.cfu(bivariate, P)) for P in np.asarray(points[:3])]
    np.testing.assert_allclose(values[:3], want, rtol=1e-8)
    assert values[3] == -np.inf
    # The fallback: run 0's start is NaN; it runs exactly as from its fallback.
    L = jnp.asarray(np.tril(np.eye(2) + 0.3 * rng.normal(size=(4, 2, 2))))
    fallback = jnp.asarray(np.tril(np.eye(2) + 0.1 * rng.normal(size=(4, 2, 2))))
    bad = L.at[0].set(jnp.nan)
    ours = runs(p, bad, fallback, used, bivariate, key, jnp.asarray(False))
    want = runs(p, L.at[0].set(fallback[0]), fallback, used, bivariate, key, jnp.asarray(False))
    for a, b in zip(ours, want):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_the_probe_takes_the_gradient_only_when_asked(bivariate, x64):
    from cfjax.sensitivity import runs as program

    P = jnp.asarray([[1.0, 0.35], [0.35, 1.0]])
    s0 = jnp.log(bivariate.model_a.sigma)
    probe = jax.jit(lambda P, flag: program._probe(bivariate, P, s0, 30, None, flag))
    v_on, g_on, s_on = probe(P, jnp.asarray(True))
    v_off, g_off, s_off = probe(P, jnp.asarray(False))
    v, g, s = program._probe(bivariate, P, s0, 30)  # a Python True: no branch
    assert float(v_on) == float(v_off) == pytest.approx(float(S.cfu(bivariate, P)), rel=1e-9)
    np.testing.assert_array_equal(np.asarray(g_off), 0.0)
    np.testing.assert_allclose(g_on, g, rtol=1e-12)
    # The gradient against central differences of cfu() along the off-diagonal.
    h = 1e-5
    fd = (float(S.cfu(bivariate, P + h * (1 - jnp.eye(2)))) - float(S.cfu(bivariate, P - h * (1 - jnp.eye(2))))) / (2 * h)
    assert float(g_on[0, 1] + g_on[1, 0]) == pytest.approx(fd, rel=1e-5)


# ----------------------------------------------------------------------------- adaptive rounds
def test_adaptive_rounds_add_restarts_only_where_the_best_two_disagree(bivariate, x64):
    """Two features: the sign corners ±p_max are two local maxima, and two restarts start one at
    each. At p_max = 0 every restart finds P = I (confirmed in round one: no extra work); at 0.8
    the corners disagree, so a round adds 4 restarts there, which climb back to the best corner
    and confirm it: no warning, the answer the corners' best."""
    budgets = [0.0, 0.8]
    with warnings.catch_warnings():
        warnings.simplefilter("error", S.ConvergenceWarning)
        wc = S.worst_case(bivariate, budgets, key=jax.random.key(0), config=S.SearchConfig(restarts=2, steps=20))
    rounds, extra = np.asarray(wc.rounds), np.asarray(wc.round_cfu)
    assert rounds.tolist() == [0, 1] and extra.shape == (2, 4)
    assert np.isnan(extra[0]).all() and np.isfinite(extra[1]).all()
    first = np.asarray(wc.restart_cfu)
    assert first.shape == (2, 2) and first[1, 0] / first[1, 1] > 1 + 1e-3  # round one: two corners, apart
    corner = max(float(S.cfu(bivariate, bivariate_correlation(s * 0.8))) for s in (1, -1))
    np.testing.assert_allclose(float(wc.cfu[1]), corner, rtol=1e-6)
    assert np.sum(extra[1] >= corner / (1 + 1e-3)) >= 1  # a round's restart agrees with the best
    assert np.asarray(wc.confirmed).all() and float(wc.restart_ratio[1]) <= 1 + 1e-3
    d = wc.to_dict()
    assert d["rounds"] == [0, 1] and d["confirmed"] == [True, True] and d["round_cfu"][0] == [None] * 4


def test_the_rounds_stop_at_the_cap_and_then_it_warns(bivariate, x64):
    """Restarts of one step from random starts, neither snapped nor polished, never agree to
    1e-3: each round adds 4 restarts at every budget, max_rounds of them, and then it warns,
    saying what was done."""
    opts = dict(restarts=2, steps=1, screen_corners=False, snap=None, polish=0)
    with pytest.warns(S.ConvergenceWarning, match=r"after 2 adaptive round\(s\) there of 4 more restarts") as caught:
        wc = S.worst_case(bivariate, [0.3, 0.8], key=jax.random.key(0), config=S.SearchConfig(max_rounds=2, **opts))
    assert "p_max = 0.3" in str(caught[0].message) and "p_max = 0.8" in str(caught[0].message)
    assert np.asarray(wc.rounds).tolist() == [2, 2] and np.shape(wc.round_cfu) == (2, 8)
    assert not np.asarray(wc.confirmed).any()
    every = np.concatenate([np.asarray(wc.restart_cfu), np.asarray(wc.round_cfu)], axis=1)
    np.testing.assert_array_equal(np.asarray(wc.cfu), every.max(axis=1))  # the best of every restart
    top = -np.sort(-every, axis=1)
    np.testing.assert_allclose(wc.restart_ratio, top[:, 0] / top[:, 1], rtol=1e-12)
    with warnings.catch_warnings():  # a factor above every ratio: silent
        warnings.simplefilter("error", S.ConvergenceWarning)
        S.worst_case(bivariate, [0.3, 0.8], key=jax.random.key(0),
                     config=S.SearchConfig(max_rounds=2, warn_ratio=float(np.max(wc.restart_ratio)) * 1.01, **opts))


# slow: a replication study of the default search against one with 10x its restarts, steps and rays (the
# check experiments/search_check.py runs on the real data); the search's mechanics stay in `make test`.
@pytest.mark.slow
def test_the_default_search_matches_a_ten_times_larger_one(x64):
    """The demo's problem, small: at every budget of the demo's curve the default search's worst
    case is within 1e-3 (relative) of a search with 10x the restarts, steps, patience, polish and
    screened rays (experiments/search_check.py does the same on the real data)."""
    with jax.enable_x64(True):
        prob = S.synthetic(300, correlation=0.5, key=3)
        model = S.fit(prob.graph, prob.data, S.FitConfig(degrees=(2,), lambdas=(1e-2, 1.0, 1e2), predictor_degrees=(2,)))
    budgets = np.unique(np.append(np.linspace(0.0, 0.99, 6), 0.5))
    with warnings.catch_warnings():
        warnings.simplefilter("error", S.ConvergenceWarning)
        warnings.simplefilter("ignore", S.ShrinkageWarning)
        default = S.worst_case(model, budgets, key=jax.random.key(0))
        large = S.worst_case(model, budgets, key=jax.random.key(0),
                             config=S.SearchConfig(restarts=40, steps=5000, patience=500, polish=300,
                                                   boundary_starts=160))
    np.testing.assert_allclose(default.cfu, large.cfu, rtol=1e-3, atol=negligible_cfu(model))
    assert np.asarray(default.confirmed).all()
