"""Counterfactual quality of an image mechanism (paper 000's appendix, after Monteiro et al.
2023 and Ribeiro et al. 2023), and its error against exact counterfactuals.

- :func:`effectiveness`: do anti-causal predictors ``q(pa | x)``
  (:mod:`cfjax.generative.anticausal`, trained on factual images) recover the intervened
  parents from the counterfactual images? Accuracy for a categorical parent, mean absolute
  error for a continuous one. :func:`effectiveness_ceiling` is the same measure on exact
  counterfactuals: what the predictors themselves allow.
- :func:`composition`: the null intervention (abduct, then predict with the same parents)
  applied ``n`` times in a row should give back the image; the mean L1 distance after each.
- :func:`reversibility`: ``do(pa*)`` then back to ``do(pa)`` should give back the image.
- :func:`pixel_mae`, :func:`decision_agreement`: on a synthetic SCM with exact
  counterfactuals, the learned images' pixel error and whether a fixed classifier decides
  the same on both.

Every measure at once, in one result: :func:`cfjax.generative.report.quality_report`.

The mechanism-level measures take any :class:`cfjax.scm.Mechanism` of an image node (e.g.
:class:`cfjax.generative.ImageHVAE`, or an exact renderer with an inverse) with its
parameters, the images ``(N, H, W)`` and the image's encoded parent inputs ``(N, P)``
(:func:`cfjax.generative.train.parent_inputs` builds them from an SCM's node values).
They are written for one unit and ``vmap``-ed, the repeated cycles a ``lax.scan``, the units
split over ``mesh`` and processed in compiled blocks of ``chunk`` (:func:`cfjax.distributed.map_batch`).
L1 is the mean absolute pixel difference of an image (pixels in [0, 1]).

Arrays follow cfjax's contract (``docs/contract.md``): units before interventions, so
counterfactual images are ``(N, K, H, W)``, their parents ``{name: (N, K)}``, per-unit
intervened parent inputs ``(N, K, P)``, and per-unit results ``(N, K)`` or ``(N, n_times)``.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from cfjax import _checks
from cfjax._core.keys import as_key
from cfjax.distributed import map_batch
from cfjax.generative.anticausal import AntiCausal
from cfjax.generative.parents import predict_parents
from cfjax.scm import Mechanism
from cfjax.typing import ArrayLike, KeyLike, MeshLike, PyTree

__all__ = [
    "effectiveness",
    "effectiveness_ceiling",
    "composition",
    "reversibility",
    "pixel_mae",
    "decision_agreement",
    "relative_gap",
]


# ----------------------------------------------------------------------- checks
def _check_mechanism(mechanism: Any) -> Mechanism:
    if not isinstance(mechanism, Mechanism):
        _checks.fail(
            "mechanism", "a cfjax.scm.Mechanism (e.g. ImageHVAE)", type(mechanism).__name__
        )
    return mechanism


def _check_float_images(name: str, x: Any, ndim: int | None = None) -> jax.Array:
    shape = _checks.shape_of(x)
    if ndim is not None and len(shape) != ndim:
        _checks.fail(name, f"a {ndim}-d array of images", f"shape {shape}")
    _checks.check_nonempty(name, x)
    a = jnp.asarray(x)
    if not jnp.issubdtype(a.dtype, jnp.floating):
        _checks.fail(name, "floating-point values", f"dtype {a.dtype}")
    _checks.check_finite(name, a)
    return a


def _unit_inputs(
    mechanism: Mechanism, images: ArrayLike, parents: ArrayLike
) -> tuple[jax.Array, jax.Array]:
    event = tuple(mechanism.event_shape)
    x = _check_float_images("images", images)
    if x.ndim != 1 + len(event) or tuple(x.shape[1:]) != event:
        _checks.fail(
            "images",
            f"shape (N, {', '.join(map(str, event))}) (the mechanism's event shape)",
            f"shape {tuple(x.shape)}",
        )
    pa = _check_float_images("parents", parents)
    if pa.ndim != 2 or pa.shape[0] != x.shape[0]:
        _checks.fail(
            "parents",
            f"encoded parent inputs of shape (N = {x.shape[0]}, P)",
            f"shape {tuple(pa.shape)}",
        )
    return x, pa.astype(x.dtype)


def _unit_keys(key: KeyLike | None, n: int) -> jax.Array | None:
    """Raw key data ``(N, 2)`` of ``split(key, N)`` (raw: padded and split over devices like
    any array), or None (a mechanism that needs a key raises its own error: ImageHVAE at a
    temperature above 0)."""
    if key is None:
        return None
    return jax.random.key_data(jax.random.split(as_key(key), n))


def _wrap(keys: jax.Array | None) -> jax.Array | None:
    return None if keys is None else jax.random.wrap_key_data(keys)


# ----------------------------------------------------------------------- effectiveness
def _effectiveness_keys(spec) -> list[str]:
    return [h.name + ("_accuracy" if h.kind == "categorical" else "_mae") for h in spec]


def _but_interventions(ndim: int, by_intervention: bool) -> tuple[int, ...] | None:
    """The axes a figure averages over: all (None), or all but the interventions' (axis 1 of
    ``(N, K, ...)``)."""
    return tuple(a for a in range(ndim) if a != 1) if by_intervention else None


@functools.partial(jax.jit, static_argnums=(0, 1))
def _effectiveness(
    spec, by_intervention: bool, pred: Mapping[str, jax.Array], parents: Mapping[str, jax.Array]
) -> dict[str, jax.Array]:
    out = {}
    for h, key in zip(spec, _effectiveness_keys(spec)):
        y = parents[h.name]
        if h.kind == "categorical":
            err = (jnp.argmax(pred[h.name], axis=-1) == y.astype(jnp.int32)).astype(
                pred[h.name].dtype
            )
        else:
            err = jnp.abs(pred[h.name] - y.astype(pred[h.name].dtype))
        out[key] = jnp.mean(err, axis=_but_interventions(err.ndim, by_intervention))
    return out


def effectiveness(
    predictors: AntiCausal,
    images: ArrayLike,
    parents: Mapping[str, Any],
    *,
    heads: tuple[str, ...] | None = None,
    by_intervention: bool = False,
    chunk: int = 256,
) -> dict[str, jax.Array]:
    """How well anti-causal predictors recover the (counterfactual) parents from images.

    Args:
      predictors: :func:`cfjax.generative.anticausal.train_anticausal`'s result, trained on
        factual images.
      images: ``(..., H, W)``, e.g. counterfactuals ``(N, K, H, W)``.
      parents: ``{name: (...)}``: the parents the images were generated with (class indices,
        values in the parent's units), for every head measured, e.g. ``(N, K)``.
      heads: names of the heads to measure (default: every head of the predictors).
      by_intervention: average over all axes but the second (images ``(N, K, H, W)``: one
        figure per intervention, ``(K,)``) instead of over everything.
      chunk: images per compiled network call.

    Returns:
      ``{name + "_accuracy"}`` (fraction of most-probable classes equal to the label) for a
      categorical head, ``{name + "_mae"}`` (mean absolute error of the predicted mean) for a
      Gaussian one: scalars, or ``(K,)`` with ``by_intervention``.

    Example:
      >>> from cfjax.generative import anticausal as ac
      >>> spec = (ac.Head("s", "categorical", 2),)
      >>> x = jnp.linspace(0, 1, 4 * 64).reshape(4, 8, 8)
      >>> config = ac.AntiCausalConfig(steps=2, batch_size=2, features=(4,), hidden=4)
      >>> fit = ac.train_anticausal(x, {"s": jnp.array([0, 0, 1, 1])}, spec, config, key=0, progress=False)
      >>> e = effectiveness(fit, x.reshape(2, 2, 8, 8), {"s": jnp.array([[0, 0], [1, 1]])}, by_intervention=True)
      >>> e["s_accuracy"].shape
      (2,)
    """
    if not isinstance(predictors, AntiCausal):
        _checks.fail(
            "predictors", "an AntiCausal (train_anticausal's result)", type(predictors).__name__
        )
    spec = predictors.spec
    names = [h.name for h in spec]
    if heads is None:
        heads = tuple(names)
    if not isinstance(heads, (tuple, list)) or not heads or any(h not in names for h in heads):
        _checks.fail("heads", f"a non-empty tuple of head names among {names}", repr(heads))
    spec = tuple(h for h in spec if h.name in heads)
    x = _check_float_images("images", images)
    if x.ndim < 3:
        _checks.fail(
            "images", "images (..., H, W) with at least one leading axis", f"shape {tuple(x.shape)}"
        )
    lead = tuple(x.shape[:-2])
    if by_intervention and len(lead) < 2:
        _checks.fail(
            "images", "images (N, K, H, W) with by_intervention", f"shape {tuple(x.shape)}"
        )
    if not isinstance(parents, Mapping):
        _checks.fail("parents", "a mapping {name: (...)}", type(parents).__name__)
    ys = {}
    for h in spec:
        if h.name not in parents:
            _checks.fail("parents", f"values of head {h.name!r}", f"keys {sorted(parents)}")
        y = jnp.asarray(parents[h.name])
        if tuple(y.shape) != lead:
            _checks.fail(
                "parents",
                f"shape {lead} for {h.name!r} (one value per image)",
                f"shape {tuple(y.shape)}",
            )
        _checks.check_finite("parents", y)
        ys[h.name] = y
    pred = predict_parents(predictors, x, chunk=chunk)
    return _effectiveness(spec, bool(by_intervention), {h.name: pred[h.name] for h in spec}, ys)


def effectiveness_ceiling(
    predictors: AntiCausal,
    exact_images: Any,
    parents: Mapping[str, Any],
    *,
    heads: tuple[str, ...] | None = None,
    by_intervention: bool = False,
    chunk: int = 256,
) -> dict[str, jax.Array]:
    """:func:`effectiveness` on *exact* counterfactual images (a synthetic SCM's): the best
    figure the anti-causal predictors allow, against which a learned mechanism's
    effectiveness is read (:func:`~cfjax.generative.quality.relative_gap`)."""
    return effectiveness(
        predictors, exact_images, parents, heads=heads, by_intervention=by_intervention, chunk=chunk
    )


def relative_gap(learned: Mapping[str, Any], ceiling: Mapping[str, Any]) -> dict[str, jax.Array]:
    """``(learned − ceiling) / |ceiling|`` for every key of both (e.g. :func:`effectiveness`
    on learned vs exact counterfactuals): ``−0.05`` is 5% lower (an accuracy 5% worse, an MAE
    5% better).

    Example:
      >>> {k: round(float(v), 3) for k, v in relative_gap({"s_accuracy": 0.9}, {"s_accuracy": 1.0}).items()}
      {'s_accuracy': -0.1}
    """
    keys = sorted(set(learned) & set(ceiling))
    if not keys:
        _checks.fail("ceiling", "a mapping sharing keys with `learned`", f"keys {sorted(ceiling)}")
    return {
        k: (jnp.asarray(learned[k]) - jnp.asarray(ceiling[k])) / jnp.abs(jnp.asarray(ceiling[k]))
        for k in keys
    }


# ----------------------------------------------------------------------- composition, reversibility
def _l1(a: jax.Array, b: jax.Array) -> jax.Array:
    return jnp.mean(jnp.abs(a - b))


@dataclasses.dataclass(frozen=True)
class _Composition:
    """A batch of units' composition L1s, ``(B, n_times)`` (hashable: compiled once per
    mechanism, ``n_times`` and shapes by :func:`cfjax.distributed.map_batch`)."""

    mechanism: Mechanism
    n_times: int

    def __call__(
        self, images: jax.Array, parents: jax.Array, keys: jax.Array | None, params: PyTree
    ) -> jax.Array:
        mech = self.mechanism

        def unit(x, pa, k):
            def cycle(y, t):
                kt = None if k is None else jax.random.fold_in(k, t)
                y = mech.forward(params, mech.abduct(params, y, pa, kt), pa)
                return y, _l1(y, x)

            return lax.scan(cycle, x, jnp.arange(self.n_times))[1]

        if keys is None:
            return jax.vmap(lambda x, pa: unit(x, pa, None))(images, parents)
        return jax.vmap(unit)(images, parents, _wrap(keys))


def composition(
    mechanism: Mechanism,
    params: PyTree,
    images: ArrayLike,
    parents: ArrayLike,
    *,
    n_times: int = 10,
    key: KeyLike | None = None,
    per_unit: bool = False,
    chunk: int = 256,
    mesh: MeshLike = None,
) -> jax.Array:
    """Composition: the L1 distance between each image and the image after the null
    intervention applied ``1, 2, …, n_times`` times in a row (each time: abduct the noise of the
    current image, predict with the same parents). An exact mechanism gives 0 every time; a
    lossy one drifts.

    Args:
      mechanism: the image node's :class:`cfjax.scm.Mechanism` (e.g. ``ImageHVAE``).
      params: its parameters.
      images: ``(N, H, W)`` (the mechanism's event shape after ``N``).
      parents: ``(N, P)`` encoded parent inputs, as the SCM feeds the mechanism
        (:func:`cfjax.generative.train.parent_inputs`).
      n_times: the number of null interventions.
      key: PRNG key for stochastic abduction, a typed key, raw key data or an int seed (unit
        ``i``'s ``t``-th abduction uses ``fold_in(split(key, N)[i], t)``); None for a
        deterministic one.
      per_unit: return every unit's L1 instead of their mean.
      chunk: units per compiled block (on each device).
      mesh: devices the units are split over (:func:`cfjax.distributed.as_mesh`: None, a
        count, devices or a one-axis Mesh); the result does not depend on it.

    Returns:
      ``(n_times,)`` mean L1 after ``1 … n_times`` null interventions (entry ``t − 1`` after
      ``t``), or ``(N, n_times)`` with ``per_unit``.

    Example:
      >>> import cfjax as cf
      >>> mech = cf.scm.LocationScale()  # exactly invertible: composition is the identity
      >>> p = cf.scm.linear_gaussian_params([2.0], 0.5, 1.5)
      >>> composition(mech, p, jnp.array([1.0, 2.0]), jnp.ones((2, 1)), n_times=3).tolist()
      [0.0, 0.0, 0.0]
    """
    mechanism = _check_mechanism(mechanism)
    n_times = _checks.check_positive_int("n_times", n_times)
    chunk = _checks.check_positive_int("chunk", chunk)
    x, pa = _unit_inputs(mechanism, images, parents)
    out = map_batch(
        _Composition(mechanism, n_times),
        x,
        pa,
        _unit_keys(key, x.shape[0]),
        shared=(params,),
        mesh=mesh,
        chunk_size=chunk,
    )
    return out if per_unit else out.mean(axis=0)


@dataclasses.dataclass(frozen=True)
class _Reversibility:
    """A batch of units' reversibility L1s, ``(B, K)`` (hashable, as :class:`_Composition`)."""

    mechanism: Mechanism

    def __call__(
        self,
        images: jax.Array,
        parents: jax.Array,
        targets: jax.Array,
        keys: jax.Array | None,
        params: PyTree,
    ) -> jax.Array:
        mech = self.mechanism

        def unit(x, pa, pa_star, k):  # pa_star (K, P)
            k0 = None if k is None else jax.random.fold_in(k, 0)
            u = mech.abduct(params, x, pa, k0)

            def one(ps, j):
                x_star = mech.forward(params, u, ps)
                kj = None if k is None else jax.random.fold_in(k, j + 1)
                back = mech.forward(params, mech.abduct(params, x_star, ps, kj), pa)
                return _l1(back, x)

            return jax.vmap(one)(pa_star, jnp.arange(pa_star.shape[0]))

        if keys is None:
            return jax.vmap(lambda x, pa, ps: unit(x, pa, ps, None))(images, parents, targets)
        return jax.vmap(unit)(images, parents, targets, _wrap(keys))


def reversibility(
    mechanism: Mechanism,
    params: PyTree,
    images: ArrayLike,
    parents: ArrayLike,
    targets: ArrayLike,
    *,
    key: KeyLike | None = None,
    per_unit: bool = False,
    chunk: int = 256,
    mesh: MeshLike = None,
) -> jax.Array:
    """Reversibility: the L1 distance between each image and the image after ``do(pa*)``
    then ``do(pa)`` back (abduct from ``(x, pa)``, predict ``x*`` with ``pa*``, abduct from
    ``(x*, pa*)``, predict with ``pa``), for each of K interventions.

    Args:
      mechanism, params, images, parents, chunk, mesh: as in :func:`composition`.
      targets: the intervened parents' encoded inputs, ``(N, K, P)`` per unit (or ``(K, P)``,
        the same for every unit).
      key: PRNG key for stochastic abduction, a typed key, raw key data or an int seed (unit
        ``i`` uses ``split(key, N)[i]``: its first abduction ``fold_in(·, 0)``, the one after
        intervention ``j`` ``fold_in(·, j + 1)``).
      per_unit: return every unit's L1 instead of the mean over units.

    Returns:
      ``(K,)`` mean L1 per intervention, or ``(N, K)`` with ``per_unit``.

    Example:
      >>> import cfjax as cf
      >>> mech, p = cf.scm.LocationScale(), cf.scm.linear_gaussian_params([2.0], 0.5, 1.5)
      >>> reversibility(mech, p, jnp.array([1.0, 2.0]), jnp.ones((2, 1)), jnp.array([[0.0], [4.0]])).tolist()
      [0.0, 0.0]
    """
    mechanism = _check_mechanism(mechanism)
    chunk = _checks.check_positive_int("chunk", chunk)
    x, pa = _unit_inputs(mechanism, images, parents)
    t = _check_float_images("targets", targets).astype(x.dtype)
    n, p = pa.shape
    if t.ndim == 2 and t.shape[1] == p:
        t = jnp.broadcast_to(t[None], (n,) + t.shape)
    if t.ndim != 3 or t.shape[0] != n or t.shape[2] != p:
        _checks.fail(
            "targets",
            f"intervened parent inputs of shape ({n}, K, {p}) or (K, {p})",
            f"shape {tuple(t.shape)}",
        )
    out = map_batch(
        _Reversibility(mechanism),
        x,
        pa,
        t,
        _unit_keys(key, n),
        shared=(params,),
        mesh=mesh,
        chunk_size=chunk,
    )
    return out if per_unit else out.mean(axis=0)


# ----------------------------------------------------------------------- against exact counterfactuals
@functools.partial(jax.jit, static_argnums=(0,))
def _mae(by_intervention: bool, a: jax.Array, b: jax.Array) -> jax.Array:
    err = jnp.abs(a - b)
    return jnp.mean(err, axis=_but_interventions(err.ndim, by_intervention))


def pixel_mae(learned: ArrayLike, exact: ArrayLike, *, by_intervention: bool = False) -> jax.Array:
    """Mean absolute pixel error of learned counterfactual images against exact ones.

    Args:
      learned, exact: images of one shape, e.g. ``(N, K, H, W)``.
      by_intervention: average over all axes but the second (``(K,)``).

    Example:
      >>> float(pixel_mae(jnp.zeros((2, 3, 4, 4)), jnp.full((2, 3, 4, 4), 0.25)))
      0.25
      >>> pixel_mae(jnp.zeros((2, 3, 4, 4)), jnp.full((2, 3, 4, 4), 0.25), by_intervention=True).shape
      (3,)
    """
    a = _check_float_images("learned", learned)
    b = _check_float_images("exact", exact)
    if a.shape != b.shape:
        _checks.fail(
            "exact", f"shape {tuple(a.shape)} (that of `learned`)", f"shape {tuple(b.shape)}"
        )
    if by_intervention and a.ndim < 2:
        _checks.fail(
            "learned", "at least 2 axes (N, K, ...) with by_intervention", f"shape {tuple(a.shape)}"
        )
    return _mae(bool(by_intervention), a, b.astype(a.dtype))


@functools.partial(jax.jit, static_argnums=(0,))
def _agreement(
    by_intervention: bool, a: jax.Array, b: jax.Array, threshold: jax.Array
) -> jax.Array:
    same = ((a >= threshold) == (b >= threshold)).astype(a.dtype)
    return jnp.mean(same, axis=_but_interventions(same.ndim, by_intervention))


def decision_agreement(
    learned: ArrayLike, exact: ArrayLike, threshold: float = 0.5, *, by_intervention: bool = False
) -> jax.Array:
    """The fraction of units on which a fixed classifier makes the same decision
    (``p ≥ threshold``) on the learned as on the exact counterfactual image.

    Args:
      learned, exact: the classifier's positive-class probabilities (or scores) on learned
        and on exact counterfactuals, one shape, e.g. ``(N, K)``.
      threshold: the decision threshold.
      by_intervention: one figure per entry of the second axis (``(N, K)``: ``(K,)``).

    Example:
      >>> float(decision_agreement(jnp.array([0.2, 0.6, 0.9, 0.4]), jnp.array([0.1, 0.7, 0.3, 0.5])))
      0.5
    """
    a = _check_float_images("learned", learned)
    b = _check_float_images("exact", exact)
    if a.shape != b.shape:
        _checks.fail(
            "exact", f"shape {tuple(a.shape)} (that of `learned`)", f"shape {tuple(b.shape)}"
        )
    if (
        isinstance(threshold, bool)
        or not isinstance(threshold, (int, float, np.floating, np.integer))
        or not math.isfinite(threshold)
    ):
        _checks.fail("threshold", "a finite number", repr(threshold))
    if by_intervention and a.ndim < 2:
        _checks.fail(
            "learned", "at least 2 axes (N, K, ...) with by_intervention", f"shape {tuple(a.shape)}"
        )
    return _agreement(bool(by_intervention), a, b.astype(a.dtype), jnp.asarray(threshold, a.dtype))
