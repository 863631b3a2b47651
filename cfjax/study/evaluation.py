"""One setting of the study evaluated (:func:`evaluate_setting`): K counterfactual images per
test unit from a counterfactual *source* (:class:`CounterfactualSource`; the SCM's exact ones:
:func:`exact_counterfactuals`), the ten predictors' inference on them, every report with paired
bootstrap intervals (the AUC's: :func:`auc_interval`), ΔAUC per attribute and its correlation
with stability, Proposition 1 and the agreement of the label-free and labelled rankings."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol

import jax
import jax.numpy as jnp
import numpy as np
from flax import linen as nn
from scipy import stats

import cfjax as cf
from cfjax import distributed as _dist
from cfjax import metrics as cm
from cfjax import predictors as cp
from cfjax._core.keys import as_key
from cfjax.study import correlations as sc
from cfjax.study import families, splits
from cfjax.study.config import Config
from cfjax.study.paper import (
    ATTRIBUTES,
    CALIBRATION,
    DELTA_NAMES,
    RISKS,
    STABILITY,
)
from cfjax.study.predictions import save_predictions
from cfjax.study.report_figures import _slug
from cfjax.typing import ArrayLike, KeyLike, PyTree

__all__ = [
    "CounterfactualSource",
    "exact_counterfactuals",
    "auc_interval",
    "evaluate_setting",
]


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


def _every_device() -> int | None:
    """The ensembles' ``mesh=``: their members spread over every device when there are several."""
    return jax.device_count() if jax.device_count() > 1 else None


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
