"""A synthetic chest-radiograph SCM with exact counterfactuals (paper 000's graph).

Parents: sex, age (20–90), race (3 groups), lung size (a child of sex and age) and pleural
effusion (a child of age); their mechanisms are :mod:`cfjax.scm` mechanisms, so parent
counterfactuals use the same abduction as any other SCM. The image is
:func:`cfjax.data.render.render` of the parents and explicit image noise (which also holds the
effusion's severity and laterality), so a counterfactual image is exact: same noise,
counterfactual parents, rendered again.

The whole model, image included, is also a :class:`cfjax.scm.SCM`
(:attr:`ChestSCM.image_scm`): its ``"image"`` node is a :class:`ChestRenderer`, whose noise is
the image noise of the records (it cannot be abducted from an image; it is passed as
``noise={"image": records["noise"]}``).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Mapping, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from cfjax import _checks
from cfjax import distributed as _dist
from cfjax import scm as cfscm
from cfjax._core.keys import as_key
from cfjax.data.render import EFFUSION_SIZE, Acquisition, ImageNoise, render, sample_image_noise
from cfjax.typing import ArrayLike, KeyLike, MeshLike, PyTree

__all__ = [
    "ChestSCM",
    "ChestRenderer",
    "ChestCounterfactuals",
    "PARENTS",
    "IMAGE_PARENTS",
    "AGE_GROUPS",
    "LABEL_MODES",
]

#: paper 000's parent graph (the image is a child of all of them)
PARENTS = {"sex": [], "age": [], "race": [], "lung": ["sex", "age"], "effusion": ["age"]}
#: the image node's parents, in the order :func:`cfjax.data.render.render` takes them
IMAGE_PARENTS = ("sex", "age", "race", "lung", "effusion")
#: age groups of the balanced test split: <45, 45–65, >65
AGE_GROUPS = (45.0, 65.0)
#: the ages of paper 000's do(age) interventions: 8 values from 20 to 90 (with do(sex), K = 16)
AGES = (20.0, 30.0, 40.0, 50.0, 60.0, 70.0, 80.0, 90.0)
#: how :meth:`ChestSCM.counterfactuals` treats the label node
LABEL_MODES = ("fixed", "follows")
#: interventions on the parents: ``{node: (K,) or (N, K)}`` (values or
#: :class:`cfjax.scm.Shift`), or a sequence of such groups
Interventions = (
    Mapping[str, ArrayLike | cfscm.Shift] | Sequence[Mapping[str, ArrayLike | cfscm.Shift]]
)


@dataclasses.dataclass(frozen=True)
class ChestSCM:
    """The synthetic chest-radiograph SCM.

    Args:
      prevalence: effusion prevalence at the mean age (the age effect moves it up with age).
      size: image side in pixels, 32 to 192.
      site: acquisition settings (a second site differs in contrast, gamma, noise).
      effusion_size: the task's difficulty knob: the median height of an effusion's fluid
        as a fraction of the lung's height, in (0, 0.7) (default 0.18, tuned so that a
        small CNN trained on a few thousand unbiased 32 × 32 images reaches an AUC of about
        0.85 on the balanced test split). Each effusion's own height is
        ``0.7·sigmoid(logit(effusion_size / 0.7) + u)`` with ``u`` its standard normal
        severity noise (:func:`cfjax.data.render.effusion_height`): smaller values make
        more effusions a barely blunted costophrenic angle, larger ones more fluid levels
        high up the lung.

    Example:
      >>> chest = ChestSCM(size=32)
      >>> rec = chest.sample(4, key=0)
      >>> rec["image"].shape, sorted(rec["parents"])
      ((4, 32, 32), ['age', 'effusion', 'lung', 'race', 'sex'])
    """

    prevalence: float = 0.3
    size: int = 64
    site: Acquisition = Acquisition()
    effusion_size: float = EFFUSION_SIZE

    def __post_init__(self):
        if not (0 < self.prevalence < 1):
            _checks.fail("prevalence", "a value in (0, 1)", repr(self.prevalence))
        if not (isinstance(self.size, int) and 32 <= self.size <= 192):
            _checks.fail("size", "an integer in [32, 192]", repr(self.size))
        e = self.effusion_size
        if (
            isinstance(e, bool)
            or not isinstance(e, (int, float, np.floating, np.integer))
            or not (0 < e < 0.7)
        ):
            _checks.fail("effusion_size", "a number in (0, 0.7)", repr(e))
        object.__setattr__(self, "effusion_size", float(e))  # hashable static argument

    # ---------------------------------------------------------------- the parent SCM
    @property
    def scm(self) -> cfscm.SCM:
        return cfscm.SCM(
            PARENTS,
            {
                "sex": cfscm.GumbelMax(2),
                "age": cfscm.Spline(low=20.0, high=90.0, hidden=()),
                "race": cfscm.GumbelMax(3),
                "lung": cfscm.LocationScale(),
                "effusion": cfscm.GumbelMax(2),
            },
        )

    def params(self) -> dict[str, PyTree]:
        """The fixed, known parameters of the parent mechanisms (built once per prevalence)."""
        return jax.tree.map(lambda a: a, _parent_params(self.prevalence))  # fresh containers

    # ---------------------------------------------------------------- the SCM with the image
    @property
    def image_scm(self) -> cfscm.SCM:
        """The parent SCM (:attr:`scm`) plus the node ``"image"``, a :class:`ChestRenderer`
        child of every parent (:data:`IMAGE_PARENTS`); parameters :meth:`image_params`.

        Its counterfactuals are :meth:`counterfactuals` with ``label="follows"`` (the same
        parents, the same images up to float rounding: XLA may round a render a few ulp
        differently in another batch shape), with the records' image noise given:
        ``image_scm.counterfactual(image_params(), {**rec["parents"], "image": rec["image"]},
        interventions, noise={"image": rec["noise"]}, key=key)``; ``chunk_size`` bounds the
        memory of many images. The image's noise cannot be abducted and it has no density
        (:meth:`cfjax.scm.SCM.fit` it with ``nodes`` among the parents).

        Example:
          >>> chest = ChestSCM(size=32)
          >>> rec = chest.sample(4, key=0)
          >>> data = {**rec["parents"], "image": rec["image"]}
          >>> out = chest.image_scm.counterfactual(chest.image_params(), data, {"age": jnp.array([30.0, 80.0])},
          ...                                      noise={"image": rec["noise"]}, key=1)
          >>> out["image"].shape, out["lung"].shape
          ((4, 2, 32, 32), (4, 2))
        """
        base = self.scm
        mechanisms = dict(zip(base.nodes, base.mechanisms))
        mechanisms["image"] = ChestRenderer(self.size, self.site, self.effusion_size)
        return cfscm.SCM({**PARENTS, "image": list(IMAGE_PARENTS)}, mechanisms)

    def image_params(self) -> dict[str, PyTree]:
        """Parameters of :attr:`image_scm`: :meth:`params` and ``{}`` for the image (the
        renderer has none)."""
        return {**self.params(), "image": {}}

    # ---------------------------------------------------------------- images
    def render(
        self, parents: Mapping[str, jax.Array], noise: ImageNoise, *, mesh: MeshLike = None
    ) -> jax.Array:
        """Images of units with parents ``{node: (N,)}`` and noise, ``(N, size, size)``.

        Rendered in chunks of a power-of-two number of units (at least 8, at most about 2²²
        pixels a chunk), so one compiled renderer serves every batch size and the memory
        beyond the output is bounded by one chunk; a unit's image does not depend on the
        chunk it is in. With ``mesh`` (a device count, devices or a one-axis
        ``jax.sharding.Mesh``: :func:`cfjax.distributed.as_mesh`) the units are split
        over its devices (:func:`cfjax.distributed.map_batch`), each device rendering its
        block in such chunks; the images equal the one-device render's up to float rounding.
        """
        mesh = _dist.as_mesh(mesh)
        args = (
            parents["sex"],
            parents["age"],
            parents["race"],
            parents["lung"],
            parents["effusion"],
            noise,
        )
        if mesh is None:
            return _chunked(_render_many, args, self.size, self.site, self.effusion_size)
        n = int(np.shape(args[0])[0])
        chunk = _chunk_size(-(-n // mesh.size), self.size)
        padded = _dist.pad_axis(args, mesh.size * chunk)
        images = _dist.map_batch(
            _render_fn(self.size, self.site, self.effusion_size),
            *padded,
            mesh=mesh,
            chunk_size=chunk,
        )
        return images if images.shape[0] == n else images[:n]

    def sample(self, n: int, *, key: KeyLike) -> dict[str, PyTree]:
        """``n`` records: ``{"parents": {node: (n,)}, "noise": ImageNoise (n, ...),
        "image": (n, size, size)}``. Deterministic given ``key`` (a PRNG key or an int seed)."""
        n = _checks.check_positive_int("n", n)
        parents, noise_keys = self.draw_parents(n, key=key)
        return self.records(parents, noise_keys)

    def draw_parents(self, n: int, *, key: KeyLike) -> tuple[dict[str, jax.Array], jax.Array]:
        """The parents ``{node: (n,)}`` of ``n`` units and one image-noise key per unit ``(n,)``,
        nothing rendered: unit ``i`` of ``sample(n, key=key)`` is :meth:`records` of entry ``i``
        of both. Units can be chosen from their parents before any image exists
        (:func:`cfjax.study.datasets`)."""
        k_parents, k_image = jax.random.split(as_key(key))
        return self.scm.sample(self.params(), n, key=k_parents), jax.random.split(k_image, n)

    def records(
        self, parents: Mapping[str, jax.Array], noise_keys: jax.Array, idx: ArrayLike | None = None
    ) -> dict[str, PyTree]:
        """Records of the units ``idx`` (all when None) of drawn parents and noise keys: only
        those units' noise is drawn and only their images rendered."""
        if idx is not None:
            sel = jnp.asarray(idx)
            parents, noise_keys = {v: x[sel] for v, x in parents.items()}, noise_keys[sel]
        noise = _noise_many(noise_keys)
        # The images go through the same compiled renderer as counterfactual images (one
        # program rounds alike everywhere), so a null intervention reproduces them bit for bit.
        return {"parents": dict(parents), "noise": noise, "image": self.render(parents, noise)}

    def counterfactuals(
        self,
        records: Mapping[str, PyTree],
        interventions: Interventions,
        *,
        key: KeyLike,
        label: str = "fixed",
        mesh: MeshLike = None,
    ) -> dict[str, PyTree]:
        """Exact counterfactuals of every record under K interventions on the parents.

        The parents come from abduction–action–prediction in the parent SCM
        (:attr:`scm`, noise abducted from the records, ``key`` for effusion's Gumbel
        posterior); the images are re-rendered from them with each unit's own image noise
        (pose, anatomy, effusion severity and laterality, texture all kept). With
        ``interventions = do(sex, age)`` (paper 000's grid) each parent is treated so:

        - sex, age: set by the intervention;
        - race: not a descendant of sex or age, kept at its observed value;
        - lung size: follows its parents, ``lung = f(sex', age', u_lung)`` with its noise
          ``u_lung`` abducted from the observed unit;
        - effusion (the label), by ``label``:

          - ``"fixed"`` (paper 000's study, the default): held at each unit's observed
            value, i.e. the counterfactual parents with effusion replaced by the factual
            one — the same as adding do(effusion = observed) to every intervention, valid
            because effusion has no children among the parents (only the image);
          - ``"follows"``: effusion follows the new age, re-generated from its abducted
            Gumbel noise (a unit may gain or lose its effusion under do(age)).

        An intervention that sets effusion itself is applied as given in both modes (within
        a sequence of intervention groups, ``"fixed"`` holds effusion only in the groups
        that do not set it).

        Args:
          records: ``sample`` / :func:`cfjax.study.datasets` records (``"parents"`` and ``"noise"``).
          interventions: ``{node: (K,) or (N, K)}`` or a sequence of such groups (as in
            :meth:`cfjax.scm.SCM.counterfactual`).
          key: PRNG key (or int seed) for the abduction of effusion's noise.
          label: ``"fixed"`` or ``"follows"``.
          mesh: None (one device), a device count, devices or a one-axis
            ``jax.sharding.Mesh`` (:func:`cfjax.distributed.as_mesh`): the parents'
            counterfactuals are split over its devices by unit
            (:meth:`cfjax.scm.SCM.counterfactual` with ``mesh``) and the N × K renders by
            image (:meth:`render` with ``mesh``); the result equals the one-device call's up
            to float rounding.

        Returns:
          ``{"parents": {node: (N, K)}, "image": (N, K, size, size)}``; the counterfactual
          labels are ``parents["effusion"]`` (equal to the factual ones under ``"fixed"``).

        Example:
          >>> chest = ChestSCM(size=32)
          >>> rec = chest.sample(8, key=0)
          >>> out = chest.counterfactuals(rec, {"age": jnp.array([20.0, 90.0])}, key=1)
          >>> out["image"].shape, bool((out["parents"]["effusion"] == rec["parents"]["effusion"][:, None]).all())
          ((8, 2, 32, 32), True)
        """
        if label not in LABEL_MODES:
            _checks.fail("label", f"one of {list(LABEL_MODES)}", repr(label))
        mesh = _dist.as_mesh(mesh)
        if label == "fixed":
            interventions = _hold_label(interventions, records["parents"]["effusion"])
        parents = self.scm.counterfactual(
            self.params(), records["parents"], interventions, key=key, mesh=mesh
        )
        n, k = parents["sex"].shape
        # One flat batch of N·K renders (unit by unit) through the same chunked renderer as
        # the factual images (a unit's image does not depend on its chunk), so a null
        # intervention reproduces them bit for bit.
        flat = {v: x.reshape(n * k) for v, x in parents.items()}
        noise = jax.tree.map(lambda a: jnp.repeat(a, k, axis=0), records["noise"])
        images = self.render(flat, noise, mesh=mesh).reshape(n, k, self.size, self.size)
        return {"parents": parents, "image": images}

    def counterfactual_source(
        self,
        records: Mapping[str, PyTree],
        interventions: Interventions,
        *,
        key: KeyLike,
        label: str = "fixed",
        weights: ArrayLike | None = None,
    ) -> ChestCounterfactuals:
        """The exact counterfactuals of :meth:`counterfactuals` as a training source
        (:mod:`cfjax.predictors.sources`): the counterfactual parents ``(N, K)`` are computed
        here (the same abduction, ``key`` and ``label`` mode), no image is rendered; a training
        step renders the images of its minibatch (:meth:`ChestCounterfactuals.images`).

        Args:
          records, interventions, key, label: as in :meth:`counterfactuals` (one group of K
            interventions).
          weights: ``(K,)`` intervention weights q; default uniform.

        Example:
          >>> chest = ChestSCM(size=32)
          >>> rec = chest.sample(8, key=0)
          >>> src = chest.counterfactual_source(rec, {"sex": jnp.array([0, 1])}, key=1)
          >>> src.images(jnp.array([3, 5]), jnp.array([[0, 1], [1, 1]])).shape
          (2, 2, 32, 32)
        """
        if label not in LABEL_MODES:
            _checks.fail("label", f"one of {list(LABEL_MODES)}", repr(label))
        if not isinstance(interventions, Mapping):
            _checks.fail(
                "interventions",
                "one group of K interventions {node: (K,) or (N, K)}",
                type(interventions).__name__,
            )
        if label == "fixed":
            interventions = _hold_label(interventions, records["parents"]["effusion"])
        parents = self.scm.counterfactual(self.params(), records["parents"], interventions, key=key)
        k = int(parents["sex"].shape[1])
        if weights is None:
            q = jnp.full((k,), 1.0 / k, jnp.float32)
        else:
            _checks.check_weights("weights", weights, k)
            q = jnp.asarray(weights, jnp.float32)
        return ChestCounterfactuals(
            {v: parents[v] for v in IMAGE_PARENTS},
            records["noise"],
            q,
            self.size,
            self.site,
            self.effusion_size,
        )


@struct.dataclass
class ChestCounterfactuals:
    """The chest SCM's exact counterfactuals as a training source
    (:mod:`cfjax.predictors.sources`), built by :meth:`ChestSCM.counterfactual_source`.

    Holds each unit's counterfactual parents ``{node: (N, K)}`` (:data:`IMAGE_PARENTS`) and its
    image noise (``ImageNoise (N, ...)``: a few numbers a unit), and renders the images a step
    asks for with that noise, as :meth:`ChestSCM.counterfactuals` does (the same images, up to
    the float rounding of another batch shape).

    Attributes:
      parents: ``{node: (N, K)}`` counterfactual parents.
      noise: each unit's :class:`~cfjax.data.render.ImageNoise`.
      weights: ``(K,)`` intervention weights q.
      size, site, effusion_size: the renderer's settings (static).
    """

    parents: dict[str, jax.Array]
    noise: ImageNoise
    weights: jax.Array
    size: int = struct.field(pytree_node=False, default=64)
    site: Acquisition = struct.field(pytree_node=False, default=Acquisition())
    effusion_size: float = struct.field(pytree_node=False, default=EFFUSION_SIZE)

    @property
    def num_units(self) -> int:
        return int(np.shape(self.parents["sex"])[0])

    def images(self, idx: jax.Array, which: jax.Array) -> jax.Array:
        """Unit ``idx[b]`` rendered under intervention ``which[b, j]``: ``(B, J, size, size)``."""
        sex, age, race, lung, effusion = (
            self.parents[v][idx[:, None], which] for v in IMAGE_PARENTS
        )  # each (B, J)
        noise = jax.tree.map(lambda a: a[idx], self.noise)
        one = functools.partial(
            render, size=self.size, site=self.site, effusion_size=self.effusion_size
        )
        per_unit = jax.vmap(one, in_axes=(0, 0, 0, 0, 0, None))  # the J interventions of one unit
        return jax.vmap(per_unit)(sex, age, race, lung, effusion, noise)


@dataclasses.dataclass(frozen=True)
class ChestRenderer(cfscm.Mechanism):
    """The image node of :attr:`ChestSCM.image_scm`: :func:`cfjax.data.render.render` of the
    unit's parents and its :class:`~cfjax.data.render.ImageNoise`.

    Its parents must be :data:`IMAGE_PARENTS`, in that order. It takes their values as they
    are (``raw_parents``: the age in years, race as a class index), so the image of given
    parents is the renderer's, with no decoding of an encoding in between. Its noise is
    known from the simulation (``records["noise"]``) and cannot be computed from an image:
    :meth:`abduct` raises, pass ``noise={"image": records["noise"]}`` to
    :meth:`cfjax.scm.SCM.counterfactual`. It has no density (:meth:`log_prob` raises).

    Args:
      size, site, effusion_size: as in :class:`ChestSCM`.

    Shapes: one unit's value is ``(size, size)``; its noise an ``ImageNoise`` of one unit.

    Example:
      >>> from cfjax.data.render import sample_image_noise
      >>> r = ChestRenderer(size=32)
      >>> pa = jnp.array([1.0, 60.0, 0.0, 1.0, 1.0])  # sex, age, race, lung, effusion
      >>> jax.jit(r.forward)({}, sample_image_noise(jax.random.key(0)), pa).shape
      (32, 32)
    """

    size: int = 64
    site: Acquisition = Acquisition()
    effusion_size: float = EFFUSION_SIZE

    raw_parents = True

    def __post_init__(self):
        if not (isinstance(self.size, int) and 32 <= self.size <= 192):
            _checks.fail("size", "an integer in [32, 192]", repr(self.size))
        object.__setattr__(self, "effusion_size", float(self.effusion_size))

    @property
    def event_shape(self) -> tuple[int, ...]:
        return (self.size, self.size)

    def init(self, key: jax.Array, parent_dim: int) -> PyTree:
        if parent_dim != len(IMAGE_PARENTS):
            _checks.fail(
                "parents",
                f"the {len(IMAGE_PARENTS)} parents {list(IMAGE_PARENTS)}",
                f"{parent_dim} parent values",
            )
        return {}

    def sample_noise(self, key: jax.Array) -> ImageNoise:
        return sample_image_noise(key)

    def forward(self, params: PyTree, u: ImageNoise, pa: jax.Array) -> jax.Array:
        sex, age, race, lung, effusion = (pa[i] for i in range(len(IMAGE_PARENTS)))
        return render(
            sex,
            age,
            race,
            lung,
            effusion,
            u,
            size=self.size,
            site=self.site,
            effusion_size=self.effusion_size,
        )

    def abduct(
        self, params: PyTree, x: jax.Array, pa: jax.Array, key: jax.Array | None
    ) -> ImageNoise:
        raise _checks.ValidationError(
            "`noise`: the image noise (pose, anatomy, effusion severity and laterality, texture) "
            "cannot be computed from an image; it is known from the simulation: pass "
            "`noise={'image': records['noise']}` to `counterfactual`, got no noise for 'image'."
        )

    def log_prob(self, params: PyTree, x: jax.Array, pa: jax.Array) -> jax.Array:
        raise TypeError(
            "ChestRenderer has no density (the image is a deterministic render of its "
            "parents and noise): score or fit the parent nodes only (`nodes=`)."
        )


@functools.lru_cache(maxsize=32)
def _parent_params(prevalence: float) -> dict[str, PyTree]:
    """Built once per prevalence: ``ChestSCM.params`` is on every sampling path."""
    p = ChestSCM(prevalence=prevalence).scm.init(key=0)  # age = 20 + 70·sigmoid(u)
    p["sex"]["net"]["params"]["bias"] = jnp.zeros(2)
    p["race"]["net"]["params"]["bias"] = jnp.log(jnp.array([0.6, 0.25, 0.15]))
    # lung = 1.05 − 0.12·female − 0.15·age01 + 0.04·u  (age enters rescaled to [0, 1])
    p["lung"] = cfscm.linear_gaussian_params(jnp.array([-0.12, -0.15]), 1.05, 0.04)
    # effusion: logit = logit(prevalence) + 2.5·(age01 − 0.5)
    base = float(np.log(prevalence / (1 - prevalence)))
    p["effusion"]["net"]["params"]["Dense_0"]["kernel"] = jnp.array([[0.0, 2.5]])
    p["effusion"]["net"]["params"]["Dense_0"]["bias"] = jnp.array([0.0, base - 1.25])
    return p


def _hold_label(interventions: Interventions, effusion: ArrayLike) -> Interventions:
    """Interventions with do(effusion = observed) added to every group that does not set
    effusion, ``(N, K_g)`` per group; anything malformed is passed through unchanged for
    :meth:`cfjax.scm.SCM.counterfactual` to report."""
    observed = jnp.asarray(effusion)

    def hold(group):
        if not isinstance(group, Mapping) or "effusion" in group:
            return group
        if not group:  # the null intervention (K = 1)
            k = 1
        else:
            first = next(iter(group.values()))
            shape = first.shape if isinstance(first, cfscm.Shift) else np.shape(first)
            if len(shape) not in (1, 2) or observed.ndim != 1:
                return group
            k = shape[-1]
        return {**group, "effusion": jnp.broadcast_to(observed[:, None], observed.shape + (k,))}

    if isinstance(interventions, Mapping):
        return hold(interventions)
    if isinstance(interventions, (list, tuple)):
        return type(interventions)(hold(g) for g in interventions)
    return interventions


@functools.partial(jax.jit, static_argnums=(6, 7, 8))
def _render_many(sex, age, race, lung, effusion, noise, size, site, effusion_size):
    one = functools.partial(render, size=size, site=site, effusion_size=effusion_size)
    return jax.vmap(one)(sex, age, race, lung, effusion, noise)


@functools.lru_cache(maxsize=32)
def _render_fn(size: int, site: Acquisition, effusion_size: float) -> Callable[..., jax.Array]:
    """The batch renderer of one configuration, one function object per configuration (so
    :func:`cfjax.distributed.map_batch` compiles it once)."""
    return lambda *args: _render_many(*args, size, site, effusion_size)


#: pixels rendered per compiled call (bounds the renderer's working memory)
_PIXELS_PER_CALL = 1 << 22
#: fewest units per call (a 1-unit vmap compiles to a program whose rounding differs)
_MIN_CHUNK = 8


def _chunk_size(n: int, size: int) -> int:
    """Units per call: the power of two >= n, capped by the pixel budget, at least 8."""
    cap = max(_MIN_CHUNK, _PIXELS_PER_CALL // (size * size))
    cap = 1 << (cap.bit_length() - 1)
    return max(_MIN_CHUNK, min(cap, 1 << max(0, n - 1).bit_length()))


def _chunked(fn, args: tuple, size: int, *static):
    """``fn(*args, size, *static)`` over fixed-size chunks of units (the last padded by
    repeating its final unit), each output leaf concatenated back to ``N`` units."""
    n = int(np.shape(args[0])[0])
    b = _chunk_size(n, size)
    pad = (-n) % b
    if n == 0:  # nothing to render: empty outputs of the right shapes and dtypes
        shapes = jax.eval_shape(lambda *a: fn(*a, size, *static), *args)
        return jax.tree.map(lambda sd: jnp.zeros(sd.shape, sd.dtype), shapes)
    # The inputs are a few numbers a unit: padded and cut into chunks on the host, so that no
    # program is compiled per batch length (eager slices and concatenations would be).
    args = jax.tree.map(np.asarray, args)
    if pad:
        args = jax.tree.map(lambda a: np.concatenate([a, np.repeat(a[-1:], pad, axis=0)]), args)
    if n + pad == b:
        return jax.tree.map(lambda a: a[:n], fn(*args, size, *static))
    chunks = [
        fn(*jax.tree.map(lambda a, i=i: a[i : i + b], args), size, *static)
        for i in range(0, n + pad, b)
    ]
    chunks[-1] = jax.tree.map(lambda a: a[: b - pad], chunks[-1])
    return jax.tree.map(lambda *a: jnp.concatenate(a), *chunks)


@jax.jit
def _noise_many(noise_keys):
    """Each unit's image noise from its key, ``ImageNoise (N, ...)`` (a few numbers a unit)."""
    return jax.vmap(sample_image_noise)(noise_keys)
