"""One-step off-policy rollouts (training.off_policy_steps=1): the ratio's old log-probs are the behaviour snapshot's
(the weights the previous step started from), the run keeps the on-policy run's questions, steps, checkpoints and
metrics lines, and with the setting at 0 nothing changes."""

from __future__ import annotations

import copy
import json
import threading
from pathlib import Path

import pytest
import torch

from searchrl.config import ConfigError, load_config
from searchrl.data.records import QAExample
from searchrl.rl.async_rollout import behaviour_copy
from searchrl.rl.batch import TokenScorer, compute_logprobs
from searchrl.rl.trainer import Trainer
from searchrl.testing import LettersProtocol, letter_fraction_reward, letters_trainer, tiny_model, tokenizer

QUESTIONS = [QAExample(f"q{i}", f"write letters {i}", ["x"]) for i in range(16)]
OFF = {"training.off_policy_steps": "1"}


def make_trainer(tmp: Path, steps: int = 2, lr: float = 3e-3, eval_examples=None, **extra: str) -> Trainer:
    overrides = [
        "algorithm.kl_coef=0.0",
        "algorithm.mini_batch_size=32",
        f"training.lr={lr}",
        f"training.steps={steps}",
        "training.prompts_per_step=4",
        f"training.output_dir={tmp}",
        "training.save_every=0",
        "training.save_at_end=false",
        "training.tensorboard=false",
        "rollout.group_size=4",
        "rollout.max_new_tokens=10",
        "rollout.max_turns=1",
        "rollout.force_answer=false",
        "rollout.max_total_tokens=128",
        *[f"{k}={v}" for k, v in extra.items()],
    ]
    return letters_trainer(load_config(None, overrides), QUESTIONS, micro_batch_size=32, eval_examples=eval_examples)


def capture_steps(trainer: Trainer) -> list[dict]:
    """Each step's update batch and tensors, with the weights the step started from (recorded at the update)."""
    seen: list[dict] = []
    optimise = trainer._optimise

    def spy(step, sb, aux_seqs):
        weights = {k: v.detach().clone() for k, v in trainer.policy.state_dict().items()}
        seen.append({"step": step, "batch": sb.batch, "old": sb.tensors.old_logp_BT.clone(), "weights": weights})
        return optimise(step, sb, aux_seqs)

    trainer._optimise = spy
    return seen


def logprobs_under(weights: dict, batch, mask_BT: torch.Tensor) -> torch.Tensor:
    model = tiny_model()
    model.load_state_dict(weights)
    return compute_logprobs(TokenScorer(model.eval()), batch, mask_BT)


def without_times(history: list[dict]) -> list[dict]:
    return [{k: v for k, v in m.items() if not k.startswith("time/")} for m in history]


# ------------------------------------------------------------------------------------------------------- config
def test_off_policy_steps_is_0_or_1() -> None:
    assert load_config(None).training.off_policy_steps == 0
    assert load_config(None, ["training.off_policy_steps=1"]).training.off_policy_steps == 1
    with pytest.raises(ConfigError, match=r"training\.off_policy_steps.*0 or 1") as err:
        load_config(None, ["training.off_policy_steps=2"])
    assert "\n" not in str(err.value)


def test_off_policy_rejects_the_generate_backend() -> None:
    with pytest.raises(ConfigError, match=r"off_policy_steps=1 needs rollout.backend=hf or vllm"):
        load_config(None, ["training.off_policy_steps=1", "rollout.backend=hf_generate"])


def test_off_policy_runs_in_one_process(monkeypatch, tmp_path: Path) -> None:
    from accelerate import Accelerator

    monkeypatch.setattr(Accelerator, "num_processes", property(lambda self: 2))
    with pytest.raises(ConfigError, match=r"off_policy_steps=1 runs in one process, not 2.*off_policy_steps=0"):
        make_trainer(tmp_path, **OFF)


# ----------------------------------------------------------------------------------------------- the ratio
def test_old_logprobs_are_the_behaviour_snapshots(tmp_path: Path) -> None:
    """Step 2's batch was sampled by the weights step 1 started from, and its old log-probs are theirs: they equal
    those weights' log-probs of the sampled tokens and differ from step 2's starting weights' (the current policy)."""
    trainer = make_trainer(tmp_path, steps=2, **OFF)
    theta0 = {k: v.detach().clone() for k, v in trainer.policy.state_dict().items()}
    seen = capture_steps(trainer)
    hist = trainer.train()
    assert [m["rollout/staleness"] for m in hist] == [0.0, 1.0]
    assert all(m["time/rollout_wait_s"] >= 0 for m in hist)
    first, second = seen
    assert all(torch.equal(first["weights"][k], theta0[k]) for k in theta0)  # step 1 started from theta0
    mask = second["batch"].action_mask
    behaviour = logprobs_under(theta0, second["batch"], mask)
    current = logprobs_under(second["weights"], second["batch"], mask)
    assert (behaviour - current).abs().max() > 1e-3, "the update did not move the weights: the test cannot tell"
    torch.testing.assert_close(second["old"], behaviour, atol=2e-5, rtol=0)
    assert (second["old"] - current).abs().max() > 1e-3
    # the tokens were sampled by theta0 too: the generator's own log-probs are the behaviour's
    torch.testing.assert_close(
        torch.where(mask.bool(), second["batch"].rollout_logp, 0.0), behaviour, atol=1e-4, rtol=0
    )
    # step 1 had nothing to overlap: its batch is on-policy
    torch.testing.assert_close(first["old"], logprobs_under(theta0, first["batch"], first["batch"].action_mask))
    ratio = hist[1]["policy/ratio_mean"]
    assert ratio != 1.0 and hist[0]["policy/ratio_mean"] == pytest.approx(1.0, abs=1e-5)


def test_setting_0_is_the_on_policy_run(tmp_path: Path) -> None:
    """off_policy_steps=0 is the default run: no snapshot, no thread, the same metrics, and the ratio's old
    log-probs are the current policy's."""
    threads = {t.name for t in threading.enumerate()}
    default = make_trainer(tmp_path / "a").train()
    explicit = make_trainer(tmp_path / "b", **{"training.off_policy_steps": "0"})
    seen = capture_steps(explicit)
    hist = explicit.train()
    assert explicit.rollouts is None
    assert not any(t.name.startswith("searchrl-rollout") for t in threading.enumerate() if t.name not in threads)
    assert without_times(default) == without_times(hist)
    assert "rollout/staleness" not in hist[0] and "time/rollout_wait_s" not in hist[0]
    second = seen[1]
    torch.testing.assert_close(
        second["old"], logprobs_under(second["weights"], second["batch"], second["batch"].action_mask)
    )


# ------------------------------------------------------------------------------------------------ the run
@pytest.mark.slow
def test_off_policy_run_keeps_steps_questions_checkpoints_and_metrics_lines(tmp_path: Path) -> None:
    """The same questions per step, steps, metrics lines, evaluations and checkpoints as the on-policy run; a
    resumed run goes on from the checkpoint's data position, its first step on-policy."""
    asked: dict[str, list[list[str]]] = {"on": [], "off": []}

    def run(name: str, steps: int = 3, resume: bool = False, **extra: str) -> tuple[Trainer, list[dict]]:
        def reward(trajs):
            asked[name].append(sorted({t.group_id for t in trajs}))
            return letter_fraction_reward(trajs)

        save = {"training.save_every": "1", "training.eval_every": "2", "training.eval_limit": "2"}
        trainer = make_trainer(tmp_path / name, steps=steps, eval_examples=QUESTIONS[:2], **save, **extra)
        trainer.reward_fn = reward
        return trainer, trainer.train(resume=resume)

    on, hist_on = run("on")
    off, hist_off = run("off", **OFF)
    assert asked["on"] == asked["off"] and len(asked["off"]) == 3  # no rollout for a step past the last
    assert [m["step"] for m in hist_off] == [1, 2, 3]
    assert [m["rollout/staleness"] for m in hist_off] == [0.0, 1.0, 1.0]
    lines = {n: (tmp_path / n / "metrics.jsonl").read_text().splitlines() for n in ("on", "off")}
    assert len(lines["on"]) == len(lines["off"]) == 4  # the step-0 evaluation and three steps
    extra = {"rollout/staleness", "time/rollout_wait_s", "time/behaviour_logprob_s"}
    for x, y in zip(lines["on"], lines["off"], strict=True):  # the same keys, and the off-policy ones
        assert set(json.loads(y)) - set(json.loads(x)) <= extra and set(json.loads(x)) <= set(json.loads(y))
    assert "eval/em" in hist_off[1] and "eval/em" in hist_off[2]
    assert (tmp_path / "off" / "checkpoint" / "trainer_state.pt").exists()
    assert vars(on.state) == vars(off.state)  # the same data position and step count
    assert not any(t.name.startswith("searchrl-rollout") for t in threading.enumerate())  # the thread ended

    # resume: 2 more steps from the 3-step checkpoint; the first rolls out on-policy, the next one is prefetched
    asked["off"] = []
    _, resumed = run("off", steps=5, resume=True, **OFF)
    assert [m["step"] for m in resumed] == [4, 5]
    assert [m["rollout/staleness"] for m in resumed] == [0.0, 1.0]
    asked["on"] = []
    run("on", steps=5, resume=True)
    assert asked["off"] == asked["on"]


def test_dynamic_sampling_refills_in_the_background(tmp_path: Path) -> None:
    """DAPO's refill with off-policy rollouts: the background thread samples further rounds of fresh questions
    until the step holds 4 informative groups (odd questions; even ones score a constant) or 3 rounds are made."""
    rounds: dict[int, int] = {}

    def half_constant(trajs):
        scores, m = letter_fraction_reward(trajs)
        step = int(trajs[0].group_id[1:].split("/")[0].split("r")[0])
        rounds[step] = rounds.get(step, 0) + 1
        return [s if int(t.question_id[1:]) % 2 else 0.5 for s, t in zip(scores, trajs, strict=True)], m

    refill = {"algorithm.drop_uniform_groups": "true", "algorithm.max_sampling_rounds": "3"}
    trainer = make_trainer(tmp_path, steps=3, **refill, **OFF)
    trainer.reward_fn = half_constant
    hist = trainer.train()
    assert [m["sampling/rounds"] for m in hist] == [rounds[s] for s in range(3)]
    assert sum(rounds.values()) > 3, "no step needed a second round: the test does not exercise the refill"
    assert trainer.state.data_epoch * 16 + trainer.state.data_pos == 4 * sum(rounds.values())


def test_ppo_and_an_external_generator_off_policy(tmp_path: Path) -> None:
    """PPO's critic values and the KL reference are computed at update time; a generator with its own weights (here
    a scripted one) serves the background rollouts."""
    from searchrl.generation.fake import ScriptedGenerator

    tok = tokenizer()
    cfg = load_config(
        None,
        [
            "algorithm.name=ppo",
            "algorithm.kl_coef=0.01",
            "training.steps=2",
            "training.prompts_per_step=2",
            f"training.output_dir={tmp_path}",
            "training.save_every=0",
            "training.save_at_end=false",
            "training.tensorboard=false",
            "training.off_policy_steps=1",
            "rollout.max_turns=1",
        ],
    )
    trainer = Trainer(
        cfg,
        tiny_model(),
        tok,
        LettersProtocol(),
        None,
        QUESTIONS[:4],
        reward_fn=letter_fraction_reward,
        generator=ScriptedGenerator(tok, lambda ctx: "<answer> xx </answer>"),
        micro_batch_size=4,
    )
    assert trainer.rollouts is not None and not trainer.rollouts.own_generator
    hist = trainer.train()
    assert [m["rollout/staleness"] for m in hist] == [0.0, 1.0]
    assert all(m["value/return_mean"] == m["value/return_mean"] and "kl/mean" in m for m in hist)


def test_lora_snapshot_shares_the_frozen_base_and_copies_the_adapters(tmp_path: Path) -> None:
    lora = {"model.lora.r": "4", "model.lora.dropout": "0.0"}
    trainer = make_trainer(tmp_path, steps=2, lr=1e-2, **lora, **OFF)
    snap, policy = trainer.rollouts.snapshot, trainer.policy
    pairs = list(zip(snap.named_parameters(), policy.named_parameters(), strict=True))
    assert all((s is p) == (not p.requires_grad) for (_, s), (_, p) in pairs)
    assert any("lora_" in n for (n, _), _ in pairs) and not any(s.requires_grad for s in snap.parameters())
    adapters0 = {n: p.detach().clone() for n, p in policy.named_parameters() if p.requires_grad}
    seen = capture_steps(trainer)
    trainer.train()
    second = seen[1]
    snap_now = {n: p for n, p in trainer.rollouts.snapshot.named_parameters() if n in adapters0}
    # step 2's batch came from the adapters step 1 started from (the snapshot still holds them), not step 2's
    assert all(torch.equal(snap_now[n], adapters0[n]) for n in adapters0)
    assert max((second["weights"][n] - adapters0[n]).abs().max().item() for n in adapters0) > 1e-4
    behaviour = copy.deepcopy(policy)
    with torch.no_grad():
        for n, p in behaviour.named_parameters():
            if n in adapters0:
                p.copy_(adapters0[n])
    old = compute_logprobs(TokenScorer(behaviour.eval()), second["batch"], second["batch"].action_mask)
    torch.testing.assert_close(second["old"], old, atol=2e-5, rtol=0)


def test_behaviour_copy_of_a_full_model_owns_every_weight() -> None:
    model = tiny_model()
    snap = behaviour_copy(model)
    assert not snap.training and not any(p.requires_grad for p in snap.parameters())
    assert all(s is not p and torch.equal(s, p) for s, p in zip(snap.parameters(), model.parameters(), strict=True))
    assert snap.get_input_embeddings().weight is snap.get_output_embeddings().weight  # tied weights stay tied


def hold_the_prefetched_rollout(trainer: Trainer) -> tuple[list[str], list[bool], threading.Event]:
    """Step 2's rollout (made in the background while step 1 updates) decodes only once the run is stopping
    (``rollouts.stopping``), and step 1's update starts only once that rollout has begun. Returns the steps whose
    rollouts were rewarded, what the held rollout saw, and an event set when its decoding returned."""
    rollouts = trainer.rollouts
    assert rollouts is not None and rollouts.generator is not None
    generate, calls, began, decoded = rollouts.generator.generate, [], threading.Event(), threading.Event()
    rewarded: list[str] = []
    released: list[bool] = []

    def held(prompts, params):
        calls.append(1)
        if len(calls) == 2:  # step 2's rollout (one turn each)
            began.set()
            try:
                released.append(rollouts.stopping.wait())
            finally:
                decoded.set()
        return generate(prompts, params)

    def reward(trajs):
        rewarded.append(trajs[0].group_id.split("/")[0])
        return letter_fraction_reward(trajs)

    optimise = trainer._optimise

    def after_the_rollout_began(step, sb, aux_seqs):
        began.wait()
        return optimise(step, sb, aux_seqs)

    rollouts.generator.generate, trainer.reward_fn, trainer._optimise = held, reward, after_the_rollout_began
    return rewarded, released, decoded


def rollout_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("searchrl-rollout")]


def test_a_sigterm_stop_drops_the_prefetched_rollout_rather_than_finish_it(tmp_path: Path) -> None:
    """A cluster's SIGTERM during step 1: the step ends and its checkpoint is saved while step 2's rollout runs in the
    background; the stop then drops that rollout at its next turn (never rewarded) instead of waiting for it to
    finish, and a resume rolls step 2 out again."""
    import os
    import signal

    from searchrl.utils import StopRequested

    trainer = make_trainer(tmp_path / "run", steps=3, **OFF)
    rewarded, released, _ = hold_the_prefetched_rollout(trainer)
    reward = trainer.reward_fn

    def preempted(trajs):
        if not rewarded:
            os.kill(os.getpid(), signal.SIGTERM)  # deferred to the end of step 1
        return reward(trajs)

    trainer.reward_fn = preempted
    with pytest.raises(StopRequested, match="stopped by SIGTERM at step 1 of 3"):
        trainer.train()
    assert released == [True]  # step 2's rollout decoded only once the run was stopping ...
    assert rewarded == ["s0"] and not rollout_threads()  # ... and went no further: the thread has ended
    resumed = make_trainer(tmp_path / "run", steps=3, **OFF)
    assert [m["rollout/staleness"] for m in resumed.train(resume=True)] == [0.0, 1.0]  # steps 2 and 3


def test_ctrl_c_drops_the_rollout_in_flight_without_waiting_for_it(tmp_path: Path) -> None:
    """Ctrl-C during step 1's update, step 2's rollout in flight: the KeyboardInterrupt reaches the caller at once,
    and the background rollout stops at its next turn (never rewarded), its thread ending without a close()."""
    trainer = make_trainer(tmp_path, steps=3, **OFF)
    rewarded, released, decoded = hold_the_prefetched_rollout(trainer)
    optimise = trainer._optimise

    def interrupted(step, sb, aux_seqs):
        optimise(step, sb, aux_seqs)  # waits until step 2's rollout has begun
        raise KeyboardInterrupt

    trainer._optimise = interrupted
    with pytest.raises(KeyboardInterrupt):
        trainer.train()
    decoded.wait()
    assert released == [True]  # the interrupted run told the rollout in flight to stop
    for thread in rollout_threads():
        thread.join()  # ends with its rollout: no one waits for it in the trainer
    assert rewarded == ["s0"]
