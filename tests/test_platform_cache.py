"""The persistent compilation cache (:func:`cfjax.platform.use_compilation_cache`): where it goes
(the argument, ``CFJAX_CACHE_DIR``, JAX's own setting, the per-user cache folder), that importing
cfjax turns nothing on, that the command's ``--no-cache`` reaches it, and that corrupt entries
are compiled again with a warning, never a failure or a wrong number.

What changes JAX's configuration runs in a child process (or restores it), so this worker's
cache (the suite's, see conftest.py) is left as it is.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import jax
import numpy as np
import pytest

from cfjax import platform
from cfjax.cli import main


def _child(script: str, env: dict[str, str]) -> dict:
    """Run ``script`` in a fresh Python with ``env`` (no cache variables of the suite's) and
    return the JSON it prints last."""
    base = {k: v for k, v in os.environ.items() if k not in (platform.CACHE_ENV, "JAX_COMPILATION_CACHE_DIR")}
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(script)], env={**base, **env},
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("value", ["off", "OFF", " Off ", "0", "", "  "])
def test_the_variable_turns_the_cache_off(monkeypatch, value):
    monkeypatch.setenv(platform.CACHE_ENV, value)
    assert platform.compilation_cache_dir() is None


def test_the_variable_moves_the_cache_and_an_argument_wins(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(platform.CACHE_ENV, "relative/cache ")
    assert platform.compilation_cache_dir() == str(tmp_path / "relative" / "cache")
    monkeypatch.setenv(platform.CACHE_ENV, "~/elsewhere")
    assert platform.compilation_cache_dir() == os.path.join(os.path.expanduser("~"), "elsewhere")
    assert platform.compilation_cache_dir(tmp_path / "mine") == str(tmp_path / "mine")
    assert platform.compilation_cache_dir(False) is None
    monkeypatch.setenv(platform.CACHE_ENV, "off")
    assert platform.compilation_cache_dir(tmp_path / "mine") == str(tmp_path / "mine")


def test_unset_it_keeps_a_folder_set_through_jax(monkeypatch):
    monkeypatch.delenv(platform.CACHE_ENV, raising=False)
    expected = jax.config.jax_compilation_cache_dir  # the suite's folder (conftest.py) or None
    if expected is None:
        assert platform.compilation_cache_dir().endswith(os.path.join("cfjax", "compilation-cache"))
    else:
        assert platform.compilation_cache_dir() == expected


@pytest.mark.parametrize("system, environ, expected", [
    ("linux", {"XDG_CACHE_HOME": "/xdg"}, "/xdg"),
    ("linux", {"XDG_CACHE_HOME": "relative"}, "~/.cache"),  # the spec: only absolute paths count
    ("linux", {}, "~/.cache"),
    ("darwin", {"XDG_CACHE_HOME": "/xdg"}, "~/Library/Caches"),
    ("win32", {"LOCALAPPDATA": "/local"}, "/local"),
    ("win32", {}, "~/AppData/Local"),
])
def test_the_per_user_cache_folder_of_each_platform(monkeypatch, system, environ, expected):
    for name in ("XDG_CACHE_HOME", "LOCALAPPDATA"):
        monkeypatch.delenv(name, raising=False)
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(sys, "platform", system)
    assert platform._user_cache_home() == os.path.expanduser(expected).replace("/", os.sep)


def test_import_sets_nothing_and_the_helper_is_idempotent(tmp_path):
    out = _child("""
        import json, os
        import jax
        import cfjax, cfjax.metrics, cfjax.platform as P
        names = ["jax_compilation_cache_dir", "jax_enable_compilation_cache",
                 "jax_persistent_cache_min_compile_time_secs", "jax_persistent_cache_min_entry_size_bytes"]
        state = lambda: [getattr(jax.config, n) for n in names]
        imported = state()
        default = P.use_compilation_cache()
        on, again = state(), P.use_compilation_cache()
        os.environ["CFJAX_CACHE_DIR"] = "off"
        off = [P.use_compilation_cache(), jax.config.jax_enable_compilation_cache]
        os.environ["CFJAX_CACHE_DIR"] = os.path.join(os.environ["XDG_CACHE_HOME"], "moved")
        moved = [P.use_compilation_cache(), jax.config.jax_enable_compilation_cache,
                 jax.config.jax_compilation_cache_dir]
        x = jax.jit(lambda v: v * 2.0 + 1.0)(jax.numpy.arange(3.0))
        print(json.dumps(dict(imported=imported, default=default, on=on, again=again, off=off, moved=moved,
                              written=sorted(os.listdir(moved[0])), x=x.tolist())))
    """, {"XDG_CACHE_HOME": str(tmp_path)})
    assert out["imported"] == [None, True, 1.0, 0]  # JAX's defaults: importing cfjax set nothing
    assert out["default"] == out["again"] == str(tmp_path / "cfjax" / "compilation-cache")
    assert out["on"] == [out["default"], True, platform.CACHE_MIN_COMPILE_SECS, -1]
    assert out["off"] == [None, False]
    moved = str(tmp_path / "moved")
    assert out["moved"] == [moved, True, moved]
    assert out["x"] == [1.0, 3.0, 5.0]
    assert any(name.startswith("jit__lambda") for name in out["written"])  # cached after off -> on


def test_a_folder_that_cannot_be_made_leaves_the_cache_off(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    before = platform.use_compilation_cache()  # this worker's (the suite's) cache, restored below
    try:
        with pytest.warns(UserWarning, match="compilation cache off: cannot create"):
            assert platform.use_compilation_cache(blocker / "cache") is None
        assert jax.config.jax_enable_compilation_cache is False
    finally:
        assert platform.use_compilation_cache() == before
    assert jax.config.jax_enable_compilation_cache is (before is not None)


@pytest.mark.parametrize("argv, expected", [(["demo", "--seed", "-1"], None),
                                            (["--no-cache", "demo", "--seed", "-1"], False)])
def test_the_command_turns_the_cache_on_unless_told_not_to(monkeypatch, argv, expected):
    calls = []
    monkeypatch.setattr(platform, "use_compilation_cache", calls.append)
    with pytest.raises(SystemExit) as exit:  # the negative seed: a user mistake, after the cache
        main(argv)
    assert exit.value.code == 2 and calls == [expected]
    calls.clear()
    main(["demo", "--help"])  # help starts no JAX and turns nothing on
    assert calls == []


_COMPUTE = """
    import json, sys, warnings
    import numpy as np, jax, jax.numpy as jnp
    import cfjax.platform as P

    events = []
    jax.monitoring.register_event_listener(lambda event, **kwargs: events.append(event))
    x = np.linspace(-1.0, 2.0, 12, dtype=np.float32).reshape(3, 4)
    results = []
    for folder in sys.argv[1:]:
        events.clear()
        assert P.use_compilation_cache(folder) == folder
        jax.clear_caches()  # this process's compiled programs: the next call goes to the folder
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            y = jax.jit(lambda v: jnp.tanh(v) @ v.T + jnp.float32(0.5))(x)
        results.append(dict(y=np.asarray(y).tolist(), warnings=[str(w.message) for w in caught],
                            hits=events.count("/jax/compilation_cache/cache_hits")))
    print(json.dumps(results))
"""


def test_corrupt_entries_are_compiled_again(tmp_path):
    # An entry's key includes its folder (JAX puts XLA's own caches under it), so each folder
    # is filled by its own compilation, then all but one are spoilt in place.
    good, truncated, garbage, empty = folders = [tmp_path / name for name in ("good", "truncated", "garbage", "empty")]
    script = _COMPUTE.replace("sys.argv[1:]", repr([str(f) for f in folders]))
    filled = _child(script, {})
    for folder in folders:
        entries = [e for e in folder.iterdir() if e.is_file()]
        assert any(e.name.startswith("jit__lambda") for e in entries), folder
        for e in entries:
            data = e.read_bytes()
            if folder == truncated:
                e.write_bytes(data[:len(data) // 2])
            elif folder == garbage:
                e.write_bytes(bytes((131 * i + 7) % 256 for i in range(len(data))))
            elif folder == empty:
                e.write_bytes(b"")
    results = _child(script, {})
    x = np.linspace(-1.0, 2.0, 12, dtype=np.float32).reshape(3, 4)
    expected = np.tanh(x) @ x.T + 0.5
    for folder, first, result in zip(folders, filled, results):
        np.testing.assert_allclose(first["y"], expected, rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(result["y"], expected, rtol=1e-6, atol=1e-6)
        read_errors = [w for w in result["warnings"] if "Error reading persistent compilation cache" in w]
        # the good entries load silently; every corrupt one is reported, then compiled again
        assert first["hits"] == 0 and result["hits"] == (folder == good), folder.name
        assert bool(read_errors) == (folder != good), (folder.name, result["warnings"])
        assert len(read_errors) == len(result["warnings"]), result["warnings"]
