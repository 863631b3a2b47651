"""What every pillar's figures share, public for scripts that save their own the same way:
matplotlib behind the ``plots`` extra (imported only when a figure is drawn, with the headless
Agg backend unless the caller chose another), and figures written atomically as PNG (for
reports) and PDF (vector, for papers)."""

from __future__ import annotations

import io
import os
import sys
from collections.abc import Sequence
from types import ModuleType
from typing import TYPE_CHECKING

from cfjax import _checks
from cfjax.io import atomic_write_bytes

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["pyplot", "save_figure", "FORMATS"]

#: the formats :func:`save_figure` writes by default: PNG for reports, PDF (vector) for papers
FORMATS = ("png", "pdf")


def pyplot() -> ModuleType:
    """``matplotlib.pyplot``, or a clear ImportError naming the extra that provides it. A
    process that has not chosen a backend gets Agg (no display needed)."""
    try:
        import matplotlib
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError("cfjax's figures need matplotlib: pip install 'cfjax[plots]'") from e
    if "matplotlib.pyplot" not in sys.modules:
        matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    return plt


def save_figure(
    fig: Figure,
    path: str | os.PathLike,
    *,
    formats: Sequence[str] = FORMATS,
    dpi: int = 150,
    close: bool = True,
) -> list[str]:
    """Write ``fig`` once per format next to ``path`` (its extension, if one of ``formats``,
    replaced: ``out/curve.png`` → ``out/curve.png`` and ``out/curve.pdf``), each file
    atomically (a reader never sees a half-written figure). Returns the paths written; closes
    the figure unless ``close=False``."""
    formats = tuple(formats)
    if not formats or any(f not in ("png", "pdf", "svg") for f in formats):
        _checks.fail("formats", "a non-empty sequence of 'png', 'pdf' or 'svg'", repr(formats))
    dpi = _checks.check_positive_int("dpi", dpi)
    stem, ext = os.path.splitext(os.fspath(path))
    if ext.lstrip(".").lower() not in formats:
        stem = os.fspath(path)
    # lay the figure out and find its tight bounding box once, not once per format (each
    # ``bbox_inches="tight"`` save draws the figure twice, re-running its layout engine each time)
    fig.draw_without_rendering()
    # the Agg (and every raster) canvas has get_renderer; FigureCanvasBase's stub does not
    renderer = fig.canvas.get_renderer()  # type: ignore[attr-defined]
    bbox = fig.get_tightbbox(renderer).padded(0.1)  # savefig's default pad_inches
    engine = fig.get_layout_engine()
    fig.set_layout_engine("none")
    written = []
    try:
        for fmt in formats:
            buf = io.BytesIO()
            fig.savefig(buf, format=fmt, dpi=dpi, bbox_inches=bbox)
            target = f"{stem}.{fmt}"
            atomic_write_bytes(target, buf.getvalue())
            written.append(target)
    finally:
        fig.set_layout_engine(engine)
    if close:
        pyplot().close(fig)
    return written
