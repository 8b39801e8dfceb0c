"""Simulated search: documents written by a model, ZeroSearch's noise curriculum, and a real index for evaluation."""

from __future__ import annotations

from pathlib import Path

import pytest

from searchrl.config import load_config
from searchrl.generation.fake import ByteTokenizer, ScriptedGenerator
from searchrl.retrieval.simulated import SimulatedRetriever, noise_share


def _writer() -> ScriptedGenerator:
    def script(ctx: str) -> str:
        kind = "NOISE" if "does NOT answer" in ctx else "USEFUL"
        return f"Passage: {kind} about {ctx.rsplit('Search query:', 1)[-1].strip()[:20]}"

    return ScriptedGenerator(ByteTokenizer(), script)


def test_the_noise_curriculum_runs_from_start_to_end_slowly_at_first() -> None:
    assert noise_share(0.0, 0.1, 0.5, 10.0) == pytest.approx(0.1)
    assert noise_share(1.0, 0.1, 0.5, 10.0) == pytest.approx(0.5)
    mid = noise_share(0.5, 0.1, 0.5, 10.0)
    assert 0.1 < mid < 0.3  # exponential: below the linear midpoint (0.3)
    assert noise_share(2.0, 0.1, 0.5, 10.0) == pytest.approx(0.5)  # clamped


def test_each_query_gets_k_written_documents_with_the_scheduled_share_of_noise() -> None:
    gen = _writer()
    sim = SimulatedRetriever(gen, noise=(0.0, 0.8, 10.0), prompt_style="raw", seed=1)
    queries = [f"who founded city {i}" for i in range(40)]
    hits = sim.search(queries, 3)
    assert [len(h) for h in hits] == [3] * 40 and len(gen.calls) == 1  # one batched call
    assert all(h.title == q and h.text.startswith("USEFUL") for q, hs in zip(queries, hits, strict=True) for h in hs)
    assert [h.score for h in hits[0]] == [3.0, 2.0, 1.0]
    sim.set_progress(1.0)
    late = [h for hs in sim.search(queries, 3) for h in hs]
    noisy = [h for h in late if h.id.endswith(":noise")]
    assert 0.6 < len(noisy) / len(late) < 0.95  # p = 0.8
    assert all(h.text.startswith("NOISE") for h in noisy)
    assert all(h.text.startswith("USEFUL") for h in late if not h.id.endswith(":noise"))
    with pytest.raises(ValueError, match="k must be"):
        sim.search(queries, 0)


def test_only_training_rollouts_search_the_simulation(tmp_path: Path, monkeypatch) -> None:
    """Evaluation, data stages and ``ask`` get a real index of ``retrieval.simulated.eval_kind``; the train stage
    gets the simulated engine, whose noise the trainer moves along at every step."""
    from searchrl import pipeline
    from searchrl.retrieval import simulated

    cfg = load_config("demo", ["retrieval.kind=simulated", "data.world.entities=60"], "laptop")
    real = pipeline.make_retriever_for(cfg)
    assert type(real).__name__ == "BM25Retriever" and real.search(["river"], 2)
    made = []
    monkeypatch.setattr(simulated, "make_simulated", lambda c, style: made.append(c) or SimulatedRetriever(_writer()))
    sim = pipeline.make_retriever_for(cfg, simulate=True)
    assert isinstance(sim, SimulatedRetriever) and made[0].noise_end == 0.5


def test_the_trainer_moves_the_noise_curriculum(tmp_path: Path) -> None:
    from searchrl.data.records import QAExample
    from searchrl.rl.trainer import Trainer
    from searchrl.testing import LettersProtocol, letter_fraction_reward, tiny_model, tokenizer

    class Recorder:
        def __init__(self) -> None:
            self.progress: list[float] = []

        def set_progress(self, fraction: float) -> None:
            self.progress.append(fraction)

        def search(self, queries, k):
            return [[] for _ in queries]

    rec = Recorder()
    cfg = load_config(
        None,
        [
            "training.steps=3",
            "training.prompts_per_step=2",
            f"training.output_dir={tmp_path}",
            "training.save_at_end=false",
            "training.tensorboard=false",
            "rollout.group_size=2",
            "rollout.max_new_tokens=4",
            "rollout.max_turns=1",
            "rollout.force_answer=false",
            "rollout.max_total_tokens=64",
        ],
    )
    questions = [QAExample(f"q{i}", f"write letters {i}", ["x"]) for i in range(4)]
    Trainer(
        cfg, tiny_model(), tokenizer(), LettersProtocol(), rec, questions, reward_fn=letter_fraction_reward
    ).train()
    assert rec.progress == [0.0, 0.5, 1.0]


def test_a_served_writer_and_summariser_take_their_timeout_and_concurrency_from_the_config(monkeypatch) -> None:
    """retrieval.simulated.timeout_s / concurrency and retrieval.web.summarizer_timeout_s / summarizer_concurrency
    reach the OpenAI-compatible client of a served writer or summariser (no server is contacted to build one)."""
    import transformers

    from searchrl.config import SimulatedConfig, WebConfig
    from searchrl.generation import openai_compat
    from searchrl.retrieval import pages, simulated

    made = []

    class Client:
        def __init__(self, url, model, tokenizer, **kwargs) -> None:
            self.tokenizer = tokenizer
            made.append((url, model, kwargs))

    monkeypatch.setattr(openai_compat, "OpenAICompatGenerator", Client)
    monkeypatch.setattr(pages, "OpenAICompatGenerator", Client)
    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", lambda *a, **k: object())
    monkeypatch.setattr(simulated.models, "resolve_policy", lambda spec: spec)
    monkeypatch.setattr(pages.models, "resolve_policy", lambda spec: spec)
    simulated.make_simulated(SimulatedConfig(url="http://w:1/v1", model="writer", timeout_s=9, concurrency=5))
    pages.make_summarizer(
        WebConfig(summarizer="sum", summarizer_url="http://s:1/v1", summarizer_timeout_s=7, summarizer_concurrency=3)
    )
    assert made == [
        ("http://w:1/v1", "writer", {"timeout_s": 9.0, "concurrency": 5}),
        ("http://s:1/v1", "sum", {"timeout_s": 7.0, "concurrency": 3}),
    ]
