"""`accelerate launch --num_processes 2 --cpu` gives the same update as one process (floating-point tolerance)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

SCRIPT = Path(__file__).with_name("accelerate_run.py")


def _run(cmd: list[str]) -> None:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "SEARCHRL_NO_PROGRESS": "1"}
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
    assert res.returncode == 0, res.stderr[-3000:]


@pytest.mark.slow
@pytest.mark.parametrize("algo", ["grpo"])
def test_two_processes_match_one(tmp_path: Path, algo: str) -> None:
    one, two = tmp_path / "one", tmp_path / "two"
    _run([sys.executable, str(SCRIPT), str(one), algo])
    accelerate = Path(sys.executable).with_name("accelerate")
    _run([str(accelerate), "launch", "--num_processes", "2", "--cpu", "--num_machines", "1", "--mixed_precision", "no",
          "--dynamo_backend", "no", str(SCRIPT), str(two), algo])  # fmt: skip
    w1, w2 = torch.load(one / "weights.pt"), torch.load(two / "weights.pt")
    init = __import__("searchrl.testing", fromlist=["tiny_model"]).tiny_model().state_dict()
    moved = max((w1[k] - init[k]).abs().max().item() for k in w1)
    assert moved > 1e-4, "training must change the weights for the comparison to mean anything"
    for k in w1:
        torch.testing.assert_close(w2[k], w1[k], rtol=1e-4, atol=1e-5, msg=k)
    h1, h2 = torch.load(one / "history.pt"), torch.load(two / "history.pt")
    assert h1[0]["grad_norm"] == pytest.approx(h2[0]["grad_norm"], rel=1e-4)
