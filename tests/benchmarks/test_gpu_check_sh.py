"""benchmarks/gpu_check.sh on a machine without CUDA: it stops before running anything, with a reason."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu_check.sh"


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_without_a_cuda_device_it_exits_2_and_writes_no_report(tmp_path: Path) -> None:
    shim = tmp_path / "bin"
    shim.mkdir()
    # a python3 whose torch sees no CUDA device (exit 1 for the script's check); it records what it was asked
    (shim / "python3").write_text(f'#!/bin/sh\necho "$@" >> {tmp_path / "calls.txt"}\nexit 1\n')
    (shim / "python3").chmod(0o755)
    out = tmp_path / "out"
    env = dict(os.environ, PATH=f"{shim}{os.pathsep}{os.environ['PATH']}", NO_WHEELS="1", PHASES="tests")
    proc = subprocess.run(["bash", str(SCRIPT), str(out)], capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "needs a CUDA GPU" in proc.stderr
    assert not out.exists()  # no report that would read as a clean GPU check
    assert "pytest" not in (tmp_path / "calls.txt").read_text()  # the tests never started
