"""The synthetic chest-radiograph SCM: determinism, exact counterfactuals, and the splits."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import cfjax as cf
from cfjax.data.render import LATERALITY, effusion_height, laterality

D = cf.data


def assert_same_image(actual, desired):
    """Renders of the same parents and noise: equal up to float rounding. XLA does not promise
    identical rounding across batch shapes (a unit rendered in a batch of 45 or in a padded
    chunk of 16 may differ in the last bit on some CPUs), so this allows a few ulp, far below
    any change of a parent or of the noise."""
    np.testing.assert_allclose(np.asarray(actual), np.asarray(desired), rtol=0, atol=1e-6)


@pytest.fixture(scope="module")
def chest_records():
    chest = D.ChestSCM(size=48)
    return chest, chest.sample(300, key=jax.random.key(0))


def test_sampling_is_deterministic_by_seed():
    chest = D.ChestSCM(size=32)
    a, b = chest.sample(20, key=jax.random.key(5)), chest.sample(20, key=jax.random.key(5))
    c = chest.sample(20, key=jax.random.key(6))
    np.testing.assert_array_equal(a["image"], b["image"])
    for v in D.chest.PARENTS:
        np.testing.assert_array_equal(a["parents"][v], b["parents"][v])
    assert not np.array_equal(a["image"], c["image"])


def test_images_are_grayscale_in_unit_range_at_every_size():
    for size in (32, 64, 192):
        rec = D.ChestSCM(size=size).sample(3, key=jax.random.key(1))
        assert rec["image"].shape == (3, size, size)
        assert float(rec["image"].min()) >= 0 and float(rec["image"].max()) <= 1
    with pytest.raises(ValueError, match="size"):
        D.ChestSCM(size=16)


def test_null_intervention_re_renders_the_identical_image(chest_records):
    chest, rec = chest_records
    out = chest.counterfactuals(rec, {}, key=jax.random.key(1))
    assert_same_image(out["image"][:, 0], rec["image"])
    same_sex = chest.counterfactuals(rec, {"sex": np.asarray(rec["parents"]["sex"])[:, None]}, key=jax.random.key(2))
    np.testing.assert_allclose(same_sex["image"][:, 0], rec["image"], atol=1e-5)


def test_sex_acts_only_through_sex_and_lung_size_not_pose(chest_records):
    chest, rec = chest_records
    flipped = 1 - np.asarray(rec["parents"]["sex"])
    out = chest.counterfactuals(rec, {"sex": flipped[:, None]}, key=jax.random.key(3))
    p = rec["parents"]
    # Parents: age, race and effusion keep their values; lung size moves with sex.
    for v in ("age", "race", "effusion"):
        np.testing.assert_array_equal(out["parents"][v][:, 0], p[v])
    assert not np.allclose(out["parents"]["lung"][:, 0], p["lung"])
    # The image is exactly the renderer applied to the new parents and the same noise.
    again = chest.render({v: x[:, 0] for v, x in out["parents"].items()}, rec["noise"])
    assert_same_image(out["image"][:, 0], again)
    # Pose is unchanged: the spine (a narrow bright ridge, found on the high-passed column
    # profile of the upper chest) stays where it was.
    def spine_column(img):
        profile = np.asarray(img)[:, 4:20, :].mean(axis=1)
        smooth = np.stack([np.convolve(p, np.ones(9) / 9, mode="same") for p in profile])
        ridge = np.clip(profile - smooth, 0, None)
        peak = np.argmax(ridge, axis=-1)
        cols = peak[:, None] + np.arange(-2, 3)[None, :]
        w = np.take_along_axis(ridge, cols, axis=-1)
        return (w * cols).sum(-1) / w.sum(-1)  # sub-pixel centroid of the ridge
    moved = np.abs(spine_column(out["image"][:, 0]) - spine_column(rec["image"]))
    assert moved.max() < 0.35, moved.max()
    # Holding lung size at its factual value, sex alone still changes the image (habitus).
    hold = chest.counterfactuals(rec, {"sex": flipped[:, None], "lung": np.asarray(p["lung"])[:, None]},
                                 key=jax.random.key(4))
    assert float(jnp.mean(jnp.abs(hold["image"][:, 0] - rec["image"]))) > 1e-3


def test_counterfactuals_over_the_paper_grid(chest_records):
    chest, rec = chest_records
    do, q = cf.scm.intervention_grid({"sex": [0, 1], "age": np.linspace(20, 90, 8)})
    out = chest.counterfactuals(rec, do, key=jax.random.key(5))
    assert out["image"].shape == (300, 16, 48, 48)
    np.testing.assert_array_equal(out["parents"]["sex"][0], do["sex"])
    np.testing.assert_array_equal(out["parents"]["race"], np.broadcast_to(rec["parents"]["race"][:, None], (300, 16)))
    # Bone density falls with age: the spine is dimmer at 90 than at 20.
    centre = out["image"][:, :, 10:38, 22:26].mean(axis=(0, 2, 3))
    assert float(centre[7]) < float(centre[0]) and float(centre[15]) < float(centre[8])


def test_effusion_is_visible_at_the_lung_bases():
    chest = D.ChestSCM(size=64)
    rec = chest.sample(200, key=jax.random.key(7))
    healthy = chest.counterfactuals(rec, {"effusion": np.array([0, 1])}, key=jax.random.key(8))["image"]
    diff = np.asarray(healthy[:, 1] - healthy[:, 0])
    assert diff.min() >= -1e-6  # fluid only adds opacity
    mean = diff.mean(axis=0)
    lower, upper = mean[36:56].mean(), mean[4:24].mean()
    assert lower > 0.002 and upper < 0.02 * lower, (lower, upper)
    # Severity is skewed: many effusions are small (hard to see), a few large.
    per_unit = diff.sum(axis=(1, 2))
    assert np.median(per_unit) < 0.7 * per_unit.mean() and np.quantile(per_unit, 0.9) > 4 * np.median(per_unit)


def test_second_site_changes_acquisition_only():
    a = D.ChestSCM(size=32)
    b = D.ChestSCM(size=32, site=D.Acquisition(gain=0.8, gamma=1.3, noise=0.08, offset=0.03))
    ra, rb = a.sample(10, key=jax.random.key(9)), b.sample(10, key=jax.random.key(9))
    for v in D.chest.PARENTS:
        np.testing.assert_array_equal(ra["parents"][v], rb["parents"][v])
    assert float(jnp.mean(jnp.abs(ra["image"] - rb["image"]))) > 0.02


def test_balanced_split_meets_its_constraints_exactly():
    chest = D.ChestSCM(size=32, prevalence=0.3)
    p = chest.sample(20_000, key=jax.random.key(10))["parents"]
    sex, age, y = (np.asarray(p[v]) for v in ("sex", "age", "effusion"))
    idx = cf.study.splits.balanced_test_split(sex, age, y, per_cell=120, prevalence=0.25, key=3)
    assert len(idx) == len(np.unique(idx)) == 720
    groups = cf.study.splits.age_group(age[idx])
    assert (sex[idx] == 0).sum() == (sex[idx] == 1).sum() == 360
    for s in (0, 1):
        for g in (0, 1, 2):
            cell = (sex[idx] == s) & (groups == g)
            assert cell.sum() == 120 and y[idx][cell].sum() == 30
    with pytest.raises(ValueError, match="age group"):
        cf.study.splits.balanced_test_split(sex, age, y, per_cell=10_000, prevalence=0.5, key=0)


def test_study_splits_take_keys_and_int_seeds_alike():
    rng = np.random.default_rng(0)
    sex, age, y = rng.integers(0, 2, 3000), rng.uniform(20, 90, 3000), rng.integers(0, 2, 3000)
    by_int = cf.study.splits.balanced_test_split(sex, age, y, per_cell=20, prevalence=0.5, key=3)
    for key in (jax.random.key(3), jax.random.PRNGKey(3)):
        np.testing.assert_array_equal(cf.study.splits.balanced_test_split(sex, age, y, per_cell=20, prevalence=0.5,
                                                                   key=key), by_int)
        np.testing.assert_array_equal(jax.random.key_data(cf.study.families.datasets_bias_key(key=key)),
                                      jax.random.key_data(cf.study.families.datasets_bias_key(key=3)))
    with pytest.raises(cf.ValidationError, match="`key`"):
        cf.study.splits.balanced_test_split(sex, age, y, per_cell=20, prevalence=0.5, key=-3)


def test_age_groups_edges():
    np.testing.assert_array_equal(cf.study.splits.age_group([20, 44.9, 45, 65, 65.1, 90]), [0, 0, 1, 1, 2, 2])


@pytest.mark.parametrize("kind", ["sex", "age"])
def test_biased_training_sets_drop_with_the_spec_probabilities(kind):
    n = 200_000
    rng = np.random.default_rng(0)
    sex, age, y = rng.integers(0, 2, n), rng.uniform(20, 90, n), rng.integers(0, 2, n)
    keep = np.asarray(cf.study.splits.biased_training_mask(kind, 0.9, sex, age, y, key=jax.random.key(0)))
    if kind == "sex":
        drop = 0.9 * (((sex == 0) & (y == 1)) | ((sex == 1) & (y == 0)))
    else:
        a = (age - 20) / 70
        drop = 0.9 * (1 - (a * y + (1 - a) * (1 - y)))
    # Compare kept fractions within bins of the drop probability.
    bins = np.digitize(drop, np.linspace(0, 0.9, 10))
    for b in np.unique(bins):
        members = bins == b
        assert keep[members].mean() == pytest.approx(1 - drop[members].mean(), abs=0.02)
    with pytest.raises(ValueError, match="kind"):
        cf.study.splits.biased_training_mask("race", 0.9, sex, age, y, key=jax.random.key(0))


def test_datasets_are_seeded_balanced_and_biased():
    chest = D.ChestSCM(size=32, prevalence=0.3)
    a = cf.study.datasets(chest, key=1, n_train=3000, n_val=100, test_per_cell=20, bias=("sex", 0.9))
    b = cf.study.datasets(chest, key=1, n_train=3000, n_val=100, test_per_cell=20, bias=("sex", 0.9))
    np.testing.assert_array_equal(a["test"]["image"], b["test"]["image"])
    assert a["validation"]["image"].shape == (100, 32, 32) and a["test"]["image"].shape == (120, 32, 32)
    t = a["test"]["parents"]
    assert int(t["sex"].sum()) == 60 and int(t["effusion"].sum()) == 60  # prevalence 0.5 per cell
    tr = a["train"]["parents"]
    assert a["train"]["dropped"] + len(tr["sex"]) == 3000 and a["train"]["dropped"] > 0
    male_sick = float(jnp.mean((tr["sex"] == 0) & (tr["effusion"] == 1)))
    female_sick = float(jnp.mean((tr["sex"] == 1) & (tr["effusion"] == 1)))
    assert female_sick > 3 * male_sick  # the sex-biased set ties disease to female


# ----------------------------------------------------------------------------- background
def upsample_bilinear(t, size):
    """Independent reference for the texture field: bilinear, half-pixel centres, edges held."""
    g = t.shape[0]
    c = np.clip((np.arange(size) + 0.5) * g / size - 0.5, 0, g - 1)
    i0 = np.floor(c).astype(int)
    i1, f = np.minimum(i0 + 1, g - 1), c - i0
    rows = t[i0] * (1 - f)[:, None] + t[i1] * f[:, None]
    return rows[:, i0] * (1 - f)[None, :] + rows[:, i1] * f[None, :]


def random_parents(rng, n):
    return {"sex": rng.integers(0, 2, n), "age": rng.uniform(20, 90, n).astype(np.float32),
            "race": rng.integers(0, 3, n), "lung": rng.uniform(0.7, 1.3, n).astype(np.float32),
            "effusion": rng.integers(0, 2, n)}


SITES = [D.Acquisition(), D.Acquisition(gain=0.8, gamma=1.3, noise=0.08, offset=0.03),
         D.Acquisition(gain=1.15, gamma=0.85, noise=0.02, offset=0.0)]


def test_background_outside_the_body_depends_on_no_parent(rng):
    size, n = int(rng.choice([32, 48, 64])), 16
    site = SITES[rng.integers(len(SITES))]  # a few static settings: each one compiles the renderer
    chest = D.ChestSCM(size=size, site=site)
    noise = jax.vmap(D.sample_image_noise)(jax.random.split(jax.random.key(int(rng.integers(2**31))), n))
    # Background: outside the body of either sex (the male body contains the female one).
    male, female = (np.asarray(jax.vmap(lambda u, s=s: D.body_mask(s, u, size))(noise)) for s in (0, 1))
    assert np.all(male[female > 0] > 0)
    outside = male == 0
    assert outside.mean() > 0.05, outside.mean()  # a real background, not a few corner pixels
    pa, pb = random_parents(rng, n), random_parents(rng, n)
    ia = np.asarray(chest.render(pa, noise))
    # Every parent alone, then all of them: the background never moves, the body does.
    for change in [[v] for v in pa] + [list(pa)]:
        ib = np.asarray(chest.render({v: (pb[v] if v in change else pa[v]) for v in pa}, noise))
        np.testing.assert_array_equal(ib[outside], ia[outside], err_msg=f"background depends on {change}")
    assert np.abs(ib - ia)[~outside].mean() > 1e-3
    # The background is the device alone: texture noise and the acquisition (numpy reference).
    u = jax.tree.map(lambda a: np.asarray(a, np.float64), noise)
    texture = np.stack([upsample_bilinear(t, size) for t in u.texture])
    gain = site.gain * (1 + 0.05 * u.contrast[:, 0])[:, None, None]
    gamma = site.gamma * np.exp(0.05 * u.contrast[:, 1])[:, None, None]
    want = np.clip(gain * np.clip(site.noise * texture + site.offset, 0, 1), 0, 1) ** gamma
    np.testing.assert_allclose(ia[outside], np.broadcast_to(want, ia.shape)[outside], atol=2e-5)


# ----------------------------------------------------------------------------- rendering in chunks
def test_render_does_not_depend_on_the_chunking(rng, monkeypatch):
    size, n = 32, int(rng.choice([37, 45]))  # 3 chunks of 16, the last padded
    chest = D.ChestSCM(size=size)
    parents = random_parents(rng, n)
    noise = jax.vmap(D.sample_image_noise)(jax.random.split(jax.random.key(int(rng.integers(2**31))), n))
    whole = np.asarray(D.chest._render_many(*(parents[v] for v in ("sex", "age", "race", "lung", "effusion")),
                                            noise, size, chest.site, chest.effusion_size))
    monkeypatch.setattr(D.chest, "_PIXELS_PER_CALL", 16 * size * size)  # chunks of 16 units
    assert_same_image(np.asarray(chest.render(parents, noise)), whole)  # padded last chunk
    for m in (1, int(rng.integers(2, 16)), 16):
        part = chest.render({v: x[:m] for v, x in parents.items()}, jax.tree.map(lambda a: a[:m], noise))
        assert_same_image(np.asarray(part), whole[:m])


# ----------------------------------------------------------------------------- datasets
@functools.partial(jax.jit, static_argnums=(6, 7, 8))
def render_all(sex, age, race, lung, effusion, noise, size, site, effusion_size):
    """Reference renderer: one vmap over every unit, no chunks."""
    one = functools.partial(D.render, size=size, site=site, effusion_size=effusion_size)
    return jax.vmap(one)(sex, age, race, lung, effusion, noise)


def full_pool_datasets(chest, seed, n_train, n_val, test_per_cell, bias, pool_factor=20):
    """Reference: the construction that renders every unit of every pool, then keeps some."""
    def sample(key, n):
        k_parents, k_image = jax.random.split(key)
        parents = chest.scm.sample(chest.params(), n, key=k_parents)
        noise = jax.vmap(D.sample_image_noise)(jax.random.split(k_image, n))
        image = render_all(*(parents[v] for v in ("sex", "age", "race", "lung", "effusion")), noise,
                           chest.size, chest.site, chest.effusion_size)
        return {"parents": parents, "noise": noise, "image": image}

    def take(rec, idx):
        return {"parents": {v: x[idx] for v, x in rec["parents"].items()},
                "noise": jax.tree.map(lambda a: a[idx], rec["noise"]), "image": rec["image"][idx]}

    keys = jax.random.split(jax.random.key(seed), 4)
    train, val = sample(keys[0], n_train), sample(keys[1], n_val)
    pool = sample(keys[2], pool_factor * 6 * test_per_cell)
    p = pool["parents"]
    idx = cf.study.splits.balanced_test_split(np.asarray(p["sex"]), np.asarray(p["age"]), np.asarray(p["effusion"]),
                                test_per_cell, 0.5, key=seed)
    out = {"train": train, "validation": val, "test": take(pool, idx)}
    if bias is not None:
        t = train["parents"]
        keep = np.asarray(cf.study.splits.biased_training_mask(bias[0], bias[1], t["sex"], t["age"], t["effusion"],
                                                        key=keys[3]))
        out["train"] = take(train, np.flatnonzero(keep))
    return out


def test_datasets_equal_rendering_the_whole_pool_then_choosing(rng):
    chest = D.ChestSCM(size=32, prevalence=float(rng.uniform(0.25, 0.4)))
    seed = int(rng.integers(2**31))
    bias = [None, ("sex", float(rng.uniform(0.5, 0.95))), ("age", float(rng.uniform(0.5, 0.95)))][rng.integers(3)]
    got = cf.study.datasets(chest, key=seed, n_train=400, n_val=24, test_per_cell=6, bias=bias)
    want = full_pool_datasets(chest, seed, 400, 24, 6, bias)
    for split in ("train", "validation", "test"):
        for v in D.chest.PARENTS:
            np.testing.assert_array_equal(got[split]["parents"][v], want[split]["parents"][v])
        for a, b in zip(got[split]["noise"], want[split]["noise"]):
            np.testing.assert_array_equal(a, b)
        np.testing.assert_allclose(got[split]["image"], want[split]["image"], rtol=0, atol=1e-6)
    if bias is not None:
        assert got["train"]["dropped"] == 400 - len(want["train"]["image"])


def test_datasets_render_only_the_units_they_keep(monkeypatch):
    chest = D.ChestSCM(size=32)
    rendered = []  # units handed to the renderer, per call (every image goes through _chunked)
    inner = D.chest._chunked

    def counting(fn, args, *static):
        rendered.append(int(np.shape(args[0])[0]))
        return inner(fn, args, *static)

    monkeypatch.setattr(D.chest, "_chunked", counting)
    for pool_factor in (20, 60):
        rendered.clear()
        out = cf.study.datasets(chest, key=3, n_train=300, n_val=20, test_per_cell=5, bias=("sex", 0.9), pool_factor=pool_factor)
        kept = [len(out[s]["image"]) for s in ("train", "validation", "test")]
        # The old construction also rendered the 300 - kept dropped training units and the
        # whole 600- or 1800-unit test pool.
        assert sorted(rendered) == sorted(kept), (rendered, kept)
        assert kept[0] + out["train"]["dropped"] == 300 and kept[2] == 30


# ----------------------------------------------------------------------------- effusion and labels
render_one = jax.jit(D.render, static_argnames=("size",))  # one unit (eager rendering is slow)

def test_effusion_height_and_laterality_follow_their_closed_forms(rng):
    from scipy.special import expit, logit
    from scipy.stats import norm

    size_knob = float(rng.uniform(0.05, 0.5))
    z = rng.normal(size=1000).astype(np.float32)
    got = np.asarray(effusion_height(z, size_knob))
    np.testing.assert_allclose(got, 0.7 * expit(logit(size_knob / 0.7) + z), rtol=1e-5, atol=1e-6)
    assert float(effusion_height(0.0, size_knob)) == pytest.approx(size_knob, rel=1e-5)
    # Laterality: left below the normal's 0.4 quantile, right above its 0.6 quantile, else both.
    want = np.where(z < norm.ppf(0.4), 0, np.where(z > norm.ppf(0.6), 1, 2))
    np.testing.assert_array_equal(np.asarray(laterality(z)), want)
    assert LATERALITY == ("left", "right", "both")


def test_fluid_stays_on_its_side_of_the_midline(rng):
    size = int(rng.choice([32, 48]))
    u = D.sample_image_noise(jax.random.key(int(rng.integers(2**31))))
    u = u._replace(pose=jnp.zeros(3), severity=jnp.float32(rng.uniform(0.5, 2.0)))  # midline = centre column
    sex, age, race = int(rng.integers(2)), float(rng.uniform(20, 90)), int(rng.integers(3))
    lung = float(rng.uniform(0.85, 1.15))
    none = np.asarray(render_one(sex, age, race, lung, 0, u, size))
    half = size // 2
    changed = {}
    for name, code in (("left", -1.0), ("right", 1.0), ("both", 0.0)):
        img = np.asarray(render_one(sex, age, race, lung, 1, u._replace(laterality=jnp.float32(code)), size))
        d = img - none
        changed[name] = (np.abs(d[:, :half]).sum(), np.abs(d[:, half:]).sum())
    # The patient's left is the image's right (PA view): only that half changes, and vice versa.
    assert changed["left"][0] == 0 and changed["left"][1] > 0.05
    assert changed["right"][1] == 0 and changed["right"][0] > 0.05
    assert changed["both"][0] > 0.05 and changed["both"][1] > 0.05
    # A negative unit's image does not depend on its effusion noise.
    other = u._replace(severity=jnp.float32(-2.0), laterality=jnp.float32(-1.0))
    np.testing.assert_array_equal(np.asarray(render_one(sex, age, race, lung, 0, other, size)), none)


def test_counterfactuals_keep_severity_and_laterality(rng):
    chest = D.ChestSCM(size=32)
    rec = chest.sample(24, key=jax.random.key(int(rng.integers(2**31))))
    p = rec["parents"]
    # Under the factual parents (an explicit do(sex, age) to their own values) every image is
    # the factual one: the severity and laterality noise is the unit's own, not redrawn.
    same = chest.counterfactuals(rec, {"sex": np.asarray(p["sex"])[:, None], "age": np.asarray(p["age"])[:, None]},
                                 key=jax.random.key(1), label=str(rng.choice(["fixed", "follows"])))
    np.testing.assert_allclose(same["image"][:, 0], rec["image"], atol=1e-5)
    # Under new ages, each image is the renderer applied to the new parents and the same noise.
    do = {"age": rng.uniform(20, 90, 3).astype(np.float32)}
    out = chest.counterfactuals(rec, do, key=jax.random.key(2))
    for k in range(3):
        again = chest.render({v: x[:, k] for v, x in out["parents"].items()}, rec["noise"])
        assert_same_image(out["image"][:, k], again)
    # A positive unit's image moves with its severity noise: the noise is used, not decorative.
    sick = int(np.flatnonzero(np.asarray(p["effusion"]) == 1)[0])
    u = jax.tree.map(lambda a: a[sick], rec["noise"])
    args = [p[v][sick] for v in ("sex", "age", "race", "lung", "effusion")]
    bigger = render_one(*args, u._replace(severity=u.severity + 2), 32)
    assert float(jnp.abs(bigger - render_one(*args, u, 32)).sum()) > 0.05


def test_label_fixed_holds_effusion_and_follows_matches_the_parent_scm(rng):
    chest = D.ChestSCM(size=32)
    rec = chest.sample(32, key=jax.random.key(int(rng.integers(2**31))))
    do, _ = cf.scm.intervention_grid({"sex": [0, 1], "age": np.linspace(20, 90, 4)})
    key = jax.random.key(int(rng.integers(2**31)))
    fixed = chest.counterfactuals(rec, do, key=key)  # the default
    follows = chest.counterfactuals(rec, do, key=key, label="follows")
    want = chest.scm.counterfactual(chest.params(), rec["parents"], do, key=key)
    y = np.asarray(rec["parents"]["effusion"])
    for v in D.chest.PARENTS:
        np.testing.assert_array_equal(follows["parents"][v], want[v])
        if v != "effusion":  # sex, age set; race kept; lung follows its parents in both modes
            np.testing.assert_array_equal(fixed["parents"][v], want[v])
    np.testing.assert_array_equal(fixed["parents"]["effusion"], np.broadcast_to(y[:, None], (32, 8)))
    assert (np.asarray(follows["parents"]["effusion"]) != y[:, None]).any()  # do(age) moves some labels
    # The images differ exactly where the labels do.
    moved = np.asarray(follows["parents"]["effusion"]) != y[:, None]
    same = np.abs(np.asarray(follows["image"]) - np.asarray(fixed["image"])).sum(axis=(2, 3)) == 0
    np.testing.assert_array_equal(same, ~moved)
    # An explicit intervention on effusion is applied in both modes.
    both = chest.counterfactuals(rec, {"effusion": np.array([0, 1])}, key=key)
    np.testing.assert_array_equal(both["parents"]["effusion"], np.repeat(np.array([[0, 1]]), 32, axis=0))


def test_bad_label_and_knob_raise_validation_errors():
    chest = D.ChestSCM(size=32)
    rec = chest.sample(8, key=jax.random.key(0))
    with pytest.raises(cf.ValidationError, match="label"):
        chest.counterfactuals(rec, {"age": np.array([30.0])}, key=jax.random.key(1), label="observed")
    for bad in (0.0, 0.7, -0.1, float("nan"), "0.2", None, True):
        with pytest.raises(cf.ValidationError, match="effusion_size"):
            D.ChestSCM(size=32, effusion_size=bad)
    assert D.ChestSCM(size=32, effusion_size=np.float32(0.3)).effusion_size == pytest.approx(0.3)


def test_the_difficulty_knob_scales_the_fluid():
    rec = D.ChestSCM(size=32).sample(64, key=jax.random.key(3))
    amount = []
    for knob in (0.08, 0.3):  # each value compiles the renderer once (a static setting)
        chest = D.ChestSCM(size=32, effusion_size=knob)
        img = chest.counterfactuals(rec, {"effusion": np.array([0, 1])}, key=jax.random.key(4))["image"]
        amount.append(float((img[:, 1] - img[:, 0]).sum()))
    assert 0 < amount[0] < 0.5 * amount[1]
