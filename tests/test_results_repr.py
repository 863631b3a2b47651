"""Results of cfjax.predictors and cfjax.generative.quality a user can keep: ``to_dict`` through
``json.dumps`` with the headline numbers, and a short ``repr``."""

from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import cfjax as cf
from cfjax._checks import ValidationError
from cfjax.generative import quality as q
from cfjax.generative import report as gr
from cfjax import predictors as E
from cfjax.study import families as F


def _round_trip(obj):
    back = json.loads(json.dumps(obj.to_dict()))
    text = repr(obj)
    assert len(text) < 400 and "\n" not in text and "Array(" not in text, text
    return back, text


def test_ensemble_state_keeps_the_record_not_the_weights(rng):
    m = 3
    state = E.state.init_state(cf.predictors.EffusionCNN(features=(4,)),
                         E.EnsembleConfig(steps=30, eval_every=10, warmup=0), (16, 16), key=0, members=m)
    # a record as after two of three rounds (fields replaced as training would)
    auc = rng.uniform(0.5, 1.0, (3, m)).astype(np.float32)
    auc[2] = np.nan
    state = state.replace(val_auc=jnp.asarray(auc), best_auc=jnp.asarray(np.nanmax(auc, axis=0)),
                          step=jnp.asarray(20, state.step.dtype), round=jnp.asarray(2, state.round.dtype),
                          active=jnp.asarray([True, False, True]))
    back, text = _round_trip(state)
    assert back["n_members"] == m and back["step"] == 20 and back["round"] == 2 and back["finished"] is False
    np.testing.assert_array_equal(back["best_auc"], np.nanmax(auc, axis=0).astype(np.float64))
    assert back["active"] == [True, False, True]
    np.testing.assert_array_equal(np.asarray(back["val_auc"], np.float64), auc.astype(np.float64))
    assert "params" not in back and "opt_state" not in back
    assert text.startswith("EnsembleState(members=3, step=20, round=2, active=2/3")
    assert f"best_auc_mean={float(np.nanmax(auc, axis=0).astype(np.float64).mean()):.4g}" in text
    config = E.EnsembleConfig(steps=30, eval_every=10, warmup=0)
    assert E.EnsembleConfig(**json.loads(json.dumps(config.to_dict()))) == config
    data = E.data.member_data(np.zeros((4, 16, 16), np.float32), np.array([0, 1, 0, 1]), np.ones((2, 4), bool))
    back, text = _round_trip(data)
    assert back["cdf"] == [[1.0, 2.0, 3.0, 4.0]] * 2
    assert text == "MemberData(images=float32[4, 16, 16], labels=float32[4], cdf=float32[2, 4])"


def test_family_to_dict(rng):
    n = 60
    fam = F.paper_family(rng.integers(0, 2, n), rng.uniform(20, 90, n), rng.integers(0, 2, n),
                         key=jax.random.key(int(rng.integers(1 << 30))), seeds=(0,))
    back, text = _round_trip(fam)
    assert back["names"] == list(fam.names) and back["seeds"] == np.asarray(fam.seeds).tolist()
    assert back["n_train"] == np.asarray(fam.masks).sum(axis=1).tolist()
    assert text.startswith(f"Family(members={len(fam.names)}, names=[basic,")


def test_quality_report(rng):
    mech = cf.scm.LocationScale()
    params = cf.scm.linear_gaussian_params([2.0], 0.5, 1.5)
    n, k = 8, 3
    x = jnp.asarray(rng.normal(size=n), jnp.float32)
    pa = jnp.asarray(rng.normal(size=(n, 1)), jnp.float32)
    learned = rng.uniform(size=(k, n, 4, 4)).astype(np.float32)
    exact = rng.uniform(size=(k, n, 4, 4)).astype(np.float32)
    p_l, p_e = rng.uniform(size=(k, n)).astype(np.float32), rng.uniform(size=(k, n)).astype(np.float32)
    r = gr.quality_report(mech, params, x, pa, targets=jnp.asarray(rng.normal(size=(k, 1)), jnp.float32),
                         n_times=3, learned=gr.LearnedImages(learned, exact=exact, p_learned=p_l, p_exact=p_e))
    back, text = _round_trip(r)
    assert sorted(back) == ["composition", "decision_agreement", "pixel_mae", "reversibility"]
    np.testing.assert_allclose(back["composition"], 0.0, atol=1e-5)  # exactly invertible mechanism
    assert len(back["reversibility"]) == k
    assert back["pixel_mae"] == float(r.pixel_mae)
    np.testing.assert_allclose(back["pixel_mae"], np.abs(learned - exact).mean(), rtol=1e-5)
    np.testing.assert_allclose(back["decision_agreement"], ((p_l >= 0.5) == (p_e >= 0.5)).mean(), atol=1e-6)
    assert text.startswith("QualityReport(composition_after_1=") and "pixel_mae=" in text
    assert r.relative_gap is None
    gap = gr.QualityReport(effectiveness={"s_accuracy": jnp.float32(0.9)}, effectiveness_ceiling={"s_accuracy": 1.0})
    back, text = _round_trip(gap)
    np.testing.assert_allclose(back["relative_gap"]["s_accuracy"], -0.1, rtol=1e-6)
    assert "effectiveness.s_accuracy=0.9" in text
    with pytest.raises(ValidationError, match="p_exact"):
        gr.quality_report(learned=gr.LearnedImages(p_learned=p_l))
    with pytest.warns(DeprecationWarning, match=r"learned=LearnedImages\(images=\.\.\., exact=\.\.\.\)"):
        old = gr.quality_report(counterfactuals=learned, exact=exact)
    np.testing.assert_allclose(float(old.pixel_mae), float(r.pixel_mae))
