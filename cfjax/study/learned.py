"""Learned counterfactuals for the marginalisation study (:mod:`cfjax.study.marginalisation`):
a conditional HVAE image mechanism (:class:`cfjax.generative.mechanism.ImageHVAE`) trained per
site on the training split's factual images and parents, plugged in as a counterfactual
*source* with the same signature as :func:`cfjax.study.evaluation.exact_counterfactuals`.

The parent mechanisms are the true ones, so the counterfactual parents are exactly those the
exact source returns (``ChestSCM.counterfactuals`` with the same key and label mode: under
``label="fixed"`` effusion is held at its observed value in both). Only the images differ: the
exact source re-renders each unit with its own exogenous image noise; the learned one abducts
the HVAE's noise from the factual image and parents (``ImageHVAE.abduct``, one posterior draw
per unit) and decodes it under each counterfactual parent vector (``ImageHVAE.forward``).

The generator is trained on the ELBO plus paper 000's counterfactual regulariser (weight
``cf_weight``; 0 turns it off), whose anti-causal predictors for sex and age are trained on the
same site's training split first.

Example (training takes a while; ``tests/test_study_learned.py`` runs it):
  >>> from cfjax.generative import GeneratorConfig
  >>> from cfjax.generative.hvae import HVAEConfig
  >>> from cfjax.study.learned import SiteGeneratorConfig
  >>> hvae = HVAEConfig(channels=(4, 4, 4), latent_dims=(0, 2, 2))
  >>> settings = SiteGeneratorConfig(GeneratorConfig(hvae=hvae, steps=2, warmup=0, kl_warmup=0, cf_weight=0.2))
  >>> settings.train_config(32).hvae.image_size, settings.generator.cf_weight
  (32, 0.2)

  ``fit_site_generator(chest, records, settings, key=key)`` fits one site's generator;
  ``LearnedSource({chest.site: fit})`` is then a counterfactual source for
  :func:`cfjax.study.run`.
"""

from __future__ import annotations

import dataclasses
import functools
import time
from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

import cfjax as cf
from cfjax import _checks
from cfjax._core.keys import as_key
from cfjax.data.chest import IMAGE_PARENTS, PARENTS
from cfjax.data.render import Acquisition
from cfjax.generative import anticausal as ac
from cfjax.generative import train as gt
from cfjax.generative.hvae import HVAEConfig
from cfjax.generative.mechanism import ImageHVAE
from cfjax.typing import ArrayLike, KeyLike, PyTree

__all__ = [
    "SiteGeneratorConfig",
    "GENERATOR_FULL",
    "GENERATOR_QUICK",
    "REGULARISED",
    "learned_scm",
    "fit_site_generator",
    "learned_images",
    "LearnedSource",
]


@dataclasses.dataclass(frozen=True)
class SiteGeneratorConfig:
    """One site's learned image generator as the study trains it.

    Attributes:
      generator: the HVAE and its optimisation (:class:`cfjax.generative.GeneratorConfig`);
        its ``hvae.image_size`` is replaced by the study's image size, and its ``chunk_steps``
        and ``cf_warmup`` are capped at its ``steps`` (:meth:`train_config`).
      chunk: test units per compiled counterfactual batch (each unit decoded under all K
        interventions): bounds the memory of :func:`learned_images`.
      ac_steps, ac_features: training steps and convolution features of the counterfactual
        regulariser's anti-causal predictors (heads :data:`REGULARISED`), trained when
        ``generator.cf_weight > 0``.
    """

    generator: gt.GeneratorConfig = gt.GeneratorConfig(
        hvae=HVAEConfig(image_size=64, channels=(16, 32, 32, 32), latent_dims=(0, 8, 8, 4)),
        steps=3000,
        batch_size=32,
        learning_rate=1e-3,
        warmup=100,
        kl_warmup=500,
        ema_decay=0.999,
        chunk_steps=100,
        temperature=1.0,
        cf_weight=0.2,
        cf_warmup=500,
    )
    chunk: int = 64
    ac_steps: int = 1000
    ac_features: tuple[int, ...] = (8, 16, 32)

    def __post_init__(self):
        if not isinstance(self.generator, gt.GeneratorConfig):
            _checks.fail("generator", "a cfjax.generative.GeneratorConfig", repr(self.generator))
        for name in ("chunk", "ac_steps"):
            _checks.check_positive_int(name, getattr(self, name))

    def train_config(self, size: int) -> gt.GeneratorConfig:
        """:attr:`generator` for images of ``size × size``."""
        g = self.generator
        return dataclasses.replace(
            g,
            hvae=dataclasses.replace(g.hvae, image_size=size),
            chunk_steps=min(g.chunk_steps, g.steps),
            cf_warmup=min(g.cf_warmup, g.steps),
        )


#: the full study (64 × 64 images, 10000 training units per site)
GENERATOR_FULL = SiteGeneratorConfig()
#: the quick study (32 × 32, 3000 units per site): a smaller model and fewer steps
GENERATOR_QUICK = SiteGeneratorConfig(
    gt.GeneratorConfig(
        hvae=HVAEConfig(image_size=32, channels=(8, 16, 16), latent_dims=(0, 4, 4)),
        steps=600,
        batch_size=32,
        learning_rate=1e-3,
        warmup=50,
        kl_warmup=200,
        ema_decay=0.99,
        chunk_steps=100,
        temperature=1.0,
        cf_weight=0.2,
        cf_warmup=100,
    ),
    chunk=100,
    ac_steps=300,
)
#: the parents the counterfactual regulariser intervenes on
REGULARISED = ("sex", "age")


def learned_scm(chest: cf.data.ChestSCM, mechanism: ImageHVAE) -> cf.scm.SCM:
    """``chest.image_scm`` with ``mechanism`` as the image's: the true parent mechanisms
    (parameters ``{**chest.params(), "image": fit.params}``)."""
    base = chest.image_scm
    return cf.scm.SCM(
        {**PARENTS, "image": list(IMAGE_PARENTS)},
        {**{v: base.mechanism(v) for v in base.nodes}, "image": mechanism},
    )


def fit_site_generator(
    chest: cf.data.ChestSCM,
    records: Mapping[str, PyTree],
    settings: SiteGeneratorConfig,
    *,
    key: KeyLike,
    checkpoint_dir: str | None = None,
    progress: bool | None = False,
) -> gt.GeneratorFit:
    """Fit the HVAE image mechanism of ``chest`` on ``records`` (``"parents"``, ``"image"``);
    resumes from (or reuses) an orbax checkpoint of the same run in ``checkpoint_dir``. With
    ``settings.generator.cf_weight > 0`` the regulariser's anti-causal predictors are trained first
    (key ``fold_in(key, 1)``; the generator's key is ``key`` either way; ``key`` a PRNG key or an
    int seed)."""
    if not isinstance(settings, SiteGeneratorConfig):
        _checks.fail("settings", "a SiteGeneratorConfig", repr(settings))
    config = settings.train_config(chest.size)
    key = as_key(key)
    data = {
        **{v: np.asarray(x) for v, x in records["parents"].items()},
        "image": np.asarray(records["image"]),
    }
    scm = learned_scm(chest, ImageHVAE(config.hvae, config.temperature))
    regulariser = None
    if config.cf_weight > 0:
        heads = tuple(h for h in ac.CHEST_SPEC if h.name in REGULARISED)
        regulariser = ac.train_anticausal(
            data["image"],
            {h.name: data[h.name] for h in heads},
            heads,
            ac.AntiCausalConfig(steps=settings.ac_steps, features=tuple(settings.ac_features)),
            key=jax.random.fold_in(key, 1),
            progress=progress,
        )
    return gt.fit_generator(
        data,
        config,
        scm=scm,
        key=key,
        node="image",
        regulariser=regulariser,
        checkpoint_dir=checkpoint_dir,
        progress=progress,
    )


def learned_images(
    mechanism: ImageHVAE,
    params: PyTree,
    images: jax.Array,
    pa: jax.Array,
    pa_cf: jax.Array,
    *,
    key: KeyLike,
    chunk: int,
) -> jax.Array:
    """Counterfactual images of ``N`` units under ``K`` parent vectors each.

    Unit ``n``'s noise is abducted once, ``u_n = abduct(params, images[n], pa[n], k_n)`` with
    ``k_n = split(key, N)[n]``, and decoded under each of its counterfactual parent vectors,
    ``forward(params, u_n, pa_cf[n, k])``; at most ``chunk`` units at a time (a unit's result
    does not depend on its batch). The units are padded to their shape bucket
    (:func:`cfjax.distributed.bucket`: a power of two of whole chunks, repeating the last unit,
    the padding dropped), so a sweep over many N compiles a handful of programs.

    Shapes: ``images (N, H, W)``, ``pa (N, P)``, ``pa_cf (N, K, P)`` → ``(N, K, H, W)``, units
    before interventions (``docs/contract.md``).

    Args:
      mechanism, params: the image mechanism and its parameters.
      images, pa, pa_cf: the factual images, their parent vectors and the counterfactual ones.
      key: a PRNG key, raw key data or an int seed (keyword-only).
      chunk: units per compiled batch.
    """
    chunk = _checks.check_positive_int("chunk", chunk)
    key = as_key(key)
    n = int(np.shape(images)[0])
    if np.ndim(pa_cf) != 3 or np.shape(pa_cf)[0] != n:
        _checks.fail(
            "pa_cf",
            f"shape (N, K, P) with N = {n} (units before interventions)",
            f"shape {np.shape(pa_cf)}",
        )
    size = cf.distributed.bucket(n, chunk)
    out = _learned_images(
        mechanism, params, *_units_in_bucket(images, pa, pa_cf, key, size), chunk=min(chunk, size)
    )
    return _drop_padding(out, n)


@functools.partial(jax.jit, static_argnums=4)
def _units_in_bucket(images, pa, pa_cf, key, size):
    """The units with their keys ``split(key, N)``, padded to ``size`` units (one small program
    per N, rather than one per array operation)."""
    units = (images, pa, pa_cf, jax.random.split(key, images.shape[0]))
    return cf.distributed.pad_axis(units, size)


@functools.partial(jax.jit, static_argnums=1)
def _drop_padding(out, n):
    return out[:n]  # (N, K, H, W)


@functools.partial(jax.jit, static_argnames=("mechanism", "chunk"))
def _learned_images(
    mechanism: ImageHVAE,
    params: PyTree,
    images: jax.Array,
    pa: jax.Array,
    pa_cf: jax.Array,
    keys: jax.Array,
    chunk: int,
) -> jax.Array:
    """:func:`learned_images` of units already padded to a multiple of ``chunk``: ``images (N,
    H, W)``, ``pa (N, P)``, ``pa_cf (N, K, P)``, ``keys (N,)`` → ``(N, K, H, W)``."""

    def one(args):
        x, p, p_cf, k = args
        u = mechanism.abduct(params, x, p, k)
        return jax.vmap(lambda q: mechanism.forward(params, u, q))(p_cf)  # (K, H, W)

    # batches of exactly `chunk` units: one compiled loop body (a remainder would compile a second)
    return jax.lax.map(one, (images, pa, pa_cf, keys), batch_size=chunk)


class LearnedSource:
    """A counterfactual source (:class:`cfjax.study.CounterfactualSource`): ``source(chest,
    records, interventions, key=key, label=label) -> {"parents": {node: (N, K)}, "image": (N, K,
    H, W)}``, units before interventions, whose images come from the generator trained for
    ``chest.site``.

    Args:
      fits: ``{chest.site: GeneratorFit}`` (an :class:`cfjax.data.Acquisition` per site).
      chunk: test units per compiled batch (:func:`learned_images`).

    Attributes:
      calls: one entry per call: site, K, N, seconds, the pixel MAE of the learned
        counterfactual images against the exact ones (``mae_by_k``: per intervention), and the
        mean absolute change from the factual image of the learned and of the exact ones
        (``change_learned``, ``change_exact``).
    """

    def __init__(self, fits: Mapping[Acquisition, gt.GeneratorFit], chunk: int = 64):
        self.fits = dict(fits)
        self.chunk = _checks.check_positive_int("chunk", chunk)
        self.calls: list[dict[str, Any]] = []

    def __call__(
        self,
        chest: cf.data.ChestSCM,
        records: Mapping[str, PyTree],
        interventions: Mapping[str, ArrayLike],
        *,
        key: KeyLike,
        label: str = "fixed",
    ) -> dict[str, PyTree]:
        """The learned counterfactuals of ``records`` under ``interventions`` (``key`` a PRNG
        key, raw key data or an int seed; ``label`` as :meth:`cfjax.data.ChestSCM.counterfactuals`)."""
        if chest.site not in self.fits:
            _checks.fail(
                "chest", f"a site with a trained generator ({list(self.fits)})", repr(chest.site)
            )
        key = as_key(key)
        t0 = time.perf_counter()
        fit = self.fits[chest.site]
        # the true parent mechanisms: the exact source's counterfactual parents (same key, same label mode)
        exact = chest.counterfactuals(records, interventions, key=key, label=label)  # (N, K, ...)
        parents = exact["parents"]
        scm = learned_scm(chest, fit.mechanism)
        n, k = np.shape(parents["sex"])
        pa = gt.parent_inputs(scm, "image", records["parents"])  # (N, P)
        pa_cf = gt.parent_inputs(
            scm, "image", {v: jnp.reshape(x, (n * k,)) for v, x in parents.items()}
        )
        images = learned_images(
            fit.mechanism,
            fit.params,
            jnp.asarray(records["image"]),
            pa,
            pa_cf.reshape(n, k, -1),
            key=jax.random.fold_in(key, 1),
            chunk=self.chunk,
        )
        images = jax.block_until_ready(images)  # (N, K, H, W)
        mae_k = np.asarray(jnp.mean(jnp.abs(images - exact["image"]), axis=(0, 2, 3)), np.float64)
        factual = jnp.asarray(records["image"])[:, None]
        self.calls.append(
            {
                "site": chest.site,
                "k": int(k),
                "n": int(n),
                "seconds": time.perf_counter() - t0,
                "pixel_mae": float(mae_k.mean()),
                "mae_by_k": mae_k.tolist(),
                "change_learned": float(jnp.mean(jnp.abs(images - factual))),
                "change_exact": float(jnp.mean(jnp.abs(exact["image"] - factual))),
            }
        )
        return {"parents": parents, "image": images}
