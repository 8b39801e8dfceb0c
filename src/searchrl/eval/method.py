"""The evaluation-method interface (``Method.answer(examples) -> list[Prediction]``) and what the methods share:
reading a short answer out of a reply, rendering documents and prompts, counting the queries a trajectory ran."""

from __future__ import annotations

import re
import time
import zlib
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from searchrl.data.records import QAExample
from searchrl.generation.base import Completion, Generator, SamplingParams, mix_seed
from searchrl.generation.prompts import render_user_prompt, special_strings
from searchrl.retrieval.base import Hit, check_hits
from searchrl.rollout.trajectory import Trajectory, short
from searchrl.utils import console

_LABEL = re.compile(r"^\s*(?:final answer|the answer is|answer)\b\s*[:：]?\s*", re.IGNORECASE)
_FINAL = re.compile(r"final answer\s*[:：]\s*(.*)", re.IGNORECASE)
_ANSWER_IS = re.compile(r"the answer is\s*[:：]?\s*(.*)", re.IGNORECASE | re.DOTALL)
#: a sentence end: ".", "!" or "?" before whitespace, or a newline; a "." after an initial ("Robert F. Hill"), an
#: abbreviation ("St. Louis", "Washington, D.C. is") or before a lower-case word ends nothing
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=(\S?)(\w*))|\n")
#: words that start a new sentence even after an abbreviation ("... F.T.A. The film ...")
_STARTERS = frozenset("The A An He She It They This That These Those His Her Its Their There So But In On".split())
_ABBREVIATION = re.compile(
    r"(?:^|[\s(])(?:[A-Za-z]|(?:[A-Za-z]\.)+[A-Za-z]|St|Mt|Ft|Dr|Mr|Mrs|Ms|Jr|Sr|No|Nos|vs|Co|Corp|Inc|Ltd|Bros|Gen|"
    r"Col|Lt|Sgt|Capt|Adm|Gov|Sen|Rep|Prof|Rev|Hon|Ave|Blvd|Rd|Jan|Feb|Mar|Apr|Aug|Sept?|Oct|Nov|Dec|approx|ca)\.$"
)


@dataclass
class Prediction:
    """One method's output for one question."""

    text: str | None  # the extracted answer; None when the method produced none
    raw: str = field(default="", repr=False)  # everything the model generated for this question (decoded)
    #: agent: Trajectory.to_dict(); RAG methods: retrieval trace
    trajectory: dict[str, Any] | None = field(default=None, repr=False)
    searches: int = 0  # search calls made for this question (one call may hold several queries)
    queries: int = 0  # queries those search calls held
    gen_tokens: int = 0  # tokens the model generated for this question
    latency_s: float = 0.0  # batch wall time / batch size
    well_formed: bool | None = None  # agent methods: the protocol's own format check of the whole response; else None

    def __repr__(self) -> str:
        """A summary: the answer, how an agent's trajectory ended, and counts (the raw text and trace stay out)."""
        stop = (self.trajectory or {}).get("stop_reason")
        return (
            f"Prediction(text={short(self.text)!r}, raw={short(self.raw, 40)!r}"
            + (f", stop={stop!r}" if stop else "")
            + f", searches={self.searches}, queries={self.queries}, gen_tokens={self.gen_tokens}, "
            f"latency_s={self.latency_s:.3g}, well_formed={self.well_formed})"
        )


_RULE = re.compile(r"[-=]{3,}")


def clean_answer(text: str | None) -> str | None:
    """The short answer in a reply: its first line holding more than decoration (emphasis, a rule), without an
    ``Answer:`` label, markdown emphasis, surrounding quotes or a final period (a line holding the label alone is
    followed by its answer's line). None when nothing is left.

    >>> clean_answer("\\n Answer: **Paris**.\\nIt is the capital.")
    'Paris'
    >>> clean_answer("The answer is:\\nParis"), clean_answer("**\\nParis**"), clean_answer("   ") is None
    ('Paris', 'Paris', True)
    """
    if text is None:
        return None
    # Emphasis, quotes and a final period around the label and the answer; the metrics' normalisation drops them
    # anyway, but the predictions file should show the answer itself.
    decor = " \t*_`\"'“”‘’."
    for line in (ln.strip(decor) for ln in text.splitlines()):
        if not line or _RULE.fullmatch(line):  # "**" or a markdown rule ("---") alone on a line is no answer
            continue
        answer = _LABEL.sub("", line).strip(decor)
        if answer or not _LABEL.match(line):  # a bare "Answer:" line: the answer is on the next one
            return answer or None
    return None


_COPULA = re.compile(r"\b(?:is|was|are|were)\b", re.IGNORECASE)
_PREPOSITION = re.compile(r"\b(?:on|in|at|by|from)\b", re.IGNORECASE)
#: "The document states that ..." and the like, before the sentence that holds the answer
_SOURCE_LEAD = re.compile(
    r"^(?:according to )?(?:the |these |this )?(?:documents?|texts?|passages?|context)"
    r"(?:\s+(?:states?|says?|mentions?|shows?|indicates?|suggests?)(?:\s+that)?)?[\s,:]+",
    re.IGNORECASE,
)
#: irregular past participles a restating sentence puts before "by" / "in" / ... ("written by X", "sung by X"); none
#: that is also a common base form (come, run, put, ...), which titles open with ("Come on Eileen")
_IRREGULAR = (
    "born|made|built|held|known|set|written|sung|given|taken|drawn|shown|sworn|grown|thrown|chosen|spoken|stolen|"
    "driven|ridden|beaten|broken|frozen|hidden|bitten|eaten|fallen|forgotten|begun|won|led|met|sent|spent|lost|"
    "sold|told|found|bound|shot|hung|fought|bought|brought|taught|thought|caught|sought|laid|paid|said|kept|left|"
    "felt|dealt|meant|struck|stuck|sunk|sprung|swum|done|seen|gone|overseen"
)
#: "born in X", "buried at X", "written by X", "first sung by X", "in X" -> "X": a participle in lower case (a
#: capitalised word opens a title: "Paid in Full", "Gone in 60 Seconds"), an adverb before it, then a preposition
_PARTICIPLE_LEAD = re.compile(
    rf"^(?:(?:\w+ly\s+|first\s+|later\s+|also\s+)?(?-i:[a-z]\w*ed|{_IRREGULAR})\s+)?(?:on|in|at|by|from|as)\s+",
    re.IGNORECASE,
)
#: a question answered yes or no, and a reply that starts with the answer ("Yes, Zurich is ...")
_YES_NO_QUESTION = re.compile(
    r"^\s*(?:is|are|was|were|do|does|did|can|could|has|have|had|will|would|should|shall|may|might)\b", re.IGNORECASE
)
_YES_NO_LEAD = re.compile(r"^\W*(yes|no)\b(?=\s*(?:[,.;:!]|$))", re.IGNORECASE)
#: where an answer span restated as a sentence ends: a clause after it
_CLAUSE = re.compile(
    r"(?:(?<!\d),|,(?!\s?\d))"  # not the comma of a number (12,000) or a date (May 5, 1950)
    r"(?!\s*(?:Jr\.|Sr\.|(?:[A-Z]\.)+(?=\s*$|[,;])))|;"  # nor that of "Washington, D.C."
    r"|\s(?:because|which|who|since|while|whereas|and (?:he|she|it|they))\s",
    re.IGNORECASE,
)
_STOPWORDS = frozenset(
    "the a an of in on at to for by from with and or is was are were what who whom whose which".split()
)


def _content_words(text: str) -> list[str]:
    return [w for w in re.findall(r"[\w'’-]+", text.lower()) if w not in _STOPWORDS]


def _restates(text: str, question_words: set[str]) -> bool:
    """Most content words of ``text`` come from the question (the reply restates it there)."""
    words = _content_words(text)
    return bool(words) and sum(w in question_words for w in words) >= 0.5 * len(words)


def answer_span(reply: str | None, question: str) -> str | None:
    """The short answer in a reply that came as a sentence despite the answer-only instruction (small models often
    restate the question): the text after "the answer is", else, after a leading "The document states that", when
    one side of the first sentence's first copula (is / was / are / were) restates the question, the other side,
    else the text after the first preposition (on / in / at / by / from) whose left side restates the question
    ("X's father died on 3 May 1900" -> "3 May 1900"); the span ends at its next clause and loses a leading "born
    in" / "written by" / "in". A yes/no question's reply that starts with "Yes," or "No." is that word. A reply of at
    most four words, or one that fits no pattern, is :func:`clean_answer`'s first line.

    >>> q = "Who is the father of Emperor Taizong of Song?"
    >>> answer_span("The father of Emperor Taizong of Song is Zhao Hongyin, a general.", q)
    'Zhao Hongyin'
    >>> answer_span("Zhao Hongyin was the father of Emperor Taizong of Song.", q)
    'Zhao Hongyin'
    >>> answer_span("Zhao Hongyin", q), answer_span("He died in battle near the river.", q)
    ('Zhao Hongyin', 'He died in battle near the river')
    >>> answer_span("The document states that Anna's son died on 3 May 976.", "When did Anna's son die?")
    '3 May 976'
    """
    line = clean_answer(reply)
    if line is None:
        return None
    lines = [ln.strip() for ln in (reply or "").splitlines() if ln.strip()]
    first = lines[0] if clean_answer(lines[0]) or len(lines) == 1 else f"{lines[0]} {lines[1]}"  # "Answer:\nX"
    said = _ANSWER_IS.search(first)
    if _YES_NO_QUESTION.match(question) and (yes_no := _YES_NO_LEAD.match(line)):
        return yes_no.group(1)
    if said or _LABEL.match(first.strip(" \t*_`\"'“”‘’.")):  # "the answer is X" / "Answer: X", then a clause
        return clean_answer(_CLAUSE.split(said.group(1) if said else line)[0]) or line
    if len(line.split()) <= 4:
        return line
    sentence = _SOURCE_LEAD.sub("", first_sentence(line))
    question_words = set(_content_words(question))
    span = _split(sentence, _COPULA, question_words, both_ways=True) or _split(sentence, _PREPOSITION, question_words)
    if span is None:
        return line
    span = clean_answer(_PARTICIPLE_LEAD.sub("", _CLAUSE.split(span)[0].strip()))
    return span if span and re.search(r"\w", span) else line


def _split(sentence: str, at: re.Pattern[str], question_words: set[str], both_ways: bool = False) -> str | None:
    """The side of the first ``at`` match whose other side restates the question (``both_ways``: either side; else
    only the text after it, the first match that works); None when no match splits the sentence so."""
    for m in at.finditer(sentence):
        before, after = sentence[: m.start()], sentence[m.end() :]
        if _restates(before, question_words) and not _restates(after, question_words):
            return after
        if both_ways:
            return before if _restates(after, question_words) and not _restates(before, question_words) else None
    return None


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
    >>> first_sentence("It was directed by Robert F. Hill in St. Louis. Then"), first_sentence("Washington, D.C. is")
    ('It was directed by Robert F. Hill in St. Louis.', 'Washington, D.C. is')
    """
    for m in _SENTENCE_END.finditer(text):
        before = text[: m.start()]
        if (
            "\n" in m.group(0)
            or not before.endswith(".")
            or not (m.group(1).islower() or _ABBREVIATION.search(before))
            or m.group(1) + m.group(2) in _STARTERS
        ):
            return before.strip()
    return text.strip()


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


#: One user message through the chat template, or raw text plus a cue line; ``prefill`` opens the model's reply
#: (IRCoT's reasoning so far). The renderer lives in ``searchrl.generation.prompts``.
render_prompt = render_user_prompt


def context_window(generator: Generator) -> int | None:
    """The tokens a local model's positions reach (its config's ``max_position_embeddings``); None when the
    generator does not say (a served model, a scripted one)."""
    config = getattr(getattr(generator, "model", None), "config", None)
    n = getattr(config, "max_position_embeddings", None)
    return n if isinstance(n, int) and n > 0 else None


def executed_queries(traj: Trajectory) -> int:
    """Queries of the search calls that ran (a refused or repeated call's queries are not counted)."""
    return sum(len(t.queries) for t in traj.turns if t.action == "search")


class Method(ABC):
    """An evaluation method: a batch of questions in, one prediction per question out (same order)."""

    name: ClassVar[str]
    #: answers from retrieved documents (a run without a retriever cannot evaluate it).
    needs_retriever: ClassVar[bool] = False

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
        self._special = special_strings(self.tokenizer)  # blanked in documents (search)

    def search(self, queries: list[str], k: int) -> list[list[Hit]]:
        """The method's retriever's top ``k`` hits for each of ``queries`` in one call, checked as the rollout
        engine checks them (:func:`~searchrl.retrieval.base.check_hits`): a retriever's wrong shape is a one-line
        error, and the tokenizer's special-token strings in a document are blanked, so a document cannot pass
        control tokens (a turn's end, a role) into the prompt."""
        retriever = self.retriever  # type: ignore[attr-defined]
        return check_hits(retriever.search(queries, k), len(queries), retriever, k, self._special)

    @abstractmethod
    def answer(self, examples: Sequence[QAExample]) -> list[Prediction]:
        """Answer a batch of questions: one :class:`Prediction` per example, in order, with the short answer
        (``text``; None when the reply held none), everything the model generated (``raw``), the searches it ran and
        its token and latency figures. Scoring against the gold answers is the harness's (:func:`evaluate`)."""

    def __repr__(self) -> str:
        """The method's name and what it wraps: its protocol, retriever and generator."""
        engine = getattr(self, "engine", None)  # the agent methods keep theirs in the rollout engine
        parts = [f"name={getattr(self, 'name', '?')!r}"]
        for attr in ("protocol", "retriever"):
            if (value := getattr(self, attr, None) or getattr(engine, attr, None)) is not None:
                parts.append(f"{attr}={value!r}")
        parts.append(f"generator={getattr(self, 'generator', None)!r}")
        return f"{type(self).__name__}({', '.join(parts)})"

    def _generate(
        self, texts: list[str], max_new_tokens: int, stop: tuple[str, ...] = (), step: int = 0
    ) -> list[Completion]:
        """One generate call for the whole batch (the seed is offset by the step so steps differ when sampling; each
        prompt samples from its own stream, so a question's tokens do not depend on its batch)."""
        prompts = [list(self.tokenizer.encode(t, add_special_tokens=False)) for t in texts]
        self._check_context(prompts, max_new_tokens)
        params = SamplingParams(
            max_new_tokens=max_new_tokens,
            temperature=self.temperature,
            top_p=self.top_p,
            stop=stop,
            seed=self.seed + step,
            row_seeds=tuple(mix_seed(self.seed, step, zlib.crc32(t.encode())) for t in texts),
        )
        return self.generator.generate(prompts, params)

    def _check_context(self, prompts: list[list[int]], max_new_tokens: int) -> None:
        """Warn, once per method, of prompts that with their new tokens run past the model's context: a model reads
        positions beyond it as noise, and its answers would be scored as if it had read the documents."""
        window = context_window(self.generator)
        over = [len(p) for p in prompts if window is not None and len(p) + max_new_tokens > window]
        if over and not getattr(self, "_context_warned", False):
            self._context_warned = True
            console.log(
                f"[yellow]warning:[/yellow] {self.name}: {len(over)} of {len(prompts)} prompts (up to {max(over)} "
                f"tokens, with {max_new_tokens} new ones) run past the model's context of {window} tokens, so their "
                "answers are unreliable: cut the corpus's documents into passages (index build --max-words 100) or "
                "lower evaluation.topk"
            )

    @staticmethod
    def _stamp(preds: list[Prediction], t0: float) -> list[Prediction]:
        per_question = (time.perf_counter() - t0) / max(len(preds), 1)
        for p in preds:
            p.latency_s = per_question
        return preds
