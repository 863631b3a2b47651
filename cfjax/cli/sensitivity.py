"""``cfjax sensitivity``: a CSV and a causal graph → how unfair the counterfactually fair
predictor could become under unmeasured confounding.

The table is read with pandas and turned into a fairness problem by
:func:`cfjax.sensitivity.from_frame` (columns found by name); the analysis is
:func:`cfjax.sensitivity.analyse` (the working model, every predictor's worst-case counterfactual
unfairness over correlation budgets, the inverse question, a ridge-penalty sweep, benchmarks,
bootstrap intervals and, with ``--contour``, CFU over two error correlations) and the report
:func:`cfjax.sensitivity.report.report_markdown`. This module parses the options, reads the
files and writes the outputs.
Everything runs in float64.

Outputs in ``--out``: ``report.md``, ``results.json`` (byte-identical for the same inputs and
seed) and ``curve.png`` and ``curve.pdf`` (when matplotlib is installed), ``contour.png`` and
``contour.pdf`` with ``--contour``.
"""

from __future__ import annotations

import json
import os
import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import click
import numpy as np

from cfjax._errors import ValidationError
from cfjax._results import plain
from cfjax.cli import common

if TYPE_CHECKING:
    import pandas as pd

    from cfjax.sensitivity.analysis import Analysis
    from cfjax.sensitivity.datasets import Problem
    from cfjax.typing import MeshLike

__all__ = ["command", "read_graph", "parse_categories", "parse_multiples", "parse_pairs"]

EXAMPLE = """\b
Example (a CSV with columns race, gpa, lsat, fya, and its graph):
  python -c "import numpy as np, pandas as pd; r = np.random.default_rng(0); \\
  a = r.choice(['white', 'black'], 300); g = 0.6 * (a == 'white') + r.normal(size=300); \\
  l = 0.7 * g + 0.35 * g**2 + r.normal(size=300); y = g + 0.5 * l + r.normal(size=300); \\
  pd.DataFrame(dict(race=a, gpa=g, lsat=l, fya=y)).to_csv('law.csv', index=False)"
  printf 'nodes:\\n  gpa: [race]\\n  lsat: [race, gpa]\\n' > graph.yaml
  cfjax sensitivity law.csv --graph graph.yaml --sensitive race --target fya \\
      --categories race=white,black --quick --out results/sensitivity
  # --devices N splits the budgets x restarts over N devices (the same numbers to rounding)
"""


def read_graph(path: str) -> dict[str, list[str]]:
    """The graph file: YAML or JSON, ``{nodes: {name: [parents...]}}`` or just a mapping
    ``name -> parents`` (a single parent may be a plain string, no parents an empty list or
    null). Raises :class:`~cfjax.cli.common.UserError` naming the file."""
    if not os.path.isfile(path):
        raise common.UserError(f"--graph {path!r}: no such file")
    with open(path, encoding="utf-8") as f:
        text = f.read()
    try:
        if path.lower().endswith(".json"):
            raw = json.loads(text)
        else:
            import yaml

            raw = yaml.safe_load(text)
    except Exception as e:  # a parse error of either format
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise common.UserError(
            f"--graph {path!r}: not valid {'JSON' if path.lower().endswith('.json') else 'YAML'} "
            f"({first})"
        ) from None
    if isinstance(raw, dict) and set(raw) == {"nodes"}:
        raw = raw["nodes"]
    if not isinstance(raw, dict) or not raw:
        raise common.UserError(
            f"--graph {path!r}: expected a mapping node -> parents (or {{nodes: {{...}}}}), "
            f"got {type(raw).__name__}"
        )
    graph: dict[str, list[str]] = {}
    for node, parents in raw.items():
        if parents is None:
            parents = []
        elif isinstance(parents, (str, int, float)):
            parents = [parents]
        if not isinstance(parents, list) or not all(
            isinstance(p, (str, int, float)) for p in parents
        ):
            raise common.UserError(
                f"--graph {path!r}: the parents of {node!r} must be a list of column names, "
                f"got {parents!r}"
            )
        graph[str(node)] = [str(p) for p in parents]
    return graph


def parse_categories(values: tuple[str, ...]) -> dict[str, list[str]]:
    """``COL=a,b,...`` options → ``{COL: [a, b, ...]}`` (levels coded 0, 1, ... in that order)."""
    out: dict[str, list[str]] = {}
    for v in values:
        col, sep, levels = v.partition("=")
        col, parts = col.strip(), [s.strip() for s in levels.split(",")]
        if not sep or not col or not levels.strip() or any(not s for s in parts):
            raise common.UserError(
                f"--categories {v!r}: expected COLUMN=level,level,... (e.g. race=white,black)"
            )
        if col in out:
            raise common.UserError(f"--categories: column {col!r} given twice")
        out[col] = parts
    return out


def parse_multiples(value: str) -> tuple[float, ...]:
    """``--benchmarks`` ``"1,2,3"`` → ``(1.0, 2.0, 3.0)``; ``"none"`` → ``()``."""
    if value.strip().lower() == "none":
        return ()
    try:
        ks = tuple(float(v) for v in value.split(","))
    except ValueError:
        ks = ()
    if not ks or not all(np.isfinite(k) and k > 0 for k in ks):
        raise common.UserError(
            f"--benchmarks {value!r}: expected positive multiples separated by commas "
            "(e.g. 1,2,3), or none"
        )
    return ks


def parse_pairs(value: str | None) -> tuple[tuple[str, str], tuple[str, str]] | None:
    """``--contour`` ``"O:M,M:J"`` → ``(("O", "M"), ("M", "J"))`` (the features are checked
    against the graph by :func:`cfjax.sensitivity.cfu_surface`)."""
    if value is None:
        return None
    pairs = [[s.strip() for s in part.split(":")] for part in value.split(",")]
    if len(pairs) != 2 or any(len(p) != 2 or not all(p) for p in pairs):
        raise common.UserError(f"--contour {value!r}: expected two feature pairs, e.g. O:M,M:J")
    (a, b), (c, d) = pairs
    return (a, b), (c, d)


def _check_contour(pairs: Any, features: tuple[str, ...]) -> None:
    """``--contour``'s pairs against the graph, before any fitting (a mistake stays one line)."""
    if len(features) < 3:
        raise common.UserError(
            f"--contour: the graph has {len(features)} features ({', '.join(features)}), one "
            "error correlation only; a contour needs three features or more (the curve is its "
            "worst case)"
        )
    for f in (f for p in pairs for f in p):
        if f not in features:
            raise common.UserError(
                f"--contour: {f!r} is not a feature of the graph ({', '.join(features)})"
            )
    if any(a == b for a, b in pairs) or {*pairs[0]} == {*pairs[1]}:
        raise common.UserError(
            f"--contour: expected two different pairs of two different features, got "
            f"{pairs[0][0]}:{pairs[0][1]},{pairs[1][0]}:{pairs[1][1]}"
        )


def _read_frame(path: str, categories: dict[str, list[str]]) -> pd.DataFrame:
    if not os.path.isfile(path):
        raise common.UserError(f"DATA {path!r}: no such file")
    try:
        import pandas as pd
    except ImportError:
        raise common.UserError("reading a CSV needs pandas: pip install pandas") from None
    try:
        frame = pd.read_csv(path)
    except Exception as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise common.UserError(f"DATA {path!r}: not a readable CSV ({first})") from None
    frame.columns = [str(c).strip() for c in frame.columns]
    for col in categories:
        if col in frame.columns and not frame[col].isna().any():
            frame[col] = (
                frame[col].astype(str).str.strip()
            )  # levels given as text on the command line
    return frame


def _problem(
    data: str,
    graph: str,
    sensitive: str,
    target: str,
    categories: dict[str, list[str]],
    contour: tuple[tuple[str, str], tuple[str, str]] | None,
) -> tuple[Problem, dict[str, list[str]]]:
    """The fairness problem of DATA and GRAPH (its graph's parents too), checked before any
    fitting: a user mistake stays one line naming the file or the option."""
    import cfjax.sensitivity as S

    parents = read_graph(graph)
    frame = _read_frame(data, categories)
    try:
        with warnings.catch_warnings(record=True):  # a degenerate graph: recorded by the analysis
            warnings.simplefilter("always", S.DegenerateProblemWarning)
            prob = S.from_frame(
                frame, parents, sensitive=sensitive, target=target, categories=categories or None
            )
    except ValidationError as e:
        msg = str(e)
        about_graph = msg.startswith(("`graph", "`parents", "`fair", "`sensitive"))
        where = f"--graph {graph!r}" if about_graph else f"DATA {data!r}"
        raise common.UserError(f"{where}: {msg}") from None
    if contour is not None:
        _check_contour(contour, prob.graph.features)
    return prob, parents


def _analyse(
    data: str,
    graph: str,
    sensitive: str,
    target: str,
    categories: dict[str, list[str]],
    budgets: int,
    restarts: int,
    quick: bool,
    seed: int,
    mesh: MeshLike = None,
    log: Callable[[str], None] = lambda message: None,
    multiples: tuple[float, ...] = (1.0, 2.0, 3.0),
    resamples: int = 0,
    contour: tuple[tuple[str, str], tuple[str, str]] | None = None,
) -> tuple[dict[str, Any], Analysis]:
    """results.json (the inputs, the seed and :func:`cfjax.sensitivity.analyse`'s results) and
    the analysis itself."""
    import cfjax.sensitivity as S

    prob, parents = _problem(data, graph, sensitive, target, categories, contour)
    analysis = S.analyse(
        prob,
        key=seed,
        budgets=budgets,
        restarts=restarts,
        quick=quick,
        benchmarks=multiples,
        resamples=resamples,
        contour=contour,
        mesh=mesh,
        log=log,
    )
    res = {
        "command": "sensitivity",
        "seed": seed,
        "quick": quick,
        "inputs": {
            "data": os.path.basename(data),
            "graph": os.path.basename(graph),
            "sensitive": sensitive,
            "target": target,
            "categories": categories,
            "graph_parents": parents,
        },
        **analysis.to_dict(),
    }
    return plain(res, strict=True, shortest=True), analysis


def _save_figures(folder: str, analysis: Analysis) -> str | None:
    """Draw the analysis' figures into ``curve.png`` (and ``.pdf``) and ``contour.png`` when there
    is one; returns the curve's caption, or None when matplotlib is not installed."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        click.echo(
            "cfjax: matplotlib is not installed; curve.png skipped (pip install matplotlib)",
            err=True,
        )
        return None
    from cfjax import figures

    drawn, caption = analysis.figures()
    for name, fig in drawn.items():
        figures.save_figure(fig, os.path.join(folder, f"{name}.png"))  # and the .pdf
    return caption


#: Names that moved into the library: old name → (the new one, a function returning it).
_MOVED: dict[str, tuple[str, Callable[[], Any]]] = {
    "search_options": (
        "cfjax.sensitivity.analysis.search_options",
        lambda: _analysis().search_options,
    ),
    "benchmark_marks": (
        "cfjax.sensitivity.Benchmarks.marks",
        lambda: lambda bench: {} if bench is None else bench.marks(),
    ),
    "SWEEP_LAMBDAS": (
        "cfjax.sensitivity.analysis.SWEEP_LAMBDAS",
        lambda: _analysis().SWEEP_LAMBDAS,
    ),
    "QUICK_SWEEP_LAMBDAS": (
        "cfjax.sensitivity.analysis.QUICK_SWEEP_LAMBDAS",
        lambda: _analysis().QUICK_SWEEP_LAMBDAS,
    ),
    "SWEEP_BUDGETS": ("cfjax.sensitivity.report.SWEEP_BUDGETS", lambda: _report().SWEEP_BUDGETS),
    "INTERPOLATES": ("cfjax.sensitivity.analysis.INTERPOLATES", lambda: _analysis().INTERPOLATES),
    "FLOOR_SHARE_TEXT": (
        "cfjax.sensitivity.report.FLOOR_SHARE_TEXT",
        lambda: _report().FLOOR_SHARE_TEXT,
    ),
    "analyse": (
        "cfjax.sensitivity.analyse (a Problem from cfjax.sensitivity.from_frame, key= for seed=)",
        lambda: _old_analyse,
    ),
}


def _analysis() -> Any:
    from cfjax.sensitivity import analysis

    return analysis


def _report() -> Any:
    from cfjax.sensitivity import report

    return report


def _old_analyse(
    data: str,
    graph: str,
    sensitive: str,
    target: str,
    categories: dict[str, list[str]],
    budgets: int,
    restarts: int,
    quick: bool,
    seed: int,
    mesh: MeshLike = None,
    log: Callable[[str], None] = lambda message: None,
    multiples: tuple[float, ...] = (1.0, 2.0, 3.0),
    resamples: int = 0,
    contour: Any = None,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The old ``analyse``: results.json and what the figures draw."""
    res, a = _analyse(
        data,
        graph,
        sensitive,
        target,
        categories,
        budgets,
        restarts,
        quick,
        seed,
        mesh,
        log,
        multiples,
        resamples,
        contour,
    )
    return res, {
        "worst_case": a.worst_case,
        "benchmarks": a.benchmarks,
        "intervals": a.intervals,
        "surface": a.surface,
    }


def __getattr__(name: str) -> Any:
    """The names that moved into the library, resolved on first use with a DeprecationWarning
    (importing the library starts JAX, and ``cfjax --help`` imports this module)."""
    if name in _MOVED:
        from cfjax import _deprecations

        new, get = _MOVED[name]
        return _deprecations.getattr_for(__name__, {name: (new, get())})(name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@click.command(epilog=EXAMPLE)
@click.argument("data", metavar="DATA")
@click.option(
    "--graph",
    "graph",
    required=True,
    metavar="GRAPH",
    help="YAML or JSON file: {nodes: {feature: [parents...]}} or just feature -> parents, over "
    "column names (the sensitive attribute among the parents, never the target)",
)
@click.option("--sensitive", required=True, metavar="A", help="column of the sensitive attribute")
@click.option("--target", required=True, metavar="Y", help="column of the outcome")
@click.option(
    "--categories",
    multiple=True,
    metavar="COL=a,b,...",
    help="code a text column: its levels, coded 0, 1, ... in this order (repeatable)",
)
@click.option(
    "--budgets",
    type=click.IntRange(min=2),
    default=None,
    help="number of budgets p_max, evenly spaced in [0, 0.99]  [default: 16; 4 with --quick]",
)
@click.option(
    "--restarts",
    type=click.IntRange(min=1),
    default=None,
    help="optimiser restarts per budget  [default: 4; 1 with --quick]",
)
@click.option(
    "--quick",
    is_flag=True,
    help="degree 2 only, λ among 0.01, 1, 100, few budgets and short searches (seconds on small data)",
)
@click.option(
    "--benchmarks",
    "benchmarks",
    default="1,2,3",
    show_default=True,
    metavar="K,K,...",
    help="benchmark the budget: the error correlation a confounder K times as strong as each observed "
    "parent would induce (its partial R² in each feature's equation), marked on the curve; none: skip",
)
@click.option(
    "--bootstrap",
    "bootstrap",
    type=click.IntRange(min=0),
    default=None,
    metavar="B",
    help="bootstrap resamples of the units for percentile intervals (every model refitted); 0: none  "
    "[default: 200; 20 with --quick]",
)
@click.option(
    "--contour",
    "contour",
    default=None,
    metavar="F:G,G:H",
    help="CFU over the error correlations of two feature pairs (three features or more), the region "
    "where P is not positive definite shaded: contour.png",
)
@common.out_option("results/sensitivity")
@common.force_option
@common.seed_option
@common.devices_option
def command(
    data: str,
    graph: str,
    sensitive: str,
    target: str,
    categories: tuple[str, ...],
    budgets: int | None,
    restarts: int | None,
    quick: bool,
    benchmarks: str,
    bootstrap: int | None,
    contour: str | None,
    out: str,
    force: bool,
    seed: int,
    devices: int | None,
) -> None:
    """Worst-case counterfactual unfairness of DATA (a CSV) under unmeasured confounding.

    Fits the causal working model on the columns named in GRAPH, the counterfactually fair
    predictor and two baselines, then reports the worst-case CFU of each over correlation
    budgets p_max, benchmarks of those budgets against the observed parents, the smallest
    budget reaching the blind baseline's unfairness, bootstrap intervals and a ridge-penalty
    sweep. Writes report.md, results.json and curve.png (and .pdf) into --out.
    """
    devices = common.use_devices(devices)  # before anything starts JAX
    import jax

    cats = parse_categories(categories)
    multiples = parse_multiples(benchmarks)
    pairs = parse_pairs(contour)
    resamples = bootstrap if bootstrap is not None else (20 if quick else 200)
    budgets = budgets if budgets is not None else (4 if quick else 16)
    restarts = restarts if restarts is not None else (1 if quick else 4)
    if not os.path.isfile(data):
        raise common.UserError(f"DATA {data!r}: no such file")
    if not os.path.isfile(graph):
        raise common.UserError(f"--graph {graph!r}: no such file")
    common.check_out(out, force)
    with jax.enable_x64(True):  # float64 for the command only, restored after
        say = common.progress("sensitivity")
        res, analysis = _analyse(
            data,
            graph,
            sensitive,
            target,
            cats,
            budgets,
            restarts,
            quick,
            seed,
            devices,
            log=say,
            multiples=multiples,
            resamples=resamples,
            contour=pairs,
        )
        say("writing the report and the figures")
        folder = common.prepare_out(out, force)
        figure = _save_figures(folder, analysis)
    from cfjax.sensitivity.report import report_markdown

    common.write_json(os.path.join(out, "results.json"), res)
    common.write_text(os.path.join(out, "report.md"), report_markdown(res, figure))
    click.echo(f"cfjax sensitivity: wrote {os.path.join(out, 'report.md')} and results.json")
