"""Causal graphs: a validated, topologically ordered, hashable mapping node -> parents."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence

from cfjax._checks import ValidationError

__all__ = ["Graph"]


@dataclasses.dataclass(frozen=True)
class Graph:
    """A directed acyclic graph over named nodes.

    Build it with :meth:`from_parents`; ``order`` is a topological order (ties kept in the
    order the nodes were given) and ``parents[i]`` are the parents of ``order[i]``, in the
    order given. Being frozen and made of tuples, a graph is hashable and can be a static
    argument of ``jax.jit``.

    Example:
      >>> g = Graph.from_parents({"age": [], "sex": [], "lung": ["sex", "age"]})
      >>> g.order, g.parents_of("lung"), g.descendants("age")
      (('age', 'sex', 'lung'), ('sex', 'age'), ('lung',))
    """

    order: tuple[str, ...]
    parents: tuple[tuple[str, ...], ...]

    @classmethod
    def from_parents(
        cls, parents: Mapping[str, Sequence[str]] | Iterable[tuple[str, Sequence[str]]]
    ) -> Graph:
        """Validate ``node -> parents`` and order it topologically.

        Raises ValidationError for duplicate node names, duplicate or unknown parents,
        self-loops and cycles.
        """
        items = list(parents.items()) if isinstance(parents, Mapping) else list(parents)
        names = [name for name, _ in items]
        seen: set[str] = set()
        for name in names:
            if not isinstance(name, str) or not name:
                raise ValidationError(
                    f"`parents`: expected non-empty string node names, got {name!r}."
                )
            if name in seen:
                raise ValidationError(f"`parents`: node {name!r} is declared twice.")
            seen.add(name)
        pa: dict[str, tuple[str, ...]] = {}
        for name, ps in items:
            if isinstance(ps, str):
                raise ValidationError(
                    f"`parents[{name!r}]`: expected a sequence of node names, got the string {ps!r}."
                )
            ps = tuple(ps)
            for p in ps:
                if p not in seen:
                    raise ValidationError(
                        f"`parents[{name!r}]`: unknown parent {p!r}; nodes are {sorted(seen)}."
                    )
                if p == name:
                    raise ValidationError(f"`parents[{name!r}]`: a node cannot be its own parent.")
            if len(set(ps)) != len(ps):
                raise ValidationError(
                    f"`parents[{name!r}]`: a parent is listed twice in {list(ps)}."
                )
            pa[name] = ps
        order: list[str] = []
        placed: set[str] = set()
        remaining = list(names)
        while remaining:
            ready = [v for v in remaining if all(p in placed for p in pa[v])]
            if not ready:
                raise ValidationError(
                    f"`parents`: the graph has a cycle through {sorted(remaining)}."
                )
            for v in ready:
                order.append(v)
                placed.add(v)
            remaining = [v for v in remaining if v not in placed]
        return cls(tuple(order), tuple(pa[v] for v in order))

    @property
    def nodes(self) -> tuple[str, ...]:
        return self.order

    def parents_of(self, node: str) -> tuple[str, ...]:
        return self.parents[self.index(node)]

    def index(self, node: str) -> int:
        try:
            return self.order.index(node)
        except ValueError:
            raise ValidationError(f"unknown node {node!r}; nodes are {list(self.order)}.") from None

    def children(self, node: str) -> tuple[str, ...]:
        return tuple(v for v, ps in zip(self.order, self.parents) if node in ps)

    def descendants(self, node: str) -> tuple[str, ...]:
        """Strict descendants of ``node``, in topological order."""
        self.index(node)
        out: set[str] = set()
        for v, ps in zip(self.order, self.parents):
            if any(p == node or p in out for p in ps):
                out.add(v)
        return tuple(v for v in self.order if v in out)
