"""Counterfactual training against a sex shortcut: the study's training arm.

Paper 000 *measures* a classifier's shortcut with counterfactuals; this arm trains it away with
the same counterfactuals and measures whether that worked. On site A of the synthetic chest
SCM, the sex-biased training sets of paper 000 (:func:`cfjax.study.splits.biased_training_mask`,
α = 0.8, 0.9, 0.95: male-with-effusion and female-healthy units dropped with probability α)
train, per α and seed, one vmapped ensemble (:func:`cfjax.predictors.train`) of:

- ``basic``: the factual risk (paper 000's biased predictor);
- the counterfactual objectives of :class:`ArmConfig` (by default counterfactual augmentation,
  the logit-variance stability penalty at three strengths and the counterfactual-marginalised
  risk), their K = 16 counterfactuals (do(sex, age), paper 000's grid, q uniform, effusion held)
  rendered exactly inside each training step (:meth:`cfjax.data.ChestSCM.counterfactual_source`)
  and, with a generator, those of ``learned_objectives`` again with counterfactuals decoded by a
  learned HVAE image mechanism trained on the site's full training pool
  (:func:`cfjax.generative.decoded_counterfactuals`: abducted once, decoded in the step; the
  generator sees the unbiased pool, which a practitioner with only the biased set would not
  have);
- two baselines a practitioner tries first: ``reweight`` (the basic objective on the biased set
  with each unit weighted ``P(s) P(y) / P(s, y)``, so that sex and the label are independent in
  the weighted set) and ``group_dro`` (online group DRO over sex × label);
- and ``unbiased``: the basic objective on the whole (unbiased) training pool, the reference a
  shortcut-free classifier reaches.

Every member is scored on the balanced test split of site A (AUC, ΔAUC over sex, the
counterfactual sex effect ``mean_i [mean_{k: do(F)} p_ik − mean_{k: do(M)} p_ik]`` with the
exact counterfactuals, R_CM and s_flip) and on a natural-demographics test set of site B (AUC),
each with a percentile bootstrap interval over test units and seeds.

The arm's report (its metrics' labels, the findings, ``report.md``, the section of
``cfjax demo``'s report and the figure) is in :mod:`cfjax.study.cftraining_report`.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

import cfjax as cf
from cfjax import _checks
from cfjax import metrics as cm
from cfjax import predictors as cp
from cfjax._core.keys import seed_of
from cfjax._results import plain
from cfjax.generative import decoded_counterfactuals
from cfjax.generative.parents import parent_inputs
from cfjax.generative.train import GeneratorFit
from cfjax.io import atomic_write_bytes
from cfjax.predictors import Objective
from cfjax.study import learned as ls
from cfjax.study import splits
from cfjax.study.cftraining_report import METRICS, _figure, arm_report, findings
from cfjax.study.config import QUICK, Config
from cfjax.study.evaluation import _every_device
from cfjax.study.families import BIAS_STRENGTHS
from cfjax.study.paper import SITE_A, SITE_B
from cfjax.typing import ArrayLike, KeyLike, PyTree

__all__ = [
    "ArmConfig",
    "ARM_QUICK",
    "ARM_FULL",
    "run_arm",
    "independence_weights",
    "arm_members",
]

#: the counterfactual objectives trained by default: augmentation, the stability penalty at three strengths, CF risk
DEFAULT_OBJECTIVES = (
    Objective("augment"),
    Objective("variance", 0.3),
    Objective("variance", 1.0),
    Objective("variance", 3.0),
    Objective("cf_risk"),
)


@dataclasses.dataclass(frozen=True)
class ArmConfig:
    """One run of the training arm.

    Attributes:
      study: sizes and optimisation (:class:`cfjax.study.Config`: image size, units, the CNN,
        its :class:`~cfjax.predictors.EnsembleConfig`, bootstrap resamples, effusion size).
      biases: the sex-bias strengths α of the training sets.
      objectives: the counterfactual objectives (:class:`cfjax.predictors.Objective`).
      learned_objectives: those trained with learned counterfactuals too (with a generator). A
        learned counterfactual costs an HVAE decode inside the step, about 30 times the
        classifier's step per counterfactual at 32 × 32 (``make bench``: bench_cf_training), so
        by default only augmentation (one per unit) and one penalty strength.
      baselines: train the reweighting and group DRO baselines.
      dro_step: group DRO's step size η.
      seeds: member seeds (each predictor once per seed).
      generator: train an HVAE image generator on the training pool and train the
        counterfactual objectives with its learned counterfactuals too (None: exact only).
    """

    study: Config = QUICK
    biases: tuple[float, ...] = BIAS_STRENGTHS
    objectives: tuple[Objective, ...] = DEFAULT_OBJECTIVES
    learned_objectives: tuple[Objective, ...] = (Objective("augment"), Objective("variance", 1.0))
    baselines: bool = True
    dro_step: float = 0.01
    seeds: tuple[int, ...] = (0, 1, 2)
    generator: ls.SiteGeneratorConfig | None = None

    def __post_init__(self):
        if not isinstance(self.study, Config):
            _checks.fail("study", "a cfjax.study.Config", repr(self.study))
        if not self.biases or any(not 0 < float(a) < 1 for a in self.biases):
            _checks.fail("biases", "bias strengths in (0, 1)", repr(self.biases))
        for field in ("objectives", "learned_objectives"):
            objectives = tuple(
                o if isinstance(o, Objective) else Objective(o) for o in getattr(self, field)
            )
            if any(not o.needs_counterfactuals for o in objectives):
                _checks.fail(
                    field,
                    "counterfactual objectives (augment, cf_risk, cvar, or a penalty > 0)",
                    repr([o for o in objectives if not o.needs_counterfactuals]),
                )
            object.__setattr__(self, field, objectives)
        if len(self.seeds) < 1 or len(set(self.seeds)) != len(self.seeds):
            _checks.fail("seeds", "distinct seeds", repr(self.seeds))
        if self.generator is not None and not isinstance(self.generator, ls.SiteGeneratorConfig):
            _checks.fail(
                "generator", "None or a cfjax.study.SiteGeneratorConfig", repr(self.generator)
            )


#: a quick arm: paper 000's quick study sizes, three bias strengths, two seeds, exact counterfactuals
ARM_QUICK = ArmConfig(seeds=(0, 1))
#: with learned counterfactuals as well, three seeds
ARM_FULL = ArmConfig(seeds=(0, 1, 2), generator=ls.GENERATOR_QUICK)
#: a tiny arm that checks the pipeline (``cfjax train --quick``): nothing it trains is meaningful
ARM_TINY = ArmConfig(
    study=Config(
        size=32,
        n_train=400,
        n_val=120,
        test_per_cell=8,
        n_natural=48,
        features=(4, 8),
        predictor=cp.EnsembleConfig(
            steps=40,
            batch_size=16,
            learning_rate=2e-3,
            weight_decay=1e-4,
            eval_every=20,
            patience=2,
            warmup=4,
        ),
        bootstrap=20,
        effusion_size=0.4,
        chunk=256,
    ),
    biases=(0.95,),
    objectives=(Objective("augment"), Objective("variance", 1.0), Objective("cf_risk")),
    seeds=(0, 1),
)
#: the tiny arm's generator
GENERATOR_TINY = ls.SiteGeneratorConfig(
    ls.gt.GeneratorConfig(
        hvae=ls.HVAEConfig(image_size=32, channels=(4, 4, 4), latent_dims=(0, 2, 2)),
        steps=20,
        warmup=2,
        kl_warmup=5,
        ema_decay=0.9,
        chunk_steps=10,
        cf_weight=0.0,
        cf_warmup=500,
    ),
    chunk=64,
)


def objective_label(o: Objective) -> str:
    """A member's method name: ``augment``, ``variance 1``, ``cvar 0.5``, ``flip 0.3``, ..."""
    if o.name in ("variance", "flip", "group_dro"):
        return f"{o.name} {o.strength:g}"
    if o.name == "cvar":
        return f"cvar {o.alpha:g}"
    return o.name


def independence_weights(sex: ArrayLike, y: ArrayLike, mask: ArrayLike) -> np.ndarray:
    """Weights ``P(s) P(y) / P(s, y)`` of the units kept by ``mask`` (0 elsewhere), the
    probabilities those of the kept units: in the weighted set sex and the label are independent
    and each has its kept marginal. A cell with no unit gets none.

    Example:
      >>> w = independence_weights([0, 0, 0, 1], [1, 1, 0, 0], [True] * 4)
      >>> [round(float(v), 3) for v in w]
      [0.75, 0.75, 1.5, 0.5]
    """
    s, yy, m = np.asarray(sex).astype(int), np.asarray(y).astype(int), np.asarray(mask).astype(bool)
    n = m.sum()
    joint = (
        np.array([[np.sum(m & (s == a) & (yy == b)) for b in (0, 1)] for a in (0, 1)], np.float64)
        / n
    )
    ps, py = joint.sum(axis=1), joint.sum(axis=0)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(joint > 0, np.outer(ps, py) / joint, 0.0)
    return np.where(m, ratio[s, yy], 0.0)


def arm_members(
    config: ArmConfig,
    sex: ArrayLike,
    age: ArrayLike,
    y: ArrayLike,
    *,
    key: KeyLike,
    learned: bool = False,
) -> dict[str, Any]:
    """The members of one ensemble of the arm over a training pool: ``{"methods": (M,) names,
    "bias": (M,) α (0: unbiased), "seeds", "objectives", "weights": (M, N)}``, method-major then
    seed. ``learned=True``: the counterfactual objectives only (trained with learned
    counterfactuals)."""
    n = len(np.asarray(y))
    methods, bias, seeds, objectives, weights = [], [], [], [], []

    def add(method, alpha, objective, w):
        for s in config.seeds:
            (
                methods.append(method),
                bias.append(alpha),
                seeds.append(int(s)),
                objectives.append(objective),
            )
            weights.append(w)

    if not learned:
        add("unbiased", 0.0, Objective(), np.ones(n))
    for alpha in config.biases:
        mask = np.asarray(
            splits.biased_training_mask("sex", float(alpha), sex, age, y, key=key), np.float64
        )
        if not learned:
            add("basic", alpha, Objective(), mask)
            if config.baselines:
                add("reweight", alpha, Objective(), independence_weights(sex, y, mask))
                add(
                    f"group_dro {config.dro_step:g}",
                    alpha,
                    Objective("group_dro", config.dro_step),
                    mask,
                )
        for o in config.learned_objectives if learned else config.objectives:
            add(objective_label(o), alpha, o, mask)
    return {
        "methods": methods,
        "bias": np.asarray(bias),
        "seeds": np.asarray(seeds),
        "objectives": objectives,
        "weights": np.stack(weights),
    }


def _member_metrics(
    p_obs: jax.Array,
    p_cf: jax.Array,
    y: jax.Array,
    sex: jax.Array,
    sex_k: jax.Array,
    q: jax.Array,
    p_b: jax.Array,
    y_b: jax.Array,
) -> jax.Array:
    """The :data:`~cfjax.study.cftraining_report.METRICS` of one member on one (resampled) test
    set, ``(6,)``."""
    strat = cm.stratified_auc(p_obs, y, sex, num_groups=2)
    female = jnp.where(sex_k == 1, 1.0, 0.0)
    effect = jnp.mean(p_cf @ (female / female.sum()) - p_cf @ ((1 - female) / (1 - female).sum()))
    return jnp.stack(
        [
            cm.auc(p_obs, y),
            cm.auc(p_b, y_b),
            jnp.abs(strat[1] - strat[0]),
            effect,
            cm.marginal_risk(p_cf, y, q),
            cm.flip_rate(p_obs, p_cf, q),
        ]
    )


@jax.jit
def _bootstrap_metrics(p_obs, p_cf, y, sex, sex_k, q, p_b, y_b, idx_a, idx_b):
    """``(R + 1, M, 6)``: every member's metrics on the full test sets (row 0) and on each
    resample of units (rows 1..R; ``idx_a (R, N)``, ``idx_b (R, N_B)``)."""
    per_member = jax.vmap(_member_metrics, in_axes=(0, 0, None, None, None, None, 0, None))
    full = per_member(p_obs, p_cf, y, sex, sex_k, q, p_b, y_b)

    def one(ix):
        ia, ib = ix
        return per_member(p_obs[:, ia], p_cf[:, ia], y[ia], sex[ia], sex_k, q, p_b[:, ib], y_b[ib])

    reps = jax.lax.map(one, (idx_a, idx_b), batch_size=16)
    return jnp.concatenate([full[None], reps])


def _summaries(
    values: np.ndarray,
    rows: dict[tuple[str, float], list[int]],
    n_seeds: int,
    key: jax.Array,
    level: float = 0.95,
) -> dict[tuple[str, float], dict[str, Any]]:
    """Per (method, α): the seed mean of each metric and its percentile interval, each bootstrap
    resample of units paired with a resample of the seeds (with replacement)."""
    resamples = values.shape[0] - 1
    draws = np.asarray(
        jax.random.randint(key, (resamples, n_seeds), 0, n_seeds)
    )  # seeds of each resample
    lo, hi = 100 * (1 - level) / 2, 100 * (1 + level) / 2
    out = {}
    for row, member_list in rows.items():
        members = np.asarray(member_list)
        point = values[0, members].mean(axis=0)  # (6,)
        boot = values[1 + np.arange(resamples)[:, None], members[draws]].mean(axis=1)  # (R, 6)
        out[row] = {
            name: {
                "mean": float(point[j]),
                "ci95": [
                    float(np.nanpercentile(boot[:, j], lo)),
                    float(np.nanpercentile(boot[:, j], hi)),
                ],
                "per_seed": values[0, members, j].tolist(),
            }
            for j, (name, _, _) in enumerate(METRICS)
        }
    return out


def run_arm(
    config: ArmConfig,
    out: str,
    *,
    key: KeyLike = 0,
    generator_fit: GeneratorFit | None = None,
    progress: bool | None = None,
    log: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Train and score the arm; writes ``report.md``, ``results.json`` and ``sex_effect.png``
    (and its PDF) under ``out`` and returns the results.

    ``key`` (a PRNG key, raw key data or an int seed ``s``) sets the data (site A's datasets
    ``key=2 s``: with the same :class:`cfjax.study.Config`, the training pool of
    :func:`cfjax.study.run`'s site A), the corruption and every other key. ``generator_fit``
    (a :class:`cfjax.generative.train.GeneratorFit` of an image mechanism trained on that pool, e.g.
    ``cfjax.study.run(...).learned_source.fits[SITE_A]``) is used for the learned
    counterfactuals instead of training one (``config.generator`` is then not needed).
    """
    if not isinstance(config, ArmConfig):
        _checks.fail("config", "a cfjax.study.ArmConfig", repr(config))
    seed = seed_of(key, "key")
    log = log or (lambda message: print(message, flush=True))
    t_start = time.perf_counter()
    os.makedirs(out, exist_ok=True)
    sc = config.study
    chest = cf.data.ChestSCM(
        prevalence=sc.prevalence, size=sc.size, site=SITE_A, effusion_size=sc.effusion_size
    )
    chest_b = cf.data.ChestSCM(
        prevalence=sc.prevalence, size=sc.size, site=SITE_B, effusion_size=sc.effusion_size
    )
    data = splits.datasets(
        chest,
        key=2 * seed,
        n_train=sc.n_train,
        n_val=sc.n_val,
        test_per_cell=sc.test_per_cell,
        test_prevalence=sc.test_prevalence,
    )
    natural = chest_b.sample(sc.n_natural, key=100 + 10_000 * seed)
    train, val, test = data["train"], data["validation"], data["test"]
    p = train["parents"]
    k_bias, k_cf, k_test, k_boot, k_gen = jax.random.split(jax.random.key(7000 + seed), 5)
    ages = np.linspace(20.0, 90.0, 8).tolist()
    do, q = cf.scm.intervention_grid({"sex": [0, 1], "age": ages})[:2]
    model = cp.EffusionCNN(features=tuple(sc.features))
    y_train = np.asarray(p["effusion"])
    groups = 2 * np.asarray(p["sex"]).astype(np.int32) + y_train.astype(np.int32)  # sex × label
    exact = chest.counterfactual_source(train, do, key=k_cf, label="fixed", weights=q)
    sources: dict[str, PyTree] = {"exact": exact}  # counterfactual sources
    generator_info = None
    if config.generator is not None or generator_fit is not None:
        t0 = time.perf_counter()
        if generator_fit is None:
            assert config.generator is not None  # the branch's condition
            log(f"arm: HVAE image generator on the {len(y_train)} training images")
            fit = ls.fit_site_generator(
                chest,
                train,
                config.generator,
                key=k_gen,
                progress=progress,
                checkpoint_dir=os.path.abspath(os.path.join(out, "checkpoints", "generator")),
            )
        else:
            fit = generator_fit
        scm = ls.learned_scm(chest, fit.mechanism)
        n, k = exact.parents["sex"].shape
        pa = parent_inputs(scm, "image", train["parents"])
        pa_cf = parent_inputs(
            scm, "image", {v: x.reshape(n * k) for v, x in exact.parents.items()}
        ).reshape(n, k, -1)
        sources["learned"] = decoded_counterfactuals(
            fit.mechanism,
            fit.params,
            jnp.asarray(train["image"]),
            pa,
            pa_cf,
            key=jax.random.fold_in(k_cf, 1),
            weights=q,
        )
        generator_info = {
            "seconds": time.perf_counter() - t0,
            "final_loss": float(np.nanmean(fit.history["loss"][-10:])),
        }

    # the test sets: site A's balanced split with its exact counterfactuals, site B's natural set
    y_test = np.asarray(test["parents"]["effusion"]).astype(np.int32)
    sex_test = np.asarray(test["parents"]["sex"]).astype(np.int32)
    test_cf = chest.counterfactuals(test, do, key=k_test, label="fixed")["image"]  # (N, K, H, W)
    test_images = jnp.concatenate(
        [jnp.asarray(test["image"])[:, None], test_cf], axis=1
    )  # (N, 1 + K, H, W)
    y_b = np.asarray(natural["parents"]["effusion"]).astype(np.int32)

    results: dict[str, Any] = {"rows": {}, "training": {}}
    all_values: list[np.ndarray] = []
    all_rows: dict[tuple[str, float], list[int]] = {}
    n_a, n_b = len(y_test), len(y_b)
    idx_a = cm.bootstrap_indices(n_a, sc.bootstrap, key=k_boot)
    idx_b = cm.bootstrap_indices(n_b, sc.bootstrap, key=jax.random.fold_in(k_boot, 1))
    offset = 0
    for source_name, source in sources.items():
        mem = arm_members(
            config, p["sex"], p["age"], y_train, key=k_bias, learned=source_name != "exact"
        )
        m = len(mem["methods"])
        counts: dict[str, int] = {}
        for o in mem["objectives"]:
            counts[o.kind.name] = counts.get(o.kind.name, 0) + 1
        log(
            f"arm ({source_name} counterfactuals): training {m} members as one ensemble on up to {len(y_train)} "
            f"images; objectives " + ", ".join(f"{name} x{c}" for name, c in counts.items())
        )
        t0 = time.perf_counter()
        names = [f"{a} α={b:g}" for a, b in zip(mem["methods"], mem["bias"])]
        state = cp.train(
            model,
            train["image"],
            y_train,
            mem["weights"],
            val["image"],
            val["parents"]["effusion"],
            sc.predictor,
            seeds=mem["seeds"],
            objectives=cp.MemberObjectives(
                mem["objectives"], counterfactuals=source, groups=groups
            ),
            options=cp.TrainOptions(progress=progress, names=names),
            mesh=_every_device(),
        )
        seconds = time.perf_counter() - t0
        log(f"  trained in {seconds:.0f} s ({int(state.step)} steps)")
        logits = cp.predict(
            model, state.best_params, test_images, logits=True, chunk=sc.chunk, mesh=_every_device()
        )  # (M, N, 1 + K)
        probs = jax.nn.sigmoid(logits)
        p_b = cp.predict(
            model,
            state.best_params,
            jnp.asarray(natural["image"]),
            chunk=sc.chunk,
            mesh=_every_device(),
        )  # (M, N_B)
        values = np.asarray(
            _bootstrap_metrics(
                probs[..., 0],
                probs[..., 1:],
                jnp.asarray(y_test),
                jnp.asarray(sex_test),
                jnp.asarray(do["sex"]),
                jnp.asarray(q),
                p_b,
                jnp.asarray(y_b),
                idx_a,
                idx_b,
            ),
            np.float64,
        )
        all_values.append(values)
        for i, (method, alpha) in enumerate(zip(mem["methods"], mem["bias"])):
            label = (
                method
                if source_name == "exact" or method in ("basic", "unbiased")
                else f"{method} (learned)"
            )
            all_rows.setdefault((label, float(alpha)), []).append(offset + i)
        offset += m
        results["training"][source_name] = {
            "members": m,
            "steps": int(state.step),
            "seconds": seconds,
            "best_val_auc": np.asarray(state.best_auc, np.float64).tolist(),
        }
    values = np.concatenate(all_values, axis=1)
    summary = _summaries(values, all_rows, len(config.seeds), jax.random.fold_in(k_boot, 2))
    results["rows"] = [{"method": meth, "bias": alpha, **v} for (meth, alpha), v in summary.items()]
    results.update(
        {
            "config": dataclasses.asdict(config),
            "seed": seed,
            "n_test_a": n_a,
            "n_test_b": n_b,
            "k": int(len(q)),
            "generator": generator_info,
            "wall_time_s": time.perf_counter() - t_start,
        }
    )
    results["findings"] = findings(results)
    _figure(results, os.path.join(out, "sex_effect.png"))
    text = json.dumps(plain(results, strict=True, shortest=True), indent=1)
    atomic_write_bytes(os.path.join(out, "results.json"), text.encode())
    atomic_write_bytes(os.path.join(out, "report.md"), arm_report(results).encode())
    log(f"arm: wrote {out}/report.md and results.json ({results['wall_time_s']:.0f} s)")
    return results
