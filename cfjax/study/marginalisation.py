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
by default :func:`exact_counterfactuals`, i.e. ``ChestSCM.counterfactuals`` — the same
exogenous image noise re-rendered under the counterfactual parents. A learned generator plugs
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
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
import warnings
from collections.abc import Callable, Mapping
from typing import Any, Protocol

import jax
import jax.numpy as jnp
import numpy as np
from flax import linen as nn
from scipy import stats

import cfjax as cf
from cfjax import _checks
from cfjax import distributed as _dist
from cfjax import metrics as cm
from cfjax import predictors as cp
from cfjax._core.keys import as_key, seed_of
from cfjax._results import plain
from cfjax.data.chest import LABEL_MODES
from cfjax.io import atomic_write_bytes
from cfjax.study import correlations as sc
from cfjax.study import families, splits
from cfjax.study import learned as ls
from cfjax.study.diagnostics import WeakClassifierWarning, classifier_checks
from cfjax.study.paper import (
    ATTRIBUTES,
    CALIBRATION,
    DELTA_NAMES,
    RISKS,
    SETTINGS,
    SITE_A,
    SITE_B,
    STABILITY,
)
from cfjax.study.predictions import save_predictions
from cfjax.study.report import (
    _by_name,
    _slug,
    compare_settings,
    reliability_figure,
    scatter_figure,
    write_report,
)
from cfjax.study.result import StudyResult
from cfjax.typing import ArrayLike, KeyLike, PyTree

__all__ = [
    "Config",
    "FULL",
    "QUICK",
    "CounterfactualSource",
    "exact_counterfactuals",
    "train_site",
    "evaluate_setting",
    "fit_site_generators",
    "run",
]


#: key offset between two values of ``run``'s seed (``seed_of(key)``)
_SEED_STRIDE = 10_000


def _int_key(n: int) -> int:
    """``n`` as an int seed ``jax.random.key`` takes (below 2**63): the identity for every seed
    an int ``key`` of :func:`run` gives; wraps the offsets of a key's 64-bit data."""
    return n % (1 << 63)


@dataclasses.dataclass(frozen=True)
class Config:
    """Sizes and optimisation settings of one run.

    Attributes:
      size: image height and width.
      n_train, n_val: training and validation units per site (:func:`cfjax.study.datasets`).
      test_per_cell: balanced test units per sex × age-group cell.
      n_natural: units of the natural-demographics test set of site B.
      features: the CNN's convolution features (:class:`cfjax.predictors.EffusionCNN`).
      predictor: the ensemble's optimisation (:class:`cfjax.predictors.EnsembleConfig`).
      bootstrap: paired bootstrap resamples of the test units.
      prop1_resamples: resampled test sets of Proposition 1.
      prevalence: ChestSCM's effusion prevalence.
      test_prevalence: the effusion prevalence of every cell of the balanced split.
      effusion_size: ChestSCM's difficulty knob (median fluid height as a fraction of the lung).
      chunk: images per compiled inference step.
    """

    size: int = 64
    n_train: int = 10000
    n_val: int = 1500
    test_per_cell: int = 300
    n_natural: int = 3000
    features: tuple[int, ...] = (8, 16, 32)
    predictor: cp.EnsembleConfig = cp.EnsembleConfig(
        steps=2000,
        batch_size=32,
        learning_rate=2e-3,
        weight_decay=1e-4,
        warmup=100,
        eval_every=200,
        patience=4,
    )
    bootstrap: int = 500
    prop1_resamples: int = 2000
    prevalence: float = 0.3
    test_prevalence: float = 0.3
    effusion_size: float = 0.3
    chunk: int = 512

    def __post_init__(self):
        if not isinstance(self.predictor, cp.EnsembleConfig):
            _checks.fail("predictor", "a cfjax.predictors.EnsembleConfig", repr(self.predictor))


FULL = Config()
QUICK = Config(
    size=32,
    n_train=3000,
    n_val=500,
    test_per_cell=50,
    n_natural=600,
    features=(8, 16, 32),
    predictor=cp.EnsembleConfig(
        steps=500,
        batch_size=32,
        learning_rate=2e-3,
        weight_decay=1e-4,
        warmup=50,
        eval_every=100,
        patience=3,
    ),
    bootstrap=200,
    prop1_resamples=1000,
    effusion_size=0.4,
)


class CounterfactualSource(Protocol):
    """Where the study's counterfactuals come from: ``source(chest, records, interventions, *,
    key, label) -> {"parents": {node: (N, K)}, "image": (N, K, H, W)}``, units before
    interventions (``docs/contract.md``), ``key`` keyword-only (a PRNG key, raw key data or an int
    seed). :func:`exact_counterfactuals` and :class:`cfjax.study.LearnedSource` are two."""

    def __call__(
        self,
        chest: cf.data.ChestSCM,
        records: Mapping[str, PyTree],
        interventions: Mapping[str, ArrayLike],
        *,
        key: KeyLike,
        label: str = "fixed",
    ) -> Mapping[str, PyTree]: ...


def exact_counterfactuals(
    chest: cf.data.ChestSCM,
    records: Mapping[str, PyTree],
    interventions: Mapping[str, ArrayLike],
    *,
    key: KeyLike,
    label: str = "fixed",
) -> Mapping[str, PyTree]:
    """The SCM's exact counterfactuals, :meth:`cfjax.data.ChestSCM.counterfactuals` as they come:
    ``{"parents": {node: (N, K)}, "image": (N, K, H, W)}``, unit ``i`` under intervention ``k``
    at ``[i, k]``.

    Args:
      chest: the site's SCM.
      records: the units (``"parents"``, ``"noise"``, ``"image"``), ``N`` of them.
      interventions: ``{node: (K,) or (N, K)}``.
      key: a PRNG key, raw key data or an int seed (keyword-only).
      label: ``"fixed"`` (effusion held at its observed value) or ``"follows"``.
    """
    return chest.counterfactuals(records, interventions, key=as_key(key), label=label)


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


def _report_fields(
    report: cm.MarginalisationReport | cm.MulticlassReport, n_pred: int, n_seeds: int
) -> dict[str, np.ndarray]:
    """Report fields as float64 arrays ``(10, S, ...)``; CVaR split into ``cvar_<alpha>``."""
    out = {}
    for name in report.__dataclass_fields__:
        if name == "alphas":
            continue
        v = np.asarray(jax.device_get(getattr(report, name)), np.float64)
        v = v.reshape((n_pred, n_seeds) + v.shape[1:])
        if name == "risk_cvar":
            for j, a in enumerate(report.alphas):
                out[f"cvar_{a:g}"] = v[..., j]
        else:
            out[name] = v
    return out


def _pairs_same_order(a: np.ndarray, b: np.ndarray) -> float:
    """Fraction of the pairs (i < j) that ``a`` and ``b`` order strictly the same way."""
    i, j = np.triu_indices(len(a), 1)
    return float(np.mean(np.sign(a[i] - a[j]) * np.sign(b[i] - b[j]) > 0))


def auc_interval(
    p_obs: ArrayLike, y: ArrayLike, *, key: KeyLike, resamples: int, level: float = 0.95
) -> np.ndarray:
    """Percentile bootstrap interval of the seed-mean AUC of each predictor.

    ``p_obs``: ``(P, S, N)`` scores of P predictors × S seeds on the same N units; ``y``: ``(N,)``.
    Resample ``b`` draws the units of :func:`cfjax.metrics.bootstrap_indices` (``key``: a PRNG
    key, raw key data or an int seed, keyword-only), the resamples
    :func:`cfjax.metrics.evaluate_bootstrap` draws with the same key, so the intervals are paired
    with the reports'. Returns ``(P, 2)``: the ``100(1 − level)/2`` and ``100(1 + level)/2``
    percentiles of the seed mean over the resamples (NaN when a resample has a single class).
    """
    key = as_key(key)
    p = jnp.asarray(p_obs)
    n_pred, n_seeds, n = p.shape
    flat = p.reshape(n_pred * n_seeds, n)
    yj = jnp.asarray(y)
    idx = cm.bootstrap_indices(n, resamples, key=key)  # (B, N)
    one = jax.vmap(cm.auc, in_axes=(0, None))
    reps = jax.lax.map(lambda i: one(flat[:, i], yj[i]), idx, batch_size=50)  # (B, P·S)
    means = np.asarray(reps, np.float64).reshape(resamples, n_pred, n_seeds).mean(axis=-1)
    q = 100 * (1 - level) / 2
    return np.stack(
        [np.percentile(means, q, axis=0), np.percentile(means, 100 - q, axis=0)], axis=-1
    )


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


def _every_device() -> int | None:
    """The ensembles' ``mesh=``: their members spread over every device when there are several."""
    return jax.device_count() if jax.device_count() > 1 else None


def chest_site_name(chest: cf.data.ChestSCM) -> str:
    return "A" if chest.site == SITE_A else "B"


# ------------------------------------------------------------------------- one setting
def evaluate_setting(
    name: str,
    model: nn.Module,
    trained: Mapping[str, Any],
    chest: cf.data.ChestSCM,
    test: Mapping[str, PyTree],
    config: Config,
    *,
    key: KeyLike,
    label: str,
    source: CounterfactualSource,
    out: str,
    log: Callable[[str], None],
    tag: str = "",
) -> dict[str, Any]:
    """Every table of one setting: predictions, reports with bootstrap intervals, ΔAUC,
    correlations, Proposition 1, ranking agreement; saves the predictions
    (``predictions_<setting><tag>.npz``, :func:`cfjax.study.predictions.save_predictions`).

    ``key`` (keyword-only, like everything after ``config``) is a PRNG key, raw key data or an
    int seed; the source is called as ``source(chest, test, interventions, key=..., label=label)``
    and its counterfactuals are held ``(N, K, ...)`` throughout, as the predictors and the metrics
    take them."""
    key = as_key(key)
    fam, params = trained["family"], trained["params"]
    seeds = [int(s) for n, s in zip(fam.names, fam.seeds) if n == "basic"]
    n_seeds = len(seeds)
    parents = test["parents"]
    y = np.asarray(parents["effusion"]).astype(np.int32)
    sex = np.asarray(parents["sex"]).astype(np.int32)
    age = np.asarray(parents["age"], np.float64)
    race = np.asarray(parents["race"]).astype(np.int32)
    n = len(y)
    k_cf, k_race, k_boot, k_prop = jax.random.split(key, 4)

    ages = np.linspace(20.0, 90.0, 8).tolist()
    do, q = cf.scm.intervention_grid({"sex": [0, 1], "age": ages})[:2]
    t0 = time.perf_counter()
    cfo = source(chest, test, do, key=k_cf, label=label)
    images_cf = cfo["image"]  # (N, K, H, W)
    sex_cf = jnp.asarray(cfo["parents"]["sex"]).astype(jnp.int32)  # (N, K)
    y_cf = np.asarray(cfo["parents"]["effusion"]).astype(np.int32)  # (N, K)
    log(
        f"  {name}: {n} test units x K = {len(q)} counterfactual images ({time.perf_counter() - t0:.1f} s); "
        f"label {label}: effusion changed in {np.mean(y_cf != y[:, None]):.1%} of them"
    )
    # do(race) alone, for Proposition 1 (race: 0.60 / 0.25 / 0.15)
    race_cf = source(chest, test, {"race": jnp.arange(3, dtype=jnp.int32)}, key=k_race, label=label)
    t0 = time.perf_counter()
    # one inference call on every image of the setting: factual, K counterfactual, 3 do(race)
    images = jnp.concatenate(
        [
            jnp.asarray(test["image"])[:, None],
            jnp.asarray(images_cf),
            jnp.asarray(race_cf["image"]),
        ],
        axis=1,
    )  # (N, 1 + K + 3, H, W)
    logits = cp.predict(
        model, params, images, logits=True, chunk=config.chunk, mesh=_every_device()
    )  # (M, N, 1 + K + 3)
    k = len(q)
    sex_j = jnp.asarray(sex)
    sex_all = jnp.concatenate(
        [sex_j[:, None], sex_cf, jnp.broadcast_to(sex_j[:, None], (n, 3))], axis=1
    )
    names, p_all = families.paper_predictions(
        fam.names, fam.seeds, logits, sex_all
    )  # (10, S, N, 1 + K + 3)
    p_obs, p_cf, p_race = p_all[..., 0], p_all[..., 1 : 1 + k], p_all[..., 1 + k :]
    log(
        f"  {name}: inference of {len(fam.names)} members on {n * (1 + k + 3)} images "
        f"({time.perf_counter() - t0:.1f} s)"
    )

    n_pred = len(names)
    p_obs_np = np.asarray(p_obs, np.float32)
    p_cf_np = np.asarray(p_cf, np.float32)  # (10, S, N, K): evaluate's layout
    p_race_np = np.asarray(p_race, np.float32)  # (10, S, N, 3)
    save_predictions(
        os.path.join(out, f"predictions_{_slug(name)}{tag}.npz"),
        names=np.array(names),
        seeds=np.array(seeds),
        p_obs=p_obs_np,
        p_cf=p_cf_np,
        y=y,
        y_cf=y_cf,
        weights=np.asarray(q, np.float64),
        p_race=p_race_np,
        sex=sex,
        age=age,
        race=race,
    )

    # ---- reports, every predictor × seed at once, and paired bootstrap intervals
    t0 = time.perf_counter()
    flat_obs = jnp.asarray(p_obs_np.reshape(n_pred * n_seeds, n))
    flat_cf = jnp.asarray(p_cf_np.reshape(n_pred * n_seeds, n, len(q)))
    # every device, as before
    report = cm.evaluate_many(flat_obs, flat_cf, y, mesh=_dist.as_mesh(len(jax.devices())))
    per_seed = _report_fields(report, n_pred, n_seeds)
    t1 = time.perf_counter()
    boot = jax.vmap(
        lambda po, pc: cm.evaluate_bootstrap(po, pc, y, key=k_boot, resamples=config.bootstrap)
    )(flat_obs, flat_cf)
    reps = _report_fields(boot.replicates, n_pred, n_seeds)  # (10, S, B)
    ci = {
        f: np.stack(
            [
                np.percentile(v.mean(axis=1), 2.5, axis=-1),
                np.percentile(v.mean(axis=1), 97.5, axis=-1),
            ],
            axis=-1,
        )
        for f, v in reps.items()
    }  # of the seed mean: (10, 2)
    log(
        f"  {name}: reports ({t1 - t0:.1f} s) and {config.bootstrap} bootstrap resamples of "
        f"{n_pred * n_seeds} predictors ({time.perf_counter() - t1:.1f} s)"
    )
    if label == "follows":
        bce = -(
            y_cf * np.log(np.clip(p_cf_np, 1e-7, 1 - 1e-7))
            + (1 - y_cf) * np.log(np.clip(1 - p_cf_np, 1e-7, 1 - 1e-7))
        )
        per_seed["risk_ie_cf_labels"] = np.einsum(
            "psnk,k->psn", bce, np.asarray(q, np.float64)
        ).mean(axis=-1)

    chains = [[names.index(p) for p in chain] for chain in families.PAPER_CHAINS]
    increasing = {
        **{f: True for f in RISKS + CALIBRATION},
        **dict(STABILITY),
        "risk_ie_cf_labels": True,
    }
    ctc = {
        f: float(cm.correct_transition_count(jnp.asarray(v.T), chains, increasing=increasing[f]))
        for f, v in per_seed.items()
        if f in increasing
    }

    # ---- AUC, stratified AUC and ΔAUC per attribute
    groups = {"sex": (sex, 2), "age_group": (splits.age_group(age), 3), "race": (race, 3)}
    auc = np.asarray(
        jax.vmap(cm.auc, in_axes=(0, None))(flat_obs, jnp.asarray(y)), np.float64
    ).reshape(n_pred, n_seeds)
    auc_ci = auc_interval(
        p_obs_np, y, key=k_boot, resamples=config.bootstrap
    )  # the reports' resamples: (10, 2)
    strat, delta = {}, {}
    for attr, (codes, g) in groups.items():
        codes_j = jnp.asarray(codes.astype(np.int32))
        s = jax.jit(
            jax.vmap(
                lambda p, c=codes_j, g=g: cm.stratified_auc(p, jnp.asarray(y), c, num_groups=g)
            )
        )(flat_obs)
        strat[attr] = np.asarray(s, np.float64).reshape(n_pred, n_seeds, g)
        delta[attr] = strat[attr].max(axis=-1) - strat[attr].min(axis=-1)
    # the shortcut read off the counterfactuals: mean p(female) − p(male), p(age 90) − p(age 20)
    sex_k, age_k = np.asarray(do["sex"]), np.asarray(do["age"])
    cf_sex_effect = (p_cf_np[..., sex_k == 1].mean(-1) - p_cf_np[..., sex_k == 0].mean(-1)).mean(-1)
    cf_age_effect = (p_cf_np[..., age_k == 90].mean(-1) - p_cf_np[..., age_k == 20].mean(-1)).mean(
        -1
    )

    # ΔAUC's interval on the reports' resampled test units; r's over the predictors (each with its seeds)
    delta_ci = sc.delta_auc_interval(
        p_obs_np, y, groups, key=k_boot, resamples=config.bootstrap
    )  # {attr: (10, 2)}
    rows = [names.index(p) for p in DELTA_NAMES]
    k_corr = jax.random.fold_in(key, 4)  # a fifth key, leaving the four above as they were
    correlations = {
        attr: {
            f: sc.correlation(
                delta[attr][rows], per_seed[f][rows], key=k_corr, resamples=config.bootstrap
            )
            for f, _ in STABILITY
        }
        for attr in ATTRIBUTES
    }

    # ---- Proposition 1: observational vs counterfactual subgroup means over resampled test sets
    t0 = time.perf_counter()
    idx = cm.bootstrap_indices(n, config.prop1_resamples, key=k_prop)  # (R, N)
    race_j = jnp.asarray(race)
    flat_race = jnp.asarray(p_race_np.reshape(n_pred * n_seeds, n, 3))

    def one_resample(i):
        return jax.vmap(lambda po, pd: cm.subgroup_means(po[i], race_j[i], pd[i]))(
            flat_obs, flat_race
        )

    sm = jax.lax.map(one_resample, idx, batch_size=50)
    obs_means = np.asarray(sm.obs_mean, np.float64)  # (R, P, 3)
    cf_means = np.asarray(sm.cf_mean, np.float64)
    var_obs = np.nanvar(obs_means, axis=0, ddof=1).reshape(n_pred, n_seeds, 3)
    var_cf = np.nanvar(cf_means, axis=0, ddof=1).reshape(n_pred, n_seeds, 3)
    n_z = np.bincount(race, minlength=3).astype(np.float64)
    sigma2 = np.stack(
        [
            p_obs_np[..., race == z].var(axis=-1, ddof=1)
            if n_z[z] > 1
            else np.full(p_obs_np.shape[:2], np.nan)
            for z in range(3)
        ],
        axis=-1,
    )  # (10, S, 3)
    prop1 = {
        "subgroups": {"common": 0, "rare": 2},
        "n": n,
        "n_z": n_z.tolist(),
        "resamples": config.prop1_resamples,
        "var_obs": var_obs,
        "var_cf": var_cf,
        "bound_obs": sigma2 / n_z,
        "bound_cf": sigma2 / n,
        "sigma2": sigma2,
        "sigma2_gen": 0.0,
    }
    log(
        f"  {name}: Proposition 1 over {config.prop1_resamples} resampled test sets "
        f"({time.perf_counter() - t0:.1f} s)"
    )

    # ---- does the label-free stability ranking agree with the labelled risk ranking?
    agreement = {}
    for lf in ("s_flip", "s_var"):
        for lab in ("risk_orig", "risk_cm"):
            taus = [
                float(stats.kendalltau(per_seed[lf][:, s], per_seed[lab][:, s])[0])
                for s in range(n_seeds)
            ]
            same = [
                _pairs_same_order(per_seed[lf][:, s], per_seed[lab][:, s]) for s in range(n_seeds)
            ]
            agreement[f"{lf}~{lab}"] = {"kendall_tau": taus, "pairs_same_order": same}

    return {
        "names": list(names),
        "seeds": seeds,
        "n": n,
        "n_pos": int(y.sum()),
        "weights": np.asarray(q).tolist(),
        "per_seed": per_seed,
        "ci95_seed_mean": ci,
        "ctc": ctc,
        "auc": auc,
        "auc_ci95_seed_mean": auc_ci,
        "stratified_auc": strat,
        "delta_auc": delta,
        "delta_auc_ci95_seed_mean": delta_ci,
        "cf_sex_effect": cf_sex_effect,
        "cf_age_effect": cf_age_effect,
        "correlations": correlations,
        "proposition1": prop1,
        "ranking_agreement": agreement,
        "label_changed": float(np.mean(y_cf != y[:, None])),
        "_plots": {
            "p_obs": p_obs_np[:, 0],
            "p_bar": p_cf_np[:, 0] @ np.asarray(q, np.float32),
            "y": y,
        },
    }


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
      config: sizes and optimisation settings (:data:`FULL`, :data:`QUICK`, or your own).
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
        reliability_figure(
            res,
            os.path.join(out, f"reliability_{_slug(name)}.png"),
            f"Setting {name}: smoothed reliability, seed {res['seeds'][0]}",
        )
        del res["_plots"]  # drawn: the figure's inputs are the saved predictions'
        scatter_figure(
            res,
            os.path.join(out, f"scatter_{_slug(name)}.png"),
            f"Setting {name}: ΔAUC vs stability",
        )
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
            reliability_figure(
                res_l,
                os.path.join(out, f"reliability_learned_{_slug(name)}.png"),
                f"Setting {name}, learned counterfactuals: smoothed reliability, seed {res_l['seeds'][0]}",
            )
            del res_l["_plots"]
            scatter_figure(
                res_l,
                os.path.join(out, f"scatter_learned_{_slug(name)}.png"),
                f"Setting {name}, learned counterfactuals: ΔAUC vs stability",
            )
            moved = {f: t["delta"] for f, t in comparison[name]["ctc"].items() if t["delta"] != 0}
            log(
                f"  {name} learned: pixel MAE vs exact {calls[0]['pixel_mae']:.4f}; CTC moves "
                + (", ".join(f"{f} {d:+.2f}" for f, d in moved.items()) if moved else "none")
            )
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
