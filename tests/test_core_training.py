"""The one training loop (cfjax._core.training): equal to a plain optax loop, independent of the
chunk length, a NaN guard naming the step, held-out early stopping, resume from a checkpoint."""

import dataclasses
import inspect

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from cfjax._core import training
from cfjax._core.checkpoint import CheckpointStore
from cfjax._core.keys import as_key, numpy_rng, seed_of
from cfjax._core.optim import standard_promotion
from cfjax._errors import TrainingError, ValidationError

QUIET = training.Reporter(progress=False)

OPT = standard_promotion(optax.adam(0.05))  # as every cfjax trainer's optimiser: any dtype promotion


@dataclasses.dataclass(frozen=True)
class Regression:
    """Minibatch least squares: a hashable step, compiled once."""

    batch: int
    poison_at: int = -1  # a step whose loss is made NaN

    def __call__(self, state, data, key):
        params, opt_state, t = state
        idx = jax.random.randint(key, (self.batch,), 0, data["x"].shape[0])

        def loss(w):
            return jnp.mean((data["x"][idx] @ w - data["y"][idx]) ** 2)

        value, grad = jax.value_and_grad(loss)(params)
        value = jnp.where(t == self.poison_at, jnp.nan, value)
        updates, opt_state = OPT.update(grad, opt_state, params)
        return (optax.apply_updates(params, updates), opt_state, t + 1), {"loss": value}


def problem(rng, n=200, d=3):
    x = rng.normal(size=(n, d)).astype(np.float32)
    y = (x @ rng.normal(size=d) + 0.1 * rng.normal(size=n)).astype(np.float32)
    w0 = jnp.zeros(d, jnp.float32)
    return {"x": jnp.asarray(x), "y": jnp.asarray(y)}, (w0, OPT.init(w0), jnp.zeros((), jnp.int32))


def reference(step, state, data, key, steps):
    """A plain Python loop over the same step."""
    losses = []
    for t in range(steps):
        state, metrics = step(state, data, jax.random.fold_in(key, t))
        losses.append(float(metrics["loss"]))
    return state, np.asarray(losses)


@pytest.mark.parametrize("chunk", [1, 7, 50])
def test_loop_equals_a_python_loop_for_any_chunk_length(rng, chunk):
    data, state = problem(rng)
    seed = int(rng.integers(1 << 30))
    step = Regression(batch=16)
    out = training.run(step, state, data, key=seed, steps=23, chunk_steps=chunk, reporter=QUIET)
    ref_state, ref_losses = reference(step, state, data, jax.random.key(seed), 23)
    assert out.steps == 23 and out.finished
    np.testing.assert_allclose(out.history["loss"], ref_losses, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(out.state[0], ref_state[0], rtol=1e-5, atol=1e-6)


def test_nan_guard_names_the_step_and_keeps_the_last_good_state(rng):
    data, state = problem(rng)
    with pytest.raises(TrainingError, match=r"at step 12\b"):
        training.run(Regression(batch=8, poison_at=12), state, data, key=0, steps=30, chunk_steps=5,
                     reporter=QUIET)


def test_held_out_early_stopping_returns_the_best_state(rng):
    data, state = problem(rng)
    held = {"x": data["x"][:50], "y": data["y"][:50] + 3.0}  # a held-out set the fit moves away from

    def held_out(s):
        return jnp.mean((held["x"] @ s[0] - held["y"]) ** 2)

    out = training.run(Regression(batch=16), state, data, key=1, steps=400, chunk_steps=10, reporter=QUIET,
                       validation=training.Validation(held_out, patience=3))
    curve = out.validation
    assert len(curve) == len(out.validation_steps) and out.validation_steps[-1] == out.steps
    best = int(np.argmin(curve))
    assert out.best_step == out.validation_steps[best]
    assert np.all(curve[best + 1:] >= curve[best]) and len(curve) - 1 - best <= 3
    np.testing.assert_allclose(float(held_out(out.best)), curve[best], rtol=1e-5)


def test_resume_from_a_checkpoint_equals_one_run(rng, tmp_path):
    data, state = problem(rng)
    step = Regression(batch=16)
    whole = training.run(step, state, data, key=5, steps=40, chunk_steps=10, reporter=QUIET)
    store = CheckpointStore(tmp_path)
    first = training.run(step, state, data, key=5, steps=40, chunk_steps=10, reporter=QUIET,
                         checkpoint=training.Checkpointing(store, {"run": "a"}), max_chunks=2)
    assert first.steps == 20 and not first.finished
    rest = training.run(step, state, data, key=5, steps=40, chunk_steps=10, reporter=QUIET,
                        checkpoint=training.Checkpointing(store, {"run": "a"}))
    np.testing.assert_allclose(rest.history["loss"], whole.history["loss"], rtol=1e-6)
    np.testing.assert_allclose(rest.state[0], whole.state[0], rtol=1e-6)
    with pytest.raises(ValidationError, match="checkpoint"):
        training.run(step, state, data, key=5, steps=40, chunk_steps=10, reporter=QUIET,
                     checkpoint=training.Checkpointing(store, {"run": "b"}))
    store.close()


def test_as_key_accepts_keys_raw_keys_and_seeds():
    same = [as_key(7), as_key(jax.random.key(7)), as_key(jax.random.PRNGKey(7))]
    for k in same:
        np.testing.assert_array_equal(jax.random.key_data(k), jax.random.key_data(jax.random.key(7)))
    for bad in (-1, 1.5, "7", jnp.zeros(3), jax.random.split(jax.random.key(0))):
        with pytest.raises(ValidationError, match="`key`"):
            as_key(bad)


def test_seed_of_reads_ints_and_key_data():
    assert seed_of(7) == seed_of(np.int64(7)) == seed_of(jax.random.key(7)) == seed_of(jax.random.PRNGKey(7)) == 7
    assert seed_of(2**40) == 2**40  # an int is returned as it is
    raw = jnp.array([3, 5], jnp.uint32)
    assert seed_of(raw) == seed_of(jax.random.wrap_key_data(raw)) == (3 << 32) | 5
    assert numpy_rng(raw).random() == np.random.default_rng((3 << 32) | 5).random()
    assert numpy_rng(9).random() == numpy_rng(jax.random.key(9)).random() == np.random.default_rng(9).random()
    for bad in (-1, True, 1.5, "7", jnp.zeros(3), jax.random.split(jax.random.key(0))):
        with pytest.raises(ValidationError, match="`sample_key`"):
            seed_of(bad, "sample_key")


@dataclasses.dataclass(frozen=True)
class Strided:
    """``stride`` steps of :class:`Regression` in one call (the last call fewer, to ``total``),
    each with the key the step-by-step loop would give it: what an ensemble's evaluation round
    is to its steps."""

    inner: Regression
    stride: int
    total: int
    seed: int

    def __call__(self, state, data, key):
        del key
        key, t0 = jax.random.key(self.seed), state[2]

        def body(i, carry):
            s, losses, bad = carry
            new, metrics = self.inner(s, data, jax.random.fold_in(key, t0 + i))
            bad = jnp.where((bad < 0) & ~jnp.isfinite(metrics["loss"]), t0 + i, bad)
            return new, losses.at[i].set(metrics["loss"]), bad

        n = jnp.minimum(self.stride, self.total - t0)
        state, losses, bad = jax.lax.fori_loop(0, n, body, (state, jnp.zeros(self.stride), jnp.int32(-1)))
        return state, {"loss": jnp.sum(losses) / n.astype(losses.dtype), "bad_step": bad}


def test_a_strided_step_counts_training_steps(rng, tmp_path):
    """A step taking ``stride`` training steps: the same state as step by step, the result's
    and the checkpoints' step counts in training steps, the held-out values at chunk ends, and
    the error naming the inner step through ``locate``."""
    data, state = problem(rng)
    seed, steps, stride = int(rng.integers(1 << 30)), 23, int(rng.integers(2, 6))
    key = jax.random.key(seed)
    inner = Regression(batch=16)
    strided = Strided(inner, stride, steps, seed)
    out = training.run(strided, state, data, key=0, steps=steps, chunk_steps=2 * stride, stride=stride,
                       reporter=QUIET, validation=training.Validation(lambda s: jnp.sum(s[0] ** 2)))
    ref_state, ref_losses = reference(inner, state, data, key, steps)
    calls = -(-steps // stride)
    assert out.steps == steps and out.finished and out.history["loss"].shape == (calls,)
    np.testing.assert_allclose(out.state[0], ref_state[0], rtol=1e-5, atol=1e-6)
    means = [ref_losses[i:i + stride].mean() for i in range(0, steps, stride)]
    np.testing.assert_allclose(out.history["loss"], means, rtol=1e-5, atol=1e-6)
    ends = [min(c, steps) for c in range(2 * stride, (calls + 1) * stride, 2 * stride)]
    np.testing.assert_array_equal(out.validation_steps, ends + ([steps] if ends[-1] < steps else []))
    store = CheckpointStore(tmp_path)
    first = training.run(strided, state, data, key=0, steps=steps, chunk_steps=stride, stride=stride,
                         reporter=QUIET, checkpoint=training.Checkpointing(store, {"run": "s"}), max_chunks=2)
    assert first.steps == 2 * stride and store.latest_step() == 2 * stride
    rest = training.run(strided, state, data, key=0, steps=steps, chunk_steps=stride, stride=stride,
                        reporter=QUIET, checkpoint=training.Checkpointing(store, {"run": "s"}))
    store.close()
    np.testing.assert_allclose(rest.state[0], out.state[0], rtol=1e-6)
    poison = int(rng.integers(stride, steps))
    with pytest.raises(TrainingError, match=rf"at step {poison}\b"):
        training.run(Strided(Regression(batch=8, poison_at=poison), stride, steps, seed), state, data, key=0,
                     steps=steps, chunk_steps=stride, stride=stride, reporter=training.Reporter(progress=False,
                                                      locate=lambda metrics, i: f"at step {int(metrics['bad_step'])}"))
    with pytest.raises(ValidationError, match="`chunk_steps`: expected a multiple of `stride`"):
        training.run(strided, state, data, key=0, steps=steps, chunk_steps=stride + 1, stride=stride,
                     reporter=QUIET)
    with pytest.raises(ValidationError, match="`stride`"):
        training.run(strided, state, data, key=0, steps=steps, stride=0, reporter=QUIET)


def test_the_old_keyword_arguments_still_work_with_a_warning_naming_the_new_spelling(rng, tmp_path):
    """``progress=``, ``validate=``, ``patience=``, ``store=``, ``meta=`` … of earlier releases fold
    into ``reporter``, ``validation`` and ``checkpoint``: the same run, and a DeprecationWarning."""
    data, state = problem(rng)
    step, seed = Regression(batch=16), int(rng.integers(1 << 30))

    def held_out(s):
        return jnp.sum(s[0] ** 2)

    new = training.run(step, state, data, key=seed, steps=30, chunk_steps=10, reporter=QUIET,
                       validation=training.Validation(held_out, patience=2))
    with pytest.warns(DeprecationWarning, match=r"run\(progress=, validate=, patience=\).*"
                                                r"reporter=Reporter\(progress=\.\.\.\).*validation=Validation"):
        old = training.run(step, state, data, key=seed, steps=30, chunk_steps=10, progress=False,
                           validate=held_out, patience=2)
    np.testing.assert_array_equal(old.state[0], new.state[0])
    np.testing.assert_array_equal(old.validation, new.validation)
    with pytest.warns(DeprecationWarning, match="checkpoint=Checkpointing"):
        store = CheckpointStore(tmp_path)
        training.run(step, state, data, key=seed, steps=30, chunk_steps=10, progress=False, store=store,
                     meta={"run": "a"}, max_chunks=1)
    assert store.latest_step() == 10
    store.close()
    with pytest.raises(TypeError, match="unexpected keyword argument 'nope'"):
        training.run(step, state, data, key=seed, steps=30, progress=False, nope=1)
    assert list(inspect.signature(training.run).parameters) == [
        "step", "state", "data", "key", "steps", "chunk_steps", "stride", "guard", "max_chunks", "reporter",
        "validation", "checkpoint"]
