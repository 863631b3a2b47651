"""Checkpoints of a training state (an ensemble's, a generator's): one orbax directory per step,
written atomically and restored into the structure of a template state.

:func:`cfjax.predictors.train` and :func:`cfjax.generative.fit_generator` write them when given a
``checkpoint_dir`` and resume from the latest; these are the same functions for a user's own
loop, or to read a run's state back. Each checkpoint records :data:`FORMAT_VERSION`, checked on
restore.

Example:
  >>> import tempfile, jax.numpy as jnp
  >>> from cfjax import checkpoint
  >>> with tempfile.TemporaryDirectory() as d:
  ...     checkpoint.save_checkpoint(d, 3, {"w": jnp.ones(2)}, {"run": "demo"})
  ...     step = checkpoint.latest_checkpoint_step(d)
  ...     state, meta = checkpoint.restore_checkpoint(d, {"w": jnp.zeros(2)}, step)
  >>> step, state["w"].tolist(), meta["run"]
  (3, [1.0, 1.0], 'demo')
"""

from cfjax._core.checkpoint import FORMAT_VERSION as FORMAT_VERSION
from cfjax._core.checkpoint import CheckpointStore as CheckpointStore
from cfjax._core.checkpoint import latest_checkpoint_step as latest_checkpoint_step
from cfjax._core.checkpoint import restore_checkpoint as restore_checkpoint
from cfjax._core.checkpoint import save_checkpoint as save_checkpoint

__all__ = ["CheckpointStore", "latest_checkpoint_step", "restore_checkpoint", "save_checkpoint"]
