"""The one training loop of cfjax: a pure step run in compiled chunks.

Every trainer (the SCM's maximum likelihood, the HVAE image mechanism, the anti-causal parent
predictors, the predictor ensembles) writes one pure step::

    step(state, data, key) -> (state, metrics)

(``state`` any pytree, ``data`` the pytree of training arrays, ``key`` the step's own key,
``metrics`` a dict of scalars or per-member vectors), and :func:`run` does the rest: ``lax.scan``
over ``chunk_steps`` steps inside one compiled program, a tqdm bar between chunks, a NaN/inf
guard that names the step, held-out early stopping, orbax checkpoints with resume; what it shows
and says is a :class:`Reporter`'s, the held-out evaluation a :class:`Validation`'s, the checkpoints
a :class:`Checkpointing`'s. The loop
runs under the caller's dtype promotion, strict or standard (a step's optax transformation
goes through :func:`cfjax._core.optim.standard_promotion`).

Step ``t`` (counted from 0 over the whole run) gets ``jax.random.fold_in(key, t)``, so a run
split into chunks, stopped and resumed from a checkpoint, takes the same steps as one run.
A step may take several training steps at once (``stride``): the ensembles' step is a whole
evaluation round, so that members spread over devices meet once a round, not once a step.
``data`` is an argument of the compiled chunk, not a constant closed over, so a second call
with other data of the same shapes reuses the compilation; so does a ``step`` that compares
equal (a module-level function, or a frozen dataclass with ``__call__``).
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import warnings
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple, TypeVar

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct
from tqdm.auto import tqdm

from cfjax._core.checkpoint import CheckpointStore
from cfjax._core.keys import as_key
from cfjax._errors import TrainingError, ValidationError
from cfjax.typing import Array, KeyLike, PyTree

__all__ = ["Checkpointing", "Loop", "LoopResult", "Reporter", "Validation", "run"]

#: a pure step ``(state, data, key) -> (state, metrics)``
Step = Callable[[PyTree, PyTree, Array], tuple[PyTree, Mapping[str, Array]]]

_R = TypeVar("_R")


@struct.dataclass
class Loop:
    """The loop's carry: the trainer's state, the step count, the first step whose guarded
    metric was not finite (-1: none; -2 - i: element i of a vector metric at ``bad_step``),
    and the history of every metric."""

    state: PyTree
    step: jax.Array
    bad_step: jax.Array
    bad_index: jax.Array
    history: dict[str, jax.Array]


class LoopResult(NamedTuple):
    """:func:`run`'s result.

    Attributes:
      state: the state after the last step run.
      best: with ``validate``: the state with the lowest held-out value; otherwise ``state``.
      history: ``{metric: (calls, ...)}`` host arrays, one row per call of ``step`` (per
        training step unless ``stride`` > 1).
      steps: steps run (fewer than asked when stopped early or by ``max_chunks``).
      validation: ``(chunks,)`` held-out values after each chunk (empty without ``validate``).
      validation_steps: ``(chunks,)`` the step count at each held-out value.
      best_step: the step count of ``best``.
      finished: whether all ``steps`` ran or early stopping ended the run (False after
        ``max_chunks`` with steps left).
      best_value: the lowest held-out value (inf without ``validate``).
      since: chunks since that value (what ``patience`` counts; pass both on to a next run).
    """

    state: PyTree
    best: PyTree
    history: dict[str, np.ndarray]
    steps: int
    validation: np.ndarray
    validation_steps: np.ndarray
    best_step: int
    finished: bool
    best_value: float = np.inf
    since: int = 0


def _select(flag: jax.Array, new: PyTree, old: PyTree) -> PyTree:
    return jax.tree.map(lambda a, b: jnp.where(flag, a, b), new, old)


@functools.partial(jax.jit, static_argnames=("step", "length", "total", "guard"))
def _chunk(
    loop: Loop,
    data: PyTree,
    key: jax.Array,
    *,
    step: Step,
    length: int,
    total: int,
    guard: str | None,
) -> Loop:
    """``length`` steps of ``step``; steps at or past ``total`` (the last chunk's padding) are
    skipped, and a step whose ``guard`` metric is not finite keeps the state it started from."""

    def body(carry: Loop, _):
        live = carry.step < total

        def advance(carry):
            new, metrics = step(carry.state, data, jax.random.fold_in(key, carry.step))
            keep = jnp.asarray(True)
            bad_index = carry.bad_index
            if guard is not None:
                finite = jnp.isfinite(metrics[guard])
                keep = jnp.all(finite)
                first = (carry.bad_step < 0) & ~keep
                bad_index = jnp.where(
                    first, jnp.argmin(finite.reshape(-1)).astype(jnp.int32), carry.bad_index
                )
            history = {
                name: h.at[carry.step].set(jnp.asarray(metrics[name], h.dtype))
                for name, h in carry.history.items()
            }
            bad_step = jnp.where((carry.bad_step < 0) & ~keep, carry.step, carry.bad_step)
            return Loop(
                _select(keep, new, carry.state), carry.step + 1, bad_step, bad_index, history
            )

        return jax.lax.cond(live, advance, lambda c: c, carry), None

    loop, _ = jax.lax.scan(body, loop, None, length=length)
    return loop


def _history(
    step: Step, state: PyTree, data: PyTree, key: jax.Array, total: int
) -> dict[str, jax.Array]:
    shapes = jax.eval_shape(step, state, data, key)[1]
    return {name: jnp.full((total,) + s.shape, jnp.nan, s.dtype) for name, s in shapes.items()}


@dataclasses.dataclass(frozen=True)
class Reporter:
    """What a run shows and says: its progress bar and the message of a diverged step.

    Attributes:
      progress: show a tqdm bar on stderr; None: only when stderr is a terminal.
      desc: the bar's label and the error messages' subject.
      postfix: metrics shown on the bar (their mean over the last chunk).
      hint: what to try when the loss diverges, appended to the error.
      member_names: names of the elements of a vector guarded metric (members), for the error.
      locate: ``(metrics, element) -> "at step …"``: where in the failing call the guard failed,
        for the error (``metrics`` that call's, as host arrays; ``element`` the non-finite one's
        index, 0 for a scalar); default: the call's first step.
    """

    progress: bool | None = None
    desc: str = "training"
    postfix: tuple[str, ...] = ("loss",)
    hint: str = "lower the learning rate or check the data"
    member_names: tuple[str, ...] | None = None
    locate: Callable[[Mapping[str, np.ndarray], int], str] | None = None

    def bar(self, total: int, initial: int) -> tqdm:
        """The run's progress bar over ``total`` training steps, ``initial`` of them already run."""
        return tqdm(
            total=total,
            initial=initial,
            desc=self.desc,
            unit="step",
            dynamic_ncols=True,
            disable=None if self.progress is None else not self.progress,
        )

    def diverged(
        self,
        guard: str,
        metrics: Mapping[str, np.ndarray],
        element: int,
        vector: bool,
        first_step: int,
    ) -> TrainingError:
        """The error of a call whose ``guard`` metric was not finite: ``metrics`` that call's,
        ``element`` the non-finite one's index (of a ``vector`` metric), ``first_step`` the call's
        first training step."""
        where = ""
        if self.member_names is not None:
            where = f" of member {self.member_names[element]}"
        elif vector:
            where = f" of element {element}"
        at = self.locate(metrics, element) if self.locate is not None else f"at step {first_step}"
        return TrainingError(
            f"{self.desc} diverged: the {guard}{where} was NaN or infinite {at}; {self.hint}."
        )


@dataclasses.dataclass(frozen=True)
class Validation:
    """Held-out evaluation after every chunk, the best state kept, and early stopping.

    Attributes:
      validate: ``state -> scalar``, lower is better (e.g. a held-out negative
        log-likelihood), evaluated after every chunk; the best state is kept.
      patience: stop after this many chunks without a lower value (None: run every step).
      best_value, since: the early-stopping state carried over from an earlier run of the same
        fit (its :class:`LoopResult`'s): this run's states are kept only below ``best_value``,
        and ``patience`` counts on from ``since`` chunks.
    """

    validate: Callable[[PyTree], jax.Array]
    patience: int | None = None
    best_value: float = np.inf
    since: int = 0


@dataclasses.dataclass(frozen=True)
class Checkpointing:
    """Where a run saves its loop after every chunk, and what identifies it on resume.

    Attributes:
      store: a :class:`CheckpointStore`: the loop is saved after every chunk, and a run whose
        ``meta`` equals the saved one resumes from the latest checkpoint.
      meta: JSON-serialisable description of the run, compared on resume.
    """

    store: CheckpointStore
    meta: Mapping[str, Any] | None = None


def legacy_keywords(
    fold: Callable[[dict[str, Any], dict[str, Any]], str],
) -> Callable[[Callable[..., _R]], Callable[..., _R]]:
    """A decorator: the keyword arguments a function no longer takes are handed to
    ``fold(old, kwargs)``, which puts them into ``kwargs`` in their new form (raising TypeError
    for a name it does not know) and returns that new spelling, named by a
    ``DeprecationWarning``. The function's signature (``inspect.signature``) is its new one."""

    def decorate(fn: Callable[..., _R]) -> Callable[..., _R]:
        names = set(inspect.signature(fn).parameters)

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> _R:
            old = {k: kwargs.pop(k) for k in list(kwargs) if k not in names}
            if old:
                given = ", ".join(f"{k}=" for k in old)
                new = fold(old, kwargs)
                warnings.warn(
                    f"{fn.__module__}.{fn.__name__}({given}) is deprecated and will be removed in the "
                    f"next release: use {new}",
                    DeprecationWarning,
                    stacklevel=2,
                )
            return fn(*args, **kwargs)

        return wrapper

    return decorate


def regroup(
    function: str,
    old: Mapping[str, Any],
    kwargs: dict[str, Any],
    table: Mapping[str, tuple[str, str]],
    factories: Mapping[str, Callable[..., Any]],
) -> str:
    """``old`` keyword arguments of ``function`` folded into their groups' dataclasses in
    ``kwargs``: ``table`` maps an old name to ``(group argument, field)``, ``factories`` a
    group to the callable building it from its fields (the group's ``kwargs`` value, when
    given, updated with ``dataclasses.replace``). Returns the new spelling, for the warning."""
    unknown = [k for k in old if k not in table]
    if unknown:
        raise TypeError(f"{function}() got an unexpected keyword argument {unknown[0]!r}")
    fields: dict[str, dict[str, Any]] = {}
    for name, value in old.items():
        group, field = table[name]
        fields.setdefault(group, {})[field] = value
    spelled = []
    for group, values in fields.items():
        current = kwargs.get(group)
        kwargs[group] = (
            factories[group](**values)
            if current is None
            else dataclasses.replace(current, **values)
        )
        spelled.append(
            f"{group}={getattr(factories[group], '__name__', group)}"
            f"({', '.join(f'{f}=...' for f in values)})"
        )
    return ", ".join(spelled)


#: ``run``'s keyword arguments of earlier releases: ``old name -> (group argument, field)``.
_RUN_LEGACY = {
    **{
        name: ("reporter", name)
        for name in ("progress", "desc", "postfix", "hint", "member_names", "locate")
    },
    **{name: ("validation", name) for name in ("validate", "patience", "best_value", "since")},
    "store": ("checkpoint", "store"),
    "meta": ("checkpoint", "meta"),
}


def _fold_run(old: dict[str, Any], kwargs: dict[str, Any]) -> str:
    """:func:`run`'s old keyword arguments into ``reporter``, ``validation`` and ``checkpoint``
    (an old ``validate`` or ``store`` of None, or their group's other fields alone, as before:
    no validation, no checkpoints)."""
    for group, lead in (("validation", "validate"), ("checkpoint", "store")):
        names = [k for k, (g, _) in _RUN_LEGACY.items() if g == group]
        if any(k in old for k in names) and kwargs.get(group) is None and old.get(lead) is None:
            for k in names:
                old.pop(k, None)
            kwargs.pop(group, None)
    return (
        regroup(
            "run",
            old,
            kwargs,
            _RUN_LEGACY,
            {"reporter": Reporter, "validation": Validation, "checkpoint": Checkpointing},
        )
        or "the defaults"
    )


@legacy_keywords(_fold_run)
def run(
    step: Step,
    state: PyTree,
    data: PyTree,
    *,
    key: KeyLike,
    steps: int,
    chunk_steps: int = 100,
    stride: int = 1,
    guard: str | None = "loss",
    max_chunks: int | None = None,
    reporter: Reporter = Reporter(),
    validation: Validation | None = None,
    checkpoint: Checkpointing | None = None,
) -> LoopResult:
    """Run ``steps`` steps of ``step`` from ``state`` on ``data``.

    Args:
      step: the pure step ``(state, data, key) -> (state, metrics)``; hashable (compiled once
        per step, shapes and chunk length).
      state: the initial state (a pytree of arrays).
      data: the training arrays (a pytree), passed to every step.
      key: the run's key (typed key, raw key data or int); step t gets ``fold_in(key, t)``.
      steps: steps in all.
      chunk_steps: steps per compiled chunk (the bar, the held-out value and the checkpoint are
        updated between chunks; the steps taken do not depend on it).
      stride: training steps one call of ``step`` takes (a step that runs several inside, e.g. an
        ensemble's evaluation round of ``eval_every`` steps, each device's members through all of
        them without meeting the others): ``steps``, ``chunk_steps`` (a multiple of it), the bar,
        the checkpoints' labels and the result's step counts are training steps; call ``i``
        covers steps ``[i·stride, (i + 1)·stride)`` (the last fewer) and gets ``fold_in(key, i)``.
      guard: the metric whose non-finite value stops training with :class:`TrainingError`
        naming the step (None: no guard). The failing step changes nothing.
      max_chunks: run at most this many chunks in this call.
      reporter: the progress bar and the messages (:class:`Reporter`).
      validation: held-out evaluation and early stopping (:class:`Validation`; None: none).
      checkpoint: the checkpoint store and the run's description (:class:`Checkpointing`;
        None: no checkpoints).

    Returns:
      :class:`LoopResult`.

    The keyword arguments of earlier releases (``progress``, ``desc``, ``postfix``, ``hint``,
    ``member_names``, ``locate``; ``validate``, ``patience``, ``best_value``, ``since``;
    ``store``, ``meta``) still work for one release, with a ``DeprecationWarning``.
    """
    rep = reporter
    validate = None if validation is None else validation.validate
    patience = None if validation is None else validation.patience
    store = None if checkpoint is None else checkpoint.store
    if not isinstance(steps, (int, np.integer)) or isinstance(steps, bool) or steps < 1:
        raise ValidationError(f"`steps`: expected a positive integer, got {steps!r}.")
    if (
        not isinstance(chunk_steps, (int, np.integer))
        or isinstance(chunk_steps, bool)
        or chunk_steps < 1
    ):
        raise ValidationError(f"`chunk_steps`: expected a positive integer, got {chunk_steps!r}.")
    if patience is not None and (not isinstance(patience, (int, np.integer)) or patience < 1):
        raise ValidationError(f"`patience`: expected a positive integer or None, got {patience!r}.")
    if not isinstance(stride, (int, np.integer)) or isinstance(stride, bool) or stride < 1:
        raise ValidationError(f"`stride`: expected a positive integer, got {stride!r}.")
    if chunk_steps % stride:
        raise ValidationError(
            f"`chunk_steps`: expected a multiple of `stride` = {stride}, got {chunk_steps!r}."
        )
    steps, stride = int(steps), int(stride)
    calls = -(-steps // stride)  # calls of `step` in the whole run
    chunk = min(int(chunk_steps) // stride, calls)
    key = as_key(key)
    history = _history(step, state, data, key, calls)
    if guard is not None and guard not in history:
        raise ValidationError(
            f"`guard`: expected one of the step's metrics {sorted(history)}, got {guard!r}."
        )
    loop = Loop(
        state,
        jnp.zeros((), jnp.int32),
        jnp.full((), -1, jnp.int32),
        jnp.zeros((), jnp.int32),
        history,
    )
    best, best_value, best_step, since = state, np.inf, 0, 0
    if validation is not None:
        best_value, since = float(validation.best_value), int(validation.since)
    curve: list[float] = []
    curve_steps: list[int] = []
    meta = {"run": dict(checkpoint.meta or {}) if checkpoint is not None else {}}
    if store is not None and store.latest_step() is not None:
        # the description first: another run's state may not even have this run's shapes
        if store.meta().get("run") != meta["run"]:
            raise ValidationError(
                f"`checkpoint_dir`: expected a checkpoint of this run or an empty folder, "
                f"got one of another run ({store.directory})."
            )
        restored, saved = store.restore({"loop": loop, "best": best})
        # restored arrays are committed to a device, fresh ones are not: without this the chunk
        # would compile a second time for the resumed loop
        restored = jax.tree.map(lambda a: jnp.asarray(np.asarray(a)), restored)
        loop, best = restored["loop"], restored["best"]
        curve, curve_steps = (
            list(saved.get("validation", [])),
            list(saved.get("validation_steps", [])),
        )
        best_value = min(curve) if curve else np.inf
        best_step, since = int(saved.get("best_step", 0)), int(saved.get("since", 0))
    validate_jit = jax.jit(validate) if validate is not None else None

    def trained(calls_run: int) -> int:  # training steps taken by that many calls
        return min(calls_run * stride, steps)

    bar = rep.bar(steps, trained(int(loop.step)))
    chunks_run, stopped = 0, False
    try:
        while int(loop.step) < calls and (max_chunks is None or chunks_run < max_chunks):
            start = int(loop.step)
            loop = _chunk(loop, data, key, step=step, length=chunk, total=calls, guard=guard)
            chunks_run += 1
            bad = int(loop.bad_step)
            if bad >= 0 and guard is not None:  # a bad step is only ever marked by a guard
                raise rep.diverged(
                    guard,
                    {name: np.asarray(h[bad]) for name, h in loop.history.items()},
                    int(loop.bad_index),
                    np.ndim(loop.history[guard]) > 1,
                    trained(bad),
                )
            done = int(loop.step)
            if rep.postfix:
                bar.set_postfix(
                    {
                        name: f"{float(jnp.mean(loop.history[name][start:done])):.4f}"
                        for name in rep.postfix
                        if name in loop.history
                    }
                )
            bar.update(trained(done) - trained(start))
            if validate_jit is not None:
                value = float(validate_jit(loop.state))
                curve.append(value)
                curve_steps.append(trained(done))
                if value < best_value:
                    best, best_value, best_step, since = (
                        jax.tree.map(jnp.copy, loop.state),
                        value,
                        trained(done),
                        0,
                    )
                else:
                    since += 1
                if patience is not None and since >= patience:
                    stopped = True
            if store is not None:
                store.save(
                    trained(done),
                    {"loop": loop, "best": best},
                    {
                        **meta,
                        "validation": curve,
                        "validation_steps": curve_steps,
                        "best_step": best_step,
                        "since": since,
                    },
                )
            if stopped:
                break
    finally:
        bar.close()
    run_calls = int(loop.step)
    run_steps = trained(run_calls)
    host_history = {name: np.asarray(h[:run_calls]) for name, h in loop.history.items()}
    return LoopResult(
        state=loop.state,
        best=best if validate is not None else loop.state,
        history=host_history,
        steps=run_steps,
        validation=np.asarray(curve),
        validation_steps=np.asarray(curve_steps, int),
        best_step=best_step if validate is not None else run_steps,
        finished=stopped or run_steps >= steps,
        best_value=best_value,
        since=since,
    )
