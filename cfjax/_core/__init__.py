"""cfjax's foundation: what every pillar stands on, importing no pillar.

- :mod:`cfjax._core.keys`: ``as_key``, the one conversion of ``key=`` arguments.
- :mod:`cfjax._core.nn`: network blocks and initialisers (flax linen).
- :mod:`cfjax._core.training`: the one training loop (pure step, compiled chunks, progress,
  NaN guard, held-out early stopping, checkpoints and resume).
- :mod:`cfjax._core.checkpoint`: the orbax checkpoint store.
- :mod:`cfjax._core.optim`: ``standard_promotion``, an optax transformation that works under
  the caller's dtype promotion, strict or standard.

:mod:`cfjax.distributed` (the only home of ``shard_map``), :mod:`cfjax.platform` (every
backend-dependent choice: XLA:CPU workarounds, CPU defaults) and :mod:`cfjax.figures`
(matplotlib behind the ``plots`` extra; figures written atomically as PNG and PDF) belong to the
foundation too; they are public, for scripts and benchmarks that use them.
"""
