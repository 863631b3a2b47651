"""The static settings of one worst-case search (hashable: the compiled program is cached on
them), shared by :mod:`cfjax.sensitivity.search` and :mod:`cfjax.sensitivity.starts`."""

from __future__ import annotations

import dataclasses
from typing import Any, Callable


@dataclasses.dataclass(frozen=True)
class _Config:
    """Static settings of one search, hashable: the compiled program is cached on it (pass the
    same optimizer object to reuse it across calls)."""

    P_fn: Callable
    shape: tuple
    mask: tuple
    optimizer: Any
    steps: int
    batch_size: Any
    patience: int
    tol: float
    min_eig: float
    init_scale: float
    newton_steps: int
    warm_start: bool
    restarts: int
    log_objective: bool
    snap: Any
    corners: tuple  # sign patterns screened (empty: none)
    boundary_starts: int  # random rays screened
    polish_steps: int
    margin_corners: tuple  # (S0, E) of each line whose usable ends are screened (empty: none)
