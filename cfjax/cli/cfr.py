"""``cfjax cfr``: embeddings, concept codes and labels → counterfactual representations (CFRs)
and how a classifier on the embeddings responds to them.

The concept subspace and the per-concept-value regressions are fitted by
:func:`cfjax.representations.fit_cfr`; a logistic classifier for the labels by
:func:`cfjax.representations.train_logistic`; each unit is sent to another concept value
(``1 - z`` for a binary concept, or ``--counterfactual-concept``), all in
:func:`cfjax.representations.analyse_embeddings`. Embeddings are cast to float32. With true
counterfactual embeddings the CFRs are scored against them (:func:`cfjax.representations.score`: PIP, ATV,
ATE and its CFR estimate, with the no-intervention baseline); without them only the parts that
need no true counterfactual are reported (the CFR estimate of the ATE, the mean effect, how
often the CFR changes the decision). Both report the classifier's TPR-gap and how well the
concept can still be read from the embeddings' concept-free part.

Outputs in ``--out``: ``report.md`` and ``results.json`` (byte-identical for the same inputs
and seed).
"""

from __future__ import annotations

import os
from typing import Any

import click
import numpy as np

from cfjax.cli import common
from cfjax.io import plain_floats

__all__ = ["command", "load_arrays"]

EXAMPLE = """\b
Example (a .npz holding arrays X, z, y and, optionally, X_cf):
  python -c "import numpy as np; r = np.random.default_rng(0); z = r.integers(0, 2, 500); \\
  y = r.integers(0, 2, 500); h = r.normal(size=(500, 8)); X = h.copy(); X[:, 0] += 2 * z; \\
  X[:, 1] += y; X_cf = h.copy(); X_cf[:, 0] += 2 * (1 - z); X_cf[:, 1] += y; \\
  np.savez('emb.npz', X=X, z=z, y=y, X_cf=X_cf)"
  cfjax cfr emb.npz --concept z --labels y --true-counterfactuals X_cf --out results/cfr
"""

EMBEDDING_NAMES = ("X", "embeddings")


def _load(path: str, option: str) -> Any:
    if not os.path.isfile(path):
        raise common.UserError(f"{option} {path!r}: no such file")
    try:
        return np.load(path, allow_pickle=False)
    except Exception as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise common.UserError(f"{option} {path!r}: not a .npy/.npz file ({first})") from None


def load_arrays(
    embeddings: str, concept: str, labels: str, true_cf: str | None, concept_cf: str | None
) -> dict[str, np.ndarray]:
    """The embeddings and the named arrays: each of ``concept``, ``labels``, ``true_cf`` and
    ``concept_cf`` is the path of a ``.npy`` file or the name of an array inside the ``.npz``
    EMBEDDINGS; the embeddings are the ``.npy`` itself, or the ``.npz``'s array ``X`` (or
    ``embeddings``, or its only array not named by another option)."""
    main = _load(embeddings, "EMBEDDINGS")
    names = list(main.files) if isinstance(main, np.lib.npyio.NpzFile) else None
    options = {
        "--concept": concept,
        "--labels": labels,
        "--true-counterfactuals": true_cf,
        "--counterfactual-concept": concept_cf,
    }
    out: dict[str, np.ndarray] = {}
    for option, ref in options.items():
        if ref is None:
            continue
        if names is not None and ref in names:
            out[option] = np.asarray(main[ref])
        elif os.path.isfile(ref):
            arr = _load(ref, option)
            if isinstance(arr, np.lib.npyio.NpzFile):
                raise common.UserError(
                    f"{option} {ref!r}: expected a .npy array, got a .npz archive"
                )
            out[option] = np.asarray(arr)
        else:
            inside = (
                f" nor an array in EMBEDDINGS {embeddings!r} (arrays: {names})"
                if names is not None
                else ""
            )
            raise common.UserError(f"{option} {ref!r}: neither a file{inside}")
    if names is None:
        out["EMBEDDINGS"] = np.asarray(main)
    else:
        used = {v for v in options.values() if v is not None}
        candidates = [n for n in EMBEDDING_NAMES if n in names] or [
            n for n in names if n not in used
        ]
        if len(candidates) != 1:
            raise common.UserError(
                f"EMBEDDINGS {embeddings!r}: expected an array named 'X' (or 'embeddings', or "
                f"a single array besides the named ones), got arrays {names}"
            )
        out["EMBEDDINGS"] = np.asarray(main[candidates[0]])
    return out


def _check(arrays: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray, Any, Any]:
    X = arrays["EMBEDDINGS"]
    if X.ndim != 2 or X.dtype.kind not in "biuf" or X.shape[0] < 4 or X.shape[1] < 2:
        raise common.UserError(
            f"EMBEDDINGS: expected a numeric (n, d) array with n >= 4 and d >= 2, got "
            f"shape {X.shape} of dtype {X.dtype}"
        )
    X = X.astype(np.float32)  # embeddings are scored in float32 (jax's default precision)
    if not np.isfinite(X).all():
        bad = (~np.isfinite(X)).any(1)
        raise common.UserError(
            f"EMBEDDINGS: expected finite numbers, got {int(bad.sum())} row(s) with NaN or inf "
            f"(first at {common.data_row(int(np.argmax(bad)))})"
        )

    def codes(option: str) -> np.ndarray:
        v = arrays[option]
        if v.ndim != 1 or v.shape[0] != X.shape[0]:
            raise common.UserError(
                f"{option}: expected integer codes of shape ({X.shape[0]},) like EMBEDDINGS, "
                f"got shape {v.shape}"
            )
        if v.dtype.kind == "f":
            if not np.isfinite(v).all():
                raise common.UserError(
                    f"{option}: expected integer codes, got NaN or inf (first at "
                    f"{common.data_row(int(np.argmin(np.isfinite(v))))})"
                )
            if not np.all(v == np.round(v)):
                first = int(np.argmax(v != np.round(v)))
                raise common.UserError(
                    f"{option}: expected integer codes, got non-integer values (first at "
                    f"{common.data_row(first)}: {plain_floats(v[first])!r})"
                )
        elif v.dtype.kind not in "biu":
            raise common.UserError(f"{option}: expected integer codes, got dtype {v.dtype}")
        v = v.astype(np.int64)
        if v.min() < 0:
            raise common.UserError(
                f"{option}: expected codes 0, 1, ..., got {int(v.min())} (first at "
                f"{common.data_row(int(np.argmax(v < 0)))})"
            )
        return v.astype(np.int32)

    z, y = codes("--concept"), codes("--labels")
    for option, v in (("--concept", z), ("--labels", y)):
        if np.unique(v).size < 2:
            raise common.UserError(
                f"{option}: expected at least two distinct values, got only {int(v[0])}"
            )
    k = int(z.max()) + 1
    z_cf = None
    if "--counterfactual-concept" in arrays:
        z_cf = codes("--counterfactual-concept")
        if z_cf.max() >= k:
            raise common.UserError(
                f"--counterfactual-concept: expected codes below {k} (the concept's values), "
                f"got {int(z_cf.max())}"
            )
    elif k == 2:
        z_cf = (1 - z).astype(np.int32)
    elif "--true-counterfactuals" in arrays:
        raise common.UserError(
            f"--counterfactual-concept: needed with --true-counterfactuals when the concept "
            f"has {k} values (which value each true counterfactual has)"
        )
    X_cf = None
    if "--true-counterfactuals" in arrays:
        X_cf = arrays["--true-counterfactuals"]
        if X_cf.shape != X.shape or X_cf.dtype.kind not in "biuf":
            raise common.UserError(
                f"--true-counterfactuals: expected a numeric array of shape {X.shape} like "
                f"EMBEDDINGS, got shape {X_cf.shape} of dtype {X_cf.dtype}"
            )
        X_cf = X_cf.astype(np.float32)
        if not np.isfinite(X_cf).all():
            bad = (~np.isfinite(X_cf)).any(1)
            raise common.UserError(
                f"--true-counterfactuals: expected finite numbers, got {int(bad.sum())} row(s) "
                f"with NaN or inf (first at {common.data_row(int(np.argmax(bad)))})"
            )
    return X, z, y, X_cf, z_cf


def __getattr__(name: str) -> Any:
    """``analyse``, moved to :func:`cfjax.representations.analyse_embeddings` (``key=`` for
    ``seed=``): resolved on first use, with a DeprecationWarning (importing the library starts
    JAX, and ``cfjax --help`` imports this module)."""
    if name == "analyse":
        from cfjax import _deprecations

        def analyse(
            X: Any,
            z: Any,
            y: Any,
            X_cf: Any,
            z_cf: Any,
            *,
            method: str,
            ridge: float,
            draws: int,
            seed: int,
            log: Any = lambda message: None,
        ) -> dict[str, Any]:
            from cfjax.representations import analyse_embeddings

            return analyse_embeddings(
                X, z, y, X_cf, z_cf, method=method, ridge=ridge, draws=draws, key=seed, log=log
            )

        return _deprecations.getattr_for(
            __name__, {name: ("cfjax.representations.analyse_embeddings (key= for seed=)", analyse)}
        )(name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@click.command(epilog=EXAMPLE)
@click.argument("embeddings", metavar="EMBEDDINGS")
@click.option(
    "--concept",
    required=True,
    metavar="Z",
    help="concept codes 0..k-1: a .npy file or the name of an array in the .npz EMBEDDINGS",
)
@click.option(
    "--labels", required=True, metavar="Y", help="class labels 0..C-1: a .npy file or an array name"
)
@click.option(
    "--true-counterfactuals",
    "true_cf",
    default=None,
    metavar="X_CF",
    help="true counterfactual embeddings (n, d), row i unit i with the other concept value",
)
@click.option(
    "--counterfactual-concept",
    "concept_cf",
    default=None,
    metavar="Z_CF",
    help="the concept value of each counterfactual (default 1 - Z for a binary concept)",
)
@click.option(
    "--method",
    type=click.Choice(["orth", "leace"]),
    default="orth",
    show_default=True,
    help="concept subspace",
)
@click.option(
    "--ridge",
    type=click.FloatRange(min=0.0),
    default=1.0,
    show_default=True,
    help="ridge penalty of the CFR regressions",
)
@click.option(
    "--draws",
    type=click.IntRange(min=0),
    default=32,
    show_default=True,
    help="stochastic CFR draws per unit (0: deterministic CFRs only)",
)
@common.out_option("results/cfr")
@common.force_option
@common.seed_option
def command(
    embeddings: str,
    concept: str,
    labels: str,
    true_cf: str | None,
    concept_cf: str | None,
    method: str,
    ridge: float,
    draws: int,
    out: str,
    force: bool,
    seed: int,
) -> None:
    """Counterfactual representations of EMBEDDINGS (.npy or .npz) for concept Z, and how a
    classifier for labels Y responds: PIP, ATV, ATE and TPR-gap, with the no-intervention
    baseline (scored against true counterfactual embeddings when given). Writes report.md
    and results.json into --out.
    """
    arrays = load_arrays(embeddings, concept, labels, true_cf, concept_cf)
    X, z, y, X_cf, z_cf = _check(arrays)
    common.check_out(out, force)
    from cfjax.representations import analyse_embeddings
    from cfjax.representations.report import embeddings_report

    results = analyse_embeddings(
        X,
        z,
        y,
        X_cf,
        z_cf,
        method=method,
        ridge=ridge,
        draws=draws,
        key=seed,
        log=common.progress("cfr"),
    )
    folder = common.prepare_out(out, force)
    inputs = {
        "embeddings": os.path.basename(embeddings),
        "concept": os.path.basename(concept),
        "labels": os.path.basename(labels),
        "true_counterfactuals": None if true_cf is None else os.path.basename(true_cf),
        "counterfactual_concept": None if concept_cf is None else os.path.basename(concept_cf),
    }
    res = {
        "command": "cfr",
        "seed": seed,
        "inputs": inputs,
        "settings": {
            "method": method,
            "ridge": ridge,
            "draws": draws,
            "classifier": "train_logistic",
        },
        "results": results,
    }
    common.write_json(os.path.join(folder, "results.json"), res)
    common.write_text(os.path.join(folder, "report.md"), embeddings_report(res))
    click.echo(f"cfjax cfr: wrote {os.path.join(folder, 'report.md')} and results.json")
