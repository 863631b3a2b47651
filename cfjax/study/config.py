"""The study's configuration: the sizes and optimisation settings of one run (:class:`Config`)
and its two presets, :data:`FULL` and :data:`QUICK` (smaller images, fewer units and steps)."""

from __future__ import annotations

import dataclasses

from cfjax import _checks
from cfjax import predictors as cp

__all__ = ["Config", "FULL", "QUICK"]


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
