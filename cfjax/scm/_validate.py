"""Input validation of :class:`cfjax.scm.SCM`: data, noise and interventions checked against
the model's nodes, event shapes and supports, with messages naming the argument."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from cfjax import _checks
from cfjax._checks import ValidationError
from cfjax.scm.interventions import Shift, split_groups
from cfjax.scm.mechanism import Mechanism
from cfjax.typing import KeyLike

Data = Mapping[str, Any]

#: the name of the null intervention's placeholder node (K = 1, nothing set)
NULL = "__null__"


def dtype(mech: Mechanism):
    """The dtype of a node's values: int32 classes for discrete nodes, the default float."""
    return jnp.int32 if mech.discrete else jnp.result_type(float)


def n_units(data: Mapping[str, Any]) -> int:
    return int(np.shape(next(iter(data.values())))[0])


def shape_text(lead: list[str], event: tuple[int, ...]) -> str:
    """A shape for messages: ``shape_text(["N", "K"], (4, 5))`` is ``(N, K, 4, 5)``, ``(N,)``."""
    parts = [*lead, *(str(d) for d in event)]
    return "(" + ", ".join(parts) + ("," if len(parts) == 1 else "") + ")"


def is_numeric_array(x: Any) -> bool:
    """An array JAX can take as it is (numbers or booleans); anything else is converted on
    the host, where a bad dtype gets its message."""
    return isinstance(x, (jax.Array, np.ndarray)) and x.dtype.kind in "biuf"


def as_array(x: Any) -> Any:
    """``x`` as it is when it is already an array (host or device), else a jax array."""
    return x if isinstance(x, (jax.Array, np.ndarray)) else jnp.asarray(x)


def take(a: Any, idx: np.ndarray) -> Any:
    """Units ``idx`` of ``a`` (leading axis), on the host for numpy arrays."""
    return np.take(a, idx, axis=0) if isinstance(a, np.ndarray) else a[idx]


def data(
    scm, data: Data, what: str, check: bool = True, nodes: tuple[str, ...] | None = None
) -> dict[str, jax.Array]:
    """Columns of every node (of ``nodes`` when given) as arrays (continuous: float,
    discrete: int32), validated: shape ``(N, *E)``, values in the support.

    With ``check=False`` only the structure is validated (columns, shapes) and numeric
    columns come back as given; :func:`cast_data` then converts them inside a compiled
    program and :meth:`Mechanism.values_ok` checks their values there.
    """
    if hasattr(data, "columns") and hasattr(data, "to_numpy"):  # a pandas DataFrame
        data = {c: data[c].to_numpy() for c in data.columns}
    if not isinstance(data, Mapping):
        raise ValidationError(
            f"`{what}`: expected a mapping node -> array or a DataFrame, got {type(data).__name__}."
        )
    out: dict[str, jax.Array] = {}
    n = None
    first = None
    for v, mech in zip(scm.nodes, scm.mechanisms):
        if nodes is not None and v not in nodes:
            continue
        if v not in data:
            children = scm.graph.children(v)
            role = f" (a parent of {list(children)})" if children else ""
            raise ValidationError(
                f"`{what}`: missing column {v!r}{role}; got columns {sorted(data)}."
            )
        col = data[v]
        shape, event = tuple(np.shape(col)), tuple(mech.event_shape)
        if len(shape) != 1 + len(event) or shape[1:] != event:
            raise ValidationError(
                f"`{what}[{v!r}]`: expected shape {shape_text(['N'], event)}, got {shape}."
            )
        if n is None:
            n, first = shape[0], v
            if n == 0:
                raise ValidationError(f"`{what}`: expected at least one unit, got 0 rows.")
        elif shape[0] != n:
            raise ValidationError(
                f"`{what}[{v!r}]`: expected {n} rows like {first!r}, got {shape[0]}."
            )
        if not mech.discrete:
            _checks.warn_if_downcast(f"{what}[{v!r}]", col)
        if not check and is_numeric_array(col):
            out[v] = col  # converted inside the compiled program
            continue
        if _checks.is_concrete(col):
            mech.check_values(v, col, f"{what}[{v!r}]")
        out[v] = jnp.asarray(col).astype(dtype(mech))
    return out


def cast_data(scm, raw: Mapping[str, jax.Array]) -> dict[str, jax.Array]:
    """(Traced) columns cast to their node's dtype."""
    return {v: jnp.asarray(raw[v]).astype(dtype(m)) for v, m in zip(scm.nodes, scm.mechanisms)}


def noise(scm, noise: Data, n: int, convert: bool = True) -> dict[str, Any]:
    """Validated noise of the nodes given (any pytree per node, N units on the leading axis
    of every leaf); with ``convert`` its leaves become jax arrays."""
    if not isinstance(noise, Mapping):
        raise ValidationError(
            f"`noise`: expected a mapping node -> noise (the output of `abduct`), got {type(noise).__name__}."
        )
    unknown = [v for v in noise if v not in scm.nodes]
    if unknown:
        raise ValidationError(f"`noise`: unknown nodes {unknown}; nodes are {list(scm.nodes)}.")
    out = {}
    for v in scm.nodes:
        if v not in noise:
            continue
        for leaf in jax.tree.leaves(noise[v]):
            if np.shape(leaf)[:1] != (n,):
                raise ValidationError(
                    f"`noise[{v!r}]`: expected {n} units on the first axis (of every leaf), got shape {np.shape(leaf)}."
                )
        out[v] = jax.tree.map(jnp.asarray if convert else as_array, noise[v])
    return out


def check_key(scm, key: KeyLike | None, given: Mapping[str, Any] | None = None) -> None:
    """A key is needed when a node abducted by posterior sampling is not given its noise."""
    given = given or {}
    names = [
        v for v, m in zip(scm.nodes, scm.mechanisms) if m.stochastic_abduction and v not in given
    ]
    if key is None and names:
        raise ValidationError(
            f"`key`: nodes {names} are abducted by posterior sampling and need a key, got None."
        )


def node_subset(scm, nodes: Any) -> tuple[str, ...]:
    """Validated node names, in topological order."""
    if isinstance(nodes, str) or not isinstance(nodes, (list, tuple, set, frozenset)) or not nodes:
        raise ValidationError(
            f"`nodes`: expected a non-empty sequence of node names, got {nodes!r}."
        )
    unknown = [v for v in nodes if v not in scm.nodes]
    if unknown:
        raise ValidationError(f"`nodes`: unknown nodes {unknown}; nodes are {list(scm.nodes)}.")
    return tuple(v for v in scm.nodes if v in nodes)


def per_unit(scm, node: str, values: Any) -> bool:
    """Whether one intervention's values are per unit ``(N, K, *E)`` (a Shift's ``(N, K)``),
    not common to every unit ``(K, *E)``."""
    if isinstance(values, Shift):
        return np.ndim(values.delta) == 2
    return np.ndim(values) == 2 + len(scm.event(node)) if node in scm.nodes else False


def intervention_groups(
    scm,
    interventions: Any,
    n: int,
    check: bool = True,
    observed: Mapping[str, jax.Array] | None = None,
) -> tuple[dict[str, Any], ...]:
    """A mapping is one group; a sequence of mappings is several, concatenated along K.
    ``observed`` (checked data) resolves :class:`Shift` values when ``check`` is True.
    A group may be an ``(interventions, weights)`` pair from :func:`intervention_grid`
    (the weights only matter to :meth:`intervention_axis`; they are checked here).

    Values keep their layout: common ``(K, *E)`` or per unit ``(N, K, *E)``."""
    interventions, within = split_groups(interventions)
    groups: tuple[dict[str, Any], ...]
    if isinstance(interventions, Mapping):
        groups = (_group(scm, interventions, n, "interventions", check, observed),)
    elif isinstance(interventions, (list, tuple)) and interventions:
        groups = tuple(
            _group(scm, g, n, f"interventions[{i}]", check, observed)
            for i, g in enumerate(interventions)
        )
    else:
        raise ValidationError(
            f"`interventions`: expected a mapping node -> values or a non-empty sequence of them, "
            f"got {type(interventions).__name__}."
        )
    for i, (g, w) in enumerate(zip(groups, within)):
        if w is not None:
            what = "interventions" if len(groups) == 1 else f"interventions[{i}]"
            _checks.check_weights(f"{what} weights", w, group_size(scm, g))
    return groups


def group_size(scm, group: Mapping[str, Any]) -> int:
    """K of one validated group."""
    v, x = next(iter(group.items()))
    shape = x.shape if isinstance(x, Shift) else np.shape(x)
    return int(shape[1] if per_unit(scm, v, x) else shape[0])


def _group(
    scm,
    interventions: Data,
    n: int,
    what: str,
    check: bool = True,
    observed: Mapping[str, jax.Array] | None = None,
) -> dict[str, Any]:
    """One validated group of interventions (with ``check=False``: structure only, values
    as given, shifts unresolved)."""
    if not isinstance(interventions, Mapping):
        raise ValidationError(
            f"`{what}`: expected a mapping node -> values, got {type(interventions).__name__}."
        )
    if not interventions:
        return {NULL: jnp.zeros((1,))}
    k = None
    out: dict[str, Any] = {}
    for v, values in interventions.items():
        if v not in scm.nodes:
            raise ValidationError(f"`{what}`: unknown node {v!r}; nodes are {list(scm.nodes)}.")
        mech = scm.mechanism(v)
        event = tuple(mech.event_shape)
        shift = isinstance(values, Shift)
        if shift and mech.discrete:
            raise ValidationError(
                f"`{what}[{v!r}]`: a Shift applies to continuous nodes; {v!r} is discrete."
            )
        if shift and event:
            raise ValidationError(
                f"`{what}[{v!r}]`: a Shift applies to scalar nodes; {v!r} has event shape {event}: "
                f"pass explicit values of shape {shape_text(['K'], event)} or {shape_text([str(n), 'K'], event)}."
            )
        shape = tuple(values.shape if shift else np.shape(values))
        unit = len(shape) == 2 + len(event)
        if not shape or not (
            (len(shape) == 1 + len(event) and shape[1:] == event)
            or (unit and shape[0] == n and shape[2:] == event)
        ):
            raise ValidationError(
                f"`{what}[{v!r}]`: expected shape {shape_text(['K'], event)} or {shape_text([str(n), 'K'], event)}, "
                f"got {shape}."
            )
        kv = shape[1] if unit else shape[0]
        if k is None:
            k = kv
            if k == 0:
                raise ValidationError(
                    f"`{what}[{v!r}]`: expected at least one intervention, got K = 0."
                )
        elif kv != k:
            raise ValidationError(
                f"`{what}[{v!r}]`: expected K = {k} like the other nodes, got {kv}."
            )
        if not check:
            out[v] = values if shift or is_numeric_array(values) else jnp.asarray(values)
            continue
        if shift:
            if observed is None:
                raise ValidationError(
                    f"`{what}[{v!r}]`: a Shift moves observed values and is only defined for "
                    f"counterfactuals; pass explicit values here."
                )
            if _checks.is_concrete(values.delta):  # the shifted values' support is checked below
                _checks.check_finite(f"{what}[{v!r}].delta", values.delta)
            values = values.resolve(observed[v])
        if _checks.is_concrete(values):
            mech.check_values(v, values, f"{what}[{v!r}]")
        out[v] = jnp.asarray(values).astype(dtype(mech))
    return out


def raise_value_error(scm, data_: Data, interventions: Any, n: int) -> None:
    """The precise error for a value outside its node's support (found inside a compiled
    program): the inputs checked again on the host."""
    checked = data(scm, data_, "data")
    intervention_groups(scm, interventions, n, observed=checked)
    raise ValidationError("`data`/`interventions`: a value lies outside its node's support.")
