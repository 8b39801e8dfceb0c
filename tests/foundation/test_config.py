import re
from pathlib import Path

import pytest
import yaml

from searchrl.config import ConfigError, dump_config, load_config, recipe_names


@pytest.mark.parametrize("name", recipe_names())
def test_every_shipped_recipe_validates(name: str) -> None:
    cfg = load_config(name)
    assert cfg.name == name


def test_recipes_include_each_method() -> None:
    names = set(recipe_names())
    assert {
        "search_r1_ppo",
        "search_r1_grpo",
        "r1_searcher_stage1",
        "r1_searcher_stage2",
        "r1_searcher_pp",
        "r_search",
        "rag_r1",
        "demo",
    } <= names


def test_misspelt_key_names_key_and_closest(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({"training": {"learning_rate": 1e-6, "stpes": 3}}))
    with pytest.raises(ConfigError) as err:
        load_config(bad)
    msg = str(err.value)
    assert "training.stpes" in msg and "did you mean 'training.steps'" in msg
    assert "training.learning_rate" in msg


def test_misspelt_section_suggests_section(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("rollot: {group_size: 2}\n")
    with pytest.raises(ConfigError, match="did you mean 'rollout'"):
        load_config(bad)


def test_nested_reward_component_key_is_checked(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("reward: {components: [{name: answer, wieght: 2}]}\n")
    with pytest.raises(ConfigError, match=r"did you mean 'reward\.components\.0\.weight'"):
        load_config(bad)


def test_overrides_and_resolved_dump(tmp_path: Path) -> None:
    cfg = load_config("search_r1_grpo", ["training.lr=3e-6", "rollout.group_size=2"])
    assert cfg.training.lr == 3e-6 and cfg.rollout.group_size == 2
    out = dump_config(cfg, tmp_path / "config.yaml")
    again = load_config(out)
    assert again == cfg


def test_unknown_recipe_suggests_name() -> None:
    with pytest.raises(ConfigError, match="did you mean 'search_r1_grpo'"):
        load_config("search_r1_grop")


def test_bad_value_is_reported() -> None:
    with pytest.raises(ConfigError, match="rollout.protocol"):
        load_config("demo", ["rollout.protocol=nonsense"])


def test_warmup_schedule_shapes() -> None:
    """Warm-up to the peak, then constant, or linear / cosine decay that ends near 0 at the last step."""
    import torch

    from searchrl.tuning import warmup_schedule

    def rates(decay: str, total: int = 12, warm: int = 2, floor: float = 0.0) -> list[float]:
        opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
        sched, out = warmup_schedule(opt, warm, total, decay, floor), []
        for _ in range(total):
            out.append(sched.get_last_lr()[0])
            opt.step()
            sched.step()
        return out

    assert rates("constant")[:3] == [0.5, 1.0, 1.0] and rates("constant")[-1] == 1.0
    lin, cos = rates("linear"), rates("cosine")
    assert lin[:2] == [0.5, 1.0] and abs(lin[2] - 10 / 11) < 1e-9 and abs(lin[-1] - 1 / 11) < 1e-9
    assert cos[1] == 1.0 and 0 < cos[-1] < lin[-1] and all(a > b for a, b in zip(cos[1:], cos[2:], strict=False))
    assert abs(cos[6] - 0.5) < 0.1  # about half the peak halfway through the decay
    with pytest.raises(ValueError, match="constant, linear or cosine"):
        rates("step")
    floored = rates("cosine", floor=0.1)  # OpenRLHF's cosine_with_min_lr: the decay ends at 0.1 of the peak
    pairs = zip(floored[1:], cos[1:], strict=True)
    assert floored[:2] == [0.5, 1.0] and all(abs(f - (0.1 + 0.9 * c)) < 1e-9 for f, c in pairs)


def test_an_empty_dict_override_empties_the_key() -> None:
    """Dicts merge key by key, so ``{}`` could never take a recipe's dict away; it empties it instead."""
    assert load_config("multihop_cpu").sft.oracle_mix  # the recipe's kind mix
    cfg = load_config("multihop_cpu", ["sft.oracle_mix={}", "sft.limit=16"])
    assert (cfg.sft.oracle_mix, cfg.sft.limit) == ({}, 16)
    merged = load_config("multihop_cpu", ["sft.oracle_mix={single_hop: 30}"]).sft.oracle_mix
    assert merged["single_hop"] == 30 and merged["comparison"] == 48  # a non-empty dict still merges


def test_a_pipeline_stage_value_is_set_from_the_command_line() -> None:
    """``pipeline.<stage>.<key>=value`` sets one value of the named stage (a ``set:`` key stays dotted, as the
    recipes write it); the recipe's other stages and values stay; an unknown stage names the recipe's stages."""
    base = load_config("multihop_cpu")
    cfg = load_config("multihop_cpu", ["pipeline.split.args.heldout=20", "pipeline.rl.set.training.steps=5"])
    stages = {s.name: s for s in cfg.pipeline}
    assert stages["split"].args == {"heldout": 20}
    assert stages["rl"].set["training.steps"] == 5 and stages["rl"].set["data.dev"] == "${split}/heldout.jsonl"
    assert [s.model_dump() for s in base.pipeline if s.name not in ("split", "rl")] == [
        s.model_dump() for s in cfg.pipeline if s.name not in ("split", "rl")
    ]
    assert {s.name: s for s in load_config("multihop_cpu").pipeline}["split"].args == {"heldout": 100}
    with pytest.raises(ConfigError, match=r"no pipeline stage 'splt' \(its stages: world, .*split"):
        load_config("multihop_cpu", ["pipeline.splt.args.heldout=20"])
    with pytest.raises(ConfigError, match=r"name a value of the stage, e.g. pipeline.split.args.heldout=20"):
        load_config("multihop_cpu", ["pipeline.split=3"])


def test_the_accelerate_configs_ship_with_the_package() -> None:
    from typer.testing import CliRunner

    from searchrl.cli import app

    for name, kind in (("ddp", "MULTI_GPU"), ("fsdp", "FSDP")):
        res = CliRunner().invoke(app, ["config", "accelerate", name])
        assert res.exit_code == 0, res.output
        path = Path(res.output.strip())
        assert path.is_file() and yaml.safe_load(path.read_text())["distributed_type"] == kind
    res = CliRunner().invoke(app, ["config", "accelerate", "deepspeed"])
    assert res.exit_code != 0 and "choose ddp or fsdp" in str(res.exception)


def test_a_run_config_shows_a_short_repr_and_its_yaml_in_ipython(tmp_path: Path) -> None:
    from types import SimpleNamespace

    cfg = load_config("search_r1_grpo", ["rollout.group_size=4"])
    assert repr(cfg) == (
        "RunConfig(name='search_r1_grpo', protocol='search_r1', algorithm='grpo', "
        f"policy={cfg.model.policy!r}, retrieval={cfg.retrieval.kind!r})"
    )
    shown: list[str] = []
    cfg._repr_pretty_(SimpleNamespace(text=shown.append), cycle=False)  # what IPython's printer receives
    assert "\n  group_size: 4\n" in shown[0]
    assert yaml.safe_load(shown[0]) == yaml.safe_load(dump_config(cfg, tmp_path / "config.yaml").read_text())


def test_an_error_is_blamed_on_the_layer_that_wrote_the_bad_key(tmp_path: Path) -> None:
    """An unknown section given on the command line is the override's, not the recipe's; a recipe's own typo is the
    recipe's even where a profile sets other keys of that section; a stage's keys are named by the stage's name."""
    with pytest.raises(ConfigError) as err:
        load_config("demo", ["trainin.steps=3"])
    assert str(err.value) == "command-line override 'trainin.steps=3': unknown key 'trainin'; did you mean 'training'?"
    with pytest.raises(ConfigError, match=r"^command-line override 'retrieval\.bm25\.k1=2': unknown key 'retrieval"):
        load_config("demo", ["retrieval.bm25.k1=2"])
    with pytest.raises(ConfigError) as err:
        load_config("demo", ["pipeline.rl.argz.x=1"])
    assert str(err.value).startswith(
        "command-line override 'pipeline.rl.argz.x=1': unknown key 'pipeline.rl.argz'; "
        "did you mean 'pipeline.rl.args'?"
    )
    mine = tmp_path / "mine.yaml"
    mine.write_text("name: demo\ntraining: {stesp: 3}\n")
    with pytest.raises(ConfigError) as err:
        load_config(mine, profile="laptop")  # the profile sets training.steps and others, not training.stesp
    assert str(err.value) == f"{mine}: unknown key 'training.stesp'; did you mean 'training.steps'?"
    mine.write_text("pipeline: [{name: a, kind: sft, argz: 1}]\n")
    with pytest.raises(ConfigError, match=r"unknown key 'pipeline\.a\.argz'; did you mean 'pipeline\.a\.args'\?"):
        load_config(mine)
    prof = tmp_path / "prof.yaml"
    prof.write_text("all: {trainin: {steps: 3}}\n")
    with pytest.raises(ConfigError, match=rf"^profile {prof}: unknown key 'trainin'; did you mean 'training'\?$"):
        load_config("demo", profile=prof)


def test_a_directory_named_like_a_shipped_recipe_does_not_hide_it(tmp_path: Path, monkeypatch) -> None:
    """`searchrl run --recipe demo --out demo` leaves a directory ``demo`` in the working directory; the next
    `--recipe demo` there read it as a path ("a directory, not a recipe file") instead of the shipped recipe."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "demo").mkdir()
    assert load_config("demo").name == "demo"
    (tmp_path / "mine").mkdir()
    with pytest.raises(ConfigError, match="a directory, not a recipe file: mine"):
        load_config("mine")
    with pytest.raises(ConfigError, match="recipe file not found: demo.yaml; the shipped recipe is named 'demo'"):
        load_config("demo.yaml")


def test_numbers_in_exponent_form_are_numbers_in_free_form_settings_too(tmp_path: Path) -> None:
    """PyYAML reads ``1e-6`` and ``-2e0`` (no dot) as strings: the typed settings turned them back into numbers, but a
    reward param, a protocol option or a stage's ``set:`` value stayed a string (a penalty of '-2e0')."""
    comps = "reward.components=[{name: answer}, {name: format, params: {paper: r1_searcher_stage2, penalty: -2e0}}]"
    cfg = load_config("r1_searcher_stage2", [comps, "pipeline.stage2.set.training.lr=1e-6", "training.lr=3e-6"])
    assert cfg.reward.components[1].params["penalty"] == -2.0 and cfg.training.lr == 3e-6
    assert {s.name: s for s in cfg.pipeline}["stage2"].set["training.lr"] == 1e-6
    mine = tmp_path / "mine.yaml"
    mine.write_text("reward: {components: [{name: answer, params: {metric: f1, incorrect: -1e-1}}]}\n")
    assert load_config(mine).reward.components[0].params["incorrect"] == -0.1
    assert load_config(mine, ["data.train=1e-6.jsonl"]).data.train == "1e-6.jsonl"  # not a number: as written


def test_a_list_entry_is_set_by_its_index() -> None:
    """r1_searcher_stage2's description says to "set reward.components[1].params.penalty" for the authors' -1, but no
    override could reach into a list: ``[1]`` was an unknown key and ``.1.`` replaced the list with a mapping."""
    for key in ("reward.components[1].params.penalty", "reward.components.1.params.penalty"):
        cfg = load_config("r1_searcher_stage2", [f"{key}=-1"])
        assert [c.params for c in cfg.reward.components] == [
            c.params for c in load_config("r1_searcher_stage2").reward.components[:1]
        ] + [{"paper": "r1_searcher_stage2", "penalty": -1}]
    stage = {s.name: s for s in load_config("r1_searcher_stage2").pipeline}["stage2"]
    from searchrl.stages.chain import stage_config

    staged = stage_config(
        load_config("r1_searcher_stage2"), stage.model_copy(update={"set": {**stage.set, key: -1}}), None, None
    )
    assert staged.reward.components[1].params["penalty"] == -1
    with pytest.raises(ConfigError, match=r"reward\.components has 2 entries, numbered from 0"):
        load_config("r1_searcher_stage2", ["reward.components.2.weight=2"])
    with pytest.raises(
        ConfigError, match=r"reward\.components is a list; name an entry by its index, e\.g\. reward\."
    ):
        load_config("r1_searcher_stage2", ["reward.components.weight=2"])
    with pytest.raises(ConfigError, match=r"^command-line override 'reward\.components\[1\]\.weight=x': reward\.comp"):
        load_config("r1_searcher_stage2", ["reward.components[1].weight=x"])
    assert "reward.components[1].params.penalty" in load_config("r1_searcher_stage2").description
    from searchrl.validation import dotted_key_problem

    assert dotted_key_problem("reward.components.1.params.penalty") is None  # a stage's set: key
    assert "did you mean 'reward.components.1.weight'" in str(dotted_key_problem("reward.components.1.wieght"))


def test_an_override_value_that_is_no_yaml_is_a_string_or_a_one_line_error() -> None:
    """``data.train=*.jsonl`` (a YAML alias marker) or an unclosed ``[a`` ended in a yaml ScannerError traceback."""
    assert load_config("demo", ["data.train=*.jsonl", "data.dev=@dev.jsonl"]).data.train == "*.jsonl"
    assert load_config("demo", ["data.dev=@dev.jsonl"]).data.dev == "@dev.jsonl"
    for item in ("data.kinds=[a", "model.lora={r: 8", "pipeline.rl.set.data.kinds=[a"):
        with pytest.raises(
            ConfigError, match=rf"^override '{re.escape(item)}': '.*' is not a valid YAML list or mapping"
        ):
            load_config("demo", [item])


def test_a_stage_value_below_a_plain_value_names_the_override_as_given() -> None:
    """``pipeline.split.args.heldout.x=1``: heldout holds a number. The error named ``args.heldout.x``, a key the
    user never wrote, and not the override."""
    with pytest.raises(ConfigError) as err:
        load_config("multihop_cpu", ["pipeline.split.args.heldout.x=1"])
    assert str(err.value) == (
        "override 'pipeline.split.args.heldout.x=1': pipeline.split.args.heldout is a value (100), not a section"
    )
