"""Sphinx configuration of cfjax's documentation (``make docs``: HTML in docs/_build/html,
every warning an error)."""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.abspath(".."))
sys.path.insert(0, os.path.abspath("."))
os.environ.setdefault("CFJAX_CACHE_DIR", "off")  # the tutorials compile afresh: no stale cache

import cfjax  # noqa: E402

project = "cfjax"
author = "the cfjax authors"
copyright = "the cfjax authors"  # noqa: A001
release = version = cfjax.__version__

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.napoleon",
    "sphinx.ext.mathjax",
    "sphinx_click",
    "sphinx_gallery.gen_gallery",
    "sphinx_copybutton",
    "api_pages",
]

source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
exclude_patterns = ["_build", "tutorials_src/README.rst", "**/GALLERY_HEADER.rst"]
myst_enable_extensions = ["dollarmath", "amsmath", "colon_fence", "deflist"]
myst_heading_anchors = 3

# API reference: every name in a subpackage's __all__ on its package's page (docs/api_pages.py
# writes the pages; tests/test_docs.py checks them against __all__).
autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_typehints_format = "short"
autodoc_preserve_defaults = True
autodoc_default_options = {"show-inheritance": False}
autosummary_generate = False
napoleon_google_docstring = True
napoleon_numpy_docstring = False
napoleon_use_rtype = False
napoleon_use_ivar = True
napoleon_custom_sections = [("Shapes", "notes_style")]

# A reference that does not resolve is an error; types from other libraries are not documented
# here (the docs build offline, without their inventories).
nitpicky = True
nitpick_ignore_regex = [
    (r"py:.*", r"(jax|jaxlib|numpy|np|jnp|optax|flax|nn|distrax|matplotlib|pandas|pd|click|orbax|"
               r"ocp|collections|typing|typing_extensions|os|pathlib|enum|dataclasses|abc|types|"
               r"functools|builtins|io|numbers)(\..*)?"),
    (r"py:class", r"(Array|ArrayLike|KeyLike|Mesh|MeshLike|PyTree|PRNGKeyArray|Axes|Figure|"
                  r"Callable|Sequence|Mapping|Iterable|Iterator|Any|Self|NoReturn|ParamSpec|"
                  r"NDArray|DTypeLike|Literal|Protocol|NamedTuple|IntEnum|Enum|Module)"),
    (r"py:class", r"(int|float|str|bool|bytes|tuple|list|dict|set|frozenset|object|type|None|"
                  r"complex|slice|range|Ellipsis|callable|optional|array|arrays|default)"),
    (r"py:.*", r"_.*"),  # private helpers a docstring names
    (r"py:class", r"[a-z_][a-z0-9_]*"),  # a field's other names ("a, b: ..."), read as types
    (r"py:class", r"(Deprecated|Shape|SubFigure|ContextDecorator|tqdm(\..*)?|Protocol)"),
    (r"py:class", r".*[\s\"'].*"),  # prose napoleon read as a type
    (r"py:class", r"(gt|ls|ac|cf|S|R|G|P|F)\.\w+"),  # a module alias in an annotation
]

html_theme = "furo"
html_title = f"cfjax {release}"
html_static_path: list[str] = []
html_show_sourcelink = False

# The tutorials: scripts in docs/tutorials_src run at build time, each ending with a figure.
sphinx_gallery_conf = {
    "examples_dirs": "tutorials_src",
    "gallery_dirs": "tutorials",
    "filename_pattern": r"/tutorial_",
    "download_all_examples": False,
    "remove_config_comments": True,
    "abort_on_example_error": True,
    "plot_gallery": "True",
    "within_subsection_order": "FileNameSortKey",
    "image_scrapers": ("matplotlib",),
    "show_memory": False,
    "min_reported_time": 0,
}
