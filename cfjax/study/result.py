"""What :func:`cfjax.study.run` returns: the study's numbers and the objects behind them."""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Iterator, Mapping
from typing import Any

import cfjax as cf
from cfjax.study.learned import LearnedSource

__all__ = ["StudyResult"]

#: the private keys :func:`cfjax.study.run` once returned, and the fields that hold them now
_MOVED = {"_chests": "chests", "_tests": "tests", "_learned_source": "learned_source"}


@dataclasses.dataclass(frozen=True, eq=False)
class StudyResult(Mapping[str, Any]):
    """The study's results (a read-only mapping of ``results``) and the objects a later step
    needs: the sites' SCMs, the test sets, the trained generators.

    ``result["settings"]["A"]["ctc"]`` reads ``results``, whose content is what
    ``results.json`` holds (arrays indexed by predictor, not named; run times beside them).

    Attributes:
      results: every number of the study, as plain dicts and arrays.
      chests: the two sites' SCMs, ``{"A": ChestSCM, "B": ChestSCM}``.
      tests: the three settings' test sets, ``{"A": records, "B": records, "A->B": records}``
        (``"parents"``, ``"noise"``, ``"image"``, units first).
      learned_source: the trained generators as a counterfactual source
        (:class:`cfjax.study.LearnedSource`; ``learned_source.fits[site]`` one site's), or None
        when the study trained none.
    """

    results: Mapping[str, Any]
    chests: Mapping[str, cf.data.ChestSCM]
    tests: Mapping[str, Mapping[str, Any]]
    learned_source: LearnedSource | None = None

    def __getitem__(self, name: str) -> Any:
        if name in _MOVED:
            value = self._moved(name)
            if value is None:
                raise KeyError(name)
            return value
        return self.results[name]

    def _moved(self, name: str) -> Any:
        """The field that holds what ``run`` once returned under the private key ``name``, with a
        DeprecationWarning naming it."""
        warnings.warn(
            f"cfjax.study.run(...)[{name!r}] is deprecated and will be removed in the next release: "
            f"use cfjax.study.run(...).{_MOVED[name]}",
            DeprecationWarning,
            stacklevel=3,
        )
        return getattr(self, _MOVED[name])

    def __iter__(self) -> Iterator[str]:
        return iter(self.results)

    def __len__(self) -> int:
        return len(self.results)

    def __contains__(self, name: object) -> bool:
        if isinstance(name, str) and name in _MOVED:
            return self._moved(name) is not None
        return name in self.results
