"""Adapters for real chest-radiograph datasets: CheXpert and MIMIC-CXR-JPG.

Both become the same records as the synthetic data: ``{"image": (N, size, size) float32 in
[0, 1], "parents": {"sex": (N,) int32 (0 male, 1 female), "age": (N,) float32,
"effusion": (N,) int32}, "path": (N,) str, "dropped": {reason: count}}``.

Frontal views only. Label policy for pleural effusion (CheXpert labeller values 1, 0, −1 and
blank): ``uncertain`` (−1) is ``"drop"`` (default), ``"positive"`` or ``"negative"``;
``blank`` (not mentioned) is ``"negative"`` (default) or ``"drop"``. Units with unknown sex or
an age outside ``age_range`` are dropped. Nothing is dropped silently: every reason is counted
in ``"dropped"``. Images are loaded with Pillow (the ``images`` extra), converted to grayscale,
resized bilinearly to ``size``, and optionally cached as arrays in ``cache_dir``.
"""

from __future__ import annotations

import csv
import hashlib
import io
import os
from collections import Counter
from pathlib import Path
from typing import Any, Iterable

import numpy as np

from cfjax._checks import ValidationError
from cfjax._io import atomic_write_bytes

__all__ = ["load_chexpert", "load_mimic_cxr"]

EFFUSION = "Pleural Effusion"


def _read_csv(path: Path, columns: Iterable[str]) -> list[dict[str, str]]:
    if not path.is_file():
        raise ValidationError(f"missing file {str(path)!r}.")
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        header = reader.fieldnames or []
        for c in columns:
            if c not in header:
                raise ValidationError(f"file {str(path)!r}: missing column {c!r}; columns are {header}.")
        return list(reader)


def _effusion(value: str, uncertain: str, blank: str) -> tuple[int | None, str | None]:
    """(label, None) or (None, reason for dropping)."""
    v = value.strip()
    if v == "":
        return (0, None) if blank == "negative" else (None, "effusion blank")
    x = float(v)
    if x == 1:
        return 1, None
    if x == 0:
        return 0, None
    if x == -1:
        if uncertain == "drop":
            return None, "effusion uncertain"
        return (1 if uncertain == "positive" else 0), None
    raise ValidationError(f"column {EFFUSION!r}: expected 1, 0, -1 or blank, got {value!r}.")


def _check_policy(uncertain: str, blank: str, size: int) -> None:
    if uncertain not in ("drop", "positive", "negative"):
        raise ValidationError(f"`uncertain`: expected 'drop', 'positive' or 'negative', got {uncertain!r}.")
    if blank not in ("negative", "drop"):
        raise ValidationError(f"`blank`: expected 'negative' or 'drop', got {blank!r}.")
    if not (isinstance(size, int) and size >= 8):
        raise ValidationError(f"`size`: expected an integer >= 8, got {size!r}.")


def _load_images(paths: list[Path], size: int, cache_dir: str | None, tag: str) -> np.ndarray:
    try:
        from PIL import Image
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError("loading real images needs Pillow: pip install 'cfjax[images]'") from e
    cache = None
    if cache_dir is not None:
        digest = hashlib.sha256()
        digest.update(f"{tag}|{size}".encode())
        for p in paths:
            st = p.stat() if p.exists() else None
            digest.update(f"|{p}|{st.st_size if st else -1}|{st.st_mtime_ns if st else -1}".encode())
        cache = Path(cache_dir) / f"images-{digest.hexdigest()[:20]}.npy"
        if cache.is_file():
            return np.load(cache)
    out = np.empty((len(paths), size, size), np.float32)
    for i, p in enumerate(paths):
        try:
            with Image.open(p) as im:
                im = im.convert("L").resize((size, size), Image.BILINEAR)
                out[i] = np.asarray(im, np.float32) / 255.0
        except (OSError, ValueError) as e:
            raise ValidationError(f"unreadable image {str(p)!r}: {e}") from None
    if cache is not None:
        buf = io.BytesIO()
        np.save(buf, out)
        atomic_write_bytes(cache, buf.getvalue())
    return out


def _finish(rows: list[tuple[Path, int, float, int]], dropped: Counter, size: int,
            cache_dir: str | None, tag: str, source: str) -> dict[str, Any]:
    if not rows:
        raise ValidationError(f"{source}: no usable frontal image left; dropped {dict(dropped)}.")
    paths = [r[0] for r in rows]
    return {
        "image": _load_images(paths, size, cache_dir, tag),
        "parents": {"sex": np.array([r[1] for r in rows], np.int32),
                    "age": np.array([r[2] for r in rows], np.float32),
                    "effusion": np.array([r[3] for r in rows], np.int32)},
        "path": np.array([str(p) for p in paths]),
        "dropped": dict(dropped),
    }


def load_chexpert(root: str | os.PathLike, split: str = "train", *, size: int = 64,
                  uncertain: str = "drop", blank: str = "negative",
                  age_range: tuple[float, float] = (20.0, 90.0),
                  cache_dir: str | None = None) -> dict[str, Any]:
    """CheXpert (``train.csv`` or ``valid.csv`` in ``root``; its ``Path`` column is resolved
    against ``root`` or its parent, as in the released archive)."""
    _check_policy(uncertain, blank, size)
    if split not in ("train", "valid"):
        raise ValidationError(f"`split`: expected 'train' or 'valid', got {split!r}.")
    root = Path(root)
    csv_path = root / f"{split}.csv"
    table = _read_csv(csv_path, ["Path", "Sex", "Age", "Frontal/Lateral", EFFUSION])
    rows, dropped = [], Counter()
    for line in table:
        if line["Frontal/Lateral"].strip() != "Frontal":
            dropped["not frontal"] += 1
            continue
        sex = {"Male": 0, "Female": 1}.get(line["Sex"].strip())
        if sex is None:
            dropped["sex unknown"] += 1
            continue
        age = float(line["Age"])
        if not age_range[0] <= age <= age_range[1]:
            dropped["age out of range"] += 1
            continue
        label, reason = _effusion(line[EFFUSION], uncertain, blank)
        if reason:
            dropped[reason] += 1
            continue
        rel = line["Path"].strip()
        path = root / rel if (root / rel).exists() else root.parent / rel
        rows.append((path, sex, age, label))
    return _finish(rows, dropped, size, cache_dir, f"chexpert|{csv_path}|{uncertain}|{blank}", str(csv_path))


def load_mimic_cxr(root: str | os.PathLike, patients_csv: str | os.PathLike, *, size: int = 64,
                   uncertain: str = "drop", blank: str = "negative",
                   age_range: tuple[float, float] = (20.0, 90.0),
                   cache_dir: str | None = None) -> dict[str, Any]:
    """MIMIC-CXR-JPG: ``mimic-cxr-2.0.0-metadata.csv`` (views), ``mimic-cxr-2.0.0-chexpert.csv``
    (labels) and images ``files/p{XX}/p{subject}/s{study}/{dicom}.jpg`` under ``root``; sex
    (``gender``) and age (``anchor_age``) from MIMIC-IV's ``patients.csv``."""
    _check_policy(uncertain, blank, size)
    root = Path(root)
    meta = _read_csv(root / "mimic-cxr-2.0.0-metadata.csv", ["dicom_id", "subject_id", "study_id", "ViewPosition"])
    labels = _read_csv(root / "mimic-cxr-2.0.0-chexpert.csv", ["subject_id", "study_id", EFFUSION])
    patients = _read_csv(Path(patients_csv), ["subject_id", "gender", "anchor_age"])
    study_label = {(r["subject_id"], r["study_id"]): r[EFFUSION] for r in labels}
    person = {r["subject_id"]: (r["gender"].strip(), r["anchor_age"]) for r in patients}
    rows, dropped = [], Counter()
    for line in meta:
        if line["ViewPosition"].strip() not in ("PA", "AP"):
            dropped["not frontal"] += 1
            continue
        subject, study = line["subject_id"].strip(), line["study_id"].strip()
        if (subject, study) not in study_label:
            dropped["no label for study"] += 1
            continue
        if subject not in person:
            dropped["no patient record"] += 1
            continue
        gender, anchor_age = person[subject]
        sex = {"M": 0, "F": 1}.get(gender)
        if sex is None:
            dropped["sex unknown"] += 1
            continue
        age = float(anchor_age)
        if not age_range[0] <= age <= age_range[1]:
            dropped["age out of range"] += 1
            continue
        label, reason = _effusion(study_label[(subject, study)], uncertain, blank)
        if reason:
            dropped[reason] += 1
            continue
        path = root / "files" / f"p{subject[:2]}" / f"p{subject}" / f"s{study}" / f"{line['dicom_id'].strip()}.jpg"
        rows.append((path, sex, age, label))
    return _finish(rows, dropped, size, cache_dir, f"mimic|{root}|{uncertain}|{blank}", str(root))
