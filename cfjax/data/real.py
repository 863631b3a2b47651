"""Adapters for real chest-radiograph datasets: CheXpert and MIMIC-CXR-JPG.

Both become the same records as the synthetic data: ``{"image": (N, size, size) float32 in
[0, 1], "parents": {"sex": (N,) int32 (0 male, 1 female), "age": (N,) float32,
"effusion": (N,) int32}, "path": (N,) str, "dropped": {reason: count}}``.

Frontal views only. Label policy for pleural effusion (CheXpert labeller values 1, 0, −1 and
blank): ``uncertain`` (−1) is ``"drop"`` (default), ``"positive"`` or ``"negative"``;
``blank`` (not mentioned) is ``"negative"`` (default) or ``"drop"``. Units with unknown sex or
an age outside ``age_range`` are dropped. Nothing is dropped silently: every reason is counted
in ``"dropped"`` (image rows, except ``"duplicate label row"`` and ``"duplicate patient row"``,
which count rows of the label and patient tables). A value that cannot be read (a
non-numeric age, an effusion value other than 1, 0, −1 or blank) raises
:class:`~cfjax.ValidationError` naming the file, the column and the row.

Tables are read as plain ``.csv`` or as shipped, gzip-compressed (``.csv.gz``: MIMIC-CXR-JPG's
metadata and labels, MIMIC-IV's ``patients.csv.gz``). Images are decoded with Pillow (the
``images`` extra) at reduced size where the format allows it (JPEG's DCT scaling, Pillow's
draft mode: a 3000-pixel radiograph decodes at 1/8 scale for a 64-pixel target), converted
to grayscale and resized bilinearly to ``size``. They stream one at a time into the output,
or into a memory-mapped ``.npy`` cache in ``cache_dir`` that is renamed into place when
complete (so memory holds one decoded image, and a cached array is returned memory-mapped,
read-only); a progress bar shows on a terminal.
"""

from __future__ import annotations

import csv
import gzip
import hashlib
import math
import os
import tempfile
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any, TypeVar

import numpy as np

from cfjax._checks import ValidationError

__all__ = ["load_chexpert", "load_mimic_cxr"]

EFFUSION = "Pleural Effusion"
#: bump when the decoding changes, so that caches of the old decoding are not reused
_DECODER_VERSION = "draft-bilinear-1"
_T = TypeVar("_T")


class _Table:
    """Rows of a CSV file (plain or gzip), each with where it is (row number counted from 1
    after the header, and the line it ends on), for error messages."""

    def __init__(self, path: Path, rows: list[tuple[tuple[int, int], dict[str, str]]]):
        self.path, self.rows = path, rows

    def __iter__(self) -> Iterator[tuple[tuple[int, int], dict[str, str]]]:
        return iter(self.rows)

    def value(
        self,
        where: tuple[int, int],
        row: dict[str, str],
        column: str,
        parse: Callable[[str], _T],
        expected: str,
    ) -> _T:
        """``parse(row[column])``, or ValidationError naming the file, column and row."""
        raw = row[column]
        try:
            return parse(raw)
        except (ValueError, TypeError):
            raise ValidationError(
                f"file {str(self.path)!r}, column {column!r}, row {where[0]} (line "
                f"{where[1]}): expected {expected}, got {raw!r}."
            ) from None


def _find(path: Path) -> Path:
    """``path`` itself, or the ``.gz`` beside it when only that exists."""
    if path.is_file():
        return path
    gz = path.with_name(path.name + ".gz")
    if gz.is_file():
        return gz
    hint = "" if path.name.endswith(".gz") else f" (or {gz.name!r})"
    raise ValidationError(f"missing file {str(path)!r}{hint}.")


def _read_csv(path: Path, columns: Iterable[str]) -> _Table:
    path = _find(Path(path))
    with open(path, "rb") as f:
        gzipped = f.read(2) == b"\x1f\x8b"
    opener = gzip.open if gzipped else open
    try:
        with opener(path, "rt", newline="", encoding="utf-8-sig") as f:
            reader = csv.DictReader(f)
            header = reader.fieldnames or []
            for c in columns:
                if c not in header:
                    raise ValidationError(
                        f"file {str(path)!r}: missing column {c!r}; columns are {header}."
                    )
            rows = []
            for i, row in enumerate(reader, 1):  # line_num: the line the row ends on (header: 1)
                rows.append(((i, reader.line_num), row))
    except (OSError, EOFError, UnicodeDecodeError, csv.Error) as e:
        raise ValidationError(f"file {str(path)!r}: unreadable CSV ({e}).") from None
    return _Table(path, rows)


def _number(text: str) -> float:
    x = float(text)
    if not math.isfinite(x):
        raise ValueError(text)
    return x


def _effusion_code(text: str) -> int | None:
    """CheXpert labeller value: 1, 0, −1, or None for blank; ValueError otherwise."""
    v = text.strip()
    if v == "":
        return None
    x = float(v)
    if x not in (1.0, 0.0, -1.0):
        raise ValueError(text)
    return int(x)


def _effusion(code: int | None, uncertain: str, blank: str) -> tuple[int | None, str | None]:
    """(label, None) or (None, reason for dropping)."""
    if code is None:
        return (0, None) if blank == "negative" else (None, "effusion blank")
    if code == -1:
        if uncertain == "drop":
            return None, "effusion uncertain"
        return (1 if uncertain == "positive" else 0), None
    return code, None


_EFFUSION_EXPECTED = "1, 0, -1 or blank"


def _check_policy(uncertain: str, blank: str, size: int) -> None:
    if uncertain not in ("drop", "positive", "negative"):
        raise ValidationError(
            f"`uncertain`: expected 'drop', 'positive' or 'negative', got {uncertain!r}."
        )
    if blank not in ("negative", "drop"):
        raise ValidationError(f"`blank`: expected 'negative' or 'drop', got {blank!r}.")
    if not (isinstance(size, int) and size >= 8):
        raise ValidationError(f"`size`: expected an integer >= 8, got {size!r}.")


def _decode(image_module: ModuleType, path: Path, size: int) -> np.ndarray:
    """One image as ``(size, size)`` float32 in [0, 1]: decoded at the smallest scale Pillow's
    draft mode offers that is still at least ``size`` on each side, grayscale, resized
    bilinearly."""
    try:
        with image_module.open(path) as im:
            im.draft("L", (size, size))  # JPEG: DCT scaling by 1/2, 1/4 or 1/8; others: no-op
            im = im.convert("L").resize((size, size), image_module.BILINEAR)
            return np.asarray(im, np.float32) / 255.0
    except (OSError, ValueError) as e:
        raise ValidationError(f"unreadable image {str(path)!r}: {e}") from None


def _progress(items: list[Path], what: str):
    """``items`` behind a tqdm bar, silent when stderr is not a terminal."""
    from tqdm import tqdm

    return tqdm(items, desc=what, unit="img", disable=None, leave=False)


def _load_images(
    paths: list[Path], size: int, cache_dir: str | os.PathLike | None, tag: str
) -> np.ndarray:
    try:
        from PIL import Image
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError("loading real images needs Pillow: pip install 'cfjax[images]'") from e
    shape = (len(paths), size, size)
    if cache_dir is None:
        out = np.empty(shape, np.float32)
        for i, p in enumerate(_progress(paths, f"decoding {len(paths)} images")):
            out[i] = _decode(Image, p, size)
        return out
    digest = hashlib.sha256()
    digest.update(f"{_DECODER_VERSION}|{tag}|{size}".encode())
    for p in paths:
        st = p.stat() if p.exists() else None
        digest.update(f"|{p}|{st.st_size if st else -1}|{st.st_mtime_ns if st else -1}".encode())
    folder = Path(cache_dir)
    cache = folder / f"images-{digest.hexdigest()[:20]}.npy"
    if not cache.is_file():
        folder.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp-", suffix=".npy")
        os.close(fd)
        try:
            out = np.lib.format.open_memmap(tmp, mode="w+", dtype=np.float32, shape=shape)
            for i, p in enumerate(
                _progress(paths, f"decoding {len(paths)} images into {cache.name}")
            ):
                out[i] = _decode(Image, p, size)
            out.flush()
            del out
            os.replace(tmp, cache)
        finally:
            if os.path.exists(tmp):
                os.remove(tmp)
    return np.load(cache, mmap_mode="r")


def _finish(
    rows: list[tuple[Path, int, float, int]],
    dropped: Counter[str],
    size: int,
    cache_dir: str | os.PathLike | None,
    tag: str,
    source: str,
) -> dict[str, Any]:
    if not rows:
        raise ValidationError(f"{source}: no usable frontal image left; dropped {dict(dropped)}.")
    paths = [r[0] for r in rows]
    return {
        "image": _load_images(paths, size, cache_dir, tag),
        "parents": {
            "sex": np.array([r[1] for r in rows], np.int32),
            "age": np.array([r[2] for r in rows], np.float32),
            "effusion": np.array([r[3] for r in rows], np.int32),
        },
        "path": np.array([str(p) for p in paths]),
        "dropped": dict(dropped),
    }


def load_chexpert(
    root: str | os.PathLike,
    split: str = "train",
    *,
    size: int = 64,
    uncertain: str = "drop",
    blank: str = "negative",
    age_range: tuple[float, float] = (20.0, 90.0),
    cache_dir: str | os.PathLike | None = None,
) -> dict[str, Any]:
    """CheXpert (``train.csv`` or ``valid.csv`` in ``root``, plain or ``.csv.gz``; its
    ``Path`` column is resolved against ``root`` or its parent, as in the released archive).

    A second row with the same ``Path`` is counted under ``"duplicate image row"`` and
    skipped. Returns the records described in :mod:`cfjax.data.real`.
    """
    _check_policy(uncertain, blank, size)
    if split not in ("train", "valid"):
        raise ValidationError(f"`split`: expected 'train' or 'valid', got {split!r}.")
    root = Path(root)
    table = _read_csv(root / f"{split}.csv", ["Path", "Sex", "Age", "Frontal/Lateral", EFFUSION])
    rows: list[tuple[Path, int, float, int]] = []
    dropped: Counter[str] = Counter()
    seen: set[str] = set()
    for where, row in table:
        if row["Frontal/Lateral"].strip() != "Frontal":
            dropped["not frontal"] += 1
            continue
        rel = row["Path"].strip()
        if rel in seen:
            dropped["duplicate image row"] += 1
            continue
        seen.add(rel)
        sex = {"Male": 0, "Female": 1}.get(row["Sex"].strip())
        if sex is None:
            dropped["sex unknown"] += 1
            continue
        age = table.value(where, row, "Age", _number, "a number (years)")
        if not age_range[0] <= age <= age_range[1]:
            dropped["age out of range"] += 1
            continue
        code = table.value(where, row, EFFUSION, _effusion_code, _EFFUSION_EXPECTED)
        label, reason = _effusion(code, uncertain, blank)
        if reason:
            dropped[reason] += 1
            continue
        assert label is not None  # _effusion gives a label whenever it gives no reason
        path = root / rel if (root / rel).exists() else root.parent / rel
        rows.append((path, sex, age, label))
    return _finish(
        rows,
        dropped,
        size,
        cache_dir,
        f"chexpert|{table.path}|{uncertain}|{blank}",
        str(table.path),
    )


def load_mimic_cxr(
    root: str | os.PathLike,
    patients_csv: str | os.PathLike,
    *,
    size: int = 64,
    uncertain: str = "drop",
    blank: str = "negative",
    age_range: tuple[float, float] = (20.0, 90.0),
    cache_dir: str | os.PathLike | None = None,
) -> dict[str, Any]:
    """MIMIC-CXR-JPG: ``mimic-cxr-2.0.0-metadata.csv.gz`` (views), ``mimic-cxr-2.0.0-chexpert.csv.gz``
    (labels), as shipped or decompressed, and images ``files/p{XX}/p{subject}/s{study}/{dicom}.jpg``
    under ``root``; sex (``gender``) and age (``anchor_age``) from MIMIC-IV's
    ``patients.csv.gz`` (or ``patients.csv``).

    Repeated rows are never silently overwritten: a second label row for a (subject, study)
    is counted under ``"duplicate label row"`` (and, when the two disagree on effusion, the
    study's images under ``"conflicting labels for study"``); a second patient row likewise
    (``"duplicate patient row"``, ``"conflicting patient records"``); a second metadata row
    for a ``dicom_id`` under ``"duplicate image row"``. Returns the records described in
    :mod:`cfjax.data.real`.
    """
    _check_policy(uncertain, blank, size)
    root = Path(root)
    meta = _read_csv(
        root / "mimic-cxr-2.0.0-metadata.csv",
        ["dicom_id", "subject_id", "study_id", "ViewPosition"],
    )
    labels = _read_csv(root / "mimic-cxr-2.0.0-chexpert.csv", ["subject_id", "study_id", EFFUSION])
    patients = _read_csv(Path(patients_csv), ["subject_id", "gender", "anchor_age"])
    dropped: Counter[str] = Counter()
    # Labels and patients: the first row of each key, duplicates counted, conflicts marked.
    study_label: dict[tuple[str, str], int | None] = {}
    conflicting_studies: set[tuple[str, str]] = set()
    for where, row in labels:
        key = (row["subject_id"].strip(), row["study_id"].strip())
        code = labels.value(where, row, EFFUSION, _effusion_code, _EFFUSION_EXPECTED)
        if key in study_label:
            dropped["duplicate label row"] += 1
            if study_label[key] != code:
                conflicting_studies.add(key)
            continue
        study_label[key] = code
    person: dict[str, tuple[str, float]] = {}
    conflicting_people: set[str] = set()
    for where, row in patients:
        subject = row["subject_id"].strip()
        record = (
            row["gender"].strip(),
            patients.value(where, row, "anchor_age", _number, "a number (years)"),
        )
        if subject in person:
            dropped["duplicate patient row"] += 1
            if person[subject] != record:
                conflicting_people.add(subject)
            continue
        person[subject] = record
    rows: list[tuple[Path, int, float, int]] = []
    seen: set[str] = set()
    for _where, row in meta:
        if row["ViewPosition"].strip() not in ("PA", "AP"):
            dropped["not frontal"] += 1
            continue
        dicom = row["dicom_id"].strip()
        if dicom in seen:
            dropped["duplicate image row"] += 1
            continue
        seen.add(dicom)
        subject, study = row["subject_id"].strip(), row["study_id"].strip()
        if (subject, study) not in study_label:
            dropped["no label for study"] += 1
            continue
        if (subject, study) in conflicting_studies:
            dropped["conflicting labels for study"] += 1
            continue
        if subject not in person:
            dropped["no patient record"] += 1
            continue
        if subject in conflicting_people:
            dropped["conflicting patient records"] += 1
            continue
        gender, age = person[subject]
        sex = {"M": 0, "F": 1}.get(gender)
        if sex is None:
            dropped["sex unknown"] += 1
            continue
        if not age_range[0] <= age <= age_range[1]:
            dropped["age out of range"] += 1
            continue
        label, reason = _effusion(study_label[(subject, study)], uncertain, blank)
        if reason:
            dropped[reason] += 1
            continue
        assert label is not None  # _effusion gives a label whenever it gives no reason
        path = root / "files" / f"p{subject[:2]}" / f"p{subject}" / f"s{study}" / f"{dicom}.jpg"
        rows.append((path, sex, age, label))
    return _finish(
        rows,
        dropped,
        size,
        cache_dir,
        f"mimic|{root}|{patients.path}|{uncertain}|{blank}",
        str(root),
    )
