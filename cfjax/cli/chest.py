"""``cfjax chest``: the counterfactual image grid of the synthetic chest-radiograph SCM.

Each row of ``grid.png`` is one unit drawn from :class:`cfjax.data.ChestSCM`: its factual
image, then its 16 exact counterfactuals under do(sex, age) for sex ∈ {0, 1} × age ∈ 8 values
from 20 to 90 (sex varying slowest). The first half of the rows are units without effusion,
the second half units with effusion (their factual status). ``results.json`` holds the
interventions and each unit's factual and counterfactual parents; ``report.md`` describes the
grid. With matplotlib (the ``plots`` extra), ``counterfactual_grid.png`` and ``.pdf`` show the
same units labelled (:func:`cfjax.scm.counterfactual_grid`), with counterfactual − factual.
"""

from __future__ import annotations

import os
from typing import Any

import click
import numpy as np

from cfjax.cli import common
from cfjax.cli.common import UserError

__all__ = ["command"]

_EXAMPLE = """\b
Example:
  cfjax chest --out results/chest
  cfjax chest --out results/chest_small --size 32 --units 4 --seed 1
"""


def __getattr__(name: str) -> Any:
    """``AGES``, moved to :data:`cfjax.data.AGES`: resolved on first use, with a
    DeprecationWarning (importing :mod:`cfjax.data` starts JAX, and ``cfjax --help`` imports this
    module)."""
    if name == "AGES":
        from cfjax import _deprecations
        from cfjax.data import AGES

        return _deprecations.getattr_for(__name__, {"AGES": ("cfjax.data.AGES", AGES)})(name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _grid(images: np.ndarray, cfs: np.ndarray, rows: list[int], size: int) -> np.ndarray:
    """Rows ``[factual | gap | cf_0 | cf_1 | …]`` (``cfs``: ``(N, K, H, W)``) with white separators (2 pixels, 4 after the
    factual image, 2 between rows), values in [0, 1]."""
    pad = np.ones((size, 2))
    lines = [
        np.concatenate(
            [images[i], pad, pad]
            + [np.concatenate([cfs[i, k], pad], axis=1) for k in range(cfs.shape[1])],
            axis=1,
        )
        for i in rows
    ]
    gap = np.ones((2, lines[0].shape[1]))
    return np.concatenate([part for line in lines for part in (gap, line)][1:], axis=0)


def _unit(parents: dict[str, np.ndarray], i: int) -> dict[str, Any]:
    return {
        v: (float(x[i]) if x.dtype.kind == "f" else int(x[i])) for v, x in sorted(parents.items())
    }


@click.command(epilog=_EXAMPLE, context_settings={"help_option_names": ["-h", "--help"]})
@common.out_option("results/chest")
@common.force_option
@common.seed_option
@click.option(
    "--size",
    type=click.IntRange(32, 192),
    default=64,
    show_default=True,
    help="image side in pixels",
)
@click.option(
    "--units",
    type=click.IntRange(1, 64),
    default=6,
    show_default=True,
    help="rows of the grid: the first half without effusion, the rest with effusion",
)
@click.option(
    "--label",
    type=click.Choice(["fixed", "follows"]),
    default="fixed",
    show_default=True,
    help="effusion held at each unit's observed value (fixed) or following the new age",
)
def command(out, force, seed, size, units, label):
    """The counterfactual image grid of the synthetic chest-radiograph SCM: grid.png,
    results.json and report.md in --out.

    Each row is a unit's factual image followed by its 16 exact counterfactuals under
    do(sex, age), sex in {0, 1} × age in {20, 30, …, 90}.
    """
    import importlib.util

    if importlib.util.find_spec("PIL") is None:
        raise UserError("the grid is written as a PNG with Pillow: pip install 'cfjax[images]'")
    out = common.prepare_out(out, force)
    import jax

    from cfjax.data import AGES, ChestSCM
    from cfjax.io import write_png
    from cfjax.scm import intervention_grid

    say = common.progress("chest")
    say(f"drawing units of the synthetic chest SCM ({size}×{size} images)")
    chest = ChestSCM(size=size)
    n_free, n_eff = units - units // 2, units // 2
    pool = max(64, 16 * units)
    key_sample, key_cf = jax.random.split(jax.random.key(seed))
    rec = chest.sample(pool, key=key_sample)
    effusion = np.asarray(rec["parents"]["effusion"])
    free, eff = np.flatnonzero(effusion == 0), np.flatnonzero(effusion == 1)
    if len(free) < n_free or len(eff) < n_eff:  # rare: a pool of 16 per row
        raise UserError(
            f"--seed {seed}: the pool of {pool} units has {len(free)} without and "
            f"{len(eff)} with effusion, fewer than the {n_free} + {n_eff} rows asked "
            "for; try another --seed or fewer --units"
        )
    idx = np.concatenate([free[:n_free], eff[:n_eff]])
    sub = {
        "parents": {v: x[idx] for v, x in rec["parents"].items()},
        "noise": jax.tree.map(lambda a: a[idx], rec["noise"]),
        "image": rec["image"][idx],
    }
    do, q, axis = intervention_grid({"sex": [0, 1], "age": list(AGES)}, describe=True)
    say(f"rendering {units} × {do['sex'].shape[0]} counterfactual images")
    res = chest.counterfactuals(sub, do, key=key_cf, label=label)
    images, cfs = np.asarray(sub["image"]), np.asarray(res["image"])
    grid = _grid(images, cfs, list(range(units)), size)
    write_png(os.path.join(out, "grid.png"), grid)
    figure = None
    if importlib.util.find_spec("matplotlib") is not None:  # the labelled grid (the `plots` extra)
        from cfjax import figures
        from cfjax.scm import counterfactual_grid

        rows_named = [
            f"unit {r + 1}\n{'effusion' if e else 'no effusion'}"
            for r, e in enumerate(np.asarray(sub["parents"]["effusion"]))
        ]
        fig = counterfactual_grid(
            images,
            {"exact": cfs},
            axis,
            unit_labels=rows_named,
            tile_inches=max(0.5, size / 150),
            image_limits=(0.0, 1.0),
        )
        figure = [
            os.path.basename(p)
            for p in figures.save_figure(fig, os.path.join(out, "counterfactual_grid.png"))
        ]

    parents = {v: np.asarray(x) for v, x in sub["parents"].items()}
    cf_parents = {v: np.asarray(x) for v, x in res["parents"].items()}  # (units, K)
    k = cfs.shape[1]
    interventions = [{"sex": int(do["sex"][j]), "age": float(do["age"][j])} for j in range(k)]
    columns = ["factual"] + [f"do(sex={d['sex']}, age={d['age']:g})" for d in interventions]
    rows = []
    for r in range(units):
        rows.append(
            {
                "row": r,
                "pool_index": int(idx[r]),
                "parents": _unit(parents, r),
                "counterfactual_parents": [
                    _unit({v: x[:, j] for v, x in cf_parents.items()}, r) for j in range(k)
                ],
            }
        )
    changed = float(np.mean(cf_parents["effusion"] != parents["effusion"][:, None]))
    results = {
        "seed": seed,
        "size": size,
        "units": units,
        "label": label,
        "pool": pool,
        "interventions": interventions,
        "weights": np.asarray(q, np.float64),
        "columns": columns,
        "rows": rows,
        "effusion_changed": changed,
        "grid": {
            "file": "grid.png",
            "height": int(grid.shape[0]),
            "width": int(grid.shape[1]),
            "tile": size,
        },
        "figure": figure,
    }
    common.write_json(os.path.join(out, "results.json"), results)
    common.write_text(os.path.join(out, "report.md"), _markdown(results))
    click.echo(
        f"wrote {os.path.join(out, 'grid.png')} ({grid.shape[1]}×{grid.shape[0]}), "
        + (", ".join(figure) + ", " if figure else "")
        + "results.json, report.md"
    )


def _markdown(r: dict[str, Any]) -> str:
    n_free = r["units"] - r["units"] // 2
    label = (
        "held at each unit's observed value in every counterfactual"
        if r["label"] == "fixed"
        else f"following the new age (changed in {100 * r['effusion_changed']:.1f}% of counterfactuals)"
    )
    lines = [
        "# Counterfactual chest radiographs",
        "",
        "![grid](grid.png)",
        "",
        f"Synthetic chest-radiograph SCM, {r['size']}×{r['size']} images, seed {r['seed']}. "
        f"Each row is one unit: its factual image, then its {len(r['interventions'])} exact "
        "counterfactuals (same image noise, counterfactual parents, rendered again) under "
        "do(sex, age), sex in {0, 1} × age in {20, 30, …, 90}, sex varying slowest.",
        f"Rows 1–{n_free}: units without effusion; the rest: units with effusion. "
        f"Effusion (the label) is {label}. Race is kept; lung size follows sex and age with "
        "its abducted noise.",
        "",
        "| row | sex | age | race | lung | effusion |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    for u in r["rows"]:
        p = u["parents"]
        lines.append(
            f"| {u['row'] + 1} | {p['sex']} | {p['age']:.1f} | {p['race']} | "
            f"{p['lung']:.3f} | {p['effusion']} |"
        )
    lines += ["", "Columns: " + ", ".join(r["columns"]) + "."]
    if r.get("figure"):
        lines += [
            "",
            "![labelled grid and differences](counterfactual_grid.png)",
            "",
            "The same units labelled: (a) factual and counterfactual images under the interventions above "
            "each column; (b) counterfactual − factual (red: brighter, blue: darker) on one colour scale. "
            "Also as a PDF (counterfactual_grid.pdf).",
        ]
    return "\n".join(lines) + "\n"
