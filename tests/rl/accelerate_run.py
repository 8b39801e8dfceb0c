"""Run two RL steps of the tiny task with a deterministic scripted generator; save the final weights.

Executed by test_accelerate.py both as one process and under `accelerate launch --num_processes 2 --cpu`.
"""

import sys
from collections import Counter

import torch

from searchrl.config import load_config
from searchrl.data.records import QAExample
from searchrl.generation.fake import ScriptedGenerator
from searchrl.rl.trainer import Trainer
from searchrl.testing import LettersProtocol, letter_fraction_reward, tiny_model, tokenizer


def main(out: str, algo: str) -> None:
    seen: Counter[str] = Counter()

    def script(ctx: str) -> str:
        # The n-th sample of a prompt is the same whichever process draws it: groups never straddle processes.
        n = seen[ctx]
        seen[ctx] += 1
        return ["abc xyz", "ABC 123", "hello", "?!?!", "qwerty", "ZZZ z"][(n + len(ctx)) % 6]

    tok = tokenizer()
    questions = [QAExample(f"q{i}", f"write letters {i}", ["x"]) for i in range(8)]
    cfg = load_config(None, [
        f"algorithm.name={algo}", "algorithm.kl_coef=0.01", "algorithm.mini_batch_size=64", "training.lr=1e-2",
        "training.steps=2", "training.prompts_per_step=4", f"training.output_dir={out}", "training.save_every=0",
        "training.tensorboard=false", "rollout.group_size=4", "rollout.max_new_tokens=12", "rollout.max_turns=1",
        "rollout.force_answer=false",
    ])  # fmt: skip
    trainer = Trainer(cfg, tiny_model(), tok, LettersProtocol(), None, questions, reward_fn=letter_fraction_reward,
                      micro_batch_size=64, generator=ScriptedGenerator(tok, script))  # fmt: skip
    history = trainer.train()
    if trainer.acc.is_main_process:
        state = trainer.policy.state_dict()
        torch.save({k: v.detach().cpu() for k, v in state.items()}, f"{out}/weights.pt")
        torch.save(history, f"{out}/history.pt")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
