"""The learned counterfactual source of the study (cfjax.study.learned)
and its exact-vs-learned comparison: images against a per-unit loop over the mechanism, parents
against the exact source, the comparison's numbers against numpy on synthetic results."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import cfjax as cf
from cfjax._checks import ValidationError
from cfjax.generative import train as gt
from cfjax.generative.hvae import HVAEConfig
from cfjax.generative.mechanism import ImageHVAE
from cfjax.study import learned as ls
from cfjax import study
from cfjax.study import paper as P
from cfjax.study import comparison as R
from tests.test_shape_buckets import compiles


def test_learned_source_against_unit_loop(rng):
    chest = cf.data.ChestSCM(size=32)
    n = 6
    rec = chest.sample(n, key=int(rng.integers(2**31)))
    mech = ImageHVAE(HVAEConfig(image_size=32, channels=(4, 4, 4), latent_dims=(0, 2, 2)))
    params = mech.init(jax.random.key(int(rng.integers(2**31))), 7)  # sex, age, race one-hot (3), lung, effusion
    fit = gt.GeneratorFit(mechanism=mech, params=params, raw_params=params, history={})
    source = ls.LearnedSource({chest.site: fit}, chunk=4)  # two batches of 3 units
    obs = rec["parents"]
    # the first intervention sets sex and age to their observed values: a null intervention
    do = {"sex": jnp.stack([obs["sex"], jnp.zeros(n, jnp.int32), jnp.ones(n, jnp.int32)], axis=1),  # per unit: (N, K)
          "age": jnp.stack([obs["age"], jnp.full(n, 25.0, jnp.float32), jnp.full(n, 85.0, jnp.float32)], axis=1)}
    key = jax.random.key(int(rng.integers(2**31)))
    out = source(chest, rec, do, key=key, label="fixed")
    exact = study.exact_counterfactuals(chest, rec, do, key=key, label="fixed")
    for v, x in exact["parents"].items():
        np.testing.assert_array_equal(np.asarray(out["parents"][v]), np.asarray(x))
    # effusion held at its observed value
    np.testing.assert_array_equal(np.asarray(out["parents"]["effusion"]),
                                  np.broadcast_to(np.asarray(obs["effusion"])[:, None], (n, 3)))

    def encode(par):  # numpy encoding of the image's parents, in IMAGE_PARENTS order (age on [20, 90] -> [0, 1])
        race = np.eye(3, dtype=np.float32)[np.asarray(par["race"])]
        age = (np.asarray(par["age"], np.float32) - 20.0) / 70.0
        cols = [np.asarray(par["sex"], np.float32)[..., None], age[..., None], race,
                np.asarray(par["lung"], np.float32)[..., None], np.asarray(par["effusion"], np.float32)[..., None]]
        return jnp.asarray(np.concatenate(cols, axis=-1))

    # a Python loop over units and interventions of the one-unit mechanism: abduct once per
    # unit (key: split(fold_in(key, 1), N)[n]), decode under each counterfactual parent vector
    pa, pa_cf = encode(obs), encode(exact["parents"])
    keys = jax.random.split(jax.random.fold_in(key, 1), n)
    abduct, forward = jax.jit(mech.abduct), jax.jit(mech.forward)
    ref = np.zeros((n, 3, 32, 32), np.float32)  # units before interventions
    for i in range(n):
        u = abduct(params, jnp.asarray(rec["image"][i]), pa[i], keys[i])
        for j in range(3):
            ref[i, j] = np.asarray(forward(params, u, pa_cf[i, j]))
    assert out["image"].shape == (n, 3, 32, 32)
    np.testing.assert_allclose(np.asarray(out["image"]), ref, atol=1e-5)
    np.testing.assert_allclose(np.asarray(out["image"][:, 0]), np.asarray(rec["image"]), atol=1e-4)
    assert source.calls[-1]["k"] == 3 and source.calls[-1]["n"] == n
    np.testing.assert_allclose(source.calls[-1]["pixel_mae"], np.abs(ref - np.asarray(exact["image"])).mean(),
                               rtol=1e-4)
    factual = np.asarray(rec["image"])[:, None]
    np.testing.assert_allclose(source.calls[-1]["change_learned"], np.abs(ref - factual).mean(), rtol=1e-4)
    np.testing.assert_allclose(source.calls[-1]["change_exact"], np.abs(np.asarray(exact["image"]) - factual).mean(),
                               rtol=1e-4)
    other = cf.data.ChestSCM(size=32, site=P.SITE_B)
    with pytest.raises(ValidationError, match="chest"):
        source(other, rec, do, key=key, label="fixed")


def test_learned_images_do_not_depend_on_the_batching(rng):
    """Units in batches of 2, N padded to its shape bucket (N = 1; N = 5, just above the bucket
    of 4, padded to 8 with 3 copies of the last unit; N = 8, a bucket: the same program), give
    every unit's images of a loop over units; one program per bucket."""
    mech = ImageHVAE(HVAEConfig(image_size=16, channels=(4, 4, 4), latent_dims=(0, 2, 2)))
    params = mech.init(jax.random.key(int(rng.integers(2**31))), 3)
    abduct, forward = jax.jit(mech.abduct), jax.jit(mech.forward)
    k = 2
    with compiles() as names:
        for n in (1, 5, 8):
            x = jnp.asarray(rng.uniform(size=(n, 16, 16)), jnp.float32)
            pa = jnp.asarray(rng.uniform(size=(n, 3)), jnp.float32)
            pa_cf = jnp.asarray(rng.uniform(size=(n, k, 3)), jnp.float32)
            key = jax.random.key(int(rng.integers(2**31)))
            got = np.asarray(ls.learned_images(mech, params, x, pa, pa_cf, key=key, chunk=2))
            assert got.shape == (n, k, 16, 16)
            keys = jax.random.split(key, n)
            for i in range(n):
                u = abduct(params, x[i], pa[i], keys[i])
                for j in range(k):
                    np.testing.assert_allclose(got[i, j], np.asarray(forward(params, u, pa_cf[i, j])), atol=1e-5)
    assert names.count("jit(_learned_images)") <= 2, names  # buckets 1 and 8


def _setting(rng, names, seeds, orig=None):
    """A synthetic setting result with the fields compare_settings reads."""
    per_seed = {f: rng.uniform(size=(len(names), seeds)) for f in P.RISKS + P.CALIBRATION}
    per_seed.update({f: rng.uniform(size=(len(names), seeds)) for f, _ in P.STABILITY})
    if orig is not None:
        per_seed.update({f: orig["per_seed"][f] for f in P.SOURCE_FREE})
    return {"names": names, "per_seed": per_seed,
            "ctc": {f: float(rng.integers(0, 19)) / 2 for f in per_seed},
            "auc": orig["auc"] if orig is not None else rng.uniform(size=(len(names), seeds)),
            "cf_sex_effect": rng.normal(size=(len(names), seeds)), "cf_age_effect": rng.normal(size=(len(names), seeds)),
            "proposition1": {"var_cf": rng.uniform(size=(len(names), seeds, 3))},
            "correlations": {"sex": {f: {"pearson": float(rng.uniform(-1, 1))} for f, _ in P.STABILITY}},
            "ranking_agreement": {"s_flip~risk_orig": {"kendall_tau": rng.uniform(-1, 1, seeds).tolist()}},
            "label_changed": 0.0}


def test_compare_settings_against_numpy(rng):
    names = list(cf.study.families.PAPER_NAMES)
    exact = _setting(rng, names, 2)
    learned = _setting(rng, names, 2, orig=exact)
    comp = R.compare_settings(exact, learned)
    assert comp["unchanged_max_abs_delta"] == 0.0
    for f in exact["per_seed"]:
        for i, p in enumerate(names):
            e = (exact["per_seed"][f][i, 0] + exact["per_seed"][f][i, 1]) / 2
            v = (learned["per_seed"][f][i, 0] + learned["per_seed"][f][i, 1]) / 2
            t = comp["metrics"][f][p]
            assert t["exact"] == pytest.approx(e) and t["learned"] == pytest.approx(v)
            assert t["delta"] == pytest.approx(v - e)
        assert comp["ctc"][f] == {"exact": exact["ctc"][f], "learned": learned["ctc"][f],
                                  "delta": learned["ctc"][f] - exact["ctc"][f]}
    rel = np.mean([abs(comp["metrics"]["s_var"][p]["delta"]) / abs(comp["metrics"]["s_var"][p]["exact"])
                   for p in names])
    assert R.mean_relative_move(comp, "s_var") == pytest.approx(rel)
    ve = exact["proposition1"]["var_cf"][..., 2].mean()
    assert comp["proposition1_var_cf"]["rare"]["exact"] == pytest.approx(ve)
    learned["per_seed"]["risk_orig"] = learned["per_seed"]["risk_orig"] + 0.25
    assert R.compare_settings(exact, learned)["unchanged_max_abs_delta"] == pytest.approx(0.25)


def test_learned_report_shows_the_numbers(rng):
    names = list(cf.study.families.PAPER_NAMES)
    settings, learned, comps = {}, {}, {}
    for name, _, _ in P.SETTINGS:
        settings[name] = _setting(rng, names, 2)
        learned[name] = _setting(rng, names, 2, orig=settings[name])
        learned[name]["generator"] = {"pixel_mae": 0.01, "pixel_mae_race": 0.02}
        comps[name] = R.compare_settings(settings[name], learned[name])
    results = {"settings": settings, "counterfactual_label": "fixed",
               "learned": {"settings": learned, "comparison": comps,
                           "generator": {"settings": {"generator": {"hvae": {"channels": [4, 4, 4],
                                                                              "latent_dims": [0, 2, 2]},
                                                                     "steps": 3, "batch_size": 8, "ema_decay": 0.99}},
                                         "sites": {s: {"n_train": 10, "seconds": 1.0, "final_loss": 0.5,
                                                       "resumed_from_checkpoint": False} for s in ("A", "B")}}}}
    text = "\n".join(R.learned_report(results))
    t = comps["B"]["metrics"]["risk_cm"]["basic"]
    section = text.split("### Setting B:")[1]
    assert f"| basic | {t['exact']:.3f} | {t['learned']:.3f} | {t['delta']:+.3f} |" in section
    c = comps["A->B"]["ctc"]["s_flip"]
    row = next(line for line in text.splitlines() if line.startswith("| s_flip |"))
    assert f"{c['exact']:.2f} | {c['learned']:.2f} | {c['delta']:+.2f} |" in row.split("|", 10)[-1]
    assert "CTC moves" in text or "No CTC moves" in text
    for name, _, _ in P.SETTINGS:  # the learned half's figures, one pair per setting
        assert f"reliability_learned_{R._slug(name)}.png" in text and f"scatter_learned_{R._slug(name)}.png" in text
