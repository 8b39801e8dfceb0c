"""Simulated search (``retrieval.kind: simulated``): a language model writes the documents a query returns.

ZeroSearch (Sun et al., 2025) trains a search agent with no search engine: an LLM plays the engine, writing useful
documents for a query, or, with a share that grows over training, deliberately unhelpful ones, so the policy learns
to read noisy results. This is that idea behind our ``Retriever`` interface; our own prompts and defaults [O]:

- each query gets ``k`` documents from one batched generate call (all queries of a search batch together);
- document ``j`` of a query is unhelpful with probability ``p`` (a seeded draw per query, document and training
  step); ``p`` follows ZeroSearch's curriculum, ``p = start + (base^(i/m) - 1) / (base - 1) * (end - start)``, from
  :meth:`SimulatedRetriever.set_progress` (the trainer calls it with ``i / m`` at every step);
- hits carry ``title`` = the query, ``id`` = ``sim:<digest>`` (``:noise`` appended on an unhelpful one, for the
  viewer and for analyses) and a descending score.

Training rollouts only: evaluation and every other stage search a real index (``retrieval.simulated.eval_kind``).
"""

from __future__ import annotations

import hashlib
import random
from typing import TYPE_CHECKING

from searchrl import models
from searchrl.generation.base import Generator, SamplingParams
from searchrl.generation.prompts import render_user_prompt as render_prompt
from searchrl.retrieval.base import Hit

if TYPE_CHECKING:
    from searchrl.config import SimulatedConfig

USEFUL_PROMPT = (
    "You are a search engine. Write one short encyclopedia passage, two to four sentences, that a reader could use "
    "to answer the search query below. State the facts plainly, with names and dates.\n\nSearch query: {query}"
)
NOISY_PROMPT = (
    "You are a search engine. Write one short encyclopedia passage, two to four sentences, about a subject close to "
    "the search query below that does NOT answer it: mention some of its words, but give no fact it asks for."
    "\n\nSearch query: {query}"
)


def noise_share(progress: float, start: float, end: float, base: float) -> float:
    """ZeroSearch's curriculum at ``progress`` = i / m in [0, 1]: ``start`` at 0, ``end`` at 1, slow at first."""
    x = min(max(progress, 0.0), 1.0)
    return start + (base**x - 1.0) / (base - 1.0) * (end - start)


class SimulatedRetriever:
    """``search(queries, k)`` answered by ``generator`` writing ``k`` documents per query."""

    def __init__(
        self,
        generator: Generator,
        *,
        max_new_tokens: int = 96,
        temperature: float = 0.7,
        noise: tuple[float, float, float] = (0.0, 0.5, 10.0),
        prompt_style: str = "auto",
        seed: int = 0,
    ) -> None:
        self.generator = generator
        self.tokenizer = generator.tokenizer
        self.max_new_tokens = max_new_tokens
        self.temperature = temperature
        self.noise_start, self.noise_end, self.noise_base = noise
        self.prompt_style = prompt_style
        self.seed = seed
        self.progress = 0.0
        self.calls = 0

    def set_progress(self, fraction: float) -> None:
        """Where training is, in [0, 1]: sets the share of unhelpful documents (:func:`noise_share`)."""
        self.progress = min(max(float(fraction), 0.0), 1.0)

    @property
    def noise(self) -> float:
        return noise_share(self.progress, self.noise_start, self.noise_end, self.noise_base)

    def _noisy(self, query: str, j: int) -> bool:
        draw = random.Random(f"{self.seed}|{self.progress:.6f}|{query}|{j}").random()
        return draw < self.noise

    def _prompt(self, query: str, noisy: bool) -> list[int]:
        task = (NOISY_PROMPT if noisy else USEFUL_PROMPT).format(query=query.strip())
        text = render_prompt(self.tokenizer, task, self.prompt_style, raw_cue="Passage:")
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    @staticmethod
    def clean(reply: str) -> str:
        """The passage in a reply: one line, without a ``Passage:`` label."""
        text = " ".join(reply.split())
        if text.lower().startswith("passage:"):
            text = text[len("passage:") :].strip()
        return text

    def search(self, queries: list[str], k: int) -> list[list[Hit]]:
        if k < 1:
            raise ValueError(f"k must be >= 1, got {k}")
        plan = [(q, j, self._noisy(q, j)) for q in queries for j in range(k)]
        params = SamplingParams(
            max_new_tokens=self.max_new_tokens, temperature=self.temperature, seed=self.seed * 7919 + self.calls
        )
        self.calls += 1
        comps = self.generator.generate([self._prompt(q, noisy) for q, _, noisy in plan], params) if plan else []
        out: list[list[Hit]] = [[] for _ in queries]
        for n, ((q, j, noisy), comp) in enumerate(zip(plan, comps, strict=True)):
            digest = hashlib.sha1(f"{q}|{j}|{self.calls}".encode()).hexdigest()[:10]
            hit_id = f"sim:{digest}" + (":noise" if noisy else "")
            out[n // k].append(Hit(id=hit_id, title=q.strip(), text=self.clean(comp.text), score=float(k - j)))
        return out


def make_simulated(cfg: SimulatedConfig, prompt_style: str = "auto") -> SimulatedRetriever:
    """The simulated engine ``retrieval.simulated`` asks for: a local writer model or an OpenAI-compatible server."""
    generator: Generator
    if cfg.url:
        from transformers import AutoTokenizer

        from searchrl.generation.openai_compat import OpenAICompatGenerator

        tokenizer = AutoTokenizer.from_pretrained(models.resolve_policy(cfg.model))
        generator = OpenAICompatGenerator(
            cfg.url, cfg.served_model or cfg.model, tokenizer, timeout_s=cfg.timeout_s, concurrency=cfg.concurrency
        )
    else:
        from searchrl.generation.hf import HFGenerator

        model, tokenizer = models.load_policy(cfg.model, frozen=True)
        generator = HFGenerator(model, tokenizer)
    return SimulatedRetriever(
        generator,
        max_new_tokens=cfg.max_new_tokens,
        temperature=cfg.temperature,
        noise=(cfg.noise_start, cfg.noise_end, cfg.noise_base),
        prompt_style=prompt_style,
        seed=cfg.seed,
    )
