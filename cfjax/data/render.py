"""A synthetic chest radiograph, rendered in jnp for one unit (jittable, vmappable).

The image is a deterministic function of the unit's parents (sex, age, race, lung size,
pleural effusion) and its explicit exogenous image noise ``u`` (pose, lung shape, device
contrast, texture), so a counterfactual image is exact: the same ``u``, new parents,
rendered again.

What each parent does (so that a classifier can pick them up):
- lung size scales both lung fields;
- effusion (pathology) fills the base of each lung with fluid under a meniscus that rises
  towards the lateral wall, blunting the costophrenic angle;
- sex (non-pathological): body habitus (a broader thorax for male) and soft-tissue shadows
  over the lower lateral chest for female;
- age (non-pathological): bone density, i.e. brightness of ribs, spine and clavicles, falls
  with age;
- race: a subtle brightness shift of the body (tissue density), nowhere else.

Everything anatomical lies inside the body's support (:func:`body_mask`, exactly 0 outside
the thorax): the background outside it is the detector's texture noise and acquisition
alone, the same for every value of every parent, so no parent can be read off the black
background.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

__all__ = ["ImageNoise", "Acquisition", "body_mask", "render", "sample_image_noise", "TEXTURE_GRID"]

TEXTURE_GRID = 8  # the texture noise is an 8 x 8 field, upsampled bilinearly


class ImageNoise(NamedTuple):
    """One unit's exogenous image noise (all standard normal draws)."""

    pose: jax.Array  # (3,): horizontal shift, vertical shift, rotation
    shape: jax.Array  # (2,): left/right lung shape asymmetry
    contrast: jax.Array  # (2,): gain and gamma of the device
    texture: jax.Array  # (TEXTURE_GRID, TEXTURE_GRID): anatomical/quantum mottle


class Acquisition(NamedTuple):
    """A site's acquisition settings (static floats): contrast, gamma, texture noise."""

    gain: float = 1.0
    gamma: float = 1.0
    noise: float = 0.04
    offset: float = 0.0


def sample_image_noise(key: jax.Array) -> ImageNoise:
    k = jax.random.split(key, 4)
    return ImageNoise(jax.random.normal(k[0], (3,)), jax.random.normal(k[1], (2,)),
                      jax.random.normal(k[2], (2,)),
                      jax.random.normal(k[3], (TEXTURE_GRID, TEXTURE_GRID)))


def _ellipse(x, y, cx, cy, rx, ry, sharp):
    """Soft indicator of an ellipse (1 inside, 0 outside)."""
    d = jnp.sqrt(((x - cx) / rx) ** 2 + ((y - cy) / ry) ** 2)
    return jax.nn.sigmoid((1 - d) * sharp)


def _compact_ellipse(x, y, cx, cy, rx, ry, sharp):
    """Soft indicator of an ellipse with compact support: a smoothstep edge with the slope of
    ``sigmoid((1 - d)·sharp)`` at ``d = 1`` (``d`` the normalised radius), exactly 1 for
    ``d <= 1 − 3/sharp`` and exactly 0 for ``d >= 1 + 3/sharp``."""
    d = jnp.sqrt(((x - cx) / rx) ** 2 + ((y - cy) / ry) ** 2)
    t = jnp.clip(0.5 + (1 - d) * (sharp / 6), 0, 1)
    return t * t * (3 - 2 * t)


def _patient_grid(u: ImageNoise, size: int, dtype):
    """Pixel centres in the patient's frame (pose: shift and small rotation), ``(size, size)``
    each, x right and y down in about [-1, 1]."""
    grid = (jnp.arange(size, dtype=dtype) + 0.5) / size * 2 - 1
    yy, xx = jnp.meshgrid(grid, grid, indexing="ij")
    dx, dy, rot = 0.05 * u.pose[0], 0.05 * u.pose[1], 0.05 * u.pose[2]
    c, s = jnp.cos(rot), jnp.sin(rot)
    return c * (xx - dx) + s * (yy - dy), -s * (xx - dx) + c * (yy - dy)


def _body(x, y, female):
    """The soft-tissue envelope: thorax width by sex (male broader), compact support."""
    return _compact_ellipse(x, y, 0.0, 0.12, 0.80 - 0.07 * female, 1.0, 12.0)


def body_mask(sex, u: ImageNoise, size: int = 64) -> jax.Array:
    """The body's soft mask in one unit's radiograph, ``(size, size)`` in [0, 1].

    Every anatomical term of :func:`render` is multiplied by it, so where it is exactly 0
    (the background) the image depends on the image noise and the site alone. It depends on
    sex (habitus) and the pose noise only; the male mask contains the female one.

    Example:
      >>> u = sample_image_noise(jax.random.key(0))
      >>> m = body_mask(0, u, 32)
      >>> m.shape, bool((m == 0).any()), bool((m == 1).any())
      ((32, 32), True, True)
    """
    dtype = jnp.result_type(float)
    x, y = _patient_grid(u, size, dtype)
    return _body(x, y, jnp.asarray(sex).astype(dtype))


def render(sex, age, race, lung_size, effusion, u: ImageNoise, size: int = 64,
           site: Acquisition = Acquisition()) -> jax.Array:
    """Render one unit's radiograph, shape ``(size, size)``, values in [0, 1].

    Args:
      sex: 0 male, 1 female. age: years in [20, 90]. race: 0, 1 or 2.
      lung_size: around 1 (relative lung field size). effusion: 0 or 1.
      u: the unit's :class:`ImageNoise`. size: pixels per side (32 to 192).
      site: acquisition settings of the imaging site.
    """
    dtype = jnp.result_type(float)
    sex, age, race, lung_size, effusion = (jnp.asarray(v).astype(dtype) for v in (sex, age, race, lung_size, effusion))
    x, y = _patient_grid(u, size, dtype)  # the patient's frame (pose from u)
    female = sex
    age01 = (age - 20) / 70

    # Body habitus: the soft-tissue envelope (male broader); everything below lies inside it.
    body = _body(x, y, female)
    tissue = 0.45 * jnp.ones_like(x)
    # Soft tissue over the lower lateral chest (female).
    for side in (-1.0, 1.0):
        tissue = tissue + 0.12 * female * _ellipse(x, y, side * 0.45, 0.55, 0.28, 0.2, 6.0)

    # Lungs: dark fields scaled by lung size, shape perturbed per side by u.shape.
    lungs = jnp.zeros_like(x)
    fluid = jnp.zeros_like(x)
    for j, side in enumerate((-1.0, 1.0)):
        rx = 0.27 * lung_size * (1 + 0.05 * u.shape[j])
        ry = 0.55 * lung_size * (1 - 0.03 * u.shape[j])
        cx, cy = side * 0.33, 0.0
        field = _ellipse(x, y, cx, cy, rx, ry, 10.0)
        # Fluid: below a meniscus rising towards the lateral wall (blunted angle).
        base = cy + ry * (0.55 - 0.45 * ((x - cx) * side / rx))
        meniscus = jax.nn.sigmoid((y - base) * 25.0)
        lungs = lungs + field
        fluid = fluid + field * meniscus
    tissue = tissue - 0.32 * lungs + 0.28 * effusion * fluid

    # Bone: spine, ribs and clavicles; density (brightness) falls with age.
    density = 0.30 - 0.14 * age01
    spine = jnp.exp(-(x / 0.06) ** 2) * (jnp.abs(y) < 0.95).astype(dtype)
    ribs = (0.5 + 0.5 * jnp.cos(18.0 * (y - 0.25 * x**2))) * ((jnp.abs(x) > 0.08) & (y < 0.6)).astype(dtype)
    clav = sum(_ellipse(x, y, side * 0.3, -0.62, 0.28, 0.04, 8.0) for side in (-1.0, 1.0))
    tissue = tissue + density * (spine + 0.35 * ribs + 0.8 * clav)

    # Race: a subtle shift of tissue brightness (inside the body only).
    tissue = tissue + 0.015 * (race - 1)
    img = body * tissue  # exactly 0 outside the body, whatever the parents

    # Device: contrast (gain, gamma) and texture; site settings on top.
    texture = jax.image.resize(u.texture.astype(dtype), (size, size), "bilinear")
    img = img + site.noise * texture + site.offset
    img = jnp.clip(img, 0, 1)
    gain = site.gain * (1 + 0.05 * u.contrast[0])
    gamma = site.gamma * jnp.exp(0.05 * u.contrast[1])
    return jnp.clip(gain * img, 0, 1) ** gamma
