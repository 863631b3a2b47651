"""The ``cfjax`` command: cfjax's pillars on files, without writing code.

Subcommands (each in its own module, registered below): ``evaluate`` (a predictions file → the
counterfactual-marginalisation report), ``sensitivity`` (a CSV and a graph file → the worst-case
counterfactual-unfairness curve), ``cfr`` (embeddings → counterfactual-representation scores),
``chest`` (the synthetic chest SCM's counterfactual image grid), ``train`` (counterfactual training
against a sex shortcut, :mod:`cfjax.study.cftraining`).

A user mistake (a missing file or column, a wrong shape, NaN, probabilities outside [0, 1], an
unknown option) ends in one line on stderr naming what is wrong and a non-zero exit code, never
a traceback; outputs are written atomically into ``--out``.

Every subcommand loads the programs an earlier run compiled from JAX's persistent compilation
cache (:func:`cfjax.platform.use_compilation_cache`): ``cfjax --no-cache COMMAND`` or
``CFJAX_CACHE_DIR=off`` compiles afresh, ``CFJAX_CACHE_DIR=PATH`` moves the cache.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import ParamSpec, TypeVar

import click

from cfjax.cli import common

_P = ParamSpec("_P")
_R = TypeVar("_R")

__all__ = ["cli", "main"]


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(package_name="cfjax", prog_name="cfjax")
@click.option(
    "--no-cache",
    is_flag=True,
    help="compile every program afresh, without the persistent compilation cache (on by "
    "default, in the per-user cache folder; CFJAX_CACHE_DIR=PATH moves it, "
    "CFJAX_CACHE_DIR=off turns it off)",
)
def cli(no_cache: bool) -> None:
    """cfjax: evaluate models with counterfactuals (counterfactual marginalisation, sensitivity
    of counterfactual fairness to unmeasured confounding, counterfactual representations).

    Run ``cfjax COMMAND --help`` for a command's options and a runnable example.
    """


def _cached(callback: Callable[_P, _R]) -> Callable[_P, _R]:
    """``callback`` with the compilation cache turned on first (off with ``--no-cache``): when the
    subcommand runs, not for its ``--help``, which answers without starting JAX."""

    @functools.wraps(callback)
    def run(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        from cfjax import platform

        platform.use_compilation_cache(
            False if click.get_current_context().find_root().params.get("no_cache") else None
        )
        return callback(*args, **kwargs)

    return run


def _register() -> None:
    """Add every subcommand module's command to the group, each turning the cache on when it runs."""
    import importlib

    for name in ("demo", "evaluate", "sensitivity", "cfr", "chest", "train"):
        command = importlib.import_module(f"cfjax.cli.{name}").command
        command.callback = _cached(command.callback)
        cli.add_command(command, name)


_register()


def main(argv: list[str] | None = None) -> None:
    """The console script: runs :func:`cli`, turning user mistakes into one line and exit code 2."""
    common.run(cli, argv)
