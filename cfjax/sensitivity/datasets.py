"""Data for the sensitivity analysis: the law school and NHS staff survey loaders (paper 001's
variable choices as explicit options) and a synthetic SCM with a known error correlation.

Every loader returns a :class:`Problem` — the graph, validated :class:`FairnessData` and the
column names — and takes a path: nothing is downloaded or bundled.
"""

from __future__ import annotations

import csv
import os
from typing import Any, NamedTuple

import numpy as np

from cfjax import _checks
from cfjax._core.keys import numpy_rng
from cfjax.sensitivity.problem import FairnessData, FairnessGraph, make_data
from cfjax.typing import KeyLike

__all__ = ["Problem", "load_law_school", "load_nhs", "synthetic"]


class Problem(NamedTuple):
    """A fairness problem ready for :func:`cfjax.sensitivity.fit`: the ``graph``, the ``data``,
    the ``target`` name and, for synthetic data, the ``true_correlation`` of the errors."""

    graph: FairnessGraph
    data: FairnessData
    target: str
    true_correlation: np.ndarray | None = None


def _standardise(x: np.ndarray, how: str | None, name: str) -> np.ndarray:
    if how is None:
        return x
    if how not in ("population", "sample"):
        _checks.fail("standardise", "'population' (the paper's), 'sample' or None", repr(how))
    return (x - x.mean(0)) / x.std(0, ddof=0 if how == "population" else 1)


def _sensitive(positive: np.ndarray, coding: str) -> np.ndarray:
    """A binary group as ±1 (the paper's) or 0/1."""
    if coding == "pm1":
        return np.where(positive, 1.0, -1.0)
    if coding == "01":
        return positive.astype(np.float64)
    _checks.fail("sensitive_coding", "'pm1' (the paper's: +1 / -1) or '01'", repr(coding))


def _path(path: Any, what: str) -> str:
    path = os.fspath(path)
    if not os.path.isfile(path):
        _checks.fail("path", f"an existing {what} file", repr(path))
    return path


def load_law_school(
    path: Any,
    *,
    sensitive_coding: str = "pm1",
    standardise: str | None = "population",
    graph: FairnessGraph | None = None,
) -> Problem:
    """The LSAC law school data as paper 001 uses it: A = +1 for White, −1 otherwise
    (``sensitive_coding="01"`` for 1/0); G = UGPA and L = LSAT z-scored with the population
    standard deviation (``standardise``: ``"sample"`` or None otherwise); Y = ZFYA as recorded;
    graph A→G, A→L, G→L. Every row is used, in file order.

    ``path``: a CSV with (at least) the columns race, UGPA, LSAT and ZFYA.
    """
    path = _path(path, "law school CSV")
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    needed = ["race", "UGPA", "LSAT", "ZFYA"]
    missing = [c for c in needed if not rows or c not in rows[0]]
    if missing:
        _checks.fail("path", f"a CSV with columns {needed}", f"missing {missing}")
    try:
        ugpa, lsat, zfya = (np.array([float(r[c]) for r in rows]) for c in ("UGPA", "LSAT", "ZFYA"))
    except ValueError as e:
        _checks.fail("path", "numeric UGPA, LSAT and ZFYA", str(e))
    a = _sensitive(np.array([r["race"] == "White" for r in rows]), sensitive_coding)
    X = _standardise(np.stack([ugpa, lsat], 1), standardise, "X")
    graph = graph or FairnessGraph({"G": ["A"], "L": ["A", "G"]})
    return Problem(graph, make_data(a, X, zfya), "ZFYA")


NHS_COLUMNS = (
    "race",
    "gender",
    "sex_orient",
    "disability",
    "age",
    "job_sat",
    "manager_sat",
    "org_sat",
    "health",
)


def load_nhs(
    path: Any,
    *,
    sensitive_coding: str = "pm1",
    standardise: str | None = "population",
    graph: FairnessGraph | None = None,
) -> Problem:
    """The NHS staff survey 2014 indices as paper 001 uses them: A = 2·race − 3 (±1;
    ``sensitive_coding="01"`` for 0/1); O = org_sat, M = manager_sat, J = job_sat, each
    z-scored (population std by default); Y = health as recorded; graph O←A, M←A,O,
    J←A,O,M. The other columns are unused.

    ``path``: an ``.npz`` with arrays ``data (n, 9)`` and ``colnames``.
    """
    path = _path(path, "NHS .npz")
    with np.load(path, allow_pickle=False) as f:
        if "data" not in f or "colnames" not in f:
            _checks.fail(
                "path", "an .npz with arrays 'data' and 'colnames'", f"arrays {list(f.keys())}"
            )
        table, names = np.asarray(f["data"], np.float64), [str(c) for c in f["colnames"]]
    missing = [c for c in ("race", "org_sat", "manager_sat", "job_sat", "health") if c not in names]
    if missing:
        _checks.fail("path", f"columns {list(NHS_COLUMNS)}", f"missing {missing}")
    col = {c: table[:, names.index(c)] for c in names}
    race = col["race"]
    if not np.isin(race, (1.0, 2.0)).all():
        _checks.fail("path", "race coded 1 or 2", f"values {np.unique(race)[:5].tolist()}")
    a = _sensitive(race == 2.0, sensitive_coding)
    X = _standardise(
        np.stack([col["org_sat"], col["manager_sat"], col["job_sat"]], 1), standardise, "X"
    )
    graph = graph or FairnessGraph({"O": ["A"], "M": ["A", "O"], "J": ["A", "O", "M"]})
    return Problem(graph, make_data(a, X, col["health"]), "health")


def synthetic(n: int = 5000, *, correlation: float | np.ndarray = 0.5, key: KeyLike = 0) -> Problem:
    """The built-in default: a law-school-shaped SCM with a known error correlation.

    A = ±1 with P(+1) = 0.6; ``G = 0.6 A + ε_G``; ``L = 0.4 A + 0.7 G + 0.35 G² + ε_L``;
    ``Y = G + 0.5 L + 0.3 G L + noise``; ``(ε_G, ε_L)`` jointly normal with standard deviations
    (1, 0.7) and correlation ``correlation`` (a number, or a 2 × 2 correlation matrix). The
    non-linear terms matter: with a linear SCM and predictor, correlated errors leave the
    counterfactuals' residuals unchanged and CFU is 0 for every P. ``key``: the draws' randomness,
    a PRNG key or an int seed (:func:`cfjax._core.keys.numpy_rng`: the same key, the same data).
    """
    n = _checks.check_positive_int("n", n)
    P = np.asarray(correlation, np.float64)
    P = np.array([[1.0, P], [P, 1.0]]) if P.ndim == 0 else P
    from cfjax.sensitivity.correlation import check_correlation

    check_correlation(P, min_eig=1e-9, name="correlation")
    rng = numpy_rng(key)
    sd = np.array([1.0, 0.7])
    eps = rng.multivariate_normal(np.zeros(2), sd[:, None] * P * sd[None, :], size=n)
    a = np.where(rng.random(n) < 0.6, 1.0, -1.0)
    g = 0.6 * a + eps[:, 0]
    lsat = 0.4 * a + 0.7 * g + 0.35 * g**2 + eps[:, 1]
    y = g + 0.5 * lsat + 0.3 * g * lsat + 0.5 * rng.standard_normal(n)
    graph = FairnessGraph({"G": ["A"], "L": ["A", "G"]})
    return Problem(graph, make_data(a, np.stack([g, lsat], 1), y), "Y", P)
