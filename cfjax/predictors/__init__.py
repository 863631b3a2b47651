"""Image classifiers for paper 000's study: a CNN effusion classifier, ensembles of members
(training-data masks × keys) trained as one jitted program (:func:`cfjax._core.training.run`)
with per-member early stopping and orbax checkpoints, and chunked inference on factual and counterfactual images. Paper 000's ten
predictors (basic, logit offsets, sex- and age-biased) are ``cfjax.study``'s.

The ensemble trainer, a module per concept: :mod:`~cfjax.predictors.config` (the settings),
:mod:`~cfjax.predictors.data` (each member's view of the training set),
:mod:`~cfjax.predictors.step` (one member's step), :mod:`~cfjax.predictors.state` (the state
stacked over members, its padding and placement on devices), :mod:`~cfjax.predictors.rounds`
(one evaluation round of the ensemble, :class:`~cfjax.predictors.rounds.EnsembleRound`),
:mod:`~cfjax.predictors.inference` (parameters, keys and batched application over members) and
:mod:`~cfjax.predictors.ensemble` (:func:`train`). Those modules' names are for building a
trainer of one's own; this package exports what a user calls. Checkpoints are
:mod:`cfjax.checkpoint`'s."""

from cfjax import _deprecations
from cfjax._core import checkpoint as _checkpoint
from cfjax._errors import TrainingError as _TrainingError
from cfjax.platform import default_member_chunk as _default_member_chunk
from cfjax.predictors import cnn as _cnn
from cfjax.predictors import data as _data
from cfjax.predictors import inference as _inference
from cfjax.predictors import objectives as objectives
from cfjax.predictors import rounds as _rounds
from cfjax.predictors import state as _state
from cfjax.predictors import step as _step
from cfjax.predictors.cnn import EffusionCNN as EffusionCNN
from cfjax.predictors.config import EnsembleConfig as EnsembleConfig
from cfjax.predictors.config import MemberObjectives as MemberObjectives
from cfjax.predictors.config import TrainOptions as TrainOptions
from cfjax.predictors.ensemble import train as train
from cfjax.predictors.inference import init_params as init_params
from cfjax.predictors.inference import predict as predict
from cfjax.predictors.objectives import Objective as Objective
from cfjax.predictors.state import EnsembleState as EnsembleState

__all__ = [
    "EffusionCNN",
    "EnsembleConfig",
    "EnsembleState",
    "MemberObjectives",
    "Objective",
    "TrainOptions",
    "init_params",
    "objectives",
    "predict",
    "train",
]

#: names exported here before the surface was trimmed (one release, with a warning)
_DEPRECATED = {
    "CheckpointStore": ("cfjax.checkpoint.CheckpointStore", _checkpoint.CheckpointStore),
    "FORMAT_VERSION": ("cfjax.checkpoint.FORMAT_VERSION", _checkpoint.FORMAT_VERSION),
    "latest_checkpoint_step": (
        "cfjax.checkpoint.latest_checkpoint_step",
        _checkpoint.latest_checkpoint_step,
    ),
    "restore_checkpoint": ("cfjax.checkpoint.restore_checkpoint", _checkpoint.restore_checkpoint),
    "save_checkpoint": ("cfjax.checkpoint.save_checkpoint", _checkpoint.save_checkpoint),
    "TrainingError": ("cfjax.TrainingError", _TrainingError),
    "default_member_chunk": ("cfjax.platform.default_member_chunk", _default_member_chunk),
    "default_conv": ("cfjax.platform.default_conv", _cnn.default_conv),
    "Conv3x3": ("cfjax.predictors.cnn.Conv3x3", _cnn.Conv3x3),
    "MemberData": ("cfjax.predictors.data.MemberData", _data.MemberData),
    "member_data": ("cfjax.predictors.data.member_data", _data.member_data),
    "ensemble_size": ("cfjax.predictors.inference.ensemble_size", _inference.ensemble_size),
    "map_members": ("cfjax.predictors.inference.map_members", _inference.map_members),
    "member_keys": ("cfjax.predictors.inference.member_keys", _inference.member_keys),
    "member_step": ("cfjax.predictors.step.member_step", _step.member_step),
    "EnsembleRound": ("cfjax.predictors.rounds.EnsembleRound", _rounds.EnsembleRound),
    "init_state": ("cfjax.predictors.state.init_state", _state.init_state),
}
__getattr__ = _deprecations.getattr_for(__name__, _DEPRECATED)
