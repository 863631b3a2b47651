"""Counterfactual representations of a set of embeddings, scored and reported: every number of
``cfjax cfr`` (:func:`analyse_embeddings`), its ``report.md`` (:func:`embeddings_report`) and
the demo's table of splits (:func:`splits_section`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from cfjax._results import plain
from cfjax.typing import ArrayLike, KeyLike

__all__ = ["analyse_embeddings", "embeddings_report", "splits_section"]


def analyse_embeddings(
    X: ArrayLike,
    z: ArrayLike,
    y: ArrayLike,
    X_cf: ArrayLike | None = None,
    z_cf: ArrayLike | None = None,
    *,
    method: str = "orth",
    ridge: float = 1.0,
    draws: int = 32,
    key: KeyLike = 0,
    log: Callable[[str], None] = lambda message: None,
) -> dict[str, Any]:
    """Fit the counterfactual representations of the embeddings and a logistic classifier for
    their labels on every unit, and score how the classifier responds to the CFRs.

    Reported: the classifier's accuracy and TPR-gap, how well the concept can be read from the
    embeddings and from their concept-free part x⊥, the CFR estimates that need no true
    counterfactual (ATE, mean effect, share of decisions changed) and, with true counterfactual
    embeddings, :func:`cfjax.representations.score` (PIP, ATV, ATE, with the no-intervention
    baseline), deterministic and with ``draws`` stochastic CFRs per unit.

    Args:
      X: embeddings ``(n, d)``, float32.
      z: concept codes ``(n,)`` in ``0..k-1``.
      y: class labels ``(n,)`` in ``0..C-1``.
      X_cf: true counterfactual embeddings ``(n, d)`` (row ``i``: unit ``i`` with concept
        ``z_cf[i]``), or None.
      z_cf: the concept value each unit is sent to ``(n,)``; None for a concept of more than two
        values sends every unit to every value (label-free scores per target value only).
      method: the concept subspace, ``"orth"`` or ``"leace"`` (:func:`cfjax.representations.fit_cfr`).
      ridge: the ridge penalty of the CFR regressions.
      draws: stochastic CFR draws per unit (0: deterministic CFRs only).
      key: a PRNG key, raw key data or an int seed (keyword-only) for the stochastic draws.
      log: called with one line as each stage starts.

    Returns:
      Every number as plain Python (what ``cfjax cfr`` writes under ``results`` in
      ``results.json``).
    """
    import jax
    import jax.numpy as jnp

    from cfjax._core.keys import as_key
    from cfjax.representations.cfr import counterfactuals, fit_cfr, stochastic_proba
    from cfjax.representations.classifiers import predict_classes, train_logistic
    from cfjax.representations.metrics import ate, mean_effect, pip, score, tpr_gap

    z, y = np.asarray(z), np.asarray(y)
    n, dim = np.shape(X)
    k, C = int(z.max()) + 1, int(y.max()) + 1
    log(
        f"fitting the concept subspace ({method}), the CFR regressions and the classifier on {n} × {dim} "
        "embeddings"
    )
    model = fit_cfr(X, z, n_values=k, method=method, ridge=ridge)
    clf = train_logistic(X, y, n_classes=C)
    Xj = jnp.asarray(X)
    p_obs = clf(Xj)
    y_pred = jnp.argmax(p_obs, axis=-1).astype(jnp.int32)
    res: dict[str, Any] = {
        "n": int(n),
        "d": int(dim),
        "concept_values": k,
        "classes": C,
        "concept_counts": np.bincount(z, minlength=k).tolist(),
        "label_counts": np.bincount(y, minlength=C).tolist(),
        "true_counterfactuals": X_cf is not None,
        "accuracy": float(jnp.mean(y_pred == jnp.asarray(y))),
    }
    # the TPR-gap of each concept value against the others (one for a binary concept: value 1)
    gaps = {
        str(v): tpr_gap(jnp.asarray(y), y_pred, jnp.asarray(z), value=v, n_classes=C)
        for v in (range(1, k) if k == 2 else range(k))
    }
    res["tpr_gap"] = gaps
    # can the concept still be read? from x and from its concept-free part x⊥
    perp = jax.vmap(lambda x: model.subspace.split(x)[0])
    z_clf, X_perp = train_logistic(X, z, n_classes=k), perp(Xj)
    z_perp = train_logistic(X_perp, z, n_classes=k)
    res["concept_readout"] = {
        "accuracy_from_x": float(jnp.mean(predict_classes(z_clf, Xj) == jnp.asarray(z))),
        "accuracy_from_x_perp": float(jnp.mean(predict_classes(z_perp, X_perp) == jnp.asarray(z))),
        "majority": float(np.bincount(z).max() / len(z)),
    }
    key = as_key(key)
    log(
        "scoring the counterfactual representations"
        + (f" ({draws} stochastic draws per unit)" if draws else "")
    )
    if z_cf is None:  # a concept with more than two values and no target given: every other value
        cfr_all = counterfactuals(model, Xj)  # (n, k, d)
        per_value = {}
        for v in range(k):
            p_v = clf(cfr_all[:, v])
            per_value[str(v)] = {
                "ate_cfr": ate(p_obs, p_v),
                "mean_effect_cfr": mean_effect(p_obs, p_v),
                "decision_change_cfr": 1.0 - pip(p_v, p_obs),
            }
        res["label_free_by_target_value"] = per_value
        return plain(res, strict=True, shortest=True)
    p_cfr = clf(counterfactuals(model, Xj, jnp.asarray(z_cf)))
    p_sto = (
        stochastic_proba(model, clf, Xj, jnp.asarray(z_cf), key=key, draws=draws) if draws else None
    )
    res["label_free"] = {
        "ate_cfr": ate(p_obs, p_cfr),
        "mean_effect_cfr": mean_effect(p_obs, p_cfr),
        "decision_change_cfr": 1.0 - pip(p_cfr, p_obs),
    }
    if p_sto is not None:
        res["label_free"].update(
            {
                "ate_cfr_stochastic": ate(p_obs, p_sto),
                "decision_change_cfr_stochastic": 1.0 - pip(p_sto, p_obs),
            }
        )
    if X_cf is not None:
        p_true = clf(jnp.asarray(X_cf))
        res["scores"] = score(p_obs, p_true, p_cfr).to_dict()
        if p_sto is not None:
            res["scores_stochastic"] = score(p_obs, p_true, p_sto).to_dict()
    return plain(res, strict=True, shortest=True)


def _fmt(x: Any) -> str:
    if x is None:
        return "—"
    if isinstance(x, list):
        return "[" + ", ".join(_fmt(v) for v in x) + "]"
    return f"{float(x):.4g}"


def embeddings_report(res: Mapping[str, Any]) -> str:
    """``cfjax cfr``'s ``report.md``: the classifier, the concept's readout, the TPR-gap and the
    scores, from ``res`` as the command writes it to ``results.json`` (``inputs``: the names of
    the arrays, ``settings``: ``method`` and ``ridge``, ``seed``, and ``results``:
    :func:`analyse_embeddings`'s numbers)."""
    r, inputs = res["results"], res["inputs"]
    lines = [
        "# Counterfactual representations",
        "",
        f"Embeddings `{inputs['embeddings']}`: {r['n']} units × {r['d']} dimensions; concept "
        f"`{inputs['concept']}` with {r['concept_values']} values (counts {r['concept_counts']}); labels "
        f"`{inputs['labels']}` with {r['classes']} classes (counts {r['label_counts']}). Concept subspace "
        f"`{res['settings']['method']}`, ridge {res['settings']['ridge']}, seed {res['seed']}. The CFR model and "
        "the logistic classifier are fitted on every unit and scored on the same units.",
        "",
        f"Classifier accuracy on the embeddings: {_fmt(r['accuracy'])}.",
        "",
        "## The concept in the embeddings",
        "",
        "| readout of the concept | accuracy |",
        "|---|---|",
        f"| from x | {_fmt(r['concept_readout']['accuracy_from_x'])} |",
        f"| from x⊥ (concept subspace removed) | {_fmt(r['concept_readout']['accuracy_from_x_perp'])} |",
        f"| majority value | {_fmt(r['concept_readout']['majority'])} |",
        "",
        "## TPR-gap of the classifier",
        "",
        "P[Ŷ = y | Z = value, Y = y] − P[Ŷ = y | Z ≠ value, Y = y], per class y:",
        "",
        "| concept value | " + " | ".join(f"class {c}" for c in range(r["classes"])) + " |",
        "|---|" + "---|" * r["classes"],
    ]
    lines += [
        f"| {v} | " + " | ".join(_fmt(g) for g in gap) + " |" for v, gap in r["tpr_gap"].items()
    ]
    lines += [""]
    if "scores" in r:
        s, st = r["scores"], r.get("scores_stochastic")
        lines += [
            "## Scores against the true counterfactual embeddings",
            "",
            "PIP: proportion of identical decisions; ATV: mean total variation between the classifier's "
            "probabilities; the baseline leaves the embedding unchanged (no intervention). ATE: mean total "
            "variation between the classifier's outputs after and before the intervention (true), and its "
            "CFR estimate.",
            "",
            "| score | CFR | no intervention |" + (" stochastic CFR |" if st else ""),
            "|---|---|---|" + ("---|" if st else ""),
            f"| PIP (higher is better) | {_fmt(s['pip'])} | {_fmt(s['pip_baseline'])} |"
            + (f" {_fmt(st['pip'])} |" if st else ""),
            f"| ATV (lower is better) | {_fmt(s['atv'])} | {_fmt(s['atv_baseline'])} |"
            + (f" {_fmt(st['atv'])} |" if st else ""),
            "",
            "| effect | value |",
            "|---|---|",
            f"| ATE (true counterfactuals) | {_fmt(s['ate'])} |",
            f"| ATE estimated with CFRs | {_fmt(s['ate_cfr'])} |",
            f"| absolute error | {_fmt(s['ate_error'])} |",
            f"| mean effect per class (true) | {_fmt(s['mean_effect'])} |",
            f"| mean effect per class (CFR) | {_fmt(s['mean_effect_cfr'])} |",
            "",
        ]
    else:
        lines += [
            "## Label-free scores",
            "",
            "No true counterfactual embeddings were given (--true-counterfactuals), so PIP, ATV and the true "
            "ATE cannot be computed; only what needs no true counterfactual is reported.",
            "",
        ]
    lf = r.get("label_free")
    if lf:
        lines += [
            "| CFR estimate | value |",
            "|---|---|",
            f"| ATE estimated with CFRs | {_fmt(lf['ate_cfr'])} |",
            f"| mean effect per class (CFR) | {_fmt(lf['mean_effect_cfr'])} |",
            f"| share of decisions the CFR changes | {_fmt(lf['decision_change_cfr'])} |",
        ]
        if "ate_cfr_stochastic" in lf:
            lines += [f"| ATE estimated with stochastic CFRs | {_fmt(lf['ate_cfr_stochastic'])} |"]
        lines.append("")
    for v, row in (r.get("label_free_by_target_value") or {}).items():
        lines += [
            f"Every unit sent to concept value {v}: ATE estimate {_fmt(row['ate_cfr'])}, decisions changed "
            f"{_fmt(row['decision_change_cfr'])}, mean effect {_fmt(row['mean_effect_cfr'])}.",
            "",
        ]
    lines += ["Numbers in `results.json`.", ""]
    return "\n".join(lines)


def _f(x: Any, digits: int = 3) -> str:
    return (
        "n/a" if x is None or (isinstance(x, float) and not np.isfinite(x)) else f"{x:.{digits}f}"
    )


def splits_section(
    r: Mapping[str, Any], title: str = "Counterfactual representations (paper 002)"
) -> list[str]:
    """A markdown section (its lines, from a blank line and the ``## title`` heading) comparing
    :func:`analyse_embeddings` on several splits of synthetic embeddings with true
    counterfactuals: ``r`` holds ``n``, ``d`` and ``splits`` (split name → the numbers)."""
    lines = [
        "",
        f"## {title}",
        "",
        f"Synthetic embeddings (n = {r['n']}, d = {r['d']}) with a binary concept and true counterfactual "
        "embeddings. A logistic classifier and the counterfactual representations (CFRs) are fitted per "
        "split; PIP (agreement of the decisions on CFRs and on the true counterfactuals, higher is better) "
        "and ATV (error of the estimated treatment effect, lower is better) against the no-intervention "
        "baseline (the factual embedding as its own counterfactual).",
        "",
        "| split | accuracy | TPR gap | PIP | PIP baseline | ATV | ATV baseline | concept readable from x⊥ |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for split, v in r["splits"].items():
        sc = v["scores"]
        gap = v["tpr_gap"]["1"]
        lines.append(
            f"| {split} | {_f(v['accuracy'])} | {' / '.join(_f(g) for g in gap)} | {_f(sc['pip'])} | "
            f"{_f(sc['pip_baseline'])} | {_f(sc['atv'])} | {_f(sc['atv_baseline'])} | "
            f"{_f(v['concept_readout']['accuracy_from_x_perp'])} (majority "
            f"{_f(v['concept_readout']['majority'])}) |"
        )
    return lines
