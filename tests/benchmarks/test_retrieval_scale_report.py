"""benchmarks/retrieval_scale_report.py: runs kept from earlier invocations are reported as theirs."""

from __future__ import annotations

from retrieval_scale_report import extrapolate, report


def _run(n: int, date: str, ms: float, **extra) -> dict:
    return {
        "passages": n,
        "date": date,
        "factory": "IVF128,PQ192x4fs",
        "nprobe": 32,
        "candidates": 100,
        "recall_at_3_vs_exact": 0.9,
        "recall_at_10_vs_exact": 0.8,
        "build_s": 10.0,
        "build_peak_rss_mb": 100,
        "first_answer_s": 1.0,
        "serve_rss_mb": 200.0,
        "serve_peak_rss_mb": 210.0,
        "serve_rss_detail_mb": {"RssAnon": 150.0, "RssFile": 50.0},
        "p50_1_ms": 2.0,
        "qps_1": 400.0,
        "qps_8": 500.0,
        "disk_mb": {"index.faiss": 1.0 * n / 1e4, "vectors.f16.npy": 1.5 * n / 1e4, "passages": 0.1 * n / 1e4},
        "sweep_inprocess_1_query_per_call": [
            {"nprobe": 16, "candidates": 50, "ms_per_query": ms, "recall_at_3": 0.8, "recall_at_10": 0.7}
        ],
        **extra,
    }


def _result(runs: list[dict], measured: list[int] | None) -> dict:
    result = {
        "date": "2026-11-30",
        "machine": {"cpus": 2, "load_average_at_end": [1.0, 1.0, 1.0], "fp32_matmul_gflops": 100, "python": "3"}
        | {"platform": "linux"},
        "vectors": "drawn",
        "runs": runs,
        "extrapolated_21m": extrapolate(runs),
    }
    return result | ({"measured_passages": measured} if measured is not None else {})


def _sweep_rows(text: str) -> dict[str, str]:
    """``{ms/query: measured}`` of the in-process sweep tables."""
    rows = [line.split(" | ") for line in text.splitlines() if line.startswith("| 16 | 50 |")]
    return {cells[2]: cells[-1].rstrip(" |") for cells in rows}


def test_a_run_kept_from_an_earlier_invocation_is_not_labelled_this_invocation() -> None:
    old = _run(5_000_000, "2026-11-28", 1.3, build_note="build_s includes 3425 s stopped")
    new = _run(20_000, "2026-11-30", 57.6)
    text = report(_result([new, old], measured=[20_000]))
    assert _sweep_rows(text) == {"57.6": "this invocation", "1.3": "its run (2026-11-28)"}
    assert "5,000,000 passages: build_s includes 3425 s stopped." in text  # the run's note is kept


def test_a_report_without_the_measured_list_reads_every_run_as_this_invocation() -> None:
    text = report(_result([_run(20_000, "2026-11-30", 57.6)], measured=None))  # a results file written before
    assert _sweep_rows(text) == {"57.6": "this invocation"}
