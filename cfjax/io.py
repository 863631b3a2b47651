"""Small file writers: every file is written to a temporary name and moved into place, so a
reader never sees a half-written file."""

from __future__ import annotations

import io
import os
import tempfile
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = ["atomic_write_bytes", "plain_floats", "write_png"]


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically (temporary file in the same folder, then rename)."""
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp-", suffix=os.path.basename(path))
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(
            tmp, 0o666 & ~_umask()
        )  # mkstemp makes 0600; a plain open() would honour the umask
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise


def write_png(path: str | os.PathLike, image: npt.ArrayLike) -> None:
    """Write a grayscale image with values in [0, 1], shape ``(H, W)``, as an 8-bit PNG
    (encoded by Pillow: ``pip install 'cfjax[images]'`` or ``'cfjax[plots]'``), atomically."""
    from cfjax import (
        _checks,  # imports JAX: not at module level (the command's --help imports this module)
    )

    a = np.asarray(image, np.float64)
    if a.ndim != 2 or a.size == 0:
        _checks.fail("image", "a non-empty 2-d array", f"shape {a.shape}")
    if not np.isfinite(a).all():
        _checks.fail("image", "finite values", "NaN or infinite values")
    try:
        from PIL import Image
    except ImportError:
        raise ImportError("writing PNG images needs Pillow: pip install 'cfjax[images]'") from None
    buf = io.BytesIO()
    Image.fromarray(np.round(np.clip(a, 0, 1) * 255).astype(np.uint8)).save(buf, format="PNG")
    atomic_write_bytes(path, buf.getvalue())


def plain_floats(value: npt.ArrayLike, float32_values: bool = False) -> Any:
    """Numbers of ``value`` (a float, a numpy float or a float array) as plain Python floats,
    nested lists for an array, each the shortest decimal that gives back the same number in
    its own dtype: a float32 0.836 becomes 0.836, not 0.8360000252723694 (its float64
    expansion). Float64 values are unchanged, except with ``float32_values``: then a float64
    that is exactly a float32 value (a float32 result cast up) is written as that float32's
    shortest decimal too. NaN and infinities stay as they are.

    Example:
      >>> import numpy as np
      >>> plain_floats(np.float32(0.836)), plain_floats(np.asarray([0.1, 0.25], np.float32))
      (0.836, [0.1, 0.25])
      >>> x = float(np.float32(0.836))
      >>> plain_floats(x), plain_floats(x, float32_values=True), plain_floats(0.1, float32_values=True)
      (0.8360000252723694, 0.836, 0.1)
    """
    a = np.asarray(value)
    if a.dtype.kind != "f":
        return a.tolist()
    if a.dtype == np.float64:
        if not float32_values:
            return a.tolist()
        with np.errstate(over="ignore"):
            exact = np.isfinite(a) & (a.astype(np.float32).astype(np.float64) == a)
        if not exact.any():
            return a.tolist()
        if a.ndim == 0:
            return float(str(np.float32(a[()])))
        return [plain_floats(v, float32_values) for v in a]
    if a.ndim == 0:
        return float(str(a[()]))  # numpy's str of a float32 is its shortest round-trip decimal
    return [plain_floats(v, float32_values) for v in a]
