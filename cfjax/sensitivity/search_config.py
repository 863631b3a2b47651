"""The static settings of one worst-case search (hashable: the compiled program is cached on
them), shared by :mod:`cfjax.sensitivity.search` and :mod:`cfjax.sensitivity.starts`.

The numbers of budgets and restarts are not among them: they are data. The budgets, the
restarts and the runs are padded to slots (:func:`slots`: a power of two, at least a minimum),
the padding masked and skipped, so a search with a new number of budgets or restarts reuses
the compiled programs while the counts stay within their slots."""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

from cfjax import platform


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
    restart_slots: int  # restarts per budget the programs hold (:func:`slots`); the count is data
    log_objective: bool
    snap: Any
    corners: tuple  # sign patterns screened (empty: none)
    boundary_starts: int  # random rays screened
    polish_steps: int
    margin_corners: tuple  # (S0, E) of each line whose usable ends are screened (empty: none)


def slots(n: int, least: int) -> int:
    """The slots held for ``n`` entries: the smallest power of two that is at least ``n`` and
    ``least`` (a handful of sizes, so that a new count seldom means a new program).

    Example:
      >>> slots(9, 16), slots(16, 16), slots(17, 16), slots(3, 4)
      (16, 16, 32, 4)
    """
    return max(int(least), 1 << max(int(n) - 1, 0).bit_length())


def _options(mesh: Any) -> dict[str, Any]:
    """XLA options for the search's programs (loops of small kernels):
    :func:`cfjax.platform.small_kernel_options` for the devices of ``mesh`` (None: the default
    backend's)."""
    return platform.small_kernel_options(None if mesh is None else list(mesh.devices.flat))
