"""Each paper recipe writes the values that define its method (with a [P] / [C] / [O] mark on the line), and
``searchrl config show`` prints the values the papers (or their code) use."""

from __future__ import annotations

import re

import pytest
import yaml
from typer.testing import CliRunner

from searchrl.cli import app
from searchrl.config import load_config, recipe_path

MARK = re.compile(r"#.*\[(P|C|O)\]")
PAPERS = [
    "search_r1_ppo",
    "search_r1_grpo",
    "r_search",
    "r1_searcher_stage1",
    "r1_searcher_stage2",
    "r1_searcher_pp",
    "rag_r1",
]
#: written in every paper recipe: the update count, the budget behaviour, what and how evaluation measures
EVERY = [
    "algorithm.mini_batch_size",
    "rollout.force_answer",
    "evaluation.datasets",
    "evaluation.timing",
    "evaluation.topk",
    "evaluation.limit",
    "evaluation.temperature",
]
SFT = ["sft.epochs", "sft.lr", "sft.batch_size", "sft.max_length"]
MEMORIZATION = [
    "memorization.coef",
    "memorization.per_question",
    "memorization.max_rewrites_per_step",
    "memorization.max_new_tokens",
    "memorization.temperature",
    "memorization.pool_size",
    "memorization.batch_size",
]
REQUIRED = {name: EVERY for name in PAPERS} | {
    "r1_searcher_pp": EVERY + SFT + MEMORIZATION,
    "rag_r1": EVERY + SFT + ["sft.val_fraction"],
}


def written_line(text: str, dotted: str) -> str | None:
    """The recipe line that sets ``section.key`` (top-level section, two-space indented key), or None."""
    section, key = dotted.split(".")
    inside = False
    for line in text.splitlines():
        if not line.startswith(" ") and line.strip() and not line.startswith("#"):
            inside = line.startswith(f"{section}:")
            continue
        if inside and line.startswith(f"  {key}:"):
            return line
    return None


@pytest.mark.parametrize("recipe", PAPERS)
def test_method_defining_values_are_written_with_a_mark(recipe: str) -> None:
    text = recipe_path(recipe).read_text()
    raw = yaml.safe_load(text)
    missing, unmarked = [], []
    for dotted in REQUIRED[recipe]:
        section, key = dotted.split(".")
        line = written_line(text, dotted)
        if key not in (raw.get(section) or {}) or line is None:
            missing.append(dotted)
        elif not MARK.search(line):
            unmarked.append(dotted)
    assert not missing, f"{recipe}: left to a default, write them with a mark: {missing}"
    assert not unmarked, f"{recipe}: written without a [P]/[C]/[O] mark: {unmarked}"


def shown(recipe: str) -> dict:
    """The resolved config as `searchrl config show` prints it."""
    res = CliRunner().invoke(app, ["config", "show", recipe])
    assert res.exit_code == 0, res.output
    return yaml.safe_load(res.stdout)


def updates_per_step(cfg) -> int:
    trajectories = cfg.training.prompts_per_step * cfg.rollout.group_size
    return -(-trajectories // cfg.algorithm.mini_batch_size) * cfg.algorithm.ppo_epochs


def test_grpo_makes_the_authors_number_of_updates() -> None:
    """Search-R1's veRL fork does not scale ppo_mini_batch_size=256 by n_agent=5."""
    assert shown("search_r1_grpo")["algorithm"]["mini_batch_size"] == 256
    assert updates_per_step(load_config("search_r1_grpo")) == 10  # 512 x 5 / 256
    assert updates_per_step(load_config("r_search")) == 5  # 256 x 5 / 256
    assert updates_per_step(load_config("search_r1_ppo")) == 2  # 512 x 1 / 256


@pytest.mark.parametrize(
    "recipe, mode",
    [
        ("search_r1_ppo", "silent"),
        ("search_r1_grpo", "silent"),
        ("r_search", "silent"),
        ("rag_r1", "silent"),
        ("r1_searcher_stage1", "end"),
        ("r1_searcher_stage2", "end"),
        ("r1_searcher_pp", "end"),
    ],
)
def test_budget_behaviour(recipe: str, mode: str) -> None:
    assert shown(recipe)["rollout"]["force_answer"] == mode


def test_evaluation_sets_and_settings() -> None:
    names = {r: [d["name"] for d in shown(r)["evaluation"]["datasets"]] for r in PAPERS}
    assert names["search_r1_grpo"] == ["NQ", "TriviaQA", "PopQA", "HotpotQA", "2wiki", "Musique", "Bamboogle"]
    assert names["rag_r1"] == ["NQ", "PopQA", "TriviaQA", "HotpotQA", "2Wiki", "Musique", "Bamboogle"]
    assert names["r_search"] == ["HotpotQA", "2WikiMQA", "MuSiQue", "Bamboogle", "NQ", "TriviaQA", "PopQA"]
    for r in ("r1_searcher_stage1", "r1_searcher_stage2", "r1_searcher_pp"):
        sets = {d["name"]: d for d in shown(r)["evaluation"]["datasets"]}
        assert list(sets) == ["HotpotQA", "2Wiki", "Bamboogle", "Musique"]
        assert [sets[n]["sample"] for n in sets] == [500, 500, None, 500]  # Bamboogle: all 125
        assert all(d["data"].startswith("hf:RUC-NLPIR/FlashRAG_datasets:") for d in sets.values())
    r_search = {d["name"]: d for d in shown("r_search")["evaluation"]["datasets"]}
    corpora = {n: d["corpus"] for n, d in r_search.items()}
    assert len({corpora["HotpotQA"], corpora["2WikiMQA"], corpora["MuSiQue"], corpora["NQ"]}) == 4
    assert corpora["Bamboogle"] == corpora["NQ"] == corpora["PopQA"] == "wiki-18.jsonl"
    assert all(r_search[n]["sample"] == 500 for n in ("NQ", "TriviaQA", "PopQA"))
    for r in PAPERS:
        assert shown(r)["evaluation"]["limit"] is None  # sizes come from each set, not the first N of a file
    stage1 = shown("r1_searcher_stage1")
    assert stage1["evaluation"]["topk"] == 5 and stage1["retrieval"]["topk"] == 3
    assert shown("rag_r1")["evaluation"]["timing"] == "single"


def test_cold_start_sft_and_memorization() -> None:
    pp = shown("r1_searcher_pp")
    assert pp["sft"]["max_length"] >= pp["rollout"]["max_total_tokens"]  # targets keep their answer
    assert (pp["sft"]["lr"], pp["sft"]["batch_size"], pp["sft"]["epochs"]) == (2e-5, 64, 6)
    mem = pp["memorization"]
    assert mem["max_rewrites_per_step"] >= pp["training"]["prompts_per_step"] and mem["max_new_tokens"] >= 1024
    assert mem["pool_size"] == 0
    rs = next(s for s in pp["pipeline"] if s["name"] == "rs")["args"]
    assert rs["quota"] == ["hotpotqa=720", "2wikimultihopqa=85"] and rs["max_per_question"] == 1
    rag = shown("rag_r1")
    assert (rag["sft"]["lr"], rag["sft"]["batch_size"]) == (1e-5, 64)
    split = next(s for s in rag["pipeline"] if s["name"] == "heldout")
    assert split["op"] == "split" and split["args"] == {"heldout_fraction": 0.05}
    rl = next(s for s in rag["pipeline"] if s["name"] == "rl")
    assert rl["data"] == "${heldout}/train.jsonl" and rl["set"] == {"data.dev": "${heldout}/heldout.jsonl"}


def test_difficulty_quotas() -> None:
    s1 = next(s for s in shown("r1_searcher_stage1")["pipeline"] if s["name"] == "select")["args"]
    assert s1["quota"] == ["hotpotqa/medium=200", "2wikimultihopqa/medium=150"]
    s2 = next(s for s in shown("r1_searcher_stage2")["pipeline"] if s["name"] == "select2")["args"]
    assert s2["quota"] == [
        "hotpotqa/medium=2561",
        "hotpotqa/hard=2000",
        "2wikimultihopqa/medium=1087",
        "2wikimultihopqa/hard=2500",
    ]


@pytest.mark.parametrize("recipe", PAPERS)
def test_paper_recipes_keep_fp32_master_weights(recipe: str) -> None:
    # bf16 weights would round away updates at the papers' learning rates (1e-6 to 2e-6); their code keeps fp32
    # masters (veRL's FSDP actor, DeepSpeed bf16) and computes in bf16, as training.precision=bf16 does here
    assert load_config(recipe).model.dtype == "float32"


def test_training_half_precision_weights_is_warned(monkeypatch) -> None:
    from searchrl.stages.train import _warn_half_weights
    from searchrl.utils import console

    monkeypatch.setattr(console, "width", 400)
    with console.capture() as cap:
        _warn_half_weights(load_config("demo", ["model.dtype=bfloat16"]))
        _warn_half_weights(load_config("demo", ["model.dtype=bfloat16", "model.lora={r: 8}"]))  # adapters in fp32
        _warn_half_weights(load_config("demo"))
    assert cap.get().count("model.dtype=bfloat16 trains the weights in bfloat16 itself") == 1


@pytest.mark.parametrize("lora", [[], ["model.lora={r: 8}"]])
def test_training_fp16_weights_is_refused(lora: list[str]) -> None:
    """No loss scaling: fp16 gradients underflow (at a 32k-token step a tiny model's lost 15% of their entries to
    zero, off by 57% in norm), LoRA's too, which flow through the fp16 base; fp16 evaluation is still allowed."""
    import torch

    from searchrl.config import ConfigError
    from searchrl.stages.train import _warn_half_weights
    from searchrl.utils import make_adamw

    with pytest.raises(ConfigError, match="model.dtype=float16 cannot be trained"):
        _warn_half_weights(load_config("demo", ["model.dtype=float16", *lora]))
    with pytest.raises(ValueError, match="fp16 weights cannot be trained"):
        make_adamw([torch.nn.Parameter(torch.zeros(2, dtype=torch.float16))], lr=1e-3)


@pytest.mark.parametrize("recipe", ["r1_searcher_stage1", "r1_searcher_stage2"])
def test_r1_searcher_selects_by_difficulty_from_the_training_sets_not_from_a_selected_file(recipe: str) -> None:
    """Paper §2.1: the labeller buckets questions of the HotpotQA and 2Wiki training sets. A selection stage reading
    the authors' selected files (stage_1 / stage_2.jsonl) would re-select from 350 / 8,148 already selected
    questions, and Table 1's quotas could not fill."""
    from searchrl.stages.chain import stage_config

    selected = {"stage_1.jsonl", "stage_2.jsonl"}
    cfg = load_config(recipe)
    stages = [s for s in cfg.pipeline if s.op == "select-difficulty"]
    assert stages
    for stage in stages:
        pool = stage.data or stage_config(cfg, stage, None, None).data.train
        assert pool not in selected, (stage.name, pool)
    rl = [s for s in cfg.pipeline if s.kind == "rl"]
    assert rl and all(str(s.data).startswith("${select") for s in rl)  # RL trains on what the selection kept


@pytest.mark.parametrize(
    "recipe, questions", [("r1_searcher_stage1", 350), ("r1_searcher_stage2", 8148), ("r1_searcher_pp", 8142)]
)
def test_one_epoch_recipes_take_the_whole_batches_of_one_pass(recipe: str, questions: int) -> None:
    """One training epoch over Table 1's / App. A's question counts at 64 prompts a step: the authors' OpenRLHF
    loader drops the last partial batch, so no question is seen twice within the epoch."""
    t = load_config(recipe).training
    assert t.prompts_per_step == 64 and t.steps == questions // t.prompts_per_step


@pytest.mark.parametrize("recipe", ["r1_searcher_stage1", "r1_searcher_stage2", "r1_searcher_pp"])
def test_openrlhf_recipes_use_its_adam_betas(recipe: str) -> None:
    """R1-Searcher's OpenRLHF actor: AdamW betas (0.9, 0.95) (R1-Searcher++ says its code is almost R1-Searcher's);
    veRL's recipes keep (0.9, 0.999)."""
    assert load_config(recipe).training.adam_betas == (0.9, 0.95)
    for verl in ("search_r1_ppo", "search_r1_grpo", "r_search", "rag_r1"):
        assert load_config(verl).training.adam_betas == (0.9, 0.999)
