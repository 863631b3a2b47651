"""The public surface a user holds in mind (docs/contract.md §6): each public name exported once,
from where it lives; at most 12 parameters for every public function outside the command; the
deprecated names resolve to their new objects with a warning naming the new one."""

from __future__ import annotations

import importlib
import inspect
import pathlib
import pkgutil
import warnings

import pytest

import cfjax

PACKAGES = [name for name in cfjax.__all__ if name not in ("__version__",) and name[0].islower()]
# A ratchet: the surface may shrink, not grow (350 names before the vocabulary work, 177 after;
# the aim is about 200).
MAX_NAMES = 177
MAX_PARAMETERS = 12


def _exports():
    """(package, name, object) for every name in a subpackage's ``__all__``."""
    out = []
    for pkg in PACKAGES:
        module = importlib.import_module(f"cfjax.{pkg}")
        for name in getattr(module, "__all__", ()):
            out.append((pkg, name, getattr(module, name)))
    return out


def _is_shared_constant(obj) -> bool:
    return isinstance(obj, (int, float, str, bytes, tuple, frozenset, type(None)))


def test_each_public_name_is_exported_once():
    seen: dict[int, str] = {}
    twice = []
    for pkg, name, obj in _exports():
        if _is_shared_constant(obj) or inspect.ismodule(obj):
            continue
        where = f"cfjax.{pkg}.{name}"
        if id(obj) in seen:
            twice.append((seen[id(obj)], where))
        seen.setdefault(id(obj), where)
    assert not twice, f"exported from two places: {twice}"


def test_the_number_of_public_names():
    names = _exports()
    assert len(names) <= MAX_NAMES, f"{len(names)} public names (at most {MAX_NAMES})"


def _parameters(fn) -> int:
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return 0
    # a **kwargs catch-all only takes the deprecated spellings of a release's renamed options
    return sum(p.name not in ("self", "cls") and p.kind is not p.VAR_KEYWORD for p in sig.parameters.values())


def _public_modules():
    """cfjax and every public module beneath it (a module path without a part starting with
    ``_``), the command's modules excepted."""
    names = ["cfjax"] + [m.name for m in pkgutil.walk_packages(cfjax.__path__, "cfjax.")
                         if not any(p.startswith("_") for p in m.name.split("."))
                         and not m.name.startswith("cfjax.cli")]
    return [importlib.import_module(n) for n in names]


def test_no_public_function_takes_more_than_twelve_parameters():
    """Every function and public method in the ``__all__`` of every public module (the
    subpackages' and the modules beneath them) takes at most 12 parameters."""
    wide, seen = [], set()
    for module in _public_modules():
        for name in getattr(module, "__all__", ()):
            obj = getattr(module, name)
            candidates = [(name, obj)] if inspect.isfunction(obj) else []
            if inspect.isclass(obj):
                candidates += [(f"{name}.{m}", f) for m, f in vars(obj).items()
                               if inspect.isfunction(f) and (not m.startswith("_") or m == "__call__")]
            for label, fn in candidates:
                if id(fn) in seen:
                    continue
                seen.add(id(fn))
                if _parameters(fn) > MAX_PARAMETERS:
                    wide.append(f"{module.__name__}.{label} ({_parameters(fn)})")
    assert not wide, f"public functions with more than {MAX_PARAMETERS} parameters: {wide}"


def test_deprecated_names_warn_and_resolve():
    checked = 0
    for pkg in PACKAGES:
        module = importlib.import_module(f"cfjax.{pkg}")
        table = getattr(module, "_DEPRECATED", {})
        for old, (new, obj) in table.items():
            with pytest.warns(DeprecationWarning, match=new.replace(".", r"\.")):
                assert getattr(module, old) is obj
            assert old not in module.__all__ and old not in dir(module)
            checked += 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(AttributeError):
            cfjax.metrics.no_such_name  # noqa: B018
    assert checked > 0


MAX_MODULE_LINES = 700


def test_no_module_is_longer_than_700_lines():
    """One file per concept: a module that grows past 700 lines holds two and is split."""
    root = pathlib.Path(cfjax.__file__).parent
    long = {str(p.relative_to(root)): n for p in root.rglob("*.py")
            if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES}
    assert not long, f"modules over {MAX_MODULE_LINES} lines: {long}"
