"""Results of cfjax.representations a user can keep (``to_dict``, short ``repr``), the host
path of ``stochastic_proba`` for numpy callables, and the float64 ``PrecisionWarning``."""

from __future__ import annotations

import json
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from sklearn.linear_model import LogisticRegression

import cfjax.representations as R
from cfjax import _checks
from cfjax._checks import PrecisionWarning, ValidationError


def _data(rng, n=240, d=5, k=2):
    z = np.arange(n) % k
    rng.shuffle(z)
    X = rng.normal(size=(n, d)).astype(np.float32)
    X[:, 0] += 2.0 * (z == 1)
    X[:, 1] -= 2.0 * (z == 0)
    return X, z


def _round_trip(obj):
    d = obj.to_dict()
    back = json.loads(json.dumps(d))
    assert back == json.loads(json.dumps(back))  # plain Python through and through
    return d, back


def _short(obj):
    text = repr(obj)
    assert len(text) < 400, text
    assert "\n" not in text and "Array(" not in text and "array(" not in text
    return text


def test_scores_to_dict_and_repr(rng):
    n, C = 30, 3
    p_obs, p_true, p_cfr = (rng.dirichlet(np.ones(C), n).astype(np.float32) for _ in range(3))
    s = R.score(p_obs, p_true, p_cfr)
    d, back = _round_trip(s)
    assert set(d) == set(s._fields)
    tv = lambda a, b: 0.5 * np.abs(a.astype(np.float64) - b).sum(axis=1).mean()  # noqa: E731
    ref = {"pip": (p_true.argmax(1) == p_cfr.argmax(1)).mean(), "atv": tv(p_true, p_cfr),
           "ate": tv(p_true, p_obs), "ate_cfr": tv(p_cfr, p_obs)}
    for name, value in ref.items():
        assert back[name] == float(getattr(s, name))
        np.testing.assert_allclose(back[name], value, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(back["mean_effect"], (p_true - p_obs).mean(axis=0), atol=1e-6)
    assert len(back["mean_effect_cfr"]) == C
    text = _short(s)
    assert text.startswith("CFRScores(") and f"pip={float(s.pip):.4g}" in text
    # still a NamedTuple pytree: jit and vmap over classifiers keep working
    jitted = jax.jit(R.score)(p_obs, p_true, p_cfr)
    assert type(jitted) is R.metrics.CFRScores
    np.testing.assert_allclose([jitted.to_dict()[f] for f in ref], [d[f] for f in ref], rtol=1e-6)
    assert isinstance(s, tuple) and len(jax.tree.leaves(s)) == len(s._fields)
    stacked = jax.tree.map(lambda a, b: jnp.stack([a, b]), s, s)
    assert json.loads(json.dumps(stacked.to_dict()))["pip"] == [float(s.pip)] * 2
    _short(stacked)


def test_model_classifier_and_augmentation_results(rng):
    X, z = _data(rng)
    y = (X[:, 2] + 0.3 * rng.normal(size=len(X)) > 0).astype(np.int32)
    model = R.fit_cfr(X, z)
    d, back = _round_trip(model)
    assert back["n_values"] == 2 and back["subspace"]["method"] == "orth"
    np.testing.assert_array_equal(np.asarray(back["coef"], np.float32), np.asarray(model.coef))
    again = R.cfr.CFRModel.from_dict(back)
    np.testing.assert_array_equal(np.asarray(R.counterfactuals(again, X)), np.asarray(R.counterfactuals(model, X)))
    assert _short(model) == "CFRModel(method='orth', n_values=2, dim=5, rank=1, dtype=float32)"
    assert "rank=1" in _short(model.subspace)
    moments = R.cfr.class_moments(X, z, 2)
    _, mb = _round_trip(moments)
    np.testing.assert_allclose(mb["counts"], np.bincount(z), rtol=0)
    np.testing.assert_allclose(mb["means"], [X[z == v].mean(axis=0) for v in range(2)], rtol=1e-5, atol=1e-5)
    _short(moments)

    clf = R.train_logistic(X, y)
    _, cb = _round_trip(clf)
    np.testing.assert_array_equal(np.asarray(R.classifiers.LinearClassifier.from_dict(cb).W), np.asarray(clf.W))
    assert _short(clf) == "LinearClassifier(n_features=5, n_classes=2, dtype=float32)"

    res = R.augmentation_effect(model, (X, y, z), (X, y, z))
    d, back = _round_trip(res)
    assert back["accuracy"] == res.accuracy and back["accuracy_augmented"] == res.accuracy_augmented
    np.testing.assert_array_equal(back["tpr_gap"], np.asarray(res.tpr_gap, np.float64))
    assert back["max_abs_tpr_gap"] == float(np.nanmax(np.abs(res.tpr_gap)))
    assert back["classifier"] == {"n_features": 5, "n_classes": 2}
    assert "W" not in json.dumps(back)  # weights only on request
    assert np.asarray(res.to_dict(classifiers=True)["classifier_augmented"]["W"]).shape == (5, 2)
    text = _short(res)
    assert f"accuracy={res.accuracy:.4g}" in text and "LinearClassifier(" in text


def test_data_containers(rng):
    data = R.synthetic_embeddings(40, d=6)
    _, back = _round_trip(data)
    np.testing.assert_array_equal(np.asarray(back["X"], np.float32), data.X)
    assert _short(data) == "EmbeddingData(X=float32[40, 6], y=int32[40], z=int32[40], X_cf=float32[40, 6], z_cf=int32[40])"
    corpus = R.template_corpus(12)
    _, back = _round_trip(corpus)
    assert back["texts"] == corpus.texts and back["values"] == list(corpus.values)
    assert "texts=list[12]" in _short(corpus)


# --- stochastic_proba with a host (numpy) callable --------------------------------------------

@pytest.mark.parametrize("per_unit", [False, True])
def test_stochastic_proba_accepts_sklearn_predict_proba(rng, per_unit):
    X, z = _data(rng)
    y = (X[:, 2] + X[:, 0] - X[:, 1] > 0).astype(np.int32) + (X[:, 3] > 1)  # three classes
    sk = LogisticRegression(C=10.0).fit(X, y)
    same = R.classifiers.LinearClassifier(W=jnp.asarray(sk.coef_.T, jnp.float32), b=jnp.asarray(sk.intercept_, jnp.float32))
    model = R.fit_cfr(X, z)
    targets = 1 - z if per_unit else None
    key = jax.random.key(int(rng.integers(1 << 30)))
    host = R.stochastic_proba(model, sk.predict_proba, X, targets, key=key, draws=5)
    traced = R.stochastic_proba(model, same, X, targets, key=key, draws=5)
    shape = (len(X), 3) if per_unit else (len(X), 2, 3)
    assert host.shape == traced.shape == shape and host.dtype == jnp.float32
    np.testing.assert_allclose(np.asarray(host), np.asarray(traced), atol=2e-5)
    # reference: predict_proba of each draw's stochastic CFRs (same noise: key split per draw)
    keys = jax.random.split(key, 5)
    ref = np.zeros(shape)
    for k in keys:
        noise = np.asarray(jax.random.normal(k, (len(X), model.subspace.rank)))
        L, coef, icpt = (np.asarray(a, np.float64) for a in (model.resid_chol, model.coef, model.intercept))
        E = np.asarray(model.subspace.coord, np.float64)
        for i, t in enumerate([targets] if per_unit else [np.full(len(X), v) for v in range(2)]):
            x = X.astype(np.float64)
            c = x @ E.T
            perp = x - c @ E
            c_new = np.einsum("nd,ndr->nr", perp, coef[t]) + icpt[t] + np.einsum("nrs,ns->nr", L[t], noise)
            p = sk.predict_proba(perp + c_new @ E)
            if per_unit:
                ref += p
            else:
                ref[:, i] += p
    np.testing.assert_allclose(np.asarray(host), ref / 5, atol=2e-4)


def test_stochastic_proba_jit_switch(rng):
    X, z = _data(rng)
    W = rng.normal(size=(5, 2)).astype(np.float32)

    def numpy_proba(x):
        e = np.exp(np.asarray(x) @ W)
        return e / e.sum(axis=1, keepdims=True)

    def jax_proba(x):
        return jax.nn.softmax(x @ W, axis=-1)

    model = R.fit_cfr(X, z)
    key = jax.random.key(int(rng.integers(1 << 30)))
    auto = R.stochastic_proba(model, numpy_proba, X, None, key=key, draws=3)
    host = R.stochastic_proba(model, numpy_proba, X, None, key=key, draws=3, jit=False)
    jax_host = R.stochastic_proba(model, jax_proba, X, None, key=key, draws=3, jit=False)
    jax_jit = R.stochastic_proba(model, jax_proba, X, None, key=key, draws=3, jit=True)
    np.testing.assert_array_equal(np.asarray(auto), np.asarray(host))
    np.testing.assert_allclose(np.asarray(host), np.asarray(jax_jit), atol=2e-6)
    np.testing.assert_allclose(np.asarray(jax_host), np.asarray(jax_jit), atol=2e-6)
    with pytest.raises(jax.errors.TracerArrayConversionError):
        R.stochastic_proba(model, numpy_proba, X, None, key=key, draws=3, jit=True)
    for wrong in (lambda x: np.ones(len(x)), lambda x: np.ones((3, 2))):
        for jit in (None, False):
            with pytest.raises(ValidationError, match="`proba`"):
                R.stochastic_proba(model, wrong, X, None, key=key, draws=2, jit=jit)
    with pytest.raises(ValidationError, match="`jit`"):
        R.stochastic_proba(model, jax_proba, X, None, key=key, jit="yes")


# --- float64 inputs with jax_enable_x64 off ---------------------------------------------------

def test_float64_input_warns_once_per_argument(rng, monkeypatch):
    monkeypatch.setattr(_checks, "_DOWNCAST_WARNED", set())
    X, z = _data(rng)
    X64 = X.astype(np.float64)
    y = (X[:, 2] > 0).astype(np.int32)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = R.fit_cfr(X64, z)
        R.concept_subspace(X64, z)
        R.counterfactuals(model, X64)
        clf = R.train_logistic(X64, y)  # used to warn from inside jnp.ones(..., float64)
        p = np.asarray(clf(jnp.asarray(X)), np.float64)
        R.score(p, p, p)
        R.score(p, p, p)
    precision = [w for w in caught if issubclass(w.category, PrecisionWarning)]
    assert sorted(str(w.message).split("`")[1] for w in precision) == ["X", "p_cfr", "p_obs", "p_true"]
    assert all(w.filename == __file__ for w in precision)  # points at the caller's line
    first = str(precision[0].message)
    assert "float64" in first and "float32" in first and 'jax.config.update("jax_enable_x64", True)' in first
    # (JAX's notice of a compilation-cache entry another test worker was still writing is not cfjax's)
    assert [str(w.message) for w in caught if not issubclass(w.category, PrecisionWarning)
            and "persistent compilation cache" not in str(w.message)] == []
    assert model.coef.dtype == jnp.float32
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        monkeypatch.setattr(_checks, "_DOWNCAST_WARNED", set())
        with jax.enable_x64(True):
            assert R.concept_subspace(X64, z).coord.dtype == jnp.float64
        R.fit_cfr(X, z)  # float32: nothing to say
    assert [w for w in caught if issubclass(w.category, PrecisionWarning)] == []
