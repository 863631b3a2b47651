"""Linear (multinomial logistic) classifiers on embeddings, trained in JAX with optax.

The classifier is a pytree (:class:`LinearClassifier`): it is called on a batch of embeddings
and returns class probabilities, so it can be passed into jitted code, vmapped over seeds, or
replaced by any callable ``(n, d) -> (n, C)`` wherever cfjax takes a classifier.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
import optax.tree_utils as otu
from flax import struct

from cfjax import _checks, _deprecations, _results
from cfjax._core.optim import standard_promotion
from cfjax.representations.subspace import _as_embeddings
from cfjax.typing import ArrayLike

__all__ = ["LinearClassifier", "train_logistic", "predict_classes"]


class LinearClassifier(struct.PyTreeNode):
    """``p(y | x) = softmax(x @ W + b)``; ``W (d, C)``, ``b (C,)``."""

    W: jax.Array
    b: jax.Array

    def logits(self, X: jax.Array) -> jax.Array:
        out = X @ self.W
        return out + jnp.broadcast_to(self.b, out.shape)

    def __call__(self, X: jax.Array) -> jax.Array:
        """Probabilities ``(n, C)`` for embeddings ``(n, d)`` (or ``(C,)`` for one ``(d,)``)."""
        return jax.nn.softmax(self.logits(X), axis=-1)

    def to_dict(self) -> dict[str, Any]:
        """The weights as plain Python for ``json.dumps``: ``W`` (d lists of C floats), ``b``
        (C floats) and their ``dtype``; :meth:`from_dict` rebuilds the classifier."""
        return {
            "W": _results.plain(self.W),
            "b": _results.plain(self.b),
            "dtype": jnp.dtype(self.W.dtype).name,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LinearClassifier:
        """The classifier whose :meth:`to_dict` is ``data``."""
        dtype = data.get("dtype", "float32")
        return cls(
            W=jnp.asarray(np.asarray(data["W"], dtype)), b=jnp.asarray(np.asarray(data["b"], dtype))
        )

    def __repr__(self) -> str:
        shape = self.W.shape
        return (
            f"{type(self).__name__}(n_features={shape[-2]}, n_classes={shape[-1]}, "
            f"dtype={jnp.dtype(self.W.dtype).name}"
            + (f", batch={tuple(shape[:-2])}" if len(shape) > 2 else "")
            + ")"
        )


def predict_classes(proba: Callable[[jax.Array], jax.Array], X: jax.Array) -> jax.Array:
    """Predicted classes ``(n,)``: the argmax of ``proba(X)``."""
    return jnp.argmax(proba(X), axis=-1)


@functools.partial(jax.jit, static_argnames=("n_classes", "max_steps"))
def _train(X, y, weights, l2, tol, n_classes, max_steps):
    d = X.shape[1]
    onehot = jax.nn.one_hot(y, n_classes, dtype=X.dtype)
    total = jnp.sum(weights)

    def loss(params):
        W, b = params
        logp = jax.nn.log_softmax(X @ W + b[None, :], axis=-1)
        return -jnp.sum(weights * jnp.sum(onehot * logp, axis=-1)) / total + 0.5 * l2 * jnp.sum(
            W**2
        )

    opt = standard_promotion(optax.lbfgs())
    value_and_grad = optax.value_and_grad_from_state(loss)
    params = (jnp.zeros((d, n_classes), X.dtype), jnp.zeros((n_classes,), X.dtype))

    def step(carry):
        params, state = carry
        value, grad = value_and_grad(params, state=state)
        updates, state = opt.update(grad, state, params, value=value, grad=grad, value_fn=loss)
        return optax.apply_updates(params, updates), state

    def keep_going(carry):
        _, state = carry
        count = otu.tree_get(state, "count")
        grad = otu.tree_get(state, "grad")
        return (count == 0) | ((count < max_steps) & (otu.tree_norm(grad) >= tol))

    params, state = jax.lax.while_loop(keep_going, step, (params, opt.init(params)))
    return params, otu.tree_get(state, "count"), otu.tree_norm(otu.tree_get(state, "grad"))


def train_logistic(
    X: ArrayLike,
    y: ArrayLike,
    *,
    n_classes: int | None = None,
    l2: float = 1e-4,
    sample_weight: ArrayLike | None = None,
    tol: float = 1e-6,
    max_steps: int = 500,
) -> LinearClassifier:
    """Multinomial logistic regression by L-BFGS (optax), full batch, in one jitted loop.

    Minimises ``Σ_i w_i CE(y_i, softmax(x_i W + b)) / Σ_i w_i + (l2 / 2) ‖W‖²`` (b unpenalised).
    This is scikit-learn's ``LogisticRegression(C = 1 / (l2 · n))`` objective for unit weights.

    Args:
        X: embeddings ``(n, d)``.
        y: labels ``(n,)`` in ``0..C-1``.
        n_classes: C (default ``max(y) + 1``).
        l2: ridge penalty on W (> 0 keeps the optimum finite on separable data).
        sample_weight: optional non-negative weights ``(n,)``.
        tol: stop when the gradient's norm falls below it; ``max_steps`` bounds the iterations.

    Example:
        >>> import numpy as np
        >>> rng = np.random.default_rng(0)
        >>> X = rng.normal(size=(400, 3)).astype(np.float32); y = (X[:, 0] > 0).astype(np.int32)
        >>> clf = train_logistic(X, y)
        >>> float(np.mean(np.asarray(predict_classes(clf, X)) == y)) > 0.95
        True
    """
    emb: jax.Array | np.ndarray = _as_embeddings(X)
    y = np.asarray(y)
    _checks.check_ndim("y", y, 1, "of labels (n,)")
    _checks.check_same_len("X", emb, "y", y)
    if not np.issubdtype(y.dtype, np.integer):
        _checks.fail("y", "integer class labels", f"dtype {y.dtype}")
    C = int(y.max()) + 1 if n_classes is None else int(n_classes)
    if y.min() < 0 or y.max() >= C or C < 2:
        _checks.fail(
            "y",
            f"labels in 0..{max(C, 2) - 1} with at least 2 classes",
            f"values in [{y.min()}, {y.max()}]",
        )
    if not float(l2) >= 0:
        _checks.fail("l2", "a penalty >= 0", repr(l2))
    if sample_weight is None:
        w = jnp.ones(len(y), emb.dtype)
    else:
        w_host = np.asarray(sample_weight)
        _checks.warn_if_downcast("sample_weight", w_host)
        if (
            w_host.shape != y.shape
            or not np.all(np.isfinite(w_host))
            or (w_host < 0).any()
            or w_host.sum() <= 0
        ):
            _checks.fail(
                "sample_weight",
                f"non-negative finite weights of shape {y.shape}, not all 0",
                f"shape {w_host.shape}",
            )
        w = jnp.asarray(w_host, emb.dtype)
    Xj = jnp.asarray(emb)
    (W, b), _, _ = _train(
        Xj,
        jnp.asarray(y, jnp.int32),
        w,
        jnp.asarray(l2, Xj.dtype),
        jnp.asarray(tol, Xj.dtype),
        C,
        int(max_steps),
    )
    return LinearClassifier(W=W, b=b)


#: ``fit_logistic`` is :func:`train_logistic`'s old name (it trains a predictor: docs/contract.md §6).
_DEPRECATED = {"fit_logistic": ("cfjax.representations.train_logistic", train_logistic)}
__getattr__ = _deprecations.getattr_for(__name__, _DEPRECATED)
