"""The ``cfjax`` command as a user runs it, in a subprocess: the console entry point, and a user
mistake of every subcommand gives one line naming what is wrong, exit code 2 and no traceback.
(The other ``test_cli_*`` files run each subcommand end to end in-process; ``test_study.py``
runs ``cfjax demo --quick`` in a subprocess.)"""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest


def _cfjax(*argv, cwd=None):
    proc = subprocess.run([sys.executable, "-m", "cfjax.cli", *map(str, argv)], capture_output=True, text=True,
                          timeout=300, cwd=cwd)
    return proc.returncode, proc.stdout, proc.stderr


def test_version_and_commands():
    code, out, _ = _cfjax("--help")
    assert code == 0
    for name in ("demo", "evaluate", "sensitivity", "cfr", "chest", "train"):
        assert f"  {name} " in out


def _mistakes(tmp_path):
    bad = tmp_path / "bad.npz"
    np.savez(bad, p_obs=np.array([0.2, 1.5]), p_cf=np.full((2, 3), 0.5))  # a probability of 1.5
    full = tmp_path / "full"
    full.mkdir()
    (full / "x").write_text("x")
    missing = tmp_path / "nope.csv"
    return [
        (("evaluate", bad, "--out", tmp_path / "o1"), "p_obs"),
        (("sensitivity", missing, "--graph", missing, "--sensitive", "a", "--target", "y"), str(missing)),
        (("cfr", missing, "--concept", "z", "--labels", "y"), str(missing)),
        (("chest", "--size", "8"), "--size"),
        (("demo", "--quick", "--out", full), "--force"),
        (("train", "--objective", "variance", "--out", tmp_path / "o2"), "--objective"),
    ]


@pytest.mark.parametrize("case", range(6))
def test_a_mistake_is_one_line_and_exit_code_2(tmp_path, case):
    argv, named = _mistakes(tmp_path)[case]
    code, out, err = _cfjax(*argv, cwd=tmp_path)
    assert code == 2, (argv, out, err)
    assert "Traceback" not in out + err
    assert len(err.strip().splitlines()) == 1, err
    assert named in err, (named, err)


def test_devices_split_the_resamples_and_change_no_number(tmp_path):
    """`cfjax evaluate --devices 3` (three CPU host devices, set up before JAX starts) writes the
    bytes of the one-device run in this process; more devices than exist is one line, exit 2."""
    from cfjax.cli import common
    from cfjax.cli import evaluate as ev

    from cfjax.metrics.files import write_example
    write_example(str(tmp_path / "preds.npz"), seed=3)
    code, out, err = _cfjax("evaluate", tmp_path / "preds.npz", "--devices", "3", "--quick", "--resamples", 17,
                            "--out", tmp_path / "three")
    assert code == 0, err
    common.run(ev.command, [str(tmp_path / "preds.npz"), "--quick", "--resamples", "17", "--out",
                            str(tmp_path / "one")])
    assert (tmp_path / "three" / "results.json").read_bytes() == (tmp_path / "one" / "results.json").read_bytes()
    with pytest.raises(SystemExit) as exit_:
        common.run(ev.command, [str(tmp_path / "preds.npz"), "--devices", "2", "--out", str(tmp_path / "two")])
    assert exit_.value.code == 2


_SUBCOMMANDS = ("demo", "evaluate", "sensitivity", "cfr", "chest", "train")


@pytest.mark.parametrize("argv", [("--help",), ("--version",)] + [(c, "--help") for c in _SUBCOMMANDS])
def test_help_answers_without_importing_jax(argv):
    """`cfjax --help`, `--version` and every subcommand's `--help` print their text without
    importing JAX (or any pillar): the group's modules, `cfjax` and the command helpers load
    JAX only inside the commands."""
    script = ("import sys\nfrom cfjax.cli import cli\n"
              f"cli.main(args={list(argv)!r}, prog_name='cfjax', standalone_mode=False)\n"
              "heavy = sorted(m for m in sys.modules if m.split('.')[0] in ('jax', 'jaxlib', 'flax', 'optax', "
              "'scipy', 'pandas', 'matplotlib') or m in ('cfjax.metrics', 'cfjax.study', 'cfjax.sensitivity', "
              "'cfjax.scm', 'cfjax.representations', 'cfjax._checks'))\n"
              "print('HEAVY', heavy)\n")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "HEAVY []" in proc.stdout, proc.stdout.splitlines()[-1]
    if argv[-1] == "--help":
        assert "Usage: cfjax" in proc.stdout


def test_a_command_still_imports_what_it_needs(tmp_path):
    """The lazy imports reach the pillars once a command runs: `cfjax chest` at its smallest
    draws the grid (JAX, the chest SCM) in a fresh interpreter."""
    code, out, err = _cfjax("chest", "--size", 32, "--units", 2, "--out", tmp_path / "grid")
    assert code == 0, err
    assert (tmp_path / "grid" / "grid.png").is_file()


def test_every_default_out_is_results_slash_the_subcommand():
    """One scheme for the default output folders: `cfjax NAME` writes into results/NAME."""
    from cfjax.cli import cli

    assert set(cli.commands) == set(_SUBCOMMANDS)
    for name, command in cli.commands.items():
        out = next(p for p in command.params if p.name == "out")
        assert out.default == f"results/{name}", (name, out.default)
