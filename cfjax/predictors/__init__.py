"""Image classifiers for paper 000's study: a CNN effusion classifier, ensembles of members
(training-data masks × seeds) trained as one jitted ``vmap``ped program with early stopping and
orbax checkpoints, chunked inference on factual and counterfactual images, and paper 000's ten
predictors (basic, logit offsets, sex- and age-biased)."""

from cfjax._core.checkpoint import FORMAT_VERSION as FORMAT_VERSION
from cfjax._core.checkpoint import CheckpointStore as CheckpointStore
from cfjax._core.checkpoint import latest_checkpoint_step as latest_checkpoint_step
from cfjax._core.checkpoint import restore_checkpoint as restore_checkpoint
from cfjax._core.checkpoint import save_checkpoint as save_checkpoint
from cfjax.predictors.cnn import Conv3x3 as Conv3x3
from cfjax.predictors.cnn import EffusionCNN as EffusionCNN
from cfjax.predictors.cnn import default_conv as default_conv
from cfjax.predictors.ensemble import EnsembleState as EnsembleState
from cfjax.predictors.ensemble import MemberData as MemberData
from cfjax.predictors.ensemble import TrainConfig as TrainConfig
from cfjax.predictors.ensemble import TrainingError as TrainingError
from cfjax.predictors.ensemble import init_state as init_state
from cfjax.predictors.ensemble import member_data as member_data
from cfjax.predictors.ensemble import member_step as member_step
from cfjax.predictors.ensemble import train as train
from cfjax.predictors.families import BIAS_STRENGTHS as BIAS_STRENGTHS
from cfjax.predictors.families import LOGIT_OFFSETS as LOGIT_OFFSETS
from cfjax.predictors.families import PAPER_NAMES as PAPER_NAMES
from cfjax.predictors.families import TRAINED_NAMES as TRAINED_NAMES
from cfjax.predictors.families import Family as Family
from cfjax.predictors.families import datasets_bias_key as datasets_bias_key
from cfjax.predictors.families import logit_offset as logit_offset
from cfjax.predictors.families import paper_family as paper_family
from cfjax.predictors.families import paper_predictions as paper_predictions
from cfjax.predictors.inference import default_member_chunk as default_member_chunk
from cfjax.predictors.inference import ensemble_size as ensemble_size
from cfjax.predictors.inference import init_params as init_params
from cfjax.predictors.inference import map_members as map_members
from cfjax.predictors.inference import predict as predict
from cfjax.predictors.inference import to_metrics_layout as to_metrics_layout

__all__ = [
    "BIAS_STRENGTHS",
    "CheckpointStore",
    "Conv3x3",
    "EffusionCNN",
    "EnsembleState",
    "FORMAT_VERSION",
    "Family",
    "LOGIT_OFFSETS",
    "MemberData",
    "PAPER_NAMES",
    "TRAINED_NAMES",
    "TrainConfig",
    "TrainingError",
    "datasets_bias_key",
    "default_conv",
    "default_member_chunk",
    "ensemble_size",
    "init_params",
    "init_state",
    "latest_checkpoint_step",
    "logit_offset",
    "map_members",
    "member_data",
    "member_step",
    "paper_family",
    "paper_predictions",
    "predict",
    "restore_checkpoint",
    "save_checkpoint",
    "to_metrics_layout",
    "train",
]
