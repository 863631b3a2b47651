"""The ``cfjax`` command: cfjax's pillars on files, without writing code.

Subcommands (each in its own module, registered below): ``evaluate`` (a predictions file → the
counterfactual-marginalisation report), ``sensitivity`` (a CSV and a graph file → the worst-case
counterfactual-unfairness curve), ``cfr`` (embeddings → counterfactual-representation scores),
``chest`` (the synthetic chest SCM's counterfactual image grid).

A user mistake (a missing file or column, a wrong shape, NaN, probabilities outside [0, 1], an
unknown option) ends in one line on stderr naming what is wrong and a non-zero exit code, never
a traceback; outputs are written atomically into ``--out``.
"""

from __future__ import annotations

import click

from cfjax.cli import common

__all__ = ["cli", "main"]


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(package_name="cfjax", prog_name="cfjax")
def cli() -> None:
    """cfjax: evaluate models with counterfactuals (counterfactual marginalisation, sensitivity
    of counterfactual fairness to unmeasured confounding, counterfactual representations).

    Run ``cfjax COMMAND --help`` for a command's options and a runnable example.
    """


def _register() -> None:
    """Add every subcommand module's command to the group."""
    import importlib

    for name in ("demo", "evaluate", "sensitivity", "cfr", "chest"):
        cli.add_command(importlib.import_module(f"cfjax.cli.{name}").command, name)


_register()


def main(argv: list[str] | None = None) -> None:
    """The console script: runs :func:`cli`, turning user mistakes into one line and exit code 2."""
    common.run(cli, argv)
