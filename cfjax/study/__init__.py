"""Paper 000's study: counterfactual marginalisation of trained image classifiers.

On the synthetic chest-radiograph SCM (:class:`cfjax.data.ChestSCM`), two acquisition sites
and three settings (train and test on site A; on site B; train on A, test on B's natural
demographics): the ten predictors of paper 000 (seven trained members × seeds as one vmapped
ensemble, three logit offsets), K = 16 counterfactual images per test unit (sex × 8 ages) from
a counterfactual *source* (exact by default; a learned HVAE generator with
:class:`GeneratorSettings`), and every table: risk, calibration, stability, their CTC, bootstrap
intervals, ΔAUC and its correlation with stability (with bootstrap intervals,
:mod:`cfjax.study.correlations`; figures in :mod:`cfjax.study.plots`), Proposition 1, ranking agreement; and a
check that each setting's basic classifier is clearly above chance (:mod:`cfjax.study.diagnostics`,
:class:`WeakClassifierWarning`).

The training arm (:mod:`cfjax.study.cftraining`, :func:`run_arm`) trains the shortcut away
with the same counterfactuals (counterfactual objectives, exact and learned sources) and
compares it with reweighting and group DRO.

:func:`run` does it all, writes ``report.md``, ``results.json``, figures, predictions and
checkpoints and returns a :class:`StudyResult`; ``experiments/marginalisation.py`` and
``cfjax demo`` (:mod:`cfjax.study.demo`) call it.

Example (the whole study takes minutes; see ``cfjax demo`` for a run):
  >>> from cfjax import study
  >>> [name for name, _, _ in study.SETTINGS], study.QUICK.size, study.FULL.size
  (['A', 'B', 'A->B'], 32, 64)
"""

from cfjax.study.cftraining import ARM_FULL, ARM_QUICK, ArmConfig, independence_weights, run_arm
from cfjax.study.correlations import correlation, delta_auc_interval
from cfjax.study.diagnostics import (
    FAR_BELOW,
    WeakClassifierWarning,
    basic_auc_check,
    classifier_checks,
)
from cfjax.study.families import (
    BIAS_STRENGTHS,
    LOGIT_OFFSETS,
    PAPER_CHAINS,
    PAPER_NAMES,
    TRAINED_NAMES,
    Family,
    datasets_bias_key,
    logit_offset,
    paper_family,
    paper_predictions,
)
from cfjax.study.learned import (
    GENERATOR_FULL,
    GENERATOR_QUICK,
    GeneratorSettings,
    LearnedSource,
    fit_site_generator,
    learned_images,
    learned_scm,
)
from cfjax.study.marginalisation import (
    FULL,
    QUICK,
    Config,
    CounterfactualSource,
    auc_interval,
    evaluate_setting,
    exact_counterfactuals,
    fit_site_generators,
    run,
    train_site,
)
from cfjax.study.paper import SETTINGS, SITE_A, SITE_B
from cfjax.study.plots import MAIN_PANELS, SUPPLEMENTARY_PANELS, delta_auc_figure
from cfjax.study.predictions import save_predictions
from cfjax.study.report import (
    compare_settings,
    reliability_figure,
    scatter_caption,
    scatter_figure,
    write_report,
)
from cfjax.study.result import StudyResult
from cfjax.study.splits import age_group, balanced_test_split, biased_training_mask, datasets

__all__ = [
    "Config",
    "FULL",
    "QUICK",
    "run",
    "StudyResult",
    "train_site",
    "evaluate_setting",
    "CounterfactualSource",
    "exact_counterfactuals",
    "GeneratorSettings",
    "GENERATOR_FULL",
    "GENERATOR_QUICK",
    "LearnedSource",
    "fit_site_generator",
    "fit_site_generators",
    "learned_images",
    "learned_scm",
    "SITE_A",
    "SITE_B",
    "SETTINGS",
    "compare_settings",
    "reliability_figure",
    "scatter_figure",
    "scatter_caption",
    "write_report",
    "auc_interval",
    "correlation",
    "delta_auc_interval",
    "delta_auc_figure",
    "MAIN_PANELS",
    "SUPPLEMENTARY_PANELS",
    "WeakClassifierWarning",
    "FAR_BELOW",
    "basic_auc_check",
    "classifier_checks",
    "PAPER_NAMES",
    "PAPER_CHAINS",
    "TRAINED_NAMES",
    "LOGIT_OFFSETS",
    "BIAS_STRENGTHS",
    "Family",
    "paper_family",
    "datasets_bias_key",
    "logit_offset",
    "paper_predictions",
    "age_group",
    "balanced_test_split",
    "biased_training_mask",
    "datasets",
    "ArmConfig",
    "ARM_QUICK",
    "ARM_FULL",
    "run_arm",
    "independence_weights",
    "save_predictions",
]
