"""Counterfactual marginalisation over several processes with JAX's multi-host runtime.

Every process draws (as it would read) only its own block of units (:func:`cfjax.distributed.process_block`), makes
the exact counterfactuals of its units under paper 000's K = 16 interventions do(sex, age) on
the synthetic chest SCM's parents (the label, effusion, held at its observed value), scores
them with a risk score of the parents (a hand-written logistic formula that leans on sex), and
reduces them chunk by chunk over its local devices; :func:`cfjax.metrics.evaluate_chunks`
then gathers the sufficient statistics and per-unit scores of every process, so that every
process holds the report of all units — equal to the one-process run. Process 0 writes it.

One process: ``python -m experiments.multihost --units 20000 --out results/multihost``.
Two processes on one machine (one shell each, or ``&``)::

    CFJAX_COORDINATOR=localhost:12355 CFJAX_NUM_PROCESSES=2 CFJAX_PROCESS_ID=0 \\
        python -m experiments.multihost --units 20000 --out results/multihost &
    CFJAX_COORDINATOR=localhost:12355 CFJAX_NUM_PROCESSES=2 CFJAX_PROCESS_ID=1 \\
        python -m experiments.multihost --units 20000 --out results/multihost

On a cluster, the same command in every process with the three variables set (or none, where
JAX detects the cluster itself: SLURM, Open MPI, Kubernetes, Cloud TPU).
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import time

import jax
import jax.numpy as jnp
import numpy as np

import cfjax as cf
from cfjax import io as cfio

AGES = np.linspace(20.0, 90.0, 8)
WEIGHTS = {"sex": 1.2, "age": 0.02, "lung": -0.8, "race": 0.1}  # the risk score's coefficients
BIAS = -1.0


def risk_score(parents: dict[str, jax.Array]) -> jax.Array:
    """A logistic risk score of the parents, per unit (leans on sex, a nuisance parent)."""
    z = BIAS + sum(w * parents[v].astype(jnp.float32) for v, w in WEIGHTS.items())
    return jax.nn.sigmoid(z - WEIGHTS["age"] * 55.0)


def units(seed: int, block: slice) -> dict[str, np.ndarray]:
    """The units ``block`` of the synthetic dataset (the chest SCM's parents). Unit ``i`` is
    drawn with its own key, ``fold_in(key(seed), i)``, so each process draws only its own rows
    and the dataset does not depend on the number of processes (as reading a block of rows
    from a file would not)."""
    chest = cf.data.ChestSCM()
    scm, params = chest.scm, chest.params()
    root = jax.random.key(seed)
    draw = jax.jit(jax.vmap(lambda i: scm.sample(params, 1, key=jax.random.fold_in(root, i))))
    rows = draw(jnp.arange(block.start, block.stop))  # each node (b, 1)
    return {v: np.asarray(x).reshape(-1) for v, x in rows.items()}


def chunks(block: dict[str, np.ndarray], chunk_size: int, seed: int):
    """``(p_obs, p_cf, y)`` of the block's units, ``chunk_size`` at a time."""
    chest = cf.data.ChestSCM()
    scm, params = chest.scm, chest.params()
    grid, _ = cf.scm.intervention_grid({"sex": [0, 1], "age": AGES})
    k = grid["sex"].shape[0]
    n = block["sex"].shape[0]
    # do(sex, age), effusion (the label) held at each unit's observed value.
    interventions = {**grid, "effusion": np.broadcast_to(block["effusion"][:, None], (n, k))}
    score = jax.jit(jax.vmap(risk_score))
    p_obs = np.asarray(risk_score(block))
    for start, stop, out in scm.counterfactual_chunks(params, block, interventions, chunk_size=chunk_size,
                                                      key=jax.random.key(seed + 1)):
        p_cf = np.asarray(score(out))  # (b, K)
        yield p_obs[start:stop], p_cf, block["effusion"][start:stop].astype(np.int32)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--units", type=int, default=20000, help="number of units N (all processes)")
    parser.add_argument("--chunk-size", type=int, default=4096, help="units per reduced chunk")
    parser.add_argument("--devices", type=int, default=None,
                        help="local devices to split each chunk over (default: all of this process's)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=pathlib.Path, default=pathlib.Path("results/multihost"))
    args = parser.parse_args(argv)
    cf.platform.use_compilation_cache()  # load what an earlier run compiled (CFJAX_CACHE_DIR=off: compile afresh)
    if any(os.environ.get(v) for v in (cf.distributed.ENV_COORDINATOR, cf.distributed.ENV_NUM_PROCESSES)):
        cf.distributed.initialize()
    start = time.perf_counter()
    block = cf.distributed.process_block(args.units)
    data = units(args.seed, block)
    local = jax.local_devices()
    mesh = cf.distributed.mesh(local[:args.devices] if args.devices else local)
    report = cf.metrics.evaluate_chunks(chunks(data, args.chunk_size, args.seed), mesh=mesh,
                                        across_processes=True)
    result = {"units": args.units, "processes": jax.process_count(), "devices_per_process": mesh.size,
              "block": [block.start, block.stop], "report": report.to_dict()}
    if jax.process_index() == 0:
        args.out.mkdir(parents=True, exist_ok=True)
        cfio.atomic_write_bytes(args.out / "results.json", (json.dumps(result, indent=2) + "\n").encode())
        print(f"{args.units} units over {jax.process_count()} process(es) × {mesh.size} device(s) "
              f"in {time.perf_counter() - start:.1f} s; R_IE {result['report']['risk_ie']:.4f}, "
              f"s_flip {result['report']['s_flip']:.4f} -> {args.out / 'results.json'}")
    return result


if __name__ == "__main__":
    main()
