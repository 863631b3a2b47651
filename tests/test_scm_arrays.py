"""Array-valued SCM nodes (an image-like (3, 4) node, pytree noise, a renderer whose noise is
given): shapes, exact reconstruction, counterfactuals against a numpy loop over interventions
and units, partial noise, chunking, validation, fit(nodes=...) and log_prob."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

import cfjax as cf
from cfjax._checks import ValidationError

S = cf.scm
E = (3, 4)
D = 12  # values of one unit of an array node


@dataclasses.dataclass(frozen=True)
class Field(S.Mechanism):
    """``x = A(pa) + exp(s(pa))·u`` elementwise, affine ``A``, ``s``; noise ``u`` (3, 4)."""

    @property
    def event_shape(self):
        return E

    def init(self, key, parent_dim):
        k = jax.random.split(key, 2)
        return {"W": 0.3 * jax.random.normal(k[0], (parent_dim, D)), "B": jnp.zeros(D),
                "V": 0.2 * jax.random.normal(k[1], (parent_dim, D)), "C": jnp.zeros(D)}

    def _loc_log_scale(self, p, pa):
        return (pa @ p["W"] + p["B"]).reshape(E), (pa @ p["V"] + p["C"]).reshape(E)

    def sample_noise(self, key):
        return jax.random.normal(key, E)

    def forward(self, p, u, pa):
        loc, ls = self._loc_log_scale(p, pa)
        return loc + jnp.exp(ls) * u

    def inverse(self, p, x, pa):
        loc, ls = self._loc_log_scale(p, pa)
        return (x - loc) * jnp.exp(-ls)

    def log_prob(self, p, x, pa):
        loc, ls = self._loc_log_scale(p, pa)
        z = (x - loc) * jnp.exp(-ls)
        return jnp.sum(-0.5 * z * z - 0.5 * np.log(2 * np.pi) - ls)


@dataclasses.dataclass(frozen=True)
class PytreeField(Field):
    """As :class:`Field` with noise ``{"a": (11,), "b": ()}`` (the 12 values' noise split)."""

    def sample_noise(self, key):
        k = jax.random.split(key)
        return {"a": jax.random.normal(k[0], (D - 1,)), "b": jax.random.normal(k[1], ())}

    def forward(self, p, u, pa):
        z = jnp.concatenate([u["a"], u["b"][None]]).reshape(E)
        return super().forward(p, z, pa)

    def inverse(self, p, x, pa):
        z = super().inverse(p, x, pa).reshape(-1)
        return {"a": z[:-1], "b": z[-1]}


@dataclasses.dataclass(frozen=True)
class Rendered(Field):
    """A renderer: its noise cannot be computed from the image."""

    def abduct(self, p, x, pa, key):
        raise ValidationError("`noise`: node 'r' cannot be abducted; pass noise={'r': ...}.")


MAIN = {"a": [], "c": [], "img": ["a", "c"], "y": ["img", "a"], "p": ["a"]}
RENDER = {"a": [], "c": [], "img": ["a", "c"], "r": ["a", "img"]}


def make_main():
    return S.SCM(MAIN, {"a": S.LocationScale(), "c": S.GumbelMax(3), "img": Field(),
                        "y": S.LocationScale(), "p": PytreeField()})


def make_render():
    return S.SCM(RENDER, {"a": S.LocationScale(), "c": S.GumbelMax(3), "img": Field(), "r": Rendered()})


def field_params(rng, p_dim):
    f = lambda *s: jnp.asarray(rng.normal(size=s), jnp.float32)  # noqa: E731
    return {"W": 0.3 * f(p_dim, D), "B": 0.3 * f(D), "V": 0.2 * f(p_dim, D), "C": 0.1 * f(D)}


def random_params(rng, render=False):
    params = {"a": S.linear_gaussian_params([], rng.normal(), np.exp(0.3 * rng.normal())),
              "c": {"net": {"params": {"bias": jnp.asarray(rng.normal(size=3), jnp.float32)}}},
              "img": field_params(rng, 4)}
    if render:
        params["r"] = field_params(rng, 1 + D)
    else:
        params["y"] = S.linear_gaussian_params(0.3 * rng.normal(size=1 + D), rng.normal(), np.exp(0.3 * rng.normal()))
        params["p"] = field_params(rng, 1)
    return params


def random_data(rng, n, render=False):
    data = {"a": rng.normal(size=n).astype(np.float32), "c": rng.integers(0, 3, n).astype(np.int32),
            "img": rng.normal(size=(n, *E)).astype(np.float32)}
    if render:
        data["r"] = rng.normal(size=(n, *E)).astype(np.float32)
    else:
        data["y"] = rng.normal(size=n).astype(np.float32)
        data["p"] = rng.normal(size=(n, *E)).astype(np.float32)
    return data


# ------------------------------------------------------------------ numpy reference
def np_p(p):
    return jax.tree.map(lambda a: np.asarray(a, np.float64), p)


def np_field(p, pa):
    p = np_p(p)
    return (pa @ p["W"] + p["B"]).reshape(E), (pa @ p["V"] + p["C"]).reshape(E)


def np_lg(p):
    p = np_p(p)["net"]["params"]
    w = p["Dense_0"]["kernel"][:, 0] if "Dense_0" in p else np.zeros(0)
    b = p["Dense_0"]["bias"][0] if "Dense_0" in p else p["bias"][0]
    return w, b


def np_pa(node, vals):
    """The parent vector of ``node`` from one unit's values (c one-hot, arrays flattened)."""
    parts = []
    for q in {**MAIN, **RENDER}[node]:
        v = np.asarray(vals[q], np.float64)
        parts.append(np.eye(3)[int(vals[q])] if q == "c" else v.reshape(-1))
    return np.concatenate(parts) if parts else np.zeros(0)


def reference(params, data, do, given=None, render=False):
    """Abduct each unit (invert), then for each intervention k recompute every node from its
    parents in topological order: a direct loop, float64."""
    graph = RENDER if render else MAIN
    given = given or {}
    n = len(data["a"])
    first = next(iter(do))
    k = np.shape(do[first])[1 if np.ndim(do[first]) == 2 + len(np.shape(data[first])[1:]) else 0]
    out = {v: np.zeros((n, k) + np.shape(data[v])[1:]) for v in graph}
    sa = float(np.exp(params["a"]["log_scale"]))
    for i in range(n):
        obs = {v: np.asarray(data[v][i], np.float64) for v in graph}
        u = {}
        for v in graph:
            pa = np_pa(v, obs)
            if v in given:
                u[v] = np.asarray(given[v][i], np.float64)
            elif v == "a":
                u[v] = (obs[v] - np_lg(params["a"])[1]) / sa
            elif v == "y":
                w, b = np_lg(params["y"])
                u[v] = (obs[v] - pa @ w - b) / float(np.exp(params["y"]["log_scale"]))
            elif v in ("img", "p", "r"):
                loc, ls = np_field(params[v], pa)
                u[v] = (obs[v] - loc) * np.exp(-ls)
        for j in range(k):
            vals = {}
            for v in graph:
                if v in do:
                    val = np.asarray(do[v], np.float64)
                    vals[v] = val[i, j] if val.ndim == 2 + len(np.shape(obs[v])) else val[j]
                    continue
                pa = np_pa(v, vals)
                if v == "c":
                    vals[v] = obs[v]  # a root keeps its class
                elif v == "a":
                    vals[v] = np_lg(params["a"])[1] + sa * u[v]
                elif v == "y":
                    w, b = np_lg(params["y"])
                    vals[v] = pa @ w + b + float(np.exp(params["y"]["log_scale"])) * u[v]
                else:
                    loc, ls = np_field(params[v], pa)
                    vals[v] = loc + np.exp(ls) * u[v]
                out[v][i, j] = vals[v]
            for v in do:
                out[v][i, j] = vals[v]
    return out


def assert_close(actual, desired):
    for v in desired:
        np.testing.assert_allclose(np.asarray(actual[v], np.float64), desired[v], rtol=2e-4, atol=2e-4, err_msg=v)


def key_of(rng):
    return jax.random.key(int(rng.integers(2**31)))


# ------------------------------------------------------------------ tests
def test_shapes_of_sample_abduct_and_interventional_samples(rng):
    scm, params = make_main(), random_params(rng)
    n = int(rng.integers(2, 7))
    x = scm.sample(params, n, key=key_of(rng))
    assert {v: x[v].shape for v in MAIN} == {"a": (n,), "c": (n,), "img": (n, *E), "y": (n,), "p": (n, *E)}
    u = scm.abduct(params, x, key=key_of(rng))
    assert u["img"].shape == (n, *E) and u["c"].shape == (n, 3)
    assert u["p"]["a"].shape == (n, D - 1) and u["p"]["b"].shape == (n,)
    do = {"img": rng.normal(size=(2, *E)).astype(np.float32)}
    s = scm.interventional_samples(params, n, do, key=key_of(rng))
    assert s["img"].shape == (n, 2, *E) and s["y"].shape == (n, 2) and s["p"].shape == (n, 2, *E)
    np.testing.assert_array_equal(s["img"], np.broadcast_to(do["img"][None], (n, 2, *E)))


def test_abduct_then_null_intervention_reproduces_the_data(rng):
    scm, params = make_main(), random_params(rng)
    data = random_data(rng, 5)
    out = scm.counterfactual(params, data, {}, key=key_of(rng))
    assert {v: out[v].shape for v in MAIN} == {v: (len(data[v]), 1, *np.shape(data[v])[1:]) for v in MAIN}
    for v in MAIN:
        np.testing.assert_array_equal(out[v][:, 0], data[v])
    # predicting from the abducted noise (every node recomputed) reproduces them too
    u = scm.abduct(params, data, key=key_of(rng))
    pred = jax.vmap(scm.predict_unit, in_axes=(None, 0))(params, u)
    for v in MAIN:
        np.testing.assert_allclose(pred[v], data[v], rtol=1e-4, atol=1e-4)


def test_counterfactuals_of_array_nodes_equal_a_numpy_loop(rng):
    scm, params = make_main(), random_params(rng)
    n, k = 6, 3
    data = random_data(rng, n)
    key = key_of(rng)
    cases = [
        {"a": rng.normal(size=k).astype(np.float32)},
        {"c": rng.integers(0, 3, k).astype(np.int32)},
        {"img": rng.normal(size=(k, *E)).astype(np.float32)},  # one image for every unit
        {"img": rng.normal(size=(n, k, *E)).astype(np.float32)},  # per-unit images
        {"a": rng.normal(size=(n, k)).astype(np.float32), "img": rng.normal(size=(k, *E)).astype(np.float32)},
    ]
    for do in cases:
        out = scm.counterfactual(params, data, do, key=key)
        assert {v: out[v].shape for v in MAIN} == {v: (n, k, *np.shape(data[v])[1:]) for v in MAIN}
        assert_close(out, reference(params, data, do))
    # a sequence of groups is concatenated along K; reused noise gives the same answer
    out = scm.counterfactual(params, data, [cases[0], cases[3]], key=key)
    ref = [reference(params, data, d) for d in (cases[0], cases[3])]
    assert_close(out, {v: np.concatenate([r[v] for r in ref], axis=1) for v in MAIN})
    noise = scm.abduct(params, data, key=key)
    again = scm.counterfactual(params, data, cases[3], noise=noise)
    assert_close(again, reference(params, data, cases[3]))


def test_partial_noise_for_a_node_that_cannot_be_abducted(rng):
    scm, params = make_render(), random_params(rng, render=True)
    n, k = 5, 2
    data = random_data(rng, n, render=True)
    u_r = rng.normal(size=(n, *E)).astype(np.float32)
    do = {"a": rng.normal(size=k).astype(np.float32)}
    with pytest.raises(ValidationError, match="noise"):
        scm.counterfactual(params, data, do, key=key_of(rng))
    key = key_of(rng)
    out = scm.counterfactual(params, data, do, key=key, noise={"r": u_r})
    assert out["r"].shape == (n, k, *E)
    assert_close(out, reference(params, data, do, given={"r": u_r}, render=True))
    # do(a) re-renders r from the noise given (the data's r came from other noise)
    assert not np.allclose(out["r"][:, 0], data["r"])
    chunked = scm.counterfactual(params, data, do, key=key, noise={"r": u_r}, chunk_size=2)
    for v in RENDER:
        np.testing.assert_allclose(chunked[v], out[v], rtol=0, atol=1e-6)
    with pytest.raises(ValidationError, match="noise"):
        scm.counterfactual(params, data, do, key=key, noise={"r": u_r[:-1]})


def test_chunked_counterfactuals_equal_the_unchunked_call(rng):
    scm, params = make_main(), random_params(rng)
    n, k = 7, 2
    data = random_data(rng, n)
    key = key_of(rng)
    do = [{"a": rng.normal(size=k).astype(np.float32)},
          {"img": rng.normal(size=(n, k, *E)).astype(np.float32)}]
    full = scm.counterfactual(params, data, do, key=key)
    for b in (1, 3, n, n + 4):
        out = scm.counterfactual(params, data, do, key=key, chunk_size=b)
        assert all(isinstance(out[v], jax.Array) for v in MAIN)  # the same type as unchunked
        for v in MAIN:
            assert out[v].shape == full[v].shape and out[v].dtype == full[v].dtype
            # the same program per unit, in a batch of another size: equal up to rounding
            np.testing.assert_allclose(out[v], full[v], rtol=0, atol=1e-5, err_msg=f"{v}, chunk {b}")
        np.testing.assert_array_equal(out["c"], full["c"])
        ranges = [(s, t) for s, t, _ in scm.counterfactual_chunks(params, data, do, key=key, chunk_size=b)]
        assert ranges[0][0] == 0 and ranges[-1][1] == n
        assert all(t0 == s1 for (_, t0), (s1, _) in zip(ranges, ranges[1:]))
        assert all(0 < t - s <= b for s, t in ranges)
    with pytest.raises(ValidationError, match="chunk_size"):
        scm.counterfactual(params, data, do, key=key, chunk_size=0)


def test_shift_on_an_array_node_is_rejected(rng):
    scm, params = make_main(), random_params(rng)
    data = random_data(rng, 3)
    with pytest.raises(ValidationError, match=r"interventions\['img'\].*Shift"):
        scm.counterfactual(params, data, {"img": S.Shift(np.ones((2, *E), np.float32))}, key=key_of(rng))
    # on a scalar node it still applies, and moves the array child
    out = scm.counterfactual(params, data, {"a": S.Shift(np.array([1.0], np.float32))}, key=key_of(rng))
    assert_close(out, reference(params, data, {"a": (data["a"] + 1.0)[:, None]}))


@pytest.mark.parametrize("bad, match", [
    (lambda d: {**d, "img": d["img"].reshape(len(d["a"]), 4, 3)}, r"`data\['img'\]`: expected shape \(N, 3, 4\)"),
    (lambda d: {**d, "img": d["img"][:, 0]}, r"`data\['img'\]`: expected shape"),
    (lambda d: {**d, "img": d["img"][:-1]}, r"`data\['img'\]`: expected 4 rows"),
    (lambda d: {**d, "img": np.where(np.arange(D).reshape(E) == 5, np.nan, d["img"]).astype(np.float32)},
     r"`data\['img'\]`.*NaN"),
    (lambda d: {k: v for k, v in d.items() if k != "img"}, r"`data`: missing column 'img'"),
])
def test_bad_data_is_rejected_naming_the_argument(rng, bad, match):
    scm, params = make_main(), random_params(rng)
    data = random_data(rng, 4)
    with pytest.raises(ValidationError, match=match):
        scm.counterfactual(params, bad(data), {"a": np.zeros(1, np.float32)}, key=key_of(rng))


@pytest.mark.parametrize("do, match", [
    ({"img": np.zeros((2, 3), np.float32)}, r"`interventions\['img'\]`: expected shape \(K, 3, 4\) or \(4, K, 3, 4\)"),
    ({"img": np.zeros((2, 5, 3, 4), np.float32)}, r"`interventions\['img'\]`: expected shape"),
    ({"img": np.full((1, 3, 4), np.nan, np.float32)}, r"`interventions\['img'\]`.*NaN"),
    ({"a": np.zeros(2, np.float32), "img": np.zeros((3, 3, 4), np.float32)},
     r"`interventions\['img'\]`: expected K = 2"),
])
def test_bad_interventions_are_rejected_naming_the_argument(rng, do, match):
    scm, params = make_main(), random_params(rng)
    data = random_data(rng, 4)
    with pytest.raises(ValidationError, match=match):
        scm.counterfactual(params, data, do, key=key_of(rng))
    with pytest.raises(ValidationError, match=match):
        scm.counterfactual(params, data, do, key=key_of(rng), chunk_size=3)


def test_fit_of_some_nodes_changes_only_their_params(rng):
    scm, params = make_main(), random_params(rng)
    data = random_data(rng, 8)
    fitted, losses, _ = scm.fit(data, key=key_of(rng), steps=3, learning_rate=0.05, params=params, nodes=["img", "y"])
    assert losses.shape == (3,) and bool(jnp.all(jnp.isfinite(losses)))
    for v in MAIN:
        same = jax.tree.map(lambda a, b: bool(np.array_equal(a, b)), fitted[v], params[v])
        assert all(jax.tree.leaves(same)) == (v not in ("img", "y")), v
    # only the fitted nodes and their parents are needed
    part = {v: data[v] for v in ("a", "c", "img")}
    fitted, _, _ = scm.fit(part, key=key_of(rng), steps=2, params=params, nodes=["img"])
    assert set(fitted) == set(MAIN)
    with pytest.raises(ValidationError, match="missing column 'img'"):
        scm.fit({v: data[v] for v in ("a", "c", "y")}, key=key_of(rng), steps=2, params=params, nodes=["y"])


def test_log_prob_with_array_nodes_is_the_sum_of_the_conditionals(rng):
    scm, params = make_main(), random_params(rng)
    data = random_data(rng, 5)
    got = np.asarray(scm.log_prob(params, data))
    want = np.zeros(5)
    for i in range(5):
        obs = {v: np.asarray(data[v][i], np.float64) for v in MAIN}
        _, b = np_lg(params["a"])
        want[i] += stats.norm.logpdf(obs["a"], b, float(np.exp(params["a"]["log_scale"])))
        logits = np.asarray(params["c"]["net"]["params"]["bias"], np.float64)
        want[i] += logits[int(obs["c"])] - np.log(np.exp(logits).sum())
        w, b = np_lg(params["y"])
        want[i] += stats.norm.logpdf(obs["y"], np_pa("y", obs) @ w + b, float(np.exp(params["y"]["log_scale"])))
        for v in ("img", "p"):
            loc, ls = np_field(params[v], np_pa(v, obs))
            want[i] += stats.norm.logpdf(obs[v], loc, np.exp(ls)).sum()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-3)
