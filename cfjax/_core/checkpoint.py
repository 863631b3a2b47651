"""Ensemble checkpoints with orbax: one directory per training step, written to a temporary
directory and renamed when complete (a reader never sees a partial checkpoint), restored into
the same pytree structure as a template state."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from typing import Any

import jax
import numpy as np
import orbax.checkpoint as ocp

from cfjax import _checks
from cfjax.typing import ArrayLike, PyTree

__all__ = [
    "CheckpointStore",
    "FORMAT_VERSION",
    "digest",
    "latest_checkpoint_step",
    "restore_checkpoint",
    "save_checkpoint",
]

#: layout version written with every checkpoint (checked on restore)
FORMAT_VERSION = 2


class CheckpointStore:
    """Versioned checkpoints of a training state in ``directory``: ``<step>/state`` (the pytree,
    orbax's standard format) and ``<step>/meta`` (JSON: format version and run description).

    Saves are synchronous and atomic (orbax writes a temporary directory and renames it); the
    ``keep`` latest steps are kept.

    Example:
      >>> import tempfile, jax.numpy as jnp
      >>> with tempfile.TemporaryDirectory() as d:
      ...     store = CheckpointStore(d)
      ...     store.save(3, {"w": jnp.arange(3.0)}, {"run": "demo"})
      ...     state, meta = store.restore({"w": jnp.zeros(3)})
      ...     store.close()
      >>> state["w"].tolist(), meta["run"], meta["step"]
      ([0.0, 1.0, 2.0], 'demo', 3)
    """

    def __init__(self, directory: str | os.PathLike, keep: int = 2):
        if not isinstance(directory, (str, os.PathLike)):
            _checks.fail("directory", "a path", repr(directory))
        keep = _checks.check_positive_int("keep", keep)
        self.directory = os.path.abspath(os.fspath(directory))
        options = ocp.CheckpointManagerOptions(
            max_to_keep=keep, enable_async_checkpointing=False, create=True
        )
        self._manager = ocp.CheckpointManager(
            self.directory, options=options, item_names=("state", "meta")
        )

    def latest_step(self) -> int | None:
        """The newest complete checkpoint's step, None when there is none."""
        return self._manager.latest_step()

    def save(self, step: int, state: PyTree, meta: Mapping[str, Any]) -> None:
        """Write ``state`` (a pytree of arrays) and ``meta`` (JSON-serialisable) as ``step``."""
        step = int(step)
        meta = {**meta, "format": FORMAT_VERSION, "step": step}
        self._manager.save(
            step,
            args=ocp.args.Composite(
                state=ocp.args.StandardSave(state), meta=ocp.args.JsonSave(meta)
            ),
            force=True,
        )
        self._manager.wait_until_finished()

    def _step(self, step: int | None) -> int:
        if step is None:
            step = self.latest_step()
        if step is None or step not in self._manager.all_steps():
            _checks.fail(
                "step",
                f"a saved step of {self.directory} ({list(self._manager.all_steps())})",
                repr(step),
            )
        return step

    def _checked(self, meta: Mapping[str, Any], step: int) -> dict[str, Any]:
        out = dict(meta)
        if out.get("format") != FORMAT_VERSION:
            _checks.fail(
                "directory",
                f"checkpoints of format {FORMAT_VERSION}",
                f"format {out.get('format')!r} at step {step}",
            )
        return out

    def meta(self, step: int | None = None) -> dict[str, Any]:
        """The description saved with ``step`` (default: the latest), without loading its state:
        a run compares it with its own before restoring a state whose shapes may differ."""
        step = self._step(step)
        restored = self._manager.restore(step, args=ocp.args.Composite(meta=ocp.args.JsonRestore()))
        return self._checked(restored["meta"], step)

    def restore(self, template: PyTree, step: int | None = None) -> tuple[PyTree, dict[str, Any]]:
        """``(state, meta)`` of ``step`` (default: the latest), the state in the structure,
        shapes and dtypes of ``template`` and placed like its arrays (their shardings: a state
        saved from one device restores sharded over several, and back)."""
        step = self._step(step)
        abstract = jax.tree.map(ocp.utils.to_shape_dtype_struct, template)
        restored = self._manager.restore(
            step,
            args=ocp.args.Composite(
                state=ocp.args.StandardRestore(abstract), meta=ocp.args.JsonRestore()
            ),
        )
        meta = self._checked(restored["meta"], step)
        state = jax.tree.map(
            lambda t, a: a.astype(np.asarray(t).dtype) if hasattr(a, "astype") else a,
            template,
            restored["state"],
        )
        return state, meta

    def close(self) -> None:
        self._manager.close()


def save_checkpoint(
    directory: str | os.PathLike,
    step: int,
    state: PyTree,
    meta: Mapping[str, Any] | None = None,
    keep: int = 2,
) -> None:
    """Save ``state`` as checkpoint ``step`` in ``directory`` (see :class:`CheckpointStore`).

    Example:
      >>> import tempfile, jax.numpy as jnp
      >>> with tempfile.TemporaryDirectory() as d:
      ...     save_checkpoint(d, 1, {"w": jnp.ones(2)})
      ...     latest_checkpoint_step(d)
      1
    """
    store = CheckpointStore(directory, keep)
    try:
        store.save(step, state, dict(meta or {}))
    finally:
        store.close()


def restore_checkpoint(
    directory: str | os.PathLike, template: PyTree, step: int | None = None
) -> tuple[PyTree, dict[str, Any]]:
    """``(state, meta)`` of checkpoint ``step`` (default: latest) in ``directory``, restored into
    the structure of ``template`` (e.g. :func:`cfjax.predictors.state.init_state` of the same model,
    config and seeds).

    Example:
      >>> import tempfile, jax.numpy as jnp
      >>> with tempfile.TemporaryDirectory() as d:
      ...     save_checkpoint(d, 5, {"w": jnp.ones(2)})
      ...     state, meta = restore_checkpoint(d, {"w": jnp.zeros(2)})
      >>> state["w"].tolist(), meta["step"]
      ([1.0, 1.0], 5)
    """
    if not os.path.isdir(os.fspath(directory)):
        _checks.fail("directory", "an existing checkpoint directory", repr(os.fspath(directory)))
    store = CheckpointStore(directory)
    try:
        return store.restore(template, step)
    finally:
        store.close()


def latest_checkpoint_step(directory: str | os.PathLike) -> int | None:
    """The newest complete checkpoint step in ``directory`` (None if none or no directory)."""
    if not os.path.isdir(os.fspath(directory)):
        return None
    store = CheckpointStore(directory)
    try:
        return store.latest_step()
    finally:
        store.close()


def digest(*arrays: ArrayLike) -> str:
    """A short fingerprint of arrays (their shapes, dtypes and bytes), for a checkpoint's run
    description: a resumed run must see the same data."""
    h = hashlib.sha256()
    for array in arrays:
        a = np.ascontiguousarray(np.asarray(array))
        h.update(str((a.shape, a.dtype.str)).encode())
        h.update(a.tobytes())
    return h.hexdigest()[:16]
