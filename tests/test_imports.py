"""The package's import structure: no cycles (between modules, or between subpackages), no
private name imported across subpackages, a foundation that imports no pillar, and experiments
that use public names only. Imports inside functions count as much as module-level ones.

Read from the source with ``ast`` (nothing is imported), so a lazy import inside a function
cannot hide a cycle.
"""

from __future__ import annotations

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "cfjax"
#: the foundation: validation, errors, plain results, atomic I/O, platform choices, cfjax._core,
#: cfjax.distributed, cfjax.figures
FOUNDATION = {"_checks", "_errors", "io", "_results", "_core", "distributed", "platform", "figures"}
PILLARS = {"scm", "generative", "predictors", "metrics", "sensitivity", "representations", "data", "study",
           "cli"}


def _module_name(path: pathlib.Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(p): p for p in PACKAGE.rglob("*.py")}


def _imports(path: pathlib.Path, module: str) -> list[tuple[str, str, int]]:
    """``(imported module, imported name or "", line)`` for every import in the file."""
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [(alias.name, "", node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[:len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            for alias in node.names:
                # `from cfjax.scm import model` imports the module cfjax.scm.model
                sub = f"{target}.{alias.name}"
                out.append((sub, "", node.lineno) if sub in MODULES else (target, alias.name, node.lineno))
    return [(t, name, line) for t, name, line in out if t == "cfjax" or t.startswith("cfjax.")]


EDGES = {m: _imports(p, m) for m, p in MODULES.items()}


def _subpackage(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` (a list of nodes, the first repeated at the end), or None."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(v: str) -> list[str] | None:
        state[v] = 1
        stack.append(v)
        for w in sorted(graph.get(v, ())):
            if state.get(w) == 1:
                return stack[stack.index(w):] + [w]
            if w not in state and (found := visit(w)):
                return found
        stack.pop()
        state[v] = 2
        return None

    for v in sorted(graph):
        if v not in state and (found := visit(v)):
            return found
    return None


def test_no_cycle_between_modules():
    graph = {m: {t for t, _, _ in edges if t in MODULES and t != m} for m, edges in EDGES.items()}
    # The top-level package's lazy attribute access imports every pillar on demand; it is the
    # user's entry point, not a dependency of anything inside the package.
    graph.pop("cfjax", None)
    for edges in graph.values():
        edges.discard("cfjax")
    assert _cycle(graph) is None, f"import cycle: {' -> '.join(_cycle(graph))}"


def test_no_cycle_between_subpackages():
    graph: dict[str, set[str]] = {}
    for m, edges in EDGES.items():
        here = _subpackage(m)
        if not here:
            continue
        graph.setdefault(here, set()).update(
            _subpackage(t) for t, _, _ in edges if _subpackage(t) and _subpackage(t) != here)
    assert _cycle(graph) is None, f"import cycle between subpackages: {' -> '.join(_cycle(graph))}"


def test_the_foundation_imports_no_pillar():
    bad = [f"{m}:{line} imports {t}" for m, edges in EDGES.items() if _subpackage(m) in FOUNDATION
           for t, _, line in edges if _subpackage(t) in PILLARS]
    assert not bad, "the foundation imports a pillar:\n" + "\n".join(bad)


def _private(module: str, name: str) -> bool:
    """Whether the import reaches a private module of a pillar or a private name."""
    pillar_parts = module.split(".")[2:]  # below the subpackage
    return any(p.startswith("_") and not p.startswith("__") for p in pillar_parts) or (
        name.startswith("_") and not name.startswith("__"))


def test_no_private_name_across_subpackages():
    bad = [f"{m}:{line} imports {t}{'.' + name if name else ''}" for m, edges in EDGES.items()
           for t, name, line in edges
           if _subpackage(t) != _subpackage(m) and _subpackage(t) not in FOUNDATION and _private(t, name)]
    assert not bad, "private names imported across subpackages:\n" + "\n".join(bad)


def _private_uses(path: pathlib.Path) -> list[str]:
    """Private cfjax names an experiment imports or reaches by attribute (``cf.scm._x``)."""
    tree = ast.parse(path.read_text(), str(path))
    aliases = {"cfjax"}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == "cfjax" or alias.name.startswith("cfjax."):
                    aliases.add(alias.asname or alias.name.split(".")[0])
                    if any(p.startswith("_") for p in alias.name.split(".")[1:]):
                        found.append(f"{path.name}:{node.lineno} imports {alias.name}")
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("cfjax"):
            parts = node.module.split(".")[1:] + [a.name for a in node.names]
            if any(p.startswith("_") and not p.startswith("__") for p in parts):
                found.append(f"{path.name}:{node.lineno} imports from {node.module}")
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
            base = node.value
            while isinstance(base, ast.Attribute):
                base = base.value
            if isinstance(base, ast.Name) and base.id in aliases:
                found.append(f"{path.name}:{node.lineno} uses {ast.unparse(node)}")
    return found


@pytest.mark.parametrize("path", sorted((ROOT / "experiments").rglob("*.py")), ids=lambda p: p.name)
def test_experiments_use_public_names_only(path):
    found = _private_uses(path)
    assert not found, "private cfjax names:\n" + "\n".join(found)


def test_the_walker_sees_imports_inside_functions(tmp_path):
    """The reader counts an import inside a function body."""
    source = tmp_path / "mod.py"
    source.write_text("def f():\n    from cfjax.scm.model import _hidden\n    return _hidden\n")
    assert ("cfjax.scm.model", "_hidden", 2) in _imports(source, "cfjax.x.mod")
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None
