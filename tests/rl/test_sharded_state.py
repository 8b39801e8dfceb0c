"""Checkpoints of an FSDP2-sharded policy over two processes (gloo, CPU): the whole weights and optimizer state are
gathered by every process together and written by one, a sharded model loads them back exactly, and training goes
on as if it had not stopped. (The main process alone gathering, as a plain save does, hangs or fails.)"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

SCRIPT = textwrap.dedent(
    """
    import os, sys
    from pathlib import Path
    import torch, torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from safetensors.torch import load_file
    from searchrl.rl.sharded import full_optimizer_state, full_weights, load_full_optimizer_state, load_full_weights
    from searchrl.testing import tiny_model

    def say(*parts):  # one write per line: the two processes share stdout, and print writes its parts one by one
        os.write(1, (" ".join(map(str, parts)) + "\\n").encode())

    dist.init_process_group("gloo")
    rank, out = dist.get_rank(), sys.argv[1]
    mesh = init_device_mesh("cpu", (2,))
    ids = torch.arange(3, 35).view(2, 16)

    def step(model, opt):
        opt.zero_grad()
        model(input_ids=ids, labels=ids).loss.backward()
        opt.step()

    def make(shard):
        model = tiny_model(seed=0)
        if shard:
            for layer in model.model.layers:
                fully_shard(layer, mesh=mesh)
            fully_shard(model, mesh=mesh)
        return model, torch.optim.AdamW(model.parameters(), lr=1e-2)

    plain, plain_opt = make(shard=False)  # the same training, unsharded, on every process
    model, opt = make(shard=True)
    for _ in range(2):
        step(plain, plain_opt), step(model, opt)
    weights, optim = full_weights(model), full_optimizer_state(model, opt)  # every process takes part
    if rank == 0:
        ref = plain.state_dict()
        say("gathered", all(torch.allclose(weights[k], ref[k], atol=1e-5) for k in ref), len(weights) == len(ref))
        model.save_pretrained(out, state_dict=weights, safe_serialization=True)
        torch.save(optim, f"{out}/optim.pt")
    else:
        say("elsewhere empty", weights == {})
    dist.barrier()
    again, again_opt = make(shard=True)  # a resumed run: every process reads the files
    load_full_weights(again, load_file(f"{out}/model.safetensors"))
    load_full_optimizer_state(again, again_opt, torch.load(f"{out}/optim.pt", weights_only=False))
    step(plain, plain_opt), step(again, again_opt)
    resumed = full_weights(again)
    if rank == 0:
        ref = plain.state_dict()
        say("resumed", all(torch.allclose(resumed[k], ref[k], atol=1e-4) for k in ref))

    # the trainer's own checkpoint functions, on a trainer's parts
    from types import SimpleNamespace
    from searchrl.config import RunConfig
    from searchrl.pipeline import make_protocol
    from searchrl.rl import checkpoint

    cfg = RunConfig()  # what the saved model's searchrl.json records

    def parts(model, opt, step):
        acc = SimpleNamespace(unwrap_model=lambda m: m, is_main_process=rank == 0)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
        state = checkpoint.TrainState(step=step)
        kl = SimpleNamespace(value=0.0)
        return SimpleNamespace(
            sharded=True, acc=acc, critic=None, policy=model, model=model, opt=opt, sched=sched, state=state,
            tokenizer=None, kl_ctrl=kl, _weights_version=0, aux_nll_hook=None, cfg=cfg, protocol=make_protocol(cfg),
        )

    saved = parts(again, again_opt, step=3)
    checkpoint.save_trainer(saved, Path(out) / "checkpoint")  # every process
    checkpoint.save_model(saved, Path(out) / "final")
    dist.barrier()
    fresh_model, fresh_opt = make(shard=True)
    fresh = parts(fresh_model, fresh_opt, step=0)
    checkpoint.load_trainer(fresh, Path(out) / "checkpoint")
    step(plain, plain_opt), step(fresh_model, fresh_opt)
    after = full_weights(fresh_model)
    if rank == 0:
        ref = plain.state_dict()
        ok = all(torch.allclose(after[k], ref[k], atol=1e-4) for k in ref)
        say("trainer checkpoint", ok, fresh.state.step == 3, (Path(out) / "checkpoint/model/searchrl.json").exists())
        # the tied output head is written once, as a plain save writes it (gathered, it is a copy of its own)
        dirs = ("checkpoint/model", "final")
        once = ["lm_head.weight" not in load_file(f"{out}/{d}/model.safetensors") for d in dirs]
        say("head once", once)
    dist.barrier()
    dist.destroy_process_group()
    from searchrl.utils import hard_exit
    hard_exit()  # as the trainer ends: gloo's teardown at interpreter exit can abort a process whose work is done
    """
)


def test_sharded_weights_and_optimizer_state_round_trip(tmp_path: Path) -> None:
    script = tmp_path / "run.py"
    script.write_text(SCRIPT)
    # --standalone: the launcher binds a free port itself (no window for another program to take it)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(
        [*cmd, str(script), str(tmp_path / "ckpt")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=300)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        pytest.fail("a collective was left waiting")
    assert proc.returncode == 0, f"{out}\n{err[-3000:]}"
    lines = out.splitlines()
    assert "gathered True True" in lines and "elsewhere empty True" in lines and "resumed True" in lines, out
    assert "trainer checkpoint True True True" in lines and "head once [True, True]" in lines, out


def test_a_checkpoint_of_another_model_is_one_line_before_anything_loads(tmp_path: Path) -> None:
    """Missing or extra weights, or another shape, name the first mismatches; the model is left as it was."""
    import torch

    from searchrl.testing import tiny_model
    from searchrl.tuning import load_policy_weights

    model = tiny_model(seed=0)
    model.save_pretrained(tmp_path / "ok", safe_serialization=True)
    other = tiny_model(seed=1)
    load_policy_weights(other, tmp_path / "ok")  # the same model: loads (its tied head left out by the save)
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), other.parameters(), strict=True))
    from safetensors.torch import load_file, save_file

    weights = load_file(str(tmp_path / "ok" / "model.safetensors"))
    cases = {
        "missing": {k: v for k, v in weights.items() if "layers.0.mlp" not in k},
        "unexpected": {**weights, "model.extra.weight": torch.zeros(2)},
        "other shapes": {**weights, "model.norm.weight": torch.zeros(3)},
    }
    before = [p.clone() for p in other.parameters()]
    for name, bad in cases.items():
        (tmp_path / name).mkdir()
        save_file(bad, str(tmp_path / name / "model.safetensors"))
        with pytest.raises(ValueError) as err:
            load_policy_weights(other, tmp_path / name)
        msg = str(err.value)
        assert "\n" not in msg and "does not fit the model" in msg and "resume with the model" in msg, msg
        assert {"missing": "mlp", "unexpected": "model.extra.weight", "other shapes": "(3,) vs (64,)"}[name] in msg
    assert all(torch.equal(a, b) for a, b in zip(before, other.parameters(), strict=True))
