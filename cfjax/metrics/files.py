"""Files of predictions, as ``cfjax evaluate`` reads them: reading and checking them
(:func:`load_predictions`, every problem a :class:`~cfjax.ValidationError` naming the file, the
array or column and the row), and a synthetic example (:func:`write_example`). The arguments
have the command's options as their spelling there (``groups`` is ``--group``, ``weights``
``--weights``, ``predictor`` ``--predictor``); messages name both.

File layouts:

- ``.npz``: arrays ``p_obs (n,)``, ``p_cf (n, K)``, optional ``y (n,)``, ``y_cf (n, K)``,
  ``weights (K,)`` and ``group_<name> (n,)``. Class probabilities: ``p_obs (n, C)``,
  ``p_cf (n, K, C)``, integer labels ``y`` and ``y_cf`` in ``0..C-1``.
- ``.npz`` of several predictors, as :func:`cfjax.study.run` and ``cfjax demo`` write them
  (``marginalisation/predictions_<setting>.npz``, :mod:`cfjax.study.predictions`): arrays
  ``format_version`` (2), ``names (P,)``, ``seeds (S,)``, ``p_obs (P, S, n)``, ``p_cf (P, S,
  n, K)``, ``y (n,)``, ``y_cf (n, K)`` (units before interventions, as everywhere),
  ``weights (K,)`` and attribute arrays (``sex``, ``age``, ``race``); ``--predictor NAME``
  (and ``--predictor-seed``) chooses the one to evaluate. A file of several predictors with
  ``y_cf`` but no ``format_version`` is format 1, written by an older cfjax with ``y_cf (K,
  n)``: it is refused, with the line of Python that converts it.
- ``.csv`` / ``.parquet``: columns ``p_obs``, ``p_cf_0`` … ``p_cf_{K-1}``, optional ``y``,
  ``y_cf_0`` … ``y_cf_{K-1}`` and group columns; weights with ``--weights``. Parquet is read
  with pandas (and pyarrow or fastparquet).

Group columns follow one rule in every format: ``--group NAME`` (repeatable) names the column
or array ``NAME`` (or ``group_NAME``); without ``--group`` every column or array named
``group_<name>`` is one. Whatever is not read is listed in the report's notes. Rows in
messages are data rows counted from 1 (a CSV's header is not a row).
"""

from __future__ import annotations

import csv
import io
import os
import re
from typing import Any

import numpy as np

from cfjax._errors import ValidationError
from cfjax.io import atomic_write_bytes, plain_floats

__all__ = ["load_predictions", "write_example"]

#: the format of a file of several predictors read here: ``cfjax.study.predictions.FORMAT_VERSION``
#: (not imported: reading a file must not load the study); format 1, unmarked, held y_cf (K, n)
FORMAT_VERSION = 2


def _row(index: int) -> str:
    """A row in messages: data rows counted from 1 (a CSV's first row below the header is row
    1; an array's unit 0 is row 1), as everywhere in the command."""
    return f"row {index + 1}"


def _read_table(path: str, kind: str) -> dict[str, np.ndarray]:
    """Columns of a CSV or parquet file: float arrays where every value parses, else str."""
    if kind == "parquet":
        try:
            import pandas as pd
        except ImportError:
            raise ValidationError(
                f"{path}: reading parquet needs pandas (pip install pandas pyarrow); "
                "or save the predictions as .csv or .npz"
            ) from None
        try:
            frame = pd.read_parquet(path)
        except ImportError as e:
            raise ValidationError(
                f"{path}: reading parquet needs pyarrow or fastparquet (pip install "
                f"pyarrow); or save as .csv or .npz ({str(e).splitlines()[0]})"
            ) from None
        except Exception as e:  # a corrupt file: pandas/pyarrow raise many kinds
            raise ValidationError(
                f"{path}: not a readable parquet file ({type(e).__name__}: "
                f"{str(e).splitlines()[0] if str(e) else ''})"
            ) from None
        raw = {str(c): frame[c].to_numpy() for c in frame.columns}
        out = {}
        for name, col in raw.items():
            if col.dtype.kind in "biuf":
                out[name] = col.astype(np.float64)
            else:
                out[name] = _parse_column(np.asarray([("" if v is None else str(v)) for v in col]))
        return out
    try:
        with open(path, newline="", encoding="utf-8-sig") as f:
            rows = list(csv.reader(f))
    except UnicodeDecodeError:
        raise ValidationError(
            f"{path}: not a text CSV file (save the predictions as CSV with a header "
            "row, or as .npz)"
        ) from None
    if not rows or not rows[0]:
        raise ValidationError(
            f"{path}: empty CSV file; expected a header row with p_obs, p_cf_0, ..."
        )
    header = [h.strip() for h in rows[0]]
    dupes = sorted({h for h in header if header.count(h) > 1})
    if dupes:
        raise ValidationError(
            f"{path}: column(s) {', '.join(dupes)} appear more than once in the header"
        )
    body = [r for r in rows[1:] if any(c.strip() for c in r)]
    if not body:
        raise ValidationError(f"{path}: no data rows below the header")
    for i, r in enumerate(body):
        if len(r) != len(header):
            raise ValidationError(
                f"{path}: {_row(i)} has {len(r)} fields, the header has {len(header)}"
            )
    cols = np.asarray(body, dtype=object).T
    return {
        h: _parse_column(np.asarray([c.strip() for c in col], dtype=str))
        for h, col in zip(header, cols)
    }


def _parse_column(col: np.ndarray) -> np.ndarray:
    try:
        return np.asarray([float(v) if v != "" else np.nan for v in col], np.float64)
    except ValueError:
        return col


def _numeric(path: str, name: str, col: np.ndarray) -> np.ndarray:
    if col.dtype.kind not in "biuf":
        bad = next(v for v in col if _parse_column(np.asarray([v])).dtype.kind not in "f")
        raise ValidationError(f"{path}: column {name!r} must hold numbers; found {str(bad)!r}")
    return col


def _numbered(path: str, table: dict[str, np.ndarray], stem: str) -> list[str]:
    """The columns ``stem_0 … stem_{K-1}`` in order; a gap in the numbering is an error."""
    pat = re.compile(rf"^{stem}_(\d+)$")
    found = sorted(int(m.group(1)) for c in table if (m := pat.match(c)))
    if not found:
        return []
    missing = sorted(set(range(max(found) + 1)) - set(found))
    if missing:
        raise ValidationError(
            f"{path}: columns {stem}_0 … {stem}_{max(found)} must be numbered without "
            f"gaps; missing {', '.join(f'{stem}_{i}' for i in missing[:5])}"
        )
    return [f"{stem}_{i}" for i in range(len(found))]


def _from_table(path: str, table: dict[str, np.ndarray], groups: tuple[str, ...]) -> dict[str, Any]:
    if "p_obs" not in table:
        if _numbered(path, table, "p_obs"):
            raise ValidationError(
                f"{path}: class probabilities (p_obs_0, p_obs_1, …) are read from .npz "
                "files only (arrays p_obs (n, C), p_cf (n, K, C)); save as .npz"
            )
        raise ValidationError(f"{path}: no column 'p_obs'; found columns {_listing(table)}")
    cf_cols = _numbered(path, table, "p_cf")
    if not cf_cols:
        raise ValidationError(
            f"{path}: no columns 'p_cf_0', 'p_cf_1', … (one per intervention); "
            f"found columns {_listing(table)}"
        )
    data: dict[str, Any] = {
        "p_obs": _numeric(path, "p_obs", table["p_obs"]),
        "names": {"p_obs": "column 'p_obs'", "p_cf": "columns p_cf_*", "y": "column 'y'"},
    }
    data["p_cf"] = np.stack([_numeric(path, c, table[c]) for c in cf_cols], axis=1)
    data["p_cf_columns"] = cf_cols
    if "y" in table:
        data["y"] = _numeric(path, "y", table["y"])
    ycf_cols = _numbered(path, table, "y_cf")
    if ycf_cols:
        data["y_cf"] = np.stack([_numeric(path, c, table[c]) for c in ycf_cols], axis=1)
        data["y_cf_columns"] = ycf_cols
        data["names"]["y_cf"] = "columns y_cf_*"
    reserved = {"p_obs", "y", *cf_cols, *ycf_cols}
    data["groups"] = _groups(path, table, groups, reserved, "column")
    used = reserved | {_group_key(table, g, reserved) for g in data["groups"]}
    data["unused"] = [f"column {c!r}" for c in table if c not in used]
    return data


def _group_key(found: Any, g: str, reserved: set[str]) -> str:
    """The column or array of ``--group g``: ``g`` itself when it is one (and not a score or
    label), else ``group_<g>``."""
    return g if g in found and g not in reserved else f"group_{g}"


def _groups(
    path: str, found: dict[str, np.ndarray], groups: tuple[str, ...], reserved: set[str], kind: str
) -> dict[str, np.ndarray]:
    """The group columns, one rule for every format: with ``--group`` the named ones (a column
    or array NAME, or group_NAME), without it every one named ``group_<name>``."""
    names = groups or tuple(
        k[len("group_") :] for k in found if k.startswith("group_") and len(k) > len("group_")
    )
    out = {}
    for g in names:
        key = _group_key(found, g, reserved)
        if key not in found:
            raise ValidationError(
                f"{path}: groups (--group) {g!r}: no {kind} {g!r} or 'group_{g}'; found {kind}s {_listing(found)}"
            )
        out[g] = found[key]
    return out


def _listing(names: Any) -> str:
    names = list(names)
    shown = ", ".join(names[:12]) + (f", … ({len(names)} in all)" if len(names) > 12 else "")
    return shown or "(none)"


def _from_npz(
    path: str,
    groups: tuple[str, ...],
    predictor: str | None = None,
    predictor_seed: int | None = None,
) -> dict[str, Any]:
    import zipfile

    if not zipfile.is_zipfile(path):
        raise ValidationError(
            f"{path}: not a .npz archive (write one with numpy.savez(path, p_obs=..., "
            "p_cf=..., y=...))"
        )
    try:
        with np.load(path, allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
    except Exception as e:  # not a zip, an object array, ...
        raise ValidationError(
            f"{path}: not a readable .npz file ({type(e).__name__}: {e})"
        ) from None
    for need in ("p_obs", "p_cf"):
        if need not in arrays:
            raise ValidationError(
                f"{path}: no array {need!r}; found arrays {_listing(arrays)} "
                "(expected p_obs (n,), p_cf (n, K), optional y, weights, group_<name>)"
            )
    for k, a in arrays.items():
        if k in ("p_obs", "p_cf", "y", "y_cf", "weights") and a.dtype.kind not in "biuf":
            raise ValidationError(f"{path}: array {k!r} must hold numbers; found dtype {a.dtype}")
    version = _format_version(path, arrays)
    chosen = None
    if "names" in arrays and "seeds" in arrays:
        if version is None and "y_cf" in arrays:
            raise ValidationError(
                f"{path}: a file of several predictors without 'format_version' is format 1, written by an older "
                f"cfjax with y_cf ({arrays['y_cf'].shape}) as (K, n), one row per intervention; this cfjax reads "
                f"format {FORMAT_VERSION}, y_cf (n, K), units first. Run the study again, or convert the file in "
                f"Python: d = dict(np.load(path)); d['y_cf'] = d['y_cf'].T; d['format_version'] = {FORMAT_VERSION}; "
                "np.savez(path, **d)"
            )
        arrays, chosen = _one_predictor(path, arrays, predictor, predictor_seed)
    elif predictor is not None or predictor_seed is not None:
        raise ValidationError(
            f"{path}: predictor= and predictor_seed= (--predictor, --predictor-seed) choose one predictor of a file that holds "
            "several (arrays names, seeds, p_obs (P, S, n), p_cf (P, S, n, K), as the study and "
            f"cfjax demo write); this one holds a single predictor (arrays {_listing(arrays)})"
        )
    # floats keep their dtype until the checks (a float32 value is quoted as float32 prints it)
    scores = {
        k: arrays[k] if arrays[k].dtype.kind == "f" else arrays[k].astype(np.float64)
        for k in ("p_obs", "p_cf")
    }
    data: dict[str, Any] = {
        **scores,
        "names": {
            "p_obs": "array 'p_obs'",
            "p_cf": "array 'p_cf'",
            "y": "array 'y'",
            "y_cf": "array 'y_cf'",
        },
    }
    if "y" in arrays:
        data["y"] = arrays["y"].astype(np.float64)
    if "y_cf" in arrays:
        data["y_cf"] = arrays["y_cf"].astype(np.float64)
    if "weights" in arrays:
        data["weights"] = (
            arrays["weights"]
            if arrays["weights"].dtype.kind == "f"
            else arrays["weights"].astype(np.float64)
        )
    reserved = {"p_obs", "p_cf", "y", "y_cf", "weights", "names", "seeds", "format_version"}
    data["groups"] = _groups(path, arrays, groups, reserved, "array")
    used = reserved | {_group_key(arrays, g, reserved) for g in data["groups"]}
    data["unused"] = [f"array {k!r}" for k in arrays if k not in used]
    data["predictor"] = chosen
    return data


def _format_version(path: str, arrays: dict[str, np.ndarray]) -> int | None:
    """The file's ``format_version`` (None when it has none); any other than
    :data:`FORMAT_VERSION` is refused."""
    if "format_version" not in arrays:
        return None
    v = arrays["format_version"]
    if v.shape != () or v.dtype.kind not in "iu":
        raise ValidationError(
            f"{path}: array 'format_version' must be one integer; found dtype {v.dtype} "
            f"and shape {v.shape}"
        )
    if int(v) != FORMAT_VERSION:
        raise ValidationError(
            f"{path}: array 'format_version' is {int(v)}; this cfjax reads format {FORMAT_VERSION} "
            "(y_cf (n, K), units first)"
            + ("; upgrade cfjax to read it" if int(v) > FORMAT_VERSION else "")
        )
    return int(v)


def _one_predictor(
    path: str, arrays: dict[str, np.ndarray], predictor: str | None, seed: int | None
) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """One predictor of a file holding several, as :func:`cfjax.study.run` (``cfjax demo``)
    writes them (:func:`cfjax.study.predictions.save_predictions`): ``names (P,)``, ``seeds (S,)``,
    ``p_obs (P, S, n)``, ``p_cf (P, S, n, K)``, ``y (n,)``, ``y_cf (n, K)``, ``weights (K,)``
    and attribute arrays. Returns the arrays of the chosen one (``p_obs (n,)``, ``p_cf (n,
    K)``, the rest as they are) and which predictor."""
    names = [str(v) for v in arrays["names"].reshape(-1)]
    seeds = [int(v) for v in arrays["seeds"].reshape(-1)]
    p_obs, p_cf = arrays["p_obs"], arrays["p_cf"]
    if (
        p_obs.shape[:2] != (len(names), len(seeds))
        or p_cf.shape[:2] != (len(names), len(seeds))
        or p_obs.ndim not in (3, 4)
        or p_cf.ndim != p_obs.ndim + 1
    ):
        raise ValidationError(
            f"{path}: arrays 'names' ({len(names)}) and 'seeds' ({len(seeds)}) announce several "
            f"predictors, but p_obs has shape {p_obs.shape} and p_cf {p_cf.shape}; expected p_obs "
            f"({len(names)}, {len(seeds)}, n) and p_cf ({len(names)}, {len(seeds)}, n, K)"
        )
    listing = ", ".join(names)
    if predictor is None:
        raise ValidationError(
            f"{path}: holds {len(names)} predictors × {len(seeds)} training seeds; choose one with "
            f"predictor= (--predictor NAME: {listing}) and optionally predictor_seed= (--predictor-seed: "
            f"{', '.join(map(str, seeds))}; default {seeds[0]})"
        )
    if predictor not in names:
        raise ValidationError(
            f"{path}: predictor (--predictor) {predictor!r}: not in the file; its predictors are {listing}"
        )
    seed = seeds[0] if seed is None else seed
    if seed not in seeds:
        raise ValidationError(
            f"{path}: predictor_seed (--predictor-seed {seed}): not in the file; its seeds are "
            f"{', '.join(map(str, seeds))}"
        )
    i, j = names.index(predictor), seeds.index(seed)
    out = {k: v for k, v in arrays.items()}
    out["p_obs"], out["p_cf"] = p_obs[i, j], p_cf[i, j]
    return out, {"name": predictor, "seed": seed, "predictors": len(names), "seeds": len(seeds)}


def _parse_weights(spec: str) -> np.ndarray:
    """``--weights``: "0.5,0.5" or a file (.npy, or text of numbers)."""
    if os.path.isfile(spec):
        try:
            if spec.endswith(".npy"):
                w = np.load(spec, allow_pickle=False)
            else:
                with open(spec, encoding="utf-8") as f:
                    w = np.asarray([float(v) for v in re.split(r"[,\s]+", f.read().strip()) if v])
        except (ValueError, OSError) as e:
            raise ValidationError(
                f"weights (--weights) {spec}: not a list of numbers ({e})"
            ) from None
        return np.asarray(w, np.float64).reshape(-1)
    try:
        return np.asarray([float(v) for v in spec.split(",")], np.float64)
    except ValueError:
        raise ValidationError(
            f"weights (--weights) {spec!r}: expected comma-separated numbers like "
            "0.5,0.5 or an existing file of numbers"
        ) from None


def load_predictions(
    path: str,
    groups: tuple[str, ...] = (),
    weights: str | None = None,
    predictor: str | None = None,
    predictor_seed: int | None = None,
) -> dict[str, Any]:
    """Read and check a predictions file; every problem is a :class:`~cfjax.ValidationError` naming the file
    and the array or column (rows counted from 1, the header not counted).

    Args:
      path: a ``.npz``, ``.csv`` or ``.parquet`` file (layouts in the module docstring).
      groups: group columns or arrays, each ``NAME`` or ``group_NAME``; when empty, every
        column or array named ``group_<name>`` (the same rule for every format).
      weights: ``--weights``: "0.5,0.5,…" or a file of K numbers; overrides a npz
        ``weights`` array.
      predictor: in a ``.npz`` of several predictors (arrays ``names`` and ``seeds``, as
        ``cfjax demo`` writes), the name of the one to evaluate (required there).
      predictor_seed: its training seed (default: the file's first).

    Shapes:
      ``p_obs (n,)``, ``p_cf (n, K)``, ``y (n,)``, ``y_cf (n, K)``, ``weights (K,)``, each group
      ``(n,)``; class probabilities ``p_obs (n, C)``, ``p_cf (n, K, C)``.

    Returns:
      ``{"p_obs", "p_cf", "y" (or None), "y_cf" (or None), "weights" (or None), "groups":
      {name: (n,)}, "classes" (None for binary scores), "format", "unused" (the columns or
      arrays not read), "predictor" (None, or the chosen one's name, seed and the file's
      counts)}``, scores as float32 (float64 under ``jax_enable_x64``), labels as int32.

    Example:
      >>> import os, tempfile
      >>> path = os.path.join(tempfile.mkdtemp(), "preds.npz")
      >>> write_example(path, n=50, k=4)
      >>> d = load_predictions(path)
      >>> d["p_cf"].shape, sorted(d["groups"])
      ((50, 4), ['age', 'sex'])
    """
    if not os.path.exists(path):
        raise ValidationError(f"{path}: no such file")
    if os.path.isdir(path):
        raise ValidationError(f"{path}: is a folder; pass a .npz, .csv or .parquet file")
    ext = os.path.splitext(path)[1].lower()
    if ext == ".npz":
        data = _from_npz(path, groups, predictor, predictor_seed)
    elif ext in (".csv", ".parquet", ".pq"):
        if predictor is not None or predictor_seed is not None:
            raise ValidationError(
                f"{path}: predictor= and predictor_seed= (--predictor, --predictor-seed) choose one predictor of a .npz that holds "
                "several; a table holds one"
            )
        kind = "csv" if ext == ".csv" else "parquet"
        data = _from_table(path, _read_table(path, kind), groups)
        data["predictor"] = None
    else:
        raise ValidationError(
            f"{path}: unknown extension {ext or '(none)'!r}; expected .npz, .csv or .parquet"
        )
    data["format"] = ext.lstrip(".")
    if weights is not None:
        data["weights"] = _parse_weights(weights)
    return _check(path, data)


def _check(path: str, data: dict[str, Any]) -> dict[str, Any]:
    import jax

    names = data["names"]
    p_obs, p_cf = data["p_obs"], data["p_cf"]
    if p_obs.ndim not in (1, 2) or p_cf.ndim != p_obs.ndim + 1:
        raise ValidationError(
            f"{path}: {names['p_obs']} has shape {p_obs.shape} and {names['p_cf']} "
            f"{p_cf.shape}; expected p_obs (n,) with p_cf (n, K), or class "
            "probabilities p_obs (n, C) with p_cf (n, K, C)"
        )
    n = p_obs.shape[0]
    if n < 2 or p_cf.shape[0] != n:
        raise ValidationError(
            f"{path}: {names['p_obs']} has {n} rows and {names['p_cf']} "
            f"{p_cf.shape[0]}; expected the same number of units, at least 2"
        )
    if p_cf.shape[1] < 1:
        raise ValidationError(f"{path}: {names['p_cf']} has no interventions (K = 0)")
    classes = None
    if p_obs.ndim == 2:
        classes = p_obs.shape[1]
        if classes < 2 or p_cf.shape[2] != classes:
            raise ValidationError(
                f"{path}: class probabilities p_obs {p_obs.shape} and p_cf "
                f"{p_cf.shape} must share C >= 2 classes in the last axis"
            )
    cols = data.get("p_cf_columns")
    for key, arr in (("p_obs", p_obs), ("p_cf", p_cf)):
        bad_nan = ~np.isfinite(arr)
        bad_range = (arr < 0) | (arr > 1)
        for bad, what in (
            (bad_nan, "NaN, infinite or missing values"),
            (bad_range, "values outside [0, 1]"),
        ):
            if bad.any():
                where = np.argwhere(bad)[0]
                label, at = _cell(names[key], cols if key == "p_cf" else None, where)
                value = (
                    f": {float(plain_floats(arr[tuple(where)]))!r}"
                    if what.startswith("values")
                    else ""
                )
                raise ValidationError(
                    f"{path}: {label} has {what} (first at {at}{value}); scores must be "
                    "probabilities in [0, 1]"
                )
    if classes is not None:
        for key, arr in (("p_obs", p_obs), ("p_cf", p_cf)):
            s = arr.astype(np.float64).sum(-1)
            if np.abs(s - 1).max() > 1e-3:
                where = np.unravel_index(np.abs(s - 1).argmax(), s.shape)
                label, at = _cell(names[key], None, where)
                raise ValidationError(
                    f"{path}: {label}: class probabilities must sum to 1 over the last axis; "
                    f"found {at} summing to {s[where]:.4g}"
                )
    k = p_cf.shape[1]
    y, y_cf = data.get("y"), data.get("y_cf")
    if y is not None:
        if y.shape != (n,):
            raise ValidationError(
                f"{path}: {names['y']} has shape {y.shape}; expected ({n},), one label per unit"
            )
        y = _check_labels(path, names["y"], y, classes, "drop those units or omit 'y'")
    if y_cf is not None:
        if y is None:
            raise ValidationError(
                f"{path}: {names['y_cf']} given without the observed labels 'y'; "
                "risk_orig and the observed calibration need y"
            )
        if y_cf.shape != (n, k):
            raise ValidationError(
                f"{path}: {names['y_cf']} has shape {y_cf.shape}; expected ({n}, {k}), "
                f"one label per unit and intervention (K = {k} from {names['p_cf']})"
            )
        y_cf = _check_labels(
            path, names["y_cf"], y_cf, classes, "drop those units", data.get("y_cf_columns")
        )
    w = data.get("weights")
    if w is not None:
        if w.shape != (k,):
            raise ValidationError(
                f"weights: expected {k} values (one per intervention, K = {k}); found {w.size}"
            )
        if not np.isfinite(w).all() or (w < 0).any() or abs(w.sum() - 1) > 1e-5:
            raise ValidationError(
                f"weights: expected {k} non-negative values summing to 1; found "
                f"{np.round(w, 6).tolist()[:8]} (sum {w.sum():.6g})"
            )
    groups = {}
    for g, col in data["groups"].items():
        col = np.asarray(col)
        if col.shape != (n,):
            raise ValidationError(f"{path}: group {g!r} has shape {col.shape}; expected ({n},)")
        if col.dtype.kind == "f" and not np.isfinite(col).all():
            raise ValidationError(
                f"{path}: group {g!r} has missing values (first at "
                f"{_row(int(np.argmin(np.isfinite(col))))})"
            )
        if col.dtype.kind == "f" and (col == np.round(col)).all():
            col = col.astype(np.int64)  # CSV numbers: 0.0/1.0 codes are the groups 0 and 1
        values, codes = np.unique(col, return_inverse=True)
        if len(values) < 2:
            raise ValidationError(
                f"{path}: group {g!r} has one value ({values[0].item()!r}); a ΔAUC "
                "needs at least two groups, drop --group for it"
            )
        if y is not None and classes is None:
            for s, v in enumerate(values):
                present = np.unique(y[codes.reshape(-1) == s])
                if len(present) < 2:
                    raise ValidationError(
                        f"{path}: group {g!r} = {v.item()!r} has only label(s) "
                        f"{present.tolist()}; an AUC needs both labels in every group"
                    )
        groups[g] = col
    x64 = jax.config.jax_enable_x64  # type: ignore[attr-defined]  # a run-time flag
    dtype = np.float64 if x64 else np.float32
    return {
        "p_obs": p_obs.astype(dtype),
        "p_cf": p_cf.astype(dtype),
        "y": y,
        "y_cf": y_cf,
        "weights": None if w is None else w.astype(dtype),
        "groups": groups,
        "classes": classes,
        "format": data["format"],
        "unused": data["unused"],
        "predictor": data["predictor"],
    }


def _check_labels(
    path: str,
    name: str,
    y: np.ndarray,
    classes: int | None,
    fix: str,
    columns: list[str] | None = None,
) -> np.ndarray:
    """Labels in {0, 1} (binary scores) or 0..C-1 (class probabilities), as int32."""
    missing = ~np.isfinite(y)
    if missing.any():
        label, at = _cell(name, columns, np.argwhere(missing)[0])
        raise ValidationError(f"{path}: {label} has missing or NaN labels (first at {at}); {fix}")
    wrong = ~np.isin(y, np.arange(classes if classes else 2))
    if wrong.any():
        want = "0 or 1" if classes is None else f"integers 0..{classes - 1}"
        label, at = _cell(name, columns, np.argwhere(wrong)[0])
        raise ValidationError(
            f"{path}: {label} must hold labels {want}; found {np.unique(y[wrong])[:5].tolist()} "
            f"(first at {at})"
        )
    return y.astype(np.int32)


def _cell(name: str, columns: list[str] | None, where: Any) -> tuple[str, str]:
    """Where a bad value is, in the file's terms: (the column or array, the position). A table's
    per-intervention values are named by their column (``column 'p_cf_3'``); an array's by
    its intervention index; rows are data rows counted from 1."""
    where = [int(i) for i in where]
    if columns is not None and len(where) > 1:
        return f"column {columns[where[1]]!r}", _row(where[0])
    if len(where) > 1 and name.endswith(("'p_cf'", "'y_cf'")):
        return name, f"{_row(where[0])}, intervention k = {where[1]} (of 0..K-1)"
    return name, _row(where[0])


# ----------------------------------------------------------------------------- example file
def write_example(path: str, seed: int = 0, n: int = 400, k: int = 8) -> None:
    """Write a synthetic predictions file (``.npz`` or ``.csv``, by the extension of ``path``):
    a predictor whose scores move with a binary attribute ``sex`` that the K interventions set
    (the first half to 0, the rest to 1), labels ``y``, and the group columns ``group_sex`` and
    ``group_age`` (young / middle / old; arrays of those names in a ``.npz``). The scores are
    float32, written as their shortest decimals in a CSV. Deterministic given ``seed``.

    Args:
      path: the file to write (atomically).
      seed: numpy seed of the synthetic units.
      n: number of units.
      k: number of interventions K.
    """
    rng = np.random.default_rng(seed)
    sex = rng.integers(0, 2, n)
    age = rng.uniform(20, 90, n)
    z = rng.normal(size=n)
    y = (rng.uniform(size=n) < 1 / (1 + np.exp(-(1.5 * z - 0.5)))).astype(np.int32)
    do_sex = np.repeat([0, 1], k // 2 + 1)[:k]
    base = 1.5 * z - 0.5

    def logit(s: np.ndarray) -> np.ndarray:
        b = base.reshape((n,) + (1,) * (s.ndim - 1))
        return b + 0.6 * (s - 0.5) + 0.2 * rng.normal(size=s.shape)

    sig = lambda v: (1 / (1 + np.exp(-v))).astype(np.float32)  # noqa: E731
    p_obs = sig(logit(sex))
    p_cf = sig(logit(np.broadcast_to(do_sex, (n, k)).astype(np.float64)))
    age_group = np.where(age < 45, "young", np.where(age < 65, "middle", "old"))
    ext = os.path.splitext(path)[1].lower()
    if ext == ".npz":
        buf = io.BytesIO()
        np.savez(buf, p_obs=p_obs, p_cf=p_cf, y=y, group_sex=sex, group_age=age_group)
        atomic_write_bytes(path, buf.getvalue())
    elif ext == ".csv":
        header = ["p_obs"] + [f"p_cf_{j}" for j in range(k)] + ["y", "group_sex", "group_age"]
        lines = [",".join(header)]
        for i in range(n):
            vals = [repr(plain_floats(p_obs[i]))] + [repr(v) for v in plain_floats(p_cf[i])]
            lines.append(",".join(vals + [str(y[i]), str(sex[i]), age_group[i]]))
        atomic_write_bytes(path, ("\n".join(lines) + "\n").encode())
    else:
        raise ValidationError(
            f"path (--example-file) {path}: unknown extension {ext or '(none)'!r}; use .npz or .csv"
        )
