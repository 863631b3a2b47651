"""Runs the examples of the pages that train (docs/guide/study.md: an ensemble;
docs/guide/generative.md: an image mechanism), in a file of their own so that
``--dist loadfile`` runs them beside the other pages (tests/examples.py says how)."""

from __future__ import annotations

import pathlib

import pytest

from tests import examples
from tests.examples import run_block, session  # noqa: F401 (the fixture)

BLOCKS = examples.blocks_for(pathlib.Path(__file__).stem)


@pytest.mark.parametrize("block", list(examples.params(BLOCKS)))
def test_guide_block(block, session):  # noqa: F811
    run_block(block, session)
