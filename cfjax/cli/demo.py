"""``cfjax demo``: the three pillars at a small scale on built-in synthetic data
(:func:`cfjax.study.demo.run_demo`: paper 000's study with exact and learned counterfactual
images, the sensitivity of counterfactual fairness to confounding, counterfactual
representations and counterfactual training).

Writes ``report.md`` (tables and figures), ``results.json`` (every number; the same seed gives
byte-identical JSON on the same machine: run times and checkpoint reuse are left out),
``run_times.json`` (the stages' wall times, the CPUs, the date, the load average and whether
trained checkpoints were reused) and PNG figures into ``--out``; the full study report is in
``marginalisation/``. The README's demo section is generated from ``results.json`` and
``run_times.json`` (``python -m experiments.demo_readme``).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

import click

from cfjax.cli import common
from cfjax.cli.common import UserError

__all__ = ["command"]

_EXAMPLE = """\b
Example:
  cfjax demo                      # every section, at a size a CPU runs
  cfjax demo --quick --out results/demo_quick
  cfjax demo --devices 2 --force  # the ensembles' members over 2 devices
"""

#: names that moved to the library: (module, its name there); the public ones warn when used
_MOVED = {
    "Scale": ("cfjax.study.demo", "Scale"),
    "DEMO": ("cfjax.study.demo", "DEMO"),
    "QUICK": ("cfjax.study.demo", "QUICK"),
    "demo": ("cfjax.study.demo", "run_demo"),
    "_search_notes": ("cfjax.study.demo_report", "search_notes"),
    "_sensitivity_section": ("cfjax.study.demo_report", "sensitivity_section"),
}


def __getattr__(name: str) -> Any:
    """The names that moved to :mod:`cfjax.study.demo`, resolved on first use (the library starts
    JAX, and ``cfjax --help`` imports this module); the public ones with a DeprecationWarning
    (``demo(out, seed=s)`` is ``run_demo(out, key=s)``)."""
    if name not in _MOVED:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    from cfjax import _deprecations

    module, new = _MOVED[name]
    obj = getattr(importlib.import_module(module), new)
    if name.startswith("_"):
        return obj
    if name == "demo":

        def demo(
            out: str,
            *,
            quick: bool = False,
            seed: int = 0,
            command: str = "cfjax demo",
            log: Callable[[str], None] = click.echo,
            progress: bool | None = None,
        ) -> dict[str, Any]:
            return obj(out, quick=quick, key=seed, command=command, log=log, progress=progress)

        obj, new = demo, "run_demo (key= for seed=)"
    return _deprecations.getattr_for(__name__, {name: (f"{module}.{new}", obj)})(name)


@click.command(epilog=_EXAMPLE, context_settings={"help_option_names": ["-h", "--help"]})
@common.out_option("results/demo")
@common.force_option
@common.seed_option
@common.devices_option
@click.option("--quick", is_flag=True, help="a tiny scale that checks the pipeline")
def command(out: str, force: bool, seed: int, quick: bool, devices: int | None) -> None:
    """All three pillars of cfjax on built-in synthetic data: paper 000's study (trained
    classifiers, exact and learned counterfactual images), the sensitivity of counterfactual
    fairness to confounding, and counterfactual representations. Writes report.md,
    results.json and PNG figures into --out.
    """
    if seed < 0:
        raise UserError(f"--seed {seed}: expected a non-negative integer")
    # Before JAX starts: with N devices the ensembles' members are trained and run side by
    # side over them (equal to one device's numbers to float rounding).
    common.use_devices(devices)
    import importlib.util

    if importlib.util.find_spec("matplotlib") is None:
        raise UserError(
            "the demo draws figures with matplotlib: pip install 'cfjax[plots]' "
            "(make demo installs it)"
        ) from None
    folder = common.prepare_out(out, force)
    cmd = "cfjax demo" + (" --quick" if quick else "") + (f" --seed {seed}" if seed else "")
    from cfjax.study.demo import run_demo

    t0 = time.perf_counter()
    run_demo(folder, quick=quick, key=seed, command=cmd, log=click.echo)
    click.echo(
        f"cfjax demo: done in {time.perf_counter() - t0:.0f} s; report: {os.path.join(folder, 'report.md')} "
        f"(results.json and figures beside it)"
    )
