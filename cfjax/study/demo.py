"""``cfjax demo``: the three pillars at a small scale on built-in synthetic data.

1. Counterfactual marginalisation (paper 000) with :func:`cfjax.study.run`: CNN effusion
   classifiers trained on the synthetic chest radiographs (the ten predictors, two seeds each,
   one vmapped ensemble per site), K = 16 exact counterfactual images per test unit, then the
   same tables with learned counterfactuals from an HVAE generator trained per site.
2. Sensitivity of counterfactual fairness to unmeasured confounding (paper 001) on
   :func:`cfjax.sensitivity.synthetic`, whose true error correlation is known: the worst-case
   CFU curve over budgets, the CFU at the true correlation, and the smallest budget whose worst
   case reaches the blind baseline's unfairness.
3. Counterfactual representations (paper 002) on synthetic embeddings with true
   counterfactuals, from a balanced and an aggressively biased split.
4. Counterfactual training (:mod:`cfjax.study.cftraining`): on the study's site A, a
   sex-biased training set (α = 0.95), counterfactual objectives trained with the exact and the
   learned counterfactuals (the study's site-A generator) rendered inside the training step,
   against the basic classifier, reweighting, group DRO and an unbiased reference.

:func:`run_demo` writes ``report.md`` (tables and figures, :mod:`cfjax.study.demo_report`),
``results.json`` (every number; the same seed gives byte-identical JSON on the same machine: run
times and checkpoint reuse are left out), ``run_times.json`` (the stages' wall times, the CPUs,
the date, the load average and whether trained checkpoints were reused) and PNG figures into
``out``; the full study report is in ``marginalisation/``. :data:`DEMO` and :data:`QUICK` are its
two scales.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
import warnings
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from cfjax import study
from cfjax._core.keys import as_key, seed_of
from cfjax._results import plain
from cfjax.data import ChestSCM
from cfjax.generative import GeneratorConfig
from cfjax.generative.hvae import HVAEConfig
from cfjax.io import atomic_write_bytes
from cfjax.predictors import EnsembleConfig, Objective
from cfjax.study import cftraining
from cfjax.study.config import Config
from cfjax.study.demo_report import report_markdown, search_notes
from cfjax.study.evaluation import CounterfactualSource
from cfjax.study.learned import SiteGeneratorConfig
from cfjax.study.result import StudyResult
from cfjax.typing import KeyLike

__all__ = ["Scale", "DEMO", "QUICK", "run_demo", "image_grid"]


@dataclasses.dataclass(frozen=True)
class Scale:
    """The sizes of one demo run: the study's configuration and generator, and the sensitivity,
    representation and training problems.

    Attributes:
      study: the study's sizes (:class:`cfjax.study.Config`).
      generator: the learned image generator per site (:class:`cfjax.study.SiteGeneratorConfig`).
      seeds: seeds per trained predictor.
      sensitivity_n: units of the synthetic sensitivity problem.
      budgets: budgets of the worst-case curve (0.5, the true correlation, is added).
      restarts, search_steps: the worst-case search's restarts and steps (None: its defaults,
        restarts until two agree to 1e-3).
      inverse_tol: the inverse question's tolerance on the budget.
      sensitivity_resamples: bootstrap resamples of the sensitivity problem.
      embeddings_n, embeddings_d: the synthetic embeddings' units and dimension.
      draws: stochastic CFR draws per unit.
      arm: the counterfactual-training arm (:class:`cfjax.study.ArmConfig`; its study sizes are
        the scale's).
      arm_steps: the arm's training steps and steps between evaluations (None: the study's).
    """

    study: Config
    generator: SiteGeneratorConfig
    seeds: int = 2
    sensitivity_n: int = 1000
    budgets: int = 6
    restarts: int | None = None
    search_steps: int | None = None
    inverse_tol: float = 0.01
    sensitivity_resamples: int = 100
    embeddings_n: int = 4000
    embeddings_d: int = 32
    draws: int = 16
    arm: cftraining.ArmConfig | None = None
    arm_steps: tuple[int, int] | None = None


# the arm's study sizes are the scale's (its training pool is the study's site A)
_ARM = cftraining.ArmConfig(
    biases=(0.95,),
    seeds=(0, 1),
    baselines=True,
    objectives=(Objective("augment"), Objective("variance", 1.0)),
    learned_objectives=(Objective("augment"),),
)

#: ``cfjax demo``'s scale: every section at a size a CPU runs end to end
DEMO = Scale(
    study=study.Config(
        size=32,
        n_train=1500,
        n_val=300,
        test_per_cell=20,
        n_natural=120,
        features=(8, 16, 32),
        predictor=EnsembleConfig(
            steps=600,
            learning_rate=5e-3,
            batch_size=32,
            weight_decay=1e-4,
            eval_every=100,
            patience=2,
            warmup=30,
        ),
        bootstrap=50,
        prop1_resamples=200,
        effusion_size=0.4,
    ),
    generator=study.SiteGeneratorConfig(
        GeneratorConfig(
            hvae=HVAEConfig(image_size=32, channels=(8, 16, 16), latent_dims=(0, 4, 4)),
            steps=200,
            warmup=20,
            kl_warmup=60,
            ema_decay=0.98,
            chunk_steps=100,
            cf_weight=0.0,
            cf_warmup=500,
        ),
        chunk=120,
    ),
    arm=_ARM,
    arm_steps=(300, 50),
)
#: ``cfjax demo --quick``'s scale: a tiny one that checks the pipeline
QUICK = Scale(
    study=study.Config(
        size=32,
        n_train=400,
        n_val=120,
        test_per_cell=8,
        n_natural=48,
        features=(4, 8),
        predictor=EnsembleConfig(
            steps=40,
            batch_size=16,
            learning_rate=2e-3,
            weight_decay=1e-4,
            eval_every=20,
            patience=2,
            warmup=4,
        ),
        bootstrap=20,
        prop1_resamples=50,
        effusion_size=0.4,
        chunk=256,
    ),
    generator=study.SiteGeneratorConfig(
        GeneratorConfig(
            hvae=HVAEConfig(image_size=32, channels=(4, 4, 4), latent_dims=(0, 2, 2)),
            steps=20,
            warmup=2,
            kl_warmup=5,
            ema_decay=0.9,
            chunk_steps=10,
            cf_weight=0.0,
            cf_warmup=500,
        ),
        chunk=64,
    ),
    sensitivity_n=600,
    budgets=4,
    sensitivity_resamples=10,
    inverse_tol=0.3,
    embeddings_n=1000,
    embeddings_d=16,
    draws=4,
    arm=_ARM,
)

#: results.json keys left out: run times and checkpoint reuse vary between identical runs
_VOLATILE = ("seconds", "wall_time_s", "resumed_from_checkpoint", "devices")


def _stable(x: Any) -> Any:
    if isinstance(x, dict):
        return {k: _stable(v) for k, v in x.items() if k not in _VOLATILE}
    if isinstance(x, list):
        return [_stable(v) for v in x]
    return x


def _write_json(path: str, value: Any) -> None:
    """Atomic, deterministic JSON (sorted keys, strict: NaN/inf as null), as every command's."""
    text = json.dumps(
        plain(value, strict=True, shortest=True), indent=1, sort_keys=True, allow_nan=False
    )
    atomic_write_bytes(path, (text + "\n").encode())


# ------------------------------------------------------------------------- 1. marginalisation
def image_grid(
    chest: ChestSCM,
    records: Mapping[str, Any],
    path: str,
    *,
    units: int = 4,
    key: KeyLike,
    learned: CounterfactualSource | None = None,
) -> dict[str, Any]:
    """Factual images of the first test units without and with effusion (half each), their
    exact counterfactuals under do(sex, age) (sex × :data:`cfjax.data.AGES`) and, with a
    ``learned`` source, the learned ones below them, with what each intervention changed
    (:func:`cfjax.scm.counterfactual_grid`, each image drawn 0.5 inch a side), as ``path`` (PNG)
    and its PDF.

    Args:
      chest: the site's SCM (:class:`cfjax.data.ChestSCM`).
      records: its test units (``"parents"``, ``"noise"``, ``"image"``).
      path: the PNG to write (the PDF beside it).
      units: rows of the grid.
      key: a PRNG key, raw key data or an int seed (keyword-only) for the counterfactuals.
      learned: a counterfactual source of learned images (e.g. ``run(...).learned_source``).

    Returns:
      The units shown, whether learned rows were drawn, the interventions and the mean absolute
      pixel change per intervention (``(K,)`` per source;
      :func:`cfjax.study.report_figures.grid_caption` reads it).
    """
    import jax

    from cfjax import figures
    from cfjax.data import AGES
    from cfjax.scm import counterfactual_grid, intervention_axis, intervention_grid

    effusion = np.asarray(records["parents"]["effusion"])
    half = units // 2
    idx = np.concatenate(
        [np.flatnonzero(effusion == 0)[: units - half], np.flatnonzero(effusion == 1)[:half]]
    )
    sub = {
        "parents": {v: np.asarray(x)[idx] for v, x in records["parents"].items()},
        "noise": jax.tree.map(lambda a: a[idx], records["noise"]),
        "image": np.asarray(records["image"])[idx],
    }
    do, q = intervention_grid({"sex": [0, 1], "age": list(AGES)})[:2]
    axis = intervention_axis((do, q))  # intervention_grid(..., describe=True)'s
    key = as_key(key)
    factual = np.asarray(sub["image"], np.float64)
    groups = {
        "exact": np.asarray(
            chest.counterfactuals(sub, do, key=key, label="fixed")["image"], np.float64
        )
    }
    if learned is not None:
        groups["learned"] = np.asarray(
            learned(chest, sub, do, key=key, label="fixed")["image"], np.float64
        )
    labels = [
        f"unit {i + 1}\n{'effusion' if e else 'no effusion'}" for i, e in enumerate(effusion[idx])
    ]
    fig = counterfactual_grid(
        factual, groups, axis, unit_labels=labels, tile_inches=0.5, image_limits=(0.0, 1.0)
    )
    figures.save_figure(fig, path)
    change = {
        name: np.mean(np.abs(v - factual[:, None]), axis=(0, 2, 3)) for name, v in groups.items()
    }  # (K,)
    out = {
        "units": [int(i) for i in idx],
        "learned": "learned" in groups,
        "effusion": effusion[idx].astype(int).tolist(),
        "size": int(factual.shape[-1]),
        "interventions": list(axis.labels),
        "mean_abs_change": {name: c.tolist() for name, c in change.items()},
    }
    if "learned" in groups:
        out["learned_vs_exact_mae"] = float(np.mean(np.abs(groups["learned"] - groups["exact"])))
    return out


def _marginalisation(
    scale: Scale,
    out: str,
    seed: int,
    command: str,
    log: Callable[[str], None],
    progress: bool | None,
) -> tuple[StudyResult, dict[str, Any]]:
    res = study.run(
        scale.study,
        os.path.join(out, "marginalisation"),
        tuple(range(scale.seeds)),
        "fixed",
        quick=True,
        generator=scale.generator,
        key=seed,
        command=command,
        progress=progress,
        log=log,
    )
    grid = image_grid(
        res.chests["A"],
        res.tests["A"],
        os.path.join(out, "counterfactual_grid.png"),
        units=4,
        key=seed,
        learned=res.learned_source,
    )
    with open(os.path.join(out, "marginalisation", "results.json"), encoding="utf-8") as f:
        payload = json.load(f)
    return res, {"study": _stable(payload), "grid": grid}


# ------------------------------------------------------------------------- 2. sensitivity
def _sensitivity(scale: Scale, out: str, seed: int, log: Callable[[str], None]) -> dict[str, Any]:
    """Paper 001 on the built-in synthetic SCM (true error correlation 0.5), in float64; ``log``
    receives a line as each stage starts."""
    import jax

    import cfjax.sensitivity as S
    from cfjax import figures

    with jax.enable_x64(True):  # scoped: the rest of the demo runs at its own precision
        prob = S.synthetic(scale.sensitivity_n, correlation=0.5, key=seed)
        settings = S.FitConfig(degrees=(2,), lambdas=(1e-2, 1.0, 1e2), predictor_degrees=(2,))
        key = jax.random.key(seed)
        budgets = np.unique(
            np.append(np.linspace(0.0, 0.99, scale.budgets), 0.5)
        )  # with the true |p|
        search: dict[str, Any] = {
            k: v
            for k, v in (("restarts", scale.restarts), ("steps", scale.search_steps))
            if v is not None
        }
        config = dataclasses.replace(S.SearchConfig(), **search)  # the rest: the defaults
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", S.ConvergenceWarning)
            warnings.simplefilter(
                "ignore", S.ShrinkageWarning
            )  # the floor is reported beside the curve
            log(
                f"    fitting the working model, the fair predictor and the baselines on {scale.sensitivity_n} units"
            )
            model = S.fit(prob.graph, prob.data, settings)
            log(
                f"    worst-case CFU over {len(budgets)} budgets, "
                f"{scale.restarts or 'the default'} restarts and more where two disagree (the first search compiles)"
            )
            wc = S.worst_case(model, budgets, key=key, config=config)
            main_warnings = len(caught)  # the curve's own: restated below with the table's budgets
            baselines = {k: float(v) for k, v in model.baseline_unfairness.items()}
            true_cfu = float(S.cfu(model, prob.true_correlation))
            log(
                "    inverse question: the smallest budgets reaching the true correlation's CFU and the blind baseline's"
            )
            inverse = {
                name: S.inverse_budget(
                    model, level, key=key, worst=wc, tol=scale.inverse_tol, config=config
                ).to_dict()
                for name, level in (
                    ("true_correlation_cfu", true_cfu),
                    ("blind_baseline", baselines["blind"]),
                )
            }
            log(
                "    benchmarks (a confounder 1, 2, 3 times as strong as A) and the baselines' own worst cases"
            )
            bench = S.benchmarks(model, k=(1.0, 2.0, 3.0))
            others = {
                p: S.worst_case(model.scoring(p), budgets, key=key, config=config)
                for p in S.PREDICTORS
                if p != "fair"
            }
            log(
                f"    bootstrap: {scale.sensitivity_resamples} resamples of the units, every model refitted"
            )
            intervals = S.bootstrap(
                model,
                budgets,
                key=jax.random.fold_in(key, 7),
                resamples=scale.sensitivity_resamples,
                worst=wc,
                levels={"blind": "blind"},
            )
        seen = search_notes(
            wc,
            model,
            sum(issubclass(w.category, S.ConvergenceWarning) for w in caught[main_warnings:]),
        )
        # Every predictor's worst case, the fair one's bootstrap band, the benchmarks' budgets marked.
        curves, marks = {"fair": wc, **others}, bench.marks()
        fig = S.plot_curve(
            curves,
            model=model,
            true_value=(0.5, true_cfu),
            benchmarks=marks or None,
            style=S.CurveStyle(title="Worst-case CFU (true correlation 0.5)"),
            low={"fair": np.asarray(intervals.low["worst_case"])},
            high={"fair": np.asarray(intervals.high["worst_case"])},
        )
        figures.save_figure(fig, os.path.join(out, "cfu_curve.png"))  # and cfu_curve.pdf
        caption = S.curve_caption(curves, model=model, benchmarks=marks or None)
        return plain(
            {
                "n": scale.sensitivity_n,
                "true_correlation": 0.5,
                "true_cfu": true_cfu,
                "caption": caption,
                "settings": {
                    "degrees": [2],
                    "lambdas": [1e-2, 1.0, 1e2],
                    "search": search,
                    "inverse_tol": scale.inverse_tol,
                    "resamples": scale.sensitivity_resamples,
                },
                "model": model.to_dict(),
                "baselines": baselines,
                "worst_case": wc.to_dict(),
                "predictors": {p: w.to_dict() for p, w in others.items()},
                "benchmarks": bench.to_dict(),
                "intervals": intervals.to_dict(),
                "inverse": inverse,
                "warnings": seen,
            },
            strict=True,
            shortest=True,
        )


# ------------------------------------------------------------------------- 3. representations
def _representations(scale: Scale, seed: int, log: Callable[[str], None]) -> dict[str, Any]:
    """Paper 002 on synthetic embeddings: CFRs scored against the true counterfactuals, for a
    classifier and CFR fitted on a balanced and on an aggressively biased split."""
    import cfjax.representations as R

    out = {}
    for j, split in enumerate(("balanced", "aggressive")):
        d = R.synthetic_embeddings(
            scale.embeddings_n, d=scale.embeddings_d, split=split, key=seed, sample_key=seed + 1 + j
        )
        log(f"    {split} split: {scale.embeddings_n} embeddings")
        out[split] = R.analyse_embeddings(
            d.X,
            d.z,
            d.y,
            d.X_cf,
            d.z_cf,
            method="orth",
            ridge=1.0,
            draws=scale.draws,
            key=seed,
            log=lambda message: log(f"      {message}"),
        )
    return {"n": scale.embeddings_n, "d": scale.embeddings_d, "splits": out}


# ------------------------------------------------------------------------- 4. counterfactual training
def _training(
    scale: Scale,
    out: str,
    seed: int,
    study_res: StudyResult,
    log: Callable[[str], None],
    progress: bool | None,
) -> dict[str, Any]:
    """The training arm on the study's site-A training pool (same sizes and seed), its learned
    counterfactuals from the study's site-A generator; writes ``training/`` (report, results,
    figure)."""
    assert scale.arm is not None  # DEMO and QUICK have an arm
    sizes = scale.study
    if scale.arm_steps is not None:
        steps, every = scale.arm_steps
        sizes = dataclasses.replace(
            sizes, predictor=dataclasses.replace(sizes.predictor, steps=steps, eval_every=every)
        )
    config = dataclasses.replace(scale.arm, study=sizes)
    source = study_res.learned_source
    fit = source.fits[study.paper.SITE_A] if source is not None else None
    res = cftraining.run_arm(
        config,
        os.path.join(out, "training"),
        key=seed,
        generator_fit=fit,
        progress=progress,
        log=lambda message: log("    " + message),
    )
    return _stable(
        plain({k: v for k, v in res.items() if k != "config"}, strict=True, shortest=True)
    )


# ------------------------------------------------------------------------- the demo
def run_demo(
    out: str,
    *,
    quick: bool = False,
    key: KeyLike = 0,
    command: str = "cfjax demo",
    log: Callable[[str], None] | None = None,
    progress: bool | None = None,
) -> dict[str, Any]:
    """Run the demo into ``out`` (which must exist): the four sections, ``report.md``,
    ``results.json``, ``run_times.json`` and the figures.

    Args:
      out: the output folder (existing; ``marginalisation/`` and ``training/`` are made in it).
      quick: the :data:`QUICK` scale instead of :data:`DEMO`.
      key: the seed of every section, a PRNG key, raw key data or an int seed ``s`` (a key stands
        for :func:`cfjax._core.keys.seed_of` ``(key)``; ``results["seed"]`` records ``s``).
      command: the command line the report says generated it.
      log: called with one line per stage (default: printed).
      progress: progress bars while training (default: when stdout is a terminal).

    Returns:
      What ``results.json`` holds.
    """
    seed = seed_of(key, "key")
    log = log or (lambda message: print(message, flush=True))
    scale = QUICK if quick else DEMO
    times: dict[str, float] = {}
    t0 = time.perf_counter()
    log(
        "1/4 counterfactual marginalisation: training classifiers and generators on synthetic chest radiographs"
    )
    study_res, marg = _marginalisation(scale, out, seed, command, log, progress)
    times["marginalisation"] = time.perf_counter() - t0
    t1 = time.perf_counter()
    log("2/4 sensitivity of counterfactual fairness: worst-case CFU curve")
    sens = _sensitivity(scale, out, seed, log)
    times["sensitivity"] = time.perf_counter() - t1
    t2 = time.perf_counter()
    log("3/4 counterfactual representations on synthetic embeddings")
    reps = _representations(scale, seed, log)
    times["representations"] = time.perf_counter() - t2
    t3 = time.perf_counter()
    log(
        "4/4 counterfactual training against the sex shortcut (exact and learned counterfactuals in the step)"
    )
    train_res = _training(scale, out, seed, study_res, log, progress)
    times["training"] = time.perf_counter() - t3
    times["total"] = time.perf_counter() - t0
    assert scale.arm is not None  # DEMO and QUICK have an arm
    results = {
        "command": command,
        "seed": seed,
        "quick": quick,
        "scale": plain(
            {
                "study": dataclasses.asdict(scale.study),
                "generator": dataclasses.asdict(scale.generator),
                **{
                    f.name: getattr(scale, f.name)
                    for f in dataclasses.fields(scale)
                    if f.name not in ("study", "generator", "arm")
                },
                "arm": {k: v for k, v in dataclasses.asdict(scale.arm).items() if k != "study"},
            },
            strict=True,
            shortest=True,
        ),
        "marginalisation": marg,
        "sensitivity": sens,
        "representations": reps,
        "training": train_res,
    }
    _write_json(os.path.join(out, "results.json"), results)
    atomic_write_bytes(
        os.path.join(out, "report.md"), report_markdown(results, study_res.results, times).encode()
    )
    # run times and the machine vary between identical runs: beside results.json, not in it
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    resumed = any(
        t["resumed_from_checkpoint"] for t in study_res.results["training"].values()
    ) or any(
        g["resumed_from_checkpoint"]
        for g in study_res.results.get("learned", {}).get("generator", {}).get("sites", {}).values()
    )
    _write_json(
        os.path.join(out, "run_times.json"),
        {
            "seconds": times,
            "cpus": cpus,
            "date": time.strftime("%Y-%m-%d", time.gmtime()),
            "load_average": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
            "resumed_from_checkpoint": resumed,
        },
    )
    return results
