"""A structural causal model: a graph plus one mechanism per node, written for one unit; its
log-likelihood, samples and, by abduction–action–prediction over K interventions, its
counterfactuals ``{node: (N, K, *E)}`` (:mod:`cfjax.scm.counterfactual`), fitted by maximum
likelihood (:mod:`cfjax.scm.fit`)."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, cast

import jax
import jax.numpy as jnp
import numpy as np
import optax

from cfjax import _checks
from cfjax._checks import ValidationError
from cfjax._core.keys import as_key
from cfjax.scm import _validate
from cfjax.scm import counterfactual as _cf
from cfjax.scm import fit as _fit
from cfjax.scm.graph import Graph
from cfjax.scm.interventions import InterventionAxis, intervention_axis
from cfjax.scm.location_scale import LocationScale
from cfjax.scm.mechanism import Mechanism
from cfjax.typing import KeyLike, MeshLike, PyTree

__all__ = ["SCM"]

Data = Mapping[str, Any]


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
    every unit) or ``{node: (N, K, *E)}`` (per-unit values), or a :class:`Shift` of the
    observed values of a scalar node (``do(age := age + 10)``, counterfactuals only), or a
    sequence of such mappings intervening on different nodes (concatenated along K, e.g. 8
    values of do(X1) followed by 8 shifts of X3), and counterfactuals come back as
    ``{node: (N, K, *E)}`` (units, then interventions: ``docs/contract.md``). Discrete nodes hold int32 classes.

    Example:
      >>> import cfjax as cf, jax, numpy as np
      >>> scm = cf.scm.SCM({"a": [], "b": ["a"]},
      ...                  {"a": cf.scm.LocationScale(), "b": cf.scm.LocationScale()})
      >>> params = {"a": cf.scm.linear_gaussian_params([], 0.0, 1.0),
      ...           "b": cf.scm.linear_gaussian_params([2.0], 0.0, 1.0)}
      >>> data = {"a": np.array([1.0, 2.0]), "b": np.array([2.5, 3.0])}
      >>> out = scm.counterfactual(params, data, {"a": np.array([0.0, 3.0])})
      >>> out["b"].tolist()  # b' = 2 a' + (b − 2 a)
      [[0.5, 6.5], [-1.0, 5.0]]
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
                f"missing {missing}, unknown {extra}."
            )
        for v in graph.order:
            if not isinstance(mechanisms[v], Mechanism):
                raise ValidationError(
                    f"`mechanisms[{v!r}]`: expected a Mechanism, got {type(mechanisms[v]).__name__}."
                )
        object.__setattr__(self, "graph", graph)
        object.__setattr__(self, "mechanisms", tuple(mechanisms[v] for v in graph.order))

    # ------------------------------------------------------------------ structure helpers
    @property
    def nodes(self) -> tuple[str, ...]:
        return self.graph.order

    def mechanism(self, node: str) -> Mechanism:
        return self.mechanisms[self.graph.index(node)]

    def event(self, node: str) -> tuple[int, ...]:
        """The node's event shape ``E`` (``()`` for a scalar node, ``(H, W)`` for an image;
        ``()`` for names that are not nodes)."""
        return tuple(self.mechanism(node).event_shape) if node in self.nodes else ()

    def parent_vector(self, node: str, values: Mapping[str, jax.Array]) -> jax.Array:
        """One unit's parent input ``pa`` of ``node``, shape ``(P,)``: exactly what the node's
        mechanism is fed (its parents' encodings, or their raw values for a mechanism with
        ``raw_parents``). ``values`` holds one unit's value of every parent."""
        return self._parent_vector(self.graph.index(node), values)

    def check_data(
        self, data: Data, *, nodes: Sequence[str] | None = None, name: str = "data"
    ) -> dict[str, jax.Array]:
        """``{node: (N, *E)}`` validated and cast (continuous nodes float, discrete int32):
        every node's column (only ``nodes``' when given) of shape ``(N, *E)``, its values in
        the node's support; a pandas DataFrame is accepted for scalar nodes. Errors name
        ``name``."""
        return _validate.data(self, data, name, nodes=None if nodes is None else tuple(nodes))

    def _parent_vector(self, node_index: int, values: Mapping[str, jax.Array]) -> jax.Array:
        """Node ``node_index``'s parent input ``pa``: its parents' encodings concatenated (their
        values, flattened, for a mechanism with ``raw_parents``)."""
        parents = self.graph.parents[node_index]
        dtype = jnp.result_type(float)
        if not parents:
            return jnp.zeros((0,), dtype)
        if self.mechanisms[node_index].raw_parents:
            return jnp.concatenate(
                [jnp.asarray(values[p]).reshape(-1).astype(dtype) for p in parents]
            )
        return jnp.concatenate([self.mechanism(p).encode(values[p]) for p in parents])

    def _parent_dim(self, node_index: int) -> int:
        if self.mechanisms[node_index].raw_parents:
            return sum(
                int(np.prod(self.event(p), dtype=np.int64)) for p in self.graph.parents[node_index]
            )
        return sum(self.mechanism(p).encoded_dim for p in self.graph.parents[node_index])

    # ------------------------------------------------------------------ one unit
    def predict_unit(
        self,
        params: PyTree,
        noise: Mapping[str, Any],
        do: Mapping[str, jax.Array] | None = None,
        observed: Mapping[str, jax.Array] | None = None,
    ) -> dict[str, jax.Array]:
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

    def abduct_unit(
        self,
        params: PyTree,
        x: Mapping[str, jax.Array],
        key: jax.Array | None,
        given: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
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

    def log_prob_unit(
        self, params: PyTree, x: Mapping[str, jax.Array], nodes: tuple[str, ...] | None = None
    ) -> jax.Array:
        """``log p(x)`` of one unit: the sum of every node's conditional log-likelihood (of the
        ``nodes`` given, in topological order, when not None)."""
        total = sum(
            mech.log_prob(params[v], x[v], self._parent_vector(i, x))
            for i, (v, mech) in enumerate(zip(self.nodes, self.mechanisms))
            if nodes is None or v in nodes
        )
        return cast(jax.Array, total)  # an array: every model, and every fit, has a node

    def sample_noise_unit(self, key: jax.Array) -> dict[str, Any]:
        return {
            v: mech.sample_noise(jax.random.fold_in(key, i))
            for i, (v, mech) in enumerate(zip(self.nodes, self.mechanisms))
        }

    # ------------------------------------------------------------------ public API
    def init(self, *, key: KeyLike) -> dict[str, Any]:
        """Fresh parameters ``{node: params}`` (``key``: a PRNG key or an int seed)."""
        key = as_key(key)
        return {
            v: mech.init(jax.random.fold_in(key, i), self._parent_dim(i))
            for i, (v, mech) in enumerate(zip(self.nodes, self.mechanisms))
        }

    def log_prob(
        self, params: PyTree, data: Data, per_node: bool = False
    ) -> jax.Array | dict[str, jax.Array]:
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
            return self._log_prob_nodes(params, _validate.data(self, data, "data"))
        return self._log_prob(params, _validate.data(self, data, "data"))

    def sample(self, params: PyTree, n: int, *, key: KeyLike) -> dict[str, jax.Array]:
        """``n`` units from the observational distribution, ``{node: (n, *E)}``.

        Example:
          >>> import cfjax as cf
          >>> scm = cf.scm.SCM({"a": []}, {"a": cf.scm.LocationScale()})
          >>> scm.sample(scm.init(key=0), 5, key=1)["a"].shape
          (5,)
        """
        n = _checks.check_positive_int("n", n)
        return self._sample(params, as_key(key), n)

    def interventional_samples(
        self, params: PyTree, n: int, interventions: Any, *, key: KeyLike
    ) -> dict[str, jax.Array]:
        """``n`` fresh units under each of K interventions, ``{node: (n, K, *E)}``. The same
        noise draws are used under every intervention (common random numbers).
        Interventions are common ``{node: (K, *E)}`` or per unit ``{node: (n, K, *E)}``, or a
        sequence of such groups (no :class:`Shift`: there are no observed values)."""
        return _cf.interventional_samples(self, params, n, interventions, key=key)

    def abduct(self, params: PyTree, data: Data, *, key: KeyLike | None = None) -> dict[str, Any]:
        """Exogenous noise of every unit, ``{node: pytree with N units on the leading axis of
        every leaf}``. Needs ``key`` when a node is abducted by posterior sampling (Gumbel-max
        nodes); unit ``i`` uses ``jax.random.split(key, N)[i]``, as :meth:`counterfactual`."""
        return _cf.abduct(self, params, data, key=key)

    def counterfactual(
        self,
        params: PyTree,
        data: Data,
        interventions: Any,
        *,
        key: KeyLike | None = None,
        noise: Data | None = None,
        chunk_size: int | None = None,
        mesh: MeshLike = None,
    ) -> dict[str, jax.Array]:
        """Counterfactuals of every unit under each of K interventions, ``{node: (N, K, *E)}``.

        One function of one unit abducts its noise once (or takes it from ``noise``) and
        predicts its K counterfactuals; it is vmapped over the units, so abduction, all K
        actions and predictions and the value checks are one compiled program. An empty
        ``interventions`` is the null intervention (K = 1): the units are reconstructed.

        Args:
          params: ``{node: mechanism params}``.
          data: ``{node: (N, *E)}`` observed values of every node.
          interventions: see the class docstring.
          key: PRNG key (or int seed) for nodes abducted by posterior sampling (Gumbel-max
            nodes); unit ``i`` uses ``jax.random.split(key, N)[i]``.
          noise: ``{node: noise}`` (each leaf with N units on its leading axis) for all nodes
            or only some: the nodes given use it as given, the others are abducted in the same
            compiled program (for mechanisms whose noise is known rather than computable from
            ``x``, e.g. a simulator's renderer).
          chunk_size: None for all units at once; an integer to process the units in chunks of
            that many on each device (``lax.map`` inside the compiled program), bounding the
            working memory beyond inputs and outputs to one chunk's. Equal to the unchunked
            result (each unit keeps its own abduction key). N is padded to its shape bucket
            (:func:`cfjax.distributed.bucket`: a power of two of whole chunks, repeating the
            last unit, the padding dropped), so a sweep over many N compiles a handful of
            programs. To stream chunks to the host, see :meth:`counterfactual_chunks`.
          mesh: None (one device), a device count, a sequence of devices or a one-axis
            ``jax.sharding.Mesh``: the units are split over its devices
            (:func:`cfjax.distributed.map_batch`: data, per-unit intervention values and
            shifts, given noise and keys split, parameters and common values passed whole).
            The result equals the one-device call's up to float rounding.

        Returns:
          ``{node: (N, K, *E)}`` jax arrays; :meth:`intervention_axis` of the same
          ``interventions`` says what each of the K entries is.

        Example:
          >>> import cfjax as cf, numpy as np
          >>> scm = cf.scm.SCM({"a": [], "b": ["a"]},
          ...                  {"a": cf.scm.LocationScale(), "b": cf.scm.LocationScale()})
          >>> params = {"a": cf.scm.linear_gaussian_params([], 0.0, 1.0),
          ...           "b": cf.scm.linear_gaussian_params([2.0], 0.0, 1.0)}
          >>> data = {"a": np.array([1.0, 2.0]), "b": np.array([2.5, 3.0])}
          >>> groups = [{"a": np.array([0.0, 3.0])}, {"a": cf.scm.Shift([1.0])}]
          >>> out = scm.counterfactual(params, data, groups)
          >>> axis = scm.intervention_axis(groups)
          >>> out["b"].shape, axis.labels, axis.weights.tolist()
          ((2, 3), ('do(a=0)', 'do(a=3)', 'shift(a=+1)'), [0.25, 0.25, 0.5])
        """
        return _cf.counterfactual(
            self,
            params,
            data,
            interventions,
            key=key,
            noise=noise,
            chunk_size=chunk_size,
            mesh=mesh,
        )

    def intervention_axis(
        self, interventions: Any, group_weights: Any = "groups"
    ) -> InterventionAxis:
        """The labelled intervention axis of ``interventions`` (as :meth:`counterfactual`
        takes them): see :func:`cfjax.scm.intervention_axis`, with this model's event shapes
        telling per-unit values from array-valued nodes."""
        return intervention_axis(
            interventions, group_weights, event_shapes={v: self.event(v) for v in self.nodes}
        )

    def counterfactual_chunks(
        self,
        params: PyTree,
        data: Data,
        interventions: Any,
        *,
        chunk_size: int,
        key: KeyLike | None = None,
        noise: Data | None = None,
        mesh: MeshLike = None,
    ) -> Iterator[tuple[int, int, dict[str, jax.Array]]]:
        """:meth:`counterfactual` of the units in chunks, for consumers that stream (feed a
        classifier, keep its outputs, drop the images).

        The inputs are validated here, before the first chunk; each chunk of ``chunk_size``
        units (the last padded by repeating its final unit, so one program is compiled; with
        fewer than ``chunk_size`` units in all, the one chunk is padded to its shape bucket,
        :func:`cfjax.distributed.bucket`) is one compiled program (value checks, abduction of the chunk, all K predictions).
        Memory: one chunk's inputs and outputs at a time; the data stay where they are given
        (numpy arrays stay on the host until their chunk is taken). Unit ``i`` uses
        ``jax.random.split(key, N)[i]``, as the unchunked call does, so the chunks agree with
        it. A value outside its node's support raises ValidationError when the chunk holding
        it is reached.

        Args:
          params, data, interventions, key, noise: as in :meth:`counterfactual`.
          chunk_size: units per chunk.
          mesh: as in :meth:`counterfactual`: each chunk's units are split over its devices.

        Returns:
          a generator of ``(start, stop, {node: (stop - start, K, *E)})`` (jax arrays), the
          chunks in order, ``start`` from 0 to N.

        Example:
          >>> import cfjax as cf, numpy as np
          >>> scm = cf.scm.SCM({"a": []}, {"a": cf.scm.LocationScale()})
          >>> params = {"a": cf.scm.linear_gaussian_params([], 0.0, 1.0)}
          >>> chunks = scm.counterfactual_chunks(params, {"a": np.arange(5.0)}, {}, chunk_size=2)
          >>> [(start, stop, out["a"].shape) for start, stop, out in chunks]
          [(0, 2, (2, 1)), (2, 4, (2, 1)), (4, 5, (1, 1))]
        """
        return _cf.counterfactual_chunks(
            self,
            params,
            data,
            interventions,
            chunk_size=chunk_size,
            key=key,
            noise=noise,
            mesh=mesh,
        )

    def fit(
        self,
        data: Data,
        *,
        key: KeyLike,
        steps: int | str = "auto",
        learning_rate: float = 3e-2,
        batch_size: int | str | None = "auto",
        optimizer: optax.GradientTransformation | None = None,
        params: PyTree | None = None,
        nodes: Sequence[str] | None = None,
        progress: bool | None = None,
        chunk_steps: int = 100,
        validation: float = 0.0,
        patience: int | None = 5,
    ) -> _fit.Fit:
        """Maximum-likelihood fit with optax.

        Args:
          data: ``{node: (N, *E)}`` observations of every node (with ``nodes``: of those nodes
            and their parents only).
          key: randomness (a PRNG key or an int seed) for the initial parameters, the
            minibatches and the held-out split.
          steps: ``"auto"`` (default): rounds of 2,000 steps, each a fresh decay of the step
            size from its peak, until a round raises the training log-likelihood by less than
            1e-4 nats per unit (a round that lowers it is undone), at most 8 rounds
            (``AUTO_STEPS``, ``AUTO_TOL``, ``AUTO_MAX_ROUNDS`` in ``cfjax.scm.fit``). One round
            is enough for a linear-Gaussian SCM; a spline SCM (two nodes, 20,000 units) gained
            1.1e-3, 2.5e-4 and 1.0e-4 nats per unit in rounds two to four, 1.5e-3 in all, which
            2,000 steps alone left on the table. An int: exactly this many steps, one round.
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
            the full-batch eighth carries the fit to 1e-7 of it). The threshold is where minibatches
            first reach OLS sooner than full-batch steps (``make bench``'s
            ``bench_scm_fit``, on the benchmarks page).
            None: full-batch steps; an int: each step draws this many units (with replacement).
          optimizer: any optax transformation (overrides ``learning_rate``; under ``"auto"``
            its state starts afresh for the full-batch steps).
          params: starting parameters (default ``init``).
          nodes: None to fit every node; a sequence of node names to fit only theirs, the
            others held at ``params`` (or ``init``): e.g. the scalar parents of an image node
            whose mechanism is trained separately.
          progress: a tqdm progress bar (on stderr) with the current loss; None shows it only
            when stderr is a terminal. The steps run on :func:`cfjax._core.training.run`, one
            run per phase; without a held-out split a NaN or infinite loss raises
            :class:`cfjax.TrainingError` naming the step.
          chunk_steps: the steps run as compiled ``lax.scan`` chunks of this many, the bar and
            the held-out likelihood updated between chunks (the parameters equal those of one
            scan over all steps); with ``progress=False`` and no held-out split, each phase is
            one scan.
          validation: fraction of units held out (chosen at random from ``key``), in [0, 1).
            With a positive fraction the model is trained on the other units, the held-out
            mean negative log-likelihood is evaluated after every chunk, and the parameters
            with the lowest one are returned.
          patience: with ``validation``: stop after this many chunks without a lower held-out
            negative log-likelihood, counted across phases and rounds (None: run all steps,
            still returning the best).

        Returns:
          a :class:`cfjax.scm.fit.Fit` ``(params, losses, info)``: the fitted parameters (every
          node's), the mean negative log-likelihood (of the fitted nodes, on the training
          units) at every step run, shape ``(steps,)`` (fewer when stopped early), and a
          :class:`cfjax.scm.fit.FitInfo` (held-out curve, best step, split).

        Example:
          >>> import cfjax as cf, jax, numpy as np
          >>> scm = cf.scm.SCM({"a": [], "b": ["a"]},
          ...                  {"a": cf.scm.LocationScale(), "b": cf.scm.LocationScale()})
          >>> p, losses, _ = scm.fit({"a": np.array([1.0, 3.0])}, key=0, steps=300,
          ...                        learning_rate=0.1, nodes=["a"])
          >>> round(float(p["a"]["net"]["params"]["bias"][0]), 2), losses.shape
          (2.0, (300,))
          >>> p, losses, info = scm.fit({"a": np.arange(10.0)}, key=0, steps=20, nodes=["a"],
          ...                           validation=0.2, chunk_steps=10)
          >>> info.validation_index.shape, info.validation_steps.tolist()
          ((2,), [10, 20])
        """
        return _fit.fit(
            self,
            data,
            key=key,
            steps=steps,
            learning_rate=learning_rate,
            batch_size=batch_size,
            optimizer=optimizer,
            params=params,
            nodes=nodes,
            progress=progress,
            chunk_steps=chunk_steps,
            validation=validation,
            patience=patience,
        )

    def summary(self, params: PyTree) -> str:
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
            raise ValidationError(
                f"`params`: expected parameters of every node, missing {missing}."
            )
        lines = []
        for i, (v, mech) in enumerate(zip(self.nodes, self.mechanisms)):
            p = params[v]
            if isinstance(mech, LocationScale) and tuple(mech.hidden) == () and "net" in p:
                names = self._parent_names(i)
                net = p["net"]["params"]
                layer = (
                    net["Dense_0"]
                    if "Dense_0" in net
                    else {"kernel": np.zeros((0, np.shape(net["bias"])[0])), "bias": net["bias"]}
                )
                kernel, bias = (
                    np.asarray(layer["kernel"], np.float64),
                    np.asarray(layer["bias"], np.float64),
                )
                width = max([len(n) for n in names] + [len("noise scale")]) + 4
                if mech.heteroscedastic:
                    lines.append(f"{v}: LocationScale, linear location and log scale")
                    lines.append(f"  {'':<{width - 2}}{' loc':<12} log scale")
                    lines.append(f"  {'intercept':<{width - 2}}{bias[0]:< 12.4g}{bias[1]: .4g}")
                    lines += [
                        f"  {n:<{width - 2}}{kernel[j, 0]:< 12.4g}{kernel[j, 1]: .4g}"
                        for j, n in enumerate(names)
                    ]
                else:
                    lines.append(f"{v}: LocationScale, linear-Gaussian")
                    lines.append(f"  {'intercept':<{width - 2}}{bias[0]: .4g}")
                    lines += [f"  {n:<{width - 2}}{kernel[j, 0]: .4g}" for j, n in enumerate(names)]
                    lines.append(
                        f"  {'noise scale':<{width - 2}}{float(np.exp(np.asarray(p['log_scale']))): .4g}"
                    )
            else:
                count = sum(int(np.size(x)) for x in jax.tree.leaves(p))
                lines.append(f"{v}: {type(mech).__name__}, {count} parameters")
        return "\n".join(lines)

    def _parent_names(self, node_index: int) -> list[str]:
        """Names of the entries of node ``node_index``'s parent input ``pa``."""
        names = []
        for p in self.graph.parents[node_index]:
            pm = self.mechanism(p)
            size = (
                int(np.prod(self.event(p), dtype=np.int64))
                if self.mechanisms[node_index].raw_parents
                else pm.encoded_dim
            )
            if size == 1:
                scaled = (
                    getattr(pm, "bounded", False) and not self.mechanisms[node_index].raw_parents
                )
                names.append(f"{p} (scaled to [0, 1])" if scaled else p)
            elif (
                pm.discrete
                and not self.mechanisms[node_index].raw_parents
                and size == getattr(pm, "num_classes", -1)
            ):
                names += [f"{p}={c}" for c in range(size)]
            else:
                names += [f"{p}[{j}]" for j in range(size)]
        return names

    def save(self, path: Any, params: PyTree) -> None:
        """Write ``params`` to the directory ``path`` (orbax, atomic; see
        :func:`cfjax.scm.checkpoint.save_params`), recording this model's node names."""
        from cfjax.scm.checkpoint import save_params

        save_params(
            path,
            params,
            meta={
                "nodes": list(self.nodes),
                "mechanisms": [type(m).__name__ for m in self.mechanisms],
            },
        )

    def load(self, path: Any) -> dict[str, Any]:
        """Parameters written by :meth:`save` (or :func:`cfjax.scm.checkpoint.save_params`), restored
        into the structure, shapes and dtypes of :meth:`init`'s."""
        from cfjax.scm.checkpoint import load_params, read_meta

        nodes = read_meta(path).get("nodes")
        if nodes is not None and list(nodes) != list(self.nodes):
            raise ValidationError(
                f"`path`: expected parameters of nodes {list(self.nodes)}, got nodes {list(nodes)}."
            )
        return load_params(path, like=self.init(key=0))

    # ------------------------------------------------------------------ batched kernels
    @functools.partial(jax.jit, static_argnums=(0, 3))
    def _log_prob(self, params, data, nodes=None):
        return jax.vmap(self.log_prob_unit, in_axes=(None, 0, None))(params, data, nodes)

    @functools.partial(jax.jit, static_argnums=0)
    def _log_prob_nodes(self, params, data):
        def one(x):
            return {
                v: mech.log_prob(params[v], x[v], self._parent_vector(i, x))
                for i, (v, mech) in enumerate(zip(self.nodes, self.mechanisms))
            }

        return jax.vmap(one)(data)

    @functools.partial(jax.jit, static_argnums=(0, 3))
    def _sample(self, params, key, n):
        noise = jax.vmap(self.sample_noise_unit)(jax.random.split(key, n))
        return jax.vmap(self.predict_unit, in_axes=(None, 0))(params, noise)


@functools.lru_cache(maxsize=256)
def _affected(graph: Graph, intervened: tuple[str, ...]) -> frozenset[str]:
    """The intervened nodes and all their descendants."""
    out = set(intervened)
    for v in intervened:
        out.update(graph.descendants(v))
    return frozenset(out)
