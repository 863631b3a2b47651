"""Image classifiers for paper 000's study: a CNN effusion classifier, ensembles of members
(training-data masks × keys) trained as one jitted program (:func:`cfjax._core.training.run`)
with per-member early stopping and orbax checkpoints, and chunked inference on factual and counterfactual images. Paper 000's ten
predictors (basic, logit offsets, sex- and age-biased) are ``cfjax.study``'s.

The ensemble trainer, a module per concept: :mod:`~cfjax.predictors.config` (the settings),
:mod:`~cfjax.predictors.data` (each member's view of the training set),
:mod:`~cfjax.predictors.step` (one member's step), :mod:`~cfjax.predictors.state` (the state
stacked over members, its padding and placement on devices), :mod:`~cfjax.predictors.rounds`
(one evaluation round of the ensemble) and :mod:`~cfjax.predictors.ensemble` (:func:`train`)."""

from cfjax._core.checkpoint import FORMAT_VERSION as FORMAT_VERSION
from cfjax._core.checkpoint import CheckpointStore as CheckpointStore
from cfjax._core.checkpoint import latest_checkpoint_step as latest_checkpoint_step
from cfjax._core.checkpoint import restore_checkpoint as restore_checkpoint
from cfjax._core.checkpoint import save_checkpoint as save_checkpoint
from cfjax._errors import TrainingError as TrainingError
from cfjax.platform import default_member_chunk as default_member_chunk
from cfjax.predictors import objectives as objectives
from cfjax.predictors.cnn import Conv3x3 as Conv3x3
from cfjax.predictors.cnn import EffusionCNN as EffusionCNN
from cfjax.predictors.cnn import default_conv as default_conv
from cfjax.predictors.config import EnsembleConfig as EnsembleConfig
from cfjax.predictors.config import MemberObjectives as MemberObjectives
from cfjax.predictors.config import TrainOptions as TrainOptions
from cfjax.predictors.data import MemberData as MemberData
from cfjax.predictors.data import member_data as member_data
from cfjax.predictors.ensemble import train as train
from cfjax.predictors.inference import ensemble_size as ensemble_size
from cfjax.predictors.inference import init_params as init_params
from cfjax.predictors.inference import map_members as map_members
from cfjax.predictors.inference import member_keys as member_keys
from cfjax.predictors.inference import predict as predict
from cfjax.predictors.objectives import Objective as Objective
from cfjax.predictors.rounds import EnsembleRound as EnsembleRound
from cfjax.predictors.state import EnsembleState as EnsembleState
from cfjax.predictors.state import init_state as init_state
from cfjax.predictors.step import member_step as member_step

__all__ = [
    "CheckpointStore",
    "Conv3x3",
    "EffusionCNN",
    "EnsembleConfig",
    "EnsembleState",
    "EnsembleRound",
    "FORMAT_VERSION",
    "MemberData",
    "MemberObjectives",
    "Objective",
    "TrainOptions",
    "TrainingError",
    "default_conv",
    "default_member_chunk",
    "ensemble_size",
    "init_params",
    "init_state",
    "latest_checkpoint_step",
    "map_members",
    "member_data",
    "member_keys",
    "member_step",
    "objectives",
    "predict",
    "restore_checkpoint",
    "save_checkpoint",
    "train",
]
