"""Benchmark: shape buckets (:func:`cfjax.distributed.bucket`) in
:func:`cfjax.predictors.predict` over many N, against the same calls compiled for each exact N
(``buckets=False``).

An ensemble of M small :class:`~cfjax.predictors.EffusionCNN` members scores N images at 20
different N drawn at random in [200, 5000] (none of them a bucket, so the two variants share no
program), once with buckets (N padded to ``chunk × 2^k``, the padding dropped) and once without,
the two variants interleaved N by N (which one goes first alternating), in one process. Printed
for each variant: the programs compiled (``predict``'s own, and every XLA compilation including
the small eager ones of array handling, counted from JAX's compile events), the seconds spent
compiling, and the total wall time of the 20 calls. Then the padding's cost when nothing is
compiled: the warm time at one N with and without, interleaved round by round (medians and the
median of the paired ratios), at an N just below a bucket and at one just above (where the
padding nearly doubles the images).
"""

from __future__ import annotations

import argparse
import collections
import statistics
import time

import jax
import jax.monitoring
import numpy as np

from cfjax import predictors as pr
from cfjax.distributed import bucket
from experiments.benchmarks.timing import conditions

_COMPILE = "/jax/core/compile/backend_compile_duration"


class Compiles:
    """JAX's compile events while active: their count by program name and their seconds."""

    def __init__(self):
        self.names: collections.Counter = collections.Counter()
        self.seconds = 0.0
        self.active = False
        jax.monitoring.register_event_duration_secs_listener(self._listen)

    def _listen(self, event, duration, **kw):
        if self.active and event == _COMPILE:
            self.names[kw.get("fun_name")] += 1
            self.seconds += duration


def draw_sizes(rng: np.random.Generator, count: int, low: int, high: int, chunk: int) -> list[int]:
    """``count`` distinct N in [low, high], none of them its own bucket."""
    sizes: list[int] = []
    while len(sizes) < count:
        n = int(rng.integers(low, high + 1))
        if n not in sizes and bucket(n, chunk) != n:
            sizes.append(n)
    return sizes


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", type=int, default=20, help="distinct N in the sweep")
    ap.add_argument("--low", type=int, default=200)
    ap.add_argument("--high", type=int, default=5000)
    ap.add_argument("--members", type=int, default=4)
    ap.add_argument("--image", type=int, default=32, help="image side")
    ap.add_argument("--chunk", type=int, default=256)
    ap.add_argument("--repeats", type=int, default=7, help="warm rounds at one N")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    print(conditions())
    rng = np.random.default_rng(args.seed)
    model = pr.EffusionCNN(features=(8, 16))
    params = pr.init_params(model, (args.image, args.image), key=0, members=args.members)
    sizes = draw_sizes(rng, args.sizes, args.low, args.high, args.chunk)
    images = rng.uniform(size=(max(sizes), args.image, args.image)).astype(np.float32)
    print(f"predict: M = {args.members} EffusionCNN(features=(8, 16)) members, {args.image}×{args.image} images, "
          f"chunk {args.chunk}; {len(sizes)} N in [{args.low}, {args.high}]: {sizes}")
    print(f"buckets of these N: {sorted({bucket(n, args.chunk) for n in sizes})}")

    def call(n, buckets):
        return jax.block_until_ready(pr.predict(model, params, images[:n], chunk=args.chunk, buckets=buckets))

    counters = {True: Compiles(), False: Compiles()}
    wall = {True: 0.0, False: 0.0}
    for i, n in enumerate(sizes):
        order = (True, False) if i % 2 == 0 else (False, True)
        results = {}
        for buckets in order:
            counters[buckets].active = True
            t0 = time.perf_counter()
            results[buckets] = np.asarray(call(n, buckets))
            wall[buckets] += time.perf_counter() - t0
            counters[buckets].active = False
        np.testing.assert_allclose(results[True], results[False], rtol=1e-5, atol=1e-6)
    print(f"{'sweep of ' + str(len(sizes)) + ' N':<26}{'programs':>9}{'all compiles':>14}{'compile s':>11}"
          f"{'wall s':>9}")
    for buckets, label in ((True, "with buckets"), (False, "without (exact N)")):
        c = counters[buckets]
        print(f"{label:<26}{c.names['jit(local)']:>9}{sum(c.names.values()):>14}{c.seconds:>11.2f}"
              f"{wall[buckets]:>9.2f}")
    print(f"ratio without / with: wall {wall[False] / wall[True]:.2f}×, compile seconds "
          f"{counters[False].seconds / max(counters[True].seconds, 1e-9):.2f}×")

    # The padding's cost, warm: at N just below a bucket and just above one.
    for n in (4 * args.chunk - 24, 4 * args.chunk + 24):
        n = min(n, images.shape[0])
        for buckets in (True, False):
            call(n, buckets), call(n, buckets)  # compiled and warm
        times = {True: [], False: []}
        for r in range(args.repeats):
            for buckets in ((True, False) if r % 2 == 0 else (False, True)):
                t0 = time.perf_counter()
                call(n, buckets)
                times[buckets].append(time.perf_counter() - t0)
        ratios = [b / a for a, b in zip(times[True], times[False])]
        print(f"warm at N = {n} (bucket {bucket(n, args.chunk)}): with buckets "
              f"{1e3 * statistics.median(times[True]):.1f} ms, without {1e3 * statistics.median(times[False]):.1f} ms "
              f"(range {1e3 * min(times[True]):.1f}-{1e3 * max(times[True]):.1f} / "
              f"{1e3 * min(times[False]):.1f}-{1e3 * max(times[False]):.1f}); without / with: "
              f"{statistics.median(ratios):.2f}× (median of {args.repeats} paired rounds)")


if __name__ == "__main__":
    main()
