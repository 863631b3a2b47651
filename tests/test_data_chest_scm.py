"""The chest-radiograph model as one SCM with an image node: its counterfactuals are those of
ChestSCM.counterfactuals (label follows), chunked or not, and the image noise must be given."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from cfjax._checks import ValidationError
from cfjax.data.chest import IMAGE_PARENTS, PARENTS, ChestRenderer, ChestSCM
from cfjax.data.render import render, sample_image_noise

N = 5


def assert_same_image(actual, desired):
    """Renders of the same parents and noise in batches of other shapes: equal up to a few
    ulp (XLA does not promise identical rounding across batch shapes)."""
    np.testing.assert_allclose(np.asarray(actual), np.asarray(desired), rtol=0, atol=1e-6)


@pytest.fixture(scope="module")
def chest():
    return ChestSCM(size=32)


def records(chest, rng):
    rec = chest.sample(N, key=jax.random.key(int(rng.integers(2**31))))
    return rec, {**rec["parents"], "image": rec["image"]}


def test_the_image_scm_extends_the_parent_scm(chest):
    scm = chest.image_scm
    assert scm.nodes == chest.scm.nodes + ("image",)
    assert scm.mechanisms[:-1] == chest.scm.mechanisms
    assert scm.graph.parents_of("image") == IMAGE_PARENTS and set(IMAGE_PARENTS) == set(PARENTS)
    assert scm.mechanism("image") == ChestRenderer(32, chest.site, chest.effusion_size)
    assert chest.image_params()["image"] == {} and set(chest.image_params()) == set(scm.nodes)
    assert scm.init(key=jax.random.key(0))["image"] == {}
    out = scm.sample(chest.image_params(), 3, key=jax.random.key(1))
    assert out["image"].shape == (3, 32, 32) and out["age"].shape == (3,)


def test_the_renderer_gets_the_parent_values_exactly(chest, rng):
    """No encoding stands between the parents and the image: the age in years reaches the
    renderer bit for bit (a rescaled age decoded again could be off by an ulp)."""
    scm = chest.image_scm
    n = 64
    vals = {"sex": jnp.asarray(rng.integers(0, 2, n), jnp.int32),
            "age": jnp.asarray(rng.uniform(20, 90, n), jnp.float32),
            "race": jnp.asarray(rng.integers(0, 3, n), jnp.int32),
            "lung": jnp.asarray(rng.normal(1.0, 0.1, n), jnp.float32),
            "effusion": jnp.asarray(rng.integers(0, 2, n), jnp.int32)}
    pa = jax.vmap(lambda v: scm.parent_vector("image", v))(vals)
    assert pa.shape == (n, 5)
    for j, v in enumerate(IMAGE_PARENTS):
        np.testing.assert_array_equal(np.asarray(pa[:, j]), np.asarray(vals[v], np.float32))
    u = sample_image_noise(jax.random.key(int(rng.integers(2**31))))
    one = {v: x[0] for v, x in vals.items()}
    got = jax.jit(ChestRenderer(32).forward)({}, u, pa[0])
    want = jax.jit(lambda *a: render(*a, size=32))(*(one[v] for v in IMAGE_PARENTS), u)
    assert_same_image(got, want)


def test_counterfactual_images_equal_chest_counterfactuals(chest, rng):
    rec, data = records(chest, rng)
    scm, params = chest.image_scm, chest.image_params()
    key = jax.random.key(int(rng.integers(2**31)))
    ages = rng.uniform(20, 90, 3).astype(np.float32)
    for do in ({"sex": np.array([0, 1], np.int32)}, {"age": ages}):
        out = scm.counterfactual(params, data, do, noise={"image": rec["noise"]}, key=key)
        ref = chest.counterfactuals(rec, do, key=key, label="follows")
        k = len(next(iter(do.values())))
        assert out["image"].shape == (N, k, 32, 32)
        for v in PARENTS:  # two compiled programs: equal to float32 rounding (1 ulp seen)
            np.testing.assert_allclose(out[v], ref["parents"][v], rtol=1e-6, atol=1e-6, err_msg=v)
        assert_same_image(out["image"], ref["image"])
    # in chunks of 2 (the last padded): the same counterfactuals
    chunked = scm.counterfactual(params, data, do, noise={"image": rec["noise"]}, key=key, chunk_size=2)
    for v in scm.nodes:
        assert_same_image(chunked[v], out[v])
    # the null intervention keeps the observed images
    null = scm.counterfactual(params, data, {}, noise={"image": rec["noise"]}, key=key)
    np.testing.assert_array_equal(null["image"][:, 0], rec["image"])


def test_the_image_noise_must_be_given(chest, rng):
    rec, data = records(chest, rng)
    scm, params = chest.image_scm, chest.image_params()
    key = jax.random.key(0)
    msg = r"noise=\{'image': records\['noise'\]\}"
    with pytest.raises(ValidationError, match=msg):
        scm.counterfactual(params, data, {"sex": np.array([1], np.int32)}, key=key)
    with pytest.raises(ValidationError, match=msg):
        scm.abduct(params, data, key=key)
    with pytest.raises(TypeError, match="no density"):
        scm.log_prob(params, data)
    # the parents alone are scored and fitted as in the parent SCM
    p, losses, _ = scm.fit(data, key=key, steps=2, params=params, nodes=["lung"])
    assert losses.shape == (2,) and p["image"] == {}
