"""The RL loop end to end on a constructed task: it learns, it does not learn at lr 0, and it resumes exactly."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from searchrl.config import load_config
from searchrl.data.records import QAExample
from searchrl.rl.trainer import Trainer
from searchrl.testing import letter_fraction_reward, letters_trainer, tiny_model, tokenizer

QUESTIONS = [QAExample(f"q{i}", f"write letters {i}", ["x"]) for i in range(16)]


def make_trainer(
    tmp: Path, lr: float, algo: str = "grpo", steps: int = 30, questions: list[QAExample] = QUESTIONS, **extra: str
) -> Trainer:
    overrides = [
        f"algorithm.name={algo}",
        "algorithm.kl_coef=0.0",
        "algorithm.mini_batch_size=32",
        f"training.lr={lr}",
        f"training.steps={steps}",
        "training.prompts_per_step=4",
        f"training.output_dir={tmp}",
        "training.save_every=0",
        "training.tensorboard=false",
        "rollout.group_size=8",
        "rollout.max_new_tokens=12",
        "rollout.max_turns=1",
        "rollout.force_answer=false",
        "rollout.max_total_tokens=128",
        *[f"{k}={v}" for k, v in extra.items()],
    ]
    cfg = load_config(None, overrides)
    return letters_trainer(cfg, questions, micro_batch_size=32)


def _mean(xs):
    return sum(xs) / len(xs)


@pytest.mark.slow
@pytest.mark.parametrize("algo", ["grpo", "reinforce_pp", "rloo", "ppo", "dr_grpo", "gspo"])
def test_rl_raises_reward(tmp_path: Path, algo: str) -> None:
    learn = make_trainer(tmp_path / "learn", lr=3e-3, algo=algo, steps=25).train()
    r_learn = [m["reward/total"] for m in learn]
    start, end = _mean(r_learn[:5]), _mean(r_learn[-5:])
    assert end > start + 0.25, f"{algo}: reward did not rise: {start:.3f} -> {end:.3f}"
    assert (tmp_path / "learn" / "metrics.jsonl").exists() and (tmp_path / "learn" / "final" / "config.json").exists()


@pytest.mark.slow
def test_grpo_learns_with_uniform_groups_dropped(tmp_path: Path) -> None:
    """DAPO's filter: groups whose samples all score alike (here every even-numbered question's, rewarded with a
    constant) are left out of the update, and GRPO still learns on the others."""
    odd_means: list[float] = []

    def half_constant(trajs):
        scores, _ = letter_fraction_reward(trajs)
        odd = [int(t.question_id[1:]) % 2 == 1 for t in trajs]
        odd_means.append(_mean([s for s, o in zip(scores, odd, strict=True) if o] or [odd_means[-1]]))
        scores = [s if o else 0.5 for s, o in zip(scores, odd, strict=True)]
        return scores, {"reward/total": _mean(scores), "test/odd_groups": sum(odd) / 8}

    trainer = make_trainer(tmp_path / "drop", lr=3e-3, steps=25, **{"algorithm.drop_uniform_groups": "true"})
    trainer.reward_fn = half_constant
    hist = trainer.train()
    assert _mean(odd_means[-5:]) > _mean(odd_means[:5]) + 0.25, odd_means
    for m in hist:  # the update saw exactly the odd questions' groups (8 rows each), or one group when none is odd
        assert m["filter/informative_group_frac"] == m["test/odd_groups"] / 4
        assert m["filter/rows"] == 8 * (m["test/odd_groups"] or 1)
        assert m["grpo/zero_std_frac"] == (0.0 if m["test/odd_groups"] else 1.0)


@pytest.mark.slow
def test_dynamic_sampling_refills_until_the_step_holds_enough_informative_groups(tmp_path: Path) -> None:
    """DAPO's refill: a step samples further rounds of 4 fresh questions until it holds 4 informative groups (here
    the odd-numbered questions'; even ones score a constant) or 3 rounds are made, and updates on all of them."""
    calls: list[tuple[int, int]] = []  # (step, informative groups in the round: odd ones whose samples differ)
    refill = {"algorithm.drop_uniform_groups": "true", "algorithm.max_sampling_rounds": "3"}
    trainer = make_trainer(tmp_path / "refill", lr=1e-3, steps=6, **refill)

    def half_constant(trajs):
        scores, _ = letter_fraction_reward(trajs)
        odd = [int(t.question_id[1:]) % 2 == 1 for t in trajs]
        groups: dict[str, list[float]] = {}
        for t, s, o in zip(trajs, scores, odd, strict=True):
            if o:
                groups.setdefault(t.group_id, []).append(s)
        calls.append((trainer.state.step, sum(max(g) != min(g) for g in groups.values())))
        return [s if o else 0.5 for s, o in zip(scores, odd, strict=True)], {"reward/total": _mean(scores)}

    trainer.reward_fn = half_constant
    hist = trainer.train()
    assert len(calls) > len(hist), "no step needed a second round: the test does not exercise the refill"
    for m in hist:
        odd = [n for step, n in calls if step == m["step"] - 1]
        assert m["sampling/rounds"] == len(odd) <= 3
        assert all(sum(odd[:k]) < 4 for k in range(1, len(odd)))  # it went on only while short of 4
        assert sum(odd) >= 4 or len(odd) == 3  # and stopped when it had them, or at the last round
        assert m["filter/rows"] == 8 * (sum(odd) or 1)  # every informative group of every round was kept
    assert trainer.state.data_epoch * 16 + trainer.state.data_pos == 4 * len(calls)  # each round took fresh ones


def test_the_logged_reward_is_the_mean_of_the_scores_trained_on(tmp_path: Path) -> None:
    # a reward_fn of one's own need not report reward/total (the progress bar and metrics.jsonl show it)
    trainer = make_trainer(tmp_path, lr=1e-3, steps=1, **{"training.save_at_end": "false"})
    trainer.reward_fn = lambda trajs: ([1.0 if i % 4 == 0 else 0.0 for i in range(len(trajs))], {})
    (m,) = trainer.train()
    assert m["reward/total"] == pytest.approx(0.25)


@pytest.mark.slow
def test_same_run_at_lr0_does_not_learn(tmp_path: Path) -> None:
    """The control: the identical GRPO run with a learning rate too small to move fp32 weights (training.lr must be
    positive; the update path is shared by all algorithms)."""
    frozen = make_trainer(tmp_path / "frozen", lr=1e-12, algo="grpo", steps=25).train()
    r_frozen = [m["reward/total"] for m in frozen]
    assert abs(_mean(r_frozen[-5:]) - _mean(r_frozen[:5])) < 0.1, "lr=0 changed the reward"


@pytest.mark.slow
def test_resume_matches_straight_run(tmp_path: Path) -> None:
    straight = make_trainer(tmp_path / "a", lr=1e-3, steps=4).train()
    first = make_trainer(tmp_path / "b", lr=1e-3, steps=2).train()
    resumed = make_trainer(tmp_path / "b", lr=1e-3, steps=4).train(resume=True)
    assert [m["step"] for m in first + resumed] == [1, 2, 3, 4]
    for a, b in zip(straight[2:], resumed, strict=True):
        for key in ("reward/total", "rollout/response_len", "grad_norm"):
            assert a[key] == pytest.approx(b[key], rel=1e-5, abs=1e-7), key


def test_a_resume_refuses_training_questions_that_changed_since_the_checkpoint(tmp_path: Path) -> None:
    """The checkpoint's data position counts in a seeded order of the questions; with a data file edited in place
    (same settings) the resumed run went on silently from that position in another order of other questions."""
    from searchrl.config import ConfigError

    fast = {"rollout.group_size": "2", "rollout.max_new_tokens": "4"}
    make_trainer(tmp_path, lr=1e-3, steps=1, **fast).train()
    edited = [*QUESTIONS[:5], QAExample("q5", "write letters 5, edited", ["x"]), *QUESTIONS[6:]]
    for changed in (QUESTIONS[:12], edited):
        with pytest.raises(ConfigError, match=r"training questions differ from the checkpoint's \(\d+ now, 16 then"):
            make_trainer(tmp_path, lr=1e-3, steps=2, questions=changed, **fast).train(resume=True)
    resumed = make_trainer(tmp_path, lr=1e-3, steps=2, **fast)
    assert [m["step"] for m in resumed.train(resume=True)] == [2]
    assert resumed.state.questions.startswith("16:")  # the checkpoint's, kept


@pytest.mark.slow
def test_resume_writes_the_steps_after_the_checkpoint_once(tmp_path: Path) -> None:
    """A run stopped after its checkpoint (step 2) had logged step 3 and half a line of step 4: the resumed run's
    logs hold every step once, each line whole (before, step 3 twice and a line glued onto the cut one)."""
    import json

    out = tmp_path / "b"
    make_trainer(out, lr=1e-3, steps=2, **{"training.log_rollouts": 2}).train()
    with (out / "metrics.jsonl").open("a") as f:
        f.write(json.dumps({"step": 3, "reward/total": 9.0}) + "\n" + '{"step": 4, "rew')
    with (out / "rollouts.jsonl").open("a") as f:
        f.write(json.dumps({"step": 3, "question": "stale"}) + "\n")
    make_trainer(out, lr=1e-3, steps=4, **{"training.log_rollouts": 2}).train(resume=True)
    metrics = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == [1, 2, 3, 4] and 9.0 not in [m["reward/total"] for m in metrics]
    text = (out / "rollouts.jsonl").read_text()
    assert [json.loads(line)["step"] for line in text.splitlines()] == [1, 1, 2, 2, 3, 3, 4, 4]
    assert "stale" not in text
    protocol = make_trainer(out, lr=1e-3, steps=4).protocol.name  # the viewer cuts documents by it
    assert {json.loads(line)["trajectory"]["protocol"] for line in text.splitlines()} == {protocol}


def test_tensorboard_shows_each_step_once_after_a_resume(tmp_path: Path) -> None:
    """A run killed in step 4 after its checkpoint at step 2 had logged step 3 to TensorBoard too: the resumed run
    writes step 3 again, and TensorBoard hides the stopped run's (metrics.jsonl is cut the same way). Before, both
    runs' step 3 showed."""
    from tensorboard.backend.event_processing.event_multiplexer import EventMultiplexer

    fast = {"rollout.group_size": "2", "rollout.max_new_tokens": "4", "training.tensorboard": "true"}
    out = tmp_path / "run"
    stopped = make_trainer(out, lr=1e-3, steps=4, **{**fast, "training.save_every": "2"})
    real_step = stopped.train_step

    def step_then_kill():
        if stopped.state.step == 3:
            raise KeyboardInterrupt
        return real_step()

    stopped.train_step = step_then_kill
    with pytest.raises(KeyboardInterrupt):
        stopped.train()
    stopped._close()
    make_trainer(out, lr=1e-3, steps=4, **{**fast, "training.save_every": "2"}).train(resume=True)
    board = EventMultiplexer()
    board.AddRunsFromDirectory(str(out / "tb"))
    board.Reload()
    assert [e.step for e in board.Scalars(".", "reward/total")] == [1, 2, 3, 4]


@pytest.mark.slow
def test_resume_with_lora_restores_the_adapters_exactly(tmp_path: Path) -> None:
    lora = {"model.lora.r": "4", "model.lora.dropout": "0.0"}
    straight = make_trainer(tmp_path / "a", lr=1e-2, steps=4, **lora)
    hist_straight = straight.train()
    first = make_trainer(tmp_path / "b", lr=1e-2, steps=2, **lora)
    first.train()
    resumed = make_trainer(tmp_path / "b", lr=1e-2, steps=4, **lora)
    before = {n: p.detach().clone() for n, p in resumed.policy.named_parameters() if "lora_B" in n}
    resumed.load_checkpoint(tmp_path / "b" / "checkpoint")
    saved = {n: p for n, p in first.policy.named_parameters() if "lora_B" in n}
    assert max((saved[n] - before[n]).abs().max().item() for n in saved) > 1e-4  # the adapters did train
    for n, p in resumed.policy.named_parameters():
        if "lora_" in n:
            assert torch.equal(p, dict(first.policy.named_parameters())[n]), n
    hist_resumed = make_trainer(tmp_path / "b", lr=1e-2, steps=4, **lora).train(resume=True)
    for a, b in zip(hist_straight[2:], hist_resumed, strict=True):
        for key in ("reward/total", "rollout/response_len", "grad_norm"):
            assert a[key] == pytest.approx(b[key], rel=1e-5, abs=1e-7), key


class _OneDocRetriever:
    def search(self, queries, k):
        from searchrl.retrieval.base import Hit

        return [[Hit("d1", "Lyon", "Lyon is a city in France.", 1.0)] for _ in queries]


@pytest.mark.parametrize("critic_masked", [True, False])
def test_ppo_critic_mask_choice_runs_with_inserted_documents(tmp_path: Path, critic_masked: bool) -> None:
    """RAG-R1's code trains the critic on every response token (documents included); the default masks them."""
    from searchrl.generation.fake import ScriptedGenerator
    from searchrl.protocols import get_protocol

    def script(ctx: str) -> str:
        return "<answer> France </answer>" if "Lyon is a city" in ctx else "<search> lyon </search>"

    tok = tokenizer()
    cfg = load_config(
        None,
        [
            "algorithm.name=ppo",
            "algorithm.kl_coef=0.0",
            f"algorithm.critic_mask_observations={critic_masked}",
            "training.steps=1",
            "training.prompts_per_step=2",
            f"training.output_dir={tmp_path}",
            "training.save_every=0",
            "training.tensorboard=false",
            "rollout.max_turns=2",
            "rollout.max_total_tokens=1024",
            "training.weight_decay=0.01",
        ],
    )
    qs = [QAExample(f"q{i}", "Where is Lyon?", ["France"]) for i in range(2)]
    trainer = Trainer(
        cfg,
        tiny_model(),
        tok,
        get_protocol("search_r1"),
        _OneDocRetriever(),
        qs,
        generator=ScriptedGenerator(tok, script),
        micro_batch_size=1,
    )
    (m,) = trainer.train()
    traj = trainer.last_trajectories[0]
    assert 0 < sum(traj.action_mask) < len(traj.action_mask)  # documents were inserted
    assert m["rollout/searches"] == 1 and m["value/return_mean"] == m["value/return_mean"]  # finite
    # veRL's AdamW weight decay applies to the critic as to the policy
    assert {g["weight_decay"] for g in trainer.critic_opt.param_groups} == {0.01}
    assert {g["weight_decay"] for g in trainer.opt.param_groups} == {0.01}


def test_profile_step_writes_the_operator_tables_of_that_step_only(tmp_path: Path) -> None:
    make_trainer(tmp_path, lr=1e-3, steps=2, **{"training.profile_step": "2", "training.save_at_end": "false"}).train()
    assert [p.name for p in tmp_path.glob("profile_step*.txt")] == ["profile_step2.txt"]
    text = (tmp_path / "profile_step2.txt").read_text()
    for label in ("rollout", "score", "update", "host operators by self time", "aten::"):
        assert label in text, label


def test_profile_summary_counts_self_time_and_labelled_ranges() -> None:
    """Self time is an operator's time minus the operators nested in it on its thread; ranges and device work are
    listed apart."""
    from types import SimpleNamespace

    from searchrl.rl.profiling import summarise

    cpu, cuda = torch.autograd.DeviceType.CPU, torch.autograd.DeviceType.CUDA

    def ev(name, start, dur, thread=1, device=cpu, label=False):
        return SimpleNamespace(
            name=lambda: name,
            device_type=lambda: device,
            start_ns=lambda: start,
            duration_ns=lambda: dur,
            start_thread_id=lambda: thread,
            is_user_annotation=lambda: label,
        )

    events = [
        ev("update", 0, 10_000_000, label=True),
        ev("aten::linear", 0, 4_000_000),  # holds a matmul of 3 ms: 1 ms of its own
        ev("aten::mm", 0, 3_000_000),
        ev("aten::mm", 5_000_000, 2_000_000),
        ev("aten::mm", 0, 6_000_000, thread=2),  # another thread: not nested in the linear
        ev("gemm_kernel", 100, 2_500_000, device=cuda),
    ]
    text = summarise(events)
    lines = [line.split() for line in text.splitlines() if line.startswith(("aten", "gemm", "upd"))]
    rows = {line[0]: line[1:] for line in lines}
    assert rows["aten::mm"][0] == "11.0" and rows["aten::mm"][3] == "3"  # self ms, calls
    assert rows["aten::linear"][0] == "1.0" and rows["aten::linear"][2] == "4.0"  # self, total
    assert rows["update"][0] == "10.0" and rows["gemm_kernel"][0] == "2.5"


def test_a_final_model_cut_short_leaves_the_previous_one_whole(tmp_path: Path, monkeypatch) -> None:
    """``final`` is written beside and renamed into place: a stop mid-save never leaves a partial model there."""
    from types import SimpleNamespace

    from searchrl.rl import checkpoint

    final = tmp_path / "final"
    final.mkdir()
    (final / "model.safetensors").write_text("the previous model")

    def cut_short(model, tokenizer, path, weights=None):
        (path / "model.safetensors").write_text("half a")
        raise KeyboardInterrupt

    monkeypatch.setattr(checkpoint, "save_merged", cut_short)
    fake = SimpleNamespace(sharded=False, policy=None, tokenizer=None, acc=SimpleNamespace(is_main_process=True))
    with pytest.raises(KeyboardInterrupt):
        Trainer.save_model(fake, final)
    assert (final / "model.safetensors").read_text() == "the previous model"


def test_sigterm_saves_a_checkpoint_at_the_end_of_the_step_and_a_resume_goes_on(tmp_path: Path) -> None:
    """A cluster's preemption (SIGTERM) mid-step: the step finishes, the checkpoint is saved, the run ends with
    StopRequested (exit 143) naming the step; --resume then finishes the run."""
    import os
    import signal

    from searchrl.utils import StopRequested

    trainer = make_trainer(tmp_path / "run", lr=1e-3, steps=5)
    calls = []

    def preempted_in_step_2(trajs):
        calls.append(1)
        if len(calls) == 2:
            os.kill(os.getpid(), signal.SIGTERM)
        return letter_fraction_reward(trajs)

    trainer.reward_fn = preempted_in_step_2
    previous = signal.getsignal(signal.SIGTERM)
    with pytest.raises(
        StopRequested, match=r"stopped by SIGTERM at step 2 of 5, checkpoint in .*run/checkpoint"
    ) as err:
        trainer.train()
    assert err.value.code == 143 and signal.getsignal(signal.SIGTERM) == previous  # the handler is put back
    resumed = make_trainer(tmp_path / "run", lr=1e-3, steps=5)
    assert [m["step"] for m in resumed.train(resume=True)] == [3, 4, 5]  # the checkpoint was step 2's


def test_models_kept_every_n_steps_load_as_models(tmp_path: Path) -> None:
    from transformers import AutoModelForCausalLM

    make_trainer(tmp_path / "run", lr=1e-3, steps=4, **{"training.keep_models_every": "2"}).train()
    kept = sorted(p.name for p in (tmp_path / "run" / "models").iterdir())
    assert kept == ["step_2", "step_4"]
    assert AutoModelForCausalLM.from_pretrained(tmp_path / "run" / "models" / "step_2").num_parameters() > 0


def test_a_fresh_run_into_an_earlier_runs_directory_is_refused_unless_forced(tmp_path: Path) -> None:
    import json

    out = tmp_path / "run"
    make_trainer(out, lr=1e-3, steps=2, **{"training.save_at_end": "false"}).train()
    again = make_trainer(out, lr=1e-3, steps=1, **{"training.save_at_end": "false"})
    no_checkpoint = r"earlier run \(metrics.jsonl, rollouts.jsonl\); it saved no checkpoint to continue from: .*force"
    with pytest.raises(FileExistsError, match=no_checkpoint):
        again.train()
    assert again.train(force=True)[-1]["step"] == 1
    steps = [json.loads(line)["step"] for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1]  # the earlier run's rows were removed, not appended to
    assert len((out / "run_info.jsonl").read_text().splitlines()) == 1


def test_the_sampled_tokens_nll_estimates_the_entropy_at_no_cost(tmp_path: Path) -> None:
    """``entropy/sampled_nll``: the mean negative log-prob of the policy's own tokens, as the rollout sampled them
    (temperature 1, one on-policy update: the scored log-probs are the sampling ones); next to it, the exact entropy
    (``entropy_coef``) of a near-uniform tiny policy is close to its sampled estimate."""
    trainer = make_trainer(tmp_path, lr=1e-3, steps=1, **{"algorithm.entropy_coef": "0.001"})
    (m,) = trainer.train()
    lps = [lp for t in trainer.last_trajectories for lp, a in zip(t.logprobs, t.action_mask, strict=True) if a]
    assert m["entropy/sampled_nll"] == pytest.approx(-sum(lps) / len(lps), abs=1e-4)
    assert m["entropy/mean"] == pytest.approx(m["entropy/sampled_nll"], rel=0.2)


def test_the_logged_learning_rate_is_the_one_each_step_ran_at(tmp_path: Path) -> None:
    """With a 4-step warm-up the first step runs at a quarter of the rate, and its metrics row says so (the scheduler
    steps after the update; read after it, the row would hold the next step's rate)."""
    metrics = make_trainer(tmp_path, lr=1e-3, steps=2, **{"training.warmup_steps": "4"}).train()
    assert [m["lr"] for m in metrics] == pytest.approx([2.5e-4, 5e-4])


def test_truncated_importance_sampling_weighs_the_update_by_the_samplers_mismatch(tmp_path: Path) -> None:
    """``algorithm.tis_cap``: the step reports its weights; the policy's own fp32 weights sampled, so the sampler's
    log-probs match the recomputed ones and every weight is 1 (nothing capped)."""
    over = {"algorithm.tis_cap": "2.0", "algorithm.old_logprobs": "recompute"}
    (m,) = make_trainer(tmp_path / "tis", lr=1e-3, steps=1, **over).train()
    assert m["tis/weight_mean"] == pytest.approx(1.0, abs=1e-3) and m["tis/capped_frac"] == 0.0
    (plain,) = make_trainer(tmp_path / "plain", lr=1e-3, steps=1).train()
    assert "tis/weight_mean" not in plain


def test_adam_takes_the_configured_betas(tmp_path: Path) -> None:
    """training.adam_betas reaches the policy's and the critic's AdamW (OpenRLHF's 0.9, 0.95; veRL's 0.9, 0.999)."""
    trainer = make_trainer(tmp_path, lr=1e-3, algo="ppo", steps=1, **{"training.adam_betas": "[0.9,0.95]"})
    assert {g["betas"] for g in trainer.opt.param_groups} == {(0.9, 0.95)}
    assert {g["betas"] for g in trainer.critic_opt.param_groups} == {(0.9, 0.95)}
