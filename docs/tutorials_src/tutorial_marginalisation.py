"""
Evaluate a classifier with exact and learned counterfactuals
============================================================

Counterfactual marginalisation (paper 000) asks how a classifier's predictions move when a
nuisance parent of the image changes: for every test image, K counterfactuals under
interventions on sex and age (K = 16), and metrics reduced over that intervention axis —
risk, calibration, tail risk and stability. This tutorial trains a small effusion classifier
on a shortcut-biased set of synthetic chest radiographs, generates each test unit's
counterfactual images twice — exactly, with the synthetic SCM's renderer, and with a learned
image mechanism (a conditional HVAE fitted to the images) — and compares the metrics the two
sources give. Sizes are small so that it runs in about two minutes on a CPU.
"""

# %%
# The data: a structural causal model with an image
# --------------------------------------------------
# :class:`cfjax.data.ChestSCM` draws sex, age and effusion, then renders a radiograph from
# them and from exogenous noise. Its image mechanism is invertible in that noise, so a unit's
# counterfactual under ``do(sex, age)`` is exact. The training set drops most women without
# effusion, so sex becomes a shortcut for the label.
import jax
import matplotlib.pyplot as plt
import numpy as np

import cfjax as cf
from cfjax import predictors

chest = cf.data.ChestSCM(size=32, effusion_size=0.4)  # larger effusions: an easier task
pool = chest.sample(1200, key=0)
test = chest.sample(200, key=1)
sex, effusion = pool["parents"]["sex"], pool["parents"]["effusion"]
keep = np.asarray((sex == 0) | (effusion == 1) | (np.arange(1200) % 5 == 0))  # a sex shortcut
print(f"{keep.sum()} training units; effusion rate by sex:",
      [float(effusion[keep & (np.asarray(sex) == s)].mean()) for s in (0, 1)])

# %%
# A classifier, trained as a one-member ensemble
# ----------------------------------------------
model = predictors.EffusionCNN()
config = predictors.EnsembleConfig(steps=400, batch_size=64, warmup=20, eval_every=100)
state = predictors.train(model, pool["image"], effusion, keep[None], test["image"],
                         test["parents"]["effusion"], config, seeds=[0],
                         options=predictors.TrainOptions(progress=False))
print("validation AUC", float(state.best_auc[0]))

# %%
# Exact counterfactuals: sex × 8 ages
# -----------------------------------
# :func:`cfjax.scm.intervention_grid` builds the K = 16 interventions and their weights; the
# counterfactual images come back units first, ``(N, K, H, W)``, as every cfjax function
# takes them.
do, weights = cf.scm.intervention_grid({"sex": [0, 1], "age": np.linspace(20.0, 90.0, 8)})
exact = chest.counterfactuals(test, do, key=2)["image"]
p_obs = predictors.predict(model, state.best_params, test["image"])[0]        # (N,)
p_exact = predictors.predict(model, state.best_params, exact)[0]              # (N, K)
y = test["parents"]["effusion"]
report_exact = cf.metrics.evaluate(p_obs, p_exact, y, weights=weights)
print(report_exact)

# %%
# Learned counterfactuals: a conditional HVAE as the image mechanism
# ------------------------------------------------------------------
# The same SCM with its image mechanism swapped for an :class:`~cfjax.generative.ImageHVAE`
# fitted to the factual images (:func:`cfjax.generative.fit_generator`). Abduction and
# prediction now go through the learned model, as they would on real radiographs.
from cfjax import generative as G

scm = chest.image_scm
mechanisms = {v: scm.mechanism(v) for v in scm.nodes}
gen_config = G.GeneratorConfig(hvae=G.HVAEConfig(image_size=32), steps=300, warmup=20,
                               kl_warmup=100, chunk_steps=100)
data = {**pool["parents"], "image": pool["image"]}
fit = G.fit_generator(data, gen_config, scm=cf.scm.SCM(scm.graph, mechanisms | {"image": G.ImageHVAE(gen_config.hvae)}),
                      key=3, progress=False)
learned_scm = cf.scm.SCM(scm.graph, mechanisms | {"image": fit.mechanism})
params = chest.params() | {"image": fit.params}
factual = {**test["parents"], "image": test["image"]}
learned = learned_scm.counterfactual(params, factual, do, key=4, chunk_size=64)["image"]
p_learned = predictors.predict(model, state.best_params, learned)[0]
report_learned = cf.metrics.evaluate(p_obs, p_learned, y, weights=weights)
print("pixel MAE of the learned counterfactuals:", float(np.abs(np.asarray(learned) - np.asarray(exact)).mean()))

# %%
# The two sources side by side
# ----------------------------
# Risk of the observed predictions (``risk_orig``), the counterfactually marginalised risk
# (``risk_cm``), the tail risk (``risk_cvar`` at its last level, alpha = 0.1: the mean of each
# unit's worst tenth of counterfactual losses) and the share of units whose decision flips under
# some intervention (``s_flip``).
fields = ["risk_orig", "risk_cm", "risk_cvar", "s_flip"]
values = np.array([[float(np.ravel(np.asarray(getattr(r, f)))[-1]) for f in fields]
                   for r in (report_exact, report_learned)])
fig, (ax_img, ax_bar) = plt.subplots(1, 2, figsize=(9, 3.4), gridspec_kw={"width_ratios": [1.3, 1]})
row = np.concatenate([np.asarray(test["image"][0])] + [np.asarray(exact[0, k]) for k in range(0, 16, 4)]
                     + [np.asarray(learned[0, k]) for k in range(0, 16, 4)], axis=1)
ax_img.imshow(row, cmap="gray", vmin=0, vmax=1)
ax_img.set_title("unit 0: factual, 4 exact, then 4 learned counterfactuals", fontsize=9)
ax_img.axis("off")
x = np.arange(len(fields))
ax_bar.bar(x - 0.2, values[0], 0.4, label="exact")
ax_bar.bar(x + 0.2, values[1], 0.4, label="learned")
ax_bar.set_xticks(x, fields, fontsize=8)
ax_bar.legend(fontsize=8)
ax_bar.set_title("metrics over the intervention axis", fontsize=9)
fig.tight_layout()
plt.show()
