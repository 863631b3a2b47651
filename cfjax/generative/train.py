"""Training the learned image mechanism (:class:`~cfjax.generative.mechanism.ImageHVAE`) of a
deep SCM: the conditional HVAE fitted by maximising its evidence lower bound on SCM data, the
image's parents fed exactly as :class:`cfjax.scm.SCM` feeds them to the node's mechanism.

The step is a pure function (:func:`train_step`): a minibatch drawn with the step's key
``fold_in(data_key, step)``, the weighted negative ELBO per pixel (KL warm-up, free bits), one
clipped AdamW update with warm-up and cosine decay, and the EMA of the parameters. :func:`train`
runs it with cfjax's one training loop (:func:`cfjax._core.training.run`: compiled chunks, a
progress bar, the NaN guard, an orbax checkpoint after every chunk); a run resumed from its
latest checkpoint ends with the same parameters as an uninterrupted one.

Semi-supervised training (paper 000, appendix; Ribeiro et al. 2023): a parent label may be
missing per unit (``mask``); the anti-causal predictors ``q(pa | x)``
(:mod:`cfjax.generative.anticausal`) impute it, and each unit's loss is weighted by the product
over its imputed discrete parents of ``1 − H(q)/log C``.

Counterfactual regularisation (paper 000, "Counterfactual Regularisation"): with
``config.cf_weight > 0`` and frozen anti-causal predictors (``regulariser``), every step also
intervenes on one random parent of each unit, forms its counterfactual image
``x̃ = forward(abduct(x, pa), pa*)`` through the HVAE (differentiable) and adds the predictors'
loss of ``q(pa | x̃)`` against ``pa*`` (:func:`counterfactual_loss`): the image has to carry
the intervened parent's new value and keep the others.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import os
from typing import Any, Mapping, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import struct
from jax import lax

from cfjax import _checks
from cfjax._core import checkpoint as _ckpt
from cfjax._core import training as _training
from cfjax._core.keys import as_key
from cfjax._errors import TrainingError
from cfjax.generative import anticausal as _ac
from cfjax.generative.anticausal import _check_images
from cfjax.generative.hvae import HVAE, HVAEConfig, gaussian_log_prob
from cfjax.generative.mechanism import ImageHVAE
from cfjax.scm import SCM

__all__ = ["GeneratorConfig", "GeneratorData", "GeneratorState", "GeneratorFit", "TrainingError", "parent_inputs",
           "impute_parents", "generator_loss", "init_state", "train_step", "train", "Regulariser",
           "make_regulariser", "counterfactual_targets", "counterfactual_loss"]


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool)


def _is_int(v: Any) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, bool)


@dataclasses.dataclass(frozen=True)
class GeneratorConfig:
    """Optimisation settings of :func:`train` (frozen and hashable: a static argument).

    Attributes:
      hvae: the network (:class:`~cfjax.generative.hvae.HVAEConfig`).
      steps: optimisation steps.
      batch_size: units per step, drawn uniformly with replacement.
      learning_rate: peak learning rate of AdamW, reached after ``warmup`` linear steps from 0,
        then cosine decay to ``learning_rate / 100`` at ``steps``.
      weight_decay: AdamW's decoupled weight decay.
      warmup: linear warm-up steps of the learning rate (``0 ≤ warmup < steps``).
      clip_norm: gradients are clipped to this global norm before AdamW (``> 0``; ``inf``: no
        clipping).
      ema_decay: the largest decay ``d ∈ [0, 1)`` of the parameters' exponential moving
        average, ``ema_{t+1} = d_t·ema_t + (1 − d_t)·θ_{t+1}`` from ``ema_0 = θ_0``, with the
        decay warmed up as ``d_t = min(d, (1 + t) / (10 + t))`` (:meth:`ema_decay_at`): a
        constant 0.999 would keep 74% of the random initial parameters after 300 steps and 22%
        after 1,500, and the fitted (EMA) generator would reconstruct badly however well
        training went.
      kl_warmup: the KL weight is ``min(1, t / kl_warmup)`` at step ``t`` (0: always 1).
      free_bits: nats per latent channel: level ``l`` (``c_l`` channels) is penalised only for
        its batch-mean KL above ``free_bits·c_l`` nats per image (0: plain ELBO).
      chunk_steps: steps per compiled chunk (one progress update and one checkpoint each).
      temperature: posterior temperature of the trained mechanism's abduction (``≥ 0``).
      cf_weight: weight of the counterfactual regulariser (:func:`counterfactual_loss`, in nats
        per unit, added to the per-pixel objective); ``0`` (the default): off, training is
        exactly the plain ELBO's. ``> 0`` needs ``train(..., regulariser=...)``.
      cf_warmup: the regulariser's weight is ``cf_weight·min(1, t / cf_warmup)`` at step ``t``
        (0: always ``cf_weight``).

    Example:
      >>> c = GeneratorConfig(steps=100, warmup=10, chunk_steps=40)
      >>> c.chunks, float(c.kl_weight(jnp.int32(250)))
      (3, 0.5)
      >>> GeneratorConfig(ema_decay=1.0)
      Traceback (most recent call last):
      ...
      cfjax._errors.ValidationError: `ema_decay`: expected a decay in [0, 1), got 1.0.
    """

    hvae: HVAEConfig = HVAEConfig()
    steps: int = 2000
    batch_size: int = 32
    learning_rate: float = 1e-3
    weight_decay: float = 1e-4
    warmup: int = 100
    clip_norm: float = 1.0
    ema_decay: float = 0.999
    kl_warmup: int = 500
    free_bits: float = 0.0
    chunk_steps: int = 50
    temperature: float = 1.0
    cf_weight: float = 0.0
    cf_warmup: int = 0

    def __post_init__(self):
        if not isinstance(self.hvae, HVAEConfig):
            _checks.fail("hvae", "an HVAEConfig", repr(self.hvae))
        for name in ("steps", "batch_size", "chunk_steps"):
            _checks.check_positive_int(name, getattr(self, name))
        if not _is_int(self.warmup) or not 0 <= self.warmup < self.steps:
            _checks.fail("warmup", f"an integer in [0, steps = {self.steps})", repr(self.warmup))
        for name in ("kl_warmup", "cf_warmup"):
            if not _is_int(getattr(self, name)) or getattr(self, name) < 0:
                _checks.fail(name, "an integer >= 0", repr(getattr(self, name)))
        lr = self.learning_rate
        if not _is_number(lr) or not math.isfinite(lr) or lr <= 0:
            _checks.fail("learning_rate", "a finite learning rate > 0", repr(lr))
        for name in ("weight_decay", "free_bits", "temperature", "cf_weight"):
            v = getattr(self, name)
            if not _is_number(v) or not math.isfinite(v) or v < 0:
                _checks.fail(name, "a finite value >= 0", repr(v))
        if not _is_number(self.clip_norm) or math.isnan(self.clip_norm) or self.clip_norm <= 0:
            _checks.fail("clip_norm", "a gradient norm > 0 (inf: no clipping)", repr(self.clip_norm))
        if not _is_number(self.ema_decay) or not 0 <= self.ema_decay < 1:
            _checks.fail("ema_decay", "a decay in [0, 1)", repr(self.ema_decay))

    @property
    def chunk_length(self) -> int:
        """Steps per compiled chunk, ``min(chunk_steps, steps)``."""
        return min(self.chunk_steps, self.steps)

    @property
    def chunks(self) -> int:
        """Chunks of a full run (the last padded with steps that change nothing)."""
        return -(-self.steps // self.chunk_length)

    def optimizer(self) -> optax.GradientTransformation:
        """Global-norm clipping, then AdamW with linear warm-up and cosine decay."""
        schedule = optax.warmup_cosine_decay_schedule(
            0.0, self.learning_rate, self.warmup, self.steps, self.learning_rate / 100)
        clip = (optax.identity() if math.isinf(self.clip_norm)
                else optax.clip_by_global_norm(self.clip_norm))
        return optax.chain(clip, optax.adamw(schedule, weight_decay=self.weight_decay))

    def ema_decay_at(self, step: jax.Array) -> jax.Array:
        """The EMA decay of the update after ``step`` steps (traceable),
        ``min(ema_decay, (1 + step) / (10 + step))``."""
        t = jnp.asarray(step).astype(jnp.result_type(float))
        return jnp.minimum(jnp.asarray(self.ema_decay, t.dtype), (1 + t) / (10 + t))

    def kl_weight(self, step: jax.Array) -> jax.Array:
        """The KL weight at ``step`` (traceable), ``min(1, step / kl_warmup)``."""
        t = jnp.asarray(step).astype(jnp.result_type(float))
        if self.kl_warmup == 0:
            return jnp.ones_like(t)
        return jnp.minimum(t / self.kl_warmup, 1.0)

    def cf_weight_at(self, step: jax.Array) -> jax.Array:
        """The counterfactual regulariser's weight at ``step`` (traceable),
        ``cf_weight·min(1, step / cf_warmup)``."""
        t = jnp.asarray(step).astype(jnp.result_type(float))
        if self.cf_warmup == 0:
            return jnp.full_like(t, self.cf_weight)
        return self.cf_weight * jnp.minimum(t / self.cf_warmup, 1.0)


# ----------------------------------------------------------------------- data
def parent_inputs(scm: SCM, node: str, data: Mapping[str, Any]) -> jax.Array:
    """Each unit's encoded parents of ``node``, exactly the vector :class:`cfjax.scm.SCM` feeds
    the node's mechanism (its parents in graph order, each through its mechanism's
    ``encode``: a binary class as 0/1, a larger one one-hot, a scalar as itself).

    Args:
      scm: the model. node: a node with at least one parent.
      data: ``{name: (N, *E)}`` holding (at least) every parent of ``node``, validated as
        :meth:`cfjax.scm.SCM.abduct` validates data.

    Returns:
      ``(N, P)`` floating point.

    Example:
      >>> import cfjax as cf
      >>> scm = cf.scm.SCM({"s": [], "a": [], "y": ["s", "a"]},
      ...                  {"s": cf.scm.GumbelMax(2), "a": cf.scm.LocationScale(), "y": cf.scm.LocationScale()})
      >>> parent_inputs(scm, "y", {"s": np.array([0, 1]), "a": np.array([2.5, 3.0], np.float32)}).tolist()
      [[0.0, 2.5], [1.0, 3.0]]
    """
    i = _check_node(scm, node)
    cast = scm.check_data(data, nodes=scm.graph.parents[i], name="data")
    return jax.vmap(lambda values: scm.parent_vector(node, values))(cast)


def _check_node(scm: Any, node: Any) -> int:
    if not isinstance(scm, SCM):
        _checks.fail("scm", "a cfjax.scm.SCM", type(scm).__name__)
    if not isinstance(node, str) or node not in scm.nodes:
        _checks.fail("node", f"a node of the SCM ({list(scm.nodes)})", repr(node))
    i = scm.graph.index(node)
    if not scm.graph.parents[i]:
        _checks.fail("node", "a node with at least one parent (the HVAE is conditional)", f"root node {node!r}")
    return i


def impute_parents(scm: SCM, node: str, data: Mapping[str, Any], mask: Mapping[str, Any] | None = None,
                   anticausal: Any = None) -> tuple[dict[str, Any], jax.Array]:
    """The data with the missing parent labels of ``node`` imputed, and each unit's weight.

    A parent ``p`` in ``mask`` keeps its observed label where ``mask[p]`` is True and takes
    :func:`cfjax.generative.anticausal.impute`'s value elsewhere (the most probable class of a
    categorical head, the mean of a Gaussian one, clipped into the parent's support when its
    mechanism is bounded, e.g. a bounded spline: a predicted age of 16 becomes 20). A unit's weight is the product over the
    masked parents of the imputed weights: ``1 − H(q(p | x))/log C`` for an imputed discrete
    parent, 1 for an observed label or an imputed continuous one (paper 000, appendix).

    Args:
      scm, node: the model and the image node.
      data: ``{name: (N, *E)}``; ``data[node]`` the images ``(N, H, W)``; a masked parent's
        column may hold anything (NaN, −1) where it is not observed.
      mask: ``{parent: (N,) bool}`` (True: observed), or None (every label observed: weights 1).
      anticausal: :class:`~cfjax.generative.anticausal.AntiCausal` with a head for every
        masked parent (required with ``mask``).

    Returns:
      ``(data, weights)``: the data with imputed columns, and ``(N,)`` weights.
    """
    i = _check_node(scm, node)
    if not isinstance(data, Mapping):
        _checks.fail("data", "a mapping node -> array", type(data).__name__)
    if node not in data:
        _checks.fail("data", f"a column {node!r} of images (N, H, W)", f"columns {sorted(data)}")
    n = _checks.shape_of(data[node])[0] if _checks.shape_of(data[node]) else 0
    dtype = jnp.result_type(float)
    if mask is None:
        if anticausal is not None:
            _checks.fail("mask", "a mask {parent: (N,) bool} when `anticausal` is given", "None")
        return dict(data), jnp.ones((n,), dtype)
    if anticausal is None:
        _checks.fail("anticausal", "anti-causal predictors (AntiCausal) to impute the labels `mask` hides",
                     "None")
    if not isinstance(anticausal, _ac.AntiCausal):
        _checks.fail("anticausal", "an AntiCausal (train_anticausal's result)", type(anticausal).__name__)
    if not isinstance(mask, Mapping):
        _checks.fail("mask", "a mapping {parent: (N,) bool}", type(mask).__name__)
    parents = scm.graph.parents[i]
    unknown = [p for p in mask if p not in parents]
    if unknown:
        _checks.fail("mask", f"keys among the parents of {node!r} ({list(parents)})", f"unknown {unknown}")
    heads = {h.name: h for h in anticausal.spec}
    missing = [p for p in mask if p not in heads]
    if missing:
        _checks.fail("anticausal", f"a head for every masked parent {sorted(mask)}", f"none for {missing}")
    for p in mask:
        if heads[p].kind == "categorical" and (not scm.mechanism(p).discrete
                                               or heads[p].classes != getattr(scm.mechanism(p), "num_classes", None)):
            _checks.fail("anticausal", f"a head for {p!r} matching its mechanism", f"categorical head {heads[p]}")
        if heads[p].kind == "gaussian" and scm.mechanism(p).discrete:
            _checks.fail("anticausal", f"a categorical head for discrete parent {p!r}", "a Gaussian head")
    masks = {}
    for p, m in mask.items():
        if p not in data:
            _checks.fail("data", f"a column {p!r} (masked labels may hold anything)", f"columns {sorted(data)}")
        m = np.asarray(m)
        if m.shape != (n,) or not (m.dtype == bool or np.all((m == 0) | (m == 1))):
            _checks.fail(f"mask[{p!r}]", f"a boolean array of shape ({n},)", f"shape {m.shape}, dtype {m.dtype}")
        masks[p] = m.astype(bool)
    images = data[node]
    if len(_check_images("data", images)) != 3:
        _checks.fail("data", f"a column {node!r} of images (N, H, W)", f"shape {_checks.shape_of(images)}")
    labels, head_mask = {}, {}
    for name in heads:  # heads that are not masked parents: observed when given, else imputed and unused
        if name in masks:
            labels[name], head_mask[name] = np.asarray(data[name]), masks[name]
        elif name in data:
            labels[name], head_mask[name] = np.asarray(data[name]), np.ones((n,), bool)
        else:
            labels[name], head_mask[name] = np.zeros((n,)), np.zeros((n,), bool)
    out = _ac.impute(anticausal, images, labels, head_mask)
    imputed = dict(out.parents)
    for p in masks:  # a predicted mean may leave a bounded parent's support: clip it into it
        mech = scm.mechanism(p)
        if heads[p].kind == "gaussian" and getattr(mech, "bounded", False):
            imputed[p] = jnp.clip(imputed[p], mech.low, mech.high).astype(jnp.asarray(imputed[p]).dtype)
    weights = jnp.ones((n,), dtype)
    for p in masks:
        weights = weights * out.weights[p].astype(dtype)
    completed = dict(data)
    completed.update({p: imputed[p] for p in masks})
    return completed, weights


def _check_generator_images(images: Any, config: GeneratorConfig, name: str) -> None:
    """Training images (the anti-causal predictors' checks), of the network's size."""
    shape = _check_images(name, images)
    if len(shape) != 3 or shape[1:] != config.hvae.image_shape:
        want = config.hvae.image_shape
        _checks.fail(name, f"images of shape (N, {want[0]}, {want[1]}) (config.hvae.image_size)", f"shape {shape}")


# ----------------------------------------------------------------------- the step
class GeneratorData(NamedTuple):
    """The training set: ``images (N, H, W)``, encoded ``parents (N, P)`` and ``weights (N,)``;
    ``regulariser``: the counterfactual regulariser (:class:`Regulariser`), or None (needed when
    ``config.cf_weight > 0``)."""

    images: jax.Array
    parents: jax.Array
    weights: jax.Array
    regulariser: Any = None


@struct.dataclass
class Regulariser:
    """The counterfactual regulariser's data (a pytree; its structure is static).

    Attributes:
      predictor: the frozen anti-causal predictors
        (:class:`~cfjax.generative.anticausal.AntiCausal`), one head per regularised parent.
      labels: ``(N, n_heads)`` each training unit's value of each head's parent (class index or
        value), column ``j`` for ``predictor.spec[j]``; the pool new Gaussian values are drawn
        from.
      slots: per head, ``(offset, width)`` of its parent's encoding in the parent vector (static).
      mechanisms: per head, its parent's mechanism, whose ``encode`` builds the counterfactual
        parent vector (static).
    """

    predictor: Any
    labels: jax.Array
    slots: tuple[tuple[int, int], ...] = struct.field(pytree_node=False)
    mechanisms: tuple[Any, ...] = struct.field(pytree_node=False)

    @property
    def spec(self) -> _ac.ParentSpec:
        return self.predictor.spec


def make_regulariser(scm: SCM, node: str, regulariser: Any, data: Mapping[str, Any]) -> Regulariser:
    """:class:`Regulariser` of trained anti-causal predictors for the image ``node``: every
    head must name a parent of ``node`` (a categorical head a discrete parent with as many
    classes, a Gaussian head a continuous scalar one) and ``data`` must hold each head's parent.

    Example:
      >>> import cfjax as cf
      >>> scm = cf.scm.SCM({"s": [], "a": [], "y": ["s", "a"]},
      ...                  {"s": cf.scm.GumbelMax(3), "a": cf.scm.LocationScale(), "y": cf.scm.LocationScale()})
      >>> spec = (_ac.Head("a", "gaussian"),)
      >>> net = _ac.ParentPredictor(spec, features=(2,), hidden=2)
      >>> q = _ac.AntiCausal(net.init(jax.random.key(0), jnp.zeros((1, 4, 4))), {"a": 0.0}, {"a": 1.0},
      ...                    jnp.zeros(1), net)
      >>> make_regulariser(scm, "y", q, {"s": np.array([0, 2]), "a": np.array([1.0, 2.0])}).slots
      ((3, 1),)
    """
    i = _check_node(scm, node)
    if not isinstance(regulariser, _ac.AntiCausal):
        _checks.fail("regulariser", "an AntiCausal (train_anticausal's result)", type(regulariser).__name__)
    parents = scm.graph.parents[i]
    offsets, off = {}, 0
    for p in parents:
        mech = scm.mechanism(p)
        offsets[p] = (off, int(mech.encoded_dim))
        off += int(mech.encoded_dim)
    if scm.mechanisms[i].raw_parents:
        _checks.fail("scm", f"a mechanism of {node!r} fed encoded parents", "one with raw_parents")
    slots, mechs, cols = [], [], []
    for h in regulariser.spec:
        if h.name not in offsets:
            _checks.fail("regulariser", f"heads named after parents of {node!r} ({list(parents)})",
                         f"head {h.name!r}")
        mech = scm.mechanism(h.name)
        if h.kind == "categorical" and (not mech.discrete or h.classes != getattr(mech, "num_classes", None)):
            _checks.fail("regulariser", f"a head for {h.name!r} matching its mechanism", f"categorical head {h}")
        if h.kind == "gaussian" and (mech.discrete or scm.event(h.name) != ()):
            _checks.fail("regulariser", f"a categorical head for {h.name!r} (Gaussian heads: continuous scalars)",
                         "a Gaussian head")
        if h.name not in data:
            _checks.fail("data", f"a column {h.name!r} (a parent the regulariser intervenes on)",
                         f"columns {sorted(data)}")
        slots.append(offsets[h.name])
        mechs.append(mech)
        cols.append(np.asarray(data[h.name], dtype=np.float64).reshape(-1))
    labels = jnp.asarray(np.stack(cols, axis=1)).astype(jnp.result_type(float))
    return Regulariser(regulariser, labels, tuple(slots), tuple(mechs))


def _intervene_unit(reg: Regulariser, key: jax.Array, labels: jax.Array,
                    pa: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    """One unit: one intervention on a head drawn uniformly; ``(pa*, targets, head)``."""
    spec = reg.spec
    k_head, k_val = jax.random.split(key)
    head = jax.random.randint(k_head, (), 0, len(spec))
    targets = []
    for j, h in enumerate(spec):
        k = jax.random.fold_in(k_val, j)
        if h.kind == "categorical":  # a different class, uniformly
            new = jnp.mod(labels[j] + jax.random.randint(k, (), 1, h.classes).astype(labels.dtype), h.classes)
        else:  # a value of the training data's empirical distribution
            new = reg.labels[jax.random.randint(k, (), 0, reg.labels.shape[0]), j]
        targets.append(jnp.where(head == j, new, labels[j]))
    targets = jnp.stack(targets)
    pa_star = pa
    for j, (h, (off, width), mech) in enumerate(zip(spec, reg.slots, reg.mechanisms)):
        v = targets[j].astype(jnp.int32) if h.kind == "categorical" else targets[j]
        enc = mech.encode(v).astype(pa.dtype)
        pa_star = jnp.where(head == j, lax.dynamic_update_slice(pa, enc, (off,)), pa_star)
    return pa_star, targets, head


def counterfactual_targets(reg: Regulariser, key: jax.Array, labels: jax.Array,
                           parents: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Each unit's intervention (its own key, ``split(key, B)``): a head ``j`` drawn uniformly,
    its parent set to a new value (categorical: a different class, uniformly; Gaussian: the
    value of a unit drawn uniformly from ``reg.labels``), the other parents held.

    Args:
      reg: :class:`Regulariser`. key: PRNG key.
      labels: ``(B, n_heads)`` the units' head values. parents: ``(B, P)`` encoded parents.

    Returns:
      ``(pa_star (B, P), targets (B, n_heads), head (B,))``: the counterfactual parent vectors,
      every head's counterfactual value (the intervened head's new value, the others' factual
      one) and the intervened head.
    """
    keys = jax.random.split(key, labels.shape[0])
    return jax.vmap(functools.partial(_intervene_unit, reg))(keys, labels, parents)


def _cf_term(config: GeneratorConfig, params: Any, reg: Regulariser, out: Any, images: jax.Array,
             pa_star: jax.Array, targets: jax.Array) -> jax.Array:
    """The regulariser from a posterior pass ``out`` (its latents and pixel noise abducted)."""
    eps = (images - out.loc) * jnp.exp(-out.log_scale)
    cf = HVAE(config.hvae).apply(params, pa_star, None, out.eps)
    x_cf = cf.loc + jnp.exp(cf.log_scale) * eps
    q = jax.lax.stop_gradient(reg.predictor)
    spec = q.spec
    tg = {h.name: targets[:, j] for j, h in enumerate(spec)}
    mask = jnp.ones((images.shape[0], len(spec)), bool)
    total, _ = _ac.anticausal_loss(q.params, q.model, q.loc, q.scale, x_cf, tg, mask)
    return total


def _posterior_pass(config: GeneratorConfig, params: Any, images: jax.Array, parents: jax.Array,
                    key: jax.Array) -> Any:
    shapes = config.hvae.latent_shapes
    b = images.shape[0]
    keys = jax.random.split(key, len(shapes))
    xi = tuple(jax.random.normal(k, (b,) + s, images.dtype) for k, s in zip(keys, shapes))
    return HVAE(config.hvae).apply(params, parents, images, xi, 1.0)


def counterfactual_loss(config: GeneratorConfig, params: Any, reg: Regulariser, images: jax.Array,
                        parents: jax.Array, pa_star: jax.Array, targets: jax.Array, key: jax.Array) -> jax.Array:
    """The counterfactual regulariser on a batch (paper 000): each unit's counterfactual image
    ``x̃_b = forward(abduct(x_b, pa_b), pa*_b)`` (one posterior draw per unit from ``key``, as
    :func:`generator_loss` draws it, then the exact pixel noise), and the mean over units of
    the sum over heads of the anti-causal loss of ``q(· | x̃_b)`` against ``targets_b``
    (categorical cross-entropy, Gaussian NLL of the standardised value:
    :func:`cfjax.generative.anticausal.anticausal_loss`). Differentiable in ``params``; the
    predictors are frozen (no gradient reaches them).

    Shapes: ``images (B, H, W)``, ``parents, pa_star (B, P)``, ``targets (B, n_heads)``
    (:func:`counterfactual_targets`). Returns a scalar (nats per unit).
    """
    out = _posterior_pass(config, params, images, parents, key)
    return _cf_term(config, params, reg, out, images, pa_star, targets)


@struct.dataclass
class GeneratorState:
    """Everything training needs to continue (a pytree; checkpointed after every chunk).

    Attributes:
      params: the HVAE's current parameters. ema_params: their EMA.
      opt_state: the optimiser's state. step: steps taken, ``()`` int32 (the KL and
        regulariser warm-ups and the EMA's decay depend on it).
    """

    params: Any
    ema_params: Any
    opt_state: Any
    step: jax.Array


def init_state(config: GeneratorConfig, parent_dim: int, *, key: Any) -> GeneratorState:
    """The state before the first step: :meth:`ImageHVAE.init` parameters from ``key`` (a
    typed key, raw key data or an int seed), their EMA equal to them, a fresh optimiser state.

    Example:
      >>> s = init_state(GeneratorConfig(hvae=HVAEConfig(channels=(4, 4, 4), latent_dims=(0, 2, 2)),
      ...                                steps=10, warmup=0), 3, key=0)
      >>> int(s.step)
      0
    """
    if not isinstance(config, GeneratorConfig):
        _checks.fail("config", "a GeneratorConfig", repr(config))
    parent_dim = _checks.check_positive_int("parent_dim", parent_dim)
    return _init_state(config, parent_dim, as_key(key))


@functools.partial(jax.jit, static_argnums=(0, 1))
def _init_state(config: GeneratorConfig, parent_dim: int, key: jax.Array) -> GeneratorState:
    params = ImageHVAE(config.hvae, config.temperature).init(key, parent_dim)
    return GeneratorState(params=params, ema_params=params, opt_state=config.optimizer().init(params),
                          step=jnp.zeros((), jnp.int32))


def generator_loss(config: GeneratorConfig, params: Any, images: jax.Array, parents: jax.Array,
                   weights: jax.Array, key: jax.Array, kl_weight: jax.Array
                   ) -> tuple[jax.Array, dict[str, jax.Array]]:
    """The training objective on a batch, per pixel: with ``B`` units of weight ``w_b``,
    reconstruction ``rec_b = −log N(x_b; μ, σ²)`` (summed over pixels, one posterior draw per
    unit from ``key``) and level KLs ``KL_lb``,

        loss = [Σ_b w_b rec_b / B + β Σ_l max(Σ_b w_b KL_lb / B, free_bits·c_l)] / (H·W)

    (``β = kl_weight``). With unit weights and no free bits, ``loss`` is the batch mean of the
    negative ELBO per pixel (its β = 1 value).

    Returns ``(loss, {"loss", "rec", "kl"})``, ``rec`` and ``kl`` the weighted batch means of
    the reconstruction and the total (unclipped) KL, per pixel.
    """
    out = _posterior_pass(config, params, images, parents, key)
    return _elbo_terms(config, out, images, weights, kl_weight)


def _elbo_terms(config: GeneratorConfig, out: Any, images: jax.Array, weights: jax.Array,
                kl_weight: jax.Array) -> tuple[jax.Array, dict[str, jax.Array]]:
    cfg = config.hvae
    shapes = cfg.latent_shapes
    b = images.shape[0]
    pixels = float(cfg.image_size * cfg.image_size)
    rec = -gaussian_log_prob(images, out.loc, out.log_scale).sum(axis=(1, 2))
    mean = lambda v: jnp.sum(weights * v) / b  # noqa: E731
    rec_mean = mean(rec)
    kls = [mean(kl) for kl in out.kl]
    kl_pen = sum(jnp.maximum(kl, config.free_bits * s[-1]) for kl, s in zip(kls, shapes))
    loss = (rec_mean + kl_weight * kl_pen) / pixels
    return loss, {"loss": loss, "rec": rec_mean / pixels, "kl": sum(kls) / pixels}


def train_step(config: GeneratorConfig, state: GeneratorState, data: GeneratorData,
               key: jax.Array) -> tuple[GeneratorState, dict[str, jax.Array]]:
    """One optimisation step with the step's own ``key`` (:func:`train` passes
    ``fold_in(data_key, t)`` at step ``t``): ``config.batch_size`` units drawn uniformly with
    replacement, :func:`generator_loss` with the step's KL weight, one clipped AdamW update,
    the EMA. Pure (jit it with ``config`` static; optax's bias correction needs JAX's standard
    dtype promotion, which :func:`cfjax._core.training.run` sets).

    With ``config.cf_weight > 0`` the objective adds ``config.cf_weight_at(step)`` times
    :func:`counterfactual_loss` on the same posterior draw, each unit's intervention drawn by
    :func:`counterfactual_targets` with ``fold_in(key, 1)`` (``data.regulariser`` required).

    Returns ``(state, metrics)``, the metrics (``loss``, ``rec``, ``kl``, and ``cf`` with the
    regulariser) of the batch before the update.
    """
    k_idx, k_post = jax.random.split(key)
    idx = jax.random.randint(k_idx, (config.batch_size,), 0, data.images.shape[0])
    if config.cf_weight == 0:
        grads, metrics = jax.grad(generator_loss, argnums=1, has_aux=True)(
            config, state.params, data.images[idx], data.parents[idx], data.weights[idx], k_post,
            config.kl_weight(state.step))
    else:
        reg = data.regulariser
        if reg is None:
            raise ValueError("`data`: expected a regulariser (GeneratorData.regulariser) with config.cf_weight > 0.")
        pa_star, targets, _ = counterfactual_targets(reg, jax.random.fold_in(key, 1), reg.labels[idx],
                                                     data.parents[idx])
        w_cf = config.cf_weight_at(state.step)

        def loss_fn(params):
            images, parents = data.images[idx], data.parents[idx]
            out = _posterior_pass(config, params, images, parents, k_post)
            loss, metrics = _elbo_terms(config, out, images, data.weights[idx], config.kl_weight(state.step))
            cf = _cf_term(config, params, reg, out, images, pa_star, targets)
            loss = loss + w_cf * cf
            return loss, {**metrics, "loss": loss, "cf": cf}

        grads, metrics = jax.grad(loss_fn, has_aux=True)(state.params)
    updates, opt_state = config.optimizer().update(grads, state.opt_state, state.params)
    params = optax.apply_updates(state.params, updates)
    d = config.ema_decay_at(state.step)
    ema = jax.tree.map(lambda e, p: (d * e + (1 - d) * p).astype(e.dtype), state.ema_params, params)
    return state.replace(params=params, ema_params=ema, opt_state=opt_state, step=state.step + 1), metrics


@dataclasses.dataclass(frozen=True)
class _Step:
    """:func:`train_step` of ``config`` as the training loop's hashable step."""

    config: GeneratorConfig

    def __call__(self, state: GeneratorState, data: GeneratorData,
                 key: jax.Array) -> tuple[GeneratorState, dict[str, jax.Array]]:
        return train_step(self.config, state, data, key)


# ----------------------------------------------------------------------- the loop
class GeneratorFit(NamedTuple):
    """:func:`train`'s result.

    Attributes:
      mechanism: the trained image mechanism, ``ImageHVAE(config.hvae, config.temperature)``.
      params: the EMA parameters (what counterfactuals use: ``{..., node: fit.params}``).
      raw_params: the last step's parameters.
      history: host arrays ``(steps_run,)`` (``config.steps`` unless ``max_chunks`` stopped
        the run early): ``"step"``, ``"loss"`` (the objective), ``"rec"`` and ``"kl"`` per
        pixel (see :func:`generator_loss`), and ``"cf"`` with the regulariser.
    """

    mechanism: ImageHVAE
    params: Any
    raw_params: Any
    history: dict[str, np.ndarray]


def train(data: Mapping[str, Any], config: GeneratorConfig = GeneratorConfig(), *, scm: SCM, key: Any,
          node: str = "image", mask: Mapping[str, Any] | None = None, anticausal: Any = None,
          regulariser: Any = None, checkpoint_dir: str | os.PathLike | None = None, progress: bool | None = None,
          max_chunks: int | None = None) -> GeneratorFit:
    """Fit the conditional HVAE image mechanism of ``node`` to SCM data by maximising its ELBO.

    The parents enter as :func:`parent_inputs` (what the SCM feeds the node's mechanism), so
    ``SCM(graph, {..., node: fit.mechanism})`` with ``params[node] = fit.params`` is the
    learned deep SCM (the parents' mechanisms are fitted with :meth:`cfjax.scm.SCM.fit`,
    before or after). Steps as :func:`train_step`, run by cfjax's training loop
    (:func:`cfjax._core.training.run`) in compiled chunks of ``config.chunk_steps``; step
    ``t`` draws its minibatch and posterior noise from ``fold_in(data_key, t)``
    (``init_key, data_key = jax.random.split(key)``).

    Args:
      data: ``{name: (N, *E)}``: ``data[node]`` the images ``(N, H, W)`` (floating point,
        finite, ``H = W = config.hvae.image_size``, values in [0, 1]) and every parent of
        ``node``.
      config: :class:`GeneratorConfig`.
      scm: the SCM the node belongs to (its graph and the parents' mechanisms; the node's own
        mechanism may be anything, e.g. an exact renderer the HVAE is to replace).
      key: PRNG key (initialisation, minibatches, posterior draws): a typed key, raw key data
        or an int seed.
      node: the image node.
      mask: ``{parent: (N,) bool}``, True where the label is observed; missing labels are
        imputed with ``anticausal`` and units weighted (:func:`impute_parents`).
      anticausal: :class:`~cfjax.generative.anticausal.AntiCausal` (required with ``mask``).
      regulariser: frozen anti-causal predictors
        (:class:`~cfjax.generative.anticausal.AntiCausal`, trained on factual images, heads
        named after parents of ``node``) for the counterfactual regulariser; required when
        ``config.cf_weight > 0``, ignored otherwise. Each step draws, for each unit, one
        intervention on a head's parent (:func:`counterfactual_targets`, key
        ``fold_in(fold_in(data_key, t), 1)``) and adds ``config.cf_weight_at(t)`` times
        :func:`counterfactual_loss` (on the step's posterior draw) to the objective; the
        history gains ``"cf"`` (the unweighted term).
      checkpoint_dir: where an orbax checkpoint is written after every chunk (the two latest
        kept, atomic). If it holds a checkpoint of this run (same config, key, image shape,
        parents and weights), training resumes from it and ends as an uninterrupted run would.
      progress: show a tqdm bar (loss, rec, kl); default: when stderr is a terminal.
      max_chunks: run at most this many chunks in this call (then return the current state;
        call again with the same ``checkpoint_dir`` to continue).

    Returns:
      :class:`GeneratorFit`.

    Raises:
      TrainingError: the loss became NaN or infinite (the message names the step).
      cfjax.ValidationError: bad arguments, or a checkpoint of another run in ``checkpoint_dir``.

    Example:
      >>> import cfjax as cf
      >>> cfg = HVAEConfig(image_size=16, channels=(4, 4, 4), latent_dims=(0, 2, 2))
      >>> scm = cf.scm.SCM({"s": [], "image": ["s"]}, {"s": cf.scm.GumbelMax(2), "image": ImageHVAE(cfg)})
      >>> rng = np.random.default_rng(0)
      >>> s = rng.integers(0, 2, 16)
      >>> x = (0.3 + 0.4 * s[:, None, None] + 0.05 * rng.normal(size=(16, 16, 16))).astype(np.float32)
      >>> fit = train({"s": s, "image": x}, GeneratorConfig(cfg, steps=4, batch_size=4, warmup=1, chunk_steps=2),
      ...             scm=scm, key=0, progress=False)
      >>> fit.history["loss"].shape, bool(np.isfinite(fit.history["loss"]).all())
      ((4,), True)
    """
    if not isinstance(config, GeneratorConfig):
        _checks.fail("config", "a GeneratorConfig", repr(config))
    _check_node(scm, node)
    if not isinstance(data, Mapping):
        _checks.fail("data", "a mapping node -> array", type(data).__name__)
    if node not in data:
        _checks.fail("data", f"a column {node!r} of images (N, H, W)", f"columns {sorted(data)}")
    _check_generator_images(data[node], config, f"data[{node!r}]")
    if max_chunks is not None:
        max_chunks = _checks.check_positive_int("max_chunks", max_chunks)
    key = as_key(key)
    if regulariser is not None and not isinstance(regulariser, _ac.AntiCausal):
        _checks.fail("regulariser", "an AntiCausal (train_anticausal's result)", type(regulariser).__name__)
    if config.cf_weight > 0 and regulariser is None:
        _checks.fail("regulariser", "anti-causal predictors (AntiCausal) when config.cf_weight > 0", "None")
    completed, weights = impute_parents(scm, node, data, mask, anticausal)
    pa = parent_inputs(scm, node, completed)
    dtype = jnp.result_type(float)
    images = jnp.asarray(data[node]).astype(dtype)
    reg = make_regulariser(scm, node, regulariser, completed) if config.cf_weight > 0 else None
    train_data = GeneratorData(images, pa.astype(dtype), weights.astype(dtype), reg)

    init_key, data_key = jax.random.split(key)
    state = _init_state(config, int(pa.shape[1]), init_key)
    run = {"config": dataclasses.asdict(config), "images": [list(images.shape), str(images.dtype)],
           "data": _ckpt.digest(pa, weights), "key": _ckpt.digest(jax.random.key_data(key))}
    if reg is not None:
        run["regulariser"] = _ckpt.digest(reg.labels, *jax.tree.leaves(reg.predictor.params))
    store = _ckpt.CheckpointStore(checkpoint_dir) if checkpoint_dir is not None else None
    try:
        out = _training.run(
            _Step(config), state, train_data, key=data_key, steps=config.steps, chunk_steps=config.chunk_steps,
            progress=progress, desc="generator", postfix=("loss", "rec", "kl"), store=store,
            meta=json.loads(json.dumps(run)), max_chunks=max_chunks,
            hint="lower `config.learning_rate` or `config.clip_norm`, or check the images and parents")
    finally:
        if store is not None:
            store.close()
    history = {**out.history, "step": np.arange(out.steps)}
    return GeneratorFit(mechanism=ImageHVAE(config.hvae, config.temperature), params=out.state.ema_params,
                        raw_params=out.state.params, history=history)
