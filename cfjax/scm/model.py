"""A structural causal model: a graph plus one mechanism per node, with counterfactuals by
abduction–action–prediction over all K interventions and N units in one jitted call."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import sys
from typing import Any, Iterator, Mapping, NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.sharding import Mesh, PartitionSpec

from cfjax import _checks
from cfjax import distributed as _dist
from cfjax._checks import ValidationError
from cfjax.scm.graph import Graph
from cfjax.scm.location_scale import LocationScale
from cfjax.scm.interventions import InterventionAxis, Shift, intervention_axis, split_groups
from cfjax.scm.mechanism import Mechanism

__all__ = ["FitInfo", "SCM"]

Data = Mapping[str, Any]


#: ``SCM.fit(batch_size="auto")``: full-batch steps up to ``AUTO_FULL_BATCH`` units; beyond,
#: minibatches of ``AUTO_BATCH`` units for all but the last ``1 / AUTO_FULL_TAIL`` of the steps,
#: which are full-batch (they carry the fit from the minibatches' noise floor to the maximum of
#: the likelihood). Measured by ``experiments/benchmarks/bench_scm_fit.py``.
AUTO_FULL_BATCH, AUTO_BATCH, AUTO_FULL_TAIL = 65_536, 1024, 8


class FitInfo(NamedTuple):
    """What :meth:`SCM.fit` did (with ``return_info=True``).

    Attributes:
      steps: optimiser steps run (fewer than asked when stopped early).
      validation_steps: ``(C,)`` step counts at which the held-out likelihood was evaluated
        (the end of every chunk); empty without a held-out split.
      validation_nll: ``(C,)`` held-out mean negative log-likelihood at those steps.
      best_step: the step whose parameters were returned (None without a held-out split).
      best_nll: their held-out mean negative log-likelihood (NaN without a split).
      stopped_early: whether ``patience`` ended the fit before ``steps``.
      train_index, validation_index: the units trained on and held out (None without a split).
    """

    steps: int
    validation_steps: np.ndarray
    validation_nll: np.ndarray
    best_step: int | None
    best_nll: float
    stopped_early: bool
    train_index: np.ndarray | None
    validation_index: np.ndarray | None


def _stderr_is_terminal() -> bool:
    try:
        return bool(sys.stderr.isatty())
    except (AttributeError, ValueError):
        return False


@contextlib.contextmanager
def _progress_bar(show: bool, total: int):
    """A tqdm bar on stderr while fitting, or None."""
    if not show:
        yield None
        return
    from tqdm.auto import tqdm
    bar = tqdm(total=total, desc="fit", unit="step", file=sys.stderr, leave=False)
    try:
        yield bar
    finally:
        bar.close()


@dataclasses.dataclass(frozen=True)
class SCM:
    """Graph + mechanisms. Frozen and hashable: it is the static structure of every jitted
    function below; parameters are a separate pytree ``{node: mechanism params}``.

    Args:
      graph: a :class:`Graph`, or a mapping ``node -> parents`` to build one.
      mechanisms: a mapping ``node -> Mechanism`` covering every node.

    Shapes (``E`` is a node's :attr:`Mechanism.event_shape`: ``()`` for a scalar node,
    ``(H, W)`` for an image node): data are ``{node: (N, *E)}`` (a pandas DataFrame is
    accepted for scalar nodes), noise is ``{node: pytree}`` with N units on the leading axis
    of every leaf, interventions are ``{node: (K, *E)}`` (one value per intervention, for
    every unit) or ``{node: (K, N, *E)}`` (per-unit values), or a :class:`Shift` of the
    observed values of a scalar node (``do(age := age + 10)``, counterfactuals only), or a
    sequence of such mappings intervening on different nodes (concatenated along K, e.g. 8
    values of do(X1) followed by 8 shifts of X3), and counterfactuals come back as
    ``{node: (K, N, *E)}``. Discrete nodes hold int32 classes.

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

    def _event(self, node: str) -> tuple[int, ...]:
        """The node's event shape (``()`` for names that are not nodes, e.g. the null group)."""
        return tuple(self.mechanism(node).event_shape) if node in self.nodes else ()

    def _parent_vector(self, node_index: int, values: Mapping[str, jax.Array]) -> jax.Array:
        """Node ``node_index``'s parent input ``pa``: its parents' encodings concatenated (their
        values, flattened, for a mechanism with ``raw_parents``)."""
        parents = self.graph.parents[node_index]
        dtype = jnp.result_type(float)
        if not parents:
            return jnp.zeros((0,), dtype)
        if self.mechanisms[node_index].raw_parents:
            return jnp.concatenate([jnp.asarray(values[p]).reshape(-1).astype(dtype) for p in parents])
        return jnp.concatenate([self.mechanism(p).encode(values[p]) for p in parents])

    def _parent_dim(self, node_index: int) -> int:
        if self.mechanisms[node_index].raw_parents:
            return sum(int(np.prod(self._event(p), dtype=np.int64)) for p in self.graph.parents[node_index])
        return sum(self.mechanism(p).encoded_dim for p in self.graph.parents[node_index])

    # ------------------------------------------------------------------ one unit
    def predict_unit(self, params: Any, noise: Mapping[str, Any],
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

    def abduct_unit(self, params: Any, x: Mapping[str, jax.Array], key: jax.Array | None,
                    given: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """One unit's exogenous noise given its observed values; nodes in ``given`` keep the
        noise given there (node ``i``'s key is ``fold_in(key, i)`` either way)."""
        given = given or {}
        noise = {}
        for i, (v, mech) in enumerate(zip(self.nodes, self.mechanisms)):
            if v in given:
                noise[v] = given[v]
                continue
            node_key = None if key is None else jax.random.fold_in(key, i)
            noise[v] = mech.abduct(params[v], x[v], self._parent_vector(i, x), node_key)
        return noise

    def log_prob_unit(self, params: Any, x: Mapping[str, jax.Array],
                      nodes: tuple[str, ...] | None = None) -> jax.Array:
        """``log p(x)`` of one unit: the sum of every node's conditional log-likelihood (of the
        ``nodes`` given, in topological order, when not None)."""
        return sum(mech.log_prob(params[v], x[v], self._parent_vector(i, x))
                   for i, (v, mech) in enumerate(zip(self.nodes, self.mechanisms))
                   if nodes is None or v in nodes)

    def sample_noise_unit(self, key: jax.Array) -> dict[str, Any]:
        return {v: mech.sample_noise(jax.random.fold_in(key, i))
                for i, (v, mech) in enumerate(zip(self.nodes, self.mechanisms))}

    # ------------------------------------------------------------------ public API
    def init(self, key: jax.Array) -> dict[str, Any]:
        """Fresh parameters ``{node: params}``."""
        return {v: mech.init(jax.random.fold_in(key, i), self._parent_dim(i))
                for i, (v, mech) in enumerate(zip(self.nodes, self.mechanisms))}

    def log_prob(self, params: Any, data: Data, per_node: bool = False) -> jax.Array | dict[str, jax.Array]:
        """Per-unit log-likelihood, shape ``(N,)``: the sum of every node's conditional
        log-likelihood ``log p(x_v | pa_v)``. A mechanism without a density (a deterministic
        renderer) raises its own error.

        Args:
          params: ``{node: mechanism params}``.
          data: ``{node: (N, *E)}``.
          per_node: return ``{node: (N,)}``, each node's conditional log-likelihood (their sum
            over nodes is the total).

        Example:
          >>> import cfjax as cf, numpy as np
          >>> scm = cf.scm.SCM({"a": [], "b": ["a"]},
          ...                  {"a": cf.scm.LocationScale(), "b": cf.scm.LocationScale()})
          >>> params = {"a": cf.scm.linear_gaussian_params([], 0.0, 1.0),
          ...           "b": cf.scm.linear_gaussian_params([2.0], 0.0, 1.0)}
          >>> lp = scm.log_prob(params, {"a": np.zeros(3), "b": np.ones(3)}, per_node=True)
          >>> sorted(lp), lp["b"].shape
          (['a', 'b'], (3,))
        """
        if per_node:
            return self._log_prob_nodes(params, self._data(data, "data"))
        return self._log_prob(params, self._data(data, "data"))

    def sample(self, params: Any, key: jax.Array, n: int) -> dict[str, jax.Array]:
        """``n`` units from the observational distribution, ``{node: (n, *E)}``."""
        n = _checks.check_positive_int("n", n)
        return self._sample(params, key, n)

    def interventional_samples(self, params: Any, key: jax.Array, n: int,
                               interventions: Data) -> dict[str, jax.Array]:
        """``n`` fresh units under each of K interventions, ``{node: (K, n, *E)}``. The same
        noise draws are used under every intervention (common random numbers)."""
        n = _checks.check_positive_int("n", n)
        groups = self._intervention_groups(interventions, n)
        noise = jax.vmap(self.sample_noise_unit)(jax.random.split(key, n))
        return self._predict_all(params, noise, groups)

    def abduct(self, params: Any, data: Data, key: jax.Array | None = None) -> dict[str, Any]:
        """Exogenous noise of every unit, ``{node: pytree with N units on the leading axis of
        every leaf}``. Needs ``key`` when a node is abducted by posterior sampling (Gumbel-max
        nodes)."""
        data = self._data(data, "data")
        self._check_key(key)
        return self._abduct(params, data, key)

    def _check_key(self, key: jax.Array | None, given: Mapping[str, Any] | None = None) -> None:
        given = given or {}
        names = [v for v, m in zip(self.nodes, self.mechanisms) if m.stochastic_abduction and v not in given]
        if key is None and names:
            raise ValidationError(f"`key`: nodes {names} are abducted by posterior sampling and need a key, got None.")

    def counterfactual(self, params: Any, data: Data, interventions: Data, *,
                       key: jax.Array | None = None, noise: Data | None = None,
                       chunk_size: int | None = None, return_axis: bool = False,
                       mesh: Mesh | None = None
                       ) -> dict[str, Any] | tuple[dict[str, Any], InterventionAxis]:
        """Counterfactuals of every unit under each of K interventions, ``{node: (K, N, *E)}``.

        Abduction happens once (or not at all when ``noise`` from :meth:`abduct` is given),
        and it and all K actions and predictions run in one compiled, vmapped program. An empty
        ``interventions`` is the null intervention (K = 1): the units are reconstructed.

        Args:
          params: ``{node: mechanism params}``.
          data: ``{node: (N, *E)}`` observed values of every node.
          interventions: see the class docstring.
          key: PRNG key for nodes abducted by posterior sampling (Gumbel-max nodes).
          noise: ``{node: noise}`` (each leaf with N units on its leading axis) for all nodes
            or only some: the nodes given use it as given, the others are abducted in the same
            compiled program (for mechanisms whose noise is known rather than computable from
            ``x``, e.g. a simulator's renderer).
          chunk_size: None for one program over all units; an integer to process the units in
            chunks of that many (the last padded, so one program is compiled), each chunk's
            abduction and K predictions one compiled program whose results are moved to the
            host: beyond the returned (host, numpy) arrays only one chunk lives at a time.
            Equal to the unchunked result (each unit keeps its own abduction key).
          return_axis: also return the :class:`InterventionAxis` saying what each of the K
            entries is (labels, node values, weights, groups; see :meth:`intervention_axis`).
          mesh: None (one device), or a one-axis ``jax.sharding.Mesh``
            (:func:`cfjax.distributed.mesh`) to split the units over its devices: the data,
            per-unit intervention values and shifts, given noise and each unit's abduction key
            are padded to a multiple of the device count (repeating the last unit), each device
            abducts and predicts its block of units (``jax.shard_map``; values common to every
            unit are replicated) and the padding is dropped. The result equals the one-device
            call's (up to float rounding); it stays split over the mesh along the unit axis
            when N is a multiple of the device count, else (an uneven split cannot be
            expressed) dropping the padding replicates it on every device. With
            ``chunk_size`` too, the chunks still stream to the host one after another and
            each chunk is split over the mesh (``chunk_size / devices`` units per device at a
            time).

        Returns:
          ``{node: (K, N, *E)}``: jax arrays, or numpy arrays when ``chunk_size`` is given;
          with ``return_axis``, ``(counterfactuals, axis)``.

        Example:
          >>> import cfjax as cf, numpy as np
          >>> scm = cf.scm.SCM({"a": [], "b": ["a"]},
          ...                  {"a": cf.scm.LocationScale(), "b": cf.scm.LocationScale()})
          >>> params = {"a": cf.scm.linear_gaussian_params([], 0.0, 1.0),
          ...           "b": cf.scm.linear_gaussian_params([2.0], 0.0, 1.0)}
          >>> data = {"a": np.array([1.0, 2.0]), "b": np.array([2.5, 3.0])}
          >>> groups = [{"a": np.array([0.0, 3.0])}, {"a": cf.scm.Shift([1.0])}]
          >>> out, axis = scm.counterfactual(params, data, groups, return_axis=True)
          >>> out["b"].shape, axis.labels, axis.weights.tolist()
          ((3, 2), ('do(a=0)', 'do(a=3)', 'shift(a=+1)'), [0.25, 0.25, 0.5])
        """
        mesh = _check_mesh(mesh)
        if return_axis:
            out = self.counterfactual(params, data, interventions, key=key, noise=noise, chunk_size=chunk_size,
                                      mesh=mesh)
            return out, self.intervention_axis(interventions)
        if chunk_size is not None:
            chunks = self.counterfactual_chunks(params, data, interventions, chunk_size=chunk_size,
                                                key=key, noise=noise, mesh=mesh)
            return self._assemble(chunks, _n_units(self._data(data, "data", check=False)))
        if mesh is not None:
            raw = self._data(data, "data", check=False)
            n = _n_units(raw)
            given = None if noise is None else self._noise(noise, n, convert=False)
            raw_groups = self._intervention_groups(interventions, n, check=False)
            self._check_key(key, given)
            keys = None if key is None else jax.random.split(key, n)
            out, ok = self._sharded(mesh, params, raw, keys, raw_groups, given)
            if not bool(ok):
                self._raise_value_error(data, interventions, n)
            return out
        if noise is not None and isinstance(noise, Mapping) and all(v in noise for v in self.nodes):
            data = self._data(data, "data")
            n = _n_units(data)
            groups = self._intervention_groups(interventions, n, observed=data)
            return self._predict_all(params, self._noise(noise, n), groups, data)
        # Structure is checked here; values are checked inside the compiled program, in the
        # same pass that reads them, and only a failure comes back to the host for the message.
        raw = self._data(data, "data", check=False)
        n = _n_units(raw)
        given = None if noise is None else self._noise(noise, n)
        raw_groups = self._intervention_groups(interventions, n, check=False)
        self._check_key(key, given)
        out, ok = self._checked_counterfactual(params, raw, key, raw_groups, given)
        if _checks.is_concrete(ok) and not bool(ok):
            self._raise_value_error(data, interventions, n)
        return out

    def intervention_axis(self, interventions: Any, group_weights: Any = "groups") -> InterventionAxis:
        """The labelled intervention axis of ``interventions`` (as :meth:`counterfactual`
        takes them): see :func:`cfjax.scm.intervention_axis`, with this model's event shapes
        telling per-unit values from array-valued nodes."""
        return intervention_axis(interventions, group_weights, event_shapes={v: self._event(v) for v in self.nodes})

    def counterfactual_chunks(self, params: Any, data: Data, interventions: Data, *, chunk_size: int,
                              key: jax.Array | None = None, noise: Data | None = None,
                              mesh: Mesh | None = None
                              ) -> Iterator[tuple[int, int, dict[str, jax.Array]]]:
        """:meth:`counterfactual` of the units in chunks, for consumers that stream (feed a
        classifier, keep its outputs, drop the images).

        The inputs are validated here, before the first chunk; each chunk of ``chunk_size``
        units (the last padded by repeating its final unit, so one program is compiled) is
        one compiled program (value checks, abduction of the chunk, all K predictions).
        Memory: one chunk's inputs and outputs at a time; the data stay where they are given
        (numpy arrays stay on the host until their chunk is taken). Stochastic abduction uses
        ``jax.random.split(key, N)[i]`` for unit ``i``, as the unchunked call does, so the
        chunks agree with it. A value outside its node's support raises ValidationError
        when the chunk holding it is reached.

        Args:
          params, data, interventions, key, noise: as in :meth:`counterfactual`.
          chunk_size: units per chunk.
          mesh: None, or a one-axis ``jax.sharding.Mesh`` over whose devices each chunk's
            units are split (as in :meth:`counterfactual`).

        Returns:
          a generator of ``(start, stop, {node: (K, stop - start, *E)})`` (jax arrays), the
          chunks in order, ``start`` from 0 to N.

        Example:
          >>> import cfjax as cf, numpy as np
          >>> scm = cf.scm.SCM({"a": []}, {"a": cf.scm.LocationScale()})
          >>> params = {"a": cf.scm.linear_gaussian_params([], 0.0, 1.0)}
          >>> chunks = scm.counterfactual_chunks(params, {"a": np.arange(5.0)}, {}, chunk_size=2)
          >>> [(start, stop, out["a"].shape) for start, stop, out in chunks]
          [(0, 2, (1, 2)), (2, 4, (1, 2)), (4, 5, (1, 1))]
        """
        chunk_size = _checks.check_positive_int("chunk_size", chunk_size)
        mesh = _check_mesh(mesh)
        raw = self._data(data, "data", check=False)
        n = _n_units(raw)
        given = None if noise is None else self._noise(noise, n, convert=False)
        raw_groups = self._intervention_groups(interventions, n, check=False)
        self._check_key(key, given)
        keys = None if key is None else jax.random.split(key, n)
        return self._chunks(params, raw, raw_groups, given, keys, chunk_size, (data, interventions), mesh)

    def _chunks(self, params, raw, raw_groups, given, keys, b, originals, mesh=None):
        n = _n_units(raw)
        b = min(b, n)  # a chunk larger than the data is the data, unpadded
        for start in range(0, n, b):
            stop = min(start + b, n)
            idx = np.minimum(np.arange(start, start + b), stop - 1)  # pad: repeat the last unit
            take = functools.partial(_take, idx=idx)
            chunk_raw = {v: take(x) for v, x in raw.items()}
            chunk_groups = tuple({v: self._take_intervention(v, x, idx) for v, x in g.items()} for g in raw_groups)
            chunk_given = None if given is None else jax.tree.map(take, given)
            chunk_keys = None if keys is None else keys[idx]
            if mesh is None:
                out, ok = self._chunk_counterfactual(params, chunk_raw, chunk_keys, chunk_groups, chunk_given)
            else:
                out, ok = self._sharded(mesh, params, chunk_raw, chunk_keys, chunk_groups, chunk_given)
            if not bool(ok):
                self._raise_value_error(*originals, n)
            if stop - start < b:
                out = {v: x[:, :stop - start] for v, x in out.items()}
            yield start, stop, out

    def _per_unit(self, node: str, values: Any) -> bool:
        """Whether one intervention's (unchecked) values are per unit (a unit axis 1), not
        common to every unit."""
        if isinstance(values, Shift):
            return np.ndim(values.delta) == 2
        return np.ndim(values) == 2 + len(self._event(node))

    def _sharded(self, where: Mesh, params, raw, keys, raw_groups, given):
        """Counterfactuals of the units of ``raw`` split over ``where``: every per-unit input
        padded to a multiple of the mesh size (repeating the last unit) and sharded, values
        common to every unit replicated; returns ``(counterfactuals, all_values_valid)`` with
        the padding dropped."""
        n = _n_units(raw)
        d = where.size
        per_unit = tuple({v: x for v, x in g.items() if self._per_unit(v, x)} for g in raw_groups)
        common = tuple({v: x for v, x in g.items() if not self._per_unit(v, x)} for g in raw_groups)
        units = _dist.shard(_dist.pad_axis((raw, keys, given), d), where)
        per_unit = _dist.shard(_dist.pad_axis(per_unit, d, axis=1), where, axis=1)
        out, ok = self._sharded_counterfactual(where, params, *units, per_unit, common)
        if out[self.nodes[0]].shape[1] != n:
            out = {v: x[:, :n] for v, x in out.items()}
        return out, jnp.all(ok)

    @functools.partial(jax.jit, static_argnums=(0, 1))
    def _sharded_counterfactual(self, where, params, raw, keys, given, per_unit, common):
        """:meth:`_chunk_counterfactual` of each device's block of units (``jax.shard_map``);
        ``ok`` comes back once per device."""
        def local(params, raw, keys, given, per_unit, common):
            groups = tuple({**c, **u} for u, c in zip(per_unit, common))
            data, groups, ok = self._checked_inputs(raw, groups)
            out = self._predict_all(params, self._abduct_units(params, data, keys, given), groups, data)
            return out, ok[None]

        unit, rep = PartitionSpec(where.axis_names[0]), PartitionSpec()
        return jax.shard_map(local, mesh=where, in_specs=(rep, unit, unit, unit, PartitionSpec(None, unit[0]), rep),
                             out_specs=(PartitionSpec(None, unit[0]), unit))(
            params, raw, keys, given, per_unit, common)

    def _take_intervention(self, node: str, values: Any, idx: np.ndarray) -> Any:
        """The chunk ``idx`` of one intervention's values: per-unit values are cut along their
        unit axis (axis 1), values common to every unit are kept."""
        if not self._per_unit(node, values):
            return values
        if isinstance(values, Shift):
            return Shift(_take(values.delta, idx, axis=1))
        return _take(values, idx, axis=1)

    @staticmethod
    def _assemble(chunks: Iterator[tuple[int, int, dict[str, jax.Array]]], n: int) -> dict[str, np.ndarray]:
        """Chunks of counterfactuals copied, one at a time, into host arrays ``{node: (K, N, *E)}``."""
        out: dict[str, np.ndarray] = {}
        for start, stop, part in chunks:
            for v, x in part.items():
                x = np.asarray(x)
                if v not in out:
                    out[v] = np.empty((x.shape[0], n) + x.shape[2:], x.dtype)
                out[v][:, start:stop] = x
        return out

    def _raise_value_error(self, data: Data, interventions: Any, n: int) -> None:
        checked = self._data(data, "data")  # raises the precise error
        self._intervention_groups(interventions, n, observed=checked)
        raise ValidationError("`data`/`interventions`: a value lies outside its node's support.")

    def fit(self, key: jax.Array, data: Data, *, steps: int = 2000, learning_rate: float = 3e-2,
            batch_size: int | str | None = "auto", optimizer: optax.GradientTransformation | None = None,
            params: Any = None, nodes: Sequence[str] | None = None, progress: bool | None = None,
            chunk_steps: int = 100, validation: float = 0.0, patience: int | None = 5,
            return_info: bool = False) -> tuple[dict[str, Any], jax.Array] | tuple[dict[str, Any], jax.Array, FitInfo]:
        """Maximum-likelihood fit with optax.

        Args:
          key: randomness for the initial parameters, the minibatches and the held-out split.
          data: ``{node: (N, *E)}`` observations of every node (with ``nodes``: of those nodes
            and their parents only).
          steps: optimiser steps.
          learning_rate: the peak step size of the default optimizer: ``optax.adam`` with the
            step size decaying to zero over the steps (``optax.cosine_decay_schedule``; over
            each phase of ``"auto"``). A constant step leaves Adam at its noise floor short of
            the maximum: on a linear-Gaussian SCM (5 nodes, 20,000 units) constant-step Adam
            ends 8e-4 from the OLS coefficients full-batch and 2e-2 on minibatches; the decaying
            step ends 1e-6 from them full-batch. The default peak, 3e-2, is measured too: with
            1e-2, 2,000 steps of a spline SCM (two nodes, 20,000 units) ended 1.5e-3 to 2.8e-3
            nats per unit of held-out likelihood below fits of 8,000 and 20,000 steps; with 3e-2,
            8e-4 below the 20,000-step fit and above the 8,000-step one.
          batch_size: ``"auto"`` (default): full-batch steps for N ≤ 65,536 units; beyond,
            minibatches of 1,024 units for the first seven eighths of the steps, then full-batch
            steps for the last eighth, from a fresh optimizer state (minibatches alone stop at
            their noise floor, 2e-3 from OLS on the example above even with the decaying step;
            the full-batch eighth carries the fit to 1e-7 of it). The threshold is measured
            (``experiments/benchmarks/bench_scm_fit.py``, linear-Gaussian, 5 nodes, 2 CPU
            cores): both rules reach OLS within 1e-3 in 500 steps, full batch in 0.57 s against
            1.03 s at 16,384 units and 0.83 s against 1.03 s at 65,536; the minibatches first
            from 131,072 (2.82 s against 2.18 s) and 262,144 units (2.61 s against 1.42 s).
            None: full-batch steps; an int: each step draws this many units (with replacement).
          optimizer: any optax transformation (overrides ``learning_rate``; under ``"auto"``
            its state starts afresh for the full-batch steps).
          params: starting parameters (default ``init``).
          nodes: None to fit every node; a sequence of node names to fit only theirs, the
            others held at ``params`` (or ``init``): e.g. the scalar parents of an image node
            whose mechanism is trained separately.
          progress: a tqdm progress bar (on stderr) with the current loss; None shows it only
            when stderr is a terminal.
          chunk_steps: with a progress bar or a held-out split, the steps run as compiled
            ``lax.scan`` chunks of this many, the bar and the held-out likelihood updated
            between chunks (the parameters equal those of one scan over all steps); otherwise
            all steps are one scan.
          validation: fraction of units held out (chosen at random from ``key``), in [0, 1).
            With a positive fraction the model is trained on the other units, the held-out
            mean negative log-likelihood is evaluated after every chunk, and the parameters
            with the lowest one are returned.
          patience: with ``validation``: stop after this many chunks without a lower held-out
            negative log-likelihood (None: run all steps, still returning the best).
          return_info: also return a :class:`FitInfo` (held-out curve, best step, split).

        Returns:
          ``(params, losses)``: the fitted parameters (every node's) and the mean negative
          log-likelihood (of the fitted nodes, on the training units) at every step run,
          shape ``(steps,)`` (fewer when stopped early); with ``return_info``,
          ``(params, losses, info)``.

        Example:
          >>> import cfjax as cf, jax, numpy as np
          >>> scm = cf.scm.SCM({"a": [], "b": ["a"]},
          ...                  {"a": cf.scm.LocationScale(), "b": cf.scm.LocationScale()})
          >>> p, losses = scm.fit(jax.random.key(0), {"a": np.array([1.0, 3.0])}, steps=300,
          ...                     learning_rate=0.1, nodes=["a"])
          >>> round(float(p["a"]["net"]["params"]["bias"][0]), 2), losses.shape
          (2.0, (300,))
          >>> p, losses, info = scm.fit(jax.random.key(0), {"a": np.arange(10.0)}, steps=20, nodes=["a"],
          ...                           validation=0.2, chunk_steps=10, return_info=True)
          >>> info.validation_index.shape, info.validation_steps.tolist()
          ((2,), [10, 20])
        """
        fitted = None if nodes is None else self._node_subset(nodes)
        needed = None
        if fitted is not None:
            needed = tuple(v for v in self.nodes
                           if v in fitted or any(v in self.graph.parents_of(c) for c in fitted))
        data = self._data(data, "data", nodes=needed)
        steps = _checks.check_positive_int("steps", steps)
        chunk_steps = _checks.check_positive_int("chunk_steps", chunk_steps)
        if patience is not None:
            patience = _checks.check_positive_int("patience", patience)
        if isinstance(validation, bool) or not isinstance(validation, (int, float, np.floating, np.integer)) \
                or not 0.0 <= float(validation) < 1.0:
            raise ValidationError(f"`validation`: expected a fraction in [0, 1), got {validation!r}.")
        n = _n_units(data)
        full_tail = 0  # the last steps, run on every unit after the minibatches
        auto = isinstance(batch_size, str)
        if auto:
            if batch_size != "auto":
                raise ValidationError(f"`batch_size`: expected 'auto', None or a positive int, got {batch_size!r}.")
            batch_size = None
        if batch_size is not None:
            batch_size = _checks.check_positive_int("batch_size", batch_size)
        if progress is None:
            progress = _stderr_is_terminal()
        init_key, step_key = jax.random.split(key)
        train_index = held_index = None
        held_data = None
        if validation > 0:
            n_held = int(round(float(validation) * n))
            if n_held < 1 or n_held > n - 1:
                raise ValidationError(
                    f"`validation`: expected a fraction leaving at least one unit on each side of "
                    f"the split of {n} units, got {validation!r} ({n_held} held out).")
            perm = np.asarray(jax.random.permutation(jax.random.fold_in(key, 1), n))
            held_index, train_index = np.sort(perm[:n_held]), np.sort(perm[n_held:])
            held_data = {v: x[held_index] for v, x in data.items()}
            data = {v: x[train_index] for v, x in data.items()}
            n = n - n_held
        if auto and n > AUTO_FULL_BATCH:
            batch_size, full_tail = AUTO_BATCH, max(1, steps // AUTO_FULL_TAIL)
        params = self.init(init_key) if params is None else params
        if fitted is not None:
            if not isinstance(params, Mapping) or any(v not in params for v in self.nodes):
                missing = [v for v in self.nodes if not isinstance(params, Mapping) or v not in params]
                raise ValidationError(f"`params`: expected parameters of every node, missing {missing}.")
            held = {v: params[v] for v in self.nodes if v not in fitted}
            params = {v: params[v] for v in fitted}
        # The phases: (steps, minibatches?), each with a fresh optimizer state. The default
        # Adam's step size decays to zero over each phase (a constant step leaves Adam at its
        # noise floor, short of the maximum-likelihood fit).
        if batch_size is None:
            phases = ((steps, False),)
        elif full_tail:
            phases = ((steps - full_tail, True), (full_tail, False))
        else:
            phases = ((steps, True),)
        if optimizer is None:
            learning_rate = _checks.check_positive_float("learning_rate", learning_rate)
            opts = tuple(optax.adam(optax.cosine_decay_schedule(learning_rate, size)) for size, _ in phases)
        else:
            opts = (optimizer,) * len(phases)

        def loss(p, batch):
            if fitted is None:
                return -jnp.mean(self._log_prob(p, batch))
            return -jnp.mean(self._log_prob({**held, **p}, batch, fitted))

        def step(carry, k, phase):
            p, state = carry
            batch = data
            if phases[phase][1]:
                idx = jax.random.randint(k, (batch_size,), 0, n)
                batch = jax.tree.map(lambda a: a[idx], data)
            value, grads = jax.value_and_grad(loss)(p, batch)
            updates, state = opts[phase].update(grads, state, p)
            return (optax.apply_updates(p, updates), state), value

        @functools.partial(jax.jit, static_argnums=3)
        def run(p, state, keys, phase):
            (p, state), losses = jax.lax.scan(functools.partial(step, phase=phase), (p, state), keys)
            return p, state, losses

        held_nll = jax.jit(loss)
        keys = jax.random.split(step_key, steps)
        chunk = chunk_steps if (progress or held_data is not None) else steps
        parts, curve, curve_steps = [], [], []
        best, best_nll, best_step, bad, done = params, float("inf"), None, 0, 0
        stopped = False
        # optax mixes weak and integer types internally: scope the standard promotion rules
        # to this call so that callers running JAX with strict promotion can still fit.
        with jax.numpy_dtype_promotion("standard"), _progress_bar(progress, steps) as bar:
            out, phase, phase_end = params, -1, 0
            while done < steps:
                if done == phase_end:
                    phase += 1
                    phase_end += phases[phase][0]
                    state = jax.jit(opts[phase].init)(out)
                size = min(chunk, phase_end - done)
                out, state, losses = run(out, state, keys[done:done + size], phase)
                done += size
                parts.append(losses)
                postfix = {"loss": f"{float(losses[-1]):.4g}"} if bar is not None else {}
                if held_data is not None:
                    value = float(held_nll(out, held_data))
                    curve.append(value)
                    curve_steps.append(done)
                    postfix["held_out"] = f"{value:.4g}"
                    if value < best_nll:
                        best, best_nll, best_step, bad = out, value, done, 0
                    else:
                        bad += 1
                if bar is not None:
                    bar.update(size)
                    bar.set_postfix(postfix, refresh=False)
                if held_data is not None and patience is not None and bad >= patience and done < steps:
                    stopped = True
                    break
        losses = parts[0] if len(parts) == 1 else jnp.concatenate(parts)
        if held_data is not None and np.isfinite(best_nll):
            out = best
        if fitted is not None:
            out = {v: out[v] if v in fitted else held[v] for v in self.nodes}
        if not return_info:
            return out, losses
        info = FitInfo(steps=done, validation_steps=np.asarray(curve_steps, np.int64),
                       validation_nll=np.asarray(curve, np.float64), best_step=best_step,
                       best_nll=best_nll if best_step is not None else float("nan"),
                       stopped_early=stopped, train_index=train_index, validation_index=held_index)
        return out, losses, info

    def summary(self, params: Any) -> str:
        """A readable description of fitted parameters, one block per node.

        Linear location–scale nodes (``LocationScale()`` with an affine conditioner) list
        their intercept, one coefficient per parent input by name (a categorical parent with
        more than two classes has one per class, ``race=2``; a bounded spline parent enters
        rescaled to [0, 1]) and the noise scale (heteroscedastic: the coefficients of the
        location and of the log scale). Other mechanisms get one line with their type and
        parameter count.

        Example:
          >>> import cfjax as cf
          >>> scm = cf.scm.SCM({"a": [], "b": ["a"]},
          ...                  {"a": cf.scm.LocationScale(), "b": cf.scm.LocationScale()})
          >>> params = {"a": cf.scm.linear_gaussian_params([], 1.0, 2.0),
          ...           "b": cf.scm.linear_gaussian_params([-0.5], 0.25, 1.0)}
          >>> print(scm.summary(params))
          a: LocationScale, linear-Gaussian
            intercept     1
            noise scale   2
          b: LocationScale, linear-Gaussian
            intercept     0.25
            a            -0.5
            noise scale   1
        """
        if not isinstance(params, Mapping) or any(v not in params for v in self.nodes):
            missing = [v for v in self.nodes if not isinstance(params, Mapping) or v not in params]
            raise ValidationError(f"`params`: expected parameters of every node, missing {missing}.")
        lines = []
        for i, (v, mech) in enumerate(zip(self.nodes, self.mechanisms)):
            p = params[v]
            if isinstance(mech, LocationScale) and tuple(mech.hidden) == () and "net" in p:
                names = self._parent_names(i)
                net = p["net"]["params"]
                layer = net["Dense_0"] if "Dense_0" in net else {"kernel": np.zeros((0, np.shape(net["bias"])[0])),
                                                                  "bias": net["bias"]}
                kernel, bias = np.asarray(layer["kernel"], np.float64), np.asarray(layer["bias"], np.float64)
                width = max([len(n) for n in names] + [len("noise scale")]) + 4
                if mech.heteroscedastic:
                    lines.append(f"{v}: LocationScale, linear location and log scale")
                    lines.append(f"  {'':<{width - 2}}{' loc':<12} log scale")
                    lines.append(f"  {'intercept':<{width - 2}}{bias[0]:< 12.4g}{bias[1]: .4g}")
                    lines += [f"  {n:<{width - 2}}{kernel[j, 0]:< 12.4g}{kernel[j, 1]: .4g}" for j, n in enumerate(names)]
                else:
                    lines.append(f"{v}: LocationScale, linear-Gaussian")
                    lines.append(f"  {'intercept':<{width - 2}}{bias[0]: .4g}")
                    lines += [f"  {n:<{width - 2}}{kernel[j, 0]: .4g}" for j, n in enumerate(names)]
                    lines.append(f"  {'noise scale':<{width - 2}}{float(np.exp(np.asarray(p['log_scale']))): .4g}")
            else:
                count = sum(int(np.size(x)) for x in jax.tree.leaves(p))
                lines.append(f"{v}: {type(mech).__name__}, {count} parameters")
        return "\n".join(lines)

    def _parent_names(self, node_index: int) -> list[str]:
        """Names of the entries of node ``node_index``'s parent input ``pa``."""
        names = []
        for p in self.graph.parents[node_index]:
            pm = self.mechanism(p)
            size = (int(np.prod(self._event(p), dtype=np.int64)) if self.mechanisms[node_index].raw_parents
                    else pm.encoded_dim)
            if size == 1:
                scaled = getattr(pm, "bounded", False) and not self.mechanisms[node_index].raw_parents
                names.append(f"{p} (scaled to [0, 1])" if scaled else p)
            elif pm.discrete and not self.mechanisms[node_index].raw_parents and size == getattr(pm, "num_classes", -1):
                names += [f"{p}={c}" for c in range(size)]
            else:
                names += [f"{p}[{j}]" for j in range(size)]
        return names

    def save(self, path: Any, params: Any) -> None:
        """Write ``params`` to the directory ``path`` (orbax, atomic; see
        :func:`cfjax.scm.save_params`), recording this model's node names."""
        from cfjax.scm.checkpoint import save_params
        save_params(path, params, meta={"nodes": list(self.nodes),
                                        "mechanisms": [type(m).__name__ for m in self.mechanisms]})

    def load(self, path: Any) -> dict[str, Any]:
        """Parameters written by :meth:`save` (or :func:`cfjax.scm.save_params`), restored
        into the structure, shapes and dtypes of :meth:`init`'s."""
        from cfjax.scm.checkpoint import load_params, read_meta
        nodes = read_meta(path).get("nodes")
        if nodes is not None and list(nodes) != list(self.nodes):
            raise ValidationError(f"`path`: expected parameters of nodes {list(self.nodes)}, got nodes {list(nodes)}.")
        return load_params(path, like=self.init(jax.random.key(0)))

    def _node_subset(self, nodes: Any) -> tuple[str, ...]:
        """Validated node names, in topological order."""
        if isinstance(nodes, str) or not isinstance(nodes, (list, tuple, set, frozenset)) or not nodes:
            raise ValidationError(f"`nodes`: expected a non-empty sequence of node names, got {nodes!r}.")
        unknown = [v for v in nodes if v not in self.nodes]
        if unknown:
            raise ValidationError(f"`nodes`: unknown nodes {unknown}; nodes are {list(self.nodes)}.")
        return tuple(v for v in self.nodes if v in nodes)

    # ------------------------------------------------------------------ batched kernels
    @functools.partial(jax.jit, static_argnums=(0, 3))
    def _log_prob(self, params, data, nodes=None):
        return jax.vmap(self.log_prob_unit, in_axes=(None, 0, None))(params, data, nodes)

    @functools.partial(jax.jit, static_argnums=0)
    def _log_prob_nodes(self, params, data):
        def one(x):
            return {v: mech.log_prob(params[v], x[v], self._parent_vector(i, x))
                    for i, (v, mech) in enumerate(zip(self.nodes, self.mechanisms))}
        return jax.vmap(one)(data)

    @functools.partial(jax.jit, static_argnums=(0, 3))
    def _sample(self, params, key, n):
        noise = jax.vmap(self.sample_noise_unit)(jax.random.split(key, n))
        return jax.vmap(self.predict_unit, in_axes=(None, 0))(params, noise)

    @functools.partial(jax.jit, static_argnums=0)
    def _abduct(self, params, data, key, given=None):
        keys = None if key is None else jax.random.split(key, _n_units(data))
        return self._abduct_units(params, data, keys, given)

    def _abduct_units(self, params, data, keys, given=None):
        """Abduction of every unit with its own key (``keys`` (N,) or None); nodes in
        ``given`` keep the noise given."""
        given = given or {}
        key_axis = None if keys is None else 0
        return jax.vmap(self.abduct_unit, in_axes=(None, 0, key_axis, 0))(params, data, keys, given)

    @functools.partial(jax.jit, static_argnums=0)
    def _predict_all(self, params, noise, groups, observed=None):
        """Each group's values are ``(K_g, N, *E)``; vmap over units inside, interventions
        outside, groups concatenated along K."""
        over_units = jax.vmap(self.predict_unit, in_axes=(None, 0, 0, 0))
        over_k = jax.vmap(over_units, in_axes=(None, None, 0, None))
        outs = [over_k(params, noise, do, observed) for do in groups]
        if len(outs) == 1:
            return outs[0]
        return {v: jnp.concatenate([o[v] for o in outs]) for v in self.nodes}

    @functools.partial(jax.jit, static_argnums=0)
    def _checked_counterfactual(self, params, raw, key, raw_groups, given=None):
        """Value checks, abduction once and all interventions, in one compiled program.
        Returns ``(counterfactuals, all_values_valid)``."""
        data, groups, ok = self._checked_inputs(raw, raw_groups)
        out = self._predict_all(params, self._abduct(params, data, key, given), groups, data)
        return out, ok

    @functools.partial(jax.jit, static_argnums=0)
    def _chunk_counterfactual(self, params, raw, keys, raw_groups, given=None):
        """:meth:`_checked_counterfactual` of one chunk of units, each with its own key."""
        data, groups, ok = self._checked_inputs(raw, raw_groups)
        out = self._predict_all(params, self._abduct_units(params, data, keys, given), groups, data)
        return out, ok

    def _checked_inputs(self, raw, raw_groups):
        """(Traced) data and interventions cast, shifts resolved, and whether every value
        lies in its node's support."""
        data = self._cast_data(raw)
        groups = self._cast_groups(raw_groups, _n_units(raw), data)
        checks = [m.values_ok(raw[v]) for v, m in zip(self.nodes, self.mechanisms)]
        # Given values are checked as given (a class 1.5 must not pass as 1); shifts once resolved.
        checks += [self.mechanism(v).values_ok(cast[v] if isinstance(x, Shift) else x)
                   for g, cast in zip(raw_groups, groups) for v, x in g.items() if v in self.nodes]
        return data, groups, jnp.all(jnp.stack(checks))

    # ------------------------------------------------------------------ validation
    def _data(self, data: Data, what: str, check: bool = True,
              nodes: tuple[str, ...] | None = None) -> dict[str, jax.Array]:
        """Columns of every node (of ``nodes`` when given) as arrays (continuous: float,
        discrete: int32), validated: shape ``(N, *E)``, values in the support.

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
        first = None
        for v, mech in zip(self.nodes, self.mechanisms):
            if nodes is not None and v not in nodes:
                continue
            if v not in data:
                children = self.graph.children(v)
                role = f" (a parent of {list(children)})" if children else ""
                raise ValidationError(f"`{what}`: missing column {v!r}{role}; got columns {sorted(data)}.")
            col = data[v]
            shape, event = tuple(np.shape(col)), tuple(mech.event_shape)
            if len(shape) != 1 + len(event) or shape[1:] != event:
                raise ValidationError(f"`{what}[{v!r}]`: expected shape {_shape(['N'], event)}, got {shape}.")
            if n is None:
                n, first = shape[0], v
                if n == 0:
                    raise ValidationError(f"`{what}`: expected at least one unit, got 0 rows.")
            elif shape[0] != n:
                raise ValidationError(f"`{what}[{v!r}]`: expected {n} rows like {first!r}, got {shape[0]}.")
            if not mech.discrete:
                _checks.warn_if_downcast(f"{what}[{v!r}]", col)
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
        """Intervention values cast to their node's dtype and broadcast to ``(K, N, *E)``,
        shifts resolved against the observed values."""
        out = []
        for group in raw_groups:
            k = next(iter(group.values())).shape[0]
            cast = {}
            for v, arr in group.items():
                if isinstance(arr, Shift):
                    cast[v] = arr.resolve(observed[v])
                    continue
                event = self._event(v)
                arr = jnp.asarray(arr)
                arr = arr.astype(_dtype(self.mechanism(v))) if v in self.nodes else arr
                cast[v] = jnp.broadcast_to(arr[:, None], (k, n, *event)) if arr.ndim == 1 + len(event) else arr
            out.append(cast)
        return tuple(out)

    def _noise(self, noise: Data, n: int, convert: bool = True) -> dict[str, Any]:
        """Validated noise of the nodes given (any pytree per node, N units on the leading
        axis of every leaf); with ``convert`` its leaves become jax arrays."""
        if not isinstance(noise, Mapping):
            raise ValidationError(f"`noise`: expected a mapping node -> noise (the output of `abduct`), got {type(noise).__name__}.")
        unknown = [v for v in noise if v not in self.nodes]
        if unknown:
            raise ValidationError(f"`noise`: unknown nodes {unknown}; nodes are {list(self.nodes)}.")
        out = {}
        for v in self.nodes:
            if v not in noise:
                continue
            for leaf in jax.tree.leaves(noise[v]):
                if np.shape(leaf)[:1] != (n,):
                    raise ValidationError(
                        f"`noise[{v!r}]`: expected {n} units on the first axis (of every leaf), got shape {np.shape(leaf)}.")
            as_array = jnp.asarray if convert else _array
            out[v] = jax.tree.map(as_array, noise[v])
        return out

    def _intervention_groups(self, interventions: Data | Any, n: int, check: bool = True,
                             observed: Mapping[str, jax.Array] | None = None
                             ) -> tuple[dict[str, jax.Array], ...]:
        """A mapping is one group; a sequence of mappings is several, concatenated along K.
        ``observed`` (checked data) resolves :class:`Shift` values when ``check`` is True.
        A group may be an ``(interventions, weights)`` pair from :func:`intervention_grid`
        (the weights only matter to :meth:`intervention_axis`; they are checked here)."""
        interventions, within = split_groups(interventions)
        if isinstance(interventions, Mapping):
            groups = (self._interventions(interventions, n, "interventions", check, observed),)
        elif isinstance(interventions, (list, tuple)) and interventions:
            groups = tuple(self._interventions(g, n, f"interventions[{i}]", check, observed)
                           for i, g in enumerate(interventions))
        else:
            groups = None
        if groups is not None:
            for i, (g, w) in enumerate(zip(groups, within)):
                if w is not None:
                    what = "interventions" if len(groups) == 1 else f"interventions[{i}]"
                    first = next(iter(g.values()))
                    _checks.check_weights(f"{what} weights", w, int(first.shape[0]))
            return groups
        raise ValidationError(
            f"`interventions`: expected a mapping node -> values or a non-empty sequence of them, "
            f"got {type(interventions).__name__}.")

    def _interventions(self, interventions: Data, n: int, what: str, check: bool = True,
                       observed: Mapping[str, jax.Array] | None = None) -> dict[str, jax.Array]:
        """One validated group of interventions, broadcast to ``(K, N, *E)`` (with
        ``check=False``: structure only, values as given, shifts unresolved)."""
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
            event = tuple(mech.event_shape)
            shift = isinstance(values, Shift)
            if shift and mech.discrete:
                raise ValidationError(f"`{what}[{v!r}]`: a Shift applies to continuous nodes; {v!r} is discrete.")
            if shift and event:
                raise ValidationError(
                    f"`{what}[{v!r}]`: a Shift applies to scalar nodes; {v!r} has event shape {event}: "
                    f"pass explicit values of shape {_shape(['K'], event)} or {_shape(['K', str(n)], event)}.")
            shape = tuple(values.shape if shift else np.shape(values))
            if not shape or (shape[1:] != event and shape[1:] != (n, *event)):
                raise ValidationError(
                    f"`{what}[{v!r}]`: expected shape {_shape(['K'], event)} or {_shape(['K', str(n)], event)}, got {shape}.")
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
                if _checks.is_concrete(values.delta):  # the shifted values' support is checked below
                    _checks.check_finite(f"{what}[{v!r}].delta", values.delta)
                values = values.resolve(observed[v])
            if _checks.is_concrete(values):
                mech.check_values(v, values, f"{what}[{v!r}]")
            arr = jnp.asarray(values).astype(_dtype(mech))
            out[v] = jnp.broadcast_to(arr[:, None], (k, n, *event)) if arr.ndim == 1 + len(event) else arr
        return out


def _check_mesh(mesh: Any) -> Mesh | None:
    """``mesh`` validated: None or a one-axis ``jax.sharding.Mesh``."""
    if mesh is not None and (not isinstance(mesh, Mesh) or len(mesh.axis_names) != 1):
        what = f"a mesh with axes {mesh.axis_names}" if isinstance(mesh, Mesh) else repr(mesh)
        _checks.fail("mesh", "None or a one-axis jax.sharding.Mesh (cfjax.distributed.mesh(devices))", what)
    return mesh


@functools.lru_cache(maxsize=256)
def _affected(graph: Graph, intervened: tuple[str, ...]) -> frozenset[str]:
    """The intervened nodes and all their descendants."""
    out = set(intervened)
    for v in intervened:
        out.update(graph.descendants(v))
    return frozenset(out)


def _shape(lead: list[str], event: tuple[int, ...]) -> str:
    """A shape for messages: ``_shape(["K", "50"], (4, 5))`` is ``(K, 50, 4, 5)``, ``(N,)``."""
    parts = [*lead, *(str(d) for d in event)]
    return "(" + ", ".join(parts) + ("," if len(parts) == 1 else "") + ")"


def _is_numeric_array(x: Any) -> bool:
    """An array JAX can take as it is (numbers or booleans); anything else is converted on
    the host, where a bad dtype gets its message."""
    return isinstance(x, (jax.Array, np.ndarray)) and x.dtype.kind in "biuf"


def _array(x: Any) -> Any:
    """``x`` as it is when it is already an array (host or device), else a jax array."""
    return x if isinstance(x, (jax.Array, np.ndarray)) else jnp.asarray(x)


def _take(a: Any, idx: np.ndarray, axis: int = 0) -> Any:
    """Units ``idx`` of ``a`` along ``axis``, on the host for numpy arrays."""
    if isinstance(a, np.ndarray):
        return np.take(a, idx, axis=axis)
    return a[idx] if axis == 0 else a[:, idx]


def _dtype(mech: Mechanism):
    return jnp.int32 if mech.discrete else jnp.result_type(float)


def _n_units(data: Mapping[str, jax.Array]) -> int:
    return int(np.shape(next(iter(data.values())))[0])
