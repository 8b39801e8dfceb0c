"""benchmarks/run_all.py: a benchmark name that names no script fails the run."""

from __future__ import annotations

import sys

import run_all


def test_a_misspelt_benchmark_name_fails_the_run(monkeypatch, capsys) -> None:
    monkeypatch.setattr(sys, "argv", ["run_all.py", "bench_no_such_benchmark"])
    monkeypatch.setattr(run_all.subprocess, "call", lambda *a, **k: 0)  # nothing is run either way
    assert run_all.main() == 1
    out = capsys.readouterr().out
    assert "bench_no_such_benchmark.py not found" in out
    assert "failed: bench_no_such_benchmark" in out
