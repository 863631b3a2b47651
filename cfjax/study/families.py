"""Paper 000's ten predictors (definitions §1): the basic classifier, three logit-offset wrappers of it,
and classifiers trained on sex- and age-biased (corrupted) training sets.

The biased training sets are masks over one shared training pool
(:func:`cfjax.study.splits.biased_training_mask`), so every trained member of every seed is one row of
one ensemble (:func:`cfjax.predictors.train`); the logit offsets are computed from the basic
members' logits, never trained.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import numpy.typing as npt

from cfjax import _checks, _results
from cfjax._core.keys import as_key
from cfjax.study.splits import biased_training_mask
from cfjax.typing import ArrayLike, KeyLike

__all__ = [
    "PAPER_NAMES",
    "PAPER_CHAINS",
    "TRAINED_NAMES",
    "LOGIT_OFFSETS",
    "BIAS_STRENGTHS",
    "Family",
    "paper_family",
    "datasets_bias_key",
    "logit_offset",
    "paper_predictions",
]

#: the ten predictors, in paper 000's order
PAPER_NAMES = (
    "basic",
    "logit+0.5",
    "logit+1",
    "logit+2",
    "sex0.80",
    "sex0.90",
    "sex0.95",
    "age0.80",
    "age0.90",
    "age0.95",
)
#: paper 000's three chains of increasing bias, as predictor names (9 transitions), for
#: :func:`cfjax.metrics.correct_transition_count`
PAPER_CHAINS: tuple[tuple[str, ...], ...] = (
    ("basic", "logit+0.5", "logit+1", "logit+2"),
    ("basic", "sex0.80", "sex0.90", "sex0.95"),
    ("basic", "age0.80", "age0.90", "age0.95"),
)
#: the logit-offset wrappers of the basic predictor and their β (definitions §1: σ(logit g + β s))
LOGIT_OFFSETS = {"logit+0.5": 0.5, "logit+1": 1.0, "logit+2": 2.0}
#: the corruption strengths α (sex) and β_age (age)
BIAS_STRENGTHS = (0.80, 0.90, 0.95)
#: the trained predictors: every predictor but the logit offsets
TRAINED_NAMES = ("basic",) + tuple(
    f"{kind}{a:.2f}" for kind in ("sex", "age") for a in BIAS_STRENGTHS
)


class Family(NamedTuple):
    """The trained members of paper 000's predictors, ready for :func:`cfjax.predictors.train`.

    Attributes:
      names: ``(M,)`` member names (each of :data:`TRAINED_NAMES`, once per seed).
      seeds: ``(M,)`` member seeds.
      masks: ``(M, N)`` boolean training masks over the shared training pool.
    """

    names: tuple[str, ...]
    seeds: np.ndarray
    masks: jax.Array

    def to_dict(self) -> dict[str, Any]:
        """``names``, ``seeds`` and ``masks`` (M lists of N bools) for ``json.dumps``, with each
        member's training-set size ``n_train``."""
        out = {f: _results.plain(getattr(self, f)) for f in self._fields}
        out["n_train"] = _results.plain(np.asarray(self.masks).sum(axis=-1))
        return out

    def __repr__(self) -> str:
        names = list(dict.fromkeys(self.names))
        shown = ", ".join(names[:4]) + (f", ... ({len(names)} distinct)" if len(names) > 4 else "")
        return (
            f"{type(self).__name__}(members={len(self.names)}, names=[{shown}], "
            f"masks={_results.spec(self.masks)})"
        )


def datasets_bias_key(*, key: KeyLike) -> jax.Array:
    """The key with which :func:`cfjax.study.datasets` ``(chest, key=key, bias=...)`` draws its
    corruption: with it, :func:`paper_family`'s masks over ``datasets(chest, key=key)``'s
    unbiased training set keep exactly the units of ``datasets(chest, key=key, bias=...)``'s
    training set (checked in the tests).

    Args:
      key: the key given to :func:`cfjax.study.datasets`: a PRNG key, raw key data or an int seed
        (keyword-only).

    Returns:
      One typed PRNG key (shape ``()``).

    Raises:
      ValidationError: a bad ``key``.

    Example:
      >>> datasets_bias_key(key=0).shape
      ()
    """
    return jax.random.split(as_key(key), 4)[3]


def paper_family(
    sex: npt.ArrayLike,
    age: npt.ArrayLike,
    effusion: npt.ArrayLike,
    *,
    key: KeyLike,
    seeds: Sequence[int] = (0, 1, 2),
) -> Family:
    """The seven trained predictors × ``seeds`` as members of one ensemble over one training pool.

    Member order is predictor-major: ``TRAINED_NAMES[i]`` with ``seeds[j]`` is member
    ``i · S + j``. ``basic`` keeps every unit; ``sex{α}`` and ``age{β}`` keep the units of
    :func:`~cfjax.study.splits.biased_training_mask` ``(kind, strength, sex, age, effusion, key=key)``. One
    ``key`` serves every strength and seed (as in :func:`cfjax.study.datasets`, where a stronger
    corruption drops a superset of the units of a weaker one); the seeds differ in
    initialisation and minibatch order only.

    Args:
      sex, age, effusion: ``(N,)`` parents of the training pool (sex 1 = female).
      key: the corruption key; :func:`datasets_bias_key` ``(key=seed)`` reproduces the training
        sets of ``cfjax.study.datasets(chest, key=key, bias=...)``.
      seeds: member seeds (S of them).

    Returns:
      :class:`Family` with ``7 · S`` members.

    Example:
      >>> rng = np.random.default_rng(0)
      >>> fam = paper_family(rng.integers(0, 2, 100), rng.uniform(20, 90, 100),
      ...                    rng.integers(0, 2, 100), key=0, seeds=(0, 1))
      >>> fam.names[:3], fam.masks.shape
      (('basic', 'basic', 'sex0.80'), (14, 100))
    """
    for name, x in (("sex", sex), ("age", age), ("effusion", effusion)):
        _checks.check_ndim(name, x, 1, "of shape (N,)")
        _checks.check_nonempty(name, x)
    _checks.check_same_len("sex", sex, "age", age)
    _checks.check_same_len("sex", sex, "effusion", effusion)
    _checks.check_binary_labels("sex", sex)
    _checks.check_binary_labels("effusion", effusion)
    _checks.check_finite("age", age)
    key = as_key(key)
    s = np.asarray(seeds)
    if s.ndim != 1 or s.size == 0 or not np.issubdtype(s.dtype, np.integer) or (s < 0).any():
        _checks.fail("seeds", "a non-empty sequence of non-negative integers", repr(seeds))
    if len(set(s.tolist())) != len(s):
        _checks.fail("seeds", "distinct seeds", repr(seeds))
    n = _checks.shape_of(sex)[0]
    rows = [jnp.ones((n,), bool)]
    for kind in ("sex", "age"):
        for a in BIAS_STRENGTHS:
            rows.append(biased_training_mask(kind, a, sex, age, effusion, key=key))
    masks = jnp.repeat(jnp.stack(rows), len(s), axis=0)
    names = tuple(name for name in TRAINED_NAMES for _ in s)
    return Family(names, np.tile(s, len(TRAINED_NAMES)), masks)


def logit_offset(logits: ArrayLike, sex: ArrayLike, beta: ArrayLike) -> jax.Array:
    """Paper 000's logit-offset predictor ``σ(logit g(x) + β s)`` from the basic predictor's
    logits (``s = 1`` female): a fixed shortcut on sex without retraining.

    ``logits`` and ``sex`` broadcast to each other (e.g. logits ``(M, N, K)`` and the
    counterfactual sex ``(N, K)`` of those images — the offset follows the sex of the image
    scored, so do(sex) moves it).

    Example:
      >>> [round(float(v), 4) for v in logit_offset(jnp.array([0.0, 0.0]), jnp.array([0, 1]), 2.0)]
      [0.5, 0.8808]
    """
    x = jnp.asarray(logits)
    if not jnp.issubdtype(x.dtype, jnp.floating):
        _checks.fail("logits", "floating-point logits", f"dtype {x.dtype}")
    _checks.check_binary_labels("sex", sex)
    try:
        np.broadcast_shapes(x.shape, _checks.shape_of(sex))
    except ValueError:
        _checks.fail(
            "sex",
            f"a shape broadcasting with the logits' {x.shape}",
            f"shape {_checks.shape_of(sex)}",
        )
    if _checks.is_concrete(beta) and not np.isfinite(np.asarray(beta, np.float64)).all():
        _checks.fail("beta", "a finite offset", repr(beta))
    s = jnp.asarray(sex).astype(x.dtype)
    shape = jnp.broadcast_shapes(x.shape, s.shape)
    return jax.nn.sigmoid(
        jnp.broadcast_to(x, shape) + jnp.asarray(beta, x.dtype) * jnp.broadcast_to(s, shape)
    )


def paper_predictions(
    names: Sequence[str], seeds: npt.ArrayLike, logits: ArrayLike, sex: ArrayLike
) -> tuple[tuple[str, ...], jax.Array]:
    """The ten predictors' probabilities from the trained members' logits.

    Args:
      names, seeds: ``(M,)`` of the trained members (a :class:`Family`'s), covering every name
        of :data:`TRAINED_NAMES` with the same seeds.
      logits: ``(M, ...)`` the members' logits (``predict(..., logits=True)``: ``(M, N)`` for
        factual images, ``(M, N, K)`` for counterfactual ones).
      sex: the sex of each image scored, shaped like ``logits[0]`` (``(N,)`` factual,
        ``(N, K)`` counterfactual).

    Returns:
      ``(PAPER_NAMES, p)`` with ``p`` of shape ``(10, S, ...)``: predictor, then seed in the
      order of the basic members, then the layout of ``logits[0]``; the logit-offset rows are
      :func:`logit_offset` of the basic member of the same seed.

    Example:
      >>> fam_names = [n for n in TRAINED_NAMES for _ in (0, 1)]
      >>> names, p = paper_predictions(fam_names, [0, 1] * 7, jnp.zeros((14, 3)), jnp.array([0, 1, 1]))
      >>> p.shape, round(float(p[3, 0, 1]), 4)
      ((10, 2, 3), 0.8808)
    """
    names = [str(n) for n in names]
    seeds = np.asarray(seeds)
    m = len(names)
    if seeds.shape != (m,):
        _checks.fail("seeds", f"shape ({m},), one seed per name", f"shape {seeds.shape}")
    shape = _checks.shape_of(logits)
    if len(shape) < 2 or shape[0] != m:
        _checks.fail("logits", f"shape ({m}, ...) with one row per member", f"shape {shape}")
    if _checks.shape_of(sex) != shape[1:]:
        _checks.fail(
            "sex",
            f"shape {shape[1:]} (one value per image scored)",
            f"shape {_checks.shape_of(sex)}",
        )
    order = [int(s) for n, s in zip(names, seeds) if n == "basic"]
    if not order:
        _checks.fail("names", "at least one 'basic' member", repr(sorted(set(names))))
    index = {(n, int(s)): i for i, (n, s) in enumerate(zip(names, seeds))}
    rows, betas = [], []
    for name in PAPER_NAMES:
        source = "basic" if name in LOGIT_OFFSETS else name
        missing = [s for s in order if (source, s) not in index]
        if missing:
            _checks.fail(
                "names",
                f"a member {source!r} for every seed {order}",
                f"none for seed(s) {missing}",
            )
        rows.append([index[(source, s)] for s in order])
        betas.append(LOGIT_OFFSETS.get(name, 0.0))
    x = jnp.asarray(logits)
    idx = jnp.asarray(rows)  # (10, S)
    beta = jnp.asarray(betas, x.dtype).reshape((len(PAPER_NAMES), 1) + (1,) * (x.ndim - 1))
    p = logit_offset(x[idx], sex, beta)
    return PAPER_NAMES, p
