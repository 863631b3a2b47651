"""A fairness problem from a table: columns chosen by name, never by position.

:func:`from_frame` takes a pandas ``DataFrame`` (or anything with ``.columns`` and column
lookup by name, or a CSV path, read with pandas) and a graph over column names, and returns the
same :class:`~cfjax.sensitivity.Problem` as the loaders: the graph, validated data whose feature
columns follow the graph's topological order whatever the table's column order, and the target.
Text categories are coded only by an explicit ``categories`` argument.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from cfjax import _checks
from cfjax.sensitivity.datasets import Problem, _standardise
from cfjax.sensitivity.problem import FairnessGraph, make_data

__all__ = ["from_frame"]


def _read_csv(path: Any):
    try:
        import pandas as pd
    except ImportError:
        _checks.fail(
            "frame",
            "a DataFrame, or a CSV path with pandas installed (pip install pandas)",
            f"the path {os.fspath(path)!r} and no pandas",
        )
    path = os.fspath(path)
    if not os.path.isfile(path):
        _checks.fail("frame", "a DataFrame or the path of an existing CSV file", repr(path))
    return pd.read_csv(path)


def _is_missing(v: Any) -> bool:
    """None, a float NaN, or pandas' NA / NaT (recognised without importing pandas)."""
    if v is None:
        return True
    if isinstance(v, (float, np.floating)):
        return math.isnan(v)
    return type(v).__name__ in ("NAType", "NaTType")


def _column(frame: Any, name: str, coding: Any) -> np.ndarray:
    """Column ``name`` as float64, text coded by ``coding`` (a list of levels, coded 0, 1, ...
    in that order, or a mapping level -> number); missing values and unknown levels raise."""
    raw = np.asarray(frame[name])
    if raw.ndim != 1:
        _checks.fail(
            "frame", f"one column named {name!r}", f"shape {raw.shape} (duplicate column names?)"
        )
    values = raw.tolist()
    missing = [i for i, v in enumerate(values) if _is_missing(v)]
    if missing:  # rows 1-based: the first data row (below a CSV's header) is row 1
        _checks.fail(
            f"frame[{name!r}]",
            "no missing values",
            f"{len(missing)} missing (NaN/None) value(s), first at row {missing[0] + 1}",
        )
    if coding is not None:
        if isinstance(coding, Mapping):
            table = {k: float(v) for k, v in coding.items()}
            if not all(math.isfinite(v) for v in table.values()):
                _checks.fail(
                    f"categories[{name!r}]", "finite numbers for every level", repr(dict(coding))
                )
        elif isinstance(coding, (Sequence, np.ndarray)) and not isinstance(coding, str):
            coding = list(coding.tolist() if isinstance(coding, np.ndarray) else coding)
            if len(set(coding)) != len(coding):
                _checks.fail(f"categories[{name!r}]", "distinct levels", repr(list(coding)))
            table = {k: float(i) for i, k in enumerate(coding)}
        else:
            _checks.fail(
                f"categories[{name!r}]",
                "a list of levels (coded 0, 1, ... in order) or a mapping level -> number",
                repr(coding),
            )
        unknown = sorted({repr(v) for v in values if v not in table})
        if unknown:
            shown = ", ".join(unknown[:10]) + (
                f" and {len(unknown) - 10} more" if len(unknown) > 10 else ""
            )
            _checks.fail(
                f"frame[{name!r}]",
                f"only the levels listed in categories[{name!r}] {list(table)}",
                f"unknown value(s) {shown}",
            )
        return np.array([table[v] for v in values], np.float64)
    if raw.dtype.kind not in "biuf":
        try:
            out = np.asarray(values, np.float64)
        except (TypeError, ValueError):
            kinds = sorted({type(v).__name__ for v in values})
            _checks.fail(
                f"frame[{name!r}]",
                f"numbers, or an explicit coding categories[{name!r}] "
                "(a list of levels or a mapping level -> number)",
                f"values of type {kinds}",
            )
    else:
        out = raw.astype(np.float64)
    if not np.isfinite(out).all():
        bad = np.flatnonzero(~np.isfinite(out))
        _checks.fail(
            f"frame[{name!r}]",
            "finite numbers",
            f"{bad.size} infinite value(s), first at row {bad[0] + 1}",
        )
    return out


def from_frame(
    frame: Any,
    graph: Mapping[str, Sequence[str]] | FairnessGraph,
    *,
    sensitive: str,
    target: str,
    categories: Mapping[str, Any] | None = None,
    codes: Any = None,
    fair: Sequence[str] = (),
    standardise: str | None = None,
) -> Problem:
    """A fairness problem from a table, every variable found by its column name.

    Args:
      frame: a pandas ``DataFrame`` (or any table with ``.columns`` whose ``frame[name]`` is
        a column), or the path of a CSV file (read with pandas, which must then be installed).
      graph: ``feature -> parents`` over column names (the sensitive attribute among the
        parents, never the target), or a :class:`~cfjax.sensitivity.FairnessGraph` whose
        ``sensitive`` is ``sensitive``. Every feature is read from the column of its name, in
        the graph's topological order, so the table's column order never matters.
      sensitive: the column of the sensitive attribute A (at least two groups).
      target: the column of the outcome Y; it may not be a feature or a parent.
      categories: ``column -> coding`` for text (or other non-numeric) columns, required for
        each: a list of levels, coded 0, 1, ... in the order listed, or a mapping ``level ->
        number`` (e.g. ``{"white": 1, "black": -1}``, the paper's ±1; several levels may share
        a number, e.g. White +1 and every other level −1). For the sensitive attribute the
        groups are the distinct coded numbers, in sorted order (with a list: the order
        listed), and each must occur. Values not listed raise.
      codes: how A enters the equations, as in :func:`~cfjax.sensitivity.make_data`: None
        (A's coded numbers themselves), ``"one_hot"``, or one row per group.
      fair: the path-specific variant's fair features (see ``FairnessGraph``); only with a
        mapping ``graph``.
      standardise: z-score the features, ``"population"`` (the paper's) or ``"sample"``
        standard deviation; None (default) keeps them as recorded. The target is never rescaled.

    Returns:
      :class:`~cfjax.sensitivity.Problem`: ``graph``, ``data`` (``X (n, m)`` in the order of
      ``graph.features``, with those names attached, so :func:`~cfjax.sensitivity.fit` checks
      them) and ``target``.

    Raises:
      ValidationError: a missing column, a missing (NaN/None) or infinite value (its row given
        1-based: the first data row, below a CSV's header, is row 1), a text column without a
        coding, a value not in its coding, a constant feature (named), the target used as a
        feature or parent.

    Example:
      >>> import numpy as np
      >>> table = {"race": np.array(["white", "black"] * 4), "gpa": np.arange(8.0),
      ...          "lsat": np.arange(8.0) ** 2, "fya": np.ones(8)}
      >>> class Table(dict):  # anything with .columns and frame[name] works (a DataFrame)
      ...     columns = property(lambda self: list(self))
      >>> p = from_frame(Table(table), {"lsat": ["race", "gpa"], "gpa": ["race"]}, sensitive="race",
      ...                target="fya", categories={"race": {"white": 1, "black": -1}})
      >>> p.graph.features, p.data.names, p.data.codes.ravel().tolist(), p.data.group[:2].tolist()
      (('gpa', 'lsat'), ('gpa', 'lsat'), [-1.0, 1.0], [1, 0])
    """
    if isinstance(frame, (str, os.PathLike)):
        frame = _read_csv(frame)
    if not hasattr(frame, "columns") or not hasattr(frame, "__getitem__"):
        _checks.fail(
            "frame",
            "a pandas DataFrame (a table with .columns) or a CSV path",
            type(frame).__name__,
        )
    columns = [str(c) for c in frame.columns]
    for arg, value in (("sensitive", sensitive), ("target", target)):
        if not isinstance(value, str):
            _checks.fail(arg, "a column name", repr(value))
    if target == sensitive:
        _checks.fail(
            "target", f"a column other than the sensitive attribute {sensitive!r}", repr(target)
        )
    if isinstance(graph, FairnessGraph):
        if graph.sensitive != sensitive:
            _checks.fail(
                "graph",
                f"a FairnessGraph whose sensitive attribute is {sensitive!r}",
                repr(graph.sensitive),
            )
        if fair:
            _checks.fail(
                "fair", "() with a FairnessGraph (it carries its own fair features)", repr(fair)
            )
        parents: dict[str, Sequence[str]] = dict(zip(graph.features, graph.parents))
    elif isinstance(graph, Mapping):
        parents = {str(k): [str(p) for p in v] for k, v in graph.items()}
    else:
        _checks.fail(
            "graph",
            "a mapping feature -> parents (column names) or a FairnessGraph",
            type(graph).__name__,
        )
    as_parent = sorted({k for k, v in parents.items() if target in v})
    if target in parents or as_parent:
        where = "a feature" if target in parents else f"a parent of {as_parent}"
        _checks.fail(
            "graph",
            f"features and parents other than the target {target!r}",
            f"{target!r} as {where}",
        )
    if not isinstance(graph, FairnessGraph):
        graph = FairnessGraph(parents, sensitive=sensitive, fair=fair)
    needed = [sensitive, *graph.features, target]
    missing = [c for c in needed if c not in columns]
    if missing:
        _checks.fail(
            "frame", f"columns {needed}", f"missing {missing} (columns present: {columns})"
        )
    categories = {} if categories is None else categories
    if not isinstance(categories, Mapping):
        _checks.fail("categories", "a mapping column -> coding", type(categories).__name__)
    extra = [c for c in categories if c not in needed]
    if extra:
        _checks.fail(
            "categories", f"codings for columns among {needed}", f"unused column(s) {extra}"
        )
    a = _column(frame, sensitive, categories.get(sensitive))
    if a.size == 0:
        _checks.fail("frame", "a table with at least one row", "0 rows")
    if sensitive in categories:
        coding = categories[sensitive]
        names = list(coding.keys()) if isinstance(coding, Mapping) else list(coding)
        numbers = (
            [float(v) for v in coding.values()]
            if isinstance(coding, Mapping)
            else list(range(len(names)))
        )
        absent = set(numbers) - set(np.unique(a).tolist())
        if absent:
            absent_levels = [k for k, v in zip(names, numbers) if v in absent]
            _checks.fail(
                f"frame[{sensitive!r}]",
                f"every level of categories[{sensitive!r}] present",
                f"no unit at level(s) {absent_levels}",
            )
    X = np.stack([_column(frame, v, categories.get(v)) for v in graph.features], 1)
    y = _column(frame, target, categories.get(target))
    constant = [repr(v) for j, v in enumerate(graph.features) if np.ptp(X[:, j]) == 0]
    if constant:  # before standardising, which would divide by their zero spread
        _checks.fail(
            "X", "non-constant feature columns", f"constant column(s) {', '.join(constant)}"
        )
    X = _standardise(X, standardise, "X")
    return Problem(graph, make_data(a, X, y, codes=codes, names=graph.features), target)
