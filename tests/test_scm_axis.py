"""The labelled intervention axis: labels, entries and weights of concatenated do and shift
groups, checked against hand-built expectations and against single-entry counterfactuals;
shifts given as Python sequences."""

import jax
import numpy as np
import pytest

from cfjax.metrics import evaluate
from cfjax.scm import LocationScale, SCM, Shift, intervention_grid, linear_gaussian_params
from cfjax.scm.interventions import InterventionAxis, intervention_axis
from cfjax._checks import ValidationError

PARENTS = {"a": [], "b": ["a"], "c": ["a", "b"]}


def model():
    scm = SCM(PARENTS, {v: LocationScale() for v in PARENTS})
    params = {"a": linear_gaussian_params([], 1.0, 2.0), "b": linear_gaussian_params([0.5], -1.0, 1.0),
              "c": linear_gaussian_params([1.5, -0.7], 0.2, 0.5)}
    return scm, params


def groups_of(rng):
    """A weighted grid (do on two nodes), a mixed do + shift group and the null intervention,
    with their hand-written labels, entries and within-group weights."""
    a_vals = np.round(rng.normal(size=2), 1) + 0.0  # + 0.0: no negative zeros
    b_vals = np.round(rng.normal(size=3), 1) + 0.0
    wa = rng.uniform(0.5, 2.0, size=2)
    shift_c = np.round(rng.normal(size=2) * 5, 1) + 0.0
    do_b = np.round(rng.normal(size=2), 1) + 0.0
    grid = intervention_grid({"a": a_vals, "b": b_vals}, weights={"a": wa, "b": np.ones(3)})
    groups = [grid, {"b": do_b, "c": Shift(list(shift_c))}, {}]
    labels, entries, within = [], [], []
    for i in range(2):
        for j in range(3):
            labels.append(f"do(a={a_vals[i]:g}, b={b_vals[j]:g})")
            entries.append({"a": ("do", float(a_vals[i])), "b": ("do", float(b_vals[j]))})
            within.append(wa[i] / wa.sum() / 3)
    for k in range(2):
        sign = "+" if shift_c[k] >= 0 else "-"
        labels.append(f"do(b={do_b[k]:g}) shift(c={sign}{abs(shift_c[k]):g})")
        entries.append({"b": ("do", float(do_b[k])), "c": ("shift", float(shift_c[k]))})
    labels.append("null")
    entries.append({})
    return groups, labels, entries, np.array(within), [6, 2, 1]


def test_axis_labels_entries_and_weights_match_a_hand_built_description(rng):
    groups, labels, entries, within, sizes = groups_of(rng)
    axis = intervention_axis(groups)
    assert isinstance(axis, InterventionAxis) and len(axis) == 9
    assert axis.labels == tuple(labels)
    assert axis.entries == tuple(entries)
    np.testing.assert_array_equal(axis.group_of, [0] * 6 + [1] * 2 + [2])
    # default: every group gets 1/3, spread by its own weights (uniform without them)
    want = np.concatenate([within / 3, [1 / 6, 1 / 6], [1 / 3]])
    np.testing.assert_allclose(axis.weights, want, rtol=1e-12)
    assert axis.weights.dtype == np.float64 and abs(axis.weights.sum() - 1) < 1e-12
    # "entries": each group weighs K_g / K
    by_entries = intervention_axis(groups, "entries")
    np.testing.assert_allclose(by_entries.weights, np.concatenate([within * 6 / 9, [1 / 9, 1 / 9], [1 / 9]]),
                               rtol=1e-12)
    masses = rng.uniform(0.1, 1.0, size=3)
    explicit = intervention_axis(groups, masses)
    m = masses / masses.sum()
    np.testing.assert_allclose(explicit.weights, np.concatenate([within * m[0], [m[1] / 2] * 2, [m[2]]]), rtol=1e-12)
    d = axis.to_dict()
    assert d["labels"] == labels and d["group"] == [0] * 6 + [1] * 2 + [2]
    assert d["entries"][6] == {"b": {"kind": "do", "value": entries[6]["b"][1]},
                               "c": {"kind": "shift", "value": entries[6]["c"][1]}}
    assert axis == intervention_axis(groups) and hash(axis) == hash(intervention_axis(groups))
    assert axis != by_entries


def test_counterfactual_axis_describes_each_entry(rng):
    scm, params = model()
    data = {k: np.asarray(v) for k, v in scm.sample(params, 7, key=jax.random.key(int(rng.integers(1 << 30)))).items()}
    groups, labels, entries, _, _ = groups_of(rng)
    out, axis = scm.counterfactual(params, data, groups), scm.intervention_axis(groups)
    assert axis == intervention_axis(groups) and out["c"].shape == (7, 9)
    # each entry alone, rebuilt from the axis's description, gives the same counterfactual
    for k, entry in enumerate(axis.entries):
        alone = {v: (Shift([value]) if kind == "shift" else np.array([value], np.float32))
                 for v, (kind, value) in entry.items()}
        one = scm.counterfactual(params, data, alone)
        for v in scm.nodes:
            np.testing.assert_allclose(out[v][:, k], one[v][:, 0], rtol=1e-6, atol=1e-6, err_msg=f"{v} entry {k}")
    # a grid pair equals its interventions alone; per-unit values are labelled as such
    grid = groups[0]
    np.testing.assert_array_equal(scm.counterfactual(params, data, grid)["c"],
                                  scm.counterfactual(params, data, grid[0])["c"])
    per_unit = {"a": rng.normal(size=(7, 2)).astype(np.float32)}
    scm.counterfactual(params, data, per_unit, chunk_size=3)
    axis = scm.intervention_axis(per_unit)
    assert axis.labels == ("do(a=<per unit>)",) * 2 and axis.entries[0] == {"a": ("do", None)}
    with pytest.raises(ValidationError, match="weights"):
        scm.counterfactual(params, data, (grid[0], np.full(6, 0.5)))


def test_axis_weights_feed_evaluate(rng):
    groups, _, _, within, _ = groups_of(rng)
    axis = intervention_axis(groups)
    n, k = 40, len(axis)
    p_cf = rng.uniform(size=(n, k)).astype(np.float32)
    p_obs = rng.uniform(size=n).astype(np.float32)
    y = rng.integers(0, 2, n)
    hand = np.concatenate([within / 3, [1 / 6, 1 / 6], [1 / 3]]).astype(np.float32)
    got = evaluate(p_obs, p_cf, y, weights=axis.weights)
    want = evaluate(p_obs, p_cf, y, weights=hand / hand.sum())
    for field in ("risk_cm", "risk_ie", "s_var", "s_flip", "score_shift"):
        np.testing.assert_allclose(getattr(got, field), getattr(want, field), rtol=1e-5, atol=1e-7, err_msg=field)
    # the weighted mean prediction, by hand
    p_bar = (p_cf.astype(np.float64) * axis.weights).sum(1)
    np.testing.assert_allclose(float(got.score_shift), np.abs(p_obs - p_bar).mean(), rtol=1e-4)


def test_grid_describe_flag_keeps_the_old_return(rng):
    vals = np.round(rng.normal(size=3), 2)
    do, q = intervention_grid({"a": vals})
    do2, q2, axis = intervention_grid({"a": vals}, describe=True)
    np.testing.assert_array_equal(do["a"], do2["a"])
    np.testing.assert_array_equal(q, q2)
    assert axis.labels == tuple(f"do(a={v + 0.0:g})" for v in vals)  # a rounded -0.0 reads as 0
    np.testing.assert_array_equal(axis.weights, q)


def test_shift_from_a_list_equals_shift_from_an_array(rng):
    scm, params = model()
    data = scm.sample(params, 5, key=jax.random.key(int(rng.integers(1 << 30))))
    delta = rng.normal(size=3).astype(np.float32)
    per_unit = rng.normal(size=(5, 2)).astype(np.float32)
    for given, array in ((delta.tolist(), delta), (per_unit.tolist(), per_unit)):
        a = scm.counterfactual(params, data, {"b": Shift(given)})
        b = scm.counterfactual(params, data, {"b": Shift(array)})
        c = jax.jit(lambda p, d: scm.counterfactual(p, d, {"b": Shift(given)}))(params, data)
        for v in scm.nodes:
            np.testing.assert_array_equal(a[v], b[v])
            np.testing.assert_allclose(c[v], b[v], rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(np.asarray(scm.counterfactual(params, data, {"b": Shift(tuple(delta))})["b"]),
                               np.asarray(data["b"])[:, None] + delta[None, :], rtol=1e-6, atol=1e-6)


def test_shift_rejects_non_numeric_values():
    for bad in (["a", "b"], "ab", [None, 1.0], [object()]):
        with pytest.raises(ValidationError, match="`delta`"):
            Shift(bad)
    with pytest.raises(ValidationError, match="group_weights"):
        intervention_axis([{"a": np.zeros(2)}, {}], [1.0])


def test_a_shift_on_a_bounded_node_checks_the_shifted_values_not_the_deltas(rng):
    from cfjax.scm import Spline
    scm = SCM({"age": [], "y": ["age"]}, {"age": Spline(low=20.0, high=90.0), "y": LocationScale()})
    params = scm.init(key=jax.random.key(0))
    age = rng.uniform(40.0, 60.0, 12)
    age[0] = 59.0  # shifted by 35, at least one unit leaves [20, 90]
    data = {"age": age, "y": rng.normal(size=12)}
    deltas = np.array([-10.0, 10.0])  # outside [20, 90] as values, inside as shifts of 40..60
    out = scm.counterfactual(params, data, {"age": Shift(deltas)}, key=jax.random.key(1))
    np.testing.assert_allclose(out["age"], age[:, None] + deltas[None, :], rtol=1e-6)
    with pytest.raises(ValidationError, match=r"interventions\['age'\]`: node 'age' has support"):
        scm.counterfactual(params, data, {"age": Shift([35.0])}, key=jax.random.key(1))
