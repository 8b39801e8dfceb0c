"""Evaluation methods behind one interface: ``answer(examples) -> list[Prediction]``.

Seven methods, all batched through the ``Generator`` interface (one generate call per step for the whole batch) and
the ``Retriever`` interface (at most one retriever call per step):

- ``direct``: the question and a short-answer instruction; the first line of the reply is the answer (with
  ``evaluation.answer_span``, the default: the answer span when the reply restates the question as a sentence).
- ``cot``: the model reasons step by step and writes ``Final answer: ...`` on its last line; we read the last such
  line (or, when the marker is missing, the last non-empty line).
- ``naive_rag``: top-k documents retrieved once with the question go into the prompt; then as ``direct``, answer
  span included.
- ``iterative_rag``: IRCoT (Trivedi et al. 2023) in a compact form: retrieve with the question, then alternate
  "generate one reasoning sentence" and "retrieve with that sentence", accumulating documents, for at most
  ``max_steps`` sentences; stop as soon as a sentence contains "the answer is". Deviations from IRCoT: zero-shot
  (no few-shot demonstrations), and a question that has no "the answer is" sentence after ``max_steps`` (or whose
  model stops talking) gets one extra generation prefilled with "So the answer is:" instead of IRCoT's separate
  reader step; ``evaluation.iterative_steps`` defaults to 4 where FlashRAG's IRCoT runs 5. The documents gathered
  stay in the order first retrieved, up to ``max_docs`` (15, the IRCoT paper's cap); docs/recipes.md lists the
  other differences from FlashRAG's pipelines and Search-o1's script.
- ``iter_retgen``: ITER-RETGEN (Shao et al. 2023), a baseline of R1-Searcher++ and R-Search: ``iterations`` rounds
  of "retrieve with the question plus the previous round's output, then answer with reasoning from those
  documents" (chain-of-thought with ``Final answer:``); the last round's answer is the prediction. Zero-shot.
  FlashRAG's pipeline, which R-Search and R1-Searcher++ ran, answers each round answer-only in at most 32 tokens;
  here each round reasons first (``evaluation.cot_max_new_tokens``), so the next query carries that reasoning.
- ``search_o1``: Search-o1 (Li et al. 2025), a baseline of R1-Searcher++, Search-R1 and RAG-R1: the model reasons
  step by step and searches with ``<|begin_search_query|> q <|end_search_query|>`` (protocol ``search_o1``); each
  step's retrieved documents go through Reason-in-Documents, a separate call to the same model that sees the previous
  reasoning steps, the query and the documents and writes an analysis ending in "Final Information"; only that
  refined part is inserted, as ``<|begin_search_result|> ... <|end_search_result|>``, and reasoning goes on; the
  answer is the last ``\\boxed{}``. It runs on the rollout engine with Reason-in-Documents as its document step
  (``searchrl.eval.search_o1``), with Search-o1's own limits unless the evaluation sets them (10 searches, 15 turns,
  1,024 tokens a turn, where its script gives 8,192; past the search limit the model is told to answer, whatever the
  recipe's ``rollout.force_answer``). Like the authors' code: the previous steps are the response so far split into
  lines, keeping the first, the last three and every line that opens a search or a result ("..." for gaps); an
  analysis without "Final Information" inserts "No helpful information found."; a repeated query is not searched
  again. Deviations: our corpus passages (top-k) instead of full web pages from Bing, the run's top-k instead of its
  10; the engine's forced last turn (a turn cut by the per-turn budget gets the engine's invalid-action feedback
  instead of ending the run); decoding follows the evaluation settings (greedy by default) for both calls.
- ``agent``: the rollout engine with any protocol; the prediction is the trajectory's final answer.

Prompts are our own wording. Chat models get one user message through the chat template; base models (or
``prompt_style="raw"``) get the same text followed by a cue line (``Answer:``). Decoding is greedy by default.

``latency_s`` of a prediction is the wall time of the whole batched call divided by the batch size (amortised per
question, retrieval included; at batch size 1, ``evaluation.timing: single``, it is the question's own time);
``gen_tokens`` counts the tokens the model generated for that question. ``searches`` counts search calls and
``queries`` the queries they held: they differ only for RAG-R1's multi-query calls (several queries in one call,
which its paper counts as one retrieval). Sampling uses ``temperature`` and ``top_p`` (``evaluation.top_p``).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from searchrl.data.records import QAExample
from searchrl.eval.method import (
    Method,
    Prediction,
    answer_in_sentence,
    answer_span,
    clean_answer,
    executed_queries,
    first_sentence,
    parse_cot,
    render_documents,
    render_prompt,
)
from searchrl.generation.base import Completion, Generator
from searchrl.protocols.base import Protocol
from searchrl.retrieval.base import Hit, Retriever
from searchrl.rollout.engine import RolloutEngine, RolloutLimits

DIRECT_PROMPT = (
    "Answer the question below. Reply with the answer only: a name, date, number or short phrase, with no "
    "explanation.\n\nQuestion: {question}"
)
COT_PROMPT = (
    "Answer the question below. First think it through step by step. Then, on the last line, write "
    "'Final answer: ' followed by the answer only (a name, date, number or short phrase).\n\nQuestion: {question}"
)
RAG_PROMPT = (
    "Answer the question below using the documents. Reply with the answer only: a name, date, number or short "
    "phrase, with no explanation.\n\nDocuments:\n{documents}\n\nQuestion: {question}"
)
IRCOT_PROMPT = (
    "Answer the question below using the documents. Reason one short sentence at a time. As soon as you know the "
    "answer, write a sentence of the form 'So the answer is: <answer>.'\n\nDocuments:\n{documents}\n\n"
    "Question: {question}"
)
FINAL_ANSWER_CUE = "So the answer is:"

#: stop strings that end one IRCoT reasoning sentence (the sentence is cut precisely afterwards).
SENTENCE_STOPS = (". ", ".\n", "\n")


class ShortAnswerMethod(Method):
    """A method whose prompt asks for the answer only: the prediction is the reply's first line, or with
    ``answer_span`` (``evaluation.answer_span``, on by default) the answer span read out of a reply that came as a
    sentence (:func:`~searchrl.eval.method.answer_span`)."""

    def __init__(self, generator: Generator, *, answer_span: bool = True, **kwargs: Any) -> None:
        super().__init__(generator, **kwargs)
        self.answer_span = answer_span

    def _short(self, reply: str, question: str) -> str | None:
        return answer_span(reply, question) if self.answer_span else clean_answer(reply)


class DirectMethod(ShortAnswerMethod):
    """The question alone; the answer is the first line of the reply (or the span read out of it)."""

    name = "direct"

    def answer(self, examples: Sequence[QAExample]) -> list[Prediction]:
        t0 = time.perf_counter()
        texts = [
            render_prompt(self.tokenizer, DIRECT_PROMPT.format(question=e.question.strip()), self.prompt_style)
            for e in examples
        ]
        comps = self._generate(texts, self.max_new_tokens)
        preds = [
            Prediction(self._short(c.text, e.question), raw=c.text, gen_tokens=len(c.token_ids))
            for e, c in zip(examples, comps, strict=True)
        ]
        return self._stamp(preds, t0)


class CoTMethod(Method):
    """Step-by-step reasoning, then ``Final answer: ...`` on the last line."""

    name = "cot"

    def answer(self, examples: Sequence[QAExample]) -> list[Prediction]:
        t0 = time.perf_counter()
        texts = [
            render_prompt(
                self.tokenizer, COT_PROMPT.format(question=e.question.strip()), self.prompt_style, raw_cue="Reasoning:"
            )
            for e in examples
        ]
        comps = self._generate(texts, self.max_new_tokens)
        preds = []
        for c in comps:
            text, marker = parse_cot(c.text)
            trace = {"marker_found": marker, "finish_reason": c.finish_reason}
            preds.append(Prediction(text, raw=c.text, trajectory=trace, gen_tokens=len(c.token_ids)))
        return self._stamp(preds, t0)


class NaiveRAGMethod(ShortAnswerMethod):
    """Retrieve top-k once with the question, put the documents in the prompt, answer."""

    name = "naive_rag"
    needs_retriever = True

    def __init__(self, generator: Generator, retriever: Retriever, *, topk: int = 3, **kwargs: Any) -> None:
        super().__init__(generator, **kwargs)
        if topk < 1:
            raise ValueError(f"naive_rag: topk must be >= 1 (got {topk})")
        self.retriever = retriever
        self.topk = topk

    def answer(self, examples: Sequence[QAExample]) -> list[Prediction]:
        t0 = time.perf_counter()
        hits = self.search([e.question for e in examples], self.topk)  # one call for the batch
        texts = [
            render_prompt(
                self.tokenizer,
                RAG_PROMPT.format(documents=render_documents(hs), question=e.question.strip()),
                self.prompt_style,
            )
            for e, hs in zip(examples, hits, strict=True)
        ]
        comps = self._generate(texts, self.max_new_tokens)
        preds = [
            Prediction(
                self._short(c.text, e.question),
                raw=c.text,
                trajectory={
                    "queries": [e.question],
                    "hit_ids": [[h.id for h in hs]],
                    "docs": [h.contents for h in hs],  # what the diagnostics search for the gold
                },
                searches=1,
                queries=1,
                gen_tokens=len(c.token_ids),
            )
            for e, hs, c in zip(examples, hits, comps, strict=True)
        ]
        return self._stamp(preds, t0)


class IterativeRAGMethod(Method):
    """IRCoT-style interleaving of one reasoning sentence and one retrieval (see the module docstring)."""

    name = "iterative_rag"
    needs_retriever = True

    def __init__(
        self,
        generator: Generator,
        retriever: Retriever,
        *,
        topk: int = 3,
        max_steps: int = 4,
        max_docs: int = 15,
        **kwargs: Any,
    ) -> None:
        super().__init__(generator, **kwargs)
        if topk < 1 or max_steps < 1 or max_docs < 1:
            raise ValueError("iterative_rag: topk, max_steps and max_docs must all be >= 1")
        self.retriever = retriever
        self.topk = topk
        self.max_steps = max_steps
        self.max_docs = max_docs  # IRCoT caps the accumulated paragraphs (at 15 in its paper)

    def _add_docs(self, docs: list[Hit], new: Sequence[Hit]) -> None:
        seen = {d.id for d in docs}
        for h in new:
            if h.id not in seen and len(docs) < self.max_docs:
                docs.append(h)
                seen.add(h.id)

    def _prompt(self, ex: QAExample, docs: list[Hit], sentences: list[str], cue: str = "") -> str:
        user = IRCOT_PROMPT.format(documents=render_documents(docs), question=ex.question.strip())
        prefill = " ".join([*sentences, cue]).strip()
        if prefill and not cue:
            prefill += " "  # the next sentence starts after a space
        return render_prompt(self.tokenizer, user, self.prompt_style, raw_cue="Reasoning:", prefill=prefill)

    def answer(self, examples: Sequence[QAExample]) -> list[Prediction]:
        t0 = time.perf_counter()
        n = len(examples)
        docs: list[list[Hit]] = [[] for _ in range(n)]
        for i, hs in enumerate(self.search([e.question for e in examples], self.topk)):
            self._add_docs(docs[i], hs)
        sentences: list[list[str]] = [[] for _ in range(n)]
        steps: list[list[dict[str, Any]]] = [[] for _ in range(n)]
        raw = [""] * n
        answers: list[str | None] = [None] * n
        done = [False] * n
        tokens = [0] * n
        searches = [1] * n
        active = list(range(n))
        for step in range(self.max_steps):
            if not active:
                break
            comps = self._generate(
                [self._prompt(examples[i], docs[i], sentences[i]) for i in active],
                self.max_new_tokens,
                stop=SENTENCE_STOPS,
                step=step,
            )
            to_search: list[int] = []
            for i, c in zip(active, comps, strict=True):
                tokens[i] += len(c.token_ids)
                raw[i] += c.text
                sentence = first_sentence(c.text)
                steps[i].append({"sentence": sentence, "query": None, "hit_ids": []})
                if not sentence:  # the model has nothing more to say: go to the final answer
                    continue
                sentences[i].append(sentence)
                found = answer_in_sentence(sentence)
                if found is not None:
                    answers[i], done[i] = found or None, True
                else:
                    to_search.append(i)
            if to_search:  # one retriever call for every sentence of this step
                for i, hs in zip(
                    to_search, self.search([sentences[i][-1] for i in to_search], self.topk), strict=True
                ):
                    steps[i][-1].update(query=sentences[i][-1], hit_ids=[h.id for h in hs])
                    searches[i] += 1
                    self._add_docs(docs[i], hs)
            active = to_search
        forced = [i for i in range(n) if not done[i]]
        if forced:  # one last generation, prefilled with the answer cue
            comps = self._generate(
                [self._prompt(examples[i], docs[i], sentences[i], cue=FINAL_ANSWER_CUE) for i in forced],
                self.max_new_tokens,
                stop=("\n",),
                step=self.max_steps,
            )
            for i, c in zip(forced, comps, strict=True):
                tokens[i] += len(c.token_ids)
                raw[i] += f" {FINAL_ANSWER_CUE}{c.text}"
                answers[i] = clean_answer(c.text)
        preds = [
            Prediction(
                answers[i],
                raw=raw[i],
                trajectory={
                    "steps": steps[i],
                    "doc_ids": [d.id for d in docs[i]],
                    "docs": [d.contents for d in docs[i]],
                    "forced_answer": not done[i],
                },
                searches=searches[i],
                queries=searches[i],
                gen_tokens=tokens[i],
            )
            for i in range(n)
        ]
        return self._stamp(preds, t0)


ITER_RETGEN_PROMPT = (
    "Answer the question below using the documents. Think it through step by step. Then, on the last line, write "
    "'Final answer: ' followed by the answer only (a name, date, number or short phrase).\n\nDocuments:\n"
    "{documents}\n\nQuestion: {question}"
)


class IterRetGenMethod(Method):
    """ITER-RETGEN: retrieval and generation in turns, each retrieval conditioned on the last generation."""

    name = "iter_retgen"
    needs_retriever = True

    def __init__(
        self, generator: Generator, retriever: Retriever, *, topk: int = 3, iterations: int = 3, **kwargs: Any
    ) -> None:
        super().__init__(generator, **kwargs)
        if topk < 1 or iterations < 1:
            raise ValueError("iter_retgen: topk and iterations must both be >= 1")
        self.retriever = retriever
        self.topk = topk
        self.iterations = iterations

    def answer(self, examples: Sequence[QAExample]) -> list[Prediction]:
        t0 = time.perf_counter()
        n = len(examples)
        outputs = [""] * n
        rounds: list[list[dict[str, Any]]] = [[] for _ in range(n)]
        tokens = [0] * n
        comps: list[Completion] = []
        for it in range(self.iterations):
            queries = [f"{e.question.strip()} {outputs[i]}".strip() for i, e in enumerate(examples)]
            hits = self.search(queries, self.topk)  # one call per round for the batch
            texts = [
                render_prompt(
                    self.tokenizer,
                    ITER_RETGEN_PROMPT.format(documents=render_documents(hs), question=e.question.strip()),
                    self.prompt_style,
                    raw_cue="Reasoning:",
                )
                for e, hs in zip(examples, hits, strict=True)
            ]
            comps = self._generate(texts, self.max_new_tokens, step=it)
            for i, (c, hs) in enumerate(zip(comps, hits, strict=True)):
                outputs[i] = " ".join(c.text.split())
                tokens[i] += len(c.token_ids)
                rounds[i].append({"query": queries[i], "hit_ids": [h.id for h in hs], "output": c.text})
        preds = []
        for i, c in enumerate(comps):
            text, marker = parse_cot(c.text)
            trace = {"rounds": rounds[i], "marker_found": marker}
            n = self.iterations
            preds.append(Prediction(text, raw=c.text, trajectory=trace, searches=n, queries=n, gen_tokens=tokens[i]))
        return self._stamp(preds, t0)


class AgentMethod(Method):
    """The rollout engine with a protocol; the prediction is the trajectory's final answer."""

    name = "agent"
    needs_retriever = True

    def __init__(
        self,
        generator: Generator,
        retriever: Retriever | None,
        protocol: Protocol,
        *,
        limits: RolloutLimits = RolloutLimits(),
        **kwargs: Any,
    ) -> None:
        super().__init__(generator, max_new_tokens=limits.max_new_tokens, **kwargs)
        self.protocol = protocol
        self.engine = RolloutEngine(generator, retriever, protocol, limits, self.prompt_style)

    def answer(self, examples: Sequence[QAExample]) -> list[Prediction]:
        t0 = time.perf_counter()
        trajs = self.engine.run(examples, group_size=1, temperature=self.temperature, top_p=self.top_p, seed=self.seed)
        preds = []
        for t in trajs:
            d = t.to_dict()
            raw = t.response_text(self.tokenizer)
            prompt_search = 1 if "prompt_docs" in t.metadata else 0  # rag: one search, with the question, before it
            preds.append(
                Prediction(
                    t.answer.strip() if t.answer is not None else None,
                    raw=raw,
                    trajectory=d,
                    searches=t.n_searches + prompt_search,
                    queries=executed_queries(t) + prompt_search,
                    gen_tokens=t.n_policy_tokens,
                    well_formed=t.format_report(self.protocol, self.tokenizer).ok,
                )
            )
        return self._stamp(preds, t0)
