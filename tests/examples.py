"""Running the README's and the user guide's Python examples as written (the machinery of
tests/test_readme.py and tests/test_guide_*.py).

Which blocks: every fenced block opened by a line that is exactly ```` ```python ```` in
README.md and in each page of docs/guide/, in order. Other fences (```` ```bash ````, bare
```` ``` ````: shell commands, the layout) are not run.

How they run: the blocks of one page in ONE namespace, in the page's order, because a page
reads as one session (later blocks reuse what earlier ones imported and built); each page in a
namespace of its own. Each block is one test, named by its line number and first line; a
test first runs any earlier block that has not run yet (so ``-k`` can select a single block).
The blocks run with JAX's default promotion rules (what a user gets, not this suite's strict
ones), in a temporary working directory (checkpoints), with a non-interactive matplotlib
backend, and with cfjax's deprecation warnings raised as errors (an example must use the
current spellings); JAX settings a block changes (``jax_enable_x64``) stay on for the blocks
after it, as in a session, and are restored when the module ends.

Skipping a block: put the line ``<!-- no-test -->`` (an HTML comment, invisible on the
rendered page) immediately before its opening fence. The README and the guide use none: an
example that would take minutes runs at smaller sizes, its comments giving the real ones. ``CFJAX_README_ALL=1`` in
the environment runs the marked blocks too.

Two temporary lists, keyed by a block's first line, stand in until README.md is edited:
``_XFAIL`` (blocks known to fail; strict, so a fixed block fails the test until its entry is
removed) and ``_SLOW`` (blocks to skip as if marked ``<!-- no-test -->``). A key that matches
no block fails ``test_lists_match_blocks``.
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import re
import sys
import warnings
from typing import NamedTuple

import jax
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
#: the pages whose examples run: the README and the user guide
PAGES = [README] + sorted((ROOT / "docs" / "guide").glob("*.md"))
#: the test files of the costly pages (guide pages that train or search): a file of their own
#: each, so that pytest-xdist's ``--dist loadfile`` spreads them over the workers; every other
#: page runs in tests/test_readme.py
OWN_FILE = {
    "test_guide_sensitivity": ("docs/guide/sensitivity.md",),
    "test_guide_training": ("docs/guide/study.md", "docs/guide/generative.md"),
}
NO_TEST = "<!-- no-test -->"
#: the wording of every cfjax deprecation warning (raised as an error inside the examples)
_DEPRECATED = r".*will be removed in the next release"
RUN_ALL = os.environ.get("CFJAX_README_ALL", "") not in ("", "0")

#: README blocks known to fail (first line -> why). Remove an entry once the README is fixed.
_XFAIL: dict[str, str] = {}

#: README blocks to skip until they carry ``<!-- no-test -->`` (first line -> why).
_SLOW: dict[str, str] = {}


class Block(NamedTuple):
    page: str      # the page, relative to the repository
    line: int      # 1-based line of the opening fence
    first: str     # the block's first line, its key in the lists above
    code: str
    marked: bool   # preceded by <!-- no-test -->


def readme_blocks(text: str, page: str = "README.md") -> list[Block]:
    """The ```` ```python ```` blocks of a Markdown text, in order."""
    lines = text.splitlines()
    blocks, i = [], 0
    while i < len(lines):
        if lines[i].strip() == "```python":
            start = i
            i += 1
            while i < len(lines) and lines[i].strip() != "```":
                i += 1
            if i == len(lines):
                raise ValueError(f"{page}:{start + 1}: a ```python block is never closed")
            code = "\n".join(lines[start + 1:i])
            first = next((ln for ln in lines[start + 1:i] if ln.strip()), "")
            marked = start > 0 and lines[start - 1].strip() == NO_TEST
            blocks.append(Block(page, start + 1, first.rstrip(), code, marked))
        i += 1
    return blocks


BLOCKS = [b for path in PAGES
          for b in readme_blocks(path.read_text(encoding="utf-8"), str(path.relative_to(ROOT)))]


def blocks_for(test_file: str) -> list[Block]:
    """The blocks the test file ``test_file`` (its stem) runs."""
    if test_file in OWN_FILE:
        return [b for b in BLOCKS if b.page in OWN_FILE[test_file]]
    elsewhere = {page for pages in OWN_FILE.values() for page in pages}
    return [b for b in BLOCKS if b.page not in elsewhere]


def block_id(b: Block) -> str:
    page = "" if b.page == "README.md" else pathlib.Path(b.page).stem + ":"
    return f"{page}L{b.line}:" + re.sub(r"\W+", "_", b.first)[:40].strip("_")


def skip_reason(b: Block) -> str | None:
    if RUN_ALL:
        return None
    if b.marked:
        return f"marked {NO_TEST}"
    if b.first in _SLOW:
        return f"slow: {_SLOW[b.first]}"
    return None


class _Session:
    """Each page's namespace and which blocks have run in it."""

    def __init__(self):
        self.namespaces: dict[str, dict] = {}
        self.done: set[tuple[str, int]] = set()

    def run(self, b: Block) -> None:
        self.done.add((b.page, b.line))
        namespace = self.namespaces.setdefault(b.page, {"__name__": "__readme__"})
        # the page's line numbers in tracebacks: pad so that line 1 of the block is fence + 1.
        code = compile("\n" * b.line + b.code, f"{b.page} (block at line {b.line})", "exec")
        try:
            with warnings.catch_warnings():
                # an example must not teach a spelling cfjax is about to remove
                warnings.filterwarnings("error", message=_DEPRECATED, category=DeprecationWarning)
                exec(code, namespace)
        finally:
            if "matplotlib.pyplot" in sys.modules:
                import matplotlib.pyplot as plt
                plt.close("all")


@pytest.fixture(scope="module")
def session(tmp_path_factory):
    os.environ.setdefault("MPLBACKEND", "Agg")
    saved = {name: getattr(jax.config, name) for name in
             ("jax_enable_x64", "jax_numpy_rank_promotion", "jax_numpy_dtype_promotion")}
    cwd = os.getcwd()
    os.chdir(tmp_path_factory.mktemp("readme"))
    jax.config.update("jax_numpy_rank_promotion", "allow")
    jax.config.update("jax_numpy_dtype_promotion", "standard")
    try:
        yield _Session()
    finally:
        os.chdir(cwd)
        for name, value in saved.items():
            jax.config.update(name, getattr(value, "value", value))


def params(blocks: list[Block]):
    """``blocks`` as pytest parameters, skipped or xfailed as the lists say."""
    for b in blocks:
        marks = []
        reason = skip_reason(b)
        if reason is not None:
            marks.append(pytest.mark.skip(reason=reason))
        elif b.first in _XFAIL:
            marks.append(pytest.mark.xfail(reason=_XFAIL[b.first], strict=True))
        yield pytest.param(b, marks=marks, id=block_id(b))


def run_block(block: Block, session: _Session) -> None:
    """Run ``block`` in its page's namespace, after any earlier block of the page not yet run."""
    for earlier in BLOCKS:
        if earlier.page != block.page:
            continue
        if earlier.line >= block.line:
            break
        if (earlier.page, earlier.line) not in session.done and skip_reason(earlier) is None:
            with contextlib.suppress(Exception):  # reported by its own test
                session.run(earlier)
    session.run(block)
