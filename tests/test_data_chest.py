"""The synthetic chest-radiograph SCM: determinism, exact counterfactuals, and the splits."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import cfjax as cf

D = cf.data


@pytest.fixture(scope="module")
def chest_records():
    chest = D.ChestSCM(size=48)
    return chest, chest.sample(jax.random.key(0), 300)


def test_sampling_is_deterministic_by_seed():
    chest = D.ChestSCM(size=32)
    a, b = chest.sample(jax.random.key(5), 20), chest.sample(jax.random.key(5), 20)
    c = chest.sample(jax.random.key(6), 20)
    np.testing.assert_array_equal(a["image"], b["image"])
    for v in D.PARENTS:
        np.testing.assert_array_equal(a["parents"][v], b["parents"][v])
    assert not np.array_equal(a["image"], c["image"])


def test_images_are_grayscale_in_unit_range_at_every_size():
    for size in (32, 64, 192):
        rec = D.ChestSCM(size=size).sample(jax.random.key(1), 3)
        assert rec["image"].shape == (3, size, size)
        assert float(rec["image"].min()) >= 0 and float(rec["image"].max()) <= 1
    with pytest.raises(ValueError, match="size"):
        D.ChestSCM(size=16)


def test_null_intervention_re_renders_the_identical_image(chest_records):
    chest, rec = chest_records
    out = chest.counterfactuals(rec, {}, jax.random.key(1))
    np.testing.assert_array_equal(out["image"][0], rec["image"])
    same_sex = chest.counterfactuals(rec, {"sex": np.asarray(rec["parents"]["sex"])[None]}, jax.random.key(2))
    np.testing.assert_allclose(same_sex["image"][0], rec["image"], atol=1e-5)


def test_sex_acts_only_through_sex_and_lung_size_not_pose(chest_records):
    chest, rec = chest_records
    flipped = 1 - np.asarray(rec["parents"]["sex"])
    out = chest.counterfactuals(rec, {"sex": flipped[None]}, jax.random.key(3))
    p = rec["parents"]
    # Parents: age, race and effusion keep their values; lung size moves with sex.
    for v in ("age", "race", "effusion"):
        np.testing.assert_array_equal(out["parents"][v][0], p[v])
    assert not np.allclose(out["parents"]["lung"][0], p["lung"])
    # The image is exactly the renderer applied to the new parents and the same noise.
    again = chest.render({v: x[0] for v, x in out["parents"].items()}, rec["noise"])
    np.testing.assert_array_equal(out["image"][0], again)
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
    moved = np.abs(spine_column(out["image"][0]) - spine_column(rec["image"]))
    assert moved.max() < 0.35, moved.max()
    # Holding lung size at its factual value, sex alone still changes the image (habitus).
    hold = chest.counterfactuals(rec, {"sex": flipped[None], "lung": np.asarray(p["lung"])[None]}, jax.random.key(4))
    assert float(jnp.mean(jnp.abs(hold["image"][0] - rec["image"]))) > 1e-3


def test_counterfactuals_over_the_paper_grid(chest_records):
    chest, rec = chest_records
    do, q = cf.scm.intervention_grid({"sex": [0, 1], "age": np.linspace(20, 90, 8)})
    out = chest.counterfactuals(rec, do, jax.random.key(5))
    assert out["image"].shape == (16, 300, 48, 48)
    np.testing.assert_array_equal(out["parents"]["sex"][:, 0], do["sex"])
    np.testing.assert_array_equal(out["parents"]["race"], np.broadcast_to(rec["parents"]["race"], (16, 300)))
    # Bone density falls with age: the spine is dimmer at 90 than at 20.
    centre = out["image"][:, :, 10:38, 22:26].mean(axis=(1, 2, 3))
    assert float(centre[7]) < float(centre[0]) and float(centre[15]) < float(centre[8])


def test_effusion_is_visible_at_the_lung_bases():
    chest = D.ChestSCM(size=64)
    rec = chest.sample(jax.random.key(7), 200)
    healthy = chest.counterfactuals(rec, {"effusion": np.array([0, 1])}, jax.random.key(8))["image"]
    diff = np.asarray(healthy[1] - healthy[0]).mean(axis=0)
    lower, upper = diff[40:56].mean(), diff[8:24].mean()
    assert lower > 0.02 and lower > 5 * abs(upper)


def test_second_site_changes_acquisition_only():
    a = D.ChestSCM(size=32)
    b = D.ChestSCM(size=32, site=D.Acquisition(gain=0.8, gamma=1.3, noise=0.08, offset=0.03))
    ra, rb = a.sample(jax.random.key(9), 10), b.sample(jax.random.key(9), 10)
    for v in D.PARENTS:
        np.testing.assert_array_equal(ra["parents"][v], rb["parents"][v])
    assert float(jnp.mean(jnp.abs(ra["image"] - rb["image"]))) > 0.02


def test_balanced_split_meets_its_constraints_exactly():
    chest = D.ChestSCM(size=32, prevalence=0.3)
    p = chest.sample(jax.random.key(10), 20_000)["parents"]
    sex, age, y = (np.asarray(p[v]) for v in ("sex", "age", "effusion"))
    idx = D.balanced_test_split(sex, age, y, per_cell=120, prevalence=0.25, seed=3)
    assert len(idx) == len(np.unique(idx)) == 720
    groups = D.age_group(age[idx])
    assert (sex[idx] == 0).sum() == (sex[idx] == 1).sum() == 360
    for s in (0, 1):
        for g in (0, 1, 2):
            cell = (sex[idx] == s) & (groups == g)
            assert cell.sum() == 120 and y[idx][cell].sum() == 30
    with pytest.raises(ValueError, match="age group"):
        D.balanced_test_split(sex, age, y, per_cell=10_000, prevalence=0.5, seed=0)


def test_age_groups_edges():
    np.testing.assert_array_equal(D.age_group([20, 44.9, 45, 65, 65.1, 90]), [0, 0, 1, 1, 2, 2])


@pytest.mark.parametrize("kind", ["sex", "age"])
def test_biased_training_sets_drop_with_the_spec_probabilities(kind):
    n = 200_000
    rng = np.random.default_rng(0)
    sex, age, y = rng.integers(0, 2, n), rng.uniform(20, 90, n), rng.integers(0, 2, n)
    keep = np.asarray(D.biased_training_mask(jax.random.key(0), kind, 0.9, sex, age, y))
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
        D.biased_training_mask(jax.random.key(0), "race", 0.9, sex, age, y)


def test_datasets_are_seeded_balanced_and_biased():
    chest = D.ChestSCM(size=32, prevalence=0.3)
    a = chest.datasets(1, n_train=3000, n_val=100, test_per_cell=20, bias=("sex", 0.9))
    b = chest.datasets(1, n_train=3000, n_val=100, test_per_cell=20, bias=("sex", 0.9))
    np.testing.assert_array_equal(a["test"]["image"], b["test"]["image"])
    assert a["validation"]["image"].shape == (100, 32, 32) and a["test"]["image"].shape == (120, 32, 32)
    t = a["test"]["parents"]
    assert int(t["sex"].sum()) == 60 and int(t["effusion"].sum()) == 60  # prevalence 0.5 per cell
    tr = a["train"]["parents"]
    assert a["train"]["dropped"] + len(tr["sex"]) == 3000 and a["train"]["dropped"] > 0
    male_sick = float(jnp.mean((tr["sex"] == 0) & (tr["effusion"] == 1)))
    female_sick = float(jnp.mean((tr["sex"] == 1) & (tr["effusion"] == 1)))
    assert female_sick > 3 * male_sick  # the sex-biased set ties disease to female
