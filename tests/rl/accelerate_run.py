"""Run two RL steps of the tiny task with a deterministic scripted generator; save the final weights and history.

Executed by test_accelerate.py both as one process and under `accelerate launch --num_processes 2 --cpu`.
``mode``: ``same`` (every process sees the same kind of data), ``uneven`` (process 1 writes much longer rollouts, so
it has more micro-batches, and only process 0 has memorization sequences), ``dapo`` or ``dapo2`` (DAPO's
``drop_uniform_groups``, with 1 or 2 sampling rounds: only question 4's group is informative, so in some steps one
process has an informative group and the other none, and in others no process has one).
"""

import os
import re
import sys
from collections import Counter

import torch

from searchrl.config import load_config
from searchrl.data.records import QAExample
from searchrl.generation.fake import ScriptedGenerator
from searchrl.rl.trainer import Trainer
from searchrl.testing import LettersProtocol, letter_fraction_reward, tiny_model, tokenizer


def main(out: str, algo: str, mini_batch_size: str = "64", mode: str = "same") -> None:
    seen: Counter[str] = Counter()
    rank = int(os.environ.get("RANK", "0"))

    def script(ctx: str) -> str:
        # The n-th sample of a prompt is the same whichever process draws it: groups never straddle processes.
        n = seen[ctx]
        seen[ctx] += 1
        text = ["abc xyz", "ABC 123", "hello", "?!?!", "qwerty", "ZZZ z"][(n + len(ctx)) % 6]
        i = int(re.findall(r"letters (\d+)", ctx)[-1])
        if mode.startswith("dapo"):  # a question may come back in a later round: its samples depend on n % 4 only
            return ["abc xyz", "ABC 123", "hello", "?!?!"][n % 4] if i == 4 else "hello" * (i % 3 + 1)
        if mode == "uneven":
            return text * 6 if rank == 1 else text
        # Question i's completions are i % 3 + 1 copies long: the processes' shards then differ in length and score
        # statistics, so whitening per process would give other advantages than whitening the whole step.
        return text * (i % 3 + 1)

    tok = tokenizer()
    questions = [QAExample(f"q{i}", f"write letters {i}", ["x"]) for i in range(8)]
    extra = ["training.micro_batch_tokens=64", "memorization.coef=0.1"] if mode == "uneven" else []
    if mode.startswith("dapo"):
        extra = ["algorithm.drop_uniform_groups=true", f"algorithm.max_sampling_rounds={2 if mode == 'dapo2' else 1}"]
        # a process left without an informative group measures no KL, yet joins the adaptive controller's sum
        extra.append("algorithm.kl_ctrl=adaptive")
    cfg = load_config(
        None,
        [
            f"algorithm.name={algo}",
            "algorithm.kl_coef=0.01",
            f"algorithm.mini_batch_size={mini_batch_size}",
            "training.lr=1e-2",
            "training.steps=2",
            "training.prompts_per_step=4",
            f"training.output_dir={out}",
            "training.save_every=0",
            "training.tensorboard=false",
            "rollout.group_size=4",
            "rollout.max_new_tokens=48",
            "rollout.max_turns=1",
            "rollout.force_answer=false",
            "training.collective_timeout_s=4321",
            *extra,
        ],
    )

    def memorization_hook(step, trajs):  # only process 0 ever has sequences to memorize
        seqs = [(list(t.prompt_ids), list(t.response_ids), list(t.action_mask)) for t in trajs[:3]]
        return seqs if rank == 0 else []

    trainer = Trainer(
        cfg,
        tiny_model(),
        tok,
        LettersProtocol(),
        None,
        questions,
        reward_fn=letter_fraction_reward,
        micro_batch_size=64 if mode == "same" else 2,
        generator=ScriptedGenerator(tok, script),
        aux_nll_hook=memorization_hook if mode == "uneven" else None,
    )
    opt_steps = [0]
    step_fn = trainer.opt.step

    def counted_step(*a, **k):
        opt_steps[0] += 1
        return step_fn(*a, **k)

    trainer.opt.step = counted_step
    history = trainer.train()
    if trainer.acc.is_main_process:
        state = trainer.policy.state_dict()
        torch.save({k: v.detach().cpu() for k, v in state.items()}, f"{out}/weights.pt")
        info = {
            "history": history,
            "optimizer_steps": opt_steps[0],
            "processes": trainer.acc.num_processes,
            "distributed_type": str(trainer.acc.distributed_type),
            "collective_timeout_s": _collective_timeout(),
        }
        torch.save(info, f"{out}/history.pt")
    trainer.close(exit_process=True)


def _collective_timeout() -> float | None:
    """Seconds a collective of the process group waits for the others (None: one process, no group)."""
    if not torch.distributed.is_initialized():
        return None
    backend = torch.distributed.group.WORLD._get_backend(torch.device("cpu"))
    return backend.options._timeout.total_seconds()


if __name__ == "__main__":
    main(*sys.argv[1:])
