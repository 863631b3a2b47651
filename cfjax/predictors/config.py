"""The optimisation settings shared by every member of an ensemble (:class:`EnsembleConfig`), the
members' objectives (:class:`MemberObjectives`) and how a call of :func:`cfjax.predictors.train`
reports and checkpoints (:class:`TrainOptions`)."""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Sequence
from typing import Any

import numpy as np
import optax

from cfjax import _checks
from cfjax._core.optim import standard_promotion
from cfjax.predictors.inference import check_member_chunk
from cfjax.predictors.objectives import Objective
from cfjax.typing import ArrayLike, PyTree

__all__ = ["EnsembleConfig", "MemberObjectives", "TrainOptions"]


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
        one after another (:func:`cfjax.predictors.inference.map_members`); default: all members, one at
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
        if (
            isinstance(self.warmup, bool)
            or not isinstance(self.warmup, (int, np.integer))
            or not 0 <= self.warmup < self.steps
        ):
            _checks.fail("warmup", f"an integer in [0, steps = {self.steps})", repr(self.warmup))
        for name in ("learning_rate", "weight_decay"):
            value = getattr(self, name)
            ok = isinstance(value, (int, float, np.floating, np.integer)) and not isinstance(
                value, bool
            )
            if (
                not ok
                or not math.isfinite(value)
                or value < 0
                or (name == "learning_rate" and value == 0)
            ):
                fail_what = (
                    "a finite learning rate > 0"
                    if name == "learning_rate"
                    else "a finite value >= 0"
                )
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
            0.0, self.learning_rate, self.warmup, self.steps, self.learning_rate / 100
        )
        return standard_promotion(optax.adamw(schedule, weight_decay=self.weight_decay))


@dataclasses.dataclass(frozen=True)
class TrainOptions:
    """How one call of :func:`cfjax.predictors.train` reports and checkpoints (nothing here
    changes what the members learn).

    Attributes:
      progress: show a tqdm bar (mean loss, active members); None: when stderr is a terminal.
      names: optional member names (M), used in messages.
      checkpoint_dir: where an orbax checkpoint is written after every evaluation round (the
        two latest kept). If it already holds a checkpoint of this run (same model, config,
        data shapes, masks, labels and keys), training resumes from its latest round; a
        resumed run ends with the same parameters as an uninterrupted one.
      max_rounds: run at most this many evaluation rounds in this call (then return; call again
        with the same ``checkpoint_dir`` to continue).

    Example:
      >>> TrainOptions(progress=False, max_rounds=2).max_rounds
      2
    """

    progress: bool | None = None
    names: Sequence[str] | None = None
    checkpoint_dir: str | os.PathLike | None = None
    max_rounds: int | None = None


@dataclasses.dataclass(frozen=True, eq=False)
class MemberObjectives:
    """The members' training objectives and what they read beside the images and labels.

    Attributes:
      objectives: each member's :class:`cfjax.predictors.Objective` (or its name): None (every
        member basic), one for every member, or a sequence of M.
      counterfactuals: the counterfactual source of the training units
        (:mod:`cfjax.predictors.sources`), needed when an objective reads counterfactuals.
      groups: ``(N,)`` each training unit's group in ``[0, G)``, needed by ``"group_dro"``.

    Example:
      >>> MemberObjectives("group_dro", groups=[0, 1, 1]).objectives
      'group_dro'
    """

    objectives: Objective | str | Sequence[Objective | str] | None = None
    counterfactuals: PyTree = None
    groups: ArrayLike | None = None
