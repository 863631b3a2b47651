"""Run every cfjax benchmark in turn (``make bench``)."""

from experiments.benchmarks import bench_metrics, bench_scm


def main() -> None:
    print("== cfjax.metrics.evaluate vs numpy/scipy/scikit-learn ==")
    bench_metrics.main(["--breakdown"])
    print("\n== cfjax.scm counterfactuals vs DoWhy, ChiRho and a numpy closed form ==")
    bench_scm.main([])


if __name__ == "__main__":
    main()
