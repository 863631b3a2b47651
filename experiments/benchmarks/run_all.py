"""Run every cfjax benchmark in turn (``make bench``)."""

from experiments.benchmarks import bench_metrics


def main() -> None:
    print("== cfjax.metrics.evaluate vs numpy/scipy/scikit-learn ==")
    bench_metrics.main(["--breakdown"])


if __name__ == "__main__":
    main()
