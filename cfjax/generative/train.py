"""Training the learned image mechanism (:class:`~cfjax.generative.mechanism.ImageHVAE`) of a
deep SCM: the conditional HVAE fitted by maximising its evidence lower bound on SCM data, the
image's parents fed exactly as :class:`cfjax.scm.SCM` feeds them to the node's mechanism.

The step is a pure function (:func:`train_step`): a minibatch drawn with the step's key
``fold_in(data_key, step)``, the weighted negative ELBO per pixel (KL warm-up, free bits), one
clipped AdamW update with warm-up and cosine decay, and the EMA of the parameters (the settings:
:class:`GeneratorConfig`, module :mod:`cfjax.generative.train_config`). :func:`fit_generator`
runs it with cfjax's one training loop (:func:`cfjax._core.training.run`: compiled chunks, a
progress bar, the NaN guard, an orbax checkpoint after every chunk); a run resumed from its
latest checkpoint ends with the same parameters as an uninterrupted one.

Semi-supervised training (paper 000, appendix; Ribeiro et al. 2023): a parent label may be
missing per unit (``mask``); the anti-causal predictors ``q(pa | x)``
(:mod:`cfjax.generative.anticausal`) impute it, and each unit's loss is weighted by the product
over its imputed discrete parents of ``1 − H(q)/log C`` (:func:`impute_parents`, module
:mod:`cfjax.generative.parents`).

Counterfactual regularisation (paper 000, "Counterfactual Regularisation"): with
``config.cf_weight > 0`` and frozen anti-causal predictors (``regulariser``), every step also
intervenes on one random parent of each unit (:func:`counterfactual_targets`, module
:mod:`cfjax.generative.regulariser`), forms its counterfactual image
``x̃ = forward(abduct(x, pa), pa*)`` through the HVAE (differentiable) and adds the predictors'
loss of ``q(pa | x̃)`` against ``pa*`` (:func:`counterfactual_loss`): the image has to carry
the intervened parent's new value and keep the others.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
from collections.abc import Mapping
from typing import Any, NamedTuple, cast

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import struct

from cfjax import _checks, _deprecations
from cfjax._core import checkpoint as _ckpt
from cfjax._core import training as _training
from cfjax._core.keys import as_key
from cfjax.generative import anticausal as _ac
from cfjax.generative.anticausal import _check_images
from cfjax.generative.hvae import (
    HVAE,
    HVAEConfig,  # noqa: F401 (the examples use it)
    HVAEOutput,
    gaussian_log_prob,
)
from cfjax.generative.mechanism import ImageHVAE
from cfjax.generative.parents import _check_node, impute_parents, parent_inputs
from cfjax.generative.regulariser import Regulariser, counterfactual_targets, make_regulariser
from cfjax.generative.train_config import GeneratorConfig
from cfjax.scm import SCM
from cfjax.typing import KeyLike, PyTree

__all__ = [
    "GeneratorConfig",
    "GeneratorData",
    "GeneratorState",
    "GeneratorFit",
    "parent_inputs",
    "impute_parents",
    "generator_loss",
    "init_state",
    "train_step",
    "fit_generator",
    "Regulariser",
    "make_regulariser",
    "counterfactual_targets",
    "counterfactual_loss",
]


# ----------------------------------------------------------------------- the step
class GeneratorData(NamedTuple):
    """The training set: ``images (N, H, W)``, encoded ``parents (N, P)`` and ``weights (N,)``;
    ``regulariser``: the counterfactual regulariser (:class:`Regulariser`), or None (needed when
    ``config.cf_weight > 0``)."""

    images: jax.Array
    parents: jax.Array
    weights: jax.Array
    regulariser: Any = None


def _check_generator_images(images: Any, config: GeneratorConfig, name: str) -> None:
    """Training images (the anti-causal predictors' checks), of the network's size."""
    shape = _check_images(name, images)
    if len(shape) != 3 or shape[1:] != config.hvae.image_shape:
        want = config.hvae.image_shape
        _checks.fail(
            name,
            f"images of shape (N, {want[0]}, {want[1]}) (config.hvae.image_size)",
            f"shape {shape}",
        )


def _cf_term(
    config: GeneratorConfig,
    params: PyTree,
    reg: Regulariser,
    out: Any,
    images: jax.Array,
    pa_star: jax.Array,
    targets: jax.Array,
) -> jax.Array:
    """The regulariser from a posterior pass ``out`` (its latents and pixel noise abducted)."""
    eps = (images - out.loc) * jnp.exp(-out.log_scale)
    cf = cast(HVAEOutput, HVAE(config.hvae).apply(params, pa_star, None, out.eps))
    x_cf = cf.loc + jnp.exp(cf.log_scale) * eps
    q = jax.lax.stop_gradient(reg.predictor)
    spec = q.spec
    tg = {h.name: targets[:, j] for j, h in enumerate(spec)}
    mask = jnp.ones((images.shape[0], len(spec)), bool)
    total, _ = _ac.anticausal_loss(q.params, q.model, q.loc, q.scale, x_cf, tg, mask)
    return total


def _posterior_pass(
    config: GeneratorConfig, params: PyTree, images: jax.Array, parents: jax.Array, key: jax.Array
) -> Any:
    shapes = config.hvae.latent_shapes
    b = images.shape[0]
    keys = jax.random.split(key, len(shapes))
    xi = tuple(jax.random.normal(k, (b,) + s, images.dtype) for k, s in zip(keys, shapes))
    return HVAE(config.hvae).apply(params, parents, images, xi, 1.0)


def counterfactual_loss(
    config: GeneratorConfig,
    params: PyTree,
    reg: Regulariser,
    images: jax.Array,
    parents: jax.Array,
    pa_star: jax.Array,
    targets: jax.Array,
    key: jax.Array,
) -> jax.Array:
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


def init_state(config: GeneratorConfig, parent_dim: int, *, key: KeyLike) -> GeneratorState:
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
    return GeneratorState(
        params=params,
        ema_params=params,
        opt_state=config.optimizer().init(params),
        step=jnp.zeros((), jnp.int32),
    )


def generator_loss(
    config: GeneratorConfig,
    params: PyTree,
    images: jax.Array,
    parents: jax.Array,
    weights: jax.Array,
    key: jax.Array,
    kl_weight: jax.Array,
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


def _elbo_terms(
    config: GeneratorConfig, out: Any, images: jax.Array, weights: jax.Array, kl_weight: jax.Array
) -> tuple[jax.Array, dict[str, jax.Array]]:
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
    kl = cast(jax.Array, sum(kls))  # an array: at least one latent level
    return loss, {"loss": loss, "rec": rec_mean / pixels, "kl": kl / pixels}


def train_step(
    config: GeneratorConfig, state: GeneratorState, data: GeneratorData, key: jax.Array
) -> tuple[GeneratorState, dict[str, jax.Array]]:
    """One optimisation step with the step's own ``key`` (:func:`fit_generator` passes
    ``fold_in(data_key, t)`` at step ``t``): ``config.batch_size`` units drawn uniformly with
    replacement, :func:`generator_loss` with the step's KL weight, one clipped AdamW update,
    the EMA. Pure (jit it with ``config`` static); it runs under the caller's dtype promotion,
    strict or standard.

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
            config,
            state.params,
            data.images[idx],
            data.parents[idx],
            data.weights[idx],
            k_post,
            config.kl_weight(state.step),
        )
    else:
        reg = data.regulariser
        if reg is None:
            raise ValueError(
                "`data`: expected a regulariser (GeneratorData.regulariser) with config.cf_weight > 0."
            )
        pa_star, targets, _ = counterfactual_targets(
            reg, jax.random.fold_in(key, 1), reg.labels[idx], data.parents[idx]
        )
        w_cf = config.cf_weight_at(state.step)

        def loss_fn(params):
            images, parents = data.images[idx], data.parents[idx]
            out = _posterior_pass(config, params, images, parents, k_post)
            loss, metrics = _elbo_terms(
                config, out, images, data.weights[idx], config.kl_weight(state.step)
            )
            cf = _cf_term(config, params, reg, out, images, pa_star, targets)
            loss = loss + w_cf * cf
            return loss, {**metrics, "loss": loss, "cf": cf}

        grads, metrics = jax.grad(loss_fn, has_aux=True)(state.params)
    updates, opt_state = config.optimizer().update(grads, state.opt_state, state.params)
    params = optax.apply_updates(state.params, updates)
    d = config.ema_decay_at(state.step)
    ema = jax.tree.map(lambda e, p: (d * e + (1 - d) * p).astype(e.dtype), state.ema_params, params)
    new = dataclasses.replace(
        state, params=params, ema_params=ema, opt_state=opt_state, step=state.step + 1
    )
    return new, metrics


@dataclasses.dataclass(frozen=True)
class _Step:
    """:func:`train_step` of ``config`` as the training loop's hashable step."""

    config: GeneratorConfig

    def __call__(
        self, state: GeneratorState, data: GeneratorData, key: jax.Array
    ) -> tuple[GeneratorState, dict[str, jax.Array]]:
        return train_step(self.config, state, data, key)


# ----------------------------------------------------------------------- the loop
class GeneratorFit(NamedTuple):
    """:func:`fit_generator`'s result.

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


def fit_generator(
    data: Mapping[str, Any],
    config: GeneratorConfig = GeneratorConfig(),
    *,
    scm: SCM,
    key: KeyLike,  # noqa: B008 (frozen)
    node: str = "image",
    mask: Mapping[str, Any] | None = None,
    anticausal: Any = None,
    regulariser: Any = None,
    checkpoint_dir: str | os.PathLike | None = None,
    progress: bool | None = None,
    max_chunks: int | None = None,
) -> GeneratorFit:
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
      >>> fit = fit_generator({"s": s, "image": x}, GeneratorConfig(cfg, steps=4, batch_size=4, warmup=1, chunk_steps=2),
      ...                     scm=scm, key=0, progress=False)
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
        _checks.fail(
            "regulariser", "an AntiCausal (train_anticausal's result)", type(regulariser).__name__
        )
    if config.cf_weight > 0 and regulariser is None:
        _checks.fail(
            "regulariser", "anti-causal predictors (AntiCausal) when config.cf_weight > 0", "None"
        )
    completed, weights = impute_parents(scm, node, data, mask, anticausal)
    pa = parent_inputs(scm, node, completed)
    dtype = jnp.result_type(float)
    images = jnp.asarray(data[node]).astype(dtype)
    reg = make_regulariser(scm, node, regulariser, completed) if config.cf_weight > 0 else None
    train_data = GeneratorData(images, pa.astype(dtype), weights.astype(dtype), reg)

    init_key, data_key = jax.random.split(key)
    state = _init_state(config, int(pa.shape[1]), init_key)
    run = {
        "config": dataclasses.asdict(config),
        "images": [list(images.shape), str(images.dtype)],
        "data": _ckpt.digest(pa, weights),
        "key": _ckpt.digest(jax.random.key_data(key)),
    }
    if reg is not None:
        run["regulariser"] = _ckpt.digest(reg.labels, *jax.tree.leaves(reg.predictor.params))
    store = _ckpt.CheckpointStore(checkpoint_dir) if checkpoint_dir is not None else None
    try:
        out = _training.run(
            _Step(config),
            state,
            train_data,
            key=data_key,
            steps=config.steps,
            chunk_steps=config.chunk_steps,
            max_chunks=max_chunks,
            reporter=_training.Reporter(
                progress=progress,
                desc="generator",
                postfix=("loss", "rec", "kl"),
                hint="lower `config.learning_rate` or `config.clip_norm`, or check the images and parents",
            ),
            checkpoint=None
            if store is None
            else _training.Checkpointing(store, json.loads(json.dumps(run))),
        )
    finally:
        if store is not None:
            store.close()
    history = {**out.history, "step": np.arange(out.steps)}
    return GeneratorFit(
        mechanism=ImageHVAE(config.hvae, config.temperature),
        params=out.state.ema_params,
        raw_params=out.state.params,
        history=history,
    )


#: ``train`` is :func:`fit_generator`'s old name (it fits a model of the data: docs/contract.md §6).
_DEPRECATED = {"train": ("cfjax.generative.fit_generator", fit_generator)}
__getattr__ = _deprecations.getattr_for(__name__, _DEPRECATED)
