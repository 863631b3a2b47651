"""Training an ensemble of classifiers — members that differ in their training data (a mask or
per-unit weights over one shared training set) and their key — as one jitted program.

The step of one member is a pure function (:func:`member_step`); one evaluation round of the
ensemble (:class:`EnsembleRound`) runs ``eval_every`` of them for every member
(:func:`cfjax.predictors.inference.map_members`, the members optionally spread over several devices by
:func:`cfjax.distributed.map_batch`, each device running its members' whole round), then
evaluates every member's validation AUC and keeps each member's best parameters. The loop, the
progress bar, the NaN guard and the checkpoints are :func:`cfjax._core.training.run`'s, its
step being the round.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import numpy.typing as npt

from cfjax import _checks
from cfjax import distributed as _dist
from cfjax._core import checkpoint as _ckpt
from cfjax._core import training as _training
from cfjax.predictors.config import EnsembleConfig, MemberObjectives, TrainOptions
from cfjax.predictors.data import MemberData, _check_training_set, member_data
from cfjax.predictors.inference import member_keys, replicate
from cfjax.predictors.objectives import Objective
from cfjax.predictors.rounds import EnsembleRound
from cfjax.predictors.sources import check_source
from cfjax.predictors.state import EnsembleState, _init_state, _pad_members, _place, _take_members
from cfjax.typing import ArrayLike, KeyLike, MeshLike, PyTree

__all__ = ["train"]

#: ``train``'s keyword arguments of earlier releases: ``old name -> (group argument, field)``.
_TRAIN_LEGACY = {
    "names": ("options", "names"),
    "progress": ("options", "progress"),
    "checkpoint_dir": ("options", "checkpoint_dir"),
    "max_rounds": ("options", "max_rounds"),
    "counterfactuals": ("objectives", "counterfactuals"),
    "groups": ("objectives", "groups"),
}


def _fold_train(old: dict[str, Any], kwargs: dict[str, Any]) -> str:
    """:func:`train`'s old keyword arguments into ``options`` and ``objectives``."""
    if any(k in old for k in ("counterfactuals", "groups")) and not isinstance(
        kwargs.get("objectives"), MemberObjectives
    ):
        kwargs["objectives"] = MemberObjectives(kwargs.get("objectives"))
    return _training.regroup(
        "train",
        old,
        kwargs,
        _TRAIN_LEGACY,
        {"options": TrainOptions, "objectives": MemberObjectives},
    )


@_training.legacy_keywords(_fold_train)
def train(
    model: nn.Module,
    images: ArrayLike,
    labels: ArrayLike,
    masks: ArrayLike,
    val_images: ArrayLike,
    val_labels: ArrayLike,
    config: EnsembleConfig = EnsembleConfig(),
    *,
    key: KeyLike | None = None,
    seeds: npt.ArrayLike | None = None,
    objectives: MemberObjectives | Objective | str | Sequence[Objective | str] | None = None,
    mesh: MeshLike = None,
    options: TrainOptions = TrainOptions(),
) -> EnsembleState:  # noqa: B008 (frozen)
    """Train M members at once, each on its own weighting of one shared training set.

    Member ``m`` starts from its key (``jax.random.split(key, M)[m]``, or
    ``jax.random.key(seeds[m])``: see :func:`cfjax.predictors.inference.member_keys`) and draws each
    minibatch (with replacement) with probability proportional to ``masks[m]``; every step of
    :func:`cfjax._core.training.run`'s loop is one evaluation round (:class:`EnsembleRound`):
    ``config.eval_every`` AdamW steps (warm-up and cosine decay) of every active member
    (:func:`~cfjax.predictors.inference.map_members`), then every member's validation AUC
    (:func:`cfjax.metrics.auc` on the validation logits). A member keeps the parameters of its
    best validation AUC and stops (frozen) after ``config.patience`` evaluations without
    improvement; training ends when every member has stopped. A member trained alone with the
    same seed and mask ends with the same parameters (to float rounding: the batched and
    single-member programs may round differently).

    With ``mesh`` the members are spread over its devices
    (:func:`cfjax.distributed.map_batch` in every round: each device runs its share of the
    members through the whole round, the shared images and validation set passed whole to every
    device, and the devices meet once a round, to count the active members); each member
    runs the same computation as on one device and ends with the same parameters. On a CPU this
    is what makes the cores work together: one member's step on small images is a chain of
    small convolutions that XLA's intra-op threads do not keep every core busy with, whereas
    members on separate devices run side by side, each on its own core. JAX sees one CPU device
    unless asked before it starts (:func:`cfjax.distributed.host_devices`, or
    ``XLA_FLAGS=--xla_force_host_platform_device_count=N``); ``train`` never asks.

    Args:
      model: the network, e.g. :class:`~cfjax.predictors.EffusionCNN` (a linen module).
      images: shared training images ``(N, H, W)``, floating point in [0, 1].
      labels: ``(N,)`` effusion labels in {0, 1}.
      masks: ``(M, N)`` boolean masks or non-negative weights (each row with a positive sum),
        e.g. the rows of :func:`cfjax.study.paper_family`.
      val_images: validation images ``(V, H, W)``; ``val_labels``: ``(V,)`` with both classes.
      config: :class:`EnsembleConfig`.
      key: the ensemble's key (typed key, raw key data or int seed): member ``m`` gets
        ``split(key, M)[m]`` (initialisation and minibatch order).
      seeds: instead of ``key``, ``(M,)`` non-negative integer seeds, one per member (paper
        000's family pairs its predictors by seed: see :func:`cfjax.predictors.inference.member_keys`).
      objectives: each member's training objective (:class:`cfjax.predictors.Objective` or its
        name): None (every member basic), one for every member, or a sequence of M; or a
        :class:`MemberObjectives`, which also holds what they read: the counterfactual source
        of the training units (:mod:`cfjax.predictors.sources`, e.g.
        :meth:`cfjax.data.ChestSCM.counterfactual_source`), needed when an objective reads
        counterfactuals (a step renders its minibatch's counterfactual images inside the
        compiled program), and the training units' groups ``(N,)`` in ``[0, G)`` (e.g. sex ×
        label), needed by ``"group_dro"`` members (each keeps its own group weights,
        ``state.group_weights``). Members of one kind
        (:attr:`~cfjax.predictors.Objective.kind`: the name and CVaR level) train as one
        vmapped group, each with its own strength; each kind is one program per round, so a
        basic member never renders a counterfactual.
      mesh: the devices to spread the members over: None (one device), a device count, a
        sequence of devices or a one-axis ``jax.sharding.Mesh``. M need not be a multiple of
        the devices (the padding is :func:`cfjax.distributed.map_batch`'s and never appears in
        the state or the checkpoints, which are the same whatever the devices: a run may
        resume on other devices).
      options: the progress bar, the member names in messages, the checkpoints and where
        this call stops (:class:`TrainOptions`).

    The keyword arguments of earlier releases (``names``, ``progress``, ``checkpoint_dir``,
    ``max_rounds``: :class:`TrainOptions`; ``counterfactuals``, ``groups``:
    :class:`MemberObjectives`) still work for one release, with a ``DeprecationWarning``.

    Returns:
      The final :class:`EnsembleState` (with ``mesh``, gathered onto its first device);
      ``best_params`` is the trained ensemble (feed it to :func:`cfjax.predictors.predict`).

    Raises:
      TrainingError: a member's loss became NaN or infinite (names the member and the step).
      cfjax.ValidationError: bad arguments, or a checkpoint of a different run in
        ``checkpoint_dir``.

    Example:
      >>> from cfjax.predictors import EffusionCNN
      >>> rng = np.random.default_rng(0)
      >>> y = rng.integers(0, 2, 64)
      >>> x = (rng.uniform(size=(64, 16, 16)) * 0.5 + 0.5 * y[:, None, None]).astype(np.float32)
      >>> config = EnsembleConfig(steps=20, batch_size=8, warmup=2, eval_every=10)
      >>> quiet = TrainOptions(progress=False)
      >>> state = train(EffusionCNN(features=(4,)), x, y, np.ones((2, 64), bool), x, y, config, key=0,
      ...               options=quiet)
      >>> state.best_auc.shape, int(state.step)
      ((2,), 20)
      >>> one = train(EffusionCNN(features=(4,)), x, y, np.ones((2, 64), bool), x, y, config, key=0,
      ...             options=quiet, mesh=1)
      >>> bool(jnp.all(one.best_auc == state.best_auc))
      True
    """
    if not isinstance(model, nn.Module):
        _checks.fail("model", "a flax linen Module", repr(model))
    if not isinstance(config, EnsembleConfig):
        _checks.fail("config", "an EnsembleConfig", repr(config))
    if not isinstance(options, TrainOptions):
        _checks.fail("options", "a TrainOptions", repr(options))
    names, progress, checkpoint_dir, max_rounds = (
        options.names,
        options.progress,
        options.checkpoint_dir,
        options.max_rounds,
    )
    counterfactuals, groups = None, None
    if isinstance(objectives, MemberObjectives):
        counterfactuals, groups = objectives.counterfactuals, objectives.groups
        objectives = objectives.objectives
    _check_training_set(images, labels, masks, "masks")
    m = _checks.shape_of(masks)[0]
    keys = member_keys(m if key is not None else None, key=key, seeds=seeds)
    if keys.shape[0] != m:
        _checks.fail("seeds", f"{m} seeds, one per row of `masks`", f"{keys.shape[0]}")
    image_shape = _checks.shape_of(images)[1:]
    _checks.check_ndim("val_images", val_images, 3, "of shape (V, H, W)")
    if _checks.shape_of(val_images)[1:] != image_shape:
        _checks.fail(
            "val_images",
            f"images of size {image_shape} like `images`",
            f"shape {_checks.shape_of(val_images)}",
        )
    _checks.check_nonempty("val_images", val_images)
    _checks.check_finite("val_images", val_images)
    _checks.check_ndim("val_labels", val_labels, 1, "of shape (V,)")
    _checks.check_same_len("val_images", val_images, "val_labels", val_labels)
    _checks.check_binary_labels("val_labels", val_labels)
    n_pos = int(np.sum(np.asarray(val_labels) == 1))
    if n_pos in (0, len(np.asarray(val_labels))):
        _checks.fail(
            "val_labels", "both classes for a validation AUC", f"only class {int(n_pos > 0)}"
        )
    if names is not None:
        names = [str(n) for n in names]
        if len(names) != m:
            _checks.fail("names", f"{m} names, one per member", f"{len(names)}")
    if max_rounds is not None:
        max_rounds = _checks.check_positive_int("max_rounds", max_rounds)
    where = _dist.as_mesh(mesh)
    member_objectives = _member_objectives(objectives, m)
    plan = _plan(member_objectives)
    n = _checks.shape_of(images)[0]
    if any(o.needs_counterfactuals for o in member_objectives):
        if counterfactuals is None:
            needing = sorted({o.name for o in member_objectives if o.needs_counterfactuals})
            _checks.fail(
                "counterfactuals", f"a counterfactual source for the objective(s) {needing}", "None"
            )
        check_source(counterfactuals, n, tuple(image_shape))
    else:
        counterfactuals = None
    unit_groups, num_groups = None, 1
    if any(o.needs_groups for o in member_objectives):
        unit_groups, num_groups = _check_groups(groups, n)

    strengths = np.array([o.strength for o in member_objectives]) if plan else None
    data = member_data(images, labels, masks, strengths=strengths, groups=unit_groups)
    dtype = data.images.dtype
    val = (jnp.asarray(val_images).astype(dtype), jnp.asarray(val_labels).astype(dtype))
    state = _init_state(
        model, config, keys, tuple(int(v) for v in image_shape), jnp.dtype(dtype), num_groups
    )
    meta = _run_metadata(model, config, data, keys, member_objectives, counterfactuals)
    extra = 0
    if where is not None:
        # M padded once to a multiple of the devices with stopped copies of the last member,
        # so that every step's members stay on their devices (unpadded, map_batch would pad,
        # split and gather the whole state at every step). Not with a checkpoint, which must
        # resume on any devices: there the members are padded at every step.
        extra = 0 if checkpoint_dir is not None else -m % where.size
        state, data = _pad_members(state, data, extra)
        if (
            extra and plan
        ):  # the padding (copies of the last member) steps in the last member's group
            plan = tuple(
                (o, idx + tuple(range(m, m + extra)) if m - 1 in idx else idx) for o, idx in plan
            )
        state, data, val = _place(state, data, val, where)
        counterfactuals = replicate(counterfactuals, where) if counterfactuals is not None else None
    store = None if checkpoint_dir is None else _ckpt.CheckpointStore(checkpoint_dir)
    member_names = tuple(f"{i}" + ("" if names is None else f" ({names[i]!r})") for i in range(m))
    try:
        reporter = _training.Reporter(
            progress=progress,
            desc="training",
            postfix=("mean_loss", "active"),
            hint="lower `config.learning_rate` or check the images and labels for NaN",
            member_names=member_names + tuple(f"{m + i} (padding)" for i in range(extra)),
            locate=lambda metrics, m: f"at step {int(metrics['bad_step'][m])}",
        )
        result = _training.run(
            EnsembleRound(model, config, where, plan),
            state,
            (data,) + val + (counterfactuals,),
            key=0,
            steps=config.steps,
            chunk_steps=config.eval_every,
            stride=config.eval_every,
            guard="loss",
            max_chunks=max_rounds,
            reporter=reporter,
            checkpoint=None if store is None else _training.Checkpointing(store, meta),
        )
    finally:
        if store is not None:
            store.close()
    if where is None:
        return result.state
    state = jax.device_put(result.state, where.devices.flat[0])
    return _take_members(state, m) if extra else state


def _member_objectives(
    objectives: Objective | str | Sequence[Objective | str] | None, m: int
) -> tuple[Objective, ...]:
    """Each member's :class:`Objective` from ``train``'s ``objectives``."""

    def one(o):
        if isinstance(o, Objective):
            return o
        if isinstance(o, str):
            return Objective(o)
        _checks.fail("objectives", "an Objective or an objective's name per member", repr(o))

    if objectives is None:
        return (Objective(),) * m
    if isinstance(objectives, (Objective, str)):
        return (one(objectives),) * m
    out = tuple(one(o) for o in objectives)
    if len(out) != m:
        _checks.fail("objectives", f"{m} objectives, one per member", f"{len(out)}")
    return out


def _plan(objectives: tuple[Objective, ...]) -> tuple[tuple[Objective, tuple[int, ...]], ...]:
    """The members grouped by objective kind, in order of first appearance; empty when every
    member is basic (the plain program)."""
    kinds: dict[Objective, list[int]] = {}
    for i, o in enumerate(objectives):
        kinds.setdefault(o.kind, []).append(i)
    if list(kinds) == [Objective()]:
        return ()
    return tuple((k, tuple(v)) for k, v in kinds.items())


def _check_groups(groups: npt.ArrayLike | None, n: int) -> tuple[jax.Array, int]:
    """``(groups (N,) int32, G)`` checked for group DRO."""
    if groups is None:
        _checks.fail(
            "groups", f"each training unit's group, shape ({n},), for 'group_dro' members", "None"
        )
    g = np.asarray(groups)
    if g.shape != (n,):
        _checks.fail("groups", f"shape ({n},), one group per training unit", f"shape {g.shape}")
    if g.dtype == bool or not np.issubdtype(g.dtype, np.integer) or (g < 0).any():
        _checks.fail(
            "groups",
            "non-negative integer groups",
            f"dtype {g.dtype}"
            if g.dtype == bool or not np.issubdtype(g.dtype, np.integer)
            else f"minimum {g.min()}",
        )
    return jnp.asarray(g, jnp.int32), int(g.max()) + 1


def _run_metadata(
    model: nn.Module,
    config: EnsembleConfig,
    data: MemberData,
    keys: jax.Array,
    objectives: tuple[Objective, ...] = (),
    source: PyTree = None,
) -> dict[str, Any]:
    """What identifies a run in its checkpoints (the images enter by shape and dtype only)."""
    run = {
        "model": repr(model),
        "config": dataclasses.asdict(config),
        "images": [list(data.images.shape), str(data.images.dtype)],
        "data": _ckpt.digest(data.labels, data.cdf),
        "keys": _ckpt.digest(jax.random.key_data(keys)),
    }
    if any(o != Objective() for o in objectives):  # a basic run's metadata is as before
        run["objectives"] = [repr(o) for o in objectives]
        if data.groups is not None:
            run["groups"] = _ckpt.digest(data.groups)
        if source is not None:
            run["counterfactuals"] = [type(source).__name__, _ckpt.digest(*jax.tree.leaves(source))]
    return json.loads(json.dumps(run))
