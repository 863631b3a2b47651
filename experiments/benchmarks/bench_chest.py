"""Benchmark: counterfactual chest radiographs per second, ``cfjax.data.ChestSCM`` against a
numpy implementation of the same SCM and renderer, side by side in one process.

The study's setting: N test units, K = 16 interventions do(sex, age) over sex × 8 ages from
20 to 90, 64 × 64 float32 images. Two things are timed on each side:

- end to end: the parents' counterfactuals (abduction of lung size and of effusion's Gumbel
  noise, action, prediction; effusion follows age, ``label="follows"``) and the K·N images
  rendered from them with each unit's own image noise — cfjax: ``ChestSCM.counterfactuals``; numpy: the same mechanisms in closed form (the
  Gumbel posterior drawn with numpy's generator) and the renderer below;
- rendering alone: the K·N images from given counterfactual parents and noise — cfjax:
  ``ChestSCM.render``; numpy: :func:`render_numpy`.


The numpy renderer evaluates the same formulas as ``cfjax.data.render`` vectorised over a
chunk of images (``(B, size, size)`` float32 arrays, per-image scalars broadcast, the bilinear
texture upsampling as two small matmuls), chunks of ``--chunk`` images so the working set
stays in cache. Its images are checked against cfjax's on the same parents and noise (the
run stops if they differ by more than 1e-4).

Each time is the median of warm repeats; cfjax's first call (compilation included) is printed
too. Throughput is K·N ÷ time; ratios are numpy time ÷ cfjax time (above 1: cfjax faster).
"""

from __future__ import annotations

import argparse
import time

import jax
import numpy as np
from scipy.special import expit
from scipy.stats import norm

import cfjax as cf
from experiments.benchmarks.timing import conditions, first_time, median_time

F32 = np.float32
#: |laterality noise| below the normal's 0.6 quantile: an effusion on both sides (20%)
_BOTH = float(norm.ppf(0.6))


# ---------------------------------------------------------------------------- numpy SCM
def parent_coefficients(chest) -> dict:
    """The parent mechanisms' coefficients, read from ``ChestSCM.params()``."""
    p = jax.tree.map(np.asarray, chest.params())
    lung = p["lung"]["net"]["params"]["Dense_0"]
    eff = p["effusion"]["net"]["params"]["Dense_0"]
    return {"lung_w": lung["kernel"][:, 0].astype(F32), "lung_b": F32(lung["bias"][0]),
            "lung_sd": F32(np.exp(p["lung"]["log_scale"])),
            "eff_w": eff["kernel"][0].astype(F32), "eff_b": eff["bias"].astype(F32)}


def counterfactual_parents(coef, parents, sex_do, age_do, rng):
    """do(sex, age) for K interventions: ``{node: (K, N)}``. Lung size (linear-Gaussian in
    sex and age01) and effusion (Gumbel-max in age01) are abducted once and re-predicted; race
    is copied."""
    sex, age, race, lung, eff = (np.asarray(parents[v]) for v in ("sex", "age", "race", "lung", "effusion"))
    k, n = len(sex_do), len(sex)
    age01 = (age.astype(F32) - 20) / 70
    w, b = coef["lung_w"], coef["lung_b"]
    u_lung = (lung - (sex * w[0] + age01 * w[1] + b)) / coef["lung_sd"]
    # Effusion: perturbed logits from their posterior given the observed class (top-down
    # truncated Gumbel), noise = perturbed - logits.
    logits = age01[:, None] * coef["eff_w"] + coef["eff_b"]  # (N, 2)
    top = np.logaddexp(logits[:, 0], logits[:, 1]) + rng.gumbel(size=n).astype(F32)
    h = logits + rng.gumbel(size=(n, 2)).astype(F32)
    below = top[:, None] - np.logaddexp(0, top[:, None] - h)
    g = np.where(np.arange(2) == eff[:, None], top[:, None], below)
    noise_eff = g - logits
    sex_cf = np.broadcast_to(np.asarray(sex_do, np.int32)[:, None], (k, n))
    age_cf = np.broadcast_to(np.asarray(age_do, F32)[:, None], (k, n))
    age01_cf = (age_cf - 20) / 70
    lung_cf = sex_cf * w[0] + age01_cf * w[1] + b + coef["lung_sd"] * u_lung
    logits_cf = age01_cf[..., None] * coef["eff_w"] + coef["eff_b"]  # (K, N, 2)
    eff_cf = np.argmax(logits_cf + noise_eff, axis=-1).astype(np.int32)
    return {"sex": sex_cf, "age": age_cf, "race": np.broadcast_to(race, (k, n)), "lung": lung_cf,
            "effusion": eff_cf}


# ---------------------------------------------------------------------------- numpy renderer
def bilinear_matrix(n_in: int, n_out: int) -> np.ndarray:
    """``(n_out, n_in)`` weights of bilinear upsampling with half-pixel centres, edges clamped."""
    t = (np.arange(n_out) + 0.5) * n_in / n_out - 0.5
    lo = np.floor(t).astype(int)
    frac = (t - lo).astype(F32)
    W = np.zeros((n_out, n_in), F32)
    rows = np.arange(n_out)
    np.add.at(W, (rows, np.clip(lo, 0, n_in - 1)), 1 - frac)
    np.add.at(W, (rows, np.clip(lo + 1, 0, n_in - 1)), frac)
    return W


def _ellipse(x, y, cx, cy, rx, ry, sharp):
    d = np.sqrt(np.square((x - cx) / rx) + np.square((y - cy) / ry))
    return expit((1 - d) * sharp)


def _smoothstep(t):
    t = np.clip(t, 0, 1)
    return t * t * (3 - 2 * t)


def _compact_ellipse(x, y, cx, cy, rx, ry, sharp):
    d = np.sqrt(np.square((x - cx) / rx) + np.square((y - cy) / ry))
    return _smoothstep(0.5 + (1 - d) * (sharp / 6))


def _render_chunk(sex, age, race, lung, eff, u, size, site, effusion_size, W, out):
    """``cfjax.data.render`` for a chunk of B images, written into ``out (B, size, size)``;
    ``u`` holds the chunk's image noise arrays by field name."""
    col = lambda v: np.asarray(v, F32)[:, None, None]  # noqa: E731  per-image scalars
    pose = u["pose"]
    grid = (np.arange(size, dtype=F32) + 0.5) / size * 2 - 1
    dx, dy, rot = col(0.05 * pose[:, 0]), col(0.05 * pose[:, 1]), col(0.05 * pose[:, 2])
    c, s = np.cos(rot), np.sin(rot)
    xs, ys = grid[None, None, :] - dx, grid[None, :, None] - dy
    x = c * xs + s * ys
    y = -s * xs + c * ys
    female, effusion = col(sex), col(eff)
    age01 = (col(age) - 20) / 70

    body = _compact_ellipse(x, y, 0.0, 0.12, 0.80 - 0.07 * female, 1.0, 12.0)
    tissue = 0.45 + 0.05 * expit((y - 0.62) * 8.0)
    for side in (-1.0, 1.0):
        tissue = tissue + 0.12 * female * _ellipse(x, y, side * 0.45, 0.55, 0.28, 0.2, 6.0)
    # Effusion: laterality code (0 left, 1 right, 2 both) and fluid height from the noise.
    z = col(u["laterality"])
    code = np.where(z < -_BOTH, 0, np.where(z > _BOTH, 1, 2))
    on = {-1.0: (code != 0).astype(F32), 1.0: (code != 1).astype(F32)}
    m = effusion_size / 0.7
    height = 0.7 * expit(np.log(m / (1 - m)) + col(u["severity"]))
    lungs = np.zeros_like(x)
    fluid = np.zeros_like(x)
    for j, side in enumerate((-1.0, 1.0)):
        shp, dome_u = col(u["shape"][:, j]), col(u["dome"][:, j])
        rx = 0.26 * col(lung) * (1 + 0.05 * shp)
        ry = 0.56 * col(lung) * (1 - 0.03 * shp)
        cx, cy = side * 0.34, -0.02
        t = (x - cx) / rx
        field = expit((1 - (np.abs(t) ** 3 + np.abs((y - cy) / ry) ** 3)) * 5.0)
        bottom = cy + ry * (0.92 - 0.05 * side)
        dome = ry * (0.28 + 0.07 * dome_u)
        y_dome = bottom - dome * (1 - np.clip(t, -1, 1) ** 2) - 0.04 * dome_u
        field = field * expit((y_dome - y) * 30.0)
        lateral = np.clip((x - cx) * side / rx, -1, 1)
        level = bottom - 0.04 * dome_u - 2 * ry * height * (0.55 + 0.45 * lateral)
        lungs += field
        fluid += on[side] * field * expit((y - level) * 40.0) * _smoothstep(x * side / 0.08)
    tissue = tissue - 0.32 * lungs + 0.30 * effusion * fluid

    heart_u = u["heart"]
    hx = 0.25 * (1 + 0.07 * col(heart_u[:, 0])) * (1 + 0.10 * age01) * (1 - 0.05 * female)
    hy = 0.19 * (1 + 0.07 * col(heart_u[:, 1]))
    heart = _ellipse(x, y, 0.10, 0.30, hx, hy, 8.0)
    mediastinum = np.exp(-(((x - 0.01) / 0.13) ** 4)) * expit((0.35 - y) * 10.0) * expit((y + 0.8) * 10.0)
    knob = _ellipse(x, y, -0.06, -0.30, 0.07, 0.05, 6.0)
    tissue = tissue + 0.20 * np.maximum(heart, mediastinum) + 0.05 * knob

    density = 0.30 - 0.14 * age01
    spine = np.exp(-np.square(x / 0.06)) * (np.abs(y) < 0.95)
    ax = np.abs(x)
    arc = y + 0.10 * ax - 0.55 * (ax - 0.08) ** 2
    ribs = ((0.5 + 0.5 * np.cos(2 * np.pi * arc / 0.2)) ** 3 * expit((ax - 0.08) * 40.0)
            * _ellipse(x, y, 0.0, -0.06, 0.72, 0.72, 10.0))
    clav_y = -0.56 - 0.22 * (ax - 0.08) + 0.25 * (ax - 0.35) ** 2
    clav = np.exp(-(((y - clav_y) / 0.035) ** 2)) * expit((ax - 0.06) * 40.0) * expit((0.62 - ax) * 30.0)
    tissue = tissue + density * (spine + 0.35 * ribs + 0.8 * clav)
    tissue = tissue + 0.015 * (col(race) - 1)

    np.multiply(body, tissue, out=out)
    contrast = u["contrast"]
    out += site.noise * (W @ np.asarray(u["texture"], F32) @ W.T) + site.offset
    np.clip(out, 0, 1, out=out)
    gain = col(site.gain * (1 + 0.05 * contrast[:, 0]))
    gamma = col(site.gamma * np.exp(0.05 * contrast[:, 1]))
    out *= gain
    np.clip(out, 0, 1, out=out)
    np.power(out, gamma, out=out)
    return out


def render_numpy(parents, noise, size, site, chunk: int, effusion_size: float) -> np.ndarray:
    """Images ``(M, size, size)`` of M units with parents ``{node: (M,)}`` and image noise
    (an ``ImageNoise`` of arrays with M rows), in chunks of ``chunk`` units."""
    m = len(parents["sex"])
    out = np.empty((m, size, size), F32)
    W = bilinear_matrix(noise.texture.shape[-1], size)
    p = [np.asarray(parents[v]) for v in ("sex", "age", "race", "lung", "effusion")]
    u = {f: np.asarray(a) for f, a in zip(noise._fields, noise)}
    for i in range(0, m, chunk):
        sl = slice(i, i + chunk)
        _render_chunk(*(a[sl] for a in p), {f: a[sl] for f, a in u.items()}, size, site, effusion_size, W, out[sl])
    return out


def numpy_counterfactuals(coef, records, sex_do, age_do, size, site, chunk, rng, effusion_size):
    """End to end in numpy: ``(K, N, size, size)``."""
    cfp = counterfactual_parents(coef, records["parents"], sex_do, age_do, rng)
    k, n = cfp["sex"].shape
    flat = {v: a.reshape(k * n) for v, a in cfp.items()}
    noise = type(records["noise"])(*(np.broadcast_to(a, (k,) + a.shape).reshape((k * n,) + a.shape[1:])
                                      for a in records["noise"]))
    return render_numpy(flat, noise, size, site, chunk, effusion_size).reshape(k, n, size, size)


# ---------------------------------------------------------------------------- benchmark
def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--units", type=int, default=1024, help="N test units (K = 16 images each)")
    ap.add_argument("--size", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--chunk", type=int, default=16, help="images per numpy chunk (16 was fastest here)")
    args = ap.parse_args(argv)
    start = time.perf_counter()
    print(conditions())
    chest = cf.data.ChestSCM(size=args.size)
    do, _ = cf.scm.intervention_grid({"sex": [0, 1], "age": np.linspace(20, 90, 8)})
    sex_do, age_do = np.asarray(do["sex"]), np.asarray(do["age"])
    k, n = len(sex_do), args.units
    rec = chest.sample(n, key=jax.random.key(2))
    rec_np = {"parents": {v: np.asarray(a) for v, a in rec["parents"].items()},
              "noise": type(rec["noise"])(*(np.asarray(a) for a in rec["noise"]))}
    key = jax.random.key(3)
    coef = parent_coefficients(chest)

    def cfjax_end_to_end():
        return chest.counterfactuals(rec, do, key=key, label="follows")["image"]

    first = first_time(cfjax_end_to_end)  # compilation included
    out = chest.counterfactuals(rec, do, key=key, label="follows")
    flat = {v: a.reshape(n * k) for v, a in out["parents"].items()}  # cfjax's (N, K), unit by unit
    noise = jax.tree.map(lambda a: jax.numpy.repeat(a, k, axis=0), rec["noise"])
    flat_np = {v: np.asarray(a) for v, a in flat.items()}
    noise_np = type(noise)(*(np.asarray(a) for a in noise))

    # Agreement: numpy's images from cfjax's counterfactual parents and noise; numpy's parents.
    ours = np.asarray(out["image"]).reshape(n * k, args.size, args.size)
    theirs = render_numpy(flat_np, noise_np, args.size, chest.site, args.chunk, chest.effusion_size)
    image_diff = float(np.abs(theirs - ours).max())
    if image_diff > 1e-4:
        raise SystemExit(f"the numpy renderer disagrees with cfjax's: max |diff| {image_diff:.1e}")
    cfp = counterfactual_parents(coef, rec_np["parents"], sex_do, age_do, np.random.default_rng(0))
    lung_diff = np.abs(cfp["lung"] - np.asarray(out["parents"]["lung"]).T).max()  # numpy's (K, N)
    eff_same = np.mean(cfp["effusion"] == np.asarray(out["parents"]["effusion"]).T)

    rng = np.random.default_rng(1)
    t_cf = median_time(cfjax_end_to_end, args.repeats, warmup=1)
    t_np = median_time(lambda: numpy_counterfactuals(coef, rec_np, sex_do, age_do, args.size, chest.site,
                                                     args.chunk, rng, chest.effusion_size), args.repeats, warmup=1)
    t_cf_r = median_time(lambda: chest.render(flat, noise), args.repeats, warmup=1)
    t_np_r = median_time(lambda: render_numpy(flat_np, noise_np, args.size, chest.site, args.chunk,
                                              chest.effusion_size),
                         args.repeats, warmup=1)
    images = k * n
    print(f"N = {n:,} units x K = {k} interventions (sex x 8 ages) = {images:,} counterfactual images of "
          f"{args.size}x{args.size}, float32; warm median of {args.repeats} runs; numpy in chunks of {args.chunk}")
    print(f"  {'':40s} {'time':>9s} {'images/s':>10s}   {'numpy ÷ cfjax':>13s}")
    rows = [("end to end: cfjax ChestSCM.counterfactuals", t_cf, None),
            ("end to end: cfjax first call (incl. compile)", first, None),
            ("end to end: numpy", t_np, (t_np / t_cf, t_np / first)),
            ("rendering alone: cfjax ChestSCM.render", t_cf_r, None),
            ("rendering alone: numpy", t_np_r, (t_np_r / t_cf_r, None))]
    for label, t, ratio in rows:
        extra = "" if ratio is None else f"   {ratio[0]:6.2f}x warm" + (
            "" if ratio[1] is None else f", {ratio[1]:.2f}x vs cfjax's first call")
        print(f"  {label:46s} {t:7.3f} s {images / t:10,.0f}{extra}")
    print(f"  agreement on the same parents and noise: max |numpy - cfjax| image {image_diff:.1e}; "
          f"parents: lung size max |diff| {lung_diff:.1e}, effusion equal in {eff_same:.1%} "
          f"(each side draws its own Gumbel posterior)")
    print(f"run time {time.perf_counter() - start:.0f} s")
    return {"images_per_s": images / t_cf, "images_per_s_first": images / first,
            "numpy_images_per_s": images / t_np, "render_images_per_s": images / t_cf_r,
            "numpy_render_images_per_s": images / t_np_r, "ratio": t_np / t_cf}


if __name__ == "__main__":
    main()
