"""A counterfactual-fairness problem (paper 001, definitions §3): the causal graph over a sensitive
attribute A and features X_1..X_m, and the data.

Data flow: :class:`FairnessGraph` (static, hashable) + :class:`FairnessData` (a pytree of
arrays) → :func:`~cfjax.sensitivity.fit` (:mod:`cfjax.sensitivity.fitting`: Model A, the
counterfactually fair predictor on its residuals and the two baselines) →
:class:`~cfjax.sensitivity.FairModel`.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from cfjax import _checks
from cfjax.scm import Graph
from cfjax.sensitivity.diagnostics import DegenerateProblemWarning

__all__ = [
    "FairnessGraph",
    "FairnessData",
    "make_data",
    "DistinctUnits",
    "distinct_units",
]


@dataclasses.dataclass(frozen=True)
class FairnessGraph:
    """The causal graph of paper 001: a sensitive attribute (a root), features in topological
    order with their parents, and optionally the features whose paths from A are fair.

    Args:
      parents: ``feature -> parents`` over the sensitive attribute and the other features (a
        feature listed with no parents is exogenous).
      sensitive: the sensitive attribute's name.
      fair: path-specific variant (paper 001, appendix C): features whose every path from A
        is fair. They enter the predictor directly instead of through their residual and keep
        their factual value in the counterfactual world; their parents must be A or fair
        features. Empty (default): counterfactual fairness on every path.

    Example:
      >>> g = FairnessGraph({"G": ["A"], "L": ["A", "G"]})
      >>> g.features, g.parents
      (('G', 'L'), (('A',), ('A', 'G')))
    """

    features: tuple[str, ...]
    parents: tuple[tuple[str, ...], ...]
    sensitive: str
    fair: tuple[str, ...]

    def __init__(
        self, parents: Mapping[str, Sequence[str]], sensitive: str = "A", fair: Sequence[str] = ()
    ):
        if not isinstance(parents, Mapping) or not parents:
            _checks.fail("parents", "a non-empty mapping feature -> parents", repr(parents))
        if sensitive in parents and list(parents[sensitive]):
            _checks.fail(
                "parents",
                f"the sensitive attribute {sensitive!r} as a root",
                f"parents {list(parents[sensitive])}",
            )
        table = {sensitive: [], **{v: list(p) for v, p in parents.items() if v != sensitive}}
        graph = Graph.from_parents(table)  # rejects cycles, unknown parents, duplicates
        features = tuple(v for v in graph.order if v != sensitive)
        fair = tuple(fair)
        for v in fair:
            if v not in features:
                _checks.fail("fair", f"features among {list(features)}", repr(v))
            bad = [p for p in table[v] if p != sensitive and p not in fair]
            if bad:
                _checks.fail(
                    "fair",
                    f"fair features whose parents are {sensitive!r} or fair features",
                    f"{v!r} with unfair parents {bad}",
                )
        object.__setattr__(self, "features", features)
        object.__setattr__(self, "parents", tuple(tuple(table[v]) for v in features))
        object.__setattr__(self, "sensitive", sensitive)
        object.__setattr__(self, "fair", tuple(v for v in features if v in fair))
        _warn_if_degenerate(self)

    @property
    def m(self) -> int:
        return len(self.features)

    @property
    def children(self) -> tuple[str, ...]:
        """The features whose parents include the sensitive attribute."""
        return tuple(v for v, ps in zip(self.features, self.parents) if self.sensitive in ps)

    def index(self, feature: str) -> int:
        return self.features.index(feature)

    @property
    def fair_mask(self) -> tuple[bool, ...]:
        return tuple(v in self.fair for v in self.features)


def _warn_if_degenerate(graph: FairnessGraph) -> None:
    """:class:`DegenerateProblemWarning` for a graph whose CFU is flat by construction: the
    sensitive attribute causes no feature (no counterfactual changes anything), or there is a
    single feature (one error term: no correlation to vary)."""
    if not graph.children:
        warnings.warn(
            f"FairnessGraph: the sensitive attribute {graph.sensitive!r} is a parent of no feature "
            f"(features {list(graph.features)}): nothing depends on it, so every counterfactual equals "
            "the factual unit and CFU is 0 at every correlation (a flat curve); list it among the parents "
            "of the features it causes",
            DegenerateProblemWarning,
            stacklevel=3,
        )
    if graph.m == 1:
        warnings.warn(
            f"FairnessGraph: a single feature {graph.features[0]!r}: with one error term there is no "
            "correlation to vary (P = [1] within every budget), so the CFU curve is flat at its value "
            "at zero correlation; confounding needs two or more features",
            DegenerateProblemWarning,
            stacklevel=3,
        )


@struct.dataclass
class FairnessData:
    """Units of a fairness problem. ``group (n,)``: each unit's level of A (int32 in
    ``0..c−1``); ``codes (c, q)``: the numbers A enters the equations with at each level (e.g.
    ``[[−1], [1]]``); ``X (n, m)``: the features in the graph's order; ``y (n,)``: the target;
    ``names``: the features' names, column by column (static; None when X came without names),
    checked against the graph's features by :func:`~cfjax.sensitivity.fit`."""

    group: jax.Array
    codes: jax.Array
    X: jax.Array
    y: jax.Array
    names: tuple[str, ...] | None = struct.field(pytree_node=False, default=None)

    def __repr__(self) -> str:
        names = "" if self.names is None else f", names={list(self.names)}"
        return (
            f"FairnessData(n={self.X.shape[0]}, m={self.X.shape[1]}, groups={self.codes.shape[0]}"
            f"{names}, dtype={self.X.dtype})"
        )

    @property
    def a(self) -> jax.Array:
        """Each unit's code of A, ``(n, q)``."""
        return self.codes[self.group]

    @property
    def n(self) -> int:
        return self.X.shape[0]


@struct.dataclass
class DistinctUnits:
    """The distinct units of a data set: ``index (u,)``, one unit of each distinct row
    ``(A, x)``, and ``count (u,)``, how many units share it (summing to n).

    Every per-unit term of CFU depends on a unit's A and x only (its residuals, its counterfactual
    features and its predictions are functions of them), so a mean over all units is the mean
    over the distinct ones weighted by ``count``: exactly, not an approximation. Surveys with
    discrete scores repeat rows (the NHS survey's 209,112 units hold 39,373 distinct rows, the
    law school's 21,791 hold 1,820), and :func:`~cfjax.sensitivity.cfu.cfu_of` then costs a fraction.
    """

    index: jax.Array
    count: jax.Array


def distinct_units(data: FairnessData) -> DistinctUnits | None:
    """The distinct rows ``(A, x)`` of ``data`` and their multiplicities (concrete data), or
    None when no two units share a row. :func:`~cfjax.sensitivity.fit` stores it on the model
    (``FairModel.distinct``); ``y`` does not enter CFU and is not compared.

    Example:
      >>> d = make_data([0, 0, 1, 0], [[1.0, 2.0], [1.0, 2.0], [1.0, 2.0], [0.5, 3.0]], [0.0, 1.0, 2.0, 3.0])
      >>> u = distinct_units(d)
      >>> u.index.tolist(), u.count.tolist()
      ([3, 0, 2], [1.0, 2.0, 1.0])
    """
    index, _, count = _distinct_rows(data)
    if index.size == data.n:
        return None
    return DistinctUnits(jnp.asarray(index, jnp.int32), jnp.asarray(count, data.X.dtype))


def _distinct_rows(data: FairnessData) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(index (u,), row (n,), count (u,))`` of the distinct rows ``(A, x)`` of concrete
    ``data``: one unit of each row (in :func:`distinct_units`' order), each unit's row, and
    each row's count."""
    rows = np.column_stack([np.asarray(data.group, np.float64), np.asarray(data.X, np.float64)])
    _, index, row, count = np.unique(
        rows, axis=0, return_index=True, return_inverse=True, return_counts=True
    )
    return index, row.reshape(-1), count


def make_data(
    a: Any, X: Any, y: Any, *, codes: Any = None, names: Sequence[str] | None = None
) -> FairnessData:
    """Validated :class:`FairnessData`.

    Args:
      a: ``(n,)`` the sensitive attribute's value per unit (any labels; at least two groups;
        no missing value: a NaN, infinite or None label raises, naming its row).
      X: ``(n, m)`` features in the graph's order (``FairnessGraph.features``, a topological
        order), none constant. A table with ``.columns`` (a pandas DataFrame) brings its
        column names along, and :func:`~cfjax.sensitivity.fit` then refuses a column order that
        differs from the graph's; to select columns by name whatever their order, use
        :func:`~cfjax.sensitivity.from_frame`.
      y: ``(n,)`` the target.
      codes: how A enters the equations: None uses the sorted distinct values of ``a`` as
        numbers (so ±1 stays ±1 and 0/1 stays 0/1); ``"one_hot"`` gives c − 1 indicator
        columns (first level dropped), for a categorical A; or an explicit ``(c,)`` or
        ``(c, q)`` array, one row per sorted distinct value.
      names: the name of each column of X (default: ``X.columns`` when X has them, else None);
        :func:`~cfjax.sensitivity.fit` checks them against the graph's features, in order, so
        that a wrong column order cannot pass silently.
    """
    if names is None and hasattr(X, "columns"):
        names = [str(c) for c in X.columns]
    a = _checks.as_array("a", a)
    X = _checks.as_array("X", X)
    y = _checks.as_array("y", y)
    for name, v in (("X", X), ("y", y)):  # CFU is often 1e-10..1e-4: float32 is rarely enough
        _checks.warn_if_downcast(name, v)
    if a.ndim != 1 or a.size == 0:
        _checks.fail("a", "a non-empty 1-d array", f"shape {a.shape}")
    a = _sensitive_values(a)
    n = a.shape[0]
    if X.ndim != 2 or X.shape[0] != n or X.shape[1] == 0:
        _checks.fail("X", f"shape ({n}, m) with m >= 1", f"shape {X.shape}")
    if y.shape != (n,):
        _checks.fail("y", f"shape ({n},)", f"shape {y.shape}")
    if names is not None:
        if isinstance(names, str) or not all(isinstance(v, str) for v in names):
            _checks.fail("names", "a sequence of column names (str)", repr(names))
        names = tuple(names)
        if len(names) != X.shape[1] or len(set(names)) != len(names):
            _checks.fail(
                "names", f"{X.shape[1]} distinct names, one per column of X", repr(list(names))
            )
    for name, v in (("X", X), ("y", y)):
        if np.issubdtype(v.dtype, np.complexfloating):
            _checks.fail(name, "real numbers", f"complex values (dtype {v.dtype})")
        if not np.issubdtype(v.dtype, np.number):
            _checks.fail(name, "finite numbers", f"non-numeric values (dtype {v.dtype})")
        bad = ~np.isfinite(v)
        if bad.any():  # rows 1-based: the first data row (below a CSV's header) is row 1
            row, *col = np.argwhere(bad)[0]
            where = f", column {_column_label(names, col[0])}" if col else ""
            index = f"{name}[{row}, {col[0]}]" if col else f"{name}[{row}]"
            _checks.fail(
                name,
                "finite numbers",
                f"{int(bad.any(axis=-1).sum()) if col else int(bad.sum())} row(s) "
                f"with NaN or infinite values, the first at row {row + 1} (1-based; {index}){where}",
            )
    constant = [_column_label(names, j) for j in range(X.shape[1]) if np.ptp(X[:, j]) == 0]
    if constant:
        _checks.fail(
            "X", "non-constant feature columns", f"constant column(s) {', '.join(constant)}"
        )
    levels, group = np.unique(a, return_inverse=True)
    if levels.size < 2:
        _checks.fail(
            "a", "at least two groups of the sensitive attribute", f"one group {levels.tolist()}"
        )
    if codes is None:
        if not np.issubdtype(levels.dtype, np.number):
            _checks.fail(
                "codes", "explicit codes or 'one_hot' for a non-numeric sensitive attribute", "None"
            )
        codes = levels.astype(np.float64)[:, None]
    elif isinstance(codes, str):
        if codes != "one_hot":
            _checks.fail("codes", "None, 'one_hot' or an array", repr(codes))
        codes = np.eye(levels.size)[:, 1:]
    else:
        codes = _checks.as_array("codes", codes, np.float64)
        codes = codes[:, None] if codes.ndim == 1 else codes
        if codes.ndim != 2 or codes.shape[0] != levels.size:
            _checks.fail(
                "codes",
                f"{levels.size} finite rows, one per group {levels.tolist()}",
                f"shape {codes.shape}",
            )
        if not np.isfinite(codes).all():
            _checks.fail(
                "codes",
                "finite numbers",
                f"{int((~np.isfinite(codes)).sum())} NaN or infinite value(s)",
            )
    dtype = jnp.result_type(float)
    return FairnessData(
        jnp.asarray(group, jnp.int32),
        jnp.asarray(codes, dtype),
        jnp.asarray(X, dtype),
        jnp.asarray(y, dtype),
        names,
    )


def _sensitive_values(a: np.ndarray) -> np.ndarray:
    """The sensitive attribute's values checked: no missing (None, NaN) or infinite value, which
    ``np.unique`` would make a group of its own, and labels of one sortable kind. An object array
    of real numbers comes back as float64."""
    if a.dtype == object:
        missing = [
            i
            for i, v in enumerate(a.tolist())
            if v is None
            or (isinstance(v, float) and np.isnan(v))
            or type(v).__name__ in ("NAType", "NaTType")
        ]
        if missing:
            _checks.fail(
                "a",
                "a group label for every unit",
                f"{len(missing)} missing (None/NaN) value(s), "
                f"the first at row {missing[0] + 1} (1-based; a[{missing[0]}])",
            )
        if all(
            isinstance(v, (int, float, np.integer, np.floating))
            and not isinstance(v, (bool, np.bool_))
            for v in a.tolist()
        ):
            a = a.astype(np.float64)
        else:
            try:
                np.unique(a)
            except TypeError:
                kinds = sorted({type(v).__name__ for v in a.tolist()})
                _checks.fail(
                    "a",
                    "group labels of one sortable kind (all numbers or all text)",
                    f"values of type {kinds}",
                )
    if np.issubdtype(a.dtype, np.complexfloating):
        _checks.fail("a", "real numbers or text labels", f"complex values (dtype {a.dtype})")
    if np.issubdtype(a.dtype, np.floating):
        bad = np.flatnonzero(~np.isfinite(a))
        if bad.size:
            _checks.fail(
                "a",
                "a finite group label for every unit",
                f"{bad.size} NaN or infinite value(s), "
                f"the first at row {bad[0] + 1} (1-based; a[{bad[0]}])",
            )
    return a


def _column_label(names: Sequence[str] | None, j: int) -> str:
    """Column j of X by its name, or as ``X[:, j]`` when X came without names."""
    return repr(names[j]) if names is not None else f"X[:, {j}] (pass names= to name it)"
