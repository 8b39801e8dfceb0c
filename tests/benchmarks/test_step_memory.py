"""benchmarks/bench_step_memory.py: a side's record names its scratch directory, not the machine's path."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import bench_step_memory as bench


def test_the_recorded_command_names_the_scratch_directory(tmp_path: Path, monkeypatch) -> None:
    (tmp_path / "current").mkdir()
    step = {"time/step_s": 3.0, "time/generate_s": 1.0, "time/logprob_s": 0.5, "time/update_s": 1.5}
    (tmp_path / "current" / "metrics.jsonl").write_text(json.dumps(step) + "\n")
    done = subprocess.CompletedProcess([], 0, stdout="Maximum resident set size (kbytes): 2048\n", stderr="")
    monkeypatch.setattr(bench.subprocess, "run", lambda *args, **kwargs: done)  # the training child, faked
    side = bench.run_side("current", Path("src"), tmp_path / "data", 1, tmp_path)
    assert str(tmp_path) not in side["command"]
    assert "data.source=<tmp>/data" in side["command"]
    assert "training.output_dir=<tmp>/current" in side["command"]
    assert side["peak_rss_mb"] == 2
