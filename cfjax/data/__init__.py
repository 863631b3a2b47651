"""Data: a synthetic chest-radiograph SCM with exact counterfactuals, and adapters for CheXpert
and MIMIC-CXR-JPG. Paper 000's splits are ``cfjax.study``'s."""

from cfjax.data.chest import AGE_GROUPS as AGE_GROUPS
from cfjax.data.chest import AGES as AGES
from cfjax.data.chest import IMAGE_PARENTS as IMAGE_PARENTS
from cfjax.data.chest import LABEL_MODES as LABEL_MODES
from cfjax.data.chest import PARENTS as PARENTS
from cfjax.data.chest import ChestCounterfactuals as ChestCounterfactuals
from cfjax.data.chest import ChestRenderer as ChestRenderer
from cfjax.data.chest import ChestSCM as ChestSCM
from cfjax.data.real import load_chexpert as load_chexpert
from cfjax.data.real import load_mimic_cxr as load_mimic_cxr
from cfjax.data.render import EFFUSION_SIZE as EFFUSION_SIZE
from cfjax.data.render import LATERALITY as LATERALITY
from cfjax.data.render import Acquisition as Acquisition
from cfjax.data.render import ImageNoise as ImageNoise
from cfjax.data.render import body_mask as body_mask
from cfjax.data.render import effusion_height as effusion_height
from cfjax.data.render import laterality as laterality
from cfjax.data.render import render as render
from cfjax.data.render import sample_image_noise as sample_image_noise

__all__ = [
    "AGE_GROUPS",
    "AGES",
    "Acquisition",
    "EFFUSION_SIZE",
    "IMAGE_PARENTS",
    "LABEL_MODES",
    "LATERALITY",
    "ChestCounterfactuals",
    "ChestRenderer",
    "ChestSCM",
    "ImageNoise",
    "PARENTS",
    "body_mask",
    "effusion_height",
    "load_chexpert",
    "load_mimic_cxr",
    "laterality",
    "render",
    "sample_image_noise",
]
