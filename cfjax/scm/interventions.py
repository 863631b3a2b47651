"""Product grids of interventions, e.g. sex × 8 ages (K = 16) as in "Counterfactual
marginalisation", shift interventions, and the labelled intervention axis that says what each
of the K counterfactuals is."""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Mapping, Sequence
from typing import Any

import jax
import numpy as np
from flax import struct

from cfjax._checks import ValidationError, check_weights

__all__ = ["InterventionAxis", "Shift", "intervention_axis", "intervention_grid"]


@struct.dataclass
class Shift:
    """A shift intervention ``do(v := v_observed + delta)`` on a continuous node: each
    unit's own factual value moved by ``delta`` (``(K,)``, the same shift for every unit, or
    ``(N, K)``). Resolved inside the compiled counterfactual program, unit by unit, so the
    ``(N, K)`` values are never built on the host. Counterfactuals only: it needs the observed values.

    Example:
      >>> import cfjax as cf, numpy as np
      >>> scm = cf.scm.SCM({"age": [], "y": ["age"]},
      ...                  {"age": cf.scm.LocationScale(), "y": cf.scm.LocationScale()})
      >>> params = {"age": cf.scm.linear_gaussian_params([], 50.0, 10.0),
      ...           "y": cf.scm.linear_gaussian_params([0.1], 0.0, 1.0)}
      >>> data = {"age": np.array([30.0, 60.0]), "y": np.array([3.5, 6.0])}
      >>> out = scm.counterfactual(params, data, {"age": cf.scm.Shift(np.array([10.0]))})
      >>> out["age"].tolist(), out["y"].tolist()
      ([[40.0], [70.0]], [[4.5], [7.0]])
    """

    delta: jax.Array

    def __post_init__(self):
        # Python sequences and numbers become a host array here (inside a compiled program a
        # list would be a list of scalars); arrays, tracers and pytree placeholders are kept.
        d = self.delta
        if isinstance(d, (list, tuple, int, float, np.number, np.ndarray, str, bytes)):
            try:
                arr = np.asarray(d)
            except (TypeError, ValueError):
                arr = np.asarray(None)
            if arr.dtype.kind not in "biuf":
                raise ValidationError(
                    f"`delta`: expected numbers (a (K,) or (N, K) array or sequence), got {d!r}."
                )
            object.__setattr__(self, "delta", arr)

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(np.shape(self.delta))

    def resolve(self, observed: jax.Array) -> jax.Array:
        """The intervention values: ``(N, K)`` for the units' observed values ``(N,)``, ``(K,)``
        for one unit's observed value (a scalar, with its own ``(K,)`` shifts)."""
        observed = jax.numpy.asarray(observed)[..., None]
        delta = jax.numpy.asarray(self.delta).astype(observed.dtype)
        return observed + delta.reshape((1,) * (observed.ndim - delta.ndim) + delta.shape)


def intervention_grid(
    values: Mapping[str, Sequence[Any]],
    weights: Any = None,
    *,
    describe: bool = False,
) -> (
    tuple[dict[str, np.ndarray], np.ndarray]
    | tuple[dict[str, np.ndarray], np.ndarray, InterventionAxis]
):
    """All combinations of the given intervention values, the first node varying slowest.

    Args:
      values: ``node -> values`` to intervene with.
      weights: None for uniform weights ``1/K``; a ``(K,)`` array over the grid; or a mapping
        ``node -> per-value weights`` whose product gives the grid's weights (each is
        normalised to sum to 1).
      describe: also return the labelled :class:`InterventionAxis` of the grid.

    Returns:
      ``(interventions, weights)``: ``{node: (K,)}`` and ``(K,)`` weights summing to 1; with
      ``describe``, ``(interventions, weights, axis)``. The pair can be passed as one group
      to :meth:`cfjax.scm.SCM.counterfactual` and :func:`intervention_axis`, which keep its
      weights.

    Example:
      >>> do, q = intervention_grid({"sex": [0, 1], "age": np.linspace(20, 90, 8)})
      >>> do["sex"].shape, do["age"][:3].tolist(), float(q.sum())
      ((16,), [20.0, 30.0, 40.0], 1.0)
      >>> intervention_grid({"sex": [0, 1]}, describe=True)[2].labels
      ('do(sex=0)', 'do(sex=1)')
    """
    if not isinstance(values, Mapping) or not values:
        raise ValidationError(
            f"`values`: expected a non-empty mapping node -> values, got {values!r}."
        )
    columns = {}
    for name, vals in values.items():
        arr = np.asarray(vals)
        if arr.ndim != 1 or arr.size == 0:
            raise ValidationError(
                f"`values[{name!r}]`: expected a non-empty 1-d sequence, got shape {arr.shape}."
            )
        columns[name] = arr
    index = np.array(list(itertools.product(*(range(len(v)) for v in columns.values()))))
    grid = {name: col[index[:, j]] for j, (name, col) in enumerate(columns.items())}
    k = index.shape[0]
    if weights is None:
        q = np.full(k, 1.0 / k)
    elif isinstance(weights, Mapping):
        q = np.ones(k)
        for j, (name, col) in enumerate(columns.items()):
            if name not in weights:
                raise ValidationError(f"`weights`: missing per-value weights for {name!r}.")
            w = np.asarray(weights[name], np.float64)
            if w.shape != col.shape or (w < 0).any() or w.sum() <= 0:
                raise ValidationError(
                    f"`weights[{name!r}]`: expected {len(col)} non-negative weights, got {w.tolist()}."
                )
            q = q * (w / w.sum())[index[:, j]]
    else:
        check_weights("weights", weights, k)
        q = np.asarray(weights, np.float64)
    if describe:
        return grid, q, intervention_axis((grid, q))
    return grid, q


@dataclasses.dataclass(frozen=True, eq=False)
class InterventionAxis:
    """What each of the K counterfactuals along the intervention axis is.

    Attributes:
      labels: ``(K,)`` readable labels, e.g. ``"do(sex=1, age=40)"``, ``"shift(age=+5)"``,
        ``"null"`` for the null intervention (the units reconstructed). Values given per unit
        (``(N, K)``) are labelled ``<per unit>``, array-valued nodes (images) ``<array (H, W)>``.
      entries: ``(K,)`` mappings ``node -> (kind, value)``, kind ``"do"`` or ``"shift"``, value a
        Python number (None for per-unit values, a numpy array for array-valued nodes).
      weights: ``(K,)`` numpy float64 weights summing to 1, usable as
        ``cfjax.metrics.evaluate(..., weights=axis.weights)``. See :func:`intervention_axis`
        for the rule across concatenated groups.
      group_of: ``(K,)`` numpy int index of the group each entry comes from.

    Equality and hashing use the labels, groups and weights.
    """

    labels: tuple[str, ...]
    entries: tuple[dict[str, tuple[str, Any]], ...]
    weights: np.ndarray
    group_of: np.ndarray

    def __len__(self) -> int:
        return len(self.labels)

    @property
    def num_groups(self) -> int:
        return int(self.group_of.max()) + 1 if len(self) else 0

    def _key(self) -> tuple:
        return (self.labels, tuple(self.group_of.tolist()), tuple(self.weights.tolist()))

    def __eq__(self, other: Any) -> bool:
        return isinstance(other, InterventionAxis) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def to_dict(self) -> dict[str, list]:
        """A JSON-serialisable description: ``labels``, ``weights``, ``group`` and ``entries``
        (``[{node: {"kind": ..., "value": ...}}]``, array values as nested lists)."""

        def plain(x):
            return x.tolist() if isinstance(x, np.ndarray) else x

        return {
            "labels": list(self.labels),
            "weights": self.weights.tolist(),
            "group": self.group_of.tolist(),
            "entries": [
                {v: {"kind": kind, "value": plain(value)} for v, (kind, value) in e.items()}
                for e in self.entries
            ],
        }

    def __repr__(self) -> str:
        return f"InterventionAxis(K={len(self)}, groups={self.num_groups}, labels={list(self.labels)!r})"


def _number(x: Any) -> Any:
    x = np.asarray(x).item()
    return int(x) if isinstance(x, (bool, int)) else float(x) + 0.0  # no "-0" labels


def _format(kind: str, value: Any, shape: tuple[int, ...]) -> str:
    if value is None:
        return "<per unit>"
    if shape:
        return f"<array {shape}>"
    if isinstance(value, int):
        return f"{value:+d}" if kind == "shift" else str(value)
    return f"{value:+g}" if kind == "shift" else f"{value:g}"


def _group_entries(
    group: Any, what: str, events: Mapping[str, tuple[int, ...]] | None
) -> list[dict[str, tuple[str, Any]]]:
    """The per-entry ``node -> (kind, value)`` of one group of interventions."""
    if not isinstance(group, Mapping):
        raise ValidationError(
            f"`{what}`: expected a mapping node -> values, got {type(group).__name__}."
        )
    if not group:
        return [{}]
    k = None
    columns = {}
    for v, values in group.items():
        kind = "shift" if isinstance(values, Shift) else "do"
        arr = np.asarray(values.delta if kind == "shift" else values)
        event = (events or {}).get(v, ())
        # A shift is always of a scalar node, so a second axis is per unit ((N, K)); values of
        # a node whose event shape is unknown are read as scalar when 1-d, as arrays otherwise.
        per_unit = arr.ndim == 2 + len(event) if (events is not None or kind == "shift") else False
        axis = 1 if per_unit else 0
        if arr.ndim <= axis or arr.shape[axis] == 0:
            want = "(N, K)" if per_unit else "a leading K axis"
            raise ValidationError(
                f"`{what}[{v!r}]`: expected values with {want}, got shape {arr.shape}."
            )
        if k is None:
            k = arr.shape[axis]
        elif arr.shape[axis] != k:
            raise ValidationError(
                f"`{what}[{v!r}]`: expected K = {k} like the other nodes, got {arr.shape[axis]}."
            )
        columns[v] = (kind, arr, per_unit)
    assert k is not None, "at least one node"
    out = []
    for j in range(k):
        entry: dict[str, tuple[str, Any]] = {}
        for v, (kind, arr, per_unit) in columns.items():
            if per_unit:
                entry[v] = (kind, None)
            elif arr.ndim == 1:
                entry[v] = (kind, _number(arr[j]))
            else:
                entry[v] = (kind, np.array(arr[j]))
        out.append(entry)
    return out


def _label(entry: Mapping[str, tuple[str, Any]]) -> str:
    if not entry:
        return "null"
    parts = []
    for kind in ("do", "shift"):
        items = [
            f"{v}={_format(kind, value, np.shape(value) if isinstance(value, np.ndarray) else ())}"
            for v, (kd, value) in entry.items()
            if kd == kind
        ]
        if items:
            parts.append(f"{kind}({', '.join(items)})")
    return " ".join(parts)


def _split_weighted(group: Any) -> tuple[Any, Any]:
    """``(interventions, weights)`` of a group given as a mapping or as a pair from
    :func:`intervention_grid`."""
    if (
        isinstance(group, tuple)
        and len(group) == 2
        and isinstance(group[0], Mapping)
        and not isinstance(group[1], Mapping)
    ):
        return group[0], group[1]
    return group, None


def split_groups(interventions: Any) -> tuple[Any, list[Any]]:
    """The interventions with any ``(grid, weights)`` pairs unwrapped (a mapping, or a list of
    mappings) and the within-group weights (None: uniform) of each group."""
    inner, w = _split_weighted(interventions)
    if isinstance(inner, Mapping):
        return inner, [w]
    if isinstance(interventions, (list, tuple)) and interventions:
        pairs = [_split_weighted(g) for g in interventions]
        return [g for g, _ in pairs], [w for _, w in pairs]
    return interventions, [None]


def intervention_axis(
    interventions: Any,
    group_weights: Any = "groups",
    *,
    event_shapes: Mapping[str, tuple[int, ...]] | None = None,
) -> InterventionAxis:
    """The labelled intervention axis of one group of interventions or of several
    concatenated along K (as :meth:`cfjax.scm.SCM.counterfactual` takes them).

    A group is a mapping ``node -> (K_g,) values`` (or ``(N, K_g)`` per-unit values, or a
    :class:`Shift`), the empty mapping (the null intervention, K_g = 1), or the pair
    ``(interventions, weights)`` returned by :func:`intervention_grid`, whose weights are
    kept within the group. A group without weights is uniform within itself.

    Weights across groups (``group_weights``):

    - ``"groups"`` (default): every group gets the same total mass ``1/G``, spread over its
      entries by its own weights;
    - ``"entries"``: every group gets mass ``K_g / K`` (with uniform groups: every entry 1/K);
    - a ``(G,)`` sequence of non-negative group masses, normalised to sum to 1.

    Args:
      interventions: one group or a non-empty sequence of groups.
      group_weights: the rule above.
      event_shapes: ``node -> event shape`` (``SCM`` passes its own) to tell per-unit values
        from array-valued nodes; without it, 1-d values are scalars and others arrays.

    Returns:
      an :class:`InterventionAxis` of length K (the sum of the groups' K_g).

    Example:
      >>> import numpy as np
      >>> grid = intervention_grid({"sex": [0, 1], "age": [40.0, 60.0]})
      >>> axis = intervention_axis([grid, {"age": Shift([5.0, -5.0])}])
      >>> axis.labels
      ('do(sex=0, age=40)', 'do(sex=0, age=60)', 'do(sex=1, age=40)', 'do(sex=1, age=60)', 'shift(age=+5)', 'shift(age=-5)')
      >>> axis.weights.tolist(), axis.group_of.tolist()
      ([0.125, 0.125, 0.125, 0.125, 0.25, 0.25], [0, 0, 0, 0, 1, 1])
    """
    groups, within = split_groups(interventions)
    if isinstance(groups, Mapping):
        groups = [groups]
    if not isinstance(groups, (list, tuple)) or not groups:
        raise ValidationError(
            f"`interventions`: expected a mapping node -> values or a non-empty sequence of them, "
            f"got {type(interventions).__name__}."
        )
    entries, group_of, weights = [], [], []
    sizes = []
    for g, (group, w) in enumerate(zip(groups, within)):
        what = "interventions" if len(groups) == 1 else f"interventions[{g}]"
        es = _group_entries(group, what, event_shapes)
        kg = len(es)
        if w is None:
            q = np.full(kg, 1.0 / kg)
        else:
            check_weights(f"{what} weights", w, kg)
            q = np.asarray(w, np.float64)
        entries += es
        group_of += [g] * kg
        weights.append(q)
        sizes.append(kg)
    n_groups = len(sizes)
    if isinstance(group_weights, str) and group_weights == "groups":
        mass = np.full(n_groups, 1.0 / n_groups)
    elif isinstance(group_weights, str) and group_weights == "entries":
        mass = np.asarray(sizes, np.float64) / sum(sizes)
    else:
        try:
            mass = np.asarray(group_weights, np.float64)
        except (TypeError, ValueError):
            mass = np.full(0, np.nan)
        if (
            mass.shape != (n_groups,)
            or not np.isfinite(mass).all()
            or (mass < 0).any()
            or mass.sum() <= 0
        ):
            raise ValidationError(
                f"`group_weights`: expected 'groups', 'entries' or {n_groups} non-negative group masses, "
                f"got {group_weights!r}."
            )
        mass = mass / mass.sum()
    q = np.concatenate([m * w for m, w in zip(mass, weights)])
    return InterventionAxis(
        labels=tuple(_label(e) for e in entries),
        entries=tuple(entries),
        weights=q,
        group_of=np.asarray(group_of, np.int64),
    )
