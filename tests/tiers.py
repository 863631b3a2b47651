"""The quick tier, measured: which test functions are ``heavy`` (left out of ``make quick``).

A test function is heavy when its measured cost — setup, call and teardown, summed over its
parametrizations — is at least ``--threshold`` seconds (1 by default) in a run of the whole
suite with ``--durations=0``; a whole file is heavy when one of its setups costs that much (a
shared fixture: pytest charges it to the first test that asks for it, and the others would pay it
in the quick tier). The list is written to ``tests/heavy_tests.txt``, one ``path::function`` or
``path`` per line with its cost; ``conftest.py`` marks those tests ``heavy``, and every
other test runs in ``make quick``. Regenerate it after a change moves tests' costs::

    .venv/bin/python -m pytest --durations=0 -p no:cacheprovider > durations.log
    .venv/bin/python tests/tiers.py durations.log

Lines already in the file stay in it (a test once heavy is not made quick by a faster run on a
quieter machine); pass ``--fresh`` to rebuild the list from the log alone.
"""

from __future__ import annotations

import argparse
import collections
import pathlib
import re

HERE = pathlib.Path(__file__).resolve().parent
HEAVY = HERE / "heavy_tests.txt"
HEADER = ("# Test functions left out of `make quick` (marked `heavy` by conftest.py): each cost at least the\n"
          "# threshold in a measured run of the whole suite (seconds of one worker: setup + call + teardown,\n"
          "# summed over parametrizations); a file alone on its line is heavy as a whole (a costly shared\n"
          "# fixture). Written by tests/tiers.py from a `pytest --durations=0` log.\n")
_LINE = re.compile(r"\s*([\d.]+)s (setup|call|teardown)\s+(\S+)")


def function_of(nodeid: str) -> str:
    """``path::function`` of a test id (its parametrization dropped)."""
    return re.sub(r"\[.*$", "", nodeid)


def is_heavy(nodeid: str, heavy: frozenset[str] | set[str] | dict[str, str]) -> bool:
    """Whether a test id's function or file is in the heavy list."""
    return function_of(nodeid) in heavy or nodeid.split("::")[0] in heavy


def costs(log: str, threshold: float) -> tuple[collections.Counter, dict[str, float]]:
    """Each function's cost, and the files with a setup of at least ``threshold`` (its cost)."""
    out: collections.Counter = collections.Counter()
    files: dict[str, float] = {}
    for line in log.splitlines():
        m = _LINE.match(line)
        if m:
            t, name = float(m.group(1)), function_of(m.group(3))
            out[name] += t
            if m.group(2) == "setup" and t >= threshold:
                files[name.split("::")[0]] = max(t, files.get(name.split("::")[0], 0.0))
    return out, files


def read_heavy(path: pathlib.Path = HEAVY) -> dict[str, str]:
    """``{path::function: the rest of its line}`` of the heavy list (empty when there is none)."""
    if not path.exists():
        return {}
    out = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            name, _, rest = line.partition(" ")
            out[name] = rest.strip()
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("log", help="the output of `pytest --durations=0`")
    parser.add_argument("--threshold", type=float, default=1.0, help="seconds (default 1)")
    parser.add_argument("--fresh", action="store_true", help="forget the functions already listed")
    args = parser.parse_args(argv)
    measured, files = costs(pathlib.Path(args.log).read_text(), args.threshold)
    if not measured:
        raise SystemExit(f"{args.log}: no durations found (run pytest with --durations=0)")
    listed = {} if args.fresh else read_heavy()
    heavy = {name: f"# {t:.1f} s" for name, t in measured.items() if t >= args.threshold}
    heavy.update({path: f"# the whole file: a shared fixture's setup took {t:.1f} s" for path, t in files.items()})
    for name, rest in listed.items():
        heavy.setdefault(name, rest)
    text = HEADER + "".join(f"{name} {heavy[name]}\n" for name in sorted(heavy))
    tmp = HEAVY.with_suffix(".tmp")
    tmp.write_text(text)
    tmp.replace(HEAVY)
    quick = sum(t for name, t in measured.items() if not is_heavy(name, heavy))
    print(f"{len(heavy)} heavy functions written to {HEAVY.name}; the rest cost {quick:.0f} s of one worker")


if __name__ == "__main__":
    main()
