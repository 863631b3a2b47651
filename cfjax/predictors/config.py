"""The optimisation settings shared by every member of an ensemble (:class:`EnsembleConfig`)."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np
import optax

from cfjax import _checks
from cfjax._core.optim import standard_promotion
from cfjax.predictors.inference import check_member_chunk

__all__ = ["EnsembleConfig"]


@dataclasses.dataclass(frozen=True)
class EnsembleConfig:
    """Optimisation settings shared by every member (hashable: a static argument of the jitted
    training round).

    Attributes:
      steps: most optimisation steps per member.
      batch_size: units per step, drawn with replacement with probability proportional to the
        member's weight (mask).
      learning_rate: peak learning rate of AdamW, reached after ``warmup`` linear steps from 0,
        then cosine decay to ``learning_rate / 100`` at ``steps``.
      weight_decay: AdamW's decoupled weight decay.
      warmup: linear warm-up steps (``0 ≤ warmup < steps``).
      eval_every: steps between two evaluations of every member's validation AUC.
      patience: evaluations without a better validation AUC after which a member stops (its
        best parameters are kept); training ends when every member has stopped or run ``steps``.
      eval_chunk: validation images per compiled step of the validation pass (bounds memory).
      member_chunk: members stepped side by side (``vmap``) within the compiled step, the groups
        one after another (:func:`cfjax.predictors.map_members`); default: all members, one at
        a time on CPU (faster there, see :func:`cfjax.platform.default_member_chunk`);
        on each device when :func:`train` spreads the members over several.

    Example:
      >>> EnsembleConfig(steps=200, eval_every=50).rounds
      4
    """

    steps: int = 2000
    batch_size: int = 64
    learning_rate: float = 1e-3
    weight_decay: float = 1e-4
    warmup: int = 100
    eval_every: int = 100
    patience: int = 5
    eval_chunk: int = 256
    member_chunk: int | None = None

    def __post_init__(self):
        check_member_chunk(self.member_chunk)
        for name in ("steps", "batch_size", "eval_every", "patience", "eval_chunk"):
            _checks.check_positive_int(name, getattr(self, name))
        if isinstance(self.warmup, bool) or not isinstance(self.warmup, (int, np.integer)) \
                or not 0 <= self.warmup < self.steps:
            _checks.fail("warmup", f"an integer in [0, steps = {self.steps})", repr(self.warmup))
        for name in ("learning_rate", "weight_decay"):
            value = getattr(self, name)
            ok = isinstance(value, (int, float, np.floating, np.integer)) and not isinstance(value, bool)
            if not ok or not math.isfinite(value) or value < 0 or (name == "learning_rate" and value == 0):
                fail_what = "a finite learning rate > 0" if name == "learning_rate" else "a finite value >= 0"
                _checks.fail(name, fail_what, repr(value))

    @property
    def rounds(self) -> int:
        """Evaluation rounds of a full run, ``ceil(steps / eval_every)``."""
        return -(-self.steps // self.eval_every)

    def to_dict(self) -> dict[str, Any]:
        """Every setting as plain Python for ``json.dumps``; ``EnsembleConfig(**d)`` rebuilds it."""
        return dataclasses.asdict(self)

    def optimizer(self) -> optax.GradientTransformation:
        """AdamW with linear warm-up and cosine decay (under either dtype promotion:
        :func:`cfjax._core.optim.standard_promotion`)."""
        schedule = optax.warmup_cosine_decay_schedule(
            0.0, self.learning_rate, self.warmup, self.steps, self.learning_rate / 100)
        return standard_promotion(optax.adamw(schedule, weight_decay=self.weight_decay))
