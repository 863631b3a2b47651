"""The API reference, written from the code: one page per subpackage of cfjax, every name of its
``__all__`` documented from its docstring, then each public module beneath it (the steps a
package does not export) with the names of its own ``__all__``.

A Sphinx extension (``extensions = [..., "api_pages"]``): the pages are written to
``docs/api/`` when the build starts (only when their text changed), so a new public name gets
its entry without anyone editing a page. A cross-reference by any of an object's names (its
package's, its module's, a relative one) resolves to the entry where it is documented.
"""

from __future__ import annotations

import enum
import importlib
import inspect
import pathlib
import pkgutil
import re
from typing import Any

import cfjax

HERE = pathlib.Path(__file__).resolve().parent
API = HERE / "api"

#: the subpackages and modules with a page, in the order of the index
PACKAGES = tuple(n for n in cfjax.__all__ if n[0].islower() and n != "__version__")

#: the foundation beneath the pillars (private packages, documented for those who build on them:
#: keys, the one training loop, network blocks, checkpoints) and the type aliases
FOUNDATION = (
    "cfjax.typing",
    "cfjax._core.keys",
    "cfjax._core.training",
    "cfjax._core.nn",
    "cfjax._core.optim",
    "cfjax._core.checkpoint",
)

#: id(object) → the dotted name under which it is documented (filled when the pages are written)
CANONICAL: dict[int, str] = {}
#: an object's last name → the names it is documented under (for short references)
BY_NAME: dict[str, set[str]] = {}


def _is_public(name: str) -> bool:
    return not any(part.startswith("_") for part in name.split("."))


def public_modules(package: str) -> list[str]:
    """The public modules beneath ``cfjax.<package>`` (none for a single-module package)."""
    module = importlib.import_module(f"cfjax.{package}")
    if not hasattr(module, "__path__"):
        return []
    return sorted(
        m.name
        for m in pkgutil.walk_packages(module.__path__, f"{module.__name__}.")
        if _is_public(m.name)
    )


def _directive(obj: Any, name: str) -> list[str]:
    if inspect.ismodule(obj):
        return []
    if inspect.isclass(obj):
        lines = [f".. autoclass:: {name}", "   :members:"]
        if issubclass(obj, enum.Enum):
            lines.append("   :undoc-members:")
        return lines + [""]
    if inspect.isfunction(obj) or inspect.isbuiltin(obj) or callable(obj) and hasattr(obj, "__wrapped__"):
        return [f".. autofunction:: {name}", ""]
    return [f".. autodata:: {name}", "   :no-value:" if not _short(obj) else "", ""]


def _short(obj: Any) -> bool:
    """Whether a constant's value is worth printing (a short repr)."""
    return isinstance(obj, (int, float, str, tuple, frozenset)) and len(repr(obj)) <= 80


def _record(obj: Any, dotted: str) -> None:
    CANONICAL.setdefault(id(obj), dotted)
    BY_NAME.setdefault(dotted.rsplit(".", 1)[1], set()).add(CANONICAL[id(obj)])
    if inspect.isclass(obj):
        for member, value in vars(obj).items():
            if member.startswith("_") and member != "__call__":
                continue
            fn = value.__func__ if isinstance(value, (staticmethod, classmethod)) else value
            if isinstance(fn, property):
                fn = fn.fget
            CANONICAL.setdefault(id(fn), f"{dotted}.{member}")
            BY_NAME.setdefault(f"{dotted.rsplit('.', 1)[1]}.{member}", set()).add(CANONICAL[id(fn)])
            BY_NAME.setdefault(member, set()).add(CANONICAL[id(fn)])


def _section(module_name: str, names: list[str], documented: set[int], heading: str) -> list[str]:
    module = importlib.import_module(module_name)
    parent, _, last = module_name.rpartition(".")
    # a module named like a function its package exports (cfjax.sensitivity.cfu): the function
    # keeps the name; the module's section is not a cross-reference target
    clash = parent and getattr(importlib.import_module(parent), last, module) is not module
    lines = [heading, "", "```{eval-rst}", f".. automodule:: {module_name}", "   :no-members:"]
    lines += ["   :no-index:", ""] if clash else [""]
    lines += [f".. currentmodule:: {module_name}", ""]
    for name in names:
        obj = getattr(module, name)
        if id(obj) in documented or inspect.ismodule(obj):
            continue
        documented.add(id(obj))
        _record(obj, f"{module_name}.{name}")
        lines += _directive(obj, name)
    return lines + ["```", ""]


#: ids of the objects already given an entry (each object is documented once, on its first page)
_DOCUMENTED: set[int] = set()


def page(package: str) -> str:
    """The Markdown of ``cfjax.<package>``'s page."""
    module = importlib.import_module(f"cfjax.{package}")
    documented = _DOCUMENTED
    lines = [f"# cfjax.{package}", ""]
    lines += _section(module.__name__, list(module.__all__), documented, "")
    beneath = public_modules(package)
    if beneath:
        lines += ["## Modules", ""]
        lines += [
            "What the package does not export lives in its modules, each documented here with the "
            "names of its own `__all__` (those the package exports are above); a module without "
            "one holds the machinery beneath, described by its docstring.",
            "",
        ]
    for name in beneath:
        sub = importlib.import_module(name)
        lines += _section(name, list(getattr(sub, "__all__", ())), documented, f"### {name}")
    return "\n".join(line for line in lines) + "\n"


def index() -> str:
    lines = [
        "# API reference",
        "",
        "Every public name of cfjax, by subpackage: what the package exports first, then the",
        "modules beneath it. Arrays follow [the array contract](../contract.md); the equations are",
        "in [the definitions](../definitions.md).",
        "",
        "```{toctree}",
        ":maxdepth: 1",
        "",
        "cfjax",
    ]
    lines += list(PACKAGES) + ["foundation", "```", ""]
    return "\n".join(lines)


def foundation() -> str:
    """The foundation's page: its modules' ``__all__`` (what the pillars build on)."""
    lines = [
        "# The foundation",
        "",
        "What the pillars build on, for those who write their own trainer, mechanism or pillar:",
        "keys (`key=` as a typed key, raw key data or an int), the one training loop, network",
        "blocks, the type aliases of the signatures, and the checkpoint store. These modules import",
        "no pillar; their names may change between releases with less notice than a pillar's.",
        "",
    ]
    for name in FOUNDATION:
        module = importlib.import_module(name)
        lines += _section(name, list(getattr(module, "__all__", ())), _DOCUMENTED, f"## {name}")
    return "\n".join(lines)


def top() -> str:
    names = [n for n in cfjax.__all__ if n not in PACKAGES and n != "__version__"]
    lines = ["# cfjax", "", "```{eval-rst}", ".. automodule:: cfjax", "   :no-members:", "", ".. currentmodule:: cfjax", ""]
    for name in names:
        obj = getattr(cfjax, name)
        _record(obj, f"cfjax.{name}")
        _DOCUMENTED.add(id(obj))
        lines += _directive(obj, name)
    return "\n".join(lines + ["```", ""])


def write_pages(app: Any = None) -> list[pathlib.Path]:
    """Write docs/api/*.md (each only when its text changed); returns the pages."""
    API.mkdir(exist_ok=True)
    CANONICAL.clear()
    BY_NAME.clear()
    _DOCUMENTED.clear()
    pages = {"index": index(), "cfjax": top()}
    pages.update({package: page(package) for package in PACKAGES})
    pages["foundation"] = foundation()
    written = []
    for name, text in pages.items():
        path = API / f"{name}.md"
        if not path.exists() or path.read_text() != text:
            path.write_text(text)
        written.append(path)
    return written


def _lookup(dotted: str) -> Any:
    """The object a dotted name refers to (the longest importable module, then attributes), or
    a sentinel when there is none."""
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for attr in parts[i:]:
            try:
                obj = inspect.getattr_static(obj, attr)
            except AttributeError:
                return _MISSING
            if isinstance(obj, (staticmethod, classmethod)):
                obj = obj.__func__
            elif isinstance(obj, property):
                obj = obj.fget
        return obj
    return _MISSING


_MISSING = object()


def resolve(app: Any, env: Any, node: Any, contnode: Any) -> Any:
    """A Python cross-reference Sphinx did not resolve, resolved by identity: the object the
    name (absolute, or relative to the current module or class) refers to, at the name it is
    documented under."""
    if node.get("refdomain") != "py":
        return None
    target = node["reftarget"].lstrip("~.")
    module, cls = node.get("py:module"), node.get("py:class")
    candidates = [target]
    if module:
        if cls:
            candidates.append(f"{module}.{cls}.{target}")
        parts = module.split(".")
        candidates += [".".join(parts[:i] + [target]) for i in range(len(parts), 0, -1)]
    domain = env.get_domain("py")
    if any(ch.isspace() for ch in target):  # prose napoleon read as a type: not a reference
        return contnode
    short = BY_NAME.get(target, set())
    if len(short) == 1:  # a short name that only one documented object carries
        candidates.append(next(iter(short)))
    for candidate in candidates:
        obj = _lookup(candidate)
        if obj is _MISSING:
            continue
        if inspect.ismodule(obj):
            name, kind = obj.__name__, "mod"
        elif id(obj) in CANONICAL:
            name, kind = CANONICAL[id(obj)], "obj"
        else:
            continue
        found = domain.resolve_xref(env, node["refdoc"], app.builder, kind, name, node, contnode)
        if found is not None:
            return found
    # A name that exists in the code but has no entry (a module's helper outside its __all__)
    # reads as plain text; a name that exists nowhere stays an error.
    if any(_lookup(c) is not _MISSING for c in candidates):
        return contnode
    return None


def plain_attribute_summary(app: Any, what: str, name: str, obj: Any, options: Any, lines: list[str]) -> None:
    """Before napoleon: a constant's or attribute's one-line summary with a colon in it
    ("the XLA flag that switches off XLA:CPU's scheduler") is prose, not ``type: description``."""
    kind_doc = inspect.getdoc(type(obj)) if obj is not None else None
    if what in ("data", "attribute") and lines and kind_doc and lines[0] == kind_doc.splitlines()[0]:
        lines[:] = []  # no documentation of its own: not its type's (dict's, tuple's) either
        return
    if what in ("data", "attribute", "property") and lines and ":" in lines[0]:
        lines[0] = lines[0].replace(":", "\u2236")


# ------------------------------------------------------- definitions <-> the code implementing them
#: "definitions §3.5" (or "§3.5" after "definitions") in a docstring
_CITATION = re.compile(r"definitions (?:§|section )(\d+(?:\.\d+)?)")
_HEADING = re.compile(r"^(#{2,3}) (\d+(?:\.\d+)?)\.? ")


def _slug(title: str) -> str:
    """MyST's heading anchor (its default slug function)."""
    from myst_parser.mdit_to_docutils.base import default_slugify

    return default_slugify(title)


def definition_anchors() -> dict[str, str]:
    """Section number ("3.5") → its anchor on the definitions page."""
    out = {}
    for line in (HERE / "definitions.md").read_text(encoding="utf-8").splitlines():
        m = _HEADING.match(line)
        if m:
            out[m.group(2)] = _slug(line.lstrip("#").strip())
    return out


def citations() -> dict[str, list[str]]:
    """Section number → the documented objects whose docstring cites it, by documented name."""
    objects = {}
    for package in PACKAGES:
        for module_name in [f"cfjax.{package}", *public_modules(package)]:
            module = importlib.import_module(module_name)
            for name in getattr(module, "__all__", ()):
                obj = getattr(module, name)
                if id(obj) in CANONICAL and not inspect.ismodule(obj):
                    objects[CANONICAL[id(obj)]] = obj
    out: dict[str, list[str]] = {}
    for name, obj in sorted(objects.items()):
        for section in sorted(set(_CITATION.findall(inspect.getdoc(obj) or ""))):
            out.setdefault(section, []).append(name)
    return out


def link_citations(app: Any, what: str, name: str, obj: Any, options: Any, lines: list[str]) -> None:
    """autodoc: "definitions §3.5" in a docstring becomes a link to that section (every page that
    renders docstrings is one folder below the definitions page)."""
    anchors = app.env.cfjax_definition_anchors
    for i, line in enumerate(lines):
        lines[i] = _CITATION.sub(
            lambda m: f"`definitions §{m.group(1)} <../definitions.html#{anchors[m.group(1)]}>`__\\ "
            if m.group(1) in anchors else m.group(0),
            line,
        )


def implemented_by(app: Any, docname: str, source: list[str]) -> None:
    """The definitions page: under each numbered section, the functions that implement it."""
    if docname != "definitions":
        return
    cited = citations()
    out = []
    for line in source[0].splitlines():
        out.append(line)
        m = _HEADING.match(line)
        if m and cited.get(m.group(2)):
            names = ", ".join(f"{{py:obj}}`~{n}`" for n in cited[m.group(2)])
            out += ["", f"*In cfjax:* {names}.", ""]
    source[0] = "\n".join(out) + "\n"


def _anchors(app: Any) -> None:
    app.env.cfjax_definition_anchors = definition_anchors()


def setup(app: Any) -> dict[str, Any]:
    app.connect("builder-inited", write_pages)
    app.connect("builder-inited", _anchors)
    app.connect("missing-reference", resolve)
    app.connect("autodoc-process-docstring", link_citations)
    app.connect("autodoc-process-docstring", plain_attribute_summary, priority=100)
    app.connect("source-read", implemented_by)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
