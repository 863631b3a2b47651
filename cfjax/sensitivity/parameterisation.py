"""The search's parameterisations: a correlation P as a function of an unconstrained
lower-triangular ``L`` and the budget ``p_max``, each hashable by value (the compiled search is
cached on it), with its inverse (``seed``: an L whose P is a given usable P, for starting a
restart on the boundary) where it has one, and the paper's random initialisation of L.

- ``"tanh"`` (:func:`~cfjax.sensitivity.tanh_correlation`, the paper's): ``P = I + p_max (1 − I)
  ⊙ tanh(L Lᵀ)``; may leave the positive-definite cone (the search backtracks such steps).
- ``"pd"`` (:func:`~cfjax.sensitivity.correlation.pd_correlation`): every P within the budget with smallest
  eigenvalue at least the search's margin, and only those.
- cliques (:func:`~cfjax.sensitivity.correlation.clique_correlation`): tanh with L masked to a membership
  matrix (known zero correlations); no inverse.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, Protocol

import numpy as np

from cfjax import _checks
from cfjax.sensitivity.correlation import clique_correlation, pd_correlation, tanh_correlation

_TANH_SEED = (
    0.995  # tanh reaches the boundary only in the limit: its starts sit this far along the ray
)


class Parameterisation(Protocol):
    """P(L, p_max) of a parameterisation, hashable; ``seed``: an L whose P is a given usable P
    (numpy, batched), or None where there is none."""

    def __call__(self, L: Any, p_max: Any) -> Any: ...

    @property
    def seed(self) -> Callable[[np.ndarray, np.ndarray], np.ndarray] | None: ...


@dataclasses.dataclass(frozen=True)
class _Tanh:
    """The paper's parameterisation; ``seed`` inverts it (a little inside the target P)."""

    def __call__(self, L, p_max):
        return tanh_correlation(L, p_max)

    def seed(self, P: np.ndarray, p_max: np.ndarray) -> np.ndarray:
        """Lower-triangular L whose P is ``I + 0.995 (P − I)``, for a batch ``P (..., m, m)``,
        ``p_max (...)`` (numpy, on the host): ``L Lᵀ`` has ``artanh`` of the target's entries over
        ``p_max`` off the diagonal, a dominant diagonal. Usable whenever P is: that P lies 0.995
        of the way from I (usable) to P on a segment of the convex usable set, 0.005 (1 −
        min_eig) above the margin, far more than rounding."""
        eye = np.eye(P.shape[-1])
        p = np.asarray(p_max, float)[..., None, None]
        with np.errstate(divide="ignore", invalid="ignore"):
            G = (1 - eye) * np.arctanh(
                np.clip(_TANH_SEED * (P - eye) / np.where(p > 0, p, 1), -_TANH_SEED, _TANH_SEED)
            )
        return np.linalg.cholesky(G + eye * (np.sum(np.abs(G), axis=-1) + 1.0)[..., None, :])


@dataclasses.dataclass(frozen=True)
class _PD:
    """:func:`pd_correlation` with the search's margin; ``seed``: its exact inverse."""

    min_eig: float

    def __call__(self, L, p_max):
        return pd_correlation(L, p_max, self.min_eig)

    def seed(self, P: np.ndarray, p_max: np.ndarray) -> np.ndarray:
        """``cholesky(P)`` (numpy, batched): :func:`pd_correlation` of it is P itself, usable."""
        return np.linalg.cholesky(P)


@dataclasses.dataclass(frozen=True)
class _Cliques:
    """The clique parameterisation for a fixed membership mask, hashable by value (no seeds:
    its restarts start from the random initialisation)."""

    mask: tuple
    seed = None

    def __call__(self, L, p_max):
        return clique_correlation(L, np.asarray(self.mask), p_max)


def _parameterisation(
    kind: str, cliques: Any, m: int, min_eig: float
) -> tuple[Parameterisation, tuple[int, int], np.ndarray]:
    """``(P(L, p_max), shape of L, mask of L's free entries)``."""
    if cliques is not None:
        if kind != "tanh":
            _checks.fail(
                "cliques",
                "the tanh parameterisation (cliques mask its L)",
                f"parameterisation={kind!r}",
            )
        mask = np.asarray(cliques, bool)
        if mask.ndim != 2 or mask.shape[0] != m:
            _checks.fail(
                "cliques", f"a boolean membership matrix of shape ({m}, c)", f"shape {mask.shape}"
            )
        return _Cliques(tuple(map(tuple, mask.tolist()))), mask.shape, mask
    tri = np.tril(np.ones((m, m), bool))
    if kind == "tanh":
        return _Tanh(), (m, m), tri
    if kind == "pd":
        return _PD(min_eig), (m, m), tri
    _checks.fail(
        "parameterisation",
        "'tanh' (the paper's) or 'pd' (every usable P, by construction)",
        repr(kind),
    )


def _init_L(
    rng: np.random.Generator, count: int, shape: tuple[int, int], mask: np.ndarray, scale: float
) -> np.ndarray:
    """The paper's initialisation for ``count`` restarts, ``(count, *shape)`` (numpy, on the
    host): ones on the diagonal, small random entries below it."""
    eye = np.eye(*shape)
    return np.where(
        mask, eye + scale * (1 - eye) * rng.standard_normal((count,) + tuple(shape)), 0.0
    )
