"""`accelerate launch` with 2 CPU processes (DDP over gloo) gives the same update as one process (floating-point
tolerance), the same number of optimizer steps, and finishes when the processes' data are uneven."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

SCRIPT = Path(__file__).with_name("accelerate_run.py")
ACCELERATE = Path(sys.executable).with_name("accelerate")


def _launch_2() -> list[str]:
    with socket.socket() as s:  # a free port: other test runs may hold accelerate's default one
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    # --multi_gpu starts torchrun; without CUDA the trainer's Accelerator(cpu=True) then runs DDP over gloo. (With
    # --cpu, accelerate starts ONE process: the comparison would be vacuous, hence the process-count checks.)
    return [
        str(ACCELERATE),
        "launch",
        "--multi_gpu",
        "--num_processes",
        "2",
        "--num_machines",
        "1",
        "--mixed_precision",
        "no",
        "--dynamo_backend",
        "no",
        "--main_process_port",
        str(port),
    ]


def _run(cmd: list[str], timeout: float = 400) -> str:
    """Run ``cmd`` in its own process group; on timeout kill the whole group (a hung collective never returns), as
    on any other way out (pytest's own timeout). Returns stderr, or fails the test with its end."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "SEARCHRL_NO_PROGRESS": "1"}
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, start_new_session=True
    )
    try:
        _, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        pytest.fail(f"timed out after {timeout:.0f} s (a collective left waiting?): {' '.join(cmd[-5:])}")
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
    assert proc.returncode == 0, err[-3000:]
    return err


def _run_2(args: list[str], timeout: float = 400) -> None:
    """``_run`` under ``accelerate launch`` with 2 processes; once more on another port if another program took the
    free port found between its check and the launch."""
    try:
        _run([*_launch_2(), *args], timeout)
    except AssertionError as err:
        if "address already in use" not in str(err).lower():
            raise
        _run([*_launch_2(), *args], timeout)


def _one_and_two(tmp_path: Path, *args: str) -> tuple[dict, dict, Path, Path]:
    one, two = tmp_path / "one", tmp_path / "two"
    _run([sys.executable, str(SCRIPT), str(one), *args])
    _run_2([str(SCRIPT), str(two), *args])
    h1, h2 = torch.load(one / "history.pt"), torch.load(two / "history.pt")
    assert (h1["processes"], h2["processes"]) == (1, 2), "the launch must really run two processes"
    return h1, h2, one, two


@pytest.mark.slow
@pytest.mark.parametrize("algo", ["grpo", "ppo", "reinforce_pp"])
def test_two_processes_match_one(tmp_path: Path, algo: str) -> None:
    """ppo and reinforce_pp whiten advantages over the whole step: right only if the statistics span processes."""
    h1, h2, one, two = _one_and_two(tmp_path, algo)
    w1, w2 = torch.load(one / "weights.pt"), torch.load(two / "weights.pt")
    init = __import__("searchrl.testing", fromlist=["tiny_model"]).tiny_model().state_dict()
    moved = max((w1[k] - init[k]).abs().max().item() for k in w1)
    assert moved > 1e-4, "training must change the weights for the comparison to mean anything"
    # The gradient is the sharp test (every step's norm to 1e-5); Adam at lr 1e-2 turns float noise in near-zero
    # gradient entries into weight differences of up to ~1e-4, so the weights get a looser tolerance.
    assert [m["grad_norm"] for m in h2["history"]] == pytest.approx([m["grad_norm"] for m in h1["history"]], rel=1e-5)
    for k in w1:
        torch.testing.assert_close(w2[k], w1[k], rtol=1e-3, atol=3e-4, msg=k)
    # the logged metrics are the whole step's, not process 0's share: rewards and lengths averaged, counts summed
    shared = ["reward/total", "tokens/response", "tokens/prompt", "tokens/generated"]
    shared += [k for k in h1["history"][0] if k.startswith("rollout/") and "time" not in k]
    assert len(shared) > 4
    for m1, m2 in zip(h1["history"], h2["history"], strict=True):
        assert {k: m2[k] for k in shared} == pytest.approx({k: m1[k] for k in shared}, rel=1e-6), algo


@pytest.mark.slow
def test_mini_batch_size_counts_trajectories_of_all_processes(tmp_path: Path) -> None:
    """16 trajectories per step, mini-batches of 4: 4 optimizer steps per RL step with one process or two."""
    h1, h2, _, _ = _one_and_two(tmp_path, "grpo", "4")
    assert h1["optimizer_steps"] == h2["optimizer_steps"] == 8  # 2 RL steps x 4
    # a collective waits training.collective_timeout_s (while the main process alone evaluates or saves)
    assert h2["collective_timeout_s"] == 4321
    assert [m["update/optimizer_steps"] for m in h2["history"]] == [4.0, 4.0]


@pytest.mark.slow
def test_uneven_processes_with_memorization_finish(tmp_path: Path) -> None:
    """Process 1 has ~6x longer rollouts (more micro-batches) and no memorization sequences; process 0 has some."""
    out = tmp_path / "uneven"
    _run_2([str(SCRIPT), str(out), "grpo", "8", "uneven"], timeout=800)
    info = torch.load(out / "history.pt")
    assert info["processes"] == 2
    hist = info["history"]
    assert [m["step"] for m in hist] == [1, 2] and all(m["loss/memorization_nll"] > 0 for m in hist)


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["dapo", "dapo2"])
def test_dropped_uniform_groups_match_one_process(tmp_path: Path, mode: str) -> None:
    """DAPO's filter with the informative groups all on one process (and, in another step, on none): a process left
    without an informative group passes rows that count in no loss, so the update is one process's."""
    h1, h2, one, two = _one_and_two(tmp_path, "grpo", "64", mode)
    assert [m["grad_norm"] for m in h2["history"]] == pytest.approx([m["grad_norm"] for m in h1["history"]], rel=1e-5)
    w1, w2 = torch.load(one / "weights.pt"), torch.load(two / "weights.pt")
    for k in w1:
        torch.testing.assert_close(w2[k], w1[k], rtol=1e-3, atol=3e-4, msg=k)
    for key in ("filter/rows", "filter/informative_group_frac", "sampling/rounds", "reward/total"):
        assert [m[key] for m in h2["history"]] == pytest.approx([m[key] for m in h1["history"]]), key
