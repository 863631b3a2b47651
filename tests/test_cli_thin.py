"""The command line is thin: its modules parse options, call the library and write, and share
nothing but ``cfjax/cli/common.py``; the names that moved to the library keep working for one
release, with a warning naming the new one."""

from __future__ import annotations

import ast
import pathlib

import numpy as np
import pytest

CLI = pathlib.Path(__file__).resolve().parents[1] / "cfjax" / "cli"
#: what a command module may import from the package: the shared helpers, and the group itself
SHARED = {"cfjax.cli", "cfjax.cli.common"}


def _cli_imports(path: pathlib.Path) -> set[str]:
    out = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("cfjax.cli"):
            out |= {node.module} if node.module != "cfjax.cli" else {
                f"cfjax.cli.{a.name}" if (CLI / f"{a.name}.py").exists() else "cfjax.cli" for a in node.names}
        elif isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.startswith("cfjax.cli")}
    return out


@pytest.mark.parametrize("name", sorted(p.stem for p in CLI.glob("*.py")
                                         if p.stem not in ("__init__", "__main__", "common")))
def test_commands_share_only_common(name):
    extra = _cli_imports(CLI / f"{name}.py") - SHARED
    assert not extra, f"cfjax/cli/{name}.py imports {sorted(extra)}: move what it shares into the library"


def test_the_demo_command_is_a_thin_shell():
    tree = ast.parse((CLI / "demo.py").read_text())
    functions = [n.name for n in tree.body if isinstance(n, ast.FunctionDef)]
    assert functions == ["__getattr__", "command"]


def test_moved_demo_names_warn_and_are_the_library_s():
    from cfjax.cli import demo as cli_demo
    from cfjax.study import demo as lib

    for old, new in (("DEMO", lib.DEMO), ("QUICK", lib.QUICK), ("Scale", lib.Scale)):
        with pytest.warns(DeprecationWarning, match=f"cfjax.study.demo.{old}"):
            assert getattr(cli_demo, old) is new
    with pytest.warns(DeprecationWarning, match="run_demo"):
        assert callable(cli_demo.demo)
    with pytest.raises(AttributeError):
        _ = cli_demo.nothing


def test_moved_ages_warn_and_are_the_data_s():
    import cfjax.data
    from cfjax.cli import chest

    with pytest.warns(DeprecationWarning, match="cfjax.data.AGES"):
        assert chest.AGES == cfjax.data.AGES == tuple(float(a) for a in np.linspace(20, 90, 8))


def test_moved_analyse_warns_and_gives_the_library_s_numbers(rng):
    import cfjax.representations as R
    from cfjax.cli import cfr

    seed = int(rng.integers(0, 2**16))
    d = R.synthetic_embeddings(120, d=4, key=seed)
    with pytest.warns(DeprecationWarning, match="analyse_embeddings"):
        old = cfr.analyse(d.X, d.z, d.y, d.X_cf, d.z_cf, method="orth", ridge=1.0, draws=2, seed=seed)
    assert old == R.analyse_embeddings(d.X, d.z, d.y, d.X_cf, d.z_cf, method="orth", ridge=1.0, draws=2, key=seed)
