"""A synthetic chest radiograph, rendered in jnp for one unit (jittable, vmappable).

The image is a deterministic function of the unit's parents (sex, age, race, lung size,
pleural effusion) and its explicit exogenous image noise ``u`` (pose, lung shape, heart,
diaphragm, effusion severity and laterality, device contrast, texture), so a counterfactual
image is exact: the same ``u``, new parents, rendered again.

What each parent does (so that a classifier can pick them up):

- effusion (pathology, binary): fluid fills the base of the affected lung(s) under a meniscus
  that rises towards the lateral wall. How much fluid and on which side are image noise
  (``u.severity``, ``u.laterality``), kept under counterfactuals: the severity is skewed
  (most effusions only blunt the costophrenic angle, a few fill a third or more of the lung),
  and the laterality is left (40%), right (40%) or both (20%), left meaning the patient's
  left, drawn on the image's right as in a PA radiograph;
- lung size scales both lung fields;
- sex (non-pathological): body habitus (a broader thorax for male), soft-tissue shadows over
  the lower lateral chest for female, a slightly smaller heart for female;
- age (non-pathological): bone density, i.e. brightness of ribs, spine and clavicles, falls
  with age; the heart widens a little with age;
- race: a subtle brightness shift of the body (tissue density), nowhere else.

Anatomy that does not depend on the parents but gives a classifier something to confuse with
fluid: the heart and mediastinum (size and shape vary with ``u.heart``), the diaphragm domes
(each dome's height varies with ``u.dome``: a high dome hides the lung base much as fluid
does), two clavicles and the posterior rib arcs.

Everything anatomical lies inside the body's support (:func:`body_mask`, exactly 0 outside
the thorax): the background outside it is the detector's texture noise and acquisition
alone, the same for every value of every parent, so no parent can be read off the black
background.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp

__all__ = [
    "ImageNoise",
    "Acquisition",
    "body_mask",
    "render",
    "sample_image_noise",
    "TEXTURE_GRID",
    "EFFUSION_SIZE",
    "LATERALITY",
    "effusion_height",
    "laterality",
]

TEXTURE_GRID = 8  # the texture noise is an 8 x 8 field, upsampled bilinearly
#: default median height of the fluid as a fraction of the lung's height (ChestSCM's knob)
EFFUSION_SIZE = 0.18
#: the most fluid an effusion holds: this fraction of the lung's height
_MAX_FLUID = 0.7
#: spread of the severity on the logit scale of ``height / _MAX_FLUID``
_SEVERITY_SPREAD = 1.0
#: laterality classes, in the order of :func:`laterality`'s codes
LATERALITY = ("left", "right", "both")
#: |u.laterality| below this is "both" (20%); below -it "right"... see :func:`laterality`
_BOTH = 0.2533471031357997  # the standard normal's 0.6 quantile: P(|z| < it) = 0.2


class ImageNoise(NamedTuple):
    """One unit's exogenous image noise (all standard normal draws, mapped inside
    :func:`render`)."""

    pose: jax.Array  # (3,): horizontal shift, vertical shift, rotation
    shape: jax.Array  # (2,): right/left lung shape asymmetry
    contrast: jax.Array  # (2,): gain and gamma of the device
    texture: jax.Array  # (TEXTURE_GRID, TEXTURE_GRID): anatomical/quantum mottle
    heart: jax.Array  # (2,): heart width and height
    dome: jax.Array  # (2,): right/left diaphragm dome height
    severity: jax.Array  # (): effusion severity (fluid height), when there is an effusion
    laterality: jax.Array  # (): effusion side, mapped by :func:`laterality`


class Acquisition(NamedTuple):
    """A site's acquisition settings (static floats): contrast, gamma, texture noise."""

    gain: float = 1.0
    gamma: float = 1.0
    noise: float = 0.04
    offset: float = 0.0


def sample_image_noise(key: jax.Array) -> ImageNoise:
    """One unit's :class:`ImageNoise` (independent standard normal draws).

    Example:
      >>> u = sample_image_noise(jax.random.key(0))
      >>> u.texture.shape, u.severity.shape
      ((8, 8), ())
    """
    k = jax.random.split(key, 8)
    return ImageNoise(
        jax.random.normal(k[0], (3,)),
        jax.random.normal(k[1], (2,)),
        jax.random.normal(k[2], (2,)),
        jax.random.normal(k[3], (TEXTURE_GRID, TEXTURE_GRID)),
        jax.random.normal(k[4], (2,)),
        jax.random.normal(k[5], (2,)),
        jax.random.normal(k[6], ()),
        jax.random.normal(k[7], ()),
    )


def laterality(u_laterality) -> jax.Array:
    """The effusion's side coded from its noise: 0 left (``u < −0.253``, 40%), 1 right
    (``u > 0.253``, 40%), 2 both (20%); names in :data:`LATERALITY`.

    Example:
      >>> laterality(jnp.array([-1.0, 1.0, 0.0])).tolist()
      [0, 1, 2]
    """
    u = jnp.asarray(u_laterality)
    return jnp.where(u < -_BOTH, 0, jnp.where(u > _BOTH, 1, 2))


def effusion_height(u_severity, effusion_size: float = EFFUSION_SIZE) -> jax.Array:
    """Height of the fluid (a fraction of the lung's height) of an effusion with severity
    noise ``u_severity``: ``0.7·sigmoid(logit(effusion_size / 0.7) + u)``, median
    ``effusion_size``, skewed so most effusions are small and a few fill much of the lung."""
    u = jnp.asarray(u_severity)
    m = effusion_size / _MAX_FLUID
    return _MAX_FLUID * jax.nn.sigmoid(math.log(m / (1 - m)) + _SEVERITY_SPREAD * u)


def _ellipse(x, y, cx, cy, rx, ry, sharp):
    """Soft indicator of an ellipse (1 inside, 0 outside)."""
    d = jnp.sqrt(((x - cx) / rx) ** 2 + ((y - cy) / ry) ** 2)
    return jax.nn.sigmoid((1 - d) * sharp)


def _smoothstep(t):
    """0 for ``t <= 0``, 1 for ``t >= 1``, a cubic in between."""
    t = jnp.clip(t, 0, 1)
    return t * t * (3 - 2 * t)


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


def _lung(x, y, side, lung_size, u_shape, u_dome):
    """One lung field (soft, in [0, 1]) and its geometry. ``side`` −1 is the image's left
    (the patient's right), +1 the image's right (the patient's left, lower dome).

    The field is a rounded box (a superellipse: a deep lateral costophrenic recess) cut from
    below by the diaphragm dome, ``y_d(x) = bottom − dome·(1 − t²)``, ``t`` the normalised
    distance from the lung's centre line: the dome rises highest in the middle and meets the
    lateral wall at the costophrenic angle. ``u_dome > 0`` raises the whole hemidiaphragm and
    heightens its dome (``< 0`` lowers and flattens them). Returns the field and ``(cx, cy, rx, ry, angle)``,
    ``angle`` the height of the costophrenic angle."""
    rx = 0.26 * lung_size * (1 + 0.05 * u_shape)
    ry = 0.56 * lung_size * (1 - 0.03 * u_shape)
    cx, cy = side * 0.34, -0.02
    t = (x - cx) / rx
    box = jnp.abs(t) ** 3 + jnp.abs((y - cy) / ry) ** 3
    field = jax.nn.sigmoid((1 - box) * 5.0)
    bottom = cy + ry * (0.92 - 0.05 * side)  # the patient's right dome sits higher
    dome = ry * (0.28 + 0.07 * u_dome)  # how far the dome's top rises above the angle
    y_dome = bottom - dome * (1 - jnp.clip(t, -1, 1) ** 2) - 0.04 * u_dome
    field = field * jax.nn.sigmoid((y_dome - y) * 30.0)
    return field, (cx, cy, rx, ry, bottom - 0.04 * u_dome)


def render(
    sex,
    age,
    race,
    lung_size,
    effusion,
    u: ImageNoise,
    size: int = 64,
    site: Acquisition = Acquisition(),
    effusion_size: float = EFFUSION_SIZE,
) -> jax.Array:
    """Render one unit's radiograph, shape ``(size, size)``, values in [0, 1].

    Args:
      sex: 0 male, 1 female. age: years in [20, 90]. race: 0, 1 or 2.
      lung_size: around 1 (relative lung field size). effusion: 0 or 1.
      u: the unit's :class:`ImageNoise`. size: pixels per side (32 to 192).
      site: acquisition settings of the imaging site.
      effusion_size: median height of an effusion's fluid, a fraction of the lung's height
        in (0, 0.7) (see :func:`effusion_height`): the task's difficulty.

    Example:
      >>> u = sample_image_noise(jax.random.key(0))
      >>> img = render(1, 60.0, 0, 1.0, 1, u, size=32)
      >>> img.shape, bool(img.min() >= 0), bool(img.max() <= 1)
      ((32, 32), True, True)
    """
    dtype = jnp.result_type(float)
    sex, age, race, lung_size, effusion = (
        jnp.asarray(v).astype(dtype) for v in (sex, age, race, lung_size, effusion)
    )
    u = ImageNoise(*(jnp.asarray(a).astype(dtype) for a in u))
    x, y = _patient_grid(u, size, dtype)  # the patient's frame (pose from u)
    female = sex
    age01 = (age - 20) / 70

    # Body habitus: the soft-tissue envelope (male broader); everything below lies inside it.
    body = _body(x, y, female)
    tissue = 0.45 + 0.05 * jax.nn.sigmoid((y - 0.62) * 8.0)  # the abdomen below the domes
    # Soft tissue over the lower lateral chest (female).
    for side in (-1.0, 1.0):
        tissue = tissue + 0.12 * female * _ellipse(x, y, side * 0.45, 0.55, 0.28, 0.2, 6.0)

    # Effusion: which sides (laterality noise) and how much fluid (severity noise).
    side_code = laterality(u.laterality)
    on = {-1.0: (side_code != 0).astype(dtype), 1.0: (side_code != 1).astype(dtype)}  # right, left
    height = effusion_height(u.severity, effusion_size)

    # Lungs: dark fields scaled by lung size, shape per side from u.shape, domes from u.dome.
    lungs = jnp.zeros_like(x)
    fluid = jnp.zeros_like(x)
    for j, side in enumerate((-1.0, 1.0)):
        field, (cx, cy, rx, ry, bottom) = _lung(x, y, side, lung_size, u.shape[j], u.dome[j])
        # Fluid: below a meniscus rising towards the lateral wall (the blunted angle first).
        lateral = jnp.clip((x - cx) * side / rx, -1, 1)
        level = bottom - 2 * ry * height * (0.55 + 0.45 * lateral)
        meniscus = jax.nn.sigmoid((y - level) * 40.0)
        lungs = lungs + field
        pleura = _smoothstep(
            x * side / 0.08
        )  # fluid stays on its side: exactly 0 across the midline
        fluid = fluid + on[side] * field * meniscus * pleura
    tissue = tissue - 0.32 * lungs + 0.30 * effusion * fluid

    # Heart and mediastinum: widen with age, smaller for female, shape from u.heart.
    hx = 0.25 * (1 + 0.07 * u.heart[0]) * (1 + 0.10 * age01) * (1 - 0.05 * female)
    hy = 0.19 * (1 + 0.07 * u.heart[1])
    heart = _ellipse(x, y, 0.10, 0.30, hx, hy, 8.0)
    mediastinum = (
        jnp.exp(-(((x - 0.01) / 0.13) ** 4))
        * jax.nn.sigmoid((0.35 - y) * 10.0)
        * jax.nn.sigmoid((y + 0.8) * 10.0)
    )
    knob = _ellipse(x, y, -0.06, -0.30, 0.07, 0.05, 6.0)  # aortic knob, patient's left
    tissue = tissue + 0.20 * jnp.maximum(heart, mediastinum) + 0.05 * knob

    # Bone: spine, posterior rib arcs and clavicles; density (brightness) falls with age.
    density = 0.30 - 0.14 * age01
    spine = jnp.exp(-((x / 0.06) ** 2)) * (jnp.abs(y) < 0.95).astype(dtype)
    ax = jnp.abs(x)
    arc = y + 0.10 * ax - 0.55 * (ax - 0.08) ** 2  # posterior ribs: up from the spine, then down
    ribs = (
        (0.5 + 0.5 * jnp.cos(2 * math.pi * arc / 0.2)) ** 3
        * jax.nn.sigmoid((ax - 0.08) * 40.0)
        * _ellipse(x, y, 0.0, -0.06, 0.72, 0.72, 10.0)
    )
    clav_y = -0.56 - 0.22 * (ax - 0.08) + 0.25 * (ax - 0.35) ** 2
    clav = (
        jnp.exp(-(((y - clav_y) / 0.035) ** 2))
        * jax.nn.sigmoid((ax - 0.06) * 40.0)
        * jax.nn.sigmoid((0.62 - ax) * 30.0)
    )
    tissue = tissue + density * (spine + 0.35 * ribs + 0.8 * clav)

    # Race: a subtle shift of tissue brightness (inside the body only).
    tissue = tissue + 0.015 * (race - 1)
    img = body * tissue  # exactly 0 outside the body, whatever the parents

    # Device: contrast (gain, gamma) and texture; site settings on top.
    texture = jax.image.resize(u.texture, (size, size), "bilinear")
    img = img + site.noise * texture + site.offset
    img = jnp.clip(img, 0, 1)
    gain = site.gain * (1 + 0.05 * u.contrast[0])
    gamma = site.gamma * jnp.exp(0.05 * u.contrast[1])
    return jnp.clip(gain * img, 0, 1) ** gamma
