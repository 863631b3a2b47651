"""Paper 000's study: counterfactual marginalisation of trained image classifiers.

On the synthetic chest-radiograph SCM (:class:`cfjax.data.ChestSCM`), two acquisition sites
and three settings (train and test on site A; on site B; train on A, test on B's natural
demographics): the ten predictors of paper 000 (seven trained members × seeds as one vmapped
ensemble, three logit offsets), K = 16 counterfactual images per test unit (sex × 8 ages) from
a counterfactual *source* (exact by default; a learned HVAE generator with
:class:`SiteGeneratorConfig`), and every table: risk, calibration, stability, their CTC, bootstrap
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

This package exports what a user calls; the steps beneath live in their modules:
``cfjax.study.families`` (paper 000's predictor family: ``PAPER_NAMES``, ``logit_offset``,
``paper_predictions``, ...), ``.splits`` (``balanced_test_split``, ``biased_training_mask``,
``age_group``), ``.learned`` (``fit_site_generator``, ``learned_images``, ``learned_scm``),
``.config`` (``Config``, ``FULL``, ``QUICK``), ``.evaluation`` (``evaluate_setting``,
``auc_interval``, the counterfactual sources), ``.marginalisation`` (``train_site``, ``run``),
``.report`` (``write_report``, the findings), ``.report_figures`` (the figures and their
captions), ``.comparison`` (``compare_settings``: exact vs learned counterfactuals),
``.correlations``, ``.diagnostics`` (``basic_auc_check``, ``classifier_checks``), ``.paper``
(``SITE_A``, ``SITE_B``), ``.predictions`` (``save_predictions``), ``.cftraining``
(``independence_weights``) and ``.cftraining_report`` (the training arm's report).

Example (the whole study takes minutes; see ``cfjax demo`` for a run):
  >>> from cfjax import study
  >>> [name for name, _, _ in study.SETTINGS], study.QUICK.size, study.FULL.size
  (['A', 'B', 'A->B'], 32, 64)
"""

from cfjax import _deprecations
from cfjax.study import cftraining as _cftraining
from cfjax.study import comparison as _comparison
from cfjax.study import correlations as _correlations
from cfjax.study import diagnostics as _diagnostics
from cfjax.study import evaluation as _evaluation
from cfjax.study import families as _families
from cfjax.study import learned as _learned
from cfjax.study import paper as _paper
from cfjax.study import plots as _plots
from cfjax.study import predictions as _predictions
from cfjax.study import report_figures as _report_figures
from cfjax.study import splits as _splits
from cfjax.study.cftraining import ARM_FULL as ARM_FULL
from cfjax.study.cftraining import ARM_QUICK as ARM_QUICK
from cfjax.study.cftraining import ArmConfig as ArmConfig
from cfjax.study.cftraining import run_arm as run_arm
from cfjax.study.config import FULL as FULL
from cfjax.study.config import QUICK as QUICK
from cfjax.study.config import Config as Config
from cfjax.study.diagnostics import WeakClassifierWarning as WeakClassifierWarning
from cfjax.study.evaluation import CounterfactualSource as CounterfactualSource
from cfjax.study.evaluation import evaluate_setting as evaluate_setting
from cfjax.study.evaluation import exact_counterfactuals as exact_counterfactuals
from cfjax.study.families import Family as Family
from cfjax.study.families import paper_family as paper_family
from cfjax.study.learned import GENERATOR_FULL as GENERATOR_FULL
from cfjax.study.learned import GENERATOR_QUICK as GENERATOR_QUICK
from cfjax.study.learned import LearnedSource as LearnedSource
from cfjax.study.learned import SiteGeneratorConfig as SiteGeneratorConfig
from cfjax.study.marginalisation import fit_site_generators as fit_site_generators
from cfjax.study.marginalisation import run as run
from cfjax.study.marginalisation import train_site as train_site
from cfjax.study.paper import SETTINGS as SETTINGS
from cfjax.study.report import write_report as write_report
from cfjax.study.result import StudyResult as StudyResult
from cfjax.study.splits import datasets as datasets

__all__ = [
    "ARM_FULL",
    "ARM_QUICK",
    "ArmConfig",
    "Config",
    "CounterfactualSource",
    "FULL",
    "Family",
    "GENERATOR_FULL",
    "GENERATOR_QUICK",
    "LearnedSource",
    "QUICK",
    "SETTINGS",
    "SiteGeneratorConfig",
    "StudyResult",
    "WeakClassifierWarning",
    "datasets",
    "evaluate_setting",
    "exact_counterfactuals",
    "fit_site_generators",
    "paper_family",
    "run",
    "run_arm",
    "train_site",
    "write_report",
]


def _moved(module, *names):
    return {n: (f"{module.__name__}.{n}", getattr(module, n)) for n in names}


#: names exported here before the surface was trimmed (one release, with a warning)
_DEPRECATED = {
    "GeneratorSettings": ("cfjax.study.SiteGeneratorConfig", SiteGeneratorConfig),
    **_moved(_learned, "fit_site_generator", "learned_images", "learned_scm"),
    **_moved(_paper, "SITE_A", "SITE_B"),
    **_moved(_comparison, "compare_settings"),
    **_moved(_report_figures, "reliability_figure", "scatter_figure", "scatter_caption"),
    **_moved(_evaluation, "auc_interval"),
    **_moved(_correlations, "correlation", "delta_auc_interval"),
    **_moved(_plots, "delta_auc_figure", "MAIN_PANELS", "SUPPLEMENTARY_PANELS"),
    **_moved(_diagnostics, "FAR_BELOW", "basic_auc_check", "classifier_checks"),
    **_moved(
        _families,
        "PAPER_NAMES",
        "PAPER_CHAINS",
        "TRAINED_NAMES",
        "LOGIT_OFFSETS",
        "BIAS_STRENGTHS",
        "datasets_bias_key",
        "logit_offset",
        "paper_predictions",
    ),
    **_moved(_splits, "age_group", "balanced_test_split", "biased_training_mask"),
    **_moved(_cftraining, "independence_weights"),
    **_moved(_predictions, "save_predictions"),
}
__getattr__ = _deprecations.getattr_for(__name__, _DEPRECATED)
