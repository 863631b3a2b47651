"""Comparing metrics by how well they track known bias: the Correct Transition Count (CTC)
(definitions §1). Paper 000's chains of predictors are ``cfjax.study.families.PAPER_CHAINS``."""

from __future__ import annotations

from collections.abc import Sequence

import jax
import jax.numpy as jnp

from cfjax import _checks
from cfjax.typing import ArrayLike

__all__ = ["correct_transition_count"]


def correct_transition_count(
    values: ArrayLike, chains: Sequence[Sequence[int]], *, increasing: bool = True
) -> jax.Array:
    """Number of transitions along chains of increasingly biased predictors where the metric
    moves the right way (strictly up when ``increasing``, strictly down otherwise), averaged
    over seeds.

    Args:
      values: metric values, shape ``(P,)`` or ``(S, P)`` for S seeds and P predictors.
      chains: sequences of predictor indices into the last axis, each ordered by increasing
        bias.
      increasing: whether more bias should mean a larger metric (risks: True).

    Example:
      >>> import numpy as np
      >>> v = np.array([[1.0, 2.0, 1.5, 3.0], [1.0, 2.0, 2.5, 3.0]], np.float32)
      >>> float(correct_transition_count(v, [(0, 1, 2, 3)]))  # seeds score 2 and 3
      2.5
    """
    values = jnp.asarray(values)
    if values.ndim not in (1, 2):
        _checks.fail("values", "shape (P,) or (S, P)", f"shape {values.shape}")
    p = values.shape[-1]
    edges: list[tuple[int, int]] = []
    for c, chain in enumerate(chains):
        chain = [int(i) for i in chain]
        if len(chain) < 2:
            _checks.fail(f"chains[{c}]", "at least two predictors", f"{chain}")
        for i in chain:
            if not 0 <= i < p:
                _checks.fail(f"chains[{c}]", f"indices in [0, {p})", f"{i}")
        edges.extend(zip(chain[:-1], chain[1:]))
    if not edges:
        _checks.fail("chains", "at least one chain", "none")
    src, dst = (jnp.asarray(e) for e in zip(*edges))
    step = values[..., dst] - values[..., src]
    correct = step > 0 if increasing else step < 0
    counts = jnp.sum(correct, axis=-1).astype(jnp.result_type(float))
    return jnp.mean(counts)
