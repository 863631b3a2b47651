"""The settings of a worst-case search: the public :class:`SearchConfig` a user writes, and the
static settings of its compiled programs (:class:`_Program`) derived from it and the model.

:class:`SearchConfig` is frozen and compared by value: two equal configurations, built
separately, hash equal, and a search with either reuses the other's compiled programs. Its
optimizer is named by its hyperparameters (``optimizer="adam", learning_rate=0.05``); the
optax transformation is built from them inside the traced program.

The numbers of budgets and restarts are not among a program's settings: they are data. The
budgets, the restarts and the runs are padded to slots (:func:`slots`: a power of two, at least
a minimum), the padding masked and skipped, so a search with a new number of budgets or
restarts reuses the compiled programs while the counts stay within their slots."""

from __future__ import annotations

import dataclasses
import math
import warnings
from collections.abc import Callable, Mapping
from typing import Any, TypeAlias

import numpy as np
import optax

from cfjax import _checks, platform
from cfjax._core.optim import standard_promotion
from cfjax.sensitivity.parameterisation import Parameterisation

__all__ = ["SearchConfig"]

#: The optimizers a :class:`SearchConfig` names, each built by optax from the configuration's
#: ``learning_rate`` (and, for ``"sgd"``, ``momentum`` and ``nesterov``).
OPTIMIZERS = ("adam", "sgd")

#: What ``SearchConfig.optimizer`` holds: a name of :data:`OPTIMIZERS`, or an optax
#: transformation (compared by identity).
Optimizer: TypeAlias = str | optax.GradientTransformation


@dataclasses.dataclass(frozen=True)
class SearchConfig:
    """The options of a worst-case search (:func:`~cfjax.sensitivity.worst_case`), frozen and
    hashable: equal configurations compile once.

    Attributes:
      restarts: restarts per budget.
      steps: maximum optimiser steps per run.
      optimizer: ``"adam"`` (default) or ``"sgd"``, built by optax from ``learning_rate``
        (``"sgd"`` also from ``momentum`` and ``nesterov``); it minimises −CFU. Paper 001's
        optimiser is ``SearchConfig(optimizer="sgd", learning_rate=100.0, momentum=0.9,
        nesterov=True)`` (use with ``batch_size=4096``, one epoch of steps, ``warm_start=True``
        and ``log_objective=False``). An optax ``GradientTransformation`` is accepted too, and
        its hyperparameter fields are then ignored: it is compared and hashed by identity, so
        pass the same object to reuse the compiled programs (two calls of
        ``optax.adam(0.05)`` are two objects, and compile twice: name it instead).
      learning_rate: the optimizer's learning rate (0.05, with Adam).
      momentum: ``"sgd"``'s momentum (None: plain SGD); not with ``"adam"``.
      nesterov: ``"sgd"``'s Nesterov momentum (needs ``momentum``).
      batch_size: None for full-batch steps; otherwise minibatches of this many units drawn
        uniformly (with replacement) at each step (at most the model's number of units).
      patience, tol: stop a run once its objective (an exponential average of minibatch
        values) has not improved by ``tol`` (relative to CFU) for ``patience`` steps.
      min_eig: the smallest eigenvalue any P used may have, in (0, 1) (a worst case is only
        defined with a margin from singular P).
      parameterisation: ``"tanh"`` (the paper's; may leave the PD cone: steps are backtracked)
        or ``"pd"`` (:func:`~cfjax.sensitivity.correlation.pd_correlation`: every P within the budget with
        smallest eigenvalue ≥ ``min_eig``, and only those).
      cliques: a ``(m, c)`` boolean membership matrix for the clique parameterisation (known
        zero correlations; tanh only), kept as a tuple of tuples; None: none.
      warm_start: the paper's curriculum: budgets in increasing order, each run starting from
        the previous budget's final L (a scan over budgets, vmapped over restarts).
      init_scale: spread of the random initial off-diagonal entries of L.
      newton_steps: at most this many Newton steps of Model B's σ solve per step
        (warm-started; they stop once a step moves log σ by less than 1e-10, 1e-5 in float32).
      log_objective: ascend ``log CFU`` (default): the same maximiser, but gradients of order
        one whatever the scale of CFU (often 1e-12 to 1e-4), so that Adam's step is not
        swamped by its epsilon; False ascends CFU itself (the paper's recipe, with its large
        learning rate).
      snap: each restart's final P is also tried on the boundary: off-diagonals within a factor
        ``snap`` of ±p_max at exactly ±p_max, then, when it lies within a factor ``snap`` of
        the boundary along its ray from I, on the boundary along that ray; kept when usable and
        worse for fairness. None disables it.
      screen_corners: screen candidate starts on the boundary of the usable set by their CFU
        and start the restarts from the best distinct ones (the sign corners with at most 5
        features, the margin's corners with at most 3, ``boundary_starts`` random rays from I
        and as many along the budget's edge faces; :mod:`cfjax.sensitivity.starts`). Not with
        cliques; with ``warm_start`` for the first budget only. False: every restart from the
        paper's random initialisation.
      boundary_starts: how many random rays are screened from I (and as many along the edges).
      polish: at most this many steps of projected gradient ascent in P along the boundary on
        the full-data CFU that finish every restart (:mod:`cfjax.sensitivity.projection`). 0
        disables it; not with cliques (it would move the pairs they hold at zero).
      max_rounds: adaptive rounds at most: where a budget's worst case is not *confirmed* (no
        second restart within a relative ``confirm`` of the best), each round adds 4 restarts
        there (half from its next-best screened starts, half near its best answer). 0: one
        round only.
      confirm: the relative agreement of two restarts that confirms a worst case, in (0, 1).
      warn_ratio: warn (:class:`~cfjax.sensitivity.ConvergenceWarning`) when, after the
        adaptive rounds, some budget is still not confirmed and its best restart's CFU exceeds
        the second best's by more than this factor (≥ 1; 1: every budget left unconfirmed).
        None never warns (a budget without a finite worst case always warns).

    Every field is validated when the configuration is made (a ``ValueError`` naming the
    field); what depends on the model (``batch_size`` against its units, ``cliques`` against
    its features) is checked by the search.

    Example:
      >>> SearchConfig(restarts=8) == SearchConfig(restarts=8)
      True
      >>> hash(SearchConfig(steps=100)) == hash(SearchConfig(steps=100))
      True
      >>> SearchConfig(restarts=0)
      Traceback (most recent call last):
      ...
      cfjax._errors.ValidationError: `SearchConfig.restarts`: expected an integer >= 1, got 0.
    """

    restarts: int = 4
    steps: int = 500
    optimizer: Optimizer = "adam"
    learning_rate: float = 0.05
    momentum: float | None = None
    nesterov: bool = False
    batch_size: int | None = None
    patience: int = 50
    tol: float = 1e-4
    min_eig: float = 1e-3
    parameterisation: str = "tanh"
    cliques: tuple[tuple[bool, ...], ...] | None = None
    warm_start: bool = False
    init_scale: float = 0.1
    newton_steps: int = 8
    log_objective: bool = True
    snap: float | None = 0.99
    screen_corners: bool = True
    boundary_starts: int = 16
    polish: int = 30
    max_rounds: int = 3
    confirm: float = 1e-3
    warn_ratio: float | None = 1.0

    def __post_init__(self) -> None:
        def put(name: str, value: Any) -> None:
            object.__setattr__(self, name, value)

        def positive_int(name: str) -> None:
            put(name, _checks.check_positive_int(f"SearchConfig.{name}", getattr(self, name)))

        def count(name: str) -> None:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
                _checks.fail(f"SearchConfig.{name}", "a non-negative integer", repr(value))
            put(name, int(value))

        def number(
            name: str, expected: str, ok: Callable[[float], bool], optional: bool = False
        ) -> None:
            value = getattr(self, name)
            if optional and value is None:
                return
            if (
                isinstance(value, bool)
                or not isinstance(value, (int, float, np.integer, np.floating))
                or not ok(float(value))
            ):
                _checks.fail(f"SearchConfig.{name}", expected, repr(value))
            put(name, float(value))

        def flag(name: str) -> None:
            value = getattr(self, name)
            if not isinstance(value, (bool, np.bool_)):
                _checks.fail(f"SearchConfig.{name}", "True or False", repr(value))
            put(name, bool(value))

        for name in ("restarts", "steps", "patience", "newton_steps"):
            positive_int(name)
        for name in ("boundary_starts", "polish", "max_rounds"):
            count(name)
        for name in ("nesterov", "warm_start", "log_objective", "screen_corners"):
            flag(name)
        if self.batch_size is not None:
            positive_int("batch_size")
        finite = math.isfinite
        number("learning_rate", "a finite learning rate > 0", lambda v: finite(v) and v > 0)
        number("momentum", "None or a momentum in [0, 1)", lambda v: 0 <= v < 1, optional=True)
        number("tol", "a finite tolerance >= 0", lambda v: finite(v) and v >= 0)
        number("min_eig", "a margin in (0, 1)", lambda v: 0 < v < 1)
        number("init_scale", "a finite spread >= 0", lambda v: finite(v) and v >= 0)
        number("snap", "None or a factor in (0, 1]", lambda v: 0 < v <= 1, optional=True)
        number("confirm", "a relative tolerance in (0, 1)", lambda v: 0 < v < 1)
        number("warn_ratio", "None or a factor >= 1", lambda v: v >= 1, optional=True)
        if isinstance(self.optimizer, str):
            if self.optimizer not in OPTIMIZERS:
                _checks.fail(
                    "SearchConfig.optimizer",
                    f"one of {OPTIMIZERS} or an optax GradientTransformation",
                    repr(self.optimizer),
                )
            if self.optimizer != "sgd" and (self.momentum is not None or self.nesterov):
                _checks.fail(
                    "SearchConfig.momentum",
                    "None and nesterov=False with optimizer='adam' (momentum is sgd's)",
                    f"momentum={self.momentum!r}, nesterov={self.nesterov!r}",
                )
            if self.nesterov and self.momentum is None:
                _checks.fail(
                    "SearchConfig.nesterov",
                    "a momentum with it (nesterov=True needs momentum=...)",
                    "momentum=None",
                )
        elif not isinstance(self.optimizer, optax.GradientTransformation):
            _checks.fail(
                "SearchConfig.optimizer",
                f"one of {OPTIMIZERS} or an optax GradientTransformation",
                type(self.optimizer).__name__,
            )
        if self.parameterisation not in ("tanh", "pd"):
            _checks.fail(
                "SearchConfig.parameterisation",
                "'tanh' (the paper's) or 'pd' (every usable P, by construction)",
                repr(self.parameterisation),
            )
        if self.cliques is not None:
            mask = np.asarray(self.cliques)
            if (
                mask.ndim != 2
                or mask.size == 0
                or not (mask.dtype == bool or np.isin(mask, (0, 1)).all())
            ):
                _checks.fail(
                    "SearchConfig.cliques",
                    "None or a non-empty (m, c) boolean membership matrix",
                    f"shape {mask.shape}, dtype {mask.dtype}",
                )
            if self.parameterisation != "tanh":
                _checks.fail(
                    "SearchConfig.cliques",
                    "the tanh parameterisation (cliques mask its L)",
                    f"parameterisation={self.parameterisation!r}",
                )
            put("cliques", tuple(map(tuple, mask.astype(bool).tolist())))


#: The search options that were keyword arguments of worst_case, inverse_budget and bootstrap
#: (``search=``) before :class:`SearchConfig`: each is the field of the same name.
_OLD_OPTIONS = frozenset(f.name for f in dataclasses.fields(SearchConfig)) - {
    "learning_rate",
    "momentum",
    "nesterov",
}


def with_deprecated_options(
    caller: str, config: SearchConfig, options: Mapping[str, Any], stacklevel: int = 3
) -> SearchConfig:
    """``config`` with the search options passed the old way, as keyword arguments of
    ``caller`` (``options``), folded in, with a ``DeprecationWarning`` naming the new spelling;
    ``config`` itself when there are none. ``optimizer=None`` (the old default) leaves the
    optimizer as it is. A name that is no search option is a TypeError, as Python's own."""
    if not isinstance(config, SearchConfig):
        _checks.fail("config", "a cfjax.sensitivity.SearchConfig", type(config).__name__)
    if not options:
        return config
    unknown = sorted(set(options) - _OLD_OPTIONS)
    if unknown:
        raise TypeError(f"{caller}() got an unexpected keyword argument {unknown[0]!r}")
    shown = ", ".join(f"{k}={v!r}" for k, v in options.items())
    options = {k: v for k, v in options.items() if not (k == "optimizer" and v is None)}
    fields = ", ".join(f"{k}={v!r}" for k, v in options.items())
    new = (
        f"SearchConfig({fields})"
        if config == SearchConfig()
        else f"dataclasses.replace(config, {fields})"
    )
    warnings.warn(
        f"{caller}({shown}) is deprecated and will be removed in the next release: pass config={new}",
        DeprecationWarning,
        stacklevel=stacklevel,
    )
    return dataclasses.replace(config, **options)


def optimizer_spec(config: SearchConfig) -> Any:
    """What of ``config`` makes its optax transformation, hashable by value for a named
    optimizer (``(name, learning_rate, momentum, nesterov)``), the transformation itself
    otherwise (by identity)."""
    if isinstance(config.optimizer, str):
        return (config.optimizer, config.learning_rate, config.momentum, config.nesterov)
    return config.optimizer


def make_optimizer(spec: Any) -> optax.GradientTransformation:
    """The optax transformation of an :func:`optimizer_spec`, under standard dtype promotion
    (:func:`cfjax._core.optim.standard_promotion`); built where it is used, inside the traced
    program, so that equal specs give the same program."""
    if isinstance(spec, optax.GradientTransformation):  # (a NamedTuple: checked first)
        return standard_promotion(spec)
    name, learning_rate, momentum, nesterov = spec
    tx = (
        optax.adam(learning_rate)
        if name == "adam"
        else optax.sgd(learning_rate, momentum=momentum, nesterov=nesterov)
    )
    return standard_promotion(tx)


@dataclasses.dataclass(frozen=True)
class _Program:
    """The static settings of the search's compiled programs (:mod:`cfjax.sensitivity.runs`),
    from a :class:`SearchConfig` and the model's shape (:func:`cfjax.sensitivity.search.worst_case`
    makes it): what the programs read, and only that, so that options the programs do not read
    (the restarts' count, the rounds, the warning's factor) never recompile them. Hashable by
    value: the compiled programs are cached on it."""

    P_fn: Parameterisation  # P(L, p_max) of the parameterisation (hashable: a frozen dataclass)
    shape: tuple  # the shape of one L
    mask: tuple  # L's free entries, as nested tuples of bools
    optimizer: Any  # :func:`optimizer_spec`
    steps: int
    batch_size: int | None
    patience: int
    tol: float
    min_eig: float
    init_scale: float
    newton_steps: int
    warm_start: bool
    restart_slots: int  # restarts per budget the programs hold (:func:`slots`); the count is data
    log_objective: bool
    snap: float | None
    corners: tuple  # sign patterns screened (empty: none)
    boundary_starts: int  # random rays screened
    polish_steps: int
    margin_corners: tuple  # (S0, E) of each line whose usable ends are screened (empty: none)

    def make_optimizer(self) -> optax.GradientTransformation:
        """The optax transformation the runs step with (:func:`make_optimizer`)."""
        return make_optimizer(self.optimizer)


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
