"""Whitening across processes (gloo, 2 CPU processes): each process's shard, whitened with statistics summed over
both, equals the whole batch whitened in one process. The PPO and REINFORCE++ estimators pass ``sum_across`` so."""

from __future__ import annotations

from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from searchrl.config import AlgorithmConfig
from searchrl.rl.advantages import get_estimator
from searchrl.rl.algorithms import whiten
from searchrl.utils import hard_exit


def _batch() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    x_BT = torch.randn(6, 9, generator=g) * 3 + 1
    mask_BT = (torch.rand(6, 9, generator=g) > 0.3).float()
    mask_BT[5] = 0  # a row with nothing counted
    scores_B = torch.rand(6, generator=g)
    return x_BT, mask_BT, scores_B


def _worker(rank: int, out: str) -> None:
    # a file rendezvous: no port to find free and lose to another program before binding it
    dist.init_process_group("gloo", init_method=f"file://{out}/rendezvous", rank=rank, world_size=2)
    try:
        x_BT, mask_BT, scores_B = _batch()
        rows = slice(0, 2) if rank == 0 else slice(2, 6)  # uneven shards

        def total(t: torch.Tensor) -> torch.Tensor:
            t = t.clone()
            dist.all_reduce(t)
            return t

        w = whiten(x_BT[rows], mask_BT[rows], sum_across=total)
        cfg = AlgorithmConfig(name="reinforce_pp")
        adv, _, _ = get_estimator("reinforce_pp").fn(
            scores_B[rows],
            torch.zeros_like(x_BT[rows]),
            None,
            mask_BT[rows],
            ["g"] * (rows.stop - rows.start),
            cfg,
            sum_across=total,
        )
        torch.save({"whiten": w, "reinforce_pp": adv}, Path(out) / f"rank{rank}.pt")
        dist.barrier()
    finally:
        dist.destroy_process_group()
    hard_exit()  # as the trainer ends: gloo's teardown at interpreter exit can abort a process whose work is done


def test_whitening_spans_processes(tmp_path: Path) -> None:
    mp.start_processes(_worker, args=(str(tmp_path),), nprocs=2, join=True, start_method="spawn")
    x_BT, mask_BT, scores_B = _batch()
    parts = [torch.load(tmp_path / f"rank{r}.pt") for r in (0, 1)]
    torch.testing.assert_close(torch.cat([p["whiten"] for p in parts]), whiten(x_BT, mask_BT))
    cfg = AlgorithmConfig(name="reinforce_pp")
    whole, _, _ = get_estimator("reinforce_pp").fn(scores_B, torch.zeros_like(x_BT), None, mask_BT, ["g"] * 6, cfg)
    torch.testing.assert_close(torch.cat([p["reinforce_pp"] for p in parts]), whole)
    local = whiten(x_BT[:2], mask_BT[:2])  # what one process alone would compute
    assert not torch.allclose(local, whiten(x_BT, mask_BT)[:2]), "the shards must differ for the test to mean anything"
