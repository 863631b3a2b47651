"""A synthetic embedding SCM with exact counterfactual embeddings (the built-in default data).

Each unit has a label Y (C classes), a concept Z (k values) and nuisance factors H; its
embedding is a fixed mechanism of them plus a small isotropic noise ε that stays fixed under
interventions:

    linear:     x = M [onehot(Y), onehot(Z), H] + σ ε
    nonlinear:  x = M u + tanh(A u) · s + σ ε,   u = [onehot(Y), onehot(Z), H]

The exact counterfactual ``x_{Z←z'}`` keeps Y, H and ε and changes Z only. "balanced": Z is
independent of Y; "aggressive": Z is correlated with Y (with probability ``bias`` the label
is drawn from the classes ``c ≡ z (mod k)``), so that a classifier for Y also reads Z.
"""

from __future__ import annotations

import warnings
from typing import Any, NamedTuple

import numpy as np

from cfjax import _checks, _results
from cfjax._core.keys import numpy_rng, seed_of
from cfjax.typing import KeyLike

__all__ = ["EmbeddingData", "Scales", "synthetic_embeddings"]


class EmbeddingData(NamedTuple):
    """Embeddings with their exact counterfactuals, row i the couple ``(s_i, z_cf_i)``.

    ``X (n, d)``, ``y (n,)``, ``z (n,)``, ``X_cf (n, d)`` (the counterfactual embedding for
    ``z_cf (n,)``, a value other than ``z``).
    """

    X: np.ndarray
    y: np.ndarray
    z: np.ndarray
    X_cf: np.ndarray
    z_cf: np.ndarray

    def to_dict(self) -> dict[str, Any]:
        """Every field as plain Python (lists of numbers and strings) for ``json.dumps``."""
        return {f: _results.plain(getattr(self, f)) for f in self._fields}

    def __repr__(self) -> str:
        return _results.fields_repr(
            type(self).__name__, ((f, _results.sized(getattr(self, f))) for f in self._fields)
        )


class Scales(NamedTuple):
    """The sizes of the synthetic SCM's effects: ``label`` and ``concept`` the norms of the
    label's and the concept's directions (the nuisance factors have unit norm; the first lies
    along the first label contrast), ``noise`` the σ of the isotropic embedding noise."""

    label: float = 2.0
    concept: float = 1.0
    noise: float = 0.1


def synthetic_embeddings(
    n: int,
    *,
    d: int = 64,
    n_labels: int = 2,
    n_values: int = 2,
    n_nuisance: int = 8,
    kind: str = "linear",
    split: str = "balanced",
    bias: float = 0.9,
    scales: Scales = Scales(),
    key: KeyLike = 0,  # noqa: B008 (an immutable tuple)
    sample_key: KeyLike | None = None,
    dtype: Any = np.float32,
    **deprecated: float,
) -> EmbeddingData:
    """Draw ``n`` units of the synthetic embedding SCM (mechanism fixed by ``key``).

    Args:
        n: units; d: embedding dimension; n_labels: C; n_values: k (concept values).
        n_nuisance: nuisance factors H ~ N(0, I).
        kind: ``"linear"`` or ``"nonlinear"``.
        split: ``"balanced"`` (Z ⫫ Y) or ``"aggressive"`` (Z correlated with Y by ``bias``).
        scales: the effects' sizes (:class:`Scales`: ``label``, ``concept``, ``noise``);
            ``label_scale=``, ``concept_scale=`` and ``noise=`` are its deprecated spellings.
        key: fixes the mechanism (M, A): a PRNG key, raw key data or an int seed ``s``
            (drawn with ``np.random.default_rng(s)``; ``jax.random.key(s)`` gives the same).
        sample_key: fixes the units (same kinds); None draws them with the mechanism's seed
            plus one (:func:`cfjax._core.keys.seed_of` ``(key) + 1``), so that differently
            drawn samples (e.g. a balanced test set) share one mechanism.
        dtype: of the embeddings ``X`` and ``X_cf``.

    Returns:
        :class:`EmbeddingData`: ``X, X_cf (n, d)``, ``y, z, z_cf (n,)``.

    Raises:
        ValidationError: a bad size, kind, split, bias, ``key`` or ``sample_key``.

    Example:
        >>> data = synthetic_embeddings(1000, d=16)
        >>> data.X.shape, bool((data.z_cf != data.z).all())
        ((1000, 16), True)
    """
    if deprecated:
        old = {"label_scale": "label", "concept_scale": "concept", "noise": "noise"}
        unknown = sorted(set(deprecated) - set(old))
        if unknown:
            raise TypeError(
                f"synthetic_embeddings() got an unexpected keyword argument {unknown[0]!r}"
            )
        scales = scales._replace(**{old[k]: v for k, v in deprecated.items()})
        warnings.warn(
            f"synthetic_embeddings({', '.join(f'{k}=' for k in deprecated)}) is deprecated and will be "
            f"removed in the next release: use scales={scales!r}",
            DeprecationWarning,
            stacklevel=2,
        )
    label_scale, concept_scale, noise = scales
    n = _checks.check_positive_int("n", n)
    d = _checks.check_positive_int("d", d)
    if kind not in ("linear", "nonlinear"):
        _checks.fail("kind", "'linear' or 'nonlinear'", repr(kind))
    if split not in ("balanced", "aggressive"):
        _checks.fail("split", "'balanced' or 'aggressive'", repr(split))
    if n_labels < 2 or n_values < 2:
        _checks.fail(
            "n_labels, n_values",
            "at least 2 classes and 2 concept values",
            f"{n_labels}, {n_values}",
        )
    if not 0.0 <= bias <= 1.0:
        _checks.fail("bias", "a probability in [0, 1]", repr(bias))
    mechanism_seed = seed_of(key, "key")
    draw = (
        np.random.default_rng(mechanism_seed + 1)
        if sample_key is None
        else numpy_rng(sample_key, "sample_key")
    )
    rng = np.random.default_rng(mechanism_seed)
    C, k, q = n_labels, n_values, n_nuisance
    unit = lambda a: a / np.linalg.norm(a, axis=0, keepdims=True)  # noqa: E731
    M_y = label_scale * unit(rng.normal(size=(d, C)))
    M_z = concept_scale * unit(rng.normal(size=(d, k)))
    M_h = unit(rng.normal(size=(d, q)))
    # The first nuisance factor moves along the first label contrast, so that classes overlap
    # (a classifier is uncertain near its boundary, where the concept can tip it).
    M_h[:, 0] = unit(M_y[:, 1] - M_y[:, 0])
    M = np.concatenate([M_y, M_z, M_h], axis=1)
    A = rng.normal(size=(d, C + k + q)) / np.sqrt(C + k + q)

    z = draw.integers(0, k, n)
    y = draw.integers(0, C, n)
    if split == "aggressive":
        prefer = draw.random(n) < bias
        # A label among the classes c ≡ z (mod k), when there is one.
        candidates = [np.flatnonzero(np.arange(C) % k == v) for v in range(k)]
        for v in range(k):
            rows = np.flatnonzero(prefer & (z == v))
            if candidates[v].size:
                y[rows] = draw.choice(candidates[v], rows.size)
    h = draw.normal(size=(n, q))
    eps = draw.normal(size=(n, d))
    z_cf = (z + draw.integers(1, k, n)) % k  # a value other than z, uniformly

    def embed(zz):
        u = np.concatenate([np.eye(C)[y], np.eye(k)[zz], h], axis=1)
        x = u @ M.T
        if kind == "nonlinear":
            x = x + np.tanh(u @ A.T * 2.0) * (label_scale / np.sqrt(d))
        return (x + noise * eps).astype(dtype)

    return EmbeddingData(
        X=embed(z),
        y=y.astype(np.int32),
        z=z.astype(np.int32),
        X_cf=embed(z_cf),
        z_cf=z_cf.astype(np.int32),
    )
