"""The documentation covers the public surface: every name of every subpackage's ``__all__``
has an entry in the API reference, and every public module a section.

The API pages are written from the code by ``docs/api_pages.py``; this test checks what the
build produced — the inventory of documented objects, ``docs/_build/html/objects.inv``, which
``make docs`` writes (CI builds the docs before it runs the tests) — and, where the docs have
not been built, the pages the extension writes."""

from __future__ import annotations

import importlib
import pathlib
import sys

import pytest

import cfjax

ROOT = pathlib.Path(__file__).resolve().parents[1]
INVENTORY = ROOT / "docs" / "_build" / "html" / "objects.inv"
sys.path.insert(0, str(ROOT / "docs"))

import api_pages  # noqa: E402


def _public_names() -> list[tuple[str, str]]:
    """(package, name) for every name the subpackages export and every public module."""
    out = []
    for package in api_pages.PACKAGES:
        module = importlib.import_module(f"cfjax.{package}")
        out += [(package, name) for name in module.__all__
                if not isinstance(getattr(module, name), type(cfjax))]
    return out


def test_every_public_name_has_an_entry_in_the_built_reference():
    if not INVENTORY.exists():
        pytest.skip("the docs are not built here (make docs); CI builds them before the tests")
    from sphinx.util.inventory import InventoryFile

    with INVENTORY.open("rb") as f:
        inventory = InventoryFile.load(f, "", lambda base, uri: uri)
    documented = {name for kind, entries in inventory.items() if kind.startswith("py:") for name in entries}
    missing = [f"cfjax.{p}.{n}" for p, n in _public_names() if f"cfjax.{p}.{n}" not in documented]
    assert not missing, f"public names without an entry in the API reference: {missing}"
    modules = [m for p in api_pages.PACKAGES for m in [f"cfjax.{p}", *api_pages.public_modules(p)]]
    assert not [m for m in modules if m not in documented], "public modules without a section"


def test_the_pages_document_every_name(tmp_path, monkeypatch):
    monkeypatch.setattr(api_pages, "API", tmp_path)
    pages = {p.stem: p.read_text() for p in api_pages.write_pages()}
    for package, name in _public_names():
        text = pages[package]
        assert f":: {name}\n" in text, f"cfjax.{package}.{name} has no entry on its page"
    index = pages["index"]
    assert all(f"\n{p}\n" in index for p in api_pages.PACKAGES), "a subpackage missing from the index"


def test_the_benchmarks_page_is_what_the_results_file_renders():
    """docs/benchmarks.md is written from docs/bench_results.json (make bench), not by hand."""
    import json

    sys.path.insert(0, str(ROOT))
    from experiments.benchmarks import render

    doc = json.loads((ROOT / "docs" / "bench_results.json").read_text(encoding="utf-8"))
    page = (ROOT / "docs" / "benchmarks.md").read_text(encoding="utf-8")
    assert page == render.render(doc), "docs/benchmarks.md is stale: python -m experiments.benchmarks.render"
    assert all(b["returncode"] == 0 for b in doc["benchmarks"]), "a benchmark of the committed run failed"
