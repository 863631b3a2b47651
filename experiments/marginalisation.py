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
members (``cfjax.predictors.paper_predictions``). Every test unit gets K = 16 counterfactual
images (do(sex ∈ {M, F}, age ∈ 8 values 20..90), q uniform) from a counterfactual *source*:
by default :func:`exact_counterfactuals`, i.e. ``ChestSCM.counterfactuals`` — the same
exogenous image noise re-rendered under the counterfactual parents. A learned generator plugs
in as another source with the same signature.

Treatment of the parents under do(sex, age): sex and age are set; race is kept (not a
descendant); lung size follows its parents with its abducted noise; effusion (the label) is
held at its observed value (``--counterfactual-label fixed``, paper 000's setting: every
counterfactual is scored against the factual label) or follows the new age with its abducted
noise (``follows``: the images then carry counterfactual labels; the definitions §1 metrics still
score against the factual label, and R_IE against the counterfactual labels is reported
beside it).

With ``--learned`` every table is computed twice: with the exact counterfactuals and with
*learned* ones (:mod:`experiments.learned_source`): per site a conditional HVAE image mechanism
(``cfjax.generative``) is trained on the training split's factual images and parents; the
counterfactual parents are the exact source's (the parent mechanisms are the true ones; under
``fixed`` effusion is held in both), and each test unit's image noise is abducted from its
factual image once and decoded under every counterfactual parent vector. ``results.json`` gains
``learned`` (the generators, every number again, and ``comparison``: per setting, metric and
predictor the seed means ``exact``, ``learned``, ``delta``, and the CTC likewise); the report a
section with exact | learned | Δ tables and the largest moves.

Outputs under ``--out DIR``: ``report.md`` (tables, figures, findings measured from the
numbers, paper 000's values beside ours), ``results.json`` (every number), reliability
diagrams and ΔAUC-vs-stability scatter plots (PNG), the saved predictions
(``predictions_<setting>.npz``) and the trained ensembles' orbax checkpoints
(``checkpoints/site_A``, ``checkpoints/site_B``; a rerun with the same config resumes or
reuses them).

Run: ``python -m experiments.marginalisation [--quick] [--out experiments/reports/marginalisation] [--seeds 3]
[--counterfactual-label fixed|follows] [--learned]``. The quick configuration (32 × 32 images, 3000 training units per
site, ≤ 500 steps) took 143 s wall on a quiet 2-core CPU, run as a script (which exposes every core as an XLA
host device, so that the ensemble's members train side by side); the full one (64 × 64, 10000 units, ≤ 2000
steps, N = 1800) took 2056 s wall on the same machine. ``--quick --learned`` took 380 s wall on a lightly loaded
2-core CPU (the two generators 91 s, the learned half of the tables 105 s); the full generators (64 × 64,
3000 steps each) cost about 0.6 s a step on 2 busy CPU cores, i.e. about an hour more for the full run.
"""

from __future__ import annotations

import argparse
import dataclasses
import io
import json
import os
import time
from typing import Any, Callable, Mapping

if __name__ == "__main__" and "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
    # Run as a script: every core an XLA host device before JAX starts, so that training and
    # inference spread the ensemble's members over the cores (cfjax.predictors.train's devices).
    _cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count={_cores}".strip()

import jax
import jax.numpy as jnp
import numpy as np
from scipy import stats

import cfjax as cf
from cfjax import metrics as cm
from cfjax import predictors as cp
from cfjax._io import atomic_write_bytes
from experiments import learned_source as ls

#: site A: the default acquisition
SITE_A = cf.data.Acquisition()
#: site B: lower gain, higher gamma, more texture noise, a small offset
SITE_B = cf.data.Acquisition(gain=0.85, gamma=1.25, noise=0.07, offset=0.03)
#: the three settings: (name, training site, test set)
SETTINGS = (("A", "A", "balanced test split of site A"),
            ("B", "B", "balanced test split of site B"),
            ("A->B", "A", "natural-demographics test set of site B"))
#: the stability fields, and whether more bias should make them larger
STABILITY = (("s_var", True), ("s_flip", True), ("d_obs", True), ("score_shift", True),
             ("spearman", False), ("kendall_tau_b", False), ("rank_change", True))
RISKS = ("risk_orig", "risk_cm", "risk_ie", "cvar_0.5", "cvar_0.25", "cvar_0.1", "risk_wc")
CALIBRATION = ("brier_orig", "ece_orig", "smece_orig", "mce_orig", "brier_cm", "ece_cm", "smece_cm", "mce_cm")
ATTRIBUTES = ("sex", "age_group", "race")
#: the 21 predictor-seed pairs of paper 000's Figure 3 (with 3 seeds)
DELTA_NAMES = ("basic", "sex0.80", "sex0.90", "sex0.95", "age0.80", "age0.90", "age0.95")


@dataclasses.dataclass(frozen=True)
class Config:
    """Sizes and optimisation settings of one run.

    ``effusion_size`` is ChestSCM's difficulty knob (median fluid height as a fraction of the
    lung); ``test_prevalence`` the effusion prevalence of every cell of the balanced split.
    """

    size: int = 64
    n_train: int = 10000
    n_val: int = 1500
    test_per_cell: int = 300
    n_natural: int = 3000
    features: tuple[int, ...] = (8, 16, 32)
    steps: int = 2000
    batch_size: int = 32
    learning_rate: float = 2e-3
    weight_decay: float = 1e-4
    warmup: int = 100
    eval_every: int = 200
    patience: int = 4
    bootstrap: int = 500
    prop1_resamples: int = 2000
    prevalence: float = 0.3
    test_prevalence: float = 0.3
    effusion_size: float = 0.3
    chunk: int = 512

    def train_config(self) -> cp.TrainConfig:
        return cp.TrainConfig(steps=self.steps, batch_size=self.batch_size, learning_rate=self.learning_rate,
                              weight_decay=self.weight_decay, warmup=self.warmup, eval_every=self.eval_every,
                              patience=self.patience)


FULL = Config()
QUICK = Config(size=32, n_train=3000, n_val=500, test_per_cell=50, n_natural=600, features=(8, 16, 32),
               steps=500, batch_size=32, eval_every=100, patience=3, warmup=50, bootstrap=200,
               prop1_resamples=1000, effusion_size=0.4)

#: a counterfactual source: (scm, records, interventions, key, label) -> {"parents", "image"}
CounterfactualSource = Callable[[Any, Mapping[str, Any], Mapping[str, Any], jax.Array, str], Mapping[str, Any]]


def exact_counterfactuals(chest: cf.data.ChestSCM, records: Mapping[str, Any], interventions: Mapping[str, Any],
                          key: jax.Array, label: str) -> Mapping[str, Any]:
    """The SCM's exact counterfactuals: ``{"parents": {node: (K, N)}, "image": (K, N, H, W)}``."""
    return chest.counterfactuals(records, interventions, key, label=label)


# ------------------------------------------------------------------------- paper 000's numbers
_PAPER_RISK = {
    "A": """0.444 0.501 0.594 1.002 1.326 1.549 1.852
0.445 0.612 0.724 1.027 1.346 1.597 1.845
0.443 0.629 0.771 1.068 1.424 1.699 1.962
0.502 0.677 0.919 1.072 1.431 1.716 1.997
0.453 0.610 0.687 1.192 1.618 1.991 1.390
0.452 0.614 0.699 1.195 1.612 1.968 2.338
0.443 0.614 0.699 1.203 1.622 1.982 2.361
0.494 0.613 0.750 1.126 1.511 1.817 2.111
0.509 0.612 0.754 1.225 1.654 2.007 2.340
0.512 0.613 0.758 1.518 2.046 2.495 2.893
6.33 8.33 8.66 8.33 8.00 8.00 7.33""",
    "B": """0.335 0.425 0.536 0.790 1.031 1.190 1.283
0.342 0.454 0.556 0.827 1.084 1.252 1.351
0.359 0.469 0.590 0.897 1.161 1.370 1.494
0.424 0.511 0.694 0.880 1.181 1.377 1.505
0.375 0.455 0.570 1.055 1.290 1.459 1.563
0.371 0.458 0.583 1.215 1.427 1.580 1.681
0.384 0.459 0.581 1.232 1.499 1.724 1.864
0.335 0.425 0.536 0.857 1.160 1.360 1.549
0.351 0.565 0.734 0.887 1.142 1.370 1.501
0.366 0.610 0.771 0.880 1.191 1.411 1.505
7.00 8.33 8.00 8.00 7.66 7.00 7.33""",
    "A->B": """0.397 0.466 0.549 0.769 0.977 1.121 1.210
0.402 0.486 0.566 0.822 1.055 1.223 1.328
0.422 0.495 0.602 0.913 1.176 1.379 1.506
0.508 0.536 0.722 1.177 1.506 1.778 1.945
0.418 0.497 0.558 0.761 0.941 1.064 1.140
0.395 0.499 0.565 0.793 1.023 1.183 1.281
0.437 0.530 0.597 0.829 1.042 1.193 1.287
0.416 0.490 0.568 0.897 1.056 1.143 1.464
0.422 0.511 0.573 0.809 1.015 1.166 1.563
0.402 0.516 0.614 0.827 1.062 1.233 1.642
6.66 8.00 8.33 8.33 7.66 7.66 7.33""",
}
# columns: marginalised Brier, ECE, MCE, original Brier, ECE, MCE
_PAPER_CALIBRATION = {
    "A": """0.202 0.083 0.171 0.143 0.030 0.080
0.208 0.125 0.219 0.143 0.019 0.077
0.216 0.153 0.240 0.149 0.043 0.121
0.237 0.211 0.306 0.180 0.116 0.228
0.218 0.100 0.184 0.146 0.017 0.046
0.223 0.104 0.232 0.145 0.042 0.119
0.224 0.111 0.233 0.142 0.017 0.078
0.216 0.091 0.164 0.158 0.058 0.104
0.216 0.099 0.159 0.162 0.057 0.089
0.228 0.103 0.171 0.165 0.056 0.079""",
    "B": """0.139 0.088 0.244 0.102 0.012 0.067
0.143 0.111 0.284 0.104 0.029 0.093
0.150 0.136 0.323 0.109 0.050 0.146
0.167 0.179 0.378 0.128 0.091 0.212
0.152 0.126 0.299 0.193 0.133 0.262
0.186 0.128 0.303 0.212 0.154 0.271
0.207 0.135 0.296 0.241 0.181 0.328
0.141 0.094 0.251 0.113 0.039 0.149
0.150 0.105 0.252 0.114 0.049 0.188
0.154 0.138 0.259 0.118 0.042 0.073""",
    "A->B": """0.155 0.059 0.103 0.125 0.056 0.147
0.157 0.074 0.161 0.126 0.030 0.077
0.161 0.096 0.206 0.134 0.019 0.034
0.179 0.150 0.278 0.164 0.075 0.146
0.156 0.061 0.116 0.132 0.075 0.163
0.169 0.061 0.139 0.125 0.065 0.182
0.172 0.076 0.132 0.140 0.072 0.187
0.159 0.063 0.141 0.131 0.040 0.075
0.167 0.064 0.137 0.135 0.028 0.083
0.170 0.096 0.163 0.127 0.015 0.048""",
}
# paper 000's Table 5 (CheXpert, setting 1): s_var, s_flip, score shift (their D_obs), ρ, τ_b, |Δr̄|
_PAPER_STABILITY_A = """0.0396 0.247 0.199 0.691 0.476 913.5
0.0530 0.271 0.216 0.653 0.471 918.4
0.0574 0.289 0.235 0.653 0.469 928.5
0.0685 0.335 0.291 0.641 0.466 934.2
0.0426 0.265 0.218 0.653 0.476 920.6
0.0501 0.256 0.208 0.645 0.479 922.4
0.0489 0.263 0.222 0.644 0.464 932.5
0.0566 0.267 0.203 0.652 0.477 913.3
0.0567 0.270 0.205 0.642 0.466 937.8
0.0567 0.279 0.208 0.589 0.416 1050.2"""


def _table(text: str) -> np.ndarray:
    return np.array([[float(v) for v in line.split()] for line in text.strip().splitlines()])


PAPER_RISK = {k: _table(v) for k, v in _PAPER_RISK.items()}  # (11, 7): 10 predictors + CTC row
PAPER_CALIBRATION = {k: _table(v) for k, v in _PAPER_CALIBRATION.items()}  # (10, 6)
PAPER_STABILITY_A = _table(_PAPER_STABILITY_A)  # (10, 6)


# ------------------------------------------------------------------------- helpers
class _Clock:
    def __init__(self):
        self.start = time.perf_counter()

    def __call__(self, msg: str) -> None:
        print(f"[{time.perf_counter() - self.start:7.1f} s] {msg}", flush=True)

    @property
    def elapsed(self) -> float:
        return time.perf_counter() - self.start


def _report_fields(report: cm.MarginalisationReport, n_pred: int, n_seeds: int) -> dict[str, np.ndarray]:
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


def _nanmean(v) -> float:
    v = np.asarray(v, np.float64)
    return float(np.nanmean(v)) if np.isfinite(v).any() else float("nan")


def _corr(x: np.ndarray, y: np.ndarray) -> dict[str, float]:
    if np.ptp(x) == 0 or np.ptp(y) == 0:
        return {"pearson": float("nan"), "spearman": float("nan")}
    return {"pearson": float(stats.pearsonr(x, y)[0]), "spearman": float(stats.spearmanr(x, y)[0])}


def _save_figure(fig, path: str) -> None:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=72)
    atomic_write_bytes(path, buf.getvalue())


# ------------------------------------------------------------------------- training
def train_site(chest: cf.data.ChestSCM, data_seed: int, seeds: tuple[int, ...], config: Config, model: Any,
               out: str, log: Callable[[str], None]) -> dict[str, Any]:
    """Train the seven trained predictors × seeds of one site as one ensemble."""
    data = chest.datasets(data_seed, n_train=config.n_train, n_val=config.n_val,
                          test_per_cell=config.test_per_cell, test_prevalence=config.test_prevalence)
    tr, va = data["train"], data["validation"]
    p = tr["parents"]
    fam = cp.paper_family(p["sex"], p["age"], p["effusion"], cp.datasets_bias_key(data_seed), seeds)
    log(f"  training {len(fam.names)} members as one ensemble on {config.n_train} images "
        f"({config.size}x{config.size}), kept per member: "
        + ", ".join(f"{n}={int(k)}" for n, k in zip(fam.names[::len(seeds)],
                                                     np.asarray(fam.masks.sum(axis=1))[::len(seeds)])))
    ckpt = os.path.abspath(os.path.join(out, "checkpoints", f"site_{chest_site_name(chest)}"))
    resumed = os.path.isdir(ckpt) and cp.latest_checkpoint_step(ckpt) is not None
    if resumed:
        log(f"  resuming from the checkpoint in {ckpt} (step {cp.latest_checkpoint_step(ckpt)})")
    state = cp.train(model, tr["image"], p["effusion"], fam.masks, fam.seeds, va["image"],
                     va["parents"]["effusion"], config.train_config(), names=fam.names, checkpoint_dir=ckpt)
    log(f"  trained: {int(state.step)} steps, best validation AUC per member "
        f"{np.round(np.asarray(state.best_auc), 3).tolist()}")
    return {"family": fam, "params": state.best_params, "data": data, "steps": int(state.step), "resumed": resumed,
            "best_val_auc": np.asarray(state.best_auc, np.float64), "best_step": np.asarray(state.best_step)}


def chest_site_name(chest: cf.data.ChestSCM) -> str:
    return "A" if chest.site == SITE_A else "B"


# ------------------------------------------------------------------------- one setting
def evaluate_setting(name: str, model: Any, trained: Mapping[str, Any], chest: cf.data.ChestSCM,
                     test: Mapping[str, Any], config: Config, key: jax.Array, label: str,
                     source: CounterfactualSource, out: str, log: Callable[[str], None],
                     tag: str = "") -> dict[str, Any]:
    """Every table of one setting: predictions, reports with bootstrap intervals, ΔAUC,
    correlations, Proposition 1, ranking agreement; saves the predictions as an npz
    (``predictions_<setting><tag>.npz``)."""
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

    do, q = cf.scm.intervention_grid({"sex": [0, 1], "age": np.linspace(20.0, 90.0, 8)})
    t0 = time.perf_counter()
    cfo = source(chest, test, do, k_cf, label)
    images_cf = cfo["image"]
    sex_cf = jnp.asarray(cfo["parents"]["sex"]).astype(jnp.int32)
    y_cf = np.asarray(cfo["parents"]["effusion"]).astype(np.int32)  # (K, N)
    log(f"  {name}: {n} test units x K = {len(q)} counterfactual images ({time.perf_counter() - t0:.1f} s); "
        f"label {label}: effusion changed in {np.mean(y_cf != y[None, :]):.1%} of them")
    # do(race) alone, for Proposition 1 (race: 0.60 / 0.25 / 0.15)
    race_cf = source(chest, test, {"race": jnp.arange(3, dtype=jnp.int32)}, k_race, label)
    t0 = time.perf_counter()
    # one inference call on every image of the setting: factual, K counterfactual, 3 do(race)
    images = jnp.concatenate([jnp.asarray(test["image"])[None], jnp.asarray(images_cf),
                              jnp.asarray(race_cf["image"])])  # (1 + K + 3, N, H, W)
    logits = cp.predict(model, params, images, logits=True, chunk=config.chunk)  # (M, 1 + K + 3, N)
    k = len(q)
    sex_all = jnp.concatenate([jnp.asarray(sex)[None], sex_cf, jnp.broadcast_to(jnp.asarray(sex), (3, n))])
    names, p_all = cp.paper_predictions(fam.names, fam.seeds, logits, sex_all)  # (10, S, 1 + K + 3, N)
    p_obs, p_cf, p_race = p_all[:, :, 0], p_all[:, :, 1:1 + k], p_all[:, :, 1 + k:]
    log(f"  {name}: inference of {len(fam.names)} members on {n * (1 + k + 3)} images "
        f"({time.perf_counter() - t0:.1f} s)")

    n_pred = len(names)
    p_obs_np = np.asarray(p_obs, np.float32)
    p_cf_np = np.asarray(jnp.swapaxes(p_cf, 2, 3), np.float32)  # (10, S, N, K): evaluate's layout
    p_race_np = np.asarray(jnp.swapaxes(p_race, 2, 3), np.float32)  # (10, S, N, 3)
    buf = io.BytesIO()
    np.savez_compressed(buf, names=np.array(names), seeds=np.array(seeds), p_obs=p_obs_np, p_cf=p_cf_np,
                        p_race=p_race_np, y=y, y_cf=y_cf, sex=sex, age=age, race=race,
                        weights=np.asarray(q, np.float64))
    atomic_write_bytes(os.path.join(out, f"predictions_{_slug(name)}{tag}.npz"), buf.getvalue())

    # ---- reports, every predictor × seed at once, and paired bootstrap intervals
    t0 = time.perf_counter()
    flat_obs = jnp.asarray(p_obs_np.reshape(n_pred * n_seeds, n))
    flat_cf = jnp.asarray(p_cf_np.reshape(n_pred * n_seeds, n, len(q)))
    report = cm.evaluate_many(flat_obs, flat_cf, y)
    per_seed = _report_fields(report, n_pred, n_seeds)
    t1 = time.perf_counter()
    boot = jax.vmap(lambda po, pc: cm.evaluate_bootstrap(po, pc, y, key=k_boot, resamples=config.bootstrap,
                                                         return_replicates=True))(flat_obs, flat_cf)
    reps = _report_fields(boot.replicates, n_pred, n_seeds)  # (10, S, B)
    ci = {f: np.stack([np.percentile(v.mean(axis=1), 2.5, axis=-1), np.percentile(v.mean(axis=1), 97.5, axis=-1)],
                      axis=-1) for f, v in reps.items()}  # of the seed mean: (10, 2)
    log(f"  {name}: reports ({t1 - t0:.1f} s) and {config.bootstrap} bootstrap resamples of "
        f"{n_pred * n_seeds} predictors ({time.perf_counter() - t1:.1f} s)")
    if label == "follows":
        bce = -(y_cf.T * np.log(np.clip(p_cf_np, 1e-7, 1 - 1e-7))
                + (1 - y_cf.T) * np.log(np.clip(1 - p_cf_np, 1e-7, 1 - 1e-7)))
        per_seed["risk_ie_cf_labels"] = np.einsum("psnk,k->psn", bce, np.asarray(q, np.float64)).mean(axis=-1)

    chains = [[names.index(p) for p in chain] for chain in cm.PAPER_CHAINS]
    increasing = {**{f: True for f in RISKS + CALIBRATION}, **dict(STABILITY), "risk_ie_cf_labels": True}
    ctc = {f: float(cm.correct_transition_count(jnp.asarray(v.T), chains, increasing=increasing[f]))
           for f, v in per_seed.items() if f in increasing}

    # ---- AUC, stratified AUC and ΔAUC per attribute
    groups = {"sex": (sex, 2), "age_group": (cf.data.age_group(age), 3), "race": (race, 3)}
    auc = np.asarray(jax.vmap(cm.auc, in_axes=(0, None))(flat_obs, jnp.asarray(y)), np.float64).reshape(n_pred, n_seeds)
    strat, delta = {}, {}
    for attr, (codes, g) in groups.items():
        codes = jnp.asarray(codes.astype(np.int32))
        s = jax.jit(jax.vmap(lambda p, c=codes, g=g: cm.stratified_auc(p, jnp.asarray(y), c, num_groups=g)))(flat_obs)
        strat[attr] = np.asarray(s, np.float64).reshape(n_pred, n_seeds, g)
        delta[attr] = strat[attr].max(axis=-1) - strat[attr].min(axis=-1)
    # the shortcut read off the counterfactuals: mean p(female) − p(male), p(age 90) − p(age 20)
    sex_k, age_k = np.asarray(do["sex"]), np.asarray(do["age"])
    cf_sex_effect = (p_cf_np[..., sex_k == 1].mean(-1) - p_cf_np[..., sex_k == 0].mean(-1)).mean(-1)
    cf_age_effect = (p_cf_np[..., age_k == 90].mean(-1) - p_cf_np[..., age_k == 20].mean(-1)).mean(-1)

    rows = [names.index(p) for p in DELTA_NAMES]
    correlations = {attr: {f: _corr(delta[attr][rows].ravel(), per_seed[f][rows].ravel()) for f, _ in STABILITY}
                    for attr in ATTRIBUTES}

    # ---- Proposition 1: observational vs counterfactual subgroup means over resampled test sets
    t0 = time.perf_counter()
    idx = cm.bootstrap_indices(k_prop, n, config.prop1_resamples)  # (R, N)
    race_j = jnp.asarray(race)
    flat_race = jnp.asarray(p_race_np.reshape(n_pred * n_seeds, n, 3))

    def one_resample(i):
        return jax.vmap(lambda po, pd: cm.subgroup_means(po[i], race_j[i], pd[i]))(flat_obs, flat_race)

    sm = jax.lax.map(one_resample, idx, batch_size=50)
    obs_means = np.asarray(sm.obs_mean, np.float64)  # (R, P, 3)
    cf_means = np.asarray(sm.cf_mean, np.float64)
    var_obs = np.nanvar(obs_means, axis=0, ddof=1).reshape(n_pred, n_seeds, 3)
    var_cf = np.nanvar(cf_means, axis=0, ddof=1).reshape(n_pred, n_seeds, 3)
    n_z = np.bincount(race, minlength=3).astype(np.float64)
    sigma2 = np.stack([p_obs_np[..., race == z].var(axis=-1, ddof=1) if n_z[z] > 1 else
                       np.full(p_obs_np.shape[:2], np.nan) for z in range(3)], axis=-1)  # (10, S, 3)
    prop1 = {"subgroups": {"common": 0, "rare": 2}, "n": n, "n_z": n_z.tolist(), "resamples": config.prop1_resamples,
             "var_obs": var_obs, "var_cf": var_cf, "bound_obs": sigma2 / n_z, "bound_cf": sigma2 / n, "sigma2": sigma2,
             "sigma2_gen": 0.0}
    log(f"  {name}: Proposition 1 over {config.prop1_resamples} resampled test sets "
        f"({time.perf_counter() - t0:.1f} s)")

    # ---- does the label-free stability ranking agree with the labelled risk ranking?
    agreement = {}
    for lf in ("s_flip", "s_var"):
        for lab in ("risk_orig", "risk_cm"):
            taus = [float(stats.kendalltau(per_seed[lf][:, s], per_seed[lab][:, s])[0]) for s in range(n_seeds)]
            same = [_pairs_same_order(per_seed[lf][:, s], per_seed[lab][:, s]) for s in range(n_seeds)]
            agreement[f"{lf}~{lab}"] = {"kendall_tau": taus, "pairs_same_order": same}

    return {"names": list(names), "seeds": seeds, "n": n, "n_pos": int(y.sum()), "weights": np.asarray(q).tolist(),
            "per_seed": per_seed, "ci95_seed_mean": ci, "ctc": ctc, "auc": auc, "stratified_auc": strat,
            "delta_auc": delta, "cf_sex_effect": cf_sex_effect, "cf_age_effect": cf_age_effect,
            "correlations": correlations, "proposition1": prop1, "ranking_agreement": agreement,
            "label_changed": float(np.mean(y_cf != y[None, :])),
            "_plots": {"p_obs": p_obs_np[:, 0], "p_bar": p_cf_np[:, 0] @ np.asarray(q, np.float32), "y": y}}


def _slug(name: str) -> str:
    return name.replace("->", "_to_")


# ------------------------------------------------------------------------- figures
def reliability_figure(res: Mapping[str, Any], path: str, title: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names, pl = res["names"], res["_plots"]
    fig, axes = plt.subplots(2, 5, figsize=(14, 6), sharex=True, sharey=True)
    for i, ax in enumerate(axes.ravel()):
        for key, colour, lab in (("p_obs", "tab:blue", "original"), ("p_bar", "tab:red", "marginalised")):
            c = cm.reliability_curve(pl[key][i], pl["y"], grid=101)
            ax.plot(np.asarray(c.t), np.asarray(c.mean_label), color=colour,
                    label=f"{lab} (smECE {float(c.smooth_ece):.3f})")
        ax.plot([0, 1], [0, 1], color="0.6", lw=0.8, ls="--")
        ax.set_title(names[i], fontsize=9)
        ax.legend(fontsize=6, loc="upper left")
    for ax in axes[-1]:
        ax.set_xlabel("predicted probability")
    for ax in axes[:, 0]:
        ax.set_ylabel("smoothed mean label")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    _save_figure(fig, path)
    plt.close(fig)


def scatter_figure(res: Mapping[str, Any], path: str, title: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [res["names"].index(p) for p in DELTA_NAMES]
    colours = {"basic": "k", "sex": "tab:red", "age": "tab:blue"}
    fig, axes = plt.subplots(len(ATTRIBUTES), len(STABILITY), figsize=(2.2 * len(STABILITY), 2.2 * len(ATTRIBUTES)))
    for a, attr in enumerate(ATTRIBUTES):
        d = res["delta_auc"][attr][rows]
        for m, (f, _) in enumerate(STABILITY):
            ax = axes[a, m]
            v = res["per_seed"][f][rows]
            for r, pname in enumerate(DELTA_NAMES):
                level = 2 if pname == "basic" else cp.BIAS_STRENGTHS.index(float(pname[3:]))
                ax.scatter(v[r], d[r], s=10, color=colours[pname[:3] if pname != "basic" else "basic"],
                           alpha=0.4 + 0.3 * level)
            c = res["correlations"][attr][f]
            ax.set_title(f"r={c['pearson']:.2f} ρ={c['spearman']:.2f}", fontsize=7)
            ax.tick_params(labelsize=5)
            if a == len(ATTRIBUTES) - 1:
                ax.set_xlabel(f, fontsize=7)
            if m == 0:
                ax.set_ylabel(f"ΔAUC {attr}", fontsize=7)
    fig.suptitle(title + " (black: basic, red: sex-biased, blue: age-biased; darker = stronger)", fontsize=9)
    fig.tight_layout()
    _save_figure(fig, path)
    plt.close(fig)


# ------------------------------------------------------------------------- exact vs learned
#: metrics of the factual predictions alone: the counterfactual source cannot move them
SOURCE_FREE = ("risk_orig", "brier_orig", "ece_orig", "smece_orig", "mce_orig")
#: the metrics that depend on the counterfactual images, in report order
SOURCE_DEPENDENT = (tuple(f for f in RISKS if f not in SOURCE_FREE) + tuple(f for f in CALIBRATION if f not in SOURCE_FREE)
                    + tuple(f for f, _ in STABILITY))


def _triple(e: float, l: float) -> dict[str, float]:
    return {"exact": float(e), "learned": float(l), "delta": float(l) - float(e)}


def compare_settings(exact: Mapping[str, Any], learned: Mapping[str, Any]) -> dict[str, Any]:
    """One setting's tables computed with exact and with learned counterfactuals, side by side:
    per metric and predictor the seed means ``{"exact", "learned", "delta"}`` (delta = learned −
    exact), the CTC per metric, the counterfactual shortcut effects, Proposition 1's
    counterfactual variance, the ΔAUC(sex)–stability correlations and the ranking agreement;
    ``unchanged_max_abs_delta``: the largest change of a metric of the factual predictions
    alone (0: both runs scored the same factual predictions)."""
    names = list(exact["names"])
    fields = [f for f in exact["per_seed"] if f in learned["per_seed"]]
    metrics = {}
    for f in fields:
        e = np.asarray(exact["per_seed"][f], np.float64).mean(axis=1)
        v = np.asarray(learned["per_seed"][f], np.float64).mean(axis=1)
        metrics[f] = {p: _triple(e[i], v[i]) for i, p in enumerate(names)}
    ctc = {f: _triple(exact["ctc"][f], learned["ctc"][f]) for f in exact["ctc"] if f in learned["ctc"]}
    effects = {}
    for eff in ("cf_sex_effect", "cf_age_effect"):
        e, v = np.asarray(exact[eff]).mean(axis=1), np.asarray(learned[eff]).mean(axis=1)
        effects[eff] = {p: _triple(e[i], v[i]) for i, p in enumerate(names)}
    ve = np.asarray(exact["proposition1"]["var_cf"]).mean(axis=(0, 1))
    vl = np.asarray(learned["proposition1"]["var_cf"]).mean(axis=(0, 1))
    prop1 = {"common": _triple(ve[0], vl[0]), "rare": _triple(ve[2], vl[2])}
    corr = {f: _triple(exact["correlations"]["sex"][f]["pearson"], learned["correlations"]["sex"][f]["pearson"])
            for f, _ in STABILITY}
    agree = {k: _triple(_nanmean(exact["ranking_agreement"][k]["kendall_tau"]),
                        _nanmean(learned["ranking_agreement"][k]["kendall_tau"]))
             for k in exact["ranking_agreement"]}
    unchanged = [np.abs(np.asarray(learned["per_seed"][f]) - np.asarray(exact["per_seed"][f])).max()
                 for f in SOURCE_FREE if f in fields]
    unchanged.append(np.abs(np.asarray(learned["auc"]) - np.asarray(exact["auc"])).max())
    return {"metrics": metrics, "ctc": ctc, "cf_effects": effects, "proposition1_var_cf": prop1,
            "correlations_sex_pearson": corr, "ranking_agreement_tau": agree,
            "label_changed": _triple(exact["label_changed"], learned["label_changed"]),
            "unchanged_max_abs_delta": float(np.max(unchanged))}


def mean_relative_move(comparison: Mapping[str, Any], field: str) -> float:
    """Mean over the predictors of |learned − exact| / |exact| of one metric's seed means
    (predictors whose exact value is 0 left out)."""
    rel = [abs(t["delta"]) / abs(t["exact"]) for t in comparison["metrics"][field].values()
           if np.isfinite(t["delta"]) and t["exact"] != 0]
    return float(np.mean(rel)) if rel else float("nan")


def learned_summary(comparisons: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """Sentences on the largest moves from exact to learned counterfactuals (measured)."""
    fields = [f for f in SOURCE_DEPENDENT if all(f in c["ctc"] for c in comparisons.values())]
    cells = [(name, f, c["ctc"][f]) for name, c in comparisons.items() for f in fields]
    moved = sorted((x for x in cells if x[2]["delta"] != 0), key=lambda x: -abs(x[2]["delta"]))
    out = []
    if moved:
        out.append(f"The CTC moves in {len(moved)} of {len(cells)} (setting, metric) cells "
                   f"(mean |ΔCTC| {np.mean([abs(x[2]['delta']) for x in cells]):.2f} of 9); the largest moves: "
                   + "; ".join(f"{f} in {name} {t['exact']:.2f} → {t['learned']:.2f} ({t['delta']:+.2f})"
                               for name, f, t in moved[:4]) + ".")
    else:
        out.append(f"No CTC moves: all {len(cells)} (setting, metric) cells are equal with learned counterfactuals.")
    for f in ("risk_cm", "risk_ie"):
        ch = [(name, comparisons[name]["ctc"][f]) for name in comparisons]
        wins = [name for name, t in ch if (t["exact"] > comparisons[name]["ctc"]["risk_orig"]["exact"])
                != (t["learned"] > comparisons[name]["ctc"]["risk_orig"]["learned"])]
        lab = "R_CM" if f == "risk_cm" else "R_IE"
        out.append(f"Whether {lab}'s CTC beats R_orig's (paper 000's claim) "
                   + ("gets the same verdict under both sources in every setting." if not wins else
                      f"gets a different verdict with learned counterfactuals in {', '.join(wins)}."))
    sex_rows = [f"sex{a:.2f}" for a in cp.BIAS_STRENGTHS]
    age_rows = [f"age{a:.2f}" for a in cp.BIAS_STRENGTHS]

    def kept(c, eff, rows):
        e = np.mean([c["cf_effects"][eff][p]["exact"] for p in rows])
        v = np.mean([c["cf_effects"][eff][p]["learned"] for p in rows])
        return f"{e:+.3f} → {v:+.3f}"

    out.append("The shortcut read off the counterfactuals (mean over the three biased predictors): CF sex effect of "
               "the sex-biased " + "; ".join(f"{name} {kept(c, 'cf_sex_effect', sex_rows)}"
                                             for name, c in comparisons.items())
               + "; CF age effect of the age-biased " + "; ".join(f"{name} {kept(c, 'cf_age_effect', age_rows)}"
                                                                  for name, c in comparisons.items())
               + " (exact → learned).")
    rel = sorted(((name, f, mean_relative_move(c, f)) for name, c in comparisons.items() for f in fields),
                 key=lambda x: -np.nan_to_num(x[2], nan=-1.0))
    out.append("Metric values, mean relative move over the 10 predictors: largest "
               + "; ".join(f"{f} in {name} {v:.0%}" for name, f, v in rel[:4]) + "; smallest "
               + "; ".join(f"{f} in {name} {v:.1%}" for name, f, v in rel[::-1][:3] if np.isfinite(v)) + ".")
    return out


def _fmt_delta(v: float, digits: int = 3) -> str:
    if v is None or not np.isfinite(v):
        return "nan"
    if abs(v) >= 100:
        return f"{v:+.1f}"
    return f"{v:+.{digits}f}"


def _compare_table(comp: Mapping[str, Any], names: list[str], fields: tuple[str, ...], headers: tuple[str, ...],
                   digits: int = 3) -> list[str]:
    lines = ["| predictor | " + " | ".join(f"{h} exact | {h} learned | Δ" for h in headers) + " |",
             "|---|" + "---|---|---|" * len(fields)]
    for p in names:
        lines.append(f"| {p} | " + " | ".join(
            f"{_fmt(comp['metrics'][f][p]['exact'], digits)} | {_fmt(comp['metrics'][f][p]['learned'], digits)} | "
            f"{_fmt_delta(comp['metrics'][f][p]['delta'], digits)}" for f in fields) + " |")
    lines.append("| **CTC** | " + " | ".join(
        f"**{comp['ctc'][f]['exact']:.2f}** | **{comp['ctc'][f]['learned']:.2f}** | **{comp['ctc'][f]['delta']:+.2f}**"
        for f in fields) + " |")
    return lines


def learned_report(results: Mapping[str, Any]) -> list[str]:
    """The report's section on learned counterfactuals: every table with exact | learned | Δ."""
    lr = results["learned"]
    gen, comps = lr["generator"], lr["comparison"]
    g = gen["settings"]
    lines = ["", "## Exact vs learned counterfactuals", "",
             f"Every table above recomputed with **learned** counterfactual images: per site a conditional HVAE "
             f"image mechanism (`cfjax.generative`, channels {tuple(g['channels'])}, latent dims "
             f"{tuple(g['latent_dims'])}, {g['steps']} steps of batch {g['batch_size']}, EMA {g['ema_decay']}) trained on "
             "that site's training split (factual images and parents)"
             + (f" on the ELBO plus the counterfactual regulariser (weight {g['cf_weight']:g}; its anti-causal "
                "predictors of sex and age trained on the same split)" if g.get("cf_weight") else " on the ELBO")
             + "; the parent mechanisms are the true ones, so "
             "the counterfactual parents are exactly the exact source's (effusion "
             + ("held at its observed value" if results["counterfactual_label"] == "fixed" else "following age")
             + "), and each test unit's image noise is abducted once (one posterior draw) and decoded under "
             "every counterfactual parent vector. Same classifiers, same keys and bootstrap resamples; "
             "Δ = learned − exact, of seed means.", ""]
    lines += ["| site | training units | generator time | final loss (per pixel) | resumed |", "|---|---|---|---|---|"]
    for s, info in gen["sites"].items():
        lines.append(f"| {s} | {info['n_train']} | {info['seconds']:.0f} s | {info['final_loss']:.4f} | "
                     f"{'yes' if info['resumed_from_checkpoint'] else 'no'} |")
    gs = {name: lr["settings"][name]["generator"] for name in comps}
    lines += ["", "Pixel MAE of the learned against the exact counterfactual images (images in [0, 1]): "
              + "; ".join(f"{name} {g['pixel_mae']:.4f} (do(sex, age)), {g['pixel_mae_race']:.4f} (do(race))"
                          for name, g in gs.items())
              + ". Mean absolute change from the factual image under do(sex, age), learned vs exact: "
              + "; ".join(f"{name} {g['change_learned']:.4f} vs {g['change_exact']:.4f}" for name, g in gs.items()
                          if "change_learned" in g)
              + ". Largest change of a metric of the factual predictions alone "
              f"(R_orig, Brier, ECE, smECE, MCE, AUC): {max(c['unchanged_max_abs_delta'] for c in comps.values()):.1e} "
              "(they cannot move).", "", "### How much each metric and each CTC moves", ""]
    lines += [f"- {x}" for x in learned_summary(comps)]
    lines += ["", "| metric | " + " | ".join(f"{n}: CTC exact | CTC learned | ΔCTC | mean rel. move" for n in comps)
              + " |", "|---|" + "---|---|---|---|" * len(comps)]
    for f in SOURCE_DEPENDENT + (("risk_ie_cf_labels",) if all("risk_ie_cf_labels" in c["ctc"] for c in comps.values())
                                 else ()):
        lines.append(f"| {f} | " + " | ".join(
            f"{c['ctc'][f]['exact']:.2f} | {c['ctc'][f]['learned']:.2f} | {c['ctc'][f]['delta']:+.2f} | "
            f"{mean_relative_move(c, f):.1%}" for c in comps.values()) + " |")
    lines += ["", "Mean rel. move: mean over the 10 predictors of |learned − exact| / |exact| (seed means)."]
    for name, comp in comps.items():
        names = list(results["settings"][name]["names"])
        lines += ["", f"### Setting {name}: exact | learned | Δ (seed means)", "", "Risk:", ""]
        lines += _compare_table(comp, names, ("risk_cm", "risk_ie", "cvar_0.5", "cvar_0.25", "cvar_0.1", "risk_wc"),
                                ("R_CM", "R_IE", "CVaR 0.5", "CVaR 0.25", "CVaR 0.1", "R_WC"))
        lines += ["", "Calibration of the marginalised predictions:", ""]
        lines += _compare_table(comp, names, ("brier_cm", "ece_cm", "smece_cm", "mce_cm"),
                                ("Brier", "ECE", "smECE", "MCE"))
        lines += ["", "Stability (CTC counts moves towards *less* stable):", ""]
        lines += _compare_table(comp, names, tuple(f for f, _ in STABILITY),
                                ("s_var", "s_flip", "d_obs", "score_shift", "Spearman", "Kendall τ_b", "rank change"),
                                digits=4)
        lines += ["", "Counterfactual shortcut effects:", "",
                  "| predictor | CF sex effect exact | learned | Δ | CF age effect exact | learned | Δ |",
                  "|---|---|---|---|---|---|---|"]
        ef = comp["cf_effects"]
        for p in names:
            lines.append(f"| {p} | " + " | ".join(
                f"{ef[e][p]['exact']:+.3f} | {ef[e][p]['learned']:+.3f} | {ef[e][p]['delta']:+.3f}"
                for e in ("cf_sex_effect", "cf_age_effect")) + " |")
        p1, co, ag = comp["proposition1_var_cf"], comp["correlations_sex_pearson"], comp["ranking_agreement_tau"]
        lines += ["", "Proposition 1, Var CF (mean over predictors × seeds): "
                  + "; ".join(f"{z} {p1[z]['exact']:.2e} → {p1[z]['learned']:.2e}" for z in ("common", "rare"))
                  + ". ΔAUC(sex)–stability Pearson r: "
                  + ", ".join(f"{f} {co[f]['exact']:.2f} → {co[f]['learned']:.2f}" for f, _ in STABILITY)
                  + ". Label-free vs labelled ranking, mean Kendall τ: "
                  + ", ".join(f"{k} {t['exact']:.2f} → {t['learned']:.2f}" for k, t in ag.items()) + ".", "",
                  f"![reliability diagrams, learned counterfactuals](reliability_learned_{_slug(name)}.png)", "",
                  f"![ΔAUC vs stability, learned counterfactuals](scatter_learned_{_slug(name)}.png)"]
    return lines


# ------------------------------------------------------------------------- report
def _fmt(v: float, digits: int = 3) -> str:
    if v is None or not np.isfinite(v):
        return "nan"
    if abs(v) >= 100:
        return f"{v:.1f}"
    return f"{v:.{digits}f}"


def _metric_table(res: Mapping[str, Any], fields: tuple[str, ...], headers: tuple[str, ...], ci: bool,
                  digits: int = 3) -> list[str]:
    names = res["names"]
    lines = ["| predictor | " + " | ".join(headers) + " |", "|---|" + "---|" * len(headers)]
    for i, p in enumerate(names):
        cells = []
        for f in fields:
            m = res["per_seed"][f][i].mean()
            cell = _fmt(m, digits)
            if ci:
                lo, hi = res["ci95_seed_mean"][f][i]
                cell += f" [{_fmt(lo, digits)}, {_fmt(hi, digits)}]"
            cells.append(cell)
        lines.append(f"| {p} | " + " | ".join(cells) + " |")
    lines.append("| **CTC** | " + " | ".join(f"**{res['ctc'][f]:.2f}**" for f in fields) + " |")
    return lines


def findings(results: Mapping[str, Any]) -> list[str]:
    """Findings measured from the numbers, one bullet each."""
    out = []
    for name, _, _ in SETTINGS:
        r = results["settings"][name]
        names = r["names"]
        d_sex, d_age = np.asarray(r["delta_auc"]["sex"]).mean(1), np.asarray(r["delta_auc"]["age_group"]).mean(1)
        sex_rows = [names.index(f"sex{a:.2f}") for a in cp.BIAS_STRENGTHS]
        age_rows = [names.index(f"age{a:.2f}") for a in cp.BIAS_STRENGTHS]
        b = names.index("basic")
        sex_eff = np.asarray(r["cf_sex_effect"]).mean(1)
        age_eff = np.asarray(r["cf_age_effect"]).mean(1)
        exceeds_sex = all(d_sex[i] > d_sex[b] for i in sex_rows)
        grows_sex = bool(np.all(np.diff(d_sex[sex_rows]) > 0))
        exceeds_age = all(d_age[i] > d_age[b] for i in age_rows)
        grows_age = bool(np.all(np.diff(d_age[age_rows]) > 0))
        out.append(
            f"**{name}: shortcut, ΔAUC.** ΔAUC over sex: basic {d_sex[b]:.3f}, sex-biased "
            f"{', '.join(f'{d_sex[i]:.3f}' for i in sex_rows)} — {'all exceed' if exceeds_sex else 'not all exceed'} "
            f"basic's, {'growing' if grows_sex else 'not monotone'} with α. ΔAUC over age groups: basic "
            f"{d_age[b]:.3f}, age-biased {', '.join(f'{d_age[i]:.3f}' for i in age_rows)} — "
            f"{'all exceed' if exceeds_age else 'not all exceed'} basic's, {'growing' if grows_age else 'not monotone'} "
            f"with β_age (seed means).")
        out.append(
            f"**{name}: shortcut, counterfactual effect.** Mean p(do(female)) − p(do(male)): basic "
            f"{sex_eff[b]:+.3f}, sex-biased {', '.join(f'{sex_eff[i]:+.3f}' for i in sex_rows)}; mean "
            f"p(do(age 90)) − p(do(age 20)): basic {age_eff[b]:+.3f}, age-biased "
            f"{', '.join(f'{age_eff[i]:+.3f}' for i in age_rows)}.")
        ctc = r["ctc"]
        paper = PAPER_RISK[name][-1]
        out.append(
            f"**{name}: CTC.** R_orig {ctc['risk_orig']:.2f}, R_CM {ctc['risk_cm']:.2f}, R_IE {ctc['risk_ie']:.2f} "
            f"(of 9; paper 000: {paper[0]:.2f}, {paper[1]:.2f}, {paper[2]:.2f}). "
            + " ".join(f"{lab} {'beats' if ctc[f] > ctc['risk_orig'] else 'ties' if ctc[f] == ctc['risk_orig'] else 'is below'} R_orig"
                       + ("" if ctc[f] > ctc['risk_orig'] else " (the paper's finding does NOT reproduce here)") + "."
                       for f, lab in (("risk_cm", "R_CM"), ("risk_ie", "R_IE"))))
        cs = r["correlations"]["sex"]
        pos = [f for f, _ in STABILITY if f in ("s_var", "s_flip", "d_obs", "score_shift")
               and np.isfinite(cs[f]["pearson"]) and cs[f]["pearson"] > 0]
        strong = [f for f in pos if cs[f]["pearson"] >= 0.5]
        out.append(
            f"**{name}: stability vs ΔAUC(sex)** over the {len(DELTA_NAMES) * len(r['seeds'])} predictor-seed pairs: "
            + ", ".join(f"{f} r = {cs[f]['pearson']:.2f} (ρ = {cs[f]['spearman']:.2f})"
                        for f in ("s_var", "s_flip", "d_obs", "score_shift"))
            + f"; {len(pos)} of 4 instability measures correlate positively, {len(strong)} strongly (r ≥ 0.5)"
            + (" — as paper 000 reports (strong positive correlation)." if len(strong) >= 2 else
               " — paper 000's strong positive correlation does NOT reproduce here."))
        p1 = r["proposition1"]
        vo, vc = np.asarray(p1["var_obs"]).mean((0, 1)), np.asarray(p1["var_cf"]).mean((0, 1))
        bo, bc = np.asarray(p1["bound_obs"]).mean((0, 1)), np.asarray(p1["bound_cf"]).mean((0, 1))
        out.append(
            f"**{name}: Proposition 1** (race, averaged over the 10 predictors × seeds): rare subgroup "
            f"(race 2, n_z = {p1['n_z'][2]:.0f} of {p1['n']}) Var obs {vo[2]:.2e} vs Var CF {vc[2]:.2e} "
            f"({'below' if vc[2] < vo[2] else 'NOT below'}; σ²/n_z = {bo[2]:.2e}, bound σ²/n = {bc[2]:.2e}, "
            f"CF {'within' if vc[2] <= bc[2] * 1.1 else 'above'} it); common subgroup (race 0, n_z = "
            f"{p1['n_z'][0]:.0f}) Var obs {vo[0]:.2e} vs Var CF {vc[0]:.2e}.")
        ag = r["ranking_agreement"]
        out.append(
            f"**{name}: label-free vs labelled ranking** of the 10 predictors (mean over seeds): "
            + "; ".join(f"{k}: τ = {_nanmean(v['kendall_tau']):.2f}, {np.mean(v['pairs_same_order']):.0%} of pairs "
                        f"ordered alike" for k, v in ag.items())
            + ". (τ is undefined for a seed whose label-free metric is constant over the predictors; such seeds "
              "are left out of the mean, and their pairs count as not ordered alike.)")
    return out


def write_report(results: Mapping[str, Any], out: str, quick: bool) -> None:
    cfg = results["config"]
    lines = [
        "# Paper 000's study on the synthetic chest SCM: counterfactual marginalisation of trained classifiers",
        "",
        f"Generated by `python -m experiments.marginalisation{' --quick' if quick else ''} --seeds "
        f"{len(results['seeds'])} --counterfactual-label {results['counterfactual_label']}"
        f"{' --learned' if 'learned' in results else ''}`"
        f"{' (the **quick** configuration: smaller images, N and steps)' if quick else ''}; "
        f"wall time {results['wall_time_s']:.0f} s"
        + (" (training restored from the checkpoints of an earlier run of the same configuration)."
           if any(t["resumed_from_checkpoint"] for t in results["training"].values()) else "."),
        "",
        f"- Images {cfg['size']}×{cfg['size']}, ChestSCM prevalence {cfg['prevalence']}, difficulty knob "
        f"effusion_size = {cfg['effusion_size']}; training pool {cfg['n_train']} units per site, validation "
        f"{cfg['n_val']}; CNN features {cfg['features']}, AdamW lr {cfg['learning_rate']}, ≤ {cfg['steps']} steps "
        f"(batch {cfg['batch_size']}), early stopping on validation AUC every {cfg['eval_every']} steps, "
        f"patience {cfg['patience']}.",
        f"- Seven trained predictors × {len(results['seeds'])} seeds = "
        f"{7 * len(results['seeds'])} members trained as ONE vmapped ensemble per training site; the logit "
        "offsets wrap the basic members.",
        "- Sites: A = `Acquisition()` (gain 1, gamma 1, noise 0.04, offset 0); B = "
        f"`Acquisition(gain={SITE_B.gain}, gamma={SITE_B.gamma}, noise={SITE_B.noise}, offset={SITE_B.offset})`.",
        f"- Test sets: the balanced split ({cfg['test_per_cell']} units per sex × age-group cell, effusion "
        f"prevalence {cfg['test_prevalence']} in every cell) for A and B; {cfg['n_natural']} units sampled from "
        "site B's SCM (natural demographics) for A->B.",
        "- K = 16 exact counterfactual images per test unit (do(sex ∈ {M, F}, age ∈ 20, 30, …, 90)), q uniform. "
        "Parents under do(sex, age): sex and age set; race kept; lung size follows (abducted noise); effusion "
        + ("held at its observed value (paper 000's setting), so every counterfactual is scored against the "
           "factual label." if results["counterfactual_label"] == "fixed" else
           "follows the new age (abducted noise): the images carry counterfactual labels; the definitions §1 metrics "
           "score against the factual label, and `risk_ie_cf_labels` scores R_IE against the counterfactual ones."),
        f"- Bootstrap: {cfg['bootstrap']} paired resamples of test units; intervals are 95% percentile intervals "
        "of the seed mean. Tables show seed means.",
        "",
        "## Findings (measured)",
        "",
    ]
    lines += [f"- {f}" for f in findings(results)]
    for name, train_site_name, desc in SETTINGS:
        r = results["settings"][name]
        slug = _slug(name)
        lines += ["", f"## Setting {name}: trained on site {train_site_name}, tested on the {desc} (n = {r['n']}, "
                  f"{r['n_pos']} positive)", ""]
        lines += ["### AUC and ΔAUC (seed means)", "",
                  "| predictor | AUC | ΔAUC sex | ΔAUC age group | ΔAUC race | CF sex effect | CF age effect |",
                  "|---|---|---|---|---|---|---|"]
        for i, p in enumerate(r["names"]):
            lines.append(f"| {p} | {np.mean(r['auc'][i]):.3f} | "
                         + " | ".join(f"{np.mean(r['delta_auc'][a][i]):.3f}" for a in ATTRIBUTES)
                         + f" | {np.mean(r['cf_sex_effect'][i]):+.3f} | {np.mean(r['cf_age_effect'][i]):+.3f} |")
        lines += ["", "CF sex effect: mean over units and ages of p(do(female)) − p(do(male)); CF age effect: "
                  "mean over units and sexes of p(do(age 90)) − p(do(age 20)).", ""]
        lines += ["### Risk (seed mean [95% bootstrap interval])", ""]
        lines += _metric_table(r, RISKS, ("R_orig", "R_CM", "R_IE", "CVaR 0.5", "CVaR 0.25", "CVaR 0.1", "R_WC"), True)
        pr = PAPER_RISK[name]
        lines += ["", f"Paper 000 ({'CheXpert' if name == 'A' else 'MIMIC' if name == 'B' else 'CheXpert → MIMIC'}), "
                  "same columns:", "", "| predictor | R_orig | R_CM | R_IE | CVaR 0.5 | CVaR 0.25 | CVaR 0.1 | R_WC |",
                  "|---|---|---|---|---|---|---|---|"]
        for i, p in enumerate(r["names"]):
            lines.append(f"| {p} | " + " | ".join(f"{v:.3f}" for v in pr[i]) + " |")
        lines.append("| **CTC** | " + " | ".join(f"**{v:.2f}**" for v in pr[-1]) + " |")
        if "risk_ie_cf_labels" in r["ctc"]:
            lines += ["", f"R_IE against the counterfactual labels: CTC {r['ctc']['risk_ie_cf_labels']:.2f}; "
                      "per predictor " + ", ".join(f"{p} {np.mean(r['per_seed']['risk_ie_cf_labels'][i]):.3f}"
                                                   for i, p in enumerate(r["names"])) + "."]
        lines += ["", "### Calibration (seed mean [95% bootstrap interval])", ""]
        lines += _metric_table(r, CALIBRATION, ("Brier", "ECE", "smECE", "MCE", "Brier (marg.)", "ECE (marg.)",
                                                "smECE (marg.)", "MCE (marg.)"), True)
        pc = PAPER_CALIBRATION[name]
        lines += ["", "Paper 000, original Brier / ECE / MCE then marginalised Brier / ECE / MCE: "
                  + "; ".join(f"{p} {pc[i, 3]:.3f}/{pc[i, 4]:.3f}/{pc[i, 5]:.3f} → {pc[i, 0]:.3f}/{pc[i, 1]:.3f}/"
                              f"{pc[i, 2]:.3f}" for i, p in enumerate(r["names"])) + ".",
                  "", f"![reliability diagrams](reliability_{slug}.png)", ""]
        lines += ["### Stability (seed mean [95% bootstrap interval]; CTC counts moves towards *less* stable)", ""]
        lines += _metric_table(r, tuple(f for f, _ in STABILITY),
                               ("s_var", "s_flip", "d_obs", "score_shift", "Spearman", "Kendall τ_b", "rank change"),
                               True, digits=4)
        if name == "A":
            ps = PAPER_STABILITY_A
            lines += ["", "Paper 000 Table 5 (CheXpert; its D_obs is our score_shift; rank change over n = 5180): "
                      + "; ".join(f"{p} s_var {ps[i, 0]:.4f}, s_flip {ps[i, 1]:.3f}, shift {ps[i, 2]:.3f}, "
                                  f"ρ {ps[i, 3]:.3f}, τ_b {ps[i, 4]:.3f}" for i, p in enumerate(r["names"])) + "."]
        lines += ["", "### ΔAUC against stability over the basic/sex/age predictor-seed pairs", "",
                  "| attribute | " + " | ".join(f for f, _ in STABILITY) + " |", "|---|" + "---|" * len(STABILITY)]
        for attr in ATTRIBUTES:
            c = r["correlations"][attr]
            lines.append(f"| {attr} | " + " | ".join(f"{c[f]['pearson']:.2f} / {c[f]['spearman']:.2f}"
                                                     for f, _ in STABILITY) + " |")
        lines += ["", "Cells: Pearson r / Spearman ρ.", "", f"![ΔAUC vs stability](scatter_{slug}.png)", ""]
        p1 = r["proposition1"]
        lines += ["### Proposition 1: subgroup-mean estimators over resampled test sets", "",
                  f"Attribute race (do(race = z) alone); {p1['resamples']} bootstrap test sets of n = {p1['n']}; "
                  f"n_z = {', '.join(f'{v:.0f}' for v in p1['n_z'])}. σ² = Var[g(X) | race = z] on the test set; "
                  "σ²_gen = 0 (exact counterfactuals). Observational estimator: its expected variance σ²/n_z; "
                  "counterfactual: bounded by σ²/n.", "",
                  "| predictor | subgroup | Var obs | σ²/n_z | Var CF | bound σ²/n | Var CF / Var obs |",
                  "|---|---|---|---|---|---|---|"]
        for i, p in enumerate(r["names"]):
            for label, z in (("common (race 0)", 0), ("rare (race 2)", 2)):
                vo, vc = np.mean(p1["var_obs"][i][:, z]), np.mean(p1["var_cf"][i][:, z])
                lines.append(f"| {p} | {label} | {vo:.2e} | {np.mean(p1['bound_obs'][i][:, z]):.2e} | {vc:.2e} | "
                             f"{np.mean(p1['bound_cf'][i][:, z]):.2e} | {vc / vo:.3f} |")
        lines += ["", "### Label-free stability ranking vs labelled risk ranking of the 10 predictors", "",
                  "| label-free ~ labelled | Kendall τ per seed | pairs ordered alike per seed |", "|---|---|---|"]
        for k, v in r["ranking_agreement"].items():
            lines.append(f"| {k} | {', '.join(f'{t:.2f}' for t in v['kendall_tau'])} | "
                         f"{', '.join(f'{s:.0%}' for s in v['pairs_same_order'])} |")
    if "learned" in results:
        lines += learned_report(results)
    lines += ["", "## Files", "",
              "`results.json` (every number; per setting `auc`, `delta_auc`, `ctc`, `per_seed` reports, "
              "`ci95_seed_mean`, `stratified_auc`, `correlations`, `proposition1`, `ranking_agreement`), "
              "`predictions_<setting>.npz` (p_obs (10, S, N), p_cf (10, S, N, K), labels and attributes), "
              "`checkpoints/site_A|B` (orbax), PNG figures.", ""]
    if "learned" in results:
        lines[-1:] = ["", "With learned counterfactuals: `learned` in results.json (`generator`; `settings`, every "
                      "number as above; `comparison`: per setting and metric, per predictor, `exact`, `learned`, "
                      "`delta`, and the CTC likewise), `predictions_<setting>_learned.npz`, "
                      "`checkpoints/generator_site_A|B` (orbax).", ""]
    atomic_write_bytes(os.path.join(out, "report.md"), "\n".join(lines).encode())


def _jsonable(x: Any) -> Any:
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items() if not str(k).startswith("_")}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, (np.ndarray, jax.Array)):
        return _jsonable(np.asarray(x).tolist())
    if isinstance(x, (np.floating, float)):
        return float(x) if np.isfinite(x) else None
    if isinstance(x, np.integer):
        return int(x)
    return x


def _by_name(res: dict[str, Any]) -> dict[str, Any]:
    """Arrays ``(10, S, ...)`` keyed by predictor name for results.json."""
    names = res["names"]

    def named(v):
        return {p: v[i] for i, p in enumerate(names)}

    out = dict(res)
    out["auc"] = named(res["auc"])
    out["delta_auc"] = {a: named(v) for a, v in res["delta_auc"].items()}
    out["stratified_auc"] = {a: named(v) for a, v in res["stratified_auc"].items()}
    out["per_seed"] = {f: named(v) for f, v in res["per_seed"].items()}
    out["ci95_seed_mean"] = {f: named(v) for f, v in res["ci95_seed_mean"].items()}
    out["cf_sex_effect"] = named(res["cf_sex_effect"])
    out["cf_age_effect"] = named(res["cf_age_effect"])
    p1 = dict(res["proposition1"])
    for f in ("var_obs", "var_cf", "bound_obs", "bound_cf", "sigma2"):
        p1[f] = named(p1[f])
    out["proposition1"] = p1
    return out


# ------------------------------------------------------------------------- main
def train_generators(chests: Mapping[str, cf.data.ChestSCM], trained: Mapping[str, Any],
                     generator: ls.GeneratorSettings, out: str,
                     log: Callable[[str], None]) -> tuple[ls.LearnedSource, dict[str, Any]]:
    """One HVAE image generator per site on its training split (checkpointed under
    ``checkpoints/generator_site_<site>``); the learned counterfactual source over them."""
    fits, info = {}, {}
    for data_seed, s in enumerate(("A", "B")):
        tr = trained[s]["data"]["train"]
        ckpt = os.path.abspath(os.path.join(out, "checkpoints", f"generator_site_{s}"))
        resumed = cp.latest_checkpoint_step(ckpt) is not None
        log(f"site {s}: HVAE image generator, {generator.steps} steps on {len(tr['image'])} training images"
            + (" (resuming from its checkpoint)" if resumed else ""))
        t0 = time.perf_counter()
        fit = ls.train_generator(chests[s], tr, generator, jax.random.key(2000 + data_seed), checkpoint_dir=ckpt)
        seconds = time.perf_counter() - t0
        tail = max(1, generator.steps // 10)
        info[s] = {"n_train": int(len(tr["image"])), "seconds": seconds, "resumed_from_checkpoint": resumed,
                   **{f"final_{k}": float(np.nanmean(fit.history[k][-tail:])) for k in ("loss", "rec", "kl")}}
        log(f"  trained in {seconds:.1f} s; loss over the last {tail} steps {info[s]['final_loss']:.4f}")
        fits[chests[s].site] = fit
    return ls.LearnedSource(fits, chunk=generator.chunk), info


def run(config: Config, out: str, seeds: tuple[int, ...] = (0, 1, 2), label: str = "fixed",
        source: CounterfactualSource = exact_counterfactuals, quick: bool = False,
        generator: ls.GeneratorSettings | None = None) -> dict[str, Any]:
    """The whole study; writes every output under ``out`` and returns the results.

    With ``generator``, one HVAE image generator per site is trained as well and every table is
    computed a second time with its learned counterfactuals (:class:`ls.LearnedSource`),
    compared side by side under ``results["learned"]`` and in the report."""
    log = _Clock()
    os.makedirs(out, exist_ok=True)
    model = cp.EffusionCNN(features=tuple(config.features))
    chests = {s: cf.data.ChestSCM(prevalence=config.prevalence, size=config.size, site=site,
                                  effusion_size=config.effusion_size)
              for s, site in (("A", SITE_A), ("B", SITE_B))}
    trained = {}
    for data_seed, s in enumerate(("A", "B")):
        log(f"site {s}: data and training")
        trained[s] = train_site(chests[s], data_seed, seeds, config, model, out, log)
    natural = chests["B"].sample(jax.random.key(100), config.n_natural)
    tests = {"A": trained["A"]["data"]["test"], "B": trained["B"]["data"]["test"], "A->B": natural}
    if generator is not None:
        learned_source, generator_info = train_generators(chests, trained, generator, out, log)
        learned, comparison = {}, {}
    settings = {}
    for i, (name, train_on, desc) in enumerate(SETTINGS):
        log(f"setting {name}: trained on site {train_on}, tested on the {desc}")
        res = evaluate_setting(name, model, trained[train_on], chests["B" if name != "A" else "A"], tests[name],
                               config, jax.random.key(1000 + i), label, source, out, log)
        reliability_figure(res, os.path.join(out, f"reliability_{_slug(name)}.png"),
                           f"Setting {name}: smoothed reliability, seed {res['seeds'][0]}")
        scatter_figure(res, os.path.join(out, f"scatter_{_slug(name)}.png"), f"Setting {name}: ΔAUC vs stability")
        settings[name] = res
        log(f"  {name}: AUC basic {res['auc'][0].mean():.3f}; CTC R_orig {res['ctc']['risk_orig']:.2f}, "
            f"R_CM {res['ctc']['risk_cm']:.2f}, R_IE {res['ctc']['risk_ie']:.2f}")
        if generator is not None:
            log(f"setting {name}: again with learned counterfactuals")
            first = len(learned_source.calls)
            res_l = evaluate_setting(name, model, trained[train_on], chests["B" if name != "A" else "A"], tests[name],
                                     config, jax.random.key(1000 + i), label, learned_source, out, log, tag="_learned")
            calls = learned_source.calls[first:]
            res_l["generator"] = {"pixel_mae": calls[0]["pixel_mae"], "pixel_mae_by_k": calls[0]["mae_by_k"],
                                  "pixel_mae_race": calls[1]["pixel_mae"], "change_learned": calls[0]["change_learned"],
                                  "change_exact": calls[0]["change_exact"], "seconds": sum(c["seconds"] for c in calls)}
            learned[name], comparison[name] = res_l, compare_settings(res, res_l)
            reliability_figure(res_l, os.path.join(out, f"reliability_learned_{_slug(name)}.png"),
                               f"Setting {name}, learned counterfactuals: smoothed reliability, seed {res_l['seeds'][0]}")
            scatter_figure(res_l, os.path.join(out, f"scatter_learned_{_slug(name)}.png"),
                           f"Setting {name}, learned counterfactuals: ΔAUC vs stability")
            moved = {f: t["delta"] for f, t in comparison[name]["ctc"].items() if t["delta"] != 0}
            log(f"  {name} learned: pixel MAE vs exact {calls[0]['pixel_mae']:.4f}; CTC moves "
                + (", ".join(f"{f} {d:+.2f}" for f, d in moved.items()) if moved else "none"))
    results = {
        "config": dataclasses.asdict(config), "devices": jax.local_device_count(), "quick": quick, "seeds": list(seeds), "counterfactual_label": label,
        "sites": {"A": SITE_A._asdict(), "B": SITE_B._asdict()},
        "training": {s: {"steps": t["steps"], "resumed_from_checkpoint": t["resumed"],
                         "members": list(t["family"].names),
                         "best_val_auc": t["best_val_auc"], "best_step": t["best_step"]} for s, t in trained.items()},
        "settings": settings,
    }
    if generator is not None:
        results["learned"] = {"generator": {"settings": dataclasses.asdict(generator), "sites": generator_info},
                              "settings": learned, "comparison": comparison}
    results["wall_time_s"] = log.elapsed
    write_report(results, out, quick)
    payload = dict(results, settings={k: _by_name(v) for k, v in settings.items()})
    if generator is not None:
        payload["learned"] = dict(results["learned"], settings={k: _by_name(v) for k, v in learned.items()})
    atomic_write_bytes(os.path.join(out, "results.json"), json.dumps(_jsonable(payload), indent=1).encode())
    log(f"wrote {out}/report.md and results.json; wall time {log.elapsed:.0f} s")
    return results


def main(argv: list[str] | None = None, *, config: Config | None = None,
         generator: ls.GeneratorSettings | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="the quick configuration (≤ 10 minutes on 2 CPU cores)")
    ap.add_argument("--out", default=os.path.join("experiments", "reports", "marginalisation"))
    ap.add_argument("--seeds", type=int, default=3, help="seeds per trained predictor")
    ap.add_argument("--counterfactual-label", choices=cf.data.LABEL_MODES, default="fixed",
                    help="effusion held at its observed value (fixed) or following age (follows)")
    ap.add_argument("--learned", action="store_true",
                    help="also train an HVAE image generator per site and compute every table with its learned "
                         "counterfactuals beside the exact ones")
    args = ap.parse_args(argv)
    if args.seeds < 2:
        ap.error("--seeds: at least 2 (correlations over predictor-seed pairs)")
    if config is None:
        config = QUICK if args.quick else FULL
    if args.learned and generator is None:
        generator = ls.GENERATOR_QUICK if args.quick else ls.GENERATOR_FULL
    return run(config, args.out, tuple(range(args.seeds)), args.counterfactual_label, quick=args.quick,
               generator=generator if args.learned else None)


if __name__ == "__main__":
    main()
