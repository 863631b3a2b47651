"""
A sensitivity analysis a reviewer accepts
=========================================

Counterfactual fairness (paper 001) holds under an assumed causal model; unmeasured
confounding — errors that are in truth correlated — can break it. cfjax fits the model and the
fair predictor, then searches, by differentiable optimisation, for the worst counterfactual
unfairness (CFU) any error correlation within a budget ``|P_jk| <= p_max`` could cause. A
reviewer then asks three things: how strong is such confounding, against the data (benchmarks);
how sure are the numbers (bootstrap intervals); and what does CFU look like over two
correlations (a contour). This tutorial answers all three on a synthetic stand-in for the law
school data whose true error correlation is 0.5.
"""

# %%
# Fit the causal model and the fair predictor
# -------------------------------------------
import jax
import matplotlib.pyplot as plt
import numpy as np

import cfjax.sensitivity as S

jax.config.update("jax_enable_x64", True)  # CFU is often 1e-10 to 1e-4: float64
problem = S.synthetic(1500, correlation=0.5, key=0)
model = S.fit(problem.graph, problem.data)
print("CFU at the true correlation:", float(S.cfu(model, problem.true_correlation)))

# %%
# The worst case within each budget
# ---------------------------------
# One vmapped optax program over budgets × restarts; equal :class:`~cfjax.sensitivity.SearchConfig`
# objects compile once.
budgets = np.linspace(0.0, 0.9, 7)
config = S.SearchConfig(restarts=2, steps=150)
curves = {name: S.worst_case(model.scoring(name), budgets, key=1, config=config)
          for name in ("fair", "unconstrained", "blind")}
print(np.asarray(curves["fair"].cfu))

# %%
# How strong is that confounding? Benchmarks against the observed parents
# ------------------------------------------------------------------------
# The correlation a confounder k times as strong as the sensitive attribute (by its partial R²
# in each feature's equation) would induce, for k = 1, 2, 3.
bench = S.benchmarks(model)
print(bench)

# %%
# How sure are the numbers? A bootstrap over the units
# ----------------------------------------------------
# Every model refitted on each resample, the whole analysis as one vmapped program.
intervals = S.bootstrap(model, budgets, key=2, resamples=20, worst=curves["fair"], config=config)
print(intervals)

# %%
# The curve a reviewer reads
# --------------------------
# The floor (CFU without confounding), the baselines' own worst cases, the benchmark budgets and
# the bootstrap band, and a caption that says what to conclude.
marks = bench.marks()
fig = S.plot_curve(curves, benchmarks=marks,
                   low={"fair": np.asarray(intervals.low["worst_case"])},
                   high={"fair": np.asarray(intervals.high["worst_case"])})
print(S.curve_caption(curves, benchmarks=marks))
plt.show()
jax.config.update("jax_enable_x64", False)
