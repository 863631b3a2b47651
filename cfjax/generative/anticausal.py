"""Anti-causal parent predictors ``q(pa | x)``: a multi-head CNN from an image to each of its
parents, its loss and its training on (partly) labelled images. Its predictions and label
imputation are in :mod:`cfjax.generative.parents`
(:func:`~cfjax.generative.parents.predict_parents`, :func:`~cfjax.generative.parents.impute`).

Paper 000's generative model (after Ribeiro et al. 2023, its reference [9]) needs them twice:
to impute the parents of unlabelled images, each imputed discrete label weighted by
``1 − H(q)/log C`` (its normalised predictive entropy, the appendix's "inversely weighted by
the entropy"), and to measure counterfactual quality (:mod:`cfjax.generative.quality`,
effectiveness: do the predictors recover the intervened parents from a counterfactual image?).

A head is categorical (``C`` logits) for a discrete parent, Gaussian (a mean and a log-scale)
for a continuous one; continuous targets are standardised with the labelled units' mean and
standard deviation, stored in the trained :class:`AntiCausal` and undone by
:func:`~cfjax.generative.parents.predict_parents`, so a parent in years trains as well as one
near 1.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import Any, cast

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import struct

from cfjax import _checks
from cfjax._core import training as _training
from cfjax._core.keys import as_key
from cfjax._core.nn import Conv3x3, mean_pool2
from cfjax._core.optim import standard_promotion
from cfjax.typing import Array, ArrayLike, KeyLike, PyTree

__all__ = [
    "Head",
    "ParentSpec",
    "CHEST_SPEC",
    "chest_spec",
    "check_spec",
    "ParentPredictor",
    "AntiCausal",
    "anticausal_loss",
    "AntiCausalConfig",
    "train_anticausal",
    "SCALE_SUFFIX",
]

KINDS = ("categorical", "gaussian")
#: key suffix of a Gaussian head's predicted scale in
#: :func:`~cfjax.generative.parents.predict_parents`' output
SCALE_SUFFIX = "_scale"
_LOG_2PI = math.log(2 * math.pi)
_LOG_SCALE_BOUND = 7.0  # predicted log-scales (standardised units) are clipped to ±7


@dataclasses.dataclass(frozen=True)
class Head:
    """One parent's head of :class:`ParentPredictor` (frozen, hashable).

    Attributes:
      name: the parent's node name.
      kind: ``"categorical"`` (values ``0 … classes − 1``, ``classes`` logits) or
        ``"gaussian"`` (a continuous value: a mean and a log-scale).
      classes: the number of classes ``C >= 2`` of a categorical head; ``None`` for a Gaussian.

    Example:
      >>> Head("race", "categorical", 3).outputs, Head("age", "gaussian").outputs
      (3, 2)
    """

    name: str
    kind: str
    classes: int | None = None

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name:
            _checks.fail("name", "a non-empty node name", repr(self.name))
        if self.kind not in KINDS:
            _checks.fail("kind", f"one of {list(KINDS)}", repr(self.kind))
        if self.kind == "categorical":
            c = self.classes
            if isinstance(c, bool) or not isinstance(c, (int, np.integer)) or c < 2:
                _checks.fail(
                    "classes", f"an integer >= 2 for categorical head {self.name!r}", repr(c)
                )
            object.__setattr__(self, "classes", int(c))
        elif self.classes is not None:
            _checks.fail("classes", f"None for Gaussian head {self.name!r}", repr(self.classes))

    @property
    def outputs(self) -> int:
        """Network outputs of the head: ``C`` logits, or a mean and a log-scale."""
        if self.kind == "categorical":
            assert self.classes is not None  # a categorical head's: __post_init__
            return self.classes
        return 2


#: A static, hashable description of the heads: one :class:`Head` per parent, in output order.
ParentSpec = tuple[Head, ...]

#: :class:`cfjax.data.ChestSCM`'s parents without lung size: sex (2), age (continuous),
#: race (3), effusion (2).
CHEST_SPEC: ParentSpec = (
    Head("sex", "categorical", 2),
    Head("age", "gaussian"),
    Head("race", "categorical", 3),
    Head("effusion", "categorical", 2),
)


def chest_spec(lung: bool = False) -> ParentSpec:
    """:data:`CHEST_SPEC`, with lung size (Gaussian) after age when ``lung``.

    Example:
      >>> [h.name for h in chest_spec(lung=True)]
      ['sex', 'age', 'lung', 'race', 'effusion']
    """
    if not lung:
        return CHEST_SPEC
    return CHEST_SPEC[:2] + (Head("lung", "gaussian"),) + CHEST_SPEC[2:]


def check_spec(spec: Sequence[Head], name: str = "spec") -> ParentSpec:
    """``spec`` as a :data:`ParentSpec`: a non-empty sequence of :class:`Head` with distinct
    names, no name equal to a Gaussian head's name plus :data:`SCALE_SUFFIX`."""
    if (
        not isinstance(spec, (tuple, list))
        or not spec
        or not all(isinstance(h, Head) for h in spec)
    ):
        _checks.fail(name, "a non-empty tuple of Head", repr(spec))
    names = [h.name for h in spec]
    if len(set(names)) != len(names):
        _checks.fail(name, "heads with distinct names", repr(names))
    clash = [
        h.name + SCALE_SUFFIX
        for h in spec
        if h.kind == "gaussian" and h.name + SCALE_SUFFIX in names
    ]
    if clash:
        _checks.fail(
            name,
            f"no head named like a Gaussian head's scale key (<name>{SCALE_SUFFIX})",
            repr(clash),
        )
    return tuple(spec)


class ParentPredictor(nn.Module):
    """Images ``(B, H, W)`` in [0, 1] to raw head outputs ``{name: (B, head.outputs)}``.

    The trunk is :class:`cfjax.predictors.EffusionCNN`'s: ``len(features)`` blocks of a 3×3
    convolution (:class:`~cfjax.predictors.cnn.Conv3x3`, im2col matrix product on CPU) and ReLU,
    each but the last followed by 2×2 mean pooling, then the global mean and max of the last
    feature map; a shared dense layer of ``hidden`` units (ReLU) and one dense layer per head:
    ``C`` logits for a categorical head, ``(mean, log-scale)`` of the standardised value for a
    Gaussian one. Any ``H, W >= 2^(len(features) − 1)``.

    Example:
      >>> net = ParentPredictor(CHEST_SPEC, features=(4, 8), hidden=8)
      >>> p = net.init(jax.random.key(0), jnp.zeros((1, 16, 16)))
      >>> {k: v.shape for k, v in net.apply(p, jnp.zeros((3, 16, 16))).items()}
      {'sex': (3, 2), 'age': (3, 2), 'race': (3, 3), 'effusion': (3, 2)}
    """

    spec: ParentSpec
    features: tuple[int, ...] = (16, 32, 64)
    hidden: int = 64
    conv: str = "auto"

    @nn.compact
    def __call__(self, images: jax.Array) -> dict[str, jax.Array]:
        if images.ndim != 3:
            raise ValueError(f"`images`: expected shape (B, H, W), got {images.shape}.")
        h = (images - 0.5)[..., None]
        for i, width in enumerate(self.features):
            h = nn.relu(Conv3x3(width, conv=self.conv, name=f"conv{i}")(h))
            if i < len(self.features) - 1:
                h = mean_pool2(h)
        h = jnp.concatenate([h.mean(axis=(1, 2)), h.max(axis=(1, 2))], axis=-1)
        h = nn.relu(nn.Dense(self.hidden, param_dtype=images.dtype, name="hidden")(h))
        return {
            head.name: nn.Dense(head.outputs, param_dtype=images.dtype, name=f"head_{head.name}")(h)
            for head in self.spec
        }


@struct.dataclass
class AntiCausal:
    """A trained :class:`ParentPredictor` (a pytree; the network is static).

    Attributes:
      params: the network's parameters.
      loc, scale: ``{name: ()}`` for each Gaussian head, the labelled units' mean and standard
        deviation its targets were standardised with (prediction = ``loc + scale·output``).
      loss: ``(steps,)`` training loss (sum over heads) of each step's minibatch.
      model: the :class:`ParentPredictor` (static).
    """

    params: PyTree
    loc: dict[str, jax.Array]
    scale: dict[str, jax.Array]
    loss: jax.Array
    model: ParentPredictor = struct.field(pytree_node=False)

    @property
    def spec(self) -> ParentSpec:
        return self.model.spec


def _head_losses(
    outputs: Mapping[str, jax.Array],
    targets: Mapping[str, jax.Array],
    mask: jax.Array,
    spec: ParentSpec,
) -> jax.Array:
    """``(n_heads,)``: each head's loss averaged over the units whose label it observes
    (``mask (B, n_heads)``); 0 for a head without an observed label. Gaussian targets are
    already standardised."""
    losses = []
    for j, head in enumerate(spec):
        out, y, m = outputs[head.name], targets[head.name], mask[:, j]
        if head.kind == "categorical":
            # a masked label may be anything (e.g. -1): clip it to a class, its term is dropped
            assert head.classes is not None  # a categorical head's: Head.__post_init__
            label = jnp.clip(y.astype(jnp.int32), 0, head.classes - 1)
            per_unit = optax.softmax_cross_entropy_with_integer_labels(out, label)
        else:
            mean, log_s = out[:, 0], jnp.clip(out[:, 1], -_LOG_SCALE_BOUND, _LOG_SCALE_BOUND)
            z = jnp.where(m, y.astype(out.dtype), mean)  # NaN labels of masked units stay out
            per_unit = 0.5 * ((z - mean) * jnp.exp(-log_s)) ** 2 + log_s + 0.5 * _LOG_2PI
        w = m.astype(out.dtype)
        losses.append(jnp.sum(jnp.where(m, per_unit, 0)) / jnp.maximum(jnp.sum(w), 1))
    return jnp.stack(losses)


def anticausal_loss(
    params: PyTree,
    model: ParentPredictor,
    loc: Mapping[str, Array],
    scale: Mapping[str, Array],
    images: jax.Array,
    parents: Mapping[str, jax.Array],
    mask: jax.Array,
) -> tuple[jax.Array, jax.Array]:
    """The training loss of a batch: per head, the categorical cross-entropy or Gaussian
    negative log-likelihood (of the standardised target, ``(y − loc)/scale``) averaged over the
    units whose label ``mask`` marks observed; the total is their sum. A masked label
    contributes nothing (its value, even NaN, does not reach the loss or its gradient).

    Args:
      params: the network's parameters. model: the :class:`ParentPredictor`.
      loc, scale: ``{name: ()}`` per Gaussian head (see :class:`AntiCausal`).
      images: ``(B, H, W)``. parents: ``{name: (B,)}`` for every head.
      mask: ``(B, n_heads)`` boolean, column ``j`` for ``model.spec[j]``.

    Returns:
      ``(total, per_head)``: a scalar and ``(n_heads,)``.

    Example:
      >>> net = ParentPredictor((Head("s", "categorical", 2),), features=(4,), hidden=4)
      >>> p = net.init(jax.random.key(0), jnp.zeros((1, 8, 8)))
      >>> total, per_head = anticausal_loss(p, net, {}, {}, jnp.zeros((2, 8, 8)),
      ...                                   {"s": jnp.array([0, 1])}, jnp.array([[True], [False]]))
      >>> per_head.shape
      (1,)
    """
    outputs = cast(dict[str, jax.Array], model.apply(params, images))  # no mutable state
    targets = {
        h.name: (
            (parents[h.name] - loc[h.name]) / scale[h.name]
            if h.kind == "gaussian"
            else parents[h.name]
        )
        for h in model.spec
    }
    per_head = _head_losses(outputs, targets, mask, model.spec)
    return jnp.sum(per_head), per_head


# ----------------------------------------------------------------------- input checks
def _check_images(name: str, images: ArrayLike, min_ndim: int = 3) -> tuple[int, ...]:
    shape = _checks.shape_of(images)
    if len(shape) < min_ndim:
        _checks.fail(
            name,
            f"an array of images (..., H, W) with at least {min_ndim} dimensions",
            f"shape {shape}",
        )
    _checks.check_nonempty(name, images)
    dtype = getattr(images, "dtype", None)  # (a numpy dtype is falsy: no `or` here)
    dtype = np.dtype(np.asarray(images).dtype if dtype is None else dtype)
    if not np.issubdtype(dtype, np.floating):
        _checks.fail(name, "floating-point images", f"dtype {dtype}")
    _checks.check_finite(name, images)
    return shape


def _mask_array(
    mask: ArrayLike | Mapping[str, ArrayLike] | None, spec: ParentSpec, n: int
) -> np.ndarray:
    """``mask`` (None, ``(N, n_heads)`` or ``{name: (N,)}``) as a boolean ``(N, n_heads)``."""
    if mask is None:
        return np.ones((n, len(spec)), bool)
    if isinstance(mask, Mapping):
        unknown = sorted(set(mask) - {h.name for h in spec})
        if unknown:
            _checks.fail("mask", "keys among the spec's heads", f"unknown {unknown}")
        cols = []
        for h in spec:
            col = np.asarray(mask.get(h.name, np.ones(n, bool)))
            if col.shape != (n,):
                _checks.fail("mask", f"shape ({n},) for head {h.name!r}", f"shape {col.shape}")
            cols.append(col)
        m = np.stack(cols, axis=1)
    else:
        m = np.asarray(mask)
        if m.shape != (n, len(spec)):
            _checks.fail("mask", f"shape (N, n_heads) = ({n}, {len(spec)})", f"shape {m.shape}")
    if m.dtype != bool:
        if not np.all((m == 0) | (m == 1)):
            _checks.fail("mask", "booleans (or 0/1)", f"values {np.unique(m)[:5].tolist()}")
        m = m.astype(bool)
    return m


def _check_parents(
    parents: Mapping[str, ArrayLike], spec: ParentSpec, n: int, mask: np.ndarray
) -> dict[str, np.ndarray]:
    """The heads' labels as host arrays ``(N,)``, checked where observed."""
    if not isinstance(parents, Mapping):
        _checks.fail("parents", "a mapping {name: (N,)}", type(parents).__name__)
    out = {}
    for j, h in enumerate(spec):
        if h.name not in parents:
            _checks.fail("parents", f"a label array for head {h.name!r}", f"keys {sorted(parents)}")
        y = np.asarray(parents[h.name])
        if y.shape != (n,):
            _checks.fail(
                "parents", f"shape ({n},) for {h.name!r} (one label per image)", f"shape {y.shape}"
            )
        seen = y[mask[:, j]]
        if h.kind == "categorical":
            assert h.classes is not None  # a categorical head's: Head.__post_init__
            if seen.size and (
                not np.all(np.isfinite(seen))
                or np.any(seen != np.round(seen))
                or seen.min() < 0
                or seen.max() >= h.classes
            ):
                _checks.fail(
                    "parents",
                    f"observed {h.name!r} labels in {{0, …, {h.classes - 1}}}",
                    f"values {np.unique(seen)[:5].tolist()}",
                )
        elif seen.size and not np.all(np.isfinite(seen)):
            _checks.fail("parents", f"finite observed {h.name!r} values", "NaN or infinite values")
        out[h.name] = y
    return out


# ----------------------------------------------------------------------- training
@dataclasses.dataclass(frozen=True)
class _Step:
    """One optimisation step of :func:`train_anticausal` (hashable: the training loop compiles
    it once per settings and shapes): ``batch_size`` units drawn with the unit probabilities
    ``data["p_unit"]`` with the step's key, one AdamW step (linear warm-up, then cosine decay
    to ``learning_rate / 100``) on :func:`anticausal_loss`."""

    model: ParentPredictor
    batch_size: int
    learning_rate: float
    weight_decay: float
    warmup: int
    steps: int

    def optimizer(self) -> optax.GradientTransformation:
        schedule = optax.warmup_cosine_decay_schedule(
            0.0, self.learning_rate, self.warmup, self.steps, self.learning_rate / 100
        )
        return standard_promotion(optax.adamw(schedule, weight_decay=self.weight_decay))

    def __call__(
        self, state: tuple[PyTree, PyTree], data: Mapping[str, PyTree], key: jax.Array
    ) -> tuple[tuple[PyTree, PyTree], dict[str, jax.Array]]:
        params, opt_state = state
        idx = jax.random.choice(key, data["p_unit"].shape[0], (self.batch_size,), p=data["p_unit"])
        batch = {name: y[idx] for name, y in data["targets"].items()}
        (loss, _), grads = jax.value_and_grad(anticausal_loss, has_aux=True)(
            params,
            self.model,
            data["loc"],
            data["scale"],
            data["images"][idx],
            batch,
            data["mask"][idx],
        )
        updates, opt_state = self.optimizer().update(grads, opt_state, params)
        return (optax.apply_updates(params, updates), opt_state), {"loss": loss}


@dataclasses.dataclass(frozen=True)
class AntiCausalConfig:
    """The settings of :func:`train_anticausal` (frozen, hashable): the optimisation, as
    :class:`cfjax.predictors.EnsembleConfig`'s fields of the same names, the network and the
    loop's chunks.

    Attributes:
      steps: optimisation steps.
      batch_size: units per step, drawn with replacement among the units with a label.
      learning_rate: peak learning rate of AdamW, reached after ``warmup`` linear steps from 0,
        then cosine decay to ``learning_rate / 100`` at ``steps``.
      weight_decay: AdamW's decoupled weight decay.
      warmup: linear warm-up steps (``0 ≤ warmup < steps``); None: ``min(100, steps // 10)``.
      features, hidden, conv: the network (:class:`ParentPredictor`).
      chunk_steps: steps per compiled chunk (one progress update each).

    Example:
      >>> AntiCausalConfig(steps=50).warmup_steps
      5
    """

    steps: int = 2000
    batch_size: int = 64
    learning_rate: float = 1e-3
    weight_decay: float = 1e-4
    warmup: int | None = None
    features: tuple[int, ...] = (16, 32, 64)
    hidden: int = 64
    conv: str = "auto"
    chunk_steps: int = 100

    def __post_init__(self):
        for name in ("steps", "batch_size", "chunk_steps", "hidden"):
            _checks.check_positive_int(name, getattr(self, name))
        w = self.warmup
        if w is not None and (
            isinstance(w, bool) or not isinstance(w, (int, np.integer)) or not 0 <= w < self.steps
        ):
            _checks.fail("warmup", f"an integer in [0, steps = {self.steps})", repr(w))
        for name in ("learning_rate", "weight_decay"):
            value = getattr(self, name)
            if (
                isinstance(value, bool)
                or not isinstance(value, (int, float, np.floating, np.integer))
                or not math.isfinite(value)
                or value < 0
                or (name == "learning_rate" and value == 0)
            ):
                _checks.fail(
                    name,
                    "a finite value > 0" if name == "learning_rate" else "a finite value >= 0",
                    repr(value),
                )
        f = self.features
        if (
            not isinstance(f, tuple)
            or not f
            or not all(
                isinstance(c, (int, np.integer)) and not isinstance(c, bool) and c >= 1 for c in f
            )
        ):
            _checks.fail("features", "a non-empty tuple of positive integers", repr(f))

    @property
    def warmup_steps(self) -> int:
        """The warm-up steps: ``warmup``, or ``min(100, steps // 10)`` when it is None."""
        return min(100, self.steps // 10) if self.warmup is None else int(self.warmup)


def _fold_train_anticausal(old: dict[str, Any], kwargs: dict[str, Any]) -> str:
    """:func:`train_anticausal`'s old keyword arguments into its ``config``."""
    return _training.regroup(
        "train_anticausal",
        old,
        kwargs,
        {f.name: ("config", f.name) for f in dataclasses.fields(AntiCausalConfig)},
        {"config": AntiCausalConfig},
    )


@_training.legacy_keywords(_fold_train_anticausal)
def train_anticausal(
    images: ArrayLike,
    parents: Mapping[str, ArrayLike],
    spec: ParentSpec,
    config: AntiCausalConfig = AntiCausalConfig(),
    *,
    key: KeyLike,  # noqa: B008 (frozen)
    mask: ArrayLike | Mapping[str, ArrayLike] | None = None,
    progress: bool | None = None,
) -> AntiCausal:
    """Train ``q(pa | x)``: a :class:`ParentPredictor` with one head per entry of ``spec``.

    Each step draws ``config.batch_size`` units with replacement, uniformly among the units
    with at least one observed label, and takes one AdamW step (linear warm-up, then cosine
    decay to ``learning_rate / 100``) on :func:`anticausal_loss`, step ``t`` with the key
    ``fold_in(data_key, t)`` (``init_key, data_key = jax.random.split(key)``). The steps run in
    compiled chunks of ``config.chunk_steps`` by cfjax's training loop
    (:func:`cfjax._core.training.run`: progress bar, NaN guard). Semi-supervised use: train on
    the labelled part (``mask``), then :func:`~cfjax.generative.parents.impute` the rest.

    Args:
      images: ``(N, H, W)`` floating point in [0, 1].
      parents: ``{name: (N,)}`` for every head: class indices for a categorical head, values
        (e.g. years) for a Gaussian one. Masked labels may hold anything (NaN, −1).
      spec: the heads (:data:`ParentSpec`, e.g. :data:`CHEST_SPEC`).
      config: the optimisation, the network and the chunks (:class:`AntiCausalConfig`).
      key: PRNG key (initialisation and minibatches): a typed key, raw key data or an int seed.
      mask: which labels are observed: ``(N, n_heads)`` boolean (column ``j`` for
        ``spec[j]``) or ``{name: (N,)}`` (missing names fully observed); default all. Each
        head needs at least one observed label (a Gaussian head two distinct values).
      progress: show a tqdm bar; default: when stderr is a terminal.

    The keyword arguments of earlier releases (``steps``, ``batch_size``, ``learning_rate``,
    ``weight_decay``, ``warmup``, ``features``, ``hidden``, ``conv``, ``chunk_steps``: the
    fields of :class:`AntiCausalConfig`) still work for one release, with a
    ``DeprecationWarning``.

    Returns:
      :class:`AntiCausal`: parameters, the Gaussian heads' normalisation, the loss history.

    Raises:
      cfjax.TrainingError: the loss became NaN or infinite (the message names the step).

    Example:
      >>> rng = np.random.default_rng(0)
      >>> x = rng.uniform(size=(16, 8, 8)).astype(np.float32)
      >>> pa = {"s": (x.mean((1, 2)) > 0.5).astype(np.int32), "a": 50 + 10 * x[:, 0, 0]}
      >>> spec = (Head("s", "categorical", 2), Head("a", "gaussian"))
      >>> config = AntiCausalConfig(steps=4, batch_size=4, features=(4,), hidden=4)
      >>> fit = train_anticausal(x, pa, spec, config, key=0, progress=False)
      >>> fit.loss.shape, sorted(fit.loc)
      ((4,), ['a'])
    """
    if not isinstance(config, AntiCausalConfig):
        _checks.fail("config", "an AntiCausalConfig", repr(config))
    spec = check_spec(spec)
    shape = _check_images("images", images)
    if len(shape) != 3:
        _checks.fail("images", "training images (N, H, W)", f"shape {shape}")
    n = shape[0]
    steps, features = config.steps, config.features
    smallest = 2 ** (len(features) - 1)
    if min(shape[1:]) < smallest:
        _checks.fail(
            "features",
            f"at most {len(features)} blocks for images of side {min(shape[1:])} "
            f"(each block but the last halves the side; {len(features)} blocks need >= {smallest})",
            repr(features),
        )
    m = _mask_array(mask, spec, n)
    labels = _check_parents(parents, spec, n, m)

    dtype = jnp.asarray(images).dtype
    loc, scale = {}, {}
    for j, h in enumerate(spec):
        seen = labels[h.name][m[:, j]]
        if seen.size == 0:
            _checks.fail("mask", f"at least one observed label of head {h.name!r}", "none")
        if h.kind == "gaussian":
            sd = float(np.std(seen.astype(np.float64)))
            if not sd > 0:
                _checks.fail(
                    "parents",
                    f"observed {h.name!r} values that are not all equal",
                    f"all {seen[0]!r}",
                )
            loc[h.name] = jnp.asarray(np.mean(seen.astype(np.float64)), dtype)
            scale[h.name] = jnp.asarray(sd, dtype)
    targets = {
        h.name: jnp.asarray(np.where(m[:, j], labels[h.name], 0)).astype(
            dtype if h.kind == "gaussian" else jnp.int32
        )
        for j, h in enumerate(spec)
    }
    any_label = m.any(axis=1)
    p_unit = jnp.asarray(any_label / any_label.sum(), dtype)

    model = ParentPredictor(spec, tuple(int(f) for f in features), int(config.hidden), config.conv)
    step = _Step(
        model,
        int(config.batch_size),
        float(config.learning_rate),
        float(config.weight_decay),
        config.warmup_steps,
        int(steps),
    )
    k_init, k_data = jax.random.split(as_key(key))
    x = jnp.asarray(images)
    params = model.init(k_init, x[:1])
    data = {
        "images": x,
        "targets": targets,
        "mask": jnp.asarray(m),
        "p_unit": p_unit,
        "loc": loc,
        "scale": scale,
    }
    reporter = _training.Reporter(
        progress=progress,
        desc="anti-causal predictors",
        hint="lower the learning rate or check the images and labels",
    )
    out = _training.run(
        step,
        (params, step.optimizer().init(params)),
        data,
        key=k_data,
        steps=int(steps),
        chunk_steps=int(config.chunk_steps),
        reporter=reporter,
    )
    return AntiCausal(
        params=out.state[0],
        loc=loc,
        scale=scale,
        loss=jnp.asarray(out.history["loss"]),
        model=model,
    )
