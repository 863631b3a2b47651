"""``cfjax train``: counterfactual training against a sex shortcut on the synthetic chest SCM.

Trains, on paper 000's sex-biased training sets of site A, the basic classifier, the chosen
counterfactual objectives (``--objective``, repeatable: ``augment``, ``cf_risk``,
``cvar:ALPHA``, ``variance:STRENGTH``, ``flip:STRENGTH``), the reweighting and group DRO
baselines and an unbiased reference, as one vmapped ensemble per counterfactual source, and
scores each with bootstrap intervals (:func:`cfjax.study.cftraining.run_arm`): ``report.md``,
``results.json`` and ``sex_effect.png`` in ``--out``.
"""

from __future__ import annotations

import click

from cfjax.cli import common
from cfjax.cli.common import UserError

__all__ = ["command", "parse_objective"]

_EXAMPLE = """\b
Example:
  cfjax train --out results/train --quick
  cfjax train --objective variance:1 --objective flip:0.5 --bias 0.9 --bias 0.95
  cfjax train --learned --seeds 3     # learned (HVAE) counterfactuals as well
"""


def parse_objective(text: str):
    """``NAME`` or ``NAME:VALUE`` (the strength of a penalty, the level of a CVaR) as an
    :class:`cfjax.predictors.Objective`; a UserError naming ``--objective`` otherwise."""
    from cfjax.predictors import Objective
    from cfjax.predictors.objectives import OBJECTIVES

    name, _, value = text.partition(":")
    try:
        number = float(value) if value else None
    except ValueError:
        raise UserError(
            f"--objective {text!r}: expected NAME or NAME:NUMBER, got {value!r} after the colon"
        ) from None
    try:
        if name == "cvar":
            objective = Objective("cvar", alpha=1.0 if number is None else number)
        elif name in ("variance", "flip"):
            if number is None:
                raise UserError(f"--objective {text!r}: expected {name}:STRENGTH, e.g. {name}:1")
            objective = Objective(name, strength=number)
        elif number is not None:
            raise UserError(f"--objective {text!r}: {name!r} takes no value")
        else:
            objective = Objective(name)
    except ValueError as e:
        raise UserError(f"--objective {text!r}: {e}") from None
    if not objective.needs_counterfactuals:
        choices = [o for o in OBJECTIVES if o not in ("basic", "group_dro")]
        raise UserError(
            f"--objective {text!r}: expected a counterfactual objective, one of {choices} "
            "(basic, reweighting and group DRO are always trained)"
        )
    return objective


@click.command(epilog=_EXAMPLE, context_settings={"help_option_names": ["-h", "--help"]})
@common.out_option("results/train")
@common.force_option
@common.seed_option
@common.devices_option
@click.option(
    "--objective",
    "objectives",
    multiple=True,
    metavar="NAME[:VALUE]",
    help="a counterfactual objective to train (repeatable): augment, cf_risk, cvar:ALPHA, "
    "variance:STRENGTH, flip:STRENGTH [default: augment, variance:0.3, variance:1, variance:3, cf_risk]",
)
@click.option(
    "--bias",
    "biases",
    multiple=True,
    type=click.FloatRange(0, 1, min_open=True, max_open=True),
    help="sex-bias strength α of a training set (repeatable) [default: 0.8, 0.9, 0.95]",
)
@click.option(
    "--seeds", type=click.IntRange(1, 10), default=2, show_default=True, help="seeds per method"
)
@click.option(
    "--learned",
    is_flag=True,
    help="train an HVAE generator and the objectives with its counterfactuals too",
)
@click.option("--quick", is_flag=True, help="a tiny scale that checks the pipeline")
def command(out, force, seed, devices, objectives, biases, seeds, learned, quick):
    """Counterfactual training against a sex shortcut: the basic classifier, counterfactual
    objectives with exact (and with --learned, learned) counterfactuals, reweighting and group
    DRO on sex-biased chest radiographs; report.md, results.json and sex_effect.png in --out.
    """
    if seed < 0:
        raise UserError(f"--seed {seed}: expected a non-negative integer")
    chosen = tuple(parse_objective(o) for o in objectives)
    common.use_devices(devices)
    import importlib.util

    if importlib.util.find_spec("matplotlib") is None:
        raise UserError(
            "the report draws a figure with matplotlib: pip install 'cfjax[plots]'"
        ) from None
    folder = common.prepare_out(out, force)
    import dataclasses

    from cfjax.study import cftraining as ct

    base = ct.ARM_TINY if quick else ct.ARM_QUICK
    changes = {"seeds": tuple(range(seeds))}
    if chosen:
        changes["objectives"] = chosen
    if biases:
        changes["biases"] = tuple(biases)
    if learned:
        changes["generator"] = ct.GENERATOR_TINY if quick else ct.ls.GENERATOR_QUICK
    config = dataclasses.replace(base, **changes)
    ct.run_arm(config, folder, key=seed, log=common.progress("train"))
    click.echo(f"wrote {folder}/report.md, results.json and sex_effect.png")
