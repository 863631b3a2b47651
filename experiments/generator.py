"""A learned deep-SCM image generator (conditional HVAE) measured against exact counterfactuals.

The synthetic chest SCM (:class:`cfjax.data.ChestSCM`) knows every counterfactual image
exactly. This experiment replaces its image mechanism (the renderer) by a conditional HVAE
(:class:`cfjax.generative.ImageHVAE`) trained on factual images, keeps the parent mechanisms
(``ChestSCM.params()``, the true ones), and compares the learned SCM's counterfactuals with the
exact ones under the same interventions and the same abducted parent noise:

- effectiveness (paper 000's appendix): anti-causal predictors ``q(pa | x)`` trained on
  factual images recover the intervened parent from the counterfactual image: sex accuracy
  under do(sex), age MAE under do(age), effusion accuracy under all; on learned and on exact
  counterfactuals (the latter is the ceiling the predictors allow);
- composition (L1 after 1 and 10 null interventions) and reversibility (L1 after do and undo)
  of the image mechanism;
- against the exact counterfactuals: pixel MAE, and agreement of a fixed classifier's
  decisions (the effusion head of the fully labelled anti-causal predictors, threshold 0.5);
- training: the ELBO plus, by default, paper 000's counterfactual regulariser (weight
  ``cf_weight``; ``--cf-weight 0`` for the plain ELBO) whose anti-causal predictors for sex and
  age are trained with a key of their own, so the predictors that measure effectiveness are
  not the ones the generator was trained against;
- the semi-supervised variant: 50% of the age labels hidden, imputed by anti-causal
  predictors trained on the labelled half (imputed discrete labels entropy-weighted), against
  the fully labelled model, both measured by the same fully labelled predictors.

Outputs in ``--out``: ``results.json`` (written atomically), ``report.md`` (the figures and the
training curves), ``grid.png`` (rows: test units; columns: the factual image, then learned
and exact counterfactuals side by side for each of a few interventions).

Run: ``python -m experiments.generator --out results/generator`` (64 × 64, the full run) or
``--quick`` (32 × 32, few steps: a smoke run of a few minutes whose figures mean little).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

import cfjax as cf
from cfjax.io import atomic_write_bytes, write_png
from cfjax.data.chest import PARENTS
from cfjax.generative import anticausal as ac
from cfjax.generative import parents as gp
from cfjax.generative import quality as q
from cfjax.generative import train as gt
from cfjax.generative.hvae import HVAEConfig
from cfjax.generative.mechanism import ImageHVAE

IMAGE_PARENTS = ["sex", "age", "race", "lung", "effusion"]
AGES = (30.0, 50.0, 70.0, 85.0)

# (image size, HVAE channels, latent dims, HVAE steps, batch, anti-causal steps, features, n_train,
# n_test, and the counterfactual regulariser's weight and warm-up)
SETTINGS = {
    "full": dict(size=64, channels=(8, 16, 32, 32), latent_dims=(0, 4, 4, 4), steps=2000, batch_size=32,
                 ac_steps=2000, ac_features=(16, 32, 64), n_train=4096, n_test=512, chunk=128,
                 cf_weight=0.2, cf_warmup=500, ema_decay=0.99),
    "quick": dict(size=32, channels=(8, 16, 16), latent_dims=(0, 4, 4), steps=150, batch_size=32,
                  ac_steps=200, ac_features=(8, 16, 32), n_train=1024, n_test=128, chunk=128,
                  cf_weight=0.2, cf_warmup=50, ema_decay=0.99),
}
#: the parents the counterfactual regulariser intervenes on (its own anti-causal predictors)
REGULARISED = ("sex", "age")


def image_graph() -> dict[str, list[str]]:
    """The chest SCM's graph with the image a child of every parent."""
    return {**PARENTS, "image": list(IMAGE_PARENTS)}


def learned_scm(chest: cf.data.ChestSCM, mechanism: ImageHVAE) -> cf.scm.SCM:
    """The chest SCM's parent mechanisms with ``mechanism`` as the image's."""
    base = chest.scm
    return cf.scm.SCM(image_graph(), {**{v: base.mechanism(v) for v in base.nodes}, "image": mechanism})


def interventions(parents: dict[str, Any]) -> tuple[list[dict[str, Any]], list[str]]:
    """do(sex := 1 − sex) for every unit, then do(age := a) for each of :data:`AGES`."""
    sex = np.asarray(parents["sex"])
    groups = [{"sex": (1 - sex)[:, None].astype(np.int32)}, {"age": np.asarray(AGES, np.float32)}]
    return groups, ["do(sex flip)"] + [f"do(age={a:g})" for a in AGES]


def _flat_inputs(scm: cf.scm.SCM, values: dict[str, Any]) -> jax.Array:
    """Encoded image-parent inputs ``(..., P)`` of parent values with any leading shape."""
    lead = np.shape(values[IMAGE_PARENTS[0]])
    flat = {v: np.asarray(values[v]).reshape(-1) for v in IMAGE_PARENTS}
    pa = gt.parent_inputs(scm, "image", flat)
    return pa.reshape(lead + pa.shape[-1:])


def fit_generator(key, train_rec, config, scm, mask=None, anticausal=None, regulariser=None, progress=None):
    data = {**{v: np.asarray(x) for v, x in train_rec["parents"].items()}, "image": np.asarray(train_rec["image"])}
    return gt.fit_generator(data, config, scm=scm, key=key, node="image", mask=mask, anticausal=anticausal,
                            regulariser=regulariser if config.cf_weight > 0 else None, progress=progress)


def train_regulariser(key, x_train, labels, st, mask=None):
    """The counterfactual regulariser's own anti-causal predictors (heads :data:`REGULARISED`,
    a key of their own: the predictors that *measure* effectiveness never see the generator's
    training), or None when the setting's ``cf_weight`` is 0."""
    if st["cf_weight"] == 0:
        return None
    heads = tuple(h for h in ac.CHEST_SPEC if h.name in REGULARISED)
    return ac.train_anticausal(x_train, {h.name: labels[h.name] for h in heads}, heads,
                               ac.AntiCausalConfig(steps=st["ac_steps"], features=st["ac_features"]), key=key,
                               mask=mask)


def learned_counterfactuals(scm, params, test_rec, groups, key, chunk):
    data = {**{v: np.asarray(x) for v, x in test_rec["parents"].items()}, "image": np.asarray(test_rec["image"])}
    return scm.counterfactual(params, data, groups, key=key, chunk_size=chunk)


def evaluate(fit, scm, params, test_rec, groups, exact, predictors, cf_key, key, chunk, n_sex):
    """Every quality figure of one trained generator (learned counterfactuals vs exact).
    ``cf_key`` is the key the exact counterfactuals were computed with: the learned SCM
    abducts the same parent noise from it (the same node order, the same per-unit keys)."""
    t0 = time.perf_counter()
    k_comp, k_rev = jax.random.split(key)
    learned = learned_counterfactuals(scm, params, test_rec, groups, cf_key, chunk)
    cf_time = time.perf_counter() - t0
    exact_parents = {v: np.asarray(x) for v, x in exact["parents"].items()}
    same_parents = all(np.array_equal(np.asarray(learned[v]), exact_parents[v]) for v in exact_parents)
    li, ei = np.asarray(learned["image"]), np.asarray(exact["image"])
    eff = {name: q.effectiveness(predictors, imgs, exact_parents, by_intervention=True, chunk=chunk)
           for name, imgs in (("learned", li), ("exact", ei))}

    def summary(e):
        return {"sex_accuracy": float(jnp.mean(e["sex_accuracy"][:n_sex])),
                "age_mae": float(jnp.mean(e["age_mae"][n_sex:])),
                "effusion_accuracy": float(jnp.mean(e["effusion_accuracy"])),
                "race_accuracy": float(jnp.mean(e["race_accuracy"]))}

    out = {k: {"learned": v} for k, v in summary(eff["learned"]).items()}
    for k, v in summary(eff["exact"]).items():
        out[k]["exact"] = v
        out[k]["relative_gap"] = (out[k]["learned"] - v) / abs(v) if v else float("nan")
    x = jnp.asarray(test_rec["image"])
    pa = _flat_inputs(scm, test_rec["parents"])
    comp = q.composition(fit.mechanism, params["image"], x, pa, n_times=10, key=k_comp, chunk=chunk)
    exact_null = chest_null(test_rec)
    out["composition_l1"] = {"learned": {"after_1": float(comp[0]), "after_10": float(comp[9])},
                             "exact": {"after_1": exact_null, "after_10": exact_null}}
    targets = _flat_inputs(scm, exact_parents)
    rev = q.reversibility(fit.mechanism, params["image"], x, pa, targets, key=k_rev, chunk=chunk)
    out["reversibility_l1"] = {"learned": float(jnp.mean(rev)), "exact": exact_null,
                               "learned_by_intervention": [float(v) for v in rev]}
    out["exact_pixel_mae"] = {"learned": float(q.pixel_mae(li, ei)), "exact": 0.0,
                              "by_intervention": [float(v) for v in q.pixel_mae(li, ei, by_intervention=True)]}
    x_host = np.asarray(test_rec["image"])[:, None]  # (N, 1, H, W) against (N, K, H, W)
    # how much an intervention changes the image at all (a mechanism that ignores its parents: 0)
    out["change_l1"] = {name: [float(v) for v in q.pixel_mae(imgs, np.broadcast_to(x_host, imgs.shape),
                                                             by_intervention=True)]
                        for name, imgs in (("learned", li), ("exact", ei))}
    p_learned = gp.predict_parents(predictors, li, chunk=chunk)["effusion"][..., 1]
    p_exact = gp.predict_parents(predictors, ei, chunk=chunk)["effusion"][..., 1]
    out["decision_agreement"] = {"learned": float(q.decision_agreement(p_learned, p_exact, 0.5)), "exact": 1.0,
                                 # agreement means little when the classifier decides the same everywhere
                                 "positive_rate": {"learned": float(jnp.mean(p_learned >= 0.5)),
                                                   "exact": float(jnp.mean(p_exact >= 0.5))}}
    out["effectiveness_by_intervention"] = {name: {k: np.asarray(v).tolist() for k, v in e.items()}
                                            for name, e in eff.items()}
    out["counterfactual_parents_equal_exact"] = bool(same_parents)
    out["counterfactual_seconds"] = cf_time
    return out, li


_CHEST = {}


def chest_null(test_rec) -> float:
    """L1 of the exact image mechanism's round trip: re-rendering each unit from its parents
    and its (known, exact) image noise, as every null intervention, do and undo does."""
    chest = _CHEST["chest"]
    again = chest.render(test_rec["parents"], test_rec["noise"])
    return float(q.pixel_mae(np.asarray(again), np.asarray(test_rec["image"])))


def _grid(path, factual, learned, exact, columns, rows=4):
    """Rows: units; columns: factual, then (learned, exact) per chosen intervention."""
    size = factual.shape[-1]
    gap = np.ones((size, 2))
    lines = []
    for i in range(min(rows, factual.shape[0])):
        cells = [factual[i], gap, gap]
        for k in columns:
            cells += [np.clip(learned[i, k], 0, 1), exact[i, k], gap, gap]
        lines.append(np.concatenate(cells, axis=1))
        lines.append(np.ones((2, lines[-1].shape[1])))
    grid = np.concatenate(lines[:-1], axis=0)
    scale = max(1, 64 // size)  # small images shown at least 64 pixels a side
    write_png(path, np.kron(grid, np.ones((scale, scale))))


def _curve_table(history, rows=10) -> list[str]:
    steps = len(history["loss"])
    marks = sorted({max(1, round(steps * (i + 1) / rows)) for i in range(rows)})
    lines = ["| steps | loss | rec (per pixel) | kl (per pixel) |", "|---:|---:|---:|---:|"]
    prev = 0
    for m in marks:
        sl = slice(prev, m)
        lines.append(f"| {prev + 1}–{m} | {np.nanmean(history['loss'][sl]):.4f} | "
                     f"{np.nanmean(history['rec'][sl]):.4f} | {np.nanmean(history['kl'][sl]):.4f} |")
        prev = m
    return lines


def _fmt(v) -> str:
    return "—" if v is None else f"{v:.4f}"


def _regulariser_line(st) -> str:
    if not st["cf_weight"]:
        return "Training objective: the plain ELBO (no counterfactual regulariser)."
    return (f"Training objective: the ELBO plus the counterfactual regulariser with weight {st['cf_weight']:g} "
            f"(nats per unit, warmed up over {st['cf_warmup']} steps): each step intervenes on one of "
            f"{', '.join(REGULARISED)} per unit and penalises anti-causal predictors' loss on the counterfactual "
            "image. Those predictors are the regulariser's own (another key); effectiveness is measured by "
            "independent ones, and the exact counterfactuals show whether the learned ones overshoot (pixel MAE "
            "against exact, and the mean change per intervention, learned vs exact).")


def write_report(path, res) -> None:
    lines = [f"# Learned vs exact counterfactuals ({res['settings']['size']}×{res['settings']['size']}, "
             f"{'quick' if res['quick'] else 'full'} run)", "",
             f"{res['conditions']}. HVAE {res['settings']['steps']} steps ({res['timing']['hvae_train_s']:.0f} s), "
             f"anti-causal predictors {res['settings']['ac_steps']} steps; {res['settings']['n_train']} training "
             f"units, {res['settings']['n_test']} test units, interventions: {', '.join(res['interventions'])}. "
             "Learned counterfactual parents equal the exact ones: "
             f"{res['main']['counterfactual_parents_equal_exact']}.", "",
             _regulariser_line(res["settings"]),
             "", "## Quality", "",
             "| measure | learned | exact | semi-supervised (50% of ages hidden) |", "|---|---:|---:|---:|"]
    m, s = res["main"], res.get("semi")
    rows = [("sex accuracy under do(sex)", "sex_accuracy"), ("age MAE under do(age) (years)", "age_mae"),
            ("effusion accuracy (all)", "effusion_accuracy"), ("race accuracy (all)", "race_accuracy")]
    for title, k in rows:
        lines.append(f"| {title} | {_fmt(m[k]['learned'])} | {_fmt(m[k]['exact'])} | "
                     f"{_fmt(s[k]['learned']) if s and k in s else '—'} |")
    for t in ("after_1", "after_10"):
        lines.append(f"| composition L1 {t.replace('_', ' ')} | {_fmt(m['composition_l1']['learned'][t])} | "
                     f"{_fmt(m['composition_l1']['exact'][t])} | "
                     f"{_fmt(s['composition_l1']['learned'][t]) if s else '—'} |")
    lines.append(f"| reversibility L1 | {_fmt(m['reversibility_l1']['learned'])} | "
                 f"{_fmt(m['reversibility_l1']['exact'])} | {_fmt(s['reversibility_l1']['learned']) if s else '—'} |")
    lines.append(f"| pixel MAE vs exact | {_fmt(m['exact_pixel_mae']['learned'])} | 0 | "
                 f"{_fmt(s['exact_pixel_mae']['learned']) if s else '—'} |")
    lines.append(f"| classifier decision agreement with exact | {_fmt(m['decision_agreement']['learned'])} | 1 | "
                 f"{_fmt(s['decision_agreement']['learned']) if s else '—'} |")
    rate = m["decision_agreement"]["positive_rate"]
    lines.append(f"| classifier positive rate (effusion ≥ 0.5) | {_fmt(rate['learned'])} | {_fmt(rate['exact'])} | "
                 f"{_fmt(s['decision_agreement']['positive_rate']['learned']) if s else '—'} |")
    ch = m["change_l1"]
    lines.append("| mean L1 change from the factual image, per intervention | "
                 + ", ".join(f"{v:.4f}" for v in ch["learned"]) + " | " + ", ".join(f"{v:.4f}" for v in ch["exact"])
                 + " | " + (", ".join(f"{v:.4f}" for v in s["change_l1"]["learned"]) if s else "—") + " |")
    lines += ["", "Effectiveness on exact counterfactuals is the ceiling the anti-causal predictors allow; "
              "relative gaps (learned − exact)/exact: "
              + ", ".join(f"{k} {m[k]['relative_gap']:+.1%}" for _, k in rows) + "."]
    if s:
        lines.append("Semi-supervised vs fully labelled (relative): "
                     + ", ".join(f"{k} {(s[k]['learned'] - m[k]['learned']) / abs(m[k]['learned']):+.1%}"
                                 for _, k in rows if m[k]['learned'] and k in s) + ".")
        if res.get("semi_note"):
            lines.append(res["semi_note"])
    lines += ["", "![learned beside exact counterfactuals](grid.png)", "",
              "Grid: each row a test unit; its factual image, then for " + ", ".join(res["grid_columns"])
              + " the learned (left) and exact (right) counterfactual.", "", "## Training curve (HVAE, fully labelled)",
              ""] + _curve_table(res["history"]["main"])
    if "semi" in res["history"]:
        lines += ["", "## Training curve (HVAE, semi-supervised)", ""] + _curve_table(res["history"]["semi"])
    atomic_write_bytes(path, ("\n".join(lines) + "\n").encode())


def log(t_start: float, what: str) -> None:
    print(f"[{time.perf_counter() - t_start:7.1f} s] {what}", flush=True)


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="results/generator")
    ap.add_argument("--quick", action="store_true", help="32×32, few steps: a smoke run")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--steps", type=int, help="HVAE steps (default: the setting's)")
    ap.add_argument("--ac-steps", type=int, help="anti-causal predictor steps (default: the setting's)")
    ap.add_argument("--n-train", type=int)
    ap.add_argument("--n-test", type=int)
    ap.add_argument("--temperature", type=float, default=1.0, help="posterior temperature of abduction")
    ap.add_argument("--cf-weight", type=float,
                    help="weight of the counterfactual regulariser (default: the setting's; 0: plain ELBO)")
    ap.add_argument("--no-semi", action="store_true", help="skip the semi-supervised variant")
    args = ap.parse_args(argv)
    cf.platform.use_compilation_cache()  # load what an earlier run compiled (CFJAX_CACHE_DIR=off: compile afresh)
    st = dict(SETTINGS["quick" if args.quick else "full"])
    for name in ("steps", "ac_steps", "n_train", "n_test", "cf_weight"):
        if getattr(args, name) is not None:
            st[name] = getattr(args, name)
    os.makedirs(args.out, exist_ok=True)
    timing: dict[str, float] = {}
    t_start = time.perf_counter()

    chest = cf.data.ChestSCM(size=st["size"])
    _CHEST["chest"] = chest
    keys = jax.random.split(jax.random.key(args.seed), 10)
    t0 = time.perf_counter()
    train_rec = chest.sample(st["n_train"], key=keys[0])
    test_rec = chest.sample(st["n_test"], key=keys[1])
    timing["data_s"] = time.perf_counter() - t0

    # anti-causal predictors q(pa | x), fully labelled: the measuring instrument
    spec = ac.CHEST_SPEC
    x_train = np.asarray(train_rec["image"])
    labels = {h.name: np.asarray(train_rec["parents"][h.name]) for h in spec}
    log(t_start, "anti-causal predictors (the measuring instrument)")
    t0 = time.perf_counter()
    predictors = ac.train_anticausal(x_train, labels, spec,
                                     ac.AntiCausalConfig(steps=st["ac_steps"], features=st["ac_features"]),
                                     key=keys[2])
    timing["anticausal_train_s"] = time.perf_counter() - t0

    hvae = HVAEConfig(image_size=st["size"], channels=st["channels"], latent_dims=st["latent_dims"])
    config = gt.GeneratorConfig(hvae=hvae, steps=st["steps"], batch_size=st["batch_size"],
                                warmup=min(100, st["steps"] // 10), kl_warmup=min(500, st["steps"] // 3),
                                temperature=args.temperature, ema_decay=st["ema_decay"],
                                cf_weight=st["cf_weight"], cf_warmup=min(st["cf_warmup"], st["steps"]))
    scm = learned_scm(chest, ImageHVAE(hvae, args.temperature))
    log(t_start, f"HVAE generator, {st['steps']} steps" + (" (and the regulariser's predictors)" if st["cf_weight"] else ""))
    t0 = time.perf_counter()
    regulariser = train_regulariser(keys[7], x_train, labels, st)
    timing["regulariser_train_s"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    fit = fit_generator(keys[3], train_rec, config, scm, regulariser=regulariser)
    timing["hvae_train_s"] = time.perf_counter() - t0
    scm = learned_scm(chest, fit.mechanism)
    params = {**chest.params(), "image": fit.params}

    groups, names = interventions(test_rec["parents"])
    n_sex = 1
    log(t_start, "counterfactuals and quality measures")
    t0 = time.perf_counter()
    exact = chest.counterfactuals(test_rec, groups, key=keys[4], label="follows")  # (N, K, ...)
    timing["exact_counterfactuals_s"] = time.perf_counter() - t0
    main_res, learned_images = evaluate(fit, scm, params, test_rec, groups, exact, predictors, keys[4],
                                        keys[6], st["chunk"], n_sex)
    history = {"main": {k: np.asarray(v) for k, v in fit.history.items()}}

    columns = [0, 1, len(names) - 1]
    _grid(os.path.join(args.out, "grid.png"), np.asarray(test_rec["image"]), learned_images,
          np.asarray(exact["image"]), columns)

    def write_outputs(semi):
        """results.json and report.md (atomic) of what has been measured so far."""
        timing["total_s"] = time.perf_counter() - t_start
        conditions = (f"{os.cpu_count()} CPU cores ({platform.machine()}), jax {jax.__version__} on "
                      f"{jax.default_backend()}, seed {args.seed}")
        res: dict[str, Any] = {
            "quick": bool(args.quick), "seed": args.seed, "conditions": conditions,
            "settings": {k: list(v) if isinstance(v, tuple) else v for k, v in st.items()},
            "temperature": args.temperature, "interventions": names, "grid_columns": [names[k] for k in columns],
            "main": main_res, "semi": semi, "timing": timing,
            # the headline figures, flat
            "sex_accuracy": main_res["sex_accuracy"], "age_mae": main_res["age_mae"],
            "effusion_accuracy": main_res["effusion_accuracy"], "composition_l1": main_res["composition_l1"],
            "reversibility_l1": main_res["reversibility_l1"], "exact_pixel_mae": main_res["exact_pixel_mae"],
            "decision_agreement": main_res["decision_agreement"],
        }
        res["history"] = history
        write_report(os.path.join(args.out, "report.md"), res)
        res["history"] = {name: {k: v.tolist() for k, v in h.items()} for name, h in history.items()}
        atomic_write_bytes(os.path.join(args.out, "results.json"), json.dumps(res, indent=1).encode())
        return res

    # the fully labelled results first: a failure in the variant keeps them
    res = write_outputs(None)
    semi = None
    if not args.no_semi:
        log(t_start, "semi-supervised variant (50% of ages hidden)")
        rng = np.random.default_rng(args.seed)
        seen = rng.uniform(size=st["n_train"]) < 0.5
        t0 = time.perf_counter()
        ac_semi = ac.train_anticausal(x_train, labels, spec,
                                      ac.AntiCausalConfig(steps=st["ac_steps"], features=st["ac_features"]),
                                      key=keys[5], mask={"age": seen})
        ages = np.where(seen, labels["age"], np.nan).astype(np.float32)
        semi_rec = {"parents": {**train_rec["parents"], "age": ages}, "image": train_rec["image"]}
        reg_semi = train_regulariser(keys[8], x_train, labels, st, mask={"age": seen})
        fit_semi = fit_generator(keys[3], semi_rec, config, learned_scm(chest, ImageHVAE(hvae, args.temperature)),
                                 mask={"age": seen}, anticausal=ac_semi, regulariser=reg_semi)
        timing["semi_train_s"] = time.perf_counter() - t0
        scm_semi = learned_scm(chest, fit_semi.mechanism)
        semi, _ = evaluate(fit_semi, scm_semi, {**chest.params(), "image": fit_semi.params}, test_rec, groups,
                           exact, predictors, keys[4], keys[6], st["chunk"], n_sex)
        history["semi"] = {k: np.asarray(v) for k, v in fit_semi.history.items()}
        res = write_outputs(semi)
    print(f"wrote {args.out}/results.json, report.md, grid.png in {timing['total_s']:.0f} s: "
          f"sex accuracy {main_res['sex_accuracy']['learned']:.3f} (exact {main_res['sex_accuracy']['exact']:.3f}), "
          f"age MAE {main_res['age_mae']['learned']:.2f} (exact {main_res['age_mae']['exact']:.2f}), "
          f"composition L1 {main_res['composition_l1']['learned']['after_1']:.4f}, "
          f"pixel MAE {main_res['exact_pixel_mae']['learned']:.4f}")
    return res


if __name__ == "__main__":
    main()
