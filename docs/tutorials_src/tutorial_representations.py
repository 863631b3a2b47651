"""
Counterfactual representations against true counterfactual texts
=================================================================

Paper 002 builds a text's counterfactual in embedding space: remove the component of the
embedding a concept explains (a concept subspace) and put back the component of another value
of the concept. cfjax scores such counterfactual representations (CFRs) against the embeddings
of true counterfactual texts, where they exist: do the classifier's decisions on the CFRs
agree with its decisions on the true counterfactuals (PIP), how far do its probabilities move
(ATV), and what is the classifier's TPR gap between the concept's values? This tutorial uses
synthetic embeddings whose true counterfactuals are known.
"""

# %%
# Embeddings with their true counterfactuals
# ------------------------------------------
# ``X`` the embeddings of n texts, ``z`` the concept's value, ``y`` the label, ``X_cf`` the
# embedding of each text rewritten with the other value ``z_cf``. On the "aggressive" split the
# concept is correlated with the label, so a classifier trained there reads the concept.
import matplotlib.pyplot as plt
import numpy as np

from cfjax import representations as R

data = R.synthetic_embeddings(4000, key=0)                              # Z independent of Y
biased = R.synthetic_embeddings(4000, split="aggressive", key=0, sample_key=2)

# %%
# Counterfactual representations
# ------------------------------
# :func:`~cfjax.representations.fit_cfr` estimates the concept subspace and the per-value
# regressions once; :func:`~cfjax.representations.counterfactuals` then gives every unit's CFR
# for the value it is sent to.
model = R.fit_cfr(data.X, data.z)
cfr = R.counterfactuals(model, data.X, data.z_cf)                       # (n, d)

# %%
# Scoring two classifiers
# -----------------------
# One trained on the balanced split, one on the aggressive split. For each: PIP and ATV of the
# CFRs against the true counterfactuals, beside the no-intervention baseline (the original
# embedding standing in for its counterfactual), and the TPR gap between the concept's values.
rows = {}
for name, train in (("balanced", data), ("aggressive", biased)):
    clf = R.train_logistic(train.X, train.y)
    s = R.score(clf(data.X), clf(data.X_cf), clf(cfr))
    gap = R.tpr_gap(data.y, np.argmax(np.asarray(clf(data.X)), axis=1), data.z)
    rows[name] = s
    print(f"{name:>10}: PIP {float(s.pip):.2f} (baseline {float(s.pip_baseline):.2f}), "
          f"ATV {float(s.atv):.2f} (baseline {float(s.atv_baseline):.2f}), TPR gap {np.round(np.asarray(gap), 2)}")

# %%
# The figure
# ----------
# CFRs help where the classifier reads the concept: there the no-intervention baseline says the
# decision would not change, while the true counterfactuals say it does.
fig, axes = plt.subplots(1, 2, figsize=(8, 3.2))
x = np.arange(2)
for ax, (field, label) in zip(axes, (("pip", "PIP (higher is better)"), ("atv", "ATV (lower is better)"))):
    ax.bar(x - 0.2, [float(getattr(rows[n], field)) for n in rows], 0.4, label="CFR")
    ax.bar(x + 0.2, [float(getattr(rows[n], field + "_baseline")) for n in rows], 0.4, label="no intervention")
    ax.set_xticks(x, [f"trained {n}" for n in rows])
    ax.set_title(label, fontsize=10)
axes[0].legend(fontsize=8)
fig.tight_layout()
plt.show()
