"""What the RL step skips and reuses: old log-probs from the rollout, no reference pass without KL, weight pushes
into a separate generation engine, and the backend choice."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch

from searchrl.config import load_config
from searchrl.data.records import QAExample
from searchrl.generation.base import Generator
from searchrl.generation.hf import HFGenerateGenerator, HFGenerator
from searchrl.rl.batch import collate_trajectories, score_tokens
from searchrl.rl.trainer import Trainer
from searchrl.testing import (
    EchoRetriever,
    LettersProtocol,
    LetterStopProtocol,
    letter_fraction_reward,
    letters_trainer,
    tiny_model,
    tokenizer,
)

QUESTIONS = [QAExample(f"q{i}", f"write letters {i}", ["x"]) for i in range(8)]


def make(tmp: Path, *extra: str, generator: Generator | None = None, protocol=None, retriever=None) -> Trainer:
    cfg = load_config(
        None,
        [
            "algorithm.name=grpo",
            "training.lr=1e-3",
            "training.prompts_per_step=2",
            f"training.output_dir={tmp}",
            "training.save_every=0",
            "training.tensorboard=false",
            "rollout.group_size=4",
            "rollout.max_new_tokens=10",
            "rollout.max_turns=1",
            "rollout.force_answer=false",
            "rollout.max_total_tokens=256",
            *extra,
        ],
    )
    return Trainer(
        cfg,
        tiny_model(),
        tokenizer(),
        protocol or LettersProtocol(),
        retriever,
        QUESTIONS,
        reward_fn=letter_fraction_reward,
        generator=generator,
    )


def test_rollout_logprobs_match_a_recomputation(tmp_path: Path) -> None:
    """Multi-turn rollouts (documents inserted, cached prefixes reused): the generator's log-probs of the policy's
    tokens equal a fresh forward pass to 1e-4, so one on-policy update can use them as the old log-probs."""
    trainer = make(
        tmp_path,
        "rollout.max_turns=3",
        "rollout.max_new_tokens=8",
        protocol=LetterStopProtocol(),
        retriever=EchoRetriever(),
    )
    trajs = trainer.engine.run(QUESTIONS[:4], group_size=4, temperature=1.0, seed=0)
    assert sum(t.n_searches for t in trajs) >= 4 and trainer.generator.stats["reused_tokens"] > 0
    batch = collate_trajectories(trajs, trainer._pad)
    mask = batch.action_mask
    assert 0 < int(mask.sum()) < int(batch.response_mask.sum())  # policy and inserted tokens both present
    recomputed = trainer._logprobs(trainer.acc.unwrap_model(trainer.model), batch, mask)
    diff = (recomputed - batch.rollout_logp).abs()[mask.bool()]
    assert float(diff.max()) < 1e-4


def test_recomputed_old_logprobs_of_a_lora_policy_with_dropout_are_the_samplers(tmp_path: Path) -> None:
    """The rollout samples with dropout off (eval mode); the scoring passes of old log-probs did not switch it off, so
    a LoRA adapter's dropout (0.05 by default) made them noisy: a one-update step's ratio ranged over 0.95-1.07."""
    trainer = make(tmp_path, "model.lora.r=4", "model.lora.dropout=0.5", "training.lr=2e-2", "algorithm.kl_coef=0.01")
    trainer.train(steps=2)  # the adapters' B matrices start at 0, where dropout changes nothing
    trajs = trainer.engine.run(QUESTIONS[:4], group_size=4, temperature=1.0, seed=0)
    batch = collate_trajectories(trajs, trainer._pad)
    mask = batch.action_mask
    assert trainer.policy.training
    scorer = trainer.acc.unwrap_model(trainer.model)
    recomputed = trainer._logprobs(scorer, batch, mask)
    assert float((recomputed - batch.rollout_logp).abs()[mask.bool()].max()) < 1e-4
    # every module's own mode is back after the scoring passes: the policy trains, its dropout on
    assert trainer.policy.training and all(m.training for m in trainer.policy.modules())
    with torch.no_grad():
        noisy = [score_tokens(scorer, batch, mask)[0] for _ in range(2)]
    assert float((noisy[0] - noisy[1]).abs().max()) > 1e-3  # the training forward does use the dropout


@pytest.mark.parametrize(
    ("extra", "passes"),
    [
        (("algorithm.kl_coef=0.0", "algorithm.mini_batch_size=8"), 0),  # one update: old from the rollout, no ref
        (("algorithm.kl_coef=0.01", "algorithm.mini_batch_size=8"), 1),  # the reference pass only
        (("algorithm.kl_coef=0.0", "algorithm.mini_batch_size=4"), 1),  # two updates: old log-probs recomputed
        (("algorithm.kl_coef=0.0", "algorithm.old_logprobs=recompute"), 1),
        # the masking ablation trains on retrieved tokens, whose log-probs the rollout does not have
        (("algorithm.kl_coef=0.0", "algorithm.mini_batch_size=8", "algorithm.mask_observations=false"), 1),
        # bf16 (the placement's precision; one accelerate state per process keeps the test in fp32 arithmetic), one
        # update: the update's own forward, detached, is the old policy's, with no pass of its own
        (("algorithm.kl_coef=0.0", "algorithm.mini_batch_size=8", "bf16"), 0),
        (("algorithm.kl_coef=0.0", "algorithm.mini_batch_size=4", "bf16"), 1),
        (("algorithm.kl_coef=0.0", "algorithm.mini_batch_size=8", "algorithm.kl_in_reward=true", "bf16"), 1),
    ],
)
def test_scoring_passes_are_only_the_needed_ones(tmp_path: Path, extra, passes: int, monkeypatch) -> None:
    from searchrl.device import Placement

    trainer = make(tmp_path, *(e for e in extra if e != "bf16"))
    if "bf16" in extra:
        trainer.place = Placement(trainer.place.device, "bf16")
    calls = []
    orig = trainer._logprobs
    monkeypatch.setattr(trainer, "_logprobs", lambda *a: calls.append(1) or orig(*a))
    m = trainer.train_step()
    assert len(calls) == passes
    assert (trainer.ref is None) == ("algorithm.kl_coef=0.0" in extra)
    # positions computed are counted per phase (the peer benchmark's "executed" FLOPs) and add up
    assert (m.get("tokens/scored_logprob", 0.0) > 0) == (passes > 0)
    assert m["tokens/scored_update"] > 0
    assert m["tokens/scored_padded"] == m.get("tokens/scored_logprob", 0.0) + m["tokens/scored_update"]
    assert m["loss/policy_total"] == m["loss/policy_total"]


def test_one_update_from_rollout_logprobs_equals_recomputed(tmp_path: Path) -> None:
    """Same step, old log-probs from the rollout vs recomputed: the same loss and gradient (to float tolerance)."""
    a = make(tmp_path / "a", "algorithm.kl_coef=0.0", "algorithm.mini_batch_size=8")
    b = make(
        tmp_path / "b", "algorithm.kl_coef=0.0", "algorithm.mini_batch_size=8", "algorithm.old_logprobs=recompute"
    )
    ma, mb = a.train_step(), b.train_step()
    for key in ("loss/policy_total", "grad_norm", "reward/total"):
        assert ma[key] == pytest.approx(mb[key], rel=1e-4, abs=1e-7), key


def test_one_update_from_its_own_detached_logprobs_equals_recomputed(tmp_path: Path) -> None:
    """``old_logprobs: current`` (bf16's default for one update a step): the update's own forward, detached, as the
    old policy's gives the loss and gradient of a recomputation; with two updates a step it is refused."""
    a = make(tmp_path / "a", "algorithm.kl_coef=0.0", "algorithm.mini_batch_size=8", "algorithm.old_logprobs=current")
    b = make(
        tmp_path / "b", "algorithm.kl_coef=0.0", "algorithm.mini_batch_size=8", "algorithm.old_logprobs=recompute"
    )
    ma, mb = a.train_step(), b.train_step()
    for key in ("loss/policy_total", "grad_norm", "reward/total"):
        assert ma[key] == pytest.approx(mb[key], rel=1e-4, abs=1e-7), key
    c = make(tmp_path / "c", "algorithm.mini_batch_size=4", "algorithm.old_logprobs=current")
    with pytest.raises(ValueError, match="old_logprobs=current needs one update"):
        c.train_step()


class VersionedEngine(Generator):
    """A stand-in for vLLM: its own copy of the model, refreshed only through load_weights; every generate call
    records the weight version it ran with and checks those weights equal the policy's."""

    def __init__(self, model, tokenizer, policy_ref: list) -> None:
        self.copy = copy.deepcopy(model)
        self.inner = HFGenerator(self.copy, tokenizer)
        self.tokenizer = tokenizer
        self.version = 0
        self.used: list[int] = []
        self.policy_ref = policy_ref

    def load_weights(self, state_dict: dict) -> None:
        self.copy.load_state_dict(state_dict)
        self.version += 1

    def generate(self, prompts, params):
        policy = self.policy_ref[0]
        same = all(torch.equal(p, q) for p, q in zip(policy.parameters(), self.copy.parameters(), strict=True))
        self.used.append(self.version if same else -1)
        return self.inner.generate(prompts, params)


def test_separate_engine_always_generates_with_the_latest_weights(tmp_path: Path) -> None:
    ref: list = []
    engine = VersionedEngine(tiny_model(), tokenizer(), ref)
    trainer = make(tmp_path, "algorithm.kl_coef=0.0", "algorithm.mini_batch_size=4", generator=engine)  # 2 opt steps
    ref.append(trainer.policy)
    for _ in range(3):
        trainer.train_step()
    assert engine.used == [0, 1, 2]  # one push per rollout that follows optimizer steps, never stale (-1)
    assert trainer._weights_version == 6
    trainer.eval_examples = QUESTIONS[:2]
    trainer.evaluate()  # the held-out rollouts too run on the latest weights
    assert engine.used[3:] and set(engine.used[3:]) == {3}


def test_backend_chooses_the_generator(tmp_path: Path) -> None:
    assert isinstance(make(tmp_path / "a").generator, HFGenerator)
    assert isinstance(make(tmp_path / "b", "rollout.backend=hf_generate").generator, HFGenerateGenerator)
    with pytest.raises(ValueError, match="vllm"):
        make(tmp_path / "c", "rollout.backend=vllm")


def test_held_out_evaluation_at_checkpoints(tmp_path: Path) -> None:
    """eval_every: a greedy held-out evaluation before training, every k steps and at the end, logged and saved."""
    import json

    cfg = load_config(
        None,
        [
            "training.steps=3",
            "training.eval_every=2",
            "training.prompts_per_step=2",
            f"training.output_dir={tmp_path}",
            "training.save_every=0",
            "training.tensorboard=false",
            "rollout.group_size=2",
            "rollout.max_new_tokens=6",
            "rollout.max_turns=1",
            "rollout.force_answer=false",
            "algorithm.kl_coef=0.0",
        ],
    )
    held = [QAExample(f"h{i}", f"held {i}", ["x"]) for i in range(3)]
    trainer = letters_trainer(cfg, QUESTIONS, eval_examples=held)
    trainer.train()
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if "eval/em" in r] == [0, 2, 3]
    assert all(0.0 <= r["eval/well_formed"] <= 1.0 for r in rows if "eval/em" in r)
    assert sorted(p.name for p in (tmp_path / "evals").iterdir()) == ["step_0.jsonl", "step_2.jsonl", "step_3.jsonl"]
    assert len((tmp_path / "evals" / "step_3.jsonl").read_text().splitlines()) == 3
    saved = [json.loads(line) for line in (tmp_path / "evals" / "step_2.jsonl").read_text().splitlines()]
    assert {r["step"] for r in saved} == {2}  # the viewer sorts held-out pages by it


@pytest.mark.slow
def test_compiled_layers_train_as_the_plain_ones(tmp_path: Path) -> None:
    """``training.compile_layers``: the policy's decoder layers run through torch.compile (the rollout's prefill and
    the update alike) and the step's loss, gradient norm and rewards are the plain layers' to float tolerance."""
    a = make(tmp_path / "a", "algorithm.kl_coef=0.0", "algorithm.mini_batch_size=8", "training.compile_layers=true")
    b = make(tmp_path / "b", "algorithm.kl_coef=0.0", "algorithm.mini_batch_size=8")
    assert all(layer._compiled_call_impl is not None for layer in a.policy.model.layers)
    assert all(layer._compiled_call_impl is None for layer in b.policy.model.layers)
    ma, mb = a.train_step(), b.train_step()
    for key in ("loss/policy_total", "grad_norm", "reward/total"):
        assert ma[key] == pytest.approx(mb[key], rel=1e-4, abs=1e-6), key


def test_the_adaptive_kl_coefficient_moves_on_the_kl_of_all_processes(tmp_path: Path, monkeypatch) -> None:
    """Each process measures the KL of its own rows; with one process's KL alone the coefficients would drift
    apart. Here a second process measured 0.2 beside this one's 0.0: their mean, 0.1, is the target: no change."""
    trainer = make(tmp_path, "algorithm.kl_coef=0.01", "algorithm.kl_ctrl=adaptive", "algorithm.kl_target=0.1")
    other = [torch.tensor([0.2, 1.0], dtype=torch.float64)]  # the other process's (KL sum, processes that measured)
    monkeypatch.setattr(trainer.passes, "sum_across", lambda t: t + other[0][: len(t)])
    monkeypatch.setattr(type(trainer.acc), "num_processes", property(lambda self: 2))
    trainer._update_kl({"kl/mean": 0.0}, 8)
    assert trainer.kl_ctrl.value == trainer.state.kl_coef == 0.01
    trainer._update_kl({"kl/mean": 0.3}, 8)  # mean 0.25: above the target, the coefficient grows
    grown = trainer.kl_ctrl.value
    assert grown > 0.01
    # this process measured no KL (drop_uniform_groups left its rows out of the loss), the other 0.3: it still takes
    # part in the sum (the other's collective would wait for it) and moves as the other does
    other[0] = torch.tensor([0.3, 1.0], dtype=torch.float64)
    trainer._update_kl({}, 8)
    assert trainer.kl_ctrl.value == pytest.approx(grown * (1 + 0.2 * 8 / 10000))


def test_a_step_whose_prompts_fill_the_length_cap_trains_on_nothing_without_failing(tmp_path: Path) -> None:
    """Every prompt at rollout.max_total_tokens: no response token, so no counted token in the mini-batch."""
    trainer = make(tmp_path, "rollout.max_total_tokens=4", "algorithm.kl_coef=0.0", "algorithm.mini_batch_size=8")
    m = trainer.train_step()
    assert m["tokens/response"] == 0.0 and m["loss/policy_total"] == 0.0


def test_fsdp_over_several_processes_needs_an_engine_with_its_own_weights(tmp_path: Path, monkeypatch) -> None:
    """Each process's in-process decode loop would gather the sharded weights a different number of times."""
    from accelerate import Accelerator

    from searchrl.config import ConfigError
    from searchrl.rl import trainer as trainer_module

    monkeypatch.setattr(Accelerator, "num_processes", property(lambda self: 2))
    monkeypatch.setattr(trainer_module, "sharded", lambda model: True)
    with pytest.raises(ConfigError, match=r"FSDP over several processes needs rollout\.backend=vllm"):
        make(tmp_path)
    ref: list = []
    engine = VersionedEngine(tiny_model(), tokenizer(), ref)
    assert make(tmp_path, generator=engine).sharded  # an engine with its own weights: accepted
    with pytest.raises(ConfigError, match="and no model.lora"):
        make(tmp_path, "model.lora.r=4", generator=engine)
