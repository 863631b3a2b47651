"""A structural causal model: a graph plus one mechanism per node, with counterfactuals by
abduction–action–prediction over all K interventions and N units in one jitted call."""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Mapping

import jax
import jax.numpy as jnp
import numpy as np
import optax

from cfjax import _checks
from cfjax._checks import ValidationError
from cfjax.scm.graph import Graph
from cfjax.scm.interventions import Shift
from cfjax.scm.mechanism import Mechanism

__all__ = ["SCM"]

Data = Mapping[str, Any]


@dataclasses.dataclass(frozen=True)
class SCM:
    """Graph + mechanisms. Frozen and hashable: it is the static structure of every jitted
    function below; parameters are a separate pytree ``{node: mechanism params}``.

    Args:
      graph: a :class:`Graph`, or a mapping ``node -> parents`` to build one.
      mechanisms: a mapping ``node -> Mechanism`` covering every node.

    Shapes: data are ``{node: (N,)}`` (a pandas DataFrame is accepted), noise is
    ``{node: (N, ...)}``, interventions are ``{node: (K,)}`` (one value per intervention, for
    every unit) or ``{node: (K, N)}`` (per-unit values), or a :class:`Shift` of the
    observed values (``do(age := age + 10)``, counterfactuals only), or a sequence of
    such mappings intervening on different nodes (concatenated along K, e.g. 8 values of
    do(X1) followed by 8 shifts of X3), and counterfactuals come back as
    ``{node: (K, N)}``. Discrete nodes hold int32 classes.

    Example:
      >>> import cfjax as cf, jax, numpy as np
      >>> scm = cf.scm.SCM({"a": [], "b": ["a"]},
      ...                  {"a": cf.scm.LocationScale(), "b": cf.scm.LocationScale()})
      >>> params = {"a": cf.scm.linear_gaussian_params([], 0.0, 1.0),
      ...           "b": cf.scm.linear_gaussian_params([2.0], 0.0, 1.0)}
      >>> data = {"a": np.array([1.0, 2.0]), "b": np.array([2.5, 3.0])}
      >>> out = scm.counterfactual(params, data, {"a": np.array([0.0, 3.0])})
      >>> out["b"].tolist()  # b' = 2 a' + (b − 2 a)
      [[0.5, -1.0], [6.5, 5.0]]
    """

    graph: Graph
    mechanisms: tuple[Mechanism, ...]

    def __init__(self, graph: Graph | Mapping[str, Any], mechanisms: Mapping[str, Mechanism]):
        graph = graph if isinstance(graph, Graph) else Graph.from_parents(graph)
        missing = [v for v in graph.order if v not in mechanisms]
        extra = [v for v in mechanisms if v not in graph.order]
        if missing or extra:
            raise ValidationError(
                f"`mechanisms`: expected one mechanism per node of {list(graph.order)}, "
                f"missing {missing}, unknown {extra}.")
        for v in graph.order:
            if not isinstance(mechanisms[v], Mechanism):
                raise ValidationError(f"`mechanisms[{v!r}]`: expected a Mechanism, got {type(mechanisms[v]).__name__}.")
        object.__setattr__(self, "graph", graph)
        object.__setattr__(self, "mechanisms", tuple(mechanisms[v] for v in graph.order))

    # ------------------------------------------------------------------ structure helpers
    @property
    def nodes(self) -> tuple[str, ...]:
        return self.graph.order

    def mechanism(self, node: str) -> Mechanism:
        return self.mechanisms[self.graph.index(node)]

    def _parent_vector(self, node_index: int, values: Mapping[str, jax.Array]) -> jax.Array:
        parents = self.graph.parents[node_index]
        if not parents:
            return jnp.zeros((0,), jnp.result_type(float))
        return jnp.concatenate([self.mechanism(p).encode(values[p]) for p in parents])

    def _parent_dim(self, node_index: int) -> int:
        return sum(self.mechanism(p).encoded_dim for p in self.graph.parents[node_index])

    # ------------------------------------------------------------------ one unit
    def predict_unit(self, params: Any, noise: Mapping[str, jax.Array],
                     do: Mapping[str, jax.Array] | None = None,
                     observed: Mapping[str, jax.Array] | None = None) -> dict[str, jax.Array]:
        """Values of one unit from its noise, in topological order, intervened nodes set to
        ``do[node]`` (action) and the others recomputed from their parents (prediction).

        With ``observed`` (a counterfactual), nodes that are neither intervened on nor
        descendants of an intervened node keep their observed value exactly instead of being
        recomputed (which would only add round-off).
        """
        do = do or {}
        affected = _affected(self.graph, tuple(sorted(v for v in do if v in self.nodes)))
        values: dict[str, jax.Array] = {}
        for i, (v, mech) in enumerate(zip(self.nodes, self.mechanisms)):
            if v in do:
                values[v] = do[v]
            elif observed is not None and v not in affected:
                values[v] = observed[v]
            else:
                values[v] = mech.forward(params[v], noise[v], self._parent_vector(i, values))
        return values


    def abduct_unit(self, params: Any, x: Mapping[str, jax.Array], key: jax.Array | None) -> dict[str, jax.Array]:
        """One unit's exogenous noise given its observed values."""
        noise = {}
        for i, (v, mech) in enumerate(zip(self.nodes, self.mechanisms)):
            node_key = None if key is None else jax.random.fold_in(key, i)
            noise[v] = mech.abduct(params[v], x[v], self._parent_vector(i, x), node_key)
        return noise

    def log_prob_unit(self, params: Any, x: Mapping[str, jax.Array]) -> jax.Array:
        """``log p(x)`` of one unit: the sum of every node's conditional log-likelihood."""
        return sum(mech.log_prob(params[v], x[v], self._parent_vector(i, x))
                   for i, (v, mech) in enumerate(zip(self.nodes, self.mechanisms)))

    def sample_noise_unit(self, key: jax.Array) -> dict[str, jax.Array]:
        return {v: mech.sample_noise(jax.random.fold_in(key, i))
                for i, (v, mech) in enumerate(zip(self.nodes, self.mechanisms))}

    # ------------------------------------------------------------------ public API
    def init(self, key: jax.Array) -> dict[str, Any]:
        """Fresh parameters ``{node: params}``."""
        return {v: mech.init(jax.random.fold_in(key, i), self._parent_dim(i))
                for i, (v, mech) in enumerate(zip(self.nodes, self.mechanisms))}

    def log_prob(self, params: Any, data: Data) -> jax.Array:
        """Per-unit log-likelihood, shape ``(N,)``."""
        return self._log_prob(params, self._data(data, "data"))

    def sample(self, params: Any, key: jax.Array, n: int) -> dict[str, jax.Array]:
        """``n`` units from the observational distribution, ``{node: (n,)}``."""
        n = _checks.check_positive_int("n", n)
        return self._sample(params, key, n)

    def interventional_samples(self, params: Any, key: jax.Array, n: int,
                               interventions: Data) -> dict[str, jax.Array]:
        """``n`` fresh units under each of K interventions, ``{node: (K, n)}``. The same
        noise draws are used under every intervention (common random numbers)."""
        n = _checks.check_positive_int("n", n)
        groups = self._intervention_groups(interventions, n)
        noise = jax.vmap(self.sample_noise_unit)(jax.random.split(key, n))
        return self._predict_all(params, noise, groups)

    def abduct(self, params: Any, data: Data, key: jax.Array | None = None) -> dict[str, jax.Array]:
        """Exogenous noise of every unit, ``{node: (N, ...)}``. Needs ``key`` when a node is
        abducted by posterior sampling (Gumbel-max nodes)."""
        data = self._data(data, "data")
        self._check_key(key)
        return self._abduct(params, data, key)

    def _check_key(self, key: jax.Array | None) -> None:
        if key is None and any(m.stochastic_abduction for m in self.mechanisms):
            names = [v for v, m in zip(self.nodes, self.mechanisms) if m.stochastic_abduction]
            raise ValidationError(f"`key`: nodes {names} are abducted by posterior sampling and need a key, got None.")

    def counterfactual(self, params: Any, data: Data, interventions: Data, *,
                       key: jax.Array | None = None, noise: Data | None = None) -> dict[str, jax.Array]:
        """Counterfactuals of every unit under each of K interventions, ``{node: (K, N)}``.

        Abduction happens once (or not at all when ``noise`` from :meth:`abduct` is given),
        and it and all K actions and predictions run in one compiled, vmapped program. An empty
        ``interventions`` is the null intervention (K = 1): the units are reconstructed.
        """
        if noise is not None:
            data = self._data(data, "data")
            n = _n_units(data)
            groups = self._intervention_groups(interventions, n, observed=data)
            return self._predict_all(params, self._noise(noise, n), groups, data)
        # Structure is checked here; values are checked inside the compiled program, in the
        # same pass that reads them, and only a failure comes back to the host for the message.
        raw = self._data(data, "data", check=False)
        n = _n_units(raw)
        raw_groups = self._intervention_groups(interventions, n, check=False)
        self._check_key(key)
        out, ok = self._checked_counterfactual(params, raw, key, raw_groups)
        if _checks.is_concrete(ok) and not bool(ok):
            checked = self._data(data, "data")  # raises the precise error
            self._intervention_groups(interventions, n, observed=checked)
            raise ValidationError("`data`/`interventions`: a value lies outside its node's support.")
        return out

    def fit(self, key: jax.Array, data: Data, *, steps: int = 2000, learning_rate: float = 1e-2,
            batch_size: int | None = None, optimizer: optax.GradientTransformation | None = None,
            params: Any = None) -> tuple[dict[str, Any], jax.Array]:
        """Maximum-likelihood fit with optax.

        Args:
          key: randomness for the initial parameters and the minibatches.
          data: ``{node: (N,)}`` observations of every node.
          steps: optimiser steps. learning_rate: for the default ``optax.adam``.
          batch_size: None for full-batch steps; otherwise each step draws this many units
            (with replacement).
          optimizer: any optax transformation (overrides ``learning_rate``).
          params: starting parameters (default ``init``).

        Returns:
          ``(params, losses)``: the fitted parameters and the mean negative log-likelihood at
          every step, shape ``(steps,)``. All steps run in one ``lax.scan``.
        """
        data = self._data(data, "data")
        steps = _checks.check_positive_int("steps", steps)
        n = _n_units(data)
        if batch_size is not None:
            batch_size = _checks.check_positive_int("batch_size", batch_size)
        init_key, step_key = jax.random.split(key)
        params = self.init(init_key) if params is None else params
        opt = optimizer or optax.adam(learning_rate)

        def loss(p, batch):
            return -jnp.mean(self._log_prob(p, batch))

        def step(carry, k):
            p, state = carry
            batch = data
            if batch_size is not None:
                idx = jax.random.randint(k, (batch_size,), 0, n)
                batch = jax.tree.map(lambda a: a[idx], data)
            value, grads = jax.value_and_grad(loss)(p, batch)
            updates, state = opt.update(grads, state, p)
            return (optax.apply_updates(p, updates), state), value

        @jax.jit
        def run(p, keys):
            (p, _), losses = jax.lax.scan(step, (p, opt.init(p)), keys)
            return p, losses

        # optax mixes weak and integer types internally: scope the standard promotion rules
        # to this call so that callers running JAX with strict promotion can still fit.
        with jax.numpy_dtype_promotion("standard"):
            return run(params, jax.random.split(step_key, steps))

    # ------------------------------------------------------------------ batched kernels
    @functools.partial(jax.jit, static_argnums=0)
    def _log_prob(self, params, data):
        return jax.vmap(self.log_prob_unit, in_axes=(None, 0))(params, data)

    @functools.partial(jax.jit, static_argnums=(0, 3))
    def _sample(self, params, key, n):
        noise = jax.vmap(self.sample_noise_unit)(jax.random.split(key, n))
        return jax.vmap(self.predict_unit, in_axes=(None, 0))(params, noise)

    @functools.partial(jax.jit, static_argnums=0)
    def _abduct(self, params, data, key):
        if key is None:
            return jax.vmap(self.abduct_unit, in_axes=(None, 0, None))(params, data, None)
        keys = jax.random.split(key, _n_units(data))
        return jax.vmap(self.abduct_unit, in_axes=(None, 0, 0))(params, data, keys)

    @functools.partial(jax.jit, static_argnums=0)
    def _predict_all(self, params, noise, groups, observed=None):
        """Each group's values are ``(K_g, N)``; vmap over units inside, interventions
        outside, groups concatenated along K."""
        over_units = jax.vmap(self.predict_unit, in_axes=(None, 0, 0, 0))
        over_k = jax.vmap(over_units, in_axes=(None, None, 0, None))
        outs = [over_k(params, noise, do, observed) for do in groups]
        if len(outs) == 1:
            return outs[0]
        return {v: jnp.concatenate([o[v] for o in outs]) for v in self.nodes}

    @functools.partial(jax.jit, static_argnums=0)
    def _checked_counterfactual(self, params, raw, key, raw_groups):
        """Value checks, abduction once and all interventions, in one compiled program.
        Returns ``(counterfactuals, all_values_valid)``."""
        data = self._cast_data(raw)
        groups = self._cast_groups(raw_groups, _n_units(raw), data)
        checks = [m.values_ok(raw[v]) for v, m in zip(self.nodes, self.mechanisms)]
        # Given values are checked as given (a class 1.5 must not pass as 1); shifts once resolved.
        checks += [self.mechanism(v).values_ok(cast[v] if isinstance(x, Shift) else x)
                   for g, cast in zip(raw_groups, groups) for v, x in g.items() if v in self.nodes]
        out = self._predict_all(params, self._abduct(params, data, key), groups, data)
        return out, jnp.all(jnp.stack(checks))

    # ------------------------------------------------------------------ validation
    def _data(self, data: Data, what: str, check: bool = True) -> dict[str, jax.Array]:
        """Columns of every node as arrays (continuous: float, discrete: int32), validated.

        With ``check=False`` only the structure is validated (columns, shapes) and the columns
        come back as given; :meth:`_cast_data` then converts them inside a compiled program
        and :meth:`Mechanism.values_ok` checks their values there.
        """
        if hasattr(data, "columns") and hasattr(data, "to_numpy"):  # a pandas DataFrame
            data = {c: data[c].to_numpy() for c in data.columns}
        if not isinstance(data, Mapping):
            raise ValidationError(f"`{what}`: expected a mapping node -> array or a DataFrame, got {type(data).__name__}.")
        out: dict[str, jax.Array] = {}
        n = None
        for v, mech in zip(self.nodes, self.mechanisms):
            if v not in data:
                children = self.graph.children(v)
                role = f" (a parent of {list(children)})" if children else ""
                raise ValidationError(f"`{what}`: missing column {v!r}{role}; got columns {sorted(data)}.")
            col = data[v]
            if np.ndim(col) != 1:
                raise ValidationError(f"`{what}[{v!r}]`: expected shape (N,), got {np.shape(col)}.")
            if n is None:
                n = np.shape(col)[0]
                if n == 0:
                    raise ValidationError(f"`{what}`: expected at least one unit, got 0 rows.")
            elif np.shape(col)[0] != n:
                raise ValidationError(f"`{what}[{v!r}]`: expected {n} rows like {self.nodes[0]!r}, got {np.shape(col)[0]}.")
            if not check and _is_numeric_array(col):
                out[v] = col  # converted inside the compiled program
                continue
            if _checks.is_concrete(col):
                mech.check_values(v, col, f"{what}[{v!r}]")
            out[v] = jnp.asarray(col).astype(_dtype(mech))
        return out

    def _cast_data(self, raw: Mapping[str, jax.Array]) -> dict[str, jax.Array]:
        return {v: raw[v].astype(_dtype(m)) for v, m in zip(self.nodes, self.mechanisms)}

    def _cast_groups(self, raw_groups, n: int, observed) -> tuple[dict[str, jax.Array], ...]:
        """Intervention values cast to their node's dtype and broadcast to ``(K, N)``, shifts
        resolved against the observed values."""
        out = []
        for group in raw_groups:
            k = next(iter(group.values())).shape[0]
            cast = {}
            for v, arr in group.items():
                if isinstance(arr, Shift):
                    cast[v] = arr.resolve(observed[v])
                    continue
                arr = jnp.asarray(arr)
                arr = arr.astype(_dtype(self.mechanism(v))) if v in self.nodes else arr
                cast[v] = jnp.broadcast_to(arr[:, None], (k, n)) if arr.ndim == 1 else arr
            out.append(cast)
        return tuple(out)

    def _noise(self, noise: Data, n: int) -> dict[str, jax.Array]:
        out = {}
        for v in self.nodes:
            if v not in noise:
                raise ValidationError(f"`noise`: missing node {v!r}; pass the output of `abduct`.")
            if np.shape(noise[v])[:1] != (n,):
                raise ValidationError(f"`noise[{v!r}]`: expected {n} units on the first axis, got shape {np.shape(noise[v])}.")
            out[v] = jnp.asarray(noise[v])
        return out

    def _intervention_groups(self, interventions: Data | Any, n: int, check: bool = True,
                             observed: Mapping[str, jax.Array] | None = None
                             ) -> tuple[dict[str, jax.Array], ...]:
        """A mapping is one group; a sequence of mappings is several, concatenated along K.
        ``observed`` (checked data) resolves :class:`Shift` values when ``check`` is True."""
        if isinstance(interventions, Mapping):
            return (self._interventions(interventions, n, "interventions", check, observed),)
        if isinstance(interventions, (list, tuple)) and interventions:
            return tuple(self._interventions(g, n, f"interventions[{i}]", check, observed)
                         for i, g in enumerate(interventions))
        raise ValidationError(
            f"`interventions`: expected a mapping node -> values or a non-empty sequence of them, "
            f"got {type(interventions).__name__}.")

    def _interventions(self, interventions: Data, n: int, what: str, check: bool = True,
                       observed: Mapping[str, jax.Array] | None = None) -> dict[str, jax.Array]:
        """One validated group of interventions, broadcast to ``(K, N)`` (with ``check=False``:
        structure only, values as given, shifts unresolved)."""
        if not isinstance(interventions, Mapping):
            raise ValidationError(f"`{what}`: expected a mapping node -> values, got {type(interventions).__name__}.")
        if not interventions:
            return {"__null__": jnp.zeros((1, n))}
        k = None
        out: dict[str, jax.Array] = {}
        for v, values in interventions.items():
            if v not in self.nodes:
                raise ValidationError(f"`{what}`: unknown node {v!r}; nodes are {list(self.nodes)}.")
            mech = self.mechanism(v)
            shift = isinstance(values, Shift)
            if shift and mech.discrete:
                raise ValidationError(f"`{what}[{v!r}]`: a Shift applies to continuous nodes; {v!r} is discrete.")
            shape = values.shape if shift else np.shape(values)
            if len(shape) not in (1, 2) or (len(shape) == 2 and shape[1] != n):
                raise ValidationError(f"`{what}[{v!r}]`: expected shape (K,) or (K, {n}), got {shape}.")
            if k is None:
                k = shape[0]
                if k == 0:
                    raise ValidationError(f"`{what}[{v!r}]`: expected at least one intervention, got K = 0.")
            elif shape[0] != k:
                raise ValidationError(f"`{what}[{v!r}]`: expected K = {k} like the other nodes, got {shape[0]}.")
            if not check:
                out[v] = values if shift or _is_numeric_array(values) else jnp.asarray(values)
                continue
            if shift:
                if observed is None:
                    raise ValidationError(
                        f"`{what}[{v!r}]`: a Shift moves observed values and is only defined for "
                        f"counterfactuals; pass explicit values here.")
                if _checks.is_concrete(values.delta):
                    mech.check_values(v, values.delta, f"{what}[{v!r}].delta")
                values = values.resolve(observed[v])
            if _checks.is_concrete(values):
                mech.check_values(v, values, f"{what}[{v!r}]")
            arr = jnp.asarray(values).astype(_dtype(mech))
            out[v] = jnp.broadcast_to(arr[:, None], (k, n)) if arr.ndim == 1 else arr
        return out


@functools.lru_cache(maxsize=256)
def _affected(graph: Graph, intervened: tuple[str, ...]) -> frozenset[str]:
    """The intervened nodes and all their descendants."""
    out = set(intervened)
    for v in intervened:
        out.update(graph.descendants(v))
    return frozenset(out)


def _is_numeric_array(x: Any) -> bool:
    """An array JAX can take as it is (numbers or booleans); anything else is converted on
    the host, where a bad dtype gets its message."""
    return isinstance(x, (jax.Array, np.ndarray)) and x.dtype.kind in "biuf"


def _dtype(mech: Mechanism):
    return jnp.int32 if mech.discrete else jnp.result_type(float)


def _n_units(data: Mapping[str, jax.Array]) -> int:
    return int(np.shape(next(iter(data.values())))[0])
