"""Decoding an FSDP2-sharded policy: the decode loop calls the policy's submodules itself, skipping the root
module's forward hook that gathers the root's parameters (embeddings, norm, head). Checked on the CPU with gloo."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

SCRIPT = textwrap.dedent(
    """
    import os, socket, sys
    import torch, torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from searchrl import device as placement
    from searchrl.generation.base import SamplingParams
    from searchrl.generation.hf import HFGenerator
    from searchrl.rl.batch import TokenScorer
    from searchrl.shapes import random_policy

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=0, world_size=1)
    mesh = init_device_mesh("cpu", (1,))
    model, tok = random_policy(f"random:qwen2.5-tiny:{sys.argv[1]}", torch.float32, torch.device("cpu"))
    plain = HFGenerator(model, tok).generate([tok("hello there")["input_ids"]], SamplingParams(4, seed=0))
    for layer in model.model.layers:
        fully_shard(layer, mesh=mesh)
    root = fully_shard(TokenScorer(model), mesh=mesh)
    gen = HFGenerator(model, tok)
    try:
        gen.generate([tok("hello there")["input_ids"]], SamplingParams(4, seed=0))
        print("bare: ran")
    except RuntimeError as e:
        print("bare: failed", "DTensor" in str(e))
    with placement.unsharded(root):
        out = gen.generate([tok("hello there")["input_ids"]], SamplingParams(4, seed=0))
    print("unsharded:", out[0].token_ids == plain[0].token_ids)
    print("resharded:", type(model.model.embed_tokens.weight).__name__)
    dist.barrier()
    dist.destroy_process_group()
    from searchrl.utils import hard_exit
    hard_exit()  # as the trainer ends: gloo's teardown at interpreter exit can abort a process whose work is done
    """
)


def test_a_sharded_policy_decodes_inside_unsharded(shared_data: Path, tmp_path: Path) -> None:
    tok = shared_data / "tokenizers" / "qwen3"
    if not tok.is_dir():
        pytest.skip(f"no Qwen tokenizer at {tok}")
    script = tmp_path / "run.py"
    script.write_text(SCRIPT)
    res = subprocess.run([sys.executable, str(script), str(tok)], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    lines = res.stdout.splitlines()
    assert "bare: failed True" in lines  # the bug this guards against
    assert "unsharded: True" in lines  # the same tokens as the unsharded policy
    assert "resharded: DTensor" in lines
