"""What every ``cfjax`` subcommand shares: the output folder (``--out``, ``--force``), atomic
and deterministic outputs (byte-identical JSON for the same seed), and user mistakes reported
as one line with a non-zero exit code."""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from typing import IO, Any

import click

from cfjax._errors import ValidationError
from cfjax._results import plain
from cfjax.io import atomic_write_bytes

__all__ = [
    "UserError",
    "out_option",
    "force_option",
    "seed_option",
    "devices_option",
    "use_devices",
    "check_out",
    "prepare_out",
    "write_json",
    "write_text",
    "run",
    "progress",
    "data_row",
]

#: Exit code of a user mistake (click uses 2 for usage errors too).
USER_ERROR = 2


class UserError(click.ClickException):
    """A mistake of the user's (a file, a column, an option): shown as one line, exit code 2."""

    exit_code = USER_ERROR

    def show(self, file: IO[str] | None = None) -> None:
        click.echo(f"cfjax: error: {self.format_message()}", err=True)


def out_option(default: str) -> Callable:
    return click.option(
        "--out",
        "out",
        type=click.Path(file_okay=False),
        default=default,
        show_default=True,
        help="output folder (created; an existing non-empty one needs --force)",
    )


force_option = click.option(
    "--force", is_flag=True, help="write into an existing non-empty --out folder"
)
seed_option = click.option(
    "--seed", type=int, default=0, show_default=True, help="random seed (same seed, same numbers)"
)


devices_option = click.option(
    "--devices",
    type=click.IntRange(min=1),
    default=None,
    metavar="N",
    help="split the work over N devices of the default backend (on a CPU: N host devices, "
    "at most one per core is useful) [default: one device]",
)


def use_devices(n: int | None) -> int | None:
    """Make ``--devices N`` available before JAX starts its backends (on the CPU backend, N
    host devices: :func:`cfjax.distributed.host_devices`). Returns N (or None for the default
    single device); fewer devices than N is a :class:`UserError`."""
    if n is None:
        return None
    from cfjax import distributed

    try:
        distributed.host_devices(n)
    except ValidationError:
        import jax

        raise UserError(
            f"--devices {n}: the {jax.default_backend()} backend has {len(jax.devices())} "
            f"device(s); pass --devices {len(jax.devices())} or fewer"
        ) from None
    return n


def data_row(index: int) -> str:
    """How every subcommand names a row in its messages: data rows counted from 1 (a CSV's
    first row below the header is row 1; an array's unit 0 is row 1)."""
    return f"row {index + 1}"


def progress(command: str) -> Callable[[str], None]:
    """A command's stage lines on stderr (stdout keeps the results' lines), each with the
    seconds since this call: ``cfjax sensitivity [  12.3 s] fitting ...``."""
    start = time.perf_counter()

    def say(message: str) -> None:
        click.echo(f"cfjax {command} [{time.perf_counter() - start:6.1f} s] {message}", err=True)

    return say


def prepare_out(out: str, force: bool) -> str:
    """Create ``out``; an existing non-empty folder without ``force`` is a :class:`UserError`."""
    if os.path.exists(out) and not os.path.isdir(out):
        raise UserError(f"--out {out!r} is a file; pass a folder")
    if os.path.isdir(out) and os.listdir(out) and not force:
        raise UserError(
            f"--out {out!r} exists and is not empty; pass --force to write into it, "
            "or choose another folder"
        )
    os.makedirs(out, exist_ok=True)
    return out


def check_out(out: str, force: bool) -> None:
    """Refuse an unusable ``--out`` before any computation, without creating it (it is created
    once there is something to write, by :func:`prepare_out`)."""
    if os.path.exists(out) and (not os.path.isdir(out) or (os.listdir(out) and not force)):
        prepare_out(out, force)  # raises the UserError


def write_json(path: str, value: Any) -> None:
    """Atomic, deterministic JSON (sorted keys, strict: NaN/inf as null)."""
    text = json.dumps(
        plain(value, strict=True, shortest=True), indent=1, sort_keys=True, allow_nan=False
    )
    atomic_write_bytes(path, (text + "\n").encode())


def write_text(path: str, text: str) -> None:
    atomic_write_bytes(path, text.encode())


def run(cli: click.Group, argv: list[str] | None = None) -> None:
    """Run the click group; ValidationError, missing files and bad values become one line on
    stderr and exit code 2 (no traceback)."""
    try:
        cli.main(args=argv, prog_name="cfjax", standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("cfjax: aborted", err=True)
        sys.exit(1)
    except click.UsageError as e:  # an unknown option or command, a missing argument: one line
        where = e.ctx.command_path if e.ctx is not None else "cfjax"
        click.echo(f"cfjax: error: {e.format_message()} (see '{where} --help')", err=True)
        sys.exit(USER_ERROR)
    except click.ClickException as e:
        e.show()
        sys.exit(e.exit_code)
    except (ValidationError, FileNotFoundError, IsADirectoryError, PermissionError) as e:
        click.echo(f"cfjax: error: {e}", err=True)
        sys.exit(USER_ERROR)
    except SystemExit:
        raise
