"""The inverse question (paper 001): the smallest confounding budget ``p_max`` whose worst-case
CFU reaches a given level (e.g. the blind baseline's unfairness), by a coarse curve of
:func:`~cfjax.sensitivity.worst_case` then bisection by local searches from its worst cases."""

from __future__ import annotations

from typing import Any

import numpy as np
from flax import struct

from cfjax import _checks
from cfjax._core.keys import as_key
from cfjax._results import headline
from cfjax._results import strict_plain as plain
from cfjax.sensitivity.correlation import check_budget
from cfjax.sensitivity.fitting import FairModel
from cfjax.sensitivity.resample import _climb, _project_all
from cfjax.sensitivity.search import WorstCase, worst_case
from cfjax.sensitivity.search_config import SearchConfig, with_deprecated_options
from cfjax.typing import KeyLike, MeshLike

__all__ = ["InverseBudget", "inverse_budget"]

#: the most local search steps of a bisection probe (each a CFU and its gradient)
_PROBE_STEPS = 40


class InverseBudget(struct.PyTreeNode):
    """The answer to the inverse question of :func:`inverse_budget`.

    ``reached``: whether some budget up to the largest searched reached ``level``.
    ``p_max``: the smallest budget whose worst-case CFU reaches ``level`` (to within the
    bracket), or None when not ``reached`` (then ``max_cfu`` says how close the search came). ``lo``, ``hi``: the bracket ``lo < p_max <= hi``
    (``lo`` a budget whose worst case stays below the level, 0 when the first grid budget
    reaches it); when not reached, ``lo`` is the largest budget searched and ``hi`` = 1 (the
    answer, if any, lies beyond the budgets searched). ``max_cfu``: the largest worst-case CFU
    found at any budget evaluated, ``max_cfu_p_max`` the budget where it was found (when not
    reached: how close the search came). ``evaluated``: ``((p_max, worst-case CFU), ...)``, the
    coarse curve then the bisection's probes. ``cfu_at_zero_correlation``: the CFU at P = I,
    the floor under every worst case (see :class:`WorstCase`).

    Every field is static (a pytree without leaves); :meth:`to_dict` gives plain Python.
    """

    level: float = struct.field(pytree_node=False)
    p_max: float | None = struct.field(pytree_node=False)
    lo: float = struct.field(pytree_node=False)
    hi: float = struct.field(pytree_node=False)
    evaluated: tuple = struct.field(pytree_node=False)
    reached: bool = struct.field(pytree_node=False, default=False)
    max_cfu: float = struct.field(pytree_node=False, default=float("nan"))
    max_cfu_p_max: float = struct.field(pytree_node=False, default=float("nan"))
    cfu_at_zero_correlation: float | None = struct.field(pytree_node=False, default=None)

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable plain Python: ``level``, ``reached``, ``p_max`` (None when not
        reached), ``lo``, ``hi``, ``max_cfu``, ``max_cfu_p_max``, ``evaluated`` as
        ``[[p_max, cfu], ...]`` and ``cfu_at_zero_correlation`` (non-finite numbers as None)."""
        return {
            "level": plain(self.level),
            "reached": bool(self.reached),
            "p_max": plain(self.p_max),
            "lo": plain(self.lo),
            "hi": plain(self.hi),
            "max_cfu": plain(self.max_cfu),
            "max_cfu_p_max": plain(self.max_cfu_p_max),
            "evaluated": [plain(list(e)) for e in self.evaluated],
            "cfu_at_zero_correlation": plain(self.cfu_at_zero_correlation),
        }

    def __repr__(self) -> str:
        if self.reached:
            answer = f"reached=True, p_max={headline(self.p_max)}, bracket=({headline(self.lo)}, {headline(self.hi)}]"
        else:
            answer = f"reached=False, not within p_max <= {headline(self.lo)}"
        return (
            f"InverseBudget(level={headline(self.level)}, {answer}, max_cfu={headline(self.max_cfu)} "
            f"at p_max={headline(self.max_cfu_p_max)}, evaluated={len(self.evaluated)})"
        )


def inverse_budget(
    model: FairModel,
    level: float,
    *,
    key: KeyLike,
    hi: float = 0.99,
    tol: float = 1e-3,
    grid: int = 8,
    worst: WorstCase | None = None,
    config: SearchConfig = SearchConfig(),
    mesh: MeshLike = None,
    **deprecated: Any,
) -> InverseBudget:
    """The smallest ``p_max`` whose worst-case CFU reaches ``level`` (e.g. the blind baseline's
    unfairness).

    A coarse curve first (``grid`` budgets up to ``hi``, one :func:`worst_case` call, monotone
    over the nested budgets) brackets the answer between two grid points; bisection then narrows
    it. Each probe is a local search (the bootstrap's: steps along the boundary following the
    gradient, at most 40) from the bracket's two worst cases, the lower one usable at the probe's
    budget as it is, the upper one projected into it, and a probe's worst case is never below
    the lower end's (nested budgets). The probes start where the curve's restarts ended, so they
    need no restarts of their own: a bisection costs a few dozen CFU evaluations, not a search
    per probe. Assumes the worst case grows with the budget, as the feasible set does.

    A level above every worst case found is a result, not an error: ``reached=False``, ``p_max``
    NaN, the bracket ``(hi, 1)`` and the largest CFU found with its budget (``max_cfu``,
    ``max_cfu_p_max``). A baseline's unfairness is often such a level: it is a squared gap
    between two predictors, usually far above the fair predictor's CFU (see
    :class:`~cfjax.sensitivity.FairModel`).

    Args:
      model: the fitted working model.
      level: the CFU to reach (non-negative).
      key: randomness of the coarse curve's :func:`worst_case` call: a typed key, raw key data
        or an int seed.
      hi: the largest budget searched, in [0, 1).
      tol: bisection stops once the bracket is at most this wide.
      grid: budgets of the coarse curve, evenly spaced in ``(0, hi]``.
      worst: a worst-case curve of this model already computed (:func:`worst_case`, e.g. the
        one plotted): it is the coarse curve, its budgets the grid (``grid`` and ``hi`` are
        then unused), and no search runs (bisection only, when the level is reached within it).
      config: the options of the coarse curve's :func:`worst_case` search
        (:class:`~cfjax.sensitivity.SearchConfig`).
      mesh: devices to split the coarse search's runs over (as :func:`worst_case`'s).
      **deprecated: the search's options as keyword arguments (``restarts=...``), the old
        spelling: folded into ``config``, with a ``DeprecationWarning``.

    Returns:
      :class:`InverseBudget`.

    Example:
      A level the search can reach (half the worst case at budget 0.5), on a tiny problem (a
      literal block, not a doctest, to spare the suite a compilation of the search; the test
      suite runs the same calls)::

        import jax, cfjax.sensitivity as S
        prob = S.synthetic(200, key=0)
        model = S.fit(prob.graph, prob.data, S.FitConfig(degrees=(2,), lambdas=(1.0,),
                                                        predictor_degrees=(2,), predictor_lambdas=(1.0,)))
        config = S.SearchConfig(restarts=1, steps=5, screen_corners=False, snap=None, polish=0, warn_ratio=None)
        level = 0.5 * float(S.worst_case(model, 0.5, key=jax.random.key(0), config=config).cfu[0])
        inv = S.inverse_budget(model, level, key=jax.random.key(0), hi=0.5, grid=1, tol=0.05, config=config)
        inv.reached                  # True
        inv.p_max, (inv.lo, inv.hi)  # the smallest budget, in a bracket (lo, hi] at most 0.05 wide
        far = S.inverse_budget(model, 1e6, key=jax.random.key(0), hi=0.5, grid=1, config=config)
        far.reached, far.p_max       # False, None: not reached within p_max <= 0.5
        far.max_cfu, far.max_cfu_p_max  # how close the search came: 2 * level, at p_max = 0.5
    """
    config = with_deprecated_options("inverse_budget", config, deprecated)
    level = float(level)
    if not np.isfinite(level) or level < 0:
        _checks.fail("level", "a non-negative CFU level", repr(level))
    hi = check_budget(hi)
    grid = _checks.check_positive_int("grid", grid)
    tol = float(tol)
    if not (np.isfinite(tol) and tol > 0):
        _checks.fail("tol", "a positive bracket width", repr(tol))
    key = as_key(key)
    if worst is None:
        budgets = np.linspace(0.0, hi, grid + 1)[1:]  # float64 (a float32 curve's p_max is not)
        worst = worst_case(model, budgets, key=key, config=config, mesh=mesh)
    elif not isinstance(worst, WorstCase):
        _checks.fail("worst", "None or a WorstCase of this model", type(worst).__name__)
    else:
        budgets = np.asarray(worst.p_max, np.float64)
    order = np.argsort(np.asarray(worst.p_max, np.float64), kind="stable")
    budgets = budgets[order]
    curve, floor = np.asarray(worst.cfu, np.float64)[order], worst.cfu_at_zero_correlation
    evaluated = list(zip(budgets.tolist(), curve.tolist()))
    reached = np.flatnonzero(curve >= level)
    if reached.size == 0:
        best_p, best = _largest(evaluated)
        return InverseBudget(
            level, None, float(budgets[-1]), 1.0, tuple(evaluated), False, best, best_p, floor
        )
    j = int(reached[0])
    lo, hi = (float(budgets[j - 1]) if j else 0.0), float(budgets[j])
    P = np.asarray(worst.P)[order]
    dtype = P.dtype
    eye = np.eye(P.shape[-1], dtype=dtype)
    v_lo, P_lo = (float(curve[j - 1]), P[j - 1]) if j else (-np.inf, eye)
    P_hi = P[j]
    probed = model.replace(selection={})  # the CV tables are not needed in the program
    while hi - lo > tol:
        mid = 0.5 * (lo + hi)
        # A local search from the bracket's two worst cases: the lower one is usable here as it
        # is (nested budgets), the upper one projected into this budget.
        starts = np.stack(
            [P_lo, np.asarray(_project_all(P_hi[None], np.full(1, mid, dtype), worst.min_eig))[0]]
        )
        v, P_mid = _climb(
            probed,
            starts,
            np.asarray(mid, dtype),
            scored=model.scored,
            min_eig=float(worst.min_eig),
            steps=_PROBE_STEPS,
        )
        value, P_mid = (float(v), np.asarray(P_mid)) if float(v) >= v_lo else (v_lo, P_lo)
        evaluated.append((mid, value))
        if value >= level:
            hi, P_hi = mid, P_mid
        else:
            lo, v_lo, P_lo = mid, value, P_mid
    best_p, best = _largest(evaluated)
    return InverseBudget(level, hi, lo, hi, tuple(evaluated), True, best, best_p, floor)


def _largest(evaluated: list) -> tuple[float, float]:
    """``(p_max, cfu)`` of the largest finite worst case evaluated (the smallest such budget on
    ties); NaN, NaN when none is finite."""
    finite = [(c, -p) for p, c in evaluated if np.isfinite(c)]
    if not finite:
        return float("nan"), float("nan")
    c, p = max(finite)
    return float(-p), float(c)
