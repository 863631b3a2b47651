"""Data: a synthetic chest-radiograph SCM with exact counterfactuals, and adapters for CheXpert
and MIMIC-CXR-JPG. Paper 000's splits are ``cfjax.study``'s.

The simulator's constants and pieces (``cfjax.data.chest``: ``PARENTS``, ``LABEL_MODES``;
``cfjax.data.render``: ``ImageNoise``, ``laterality``, ``EFFUSION_SIZE``) are in their
modules."""

from cfjax import _deprecations
from cfjax.data import chest as _chest
from cfjax.data import render as _render
from cfjax.data.chest import AGES as AGES
from cfjax.data.chest import ChestRenderer as ChestRenderer
from cfjax.data.chest import ChestSCM as ChestSCM
from cfjax.data.real import load_chexpert as load_chexpert
from cfjax.data.real import load_mimic_cxr as load_mimic_cxr
from cfjax.data.render import Acquisition as Acquisition
from cfjax.data.render import body_mask as body_mask
from cfjax.data.render import render as render
from cfjax.data.render import sample_image_noise as sample_image_noise

__all__ = [
    "AGES",
    "Acquisition",
    "ChestRenderer",
    "ChestSCM",
    "body_mask",
    "load_chexpert",
    "load_mimic_cxr",
    "render",
    "sample_image_noise",
]

#: Names that left the package's namespace (still importable from their modules) or were
#: renamed: each warns, naming the new place, for one release.
_DEPRECATED = {
    "AGE_GROUPS": ("cfjax.data.chest.AGE_GROUPS", _chest.AGE_GROUPS),
    "ChestCounterfactuals": ("cfjax.data.chest.ChestCounterfactuals", _chest.ChestCounterfactuals),
    "effusion_height": ("cfjax.data.render.effusion_height", _render.effusion_height),
    "EFFUSION_SIZE": ("cfjax.data.render.EFFUSION_SIZE", _render.EFFUSION_SIZE),
    "IMAGE_PARENTS": ("cfjax.data.chest.IMAGE_PARENTS", _chest.IMAGE_PARENTS),
    "ImageNoise": ("cfjax.data.render.ImageNoise", _render.ImageNoise),
    "LABEL_MODES": ("cfjax.data.chest.LABEL_MODES", _chest.LABEL_MODES),
    "LATERALITY": ("cfjax.data.render.LATERALITY", _render.LATERALITY),
    "laterality": ("cfjax.data.render.laterality", _render.laterality),
    "PARENTS": ("cfjax.data.chest.PARENTS", _chest.PARENTS),
}
__getattr__ = _deprecations.getattr_for(__name__, _DEPRECATED)
