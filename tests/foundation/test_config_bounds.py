"""Config values out of range fail at load time, and the message blames the layer that set them."""

from __future__ import annotations

from pathlib import Path

import pytest

from searchrl.config import ConfigError, load_config


@pytest.mark.parametrize(
    ("override", "says"),
    [
        ("training.steps=0", "greater than or equal to 1"),
        ("training.steps=-3", "greater than or equal to 1"),
        ("training.lr=0", "greater than 0"),
        ("training.lr=-1e-6", "greater than 0"),
        ("retrieval.topk=0", "greater than or equal to 1"),
        ("rollout.max_turns=0", "greater than or equal to 1"),
        ("rollout.temperature=-0.5", "greater than or equal to 0"),
        ("rollout.top_p=0", "greater than 0"),  # a negative one made the sampler pick past the vocabulary
        ("rollout.top_p=1.5", "less than or equal to 1"),
        ("rollout.max_new_tokens=0", "greater than or equal to 1"),
        ("memorization.max_new_tokens=0", "greater than or equal to 1"),
        ("memorization.temperature=-1", "greater than or equal to 0"),
        ("sft.batch_size=0", "greater than or equal to 1"),  # divided by: a ZeroDivisionError after the model loads
        ("sft.epochs=0", "greater than or equal to 1"),  # "SFT done: 0 steps" and the untrained model saved
        ("sft.lr=-1", "greater than 0"),
        ("sft.warmup_steps=-3", "greater than or equal to 0"),
        ("sft.max_length=0", "greater than or equal to 1"),
        ("sft.limit=-1", "greater than or equal to 1"),  # a slice [:-1]: all but the last example
        ("sft.val_fraction=1", "less than 1"),
        ("evaluation.limit=-1", "greater than or equal to 1"),
        ("evaluation.limit=0", "greater than or equal to 1"),
        ("data.train_limit=0", "greater than or equal to 1"),
        ("training.eval_limit=0", "greater than or equal to 1"),
        ("training.critic_lr=0", "greater than 0"),
        ("algorithm.ppo_epochs=0", "greater than or equal to 1"),
        ("algorithm.kl_coef=-1", "greater than or equal to 0"),
        ("algorithm.gamma=1.5", "less than or equal to 1"),
        ("algorithm.lam=-0.1", "greater than or equal to 0"),
        # these passed every check before: a negative clip norm flips the gradients (gradient ascent), 0 zeros them
        ("training.max_grad_norm=-1", "greater than 0"),
        ("training.max_grad_norm=0", "greater than 0"),
        ("training.weight_decay=-0.1", "greater than or equal to 0"),  # AdamW's error, after the model loaded
        ("rollout.top_p=-1", "greater than 0"),  # every token dropped: sampling from a zero mass
        ("rollout.max_searches=-1", "greater than or equal to 0"),
        ("rollout.max_obs_tokens=0", "greater than or equal to 1"),
        ("rollout.max_total_tokens=0", "greater than or equal to 1"),
        ("rollout.max_queries_per_call=0", "greater than or equal to 1"),
        ("training.save_every=-1", "greater than or equal to 0"),
        ("training.eval_every=-1", "greater than or equal to 0"),
        ("training.log_rollouts=-1", "greater than or equal to 0"),
        ("memorization.coef=-0.1", "greater than or equal to 0"),  # would push the policy away from its paths
        ("evaluation.temperature=-1", "greater than or equal to 0"),
        ("evaluation.batch_size=0", "greater than or equal to 1"),
        ("evaluation.max_new_tokens=0", "greater than or equal to 1"),
        ("evaluation.bootstrap_resamples=-1", "greater than or equal to 0"),
    ],
)
def test_out_of_range_override_is_blamed_on_the_override(override: str, says: str) -> None:
    with pytest.raises(ConfigError) as err:
        load_config("multihop_cpu", [override])
    msg = str(err.value)
    assert msg.startswith(f"command-line override '{override}': {override.split('=')[0]}: "), msg
    assert says in msg and "multihop_cpu.yaml" not in msg  # the recipe file did nothing wrong


def test_greedy_temperature_and_one_turn_are_allowed() -> None:
    cfg = load_config("multihop_cpu", ["rollout.temperature=0", "rollout.max_turns=1", "retrieval.topk=1"])
    assert (cfg.rollout.temperature, cfg.rollout.max_turns, cfg.retrieval.topk) == (0.0, 1, 1)


def test_bad_value_in_the_recipe_file_is_blamed_on_the_file(tmp_path: Path) -> None:
    recipe = tmp_path / "mine.yaml"
    recipe.write_text("training: {steps: 0}\n")
    with pytest.raises(ConfigError, match=rf"^{tmp_path}/mine\.yaml: training\.steps: "):
        load_config(recipe, ["training.lr=1e-5"])


def test_bad_value_from_a_profile_is_blamed_on_the_profile(tmp_path: Path) -> None:
    profile = tmp_path / "tiny.yaml"
    profile.write_text("all: {retrieval: {topk: 0}}\n")
    with pytest.raises(ConfigError, match=rf"^profile {tmp_path}/tiny\.yaml: retrieval\.topk: "):
        load_config("demo", [], profile)


def test_world_comparison_shares_sum_to_at_most_one() -> None:
    cfg = load_config("multihop_cpu", ["data.world.yes_no=0.4", "data.world.bridge_comparisons=0.6"])
    assert (cfg.data.world.yes_no, cfg.data.world.bridge_comparisons) == (0.4, 0.6)
    with pytest.raises(ConfigError, match="shares of the comparison questions"):
        load_config("multihop_cpu", ["data.world.yes_no=0.5", "data.world.bridge_comparisons=0.6"])
    with pytest.raises(ConfigError, match="less than or equal to 1"):
        load_config("multihop_cpu", ["data.world.yes_no=1.5"])


def test_a_recipe_with_bad_syntax_or_a_repeated_key_names_the_line(tmp_path: Path) -> None:
    """YAML keeps the last of two equal keys silently; a recipe's second ``steps:`` is most likely a mistake."""
    twice = tmp_path / "twice.yaml"
    twice.write_text("training:\n  steps: 5\n  lr: 1e-6\n  steps: 6\n")
    with pytest.raises(ConfigError, match=rf"^{tmp_path}/twice\.yaml:4: key 'steps' is given twice; keep one$"):
        load_config(twice)
    broken = tmp_path / "broken.yaml"
    broken.write_text("training:\n  steps: [5\nmodel: x\n")
    with pytest.raises(ConfigError, match=rf"^{tmp_path}/broken\.yaml:3:6: not valid YAML \(expected ','"):
        load_config(broken)
    merged = tmp_path / "profile.yaml"  # a profile's anchors and merge keys are not repeats
    merged.write_text("_small: &small {training: {steps: 2}}\nall:\n  <<: *small\n  retrieval: {topk: 2}\n")
    cfg = load_config("multihop_cpu", [], merged)
    assert (cfg.training.steps, cfg.retrieval.topk) == (2, 2)
