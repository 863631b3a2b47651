"""Fitted SCM parameters on disk: an orbax directory written atomically (a temporary
directory renamed when complete, so a reader never sees a partial write), restored exactly."""

from __future__ import annotations

import os
from typing import Any

import jax
import orbax.checkpoint as ocp

from cfjax import _checks
from cfjax.typing import PyTree

__all__ = ["load_params", "save_params"]

#: what every parameter directory records, checked when it is read
KIND = "cfjax.scm.params"


def _path(path: Any) -> str:
    if not isinstance(path, (str, os.PathLike)):
        _checks.fail("path", "a directory path", repr(path))
    return os.path.abspath(os.fspath(path))


def save_params(
    path: str | os.PathLike, params: PyTree, meta: dict[str, Any] | None = None
) -> None:
    """Write ``params`` (a pytree of arrays, e.g. from :meth:`cfjax.scm.SCM.fit`) to the
    directory ``path``, replacing what an earlier save wrote there.

    The pytree is an orbax checkpoint (the format of :class:`cfjax.checkpoint.CheckpointStore`) with
    a JSON ``meta`` (``kind``, format version, and what the caller adds); the write is atomic
    and the previous parameters are removed only once the new ones are complete.

    Args:
      path: a directory (created if needed).
      params: the parameters.
      meta: JSON-serialisable description to keep with them.

    Example:
      >>> import tempfile, cfjax as cf
      >>> p = {"a": cf.scm.linear_gaussian_params([], 1.5, 2.0)}
      >>> with tempfile.TemporaryDirectory() as d:
      ...     save_params(d, p)
      ...     q = load_params(d)
      >>> float(q["a"]["net"]["params"]["bias"][0]), float(q["a"]["log_scale"]) == float(p["a"]["log_scale"])
      (1.5, True)
    """
    from cfjax._core.checkpoint import CheckpointStore, latest_checkpoint_step

    path = _path(path)
    if not jax.tree.leaves(params):
        _checks.fail("params", "a pytree with at least one array", repr(params))
    latest = latest_checkpoint_step(path)
    store = CheckpointStore(path, keep=1)
    try:
        store.save(0 if latest is None else latest + 1, params, {**dict(meta or {}), "kind": KIND})
    finally:
        store.close()


def read_meta(path: str | os.PathLike) -> dict[str, Any]:
    """The JSON description saved with the parameters in ``path``."""
    _, meta = _restore(path, None)
    return meta


def load_params(path: str | os.PathLike, like: PyTree | None = None) -> Any:
    """The parameters saved in ``path`` by :func:`save_params`.

    Args:
      path: the directory.
      like: None to restore the saved structure as it is (nested dicts of arrays); or a
        template pytree (e.g. ``scm.init(key)``) whose structure, shapes and dtypes the result
        takes (:meth:`cfjax.scm.SCM.load` passes its own).

    Returns:
      the parameters, equal to those saved.
    """
    state, _ = _restore(path, like)
    return state


def _restore(path: Any, like: PyTree) -> tuple[Any, dict[str, Any]]:
    from cfjax._core.checkpoint import FORMAT_VERSION, restore_checkpoint

    path = _path(path)
    if not os.path.isdir(path):
        _checks.fail("path", "a directory written by save_params", repr(path))
    if like is not None:
        state, meta = restore_checkpoint(path, like)
    else:
        manager = ocp.CheckpointManager(path, item_names=("state", "meta"))
        try:
            step = manager.latest_step()
            if step is None:
                _checks.fail(
                    "path", "a directory written by save_params", f"{path!r} without parameters"
                )
            restored = manager.restore(
                step,
                args=ocp.args.Composite(
                    state=ocp.args.StandardRestore(), meta=ocp.args.JsonRestore()
                ),
            )
        finally:
            manager.close()
        state, meta = restored["state"], dict(restored["meta"])
        if meta.get("format") != FORMAT_VERSION:
            _checks.fail(
                "path", f"parameters of format {FORMAT_VERSION}", f"format {meta.get('format')!r}"
            )
    if meta.get("kind") != KIND:
        _checks.fail("path", "a directory written by save_params", f"kind {meta.get('kind')!r}")
    return state, meta
