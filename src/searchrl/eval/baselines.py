"""Evaluation methods behind one interface: ``answer(examples) -> list[Prediction]``.

Seven methods, all batched through the ``Generator`` interface (one generate call per step for the whole batch) and
the ``Retriever`` interface (at most one retriever call per step):

- ``direct``: the question and a short-answer instruction; the first line of the reply is the answer.
- ``cot``: the model reasons step by step and writes ``Final answer: ...`` on its last line; we read the last such
  line (or, when the marker is missing, the last non-empty line).
- ``naive_rag``: top-k documents retrieved once with the question go into the prompt; then as ``direct``.
- ``iterative_rag``: IRCoT (Trivedi et al. 2023) in a compact form: retrieve with the question, then alternate
  "generate one reasoning sentence" and "retrieve with that sentence", accumulating documents, for at most
  ``max_steps`` sentences; stop as soon as a sentence contains "the answer is". Deviations from IRCoT: zero-shot
  (no few-shot demonstrations), and a question that has no "the answer is" sentence after ``max_steps`` (or whose
  model stops talking) gets one extra generation prefilled with "So the answer is:" instead of IRCoT's separate
  reader step.
- ``iter_retgen``: ITER-RETGEN (Shao et al. 2023), a baseline of R1-Searcher++ and R-Search: ``iterations`` rounds
  of "retrieve with the question plus the previous round's output, then answer with reasoning from those
  documents" (chain-of-thought with ``Final answer:``); the last round's answer is the prediction. Zero-shot.
- ``search_o1``: Search-o1 (Li et al. 2025), a baseline of R1-Searcher++, Search-R1 and RAG-R1: the model reasons
  step by step and searches with ``<|begin_search_query|> q <|end_search_query|>`` (protocol ``search_o1``); each
  step's retrieved documents go through Reason-in-Documents, a separate call to the same model that sees the
  previous reasoning steps, the query and the documents and writes an analysis ending in "Final Information"; only
  that refined part is inserted, as ``<|begin_search_result|> ... <|end_search_result|>``, and reasoning goes on;
  the answer is the last ``\\boxed{}``. It runs on the rollout engine (``SearchO1Engine``), so the limits are the
  agent's (``max_searches`` is the search limit, 10 in the paper; past it the model is told to answer). Like the
  authors' code: the previous steps are the response so far split into lines, keeping the first, the last four and
  every line with a search or result tag ("..." for gaps); an analysis without "Final Information" inserts "No
  helpful information found."; a repeated query is not searched again. Deviations: our corpus passages (top-k)
  instead of full web pages from Bing; the agent's token budgets and forced last turn (a turn cut by the per-turn
  budget gets the engine's invalid-action feedback instead of ending the run); decoding follows the evaluation
  settings (greedy by default) for both calls.
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

import dataclasses
import re
import time
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from searchrl.data.records import QAExample
from searchrl.generation.base import Completion, Generator, SamplingParams
from searchrl.protocols.base import Protocol
from searchrl.protocols.search_o1 import QUERY, RESULT, SearchO1Protocol
from searchrl.retrieval.base import Hit, Retriever
from searchrl.rollout.engine import RolloutEngine, RolloutLimits
from searchrl.rollout.trajectory import Trajectory, Turn

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

_LABEL = re.compile(r"^\s*(?:final answer|the answer is|answer)\s*[:：]?\s*", re.IGNORECASE)
_FINAL = re.compile(r"final answer\s*[:：]\s*(.*)", re.IGNORECASE)
_ANSWER_IS = re.compile(r"the answer is\s*[:：]?\s*(.*)", re.IGNORECASE | re.DOTALL)
_SENTENCE_END = re.compile(r"(?<=[.!?])\s|\n")
#: stop strings that end one IRCoT reasoning sentence (the sentence is cut precisely afterwards).
SENTENCE_STOPS = (". ", ".\n", "\n")


@dataclass
class Prediction:
    """One method's output for one question."""

    text: str | None  # the extracted answer; None when the method produced none
    raw: str = ""  # everything the model generated for this question (decoded)
    trajectory: dict[str, Any] | None = None  # agent: Trajectory.to_dict(); RAG methods: retrieval trace
    searches: int = 0  # search calls made for this question (one call may hold several queries)
    queries: int = 0  # queries those search calls held
    gen_tokens: int = 0  # tokens the model generated for this question
    latency_s: float = 0.0  # batch wall time / batch size
    well_formed: bool | None = None  # agent methods: the protocol's own format check of the whole response; else None


def clean_answer(text: str | None) -> str | None:
    """The short answer in a reply: its first non-empty line, without an ``Answer:`` label, markdown emphasis,
    surrounding quotes or a final period. None when nothing is left.

    >>> clean_answer("\\n Answer: **Paris**.\\nIt is the capital.")
    'Paris'
    >>> clean_answer("   ") is None
    True
    """
    if text is None:
        return None
    # Emphasis, quotes and a final period around the label and the answer; the metrics' normalisation drops them
    # anyway, but the predictions file should show the answer itself.
    decor = " \t*_`\"'“”‘’."
    line = next((ln for ln in text.splitlines() if ln.strip()), "")
    line = _LABEL.sub("", line.strip(decor)).strip(decor)
    return line or None


def parse_cot(text: str) -> tuple[str | None, bool]:
    """(answer, marker_found): the text after the last ``Final answer:`` marker, else the last non-empty line.

    >>> parse_cot("Paris is in France.\\nFinal answer: France")
    ('France', True)
    >>> parse_cot("I think it is\\nRome.")
    ('Rome', False)
    """
    found = _FINAL.findall(text)
    if found:
        return clean_answer(found[-1]), True
    lines = [ln for ln in text.splitlines() if ln.strip()]
    return (clean_answer(lines[-1]) if lines else None), False


def first_sentence(text: str) -> str:
    """The text up to the first sentence end (``.``/``!``/``?`` followed by whitespace) or newline, stripped.

    >>> first_sentence("Anna was born in Rome. She moved")
    'Anna was born in Rome.'
    """
    m = _SENTENCE_END.search(text)
    return (text[: m.start()] if m else text).strip()


def answer_in_sentence(sentence: str) -> str | None:
    """The answer of a sentence that contains "the answer is" ("" if nothing follows it); None otherwise.

    >>> answer_in_sentence("So the answer is: Rome."), answer_in_sentence("Anna was born in Rome.")
    ('Rome', None)
    """
    m = _ANSWER_IS.search(sentence)
    if m is None:
        return None
    return clean_answer(m.group(1)) or ""


def render_documents(hits: Sequence[Hit]) -> str:
    """Documents as numbered lines, in the layout Search-R1 uses for its observations."""
    return "\n".join(f"Doc {i} (Title: {h.title}) {h.text}" for i, h in enumerate(hits, start=1))


def render_prompt(tokenizer, user_text: str, style: str = "auto", raw_cue: str = "Answer:", prefill: str = "") -> str:
    """One user message through the chat template (chat models), or raw text plus a cue line (base models);
    ``prefill`` opens the model's reply (IRCoT's reasoning so far)."""
    use_chat = style == "chat" or (style == "auto" and getattr(tokenizer, "chat_template", None))
    if use_chat:
        messages = [{"role": "user", "content": user_text}]
        text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    else:
        text = f"{user_text}\n{raw_cue}" + (" " if prefill else "")
    return text + prefill


def executed_queries(traj: Trajectory) -> int:
    """Queries of the search calls that ran (a refused or repeated call's queries are not counted)."""
    return sum(len(t.queries) for t in traj.turns if t.action == "search")


class Method(ABC):
    """An evaluation method: a batch of questions in, one prediction per question out (same order)."""

    name: ClassVar[str]

    def __init__(
        self,
        generator: Generator,
        *,
        prompt_style: str = "auto",
        max_new_tokens: int = 64,
        temperature: float = 0.0,
        top_p: float = 1.0,
        seed: int = 0,
    ) -> None:
        if max_new_tokens < 1:
            raise ValueError(f"{self.name}: max_new_tokens must be >= 1 (got {max_new_tokens})")
        if not 0.0 < top_p <= 1.0:
            raise ValueError(f"{self.name}: top_p must be in (0, 1] (got {top_p})")
        self.generator = generator
        self.tokenizer = generator.tokenizer
        self.prompt_style = prompt_style
        self.max_new_tokens = max_new_tokens
        self.temperature = temperature
        self.top_p = top_p
        self.seed = seed

    @abstractmethod
    def answer(self, examples: Sequence[QAExample]) -> list[Prediction]: ...

    def _generate(
        self, texts: list[str], max_new_tokens: int, stop: tuple[str, ...] = (), step: int = 0
    ) -> list[Completion]:
        """One generate call for the whole batch (the seed is offset by the step so steps differ when sampling)."""
        prompts = [list(self.tokenizer.encode(t, add_special_tokens=False)) for t in texts]
        params = SamplingParams(
            max_new_tokens=max_new_tokens,
            temperature=self.temperature,
            top_p=self.top_p,
            stop=stop,
            seed=self.seed + step,
        )
        return self.generator.generate(prompts, params)

    @staticmethod
    def _stamp(preds: list[Prediction], t0: float) -> list[Prediction]:
        per_question = (time.perf_counter() - t0) / max(len(preds), 1)
        for p in preds:
            p.latency_s = per_question
        return preds


class DirectMethod(Method):
    """The question alone; the answer is the first line of the reply."""

    name = "direct"

    def answer(self, examples: Sequence[QAExample]) -> list[Prediction]:
        t0 = time.perf_counter()
        texts = [render_prompt(self.tokenizer, DIRECT_PROMPT.format(question=e.question.strip()), self.prompt_style)
                 for e in examples]  # fmt: skip
        comps = self._generate(texts, self.max_new_tokens)
        preds = [Prediction(clean_answer(c.text), raw=c.text, gen_tokens=len(c.token_ids)) for c in comps]
        return self._stamp(preds, t0)


class CoTMethod(Method):
    """Step-by-step reasoning, then ``Final answer: ...`` on the last line."""

    name = "cot"

    def answer(self, examples: Sequence[QAExample]) -> list[Prediction]:
        t0 = time.perf_counter()
        texts = [render_prompt(self.tokenizer, COT_PROMPT.format(question=e.question.strip()), self.prompt_style,
                               raw_cue="Reasoning:") for e in examples]  # fmt: skip
        comps = self._generate(texts, self.max_new_tokens)
        preds = []
        for c in comps:
            text, marker = parse_cot(c.text)
            trace = {"marker_found": marker, "finish_reason": c.finish_reason}
            preds.append(Prediction(text, raw=c.text, trajectory=trace, gen_tokens=len(c.token_ids)))
        return self._stamp(preds, t0)


class NaiveRAGMethod(Method):
    """Retrieve top-k once with the question, put the documents in the prompt, answer."""

    name = "naive_rag"

    def __init__(self, generator: Generator, retriever: Retriever, *, topk: int = 3, **kwargs: Any) -> None:
        super().__init__(generator, **kwargs)
        if topk < 1:
            raise ValueError(f"naive_rag: topk must be >= 1 (got {topk})")
        self.retriever = retriever
        self.topk = topk

    def answer(self, examples: Sequence[QAExample]) -> list[Prediction]:
        t0 = time.perf_counter()
        hits = self.retriever.search([e.question for e in examples], self.topk)  # one call for the batch
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
                clean_answer(c.text),
                raw=c.text,
                trajectory={"queries": [e.question], "hit_ids": [[h.id for h in hs]]},
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
        for i, hs in enumerate(self.retriever.search([e.question for e in examples], self.topk)):
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
                for i, hs in zip(to_search, self.retriever.search([sentences[i][-1] for i in to_search], self.topk),
                                 strict=True):  # fmt: skip
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
                trajectory={"steps": steps[i], "doc_ids": [d.id for d in docs[i]], "forced_answer": not done[i]},
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
            hits = self.retriever.search(queries, self.topk)  # one call per round for the batch
            texts = [
                render_prompt(self.tokenizer, ITER_RETGEN_PROMPT.format(documents=render_documents(hs),
                              question=e.question.strip()), self.prompt_style, raw_cue="Reasoning:")
                for e, hs in zip(examples, hits, strict=True)
            ]  # fmt: skip
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
            d["protocol"] = self.protocol.name
            raw = t.response_text(self.tokenizer)
            preds.append(
                Prediction(
                    t.answer.strip() if t.answer is not None else None,
                    raw=raw,
                    trajectory=d,
                    searches=t.n_searches,
                    queries=executed_queries(t),
                    gen_tokens=t.n_policy_tokens,
                    well_formed=self.protocol.check_format(raw).ok,
                )
            )
        return self._stamp(preds, t0)


# --------------------------------------------------------------------------------------------- Search-o1

REASON_IN_DOCUMENTS_PROMPT = (
    "You are helping a reasoning assistant that is answering a question step by step and has just run a search. "
    "Read the documents the search returned and work out what they say that helps with the current search query, "
    "given the reasoning so far.\n\n"
    "Guidelines:\n"
    "1. Go through the documents one by one and note what bears on the current search query.\n"
    "2. Keep only facts the documents actually state that are accurate, relevant to the query and useful for the "
    "next reasoning step.\n"
    "3. End your reply with a line that says Final Information, followed by those facts in a few short sentences. "
    "If the documents contain nothing useful, write 'No helpful information found.' after that line instead.\n\n"
    "Previous reasoning steps:\n{previous}\n\n"
    "Current search query: {query}\n\n"
    "Retrieved documents:\n{documents}\n\n"
    'Now analyse the documents for the current search query "{query}", in the light of the previous reasoning '
    "steps, and finish with the Final Information part."
)
NO_HELPFUL_INFORMATION = "No helpful information found."
_FINAL_INFORMATION = re.compile(r"final information", re.IGNORECASE)
_TEXT_WRAP = re.compile(r"^\\text\{(.*)\}$", re.DOTALL)


def previous_steps(response: str, keep_last: int = 4) -> str:
    """The reasoning so far for the Reason-in-Documents prompt: one numbered step per non-empty line; when there
    are more than ``keep_last + 1``, only the first, the last ``keep_last`` and those with a search or result tag
    are kept, each gap shown as ``...`` (the rule of Search-o1's code).

    >>> previous_steps("a\\nb\\n\\nc")
    'Step 1: a\\n\\nStep 2: b\\n\\nStep 3: c'
    >>> previous_steps("a\\nb\\nc\\nd", keep_last=1)
    'Step 1: a\\n\\n...\\n\\nStep 4: d'
    """
    lines = [ln.strip() for ln in response.split("\n") if ln.strip()]
    steps = [f"Step {i}: {line}" for i, line in enumerate(lines, start=1)]
    if len(steps) <= keep_last + 1:
        return "\n\n".join(steps)
    tags = (*QUERY, *RESULT)
    kept: list[str] = []
    for i, step in enumerate(steps):
        if i == 0 or i >= len(steps) - keep_last or any(tag in step for tag in tags):
            kept.append(step)
        elif kept[-1] != "...":
            kept.append("...")
    return "\n\n".join(kept)


def final_information(analysis: str) -> tuple[str, bool]:
    """(refined text, marker_found): what follows the last "Final Information" of a Reason-in-Documents reply
    (markdown emphasis and a colon around the marker dropped, whitespace collapsed); without the marker (or with
    nothing after it), "No helpful information found.", as in Search-o1's code.

    >>> final_information("Doc 1 is about X.\\n**Final Information**\\n\\nAnna was born in Rome.")
    ('Anna was born in Rome.', True)
    >>> final_information("I could not decide.")
    ('No helpful information found.', False)
    """
    found = list(_FINAL_INFORMATION.finditer(analysis))
    if not found:
        return NO_HELPFUL_INFORMATION, False
    text = " ".join(analysis[found[-1].end() :].strip(" \t\r\n*:：#`").split())
    return (text or NO_HELPFUL_INFORMATION), True


def unbox(content: str | None) -> str | None:
    """A ``\\boxed{}`` answer without a ``\\text{...}`` wrapper; None when empty.

    >>> unbox(" \\\\text{Rome} "), unbox("  ")
    ('Rome', None)
    """
    if content is None:
        return None
    text = content.strip()
    m = _TEXT_WRAP.match(text)
    return (m.group(1).strip() if m else text) or None


class SearchO1Engine(RolloutEngine):
    """The rollout engine with Search-o1's Reason-in-Documents between retrieval and insertion.

    Per turn, for the whole batch: ONE retriever call with every new query, then ONE generate call that refines
    each query's documents (prompt: previous reasoning steps, query, documents); the "Final Information" of each
    reply is inserted in the result tags. Repeated queries are not searched again. Each refinement is recorded in
    ``refinements[trajectory uid]``.
    """

    def __init__(
        self,
        generator: Generator,
        retriever: Retriever | None,
        protocol: SearchO1Protocol,
        limits: RolloutLimits = RolloutLimits(),
        prompt_style: str = "auto",
        *,
        refine_max_new_tokens: int = 512,
        keep_last_steps: int = 4,
    ) -> None:
        super().__init__(generator, retriever, protocol, limits, prompt_style)
        if refine_max_new_tokens < 1:
            raise ValueError(f"search_o1: refine_max_new_tokens must be >= 1 (got {refine_max_new_tokens})")
        self.protocol: SearchO1Protocol = protocol
        self.refine_max_new_tokens = refine_max_new_tokens
        self.keep_last_steps = keep_last_steps
        self.refinements: dict[str, list[dict[str, Any]]] = {}
        self._sampling: tuple[float, float, int | None] = (0.0, 1.0, None)
        self._n_refine_calls = 0

    def run(
        self,
        examples: Sequence[QAExample],
        group_size: int = 1,
        temperature: float = 1.0,
        top_p: float = 1.0,
        seed: int | None = None,
        group_prefix: str = "",
    ) -> list[Trajectory]:
        self.refinements, self._sampling, self._n_refine_calls = {}, (temperature, top_p, seed), 0
        return super().run(examples, group_size, temperature, top_p, seed, group_prefix)

    def _refine_prompt(self, traj: Trajectory, query: str, hits: list[Hit]) -> list[int]:
        previous = previous_steps(traj.response_text(self.tokenizer), self.keep_last_steps)
        user = REASON_IN_DOCUMENTS_PROMPT.format(previous=previous, query=query, documents=render_documents(hits))
        return self._encode(render_prompt(self.tokenizer, user, self.prompt_style, raw_cue="Analysis:"))

    def _observe(self, searches: list[tuple[Trajectory, Turn, tuple[str, ...]]], timing: dict[str, float]) -> None:
        fresh: list[tuple[Trajectory, Turn, str]] = []
        for traj, turn, queries in searches:
            searched = {q for t in traj.turns if t is not turn and t.action == "search" for q in t.queries}
            if queries[0] in searched:
                turn.action = "search_repeated"  # not executed, not counted against the search limit
                turn.observation = self.protocol.repeated_query_text()
                turn.n_obs_tokens = self._insert(traj, turn.observation)
            else:
                fresh.append((traj, turn, queries[0]))
        if not fresh:
            return
        hits, dt = self._retrieve([q for _, _, q in fresh], timing)
        prompts = [self._refine_prompt(traj, q, hs) for (traj, _, q), hs in zip(fresh, hits, strict=True)]
        temperature, top_p, seed = self._sampling
        params = SamplingParams(
            max_new_tokens=self.refine_max_new_tokens,
            temperature=temperature,
            top_p=top_p,
            seed=None if seed is None else seed + 10_000 + self._n_refine_calls,
        )
        self._n_refine_calls += 1
        t0 = time.perf_counter()
        comps = self.generator.generate(prompts, params)  # ONE refinement call for the batch
        dt_refine = time.perf_counter() - t0
        timing["refine_s"] = timing.get("refine_s", 0.0) + dt_refine
        timing["refine_tokens"] = timing.get("refine_tokens", 0.0) + sum(len(c.token_ids) for c in comps)
        for (traj, turn, q), hs, c in zip(fresh, hits, comps, strict=True):
            refined, found = final_information(c.text)
            turn.hit_ids = [[h.id for h in hs]]
            turn.observation = self.protocol.format_result(refined)
            turn.n_obs_tokens = self._insert(traj, turn.observation)
            turn.timings.update(retrieve_s=dt, refine_s=dt_refine)
            self.refinements.setdefault(traj.uid, []).append(
                {"query": q, "hit_ids": turn.hit_ids[0], "refined": refined, "marker_found": found,
                 "analysis": c.text, "gen_tokens": len(c.token_ids), "finish_reason": c.finish_reason}
            )  # fmt: skip


class SearchO1Method(Method):
    """Search-o1: reasoning with search calls, retrieved documents refined by Reason-in-Documents (see above)."""

    name = "search_o1"

    def __init__(
        self,
        generator: Generator,
        retriever: Retriever,
        *,
        limits: RolloutLimits = RolloutLimits(),
        max_searches: int | None = None,
        refine_max_new_tokens: int = 512,
        **kwargs: Any,
    ) -> None:
        if max_searches is not None:  # the search limit; by default the rollout limits' max_searches
            limits = dataclasses.replace(limits, max_searches=max_searches)
        super().__init__(generator, max_new_tokens=limits.max_new_tokens, **kwargs)
        self.protocol = SearchO1Protocol(max_searches=limits.max_searches)  # the prompt states the limit
        self.engine = SearchO1Engine(generator, retriever, self.protocol, limits, self.prompt_style,
                                     refine_max_new_tokens=refine_max_new_tokens)  # fmt: skip

    def answer(self, examples: Sequence[QAExample]) -> list[Prediction]:
        t0 = time.perf_counter()
        trajs = self.engine.run(examples, group_size=1, temperature=self.temperature, top_p=self.top_p, seed=self.seed)
        preds = []
        for t in trajs:
            response = t.response_text(self.tokenizer)
            report = self.protocol.check_format(response)  # the answer: the last \boxed{} outside inserted results
            refinements = self.engine.refinements.get(t.uid, [])
            d = t.to_dict()
            d.update(
                protocol=self.protocol.name, reason_in_documents=refinements, format_problems=list(report.problems)
            )
            preds.append(
                Prediction(
                    unbox(report.answer),
                    raw=response,
                    trajectory=d,
                    searches=t.n_searches,
                    queries=executed_queries(t),
                    gen_tokens=t.n_policy_tokens + sum(r["gen_tokens"] for r in refinements),
                    well_formed=report.ok,
                )
            )
        return self._stamp(preds, t0)


METHODS: dict[str, type[Method]] = {
    m.name: m
    for m in (
        DirectMethod,
        CoTMethod,
        NaiveRAGMethod,
        IterativeRAGMethod,
        IterRetGenMethod,
        SearchO1Method,
        AgentMethod,
    )
}
#: methods that need a retriever
RETRIEVAL_METHODS = frozenset({"naive_rag", "iterative_rag", "iter_retgen", "search_o1", "agent"})
