"""The randomness rule of ``docs/contract.md`` (§3), checked over the whole public surface.

Every public function and method that takes a random key takes it as the keyword-only ``key=``,
except the per-unit interface the contract names as its one exception (functions written for one
unit, member or step and lifted with ``vmap``), which takes it positionally. The exception list
here is the contract's: a name the contract lists must be an exception in the code, and a
positional key outside the list fails.
"""

from __future__ import annotations

import importlib
import inspect
import pathlib
import pkgutil
import re

import jax
import pytest

import cfjax
from cfjax.scm import Mechanism

CONTRACT = pathlib.Path(__file__).resolve().parents[1] / "docs" / "contract.md"
KEY_NAMES = ("key", "rng", "rng_key", "seed_key")
#: the per-unit methods of a mechanism (any subclass of cfjax.scm.Mechanism)
MECHANISM_METHODS = ("init", "sample_noise", "abduct", "posterior", "elbo")
#: the other per-unit functions the contract names: ``Module.qualname``
PER_UNIT = ("SCM.abduct_unit", "SCM.sample_noise_unit", "gumbel_posterior", "sample_image_noise", "member_step",
            "EnsembleRound.__call__", "train_step", "generator_loss", "counterfactual_loss",
            "counterfactual_targets")


def _public_callables():
    """``(qualified name, owner class or None, function)`` for every public function of every
    public cfjax module and submodule and every public method of every public class, each once."""
    modules = ["cfjax"] + [m.name for m in pkgutil.walk_packages(cfjax.__path__, "cfjax.")
                           if not any(part.startswith("_") for part in m.name.split("."))]
    for name in modules:
        module = importlib.import_module(name)
        for attr in getattr(module, "__all__", ()):
            obj = getattr(module, attr)
            if inspect.isclass(obj):
                for meth_name, meth in vars(obj).items():
                    if meth_name.startswith("_") and meth_name != "__call__":
                        continue
                    fn = meth.__func__ if isinstance(meth, (staticmethod, classmethod)) else meth
                    if inspect.isfunction(fn):
                        yield f"{obj.__qualname__}.{meth_name}", obj, fn
            elif inspect.isfunction(obj):
                yield obj.__qualname__, None, obj


def _positional_keys():
    out, seen = {}, set()
    for qualname, owner, fn in _public_callables():
        ident = (fn.__module__, fn.__qualname__)
        if ident in seen:
            continue
        seen.add(ident)
        for p in inspect.signature(fn).parameters.values():
            if p.name in KEY_NAMES and p.kind is not p.KEYWORD_ONLY:
                out[qualname] = owner
    return out


def _is_exception(qualname: str, owner) -> bool:
    if owner is not None and issubclass(owner, Mechanism) and qualname.rsplit(".", 1)[1] in MECHANISM_METHODS:
        return True
    if qualname.endswith(".kernel_init"):  # a flax initialiser held by a module: flax's protocol
        return True
    return qualname in PER_UNIT


def test_every_public_key_is_keyword_only_but_the_per_unit_interface():
    offenders = sorted(q for q, owner in _positional_keys().items() if not _is_exception(q, owner))
    assert offenders == [], f"public functions taking a positional key (contract §3): {offenders}"


def test_the_contract_lists_exactly_the_exceptions_the_code_makes():
    text = CONTRACT.read_text()
    start = text.index("<!-- positional-key-interface")
    listed = text[start:text.index("Why positional", start)]
    for name in PER_UNIT:
        assert f"{name}(" in listed, f"docs/contract.md does not name the exception {name}"
    for method in MECHANISM_METHODS:
        assert re.search(rf"[.`]{method}[(`]", listed), f"docs/contract.md does not name Mechanism.{method}"
    # Every exception the code makes is one the contract's rule covers (no stale entries either).
    positional = _positional_keys()
    for name in PER_UNIT:
        assert name in positional, f"{name} is listed as an exception but takes `key=` keyword-only"


@pytest.mark.parametrize("fn", ["splits.biased_training_mask", "evaluation.auc_interval", "evaluate_setting",
                                "exact_counterfactuals", "families.datasets_bias_key"])
def test_the_study_takes_its_key_by_keyword(fn):
    owner = cfjax.study
    for part in fn.split(".")[:-1]:
        owner = getattr(owner, part)
    sig = inspect.signature(getattr(owner, fn.rsplit(".", 1)[-1]))
    assert sig.parameters["key"].kind is inspect.Parameter.KEYWORD_ONLY


def test_an_int_key_and_a_typed_key_give_the_same_study_draws():
    a = cfjax.study.families.datasets_bias_key(key=5)
    b = cfjax.study.families.datasets_bias_key(key=jax.random.key(5))
    assert (jax.random.key_data(a) == jax.random.key_data(b)).all()
