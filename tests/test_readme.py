"""The README's examples, and the user guide's (docs/guide/) except the costly pages', which
tests/test_guide_*.py run: each ```` ```python ```` block is one test (tests/examples.py says how
they run and how a block is skipped)."""

from __future__ import annotations

import pathlib

import pytest

from tests import examples
from tests.examples import NO_TEST, readme_blocks, run_block, session  # noqa: F401 (the fixture)

BLOCKS = examples.blocks_for(pathlib.Path(__file__).stem)


@pytest.mark.parametrize("block", list(examples.params(BLOCKS)))
def test_readme_block(block, session):  # noqa: F811
    run_block(block, session)


def test_every_page_runs_in_one_file():
    files = [examples.blocks_for(f) for f in ["test_readme", *examples.OWN_FILE]]
    assert sorted(b for f in files for b in f) == sorted(examples.BLOCKS)
    for stem in examples.OWN_FILE:
        assert (pathlib.Path(__file__).parent / f"{stem}.py").exists(), stem


def test_lists_match_blocks():
    firsts = {b.first for b in examples.BLOCKS}
    assert examples.BLOCKS, "README.md has no ```python block"
    stale = sorted((set(examples._XFAIL) | set(examples._SLOW)) - firsts)
    assert not stale, f"entries matching no README block (remove them): {stale}"


def test_readme_blocks_parser():
    text = "\n".join([
        "# t", "```python", "a = 1", "```", "```bash", "make test", "```",
        NO_TEST, "```python", "", "b = a + 1", "```", "```", "layout", "```",
    ])
    blocks = readme_blocks(text)
    assert [(b.line, b.first, b.code, b.marked) for b in blocks] == [
        (2, "a = 1", "a = 1", False), (9, "b = a + 1", "\nb = a + 1", True)]
    with pytest.raises(ValueError, match="never closed"):
        readme_blocks("```python\nx = 1\n")
