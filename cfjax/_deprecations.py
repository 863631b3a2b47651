"""Names that moved or were renamed keep working for one release, with a warning naming the new
one. A package lists them in a table and installs the module-level ``__getattr__`` this makes::

    _DEPRECATED = {"old_name": ("cfjax.pkg.new_name", new_object)}
    __getattr__ = _deprecations.getattr_for(__name__, _DEPRECATED)

The old names are not in the package's ``__all__`` nor in ``dir()``; the changelog's migration
table lists every one of them.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping
from typing import Any


def getattr_for(module: str, table: Mapping[str, tuple[str, Any]]) -> Callable[[str], Any]:
    """A module ``__getattr__`` resolving the deprecated names of ``table`` (old name → (the new
    dotted name, the object)) with a ``DeprecationWarning``, and raising AttributeError for
    every other name."""

    def __getattr__(name: str) -> Any:
        if name in table:
            new, obj = table[name]
            warnings.warn(
                f"{module}.{name} is deprecated and will be removed in the next release: use {new}",
                DeprecationWarning,
                stacklevel=2,
            )
            return obj
        raise AttributeError(f"module {module!r} has no attribute {name!r}")

    return __getattr__
