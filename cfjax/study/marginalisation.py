"""Paper 000's study end to end on the synthetic chest-radiograph SCM: trained CNN effusion
classifiers, the ten predictors, exact counterfactual images, and every table of the paper.

Three settings, as in paper 000: train and test on site A; train and test on site B; train on
site A and test on a natural-demographics test set of site B (units sampled from site B's SCM,
not the balanced split). Site B differs from site A in its acquisition only
(:data:`SITE_B`: gain 0.85, gamma 1.25, texture noise 0.07, offset +0.03; site A is
``cf.data.Acquisition()``: gain 1, gamma 1, noise 0.04, offset 0).

Per training site, the seven trained predictors (basic, sex 0.80/0.90/0.95, age
0.80/0.90/0.95) × S seeds are trained as ONE ensemble (``cfjax.predictors.train``: one vmapped,
jitted program, masks over one training pool); the logit-offset predictors wrap the basic
members (:func:`cfjax.study.families.paper_predictions`). Every test unit gets K = 16 counterfactual
images (do(sex ∈ {M, F}, age ∈ 8 values 20..90), q uniform) from a counterfactual *source*:
by default :func:`~cfjax.study.evaluation.exact_counterfactuals`, i.e.
``ChestSCM.counterfactuals`` — the same exogenous image noise re-rendered under the
counterfactual parents. A learned generator plugs
in as another source with the same signature.

Treatment of the parents under do(sex, age): sex and age are set; race is kept (not a
descendant); lung size follows its parents with its abducted noise; effusion (the label) is
held at its observed value (``label="fixed"``, paper 000's setting: every
counterfactual is scored against the factual label) or follows the new age with its abducted
noise (``label="follows"``: the images then carry counterfactual labels; the definitions §1 metrics still
score against the factual label, and R_IE against the counterfactual labels is reported
beside it).

With a ``generator`` (:class:`~cfjax.study.learned.SiteGeneratorConfig`) every table is computed
twice: with the exact counterfactuals and with *learned* ones (:mod:`cfjax.study.learned`): per site a conditional HVAE image mechanism
(``cfjax.generative``) is trained on the training split's factual images and parents; the
counterfactual parents are the exact source's (the parent mechanisms are the true ones; under
``fixed`` effusion is held in both), and each test unit's image noise is abducted from its
factual image once and decoded under every counterfactual parent vector. ``results.json`` gains
``learned`` (the generators, every number again, and ``comparison``: per setting, metric and
predictor the seed means ``exact``, ``learned``, ``delta``, and the CTC likewise); the report a
section with exact | learned | Δ tables and the largest moves.

Outputs under ``out``: ``report.md`` (tables, figures, findings measured from the
numbers, paper 000's values beside ours), ``results.json`` (every number), reliability
diagrams and ΔAUC-vs-stability figures (PNG and PDF; :mod:`cfjax.study.plots`: main and
supplementary, every point with its bootstrap interval, r with its interval), the saved predictions
(``predictions_<setting>.npz``, :mod:`cfjax.study.predictions`) and the trained ensembles' orbax checkpoints
(``checkpoints/site_A``, ``checkpoints/site_B``; a rerun with the same config resumes or
reuses them).

This module trains the sites and runs the study (:func:`train_site`, :func:`fit_site_generators`,
:func:`run`); its configuration is in :mod:`cfjax.study.config`, one setting's evaluation in
:mod:`cfjax.study.evaluation`, the report in :mod:`cfjax.study.report` (its figures in
:mod:`cfjax.study.report_figures`, the exact-vs-learned comparison in
:mod:`cfjax.study.comparison`).
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
import warnings
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import jax
import numpy as np
from flax import linen as nn

import cfjax as cf
from cfjax import _checks
from cfjax import predictors as cp
from cfjax._core.keys import seed_of
from cfjax._results import plain
from cfjax.data.chest import LABEL_MODES
from cfjax.io import atomic_write_bytes
from cfjax.study import families, splits
from cfjax.study import learned as ls
from cfjax.study.comparison import compare_settings
from cfjax.study.config import Config
from cfjax.study.diagnostics import WeakClassifierWarning, classifier_checks
from cfjax.study.evaluation import (
    CounterfactualSource,
    _every_device,
    evaluate_setting,
    exact_counterfactuals,
)
from cfjax.study.paper import SETTINGS, SITE_A, SITE_B
from cfjax.study.report import _by_name, write_report
from cfjax.study.report_figures import _slug, reliability_figure, scatter_figure
from cfjax.study.result import StudyResult
from cfjax.typing import KeyLike

__all__ = [
    "train_site",
    "fit_site_generators",
    "run",
]


#: key offset between two values of ``run``'s seed (``seed_of(key)``)
_SEED_STRIDE = 10_000


def _int_key(n: int) -> int:
    """``n`` as an int seed ``jax.random.key`` takes (below 2**63): the identity for every seed
    an int ``key`` of :func:`run` gives; wraps the offsets of a key's 64-bit data."""
    return n % (1 << 63)


# ------------------------------------------------------------------------- helpers
class _Clock:
    """Stage lines with the elapsed time, printed or handed to ``sink``."""

    def __init__(self, sink: Callable[[str], None] | None = None):
        self.start = time.perf_counter()
        self.sink = sink

    def __call__(self, msg: str) -> None:
        line = f"[{time.perf_counter() - self.start:7.1f} s] {msg}"
        if self.sink is None:
            print(line, flush=True)
        else:
            self.sink(line)

    @property
    def elapsed(self) -> float:
        return time.perf_counter() - self.start


# ------------------------------------------------------------------------- training
def train_site(
    chest: cf.data.ChestSCM,
    seeds: tuple[int, ...],
    config: Config,
    model: nn.Module,
    out: str,
    log: Callable[[str], None],
    progress: bool | None = None,
    *,
    key: KeyLike,
) -> dict[str, Any]:
    """Train the seven trained predictors × seeds of one site as one ensemble, on the records of
    :func:`~cfjax.study.splits.datasets` ``(chest, key=key)`` (``key`` a PRNG key, raw key data or
    an int seed; the members' initialisation and minibatch order follow ``seeds``)."""
    data = splits.datasets(
        chest,
        key=key,
        n_train=config.n_train,
        n_val=config.n_val,
        test_per_cell=config.test_per_cell,
        test_prevalence=config.test_prevalence,
    )
    tr, va = data["train"], data["validation"]
    p = tr["parents"]
    fam = families.paper_family(
        p["sex"], p["age"], p["effusion"], key=families.datasets_bias_key(key=key), seeds=seeds
    )
    log(
        f"  training {len(fam.names)} members as one ensemble on {config.n_train} images "
        f"({config.size}x{config.size}), kept per member: "
        + ", ".join(
            f"{n}={int(k)}"
            for n, k in zip(
                fam.names[:: len(seeds)], np.asarray(fam.masks.sum(axis=1))[:: len(seeds)]
            )
        )
    )
    ckpt = os.path.abspath(os.path.join(out, "checkpoints", f"site_{chest_site_name(chest)}"))
    resumed = os.path.isdir(ckpt) and cp.latest_checkpoint_step(ckpt) is not None
    if resumed:
        log(f"  resuming from the checkpoint in {ckpt} (step {cp.latest_checkpoint_step(ckpt)})")
    # seeds, not one key: the members of one seed start alike whatever their mask (paired predictors)
    state = cp.train(
        model,
        tr["image"],
        p["effusion"],
        fam.masks,
        va["image"],
        va["parents"]["effusion"],
        config.predictor,
        seeds=fam.seeds,
        options=cp.TrainOptions(progress=progress, names=fam.names, checkpoint_dir=ckpt),
        mesh=_every_device(),
    )
    log(
        f"  trained: {int(state.step)} steps, best validation AUC per member "
        f"{np.round(np.asarray(state.best_auc, np.float64), 3).tolist()}"
    )
    return {
        "family": fam,
        "params": state.best_params,
        "data": data,
        "steps": int(state.step),
        "resumed": resumed,
        "best_val_auc": np.asarray(state.best_auc, np.float64),
        "best_step": np.asarray(state.best_step),
    }


def chest_site_name(chest: cf.data.ChestSCM) -> str:
    return "A" if chest.site == SITE_A else "B"


# ------------------------------------------------------------------------- main
def fit_site_generators(
    chests: Mapping[str, cf.data.ChestSCM],
    trained: Mapping[str, Any],
    generator: ls.SiteGeneratorConfig,
    out: str,
    log: Callable[[str], None],
    progress: bool | None = False,
    *,
    key: KeyLike = 0,
) -> tuple[ls.LearnedSource, dict[str, Any]]:
    """One HVAE image generator per site on its training split (checkpointed under
    ``checkpoints/generator_site_<site>``); the learned counterfactual source over them.

    ``key`` (a PRNG key, raw key data or an int seed ``s``) moves every generator's key: site
    A's and B's are ``2000 + 10000 s`` and ``2001 + 10000 s``, ``s`` being
    :func:`cfjax._core.keys.seed_of` ``(key)``."""
    seed = seed_of(key, "key")
    fits, info = {}, {}
    for site_index, s in enumerate(("A", "B")):
        tr = trained[s]["data"]["train"]
        ckpt = os.path.abspath(os.path.join(out, "checkpoints", f"generator_site_{s}"))
        resumed = cp.latest_checkpoint_step(ckpt) is not None
        log(
            f"site {s}: HVAE image generator, {generator.generator.steps} steps on {len(tr['image'])} training images"
            + (" (resuming from its checkpoint)" if resumed else "")
        )
        t0 = time.perf_counter()
        fit = ls.fit_site_generator(
            chests[s],
            tr,
            generator,
            key=_int_key(2000 + site_index + _SEED_STRIDE * seed),
            checkpoint_dir=ckpt,
            progress=progress,
        )
        seconds = time.perf_counter() - t0
        tail = max(1, generator.generator.steps // 10)
        info[s] = {
            "n_train": int(len(tr["image"])),
            "seconds": seconds,
            "resumed_from_checkpoint": resumed,
            **{
                f"final_{k}": float(np.nanmean(fit.history[k][-tail:]))
                for k in ("loss", "rec", "kl")
            },
        }
        log(
            f"  trained in {seconds:.1f} s; loss over the last {tail} steps {info[s]['final_loss']:.4f}"
        )
        fits[chests[s].site] = fit
    return ls.LearnedSource(fits, chunk=generator.chunk), info


def _setting_figures(
    res: dict[str, Any], plots: dict[str, Any], out: str, name: str, source: str
) -> None:
    """A setting's reliability and ΔAUC-vs-stability figures (``source``: "" for the first
    pass's counterfactuals, "learned" for the generator's); ``plots``: its ``"_plots"``."""
    tag, label = (f"{source}_", f", {source} counterfactuals") if source else ("", "")
    reliability_figure(
        {**res, "_plots": plots},
        os.path.join(out, f"reliability_{tag}{_slug(name)}.png"),
        f"Setting {name}{label}: smoothed reliability, seed {res['seeds'][0]}",
    )
    scatter_figure(
        res,
        os.path.join(out, f"scatter_{tag}{_slug(name)}.png"),
        f"Setting {name}{label}: ΔAUC vs stability",
    )


def run(
    config: Config,
    out: str,
    seeds: tuple[int, ...] = (0, 1, 2),
    label: str = "fixed",
    source: CounterfactualSource = exact_counterfactuals,
    quick: bool = False,
    generator: ls.SiteGeneratorConfig | None = None,
    *,
    key: KeyLike = 0,
    command: str | None = None,
    progress: bool | None = None,
    log: Callable[[str], None] | None = None,
) -> StudyResult:
    """The whole study; writes every output under ``out`` and returns the results.

    With ``generator``, one HVAE image generator per site is trained as well and every table is
    computed a second time with its learned counterfactuals (:class:`ls.LearnedSource`),
    compared side by side under ``results["learned"]`` and in the report.

    Args:
      config: sizes and optimisation settings (:data:`~cfjax.study.config.FULL`,
        :data:`~cfjax.study.config.QUICK`, or your own).
      out: the output directory (created; checkpoints of an earlier run of the same
        configuration are resumed or reused).
      seeds: seeds per trained predictor (at least 2: the correlations run over
        predictor-seed pairs).
      label: ``"fixed"`` (effusion held at its observed value) or ``"follows"``.
      source: the counterfactual source of the first pass (exact by default).
      quick: marks the report as a quick configuration.
      generator: train a learned image generator per site and score its counterfactuals too.
      key: the data and key seed, a PRNG key, raw key data or an int seed ``s`` (a key stands for
        :func:`cfjax._core.keys.seed_of` ``(key)``: ``jax.random.key(s)`` for ``s``): site A's
        and B's datasets are :func:`~cfjax.study.splits.datasets` with ``key=2 s`` and
        ``key=2 s + 1``; every other key moves with it (0: the committed reports;
        ``results["seed"]`` records ``s``).
      command: the command line the report says generated it (default: the function call).
      progress: progress bars while training (default: when stdout is a terminal).
      log: called with one line per stage (default: printed with the elapsed time).

    Returns:
      A :class:`~cfjax.study.StudyResult`: the results, as ``results.json`` holds them (arrays
      indexed by predictor, not named), and the two sites' SCMs, the three test sets and, with a
      generator, the trained generators, kept for further use, never written.
    """
    seeds = tuple(int(s) for s in seeds)
    seed = seed_of(key, "key")
    if len(seeds) < 2:
        _checks.fail(
            "seeds", "at least 2 seeds (correlations over predictor-seed pairs)", repr(seeds)
        )
    if label not in LABEL_MODES:
        _checks.fail("label", f"one of {LABEL_MODES}", repr(label))
    if not isinstance(config, Config):
        _checks.fail("config", "a cfjax.study.Config", repr(config))
    clock = _Clock(log)
    log = clock
    os.makedirs(out, exist_ok=True)
    model = cp.EffusionCNN(features=tuple(config.features))
    chests = {
        s: cf.data.ChestSCM(
            prevalence=config.prevalence,
            size=config.size,
            site=site,
            effusion_size=config.effusion_size,
        )
        for s, site in (("A", SITE_A), ("B", SITE_B))
    }
    trained = {}
    for i, s in enumerate(("A", "B")):
        log(f"site {s}: data and training")
        trained[s] = train_site(
            chests[s], seeds, config, model, out, log, progress, key=_int_key(2 * seed + i)
        )
    natural = chests["B"].sample(config.n_natural, key=_int_key(100 + _SEED_STRIDE * seed))
    tests = {"A": trained["A"]["data"]["test"], "B": trained["B"]["data"]["test"], "A->B": natural}
    if generator is not None:
        learned_source, generator_info = fit_site_generators(
            chests, trained, generator, out, log, progress, key=seed
        )
        learned, comparison = {}, {}
    settings = {}
    # Each setting's figures are drawn on a thread of their own while the next setting computes
    # (matplotlib runs while XLA compiles and runs, which release the GIL); all are written
    # before the report, and a figure's error is raised here.
    drawn: list[Future] = []
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="cfjax-figures") as drawing:
        for i, (name, train_on, desc) in enumerate(SETTINGS):
            log(f"setting {name}: trained on site {train_on}, tested on the {desc}")
            res = evaluate_setting(
                name,
                model,
                trained[train_on],
                chests["B" if name != "A" else "A"],
                tests[name],
                config,
                key=_int_key(1000 + i + _SEED_STRIDE * seed),
                label=label,
                source=source,
                out=out,
                log=log,
            )
            drawn.append(drawing.submit(_setting_figures, res, res.pop("_plots"), out, name, ""))
            settings[name] = res
            log(
                f"  {name}: AUC basic {res['auc'][0].mean():.3f}; CTC R_orig {res['ctc']['risk_orig']:.2f}, "
                f"R_CM {res['ctc']['risk_cm']:.2f}, R_IE {res['ctc']['risk_ie']:.2f}"
            )
            if generator is not None:
                log(f"setting {name}: again with learned counterfactuals")
                first = len(learned_source.calls)
                res_l = evaluate_setting(
                    name,
                    model,
                    trained[train_on],
                    chests["B" if name != "A" else "A"],
                    tests[name],
                    config,
                    key=_int_key(1000 + i + _SEED_STRIDE * seed),
                    label=label,
                    source=learned_source,
                    out=out,
                    log=log,
                    tag="_learned",
                )
                calls = learned_source.calls[first:]
                res_l["generator"] = {
                    "pixel_mae": calls[0]["pixel_mae"],
                    "pixel_mae_by_k": calls[0]["mae_by_k"],
                    "pixel_mae_race": calls[1]["pixel_mae"],
                    "change_learned": calls[0]["change_learned"],
                    "change_exact": calls[0]["change_exact"],
                    "seconds": sum(c["seconds"] for c in calls),
                }
                learned[name], comparison[name] = res_l, compare_settings(res, res_l)
                drawn.append(
                    drawing.submit(
                        _setting_figures, res_l, res_l.pop("_plots"), out, name, "learned"
                    )
                )
                moved = {
                    f: t["delta"] for f, t in comparison[name]["ctc"].items() if t["delta"] != 0
                }
                log(
                    f"  {name} learned: pixel MAE vs exact {calls[0]['pixel_mae']:.4f}; CTC moves "
                    + (", ".join(f"{f} {d:+.2f}" for f, d in moved.items()) if moved else "none")
                )
    for figure in drawn:
        figure.result()

    results: dict[str, Any] = {
        "config": dataclasses.asdict(config),
        "seed": seed,
        "devices": jax.local_device_count(),
        "quick": quick,
        "seeds": list(seeds),
        "counterfactual_label": label,
        "sites": {"A": SITE_A._asdict(), "B": SITE_B._asdict()},
        "training": {
            s: {
                "steps": t["steps"],
                "resumed_from_checkpoint": t["resumed"],
                "members": list(t["family"].names),
                "best_val_auc": t["best_val_auc"],
                "best_step": t["best_step"],
            }
            for s, t in trained.items()
        },
        "settings": settings,
    }
    # is each setting's basic classifier good enough to compare anything with?
    results["classifier_checks"] = classifier_checks(results)
    for check in results["classifier_checks"].values():
        if check["warning"]:
            log("WARNING " + check["warning"])
            warnings.warn(check["warning"], WeakClassifierWarning, stacklevel=2)
    if generator is not None:
        results["learned"] = {
            "generator": {"settings": dataclasses.asdict(generator), "sites": generator_info},
            "settings": learned,
            "comparison": comparison,
        }
    results["wall_time_s"] = log.elapsed
    results["command"] = command or (
        f"cfjax.study.run(config, seeds={seeds}, label={label!r}"
        + (", generator=..." if generator is not None else "")
        + ")"
    )
    write_report(results, out)
    payload = dict(results, settings={k: _by_name(v) for k, v in settings.items()})
    if generator is not None:
        payload["learned"] = dict(
            results["learned"], settings={k: _by_name(v) for k, v in learned.items()}
        )
    # float32 results (some kept as float64 arrays) as their shortest decimals; "_" keys are not written
    text = json.dumps(
        plain(payload, strict=True, shortest=True, float32_values=True, private=False), indent=1
    )
    atomic_write_bytes(os.path.join(out, "results.json"), text.encode())
    log(f"wrote {out}/report.md and results.json; wall time {log.elapsed:.0f} s")
    return StudyResult(results, chests, tests, learned_source if generator is not None else None)
