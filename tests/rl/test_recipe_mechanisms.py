"""Each paper recipe's distinctive mechanism runs in that recipe's own RL step: the config goes through
``build_trainer`` (the code ``searchrl train`` and ``searchrl run`` use) with a tiny model, a scripted policy and a
one-document retriever in place of the hub models and the index; every method-defining value stays the recipe's."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import searchrl.generation.hf as hf
import searchrl.models
import searchrl.rl.memorization as memorization
import searchrl.rl.trainer as trainer_module
import searchrl.stages.train as train_stage
from searchrl.config import load_config
from searchrl.generation.fake import ByteTokenizer, ScriptedGenerator
from searchrl.pipeline import make_protocol
from searchrl.retrieval.base import Hit
from searchrl.testing import tiny_model

DOC = "Lyon is a city in France."
EVIDENCE = "Lyon lies in the country of France (evidence)."


class Retriever:
    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    def search(self, queries: list[str], k: int) -> list[list[Hit]]:
        self.calls.append(list(queries))
        return [[Hit(f"d{i}", "Lyon", DOC, 1.0) for i in range(k)] for _ in queries]


def policy_script(protocol, queries: list[str]):
    """Search first; once the documents are in the context, reason (R-Search: write the evidence) and answer."""

    def script(ctx: str) -> str:
        if DOC not in ctx:
            return protocol.format_reasoning("I need to look it up.") + " " + protocol.format_search(queries)
        evidence = protocol.format_evidence(EVIDENCE) if protocol.name == "r_search" else ""
        return protocol.format_reasoning("Lyon is in France.") + " " + evidence + protocol.format_answer("France")

    return script


def one_step(
    recipe: str, tmp: Path, monkeypatch, queries: tuple[str, ...] = ("lyon city",), overrides: tuple[str, ...] = ()
):
    """One RL step of ``recipe`` at a tiny size; returns the trainer, the step's metrics, the step's tensors (as the
    update reads them) and the retriever."""
    rows = [{"id": f"q{i}", "question": "Which country is Lyon in?", "golden_answers": ["France"]} for i in range(2)]
    (tmp / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    cfg = load_config(
        recipe,
        [
            f"data.source={tmp}",
            "data.train=train.jsonl",
            "model.policy=tiny",
            "model.prompt_style=auto",  # the byte tokenizer has no chat template
            "model.reader=null",
            "memorization.rewriter=null",
            "training.init_from=null",
            "training.steps=1",
            "training.prompts_per_step=2",
            "training.warmup_steps=0",
            "training.critic_warmup_steps=0",
            f"training.output_dir={tmp / 'run'}",
            "training.save_every=0",
            "training.save_at_end=false",
            "training.tensorboard=false",
            "rollout.group_size=2",
            "rollout.max_total_tokens=4000",
            "retrieval.topk=1",
            "algorithm.mini_batch_size=4",
            *overrides,
        ],
    )
    tok = ByteTokenizer()
    protocol = make_protocol(cfg)
    retriever = Retriever()
    monkeypatch.setattr(searchrl.models, "load_policy", lambda *a, **k: (tiny_model(), tok))
    monkeypatch.setattr(train_stage, "make_retriever_for", lambda *a, **k: retriever)
    monkeypatch.setattr(
        trainer_module,
        "rollout_generator",
        lambda *a: ScriptedGenerator(tok, policy_script(protocol, list(queries))),
    )
    trainer = train_stage.build_trainer(cfg)
    seen = {}
    advantages = trainer._advantages

    def spy(exp):
        seen["step"] = advantages(exp)
        return seen["step"]

    trainer._advantages = spy
    (metrics,) = trainer.train()
    return trainer, metrics, seen["step"], retriever


def inserted_positions(step) -> list[tuple[int, int]]:
    """(row, position) of every response token the environment inserted (not sampled by the policy)."""
    b = step.batch
    return [
        (i, t)
        for i in range(b.response_ids.shape[0])
        for t in range(b.response_ids.shape[1])
        if b.response_mask[i, t] and not b.action_mask[i, t]
    ]


@pytest.mark.parametrize("recipe", ["search_r1_ppo", "search_r1_grpo"])
def test_search_r1_masks_retrieved_tokens_out_of_the_policy_loss(tmp_path: Path, monkeypatch, recipe: str) -> None:
    trainer, m, step, _ = one_step(recipe, tmp_path, monkeypatch)
    text = trainer.tokenizer.decode(trainer.last_trajectories[0].response_ids)
    assert "<information>" in text and m["rollout/searches"] == 1 and m["reward/answer"] == 1.0
    inserted = inserted_positions(step)
    assert inserted  # the documents are in the response ...
    st = step.tensors
    assert all(st.mask_BT[i, t] == 0 for i, t in inserted)  # ... and out of the policy loss, KL and entropy
    assert st.mask_BT.sum() > 0 and st.mask_BT.equal(step.batch.action_mask.to(st.mask_BT.dtype))
    if recipe == "search_r1_ppo":  # the critic and GAE on every response token, KL in the reward (veRL's code)
        assert trainer.critic is not None and st.ref_logp_BT is None
        assert st.cmask_BT.equal(step.batch.response_mask.to(st.cmask_BT.dtype))
    else:  # GRPO: no critic, the KL term in the loss
        assert trainer.critic is None and st.ref_logp_BT is not None


@pytest.mark.parametrize(
    "recipe, paid",
    [
        ("r1_searcher_stage1", {"reward/retrieval": 0.5, "reward/format": 0.5, "reward/total": 1.0}),
        ("r1_searcher_stage2", {"reward/answer": 1.0, "reward/format": 0.0, "reward/total": 1.0}),
    ],
)
def test_r1_searcher_stages_pay_their_own_rewards(tmp_path: Path, monkeypatch, recipe: str, paid: dict) -> None:
    trainer, m, step, _ = one_step(recipe, tmp_path, monkeypatch)
    assert {k: m[k] for k in paid} == paid
    assert all(step.tensors.mask_BT[i, t] == 0 for i, t in inserted_positions(step))  # retrieve-mask loss


def test_r1_searcher_pp_pays_the_group_reward_and_trains_on_rewritten_paths(tmp_path: Path, monkeypatch) -> None:
    protocol = make_protocol(load_config("r1_searcher_pp"))
    path = protocol.format_recalled(" Lyon is a city in France. ") + " " + protocol.format_answer("France")
    rewriter_calls: list[str] = []

    def rewriter(model, tok):
        def script(ctx: str) -> str:
            rewriter_calls.append(ctx)
            return path

        return ScriptedGenerator(tok, script)

    monkeypatch.setattr(memorization, "HFGenerator", rewriter)
    trainer, m, step, _ = one_step("r1_searcher_pp", tmp_path, monkeypatch)
    assert {"reward/format", "reward/answer", "reward/group"} <= set(m)
    assert m["memorization/candidates"] == 2 and m["memorization/valid"] == 2  # one correct searching rollout each
    assert m["loss/memorization_nll"] > 0  # mu * NLL of the rewritten paths went into the update
    assert all(DOC in ctx for ctx in rewriter_calls)  # the rewriter read the rollouts' documents


def test_r_search_scores_the_global_evidence_with_the_frozen_reader(tmp_path: Path, monkeypatch) -> None:
    read: list[str] = []

    def reader(model, tok):
        def script(ctx: str) -> str:
            read.append(ctx)
            return "France" if "(evidence)" in ctx else "unknown"

        return ScriptedGenerator(tok, script)

    monkeypatch.setattr(hf, "HFGenerator", reader)
    trainer, m, step, _ = one_step("r_search", tmp_path, monkeypatch)
    assert (m["reward/answer"], m["reward/evidence"], m["reward/format"]) == (1.0, 1.0, pytest.approx(0.4))
    assert read and all(EVIDENCE in ctx and DOC not in ctx for ctx in read)  # the reader sees the evidence alone
    traj = trainer.last_trajectories[0]
    text = trainer.tokenizer.decode([i for i, a in zip(traj.response_ids, traj.action_mask, strict=True) if a])
    assert EVIDENCE in text and DOC not in text  # the evidence is trained on, the documents are masked
    assert trainer.critic is None and step.tensors.ref_logp_BT is not None  # GRPO, KL in the loss


def test_r_search_sampling_reader_is_seeded_by_the_run(tmp_path: Path, monkeypatch) -> None:
    """model.reader_temperature > 0 (R-Search's code samples at 0.1): the reader's draws come from training.seed, so
    two runs of one config read the evidence alike."""
    read: list[list[str]] = []

    class Recording(hf.HFGenerator):
        def generate(self, prompts, params):
            out = super().generate(prompts, params)
            read.append([c.text for c in out])
            return out

    monkeypatch.setattr(hf, "HFGenerator", Recording)
    for run in ("a", "b"):
        (tmp_path / run).mkdir()
        one_step("r_search", tmp_path / run, monkeypatch, overrides=("model.reader_temperature=1.0",))
    assert len(read) == 2 and read[0] and read[0] == read[1]


def test_rag_r1_sends_a_calls_queries_together_and_trains_ppo(tmp_path: Path, monkeypatch) -> None:
    trainer, m, step, retriever = one_step("rag_r1", tmp_path, monkeypatch, queries=("lyon city", "lyon country"))
    n = len(trainer.last_trajectories)
    assert retriever.calls == [["lyon city", "lyon country"] * n]  # one parallel search for the turn's calls
    text = trainer.tokenizer.decode(trainer.last_trajectories[0].response_ids)
    obs = json.loads(text.split("<information>")[1].split("</information>")[0])
    assert obs["query"] == ["lyon city", "lyon country"] and len(obs["documents"]) == 2
    assert m["rollout/searches"] == 1 and m["reward/answer"] == 1.0
    st = step.tensors
    assert trainer.critic is not None and all(st.mask_BT[i, t] == 0 for i, t in inserted_positions(step))
    assert st.cmask_BT.equal(step.batch.response_mask.to(st.cmask_BT.dtype))
