"""What every method's text protocol provides to the rollout engine and to the rewards.

A protocol owns the text conventions of one paper: the prompt (our own wording, the paper's tags and rules), the
stop strings that end a generation turn at a search call, the parser that turns one turn's text into an action,
the renderer that turns retrieved hits into the observation text inserted into the rollout, the feedback text for
an invalid action, and a format checker over a whole response.

Parsers never raise: any text maps to ``Search``, ``Answer`` or ``Invalid``.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from searchrl.generation.prompts import reply_opening
from searchrl.retrieval.base import Hit


@dataclass(frozen=True)
class Search:
    queries: tuple[str, ...]  # one for most protocols; up to N for RAG-R1's multi-query mode


@dataclass(frozen=True)
class Answer:
    text: str


@dataclass(frozen=True)
class Invalid:
    reason: str


Action = Search | Answer | Invalid


@dataclass(frozen=True)
class FormatReport:
    """Structured result of a format check; format rewards read it, logs show ``problems``."""

    ok: bool
    has_answer: bool
    answer: str | None
    n_searches: int
    problems: tuple[str, ...] = ()
    extra: dict[str, Any] = field(default_factory=dict)  # protocol-specific counts (e.g. internal steps, evidence)


#: ``scheme(report, n_searches, evidence, **params) -> score``: one paper's format reward over its protocol's
#: :class:`FormatReport` (``evidence``: the response's evidence block, for protocols that have one).
FormatScheme = Callable[..., float]
#: scheme name -> (scheme, params check): filled by the protocol modules (:func:`format_scheme`), read by the format
#: reward component (``searchrl.rewards.components.format_reward``, param ``paper``).
FORMAT_SCHEMES: dict[str, tuple[FormatScheme, Callable[..., None] | None]] = {}


def format_scheme(name: str, check: Callable[..., None] | None = None) -> Callable[[FormatScheme], FormatScheme]:
    """Register a paper's format reward under ``name``; ``check(**params)`` validates its params up front."""

    def register(fn: FormatScheme) -> FormatScheme:
        if name in FORMAT_SCHEMES:
            raise ValueError(f"format scheme '{name}' is registered twice; give the new one another name")
        FORMAT_SCHEMES[name] = (fn, check)
        return fn

    return register


class Protocol(ABC):
    """One paper's text protocol. Subclasses are small: tags, prompt, parser, renderer, checker."""

    name: str
    #: generation stops right after any of these strings (the end of a search call).
    stop_strings: tuple[str, ...]
    #: most queries one search call may carry (RAG-R1 multi-query mode: > 1).
    max_queries: int = 1
    #: optional extra stop strings that end a final answer (e.g. "</answer>"), so a model that keeps writing after
    #: its answer does not run to the token limit; () when the answer has no closing string (``\boxed{}``).
    answer_stop_strings: tuple[str, ...] = ()
    #: text that opens the assistant turn as part of the prompt (never sampled, never in the response), e.g.
    #: R1-Searcher's code pre-fills "<think>". The engine appends it after the chat template / raw prompt.
    response_prefix: str = ""
    #: the chat template's own opening of the reply, when its generation prompt ends by opening one of the protocol's
    #: tags (:meth:`opening_tags`; DeepSeek-R1-Distill's ends ``<think>\\n``), found by :meth:`bind_tokenizer`; ""
    #: otherwise. Prompt text like ``response_prefix``: never sampled, read by format checks as the response's start.
    template_opening: str = ""
    #: the text that opens the final answer inside a turn (R1-Searcher++: ``\\boxed``); "" when not marked so.
    answer_marker: str = ""
    #: the rollout engine retrieves ``retrieval.topk`` documents with each question before the first turn and builds
    #: the prompt from ``frame_question(question, hits)`` (the ``rag`` baseline protocol); False for the others.
    prompt_documents: bool = False
    #: False for a protocol that never searches during the rollout (the ``reason`` and ``rag`` baselines).
    searches: bool = True
    #: how ``searchrl eval`` scores this protocol's answers under ``normalize: auto``: (answer normalisation,
    #: cover-EM boundary). The built-in protocols' are ``searchrl.eval.scoring.EVAL_CONVENTIONS``, which a subclass
    #: of one inherits unless it sets this.
    eval_convention: tuple[str, str] = ("squad", "word")
    #: where each retrieved document starts in an inserted observation (:meth:`split_documents`): a regex with the
    #: document's number as group ``n`` when documents are numbered, and an alternative with group ``head`` where
    #: a multi-query observation starts one query's results; None: the observation is not cut into documents.
    document_start: re.Pattern[str] | None = None

    def __init__(self, **options: Any) -> None:
        self.options = options

    def __repr__(self) -> str:
        options = "".join(f", {k}={v!r}" for k, v in (getattr(self, "options", None) or {}).items())
        return f"{type(self).__name__}(name={getattr(self, 'name', '?')!r}{options})"

    @classmethod
    def options_from_rollout(cls, rollout: Any) -> dict[str, Any]:
        """Protocol options that follow the rollout config (``RolloutConfig``) unless ``rollout.options`` sets them,
        e.g. a prompt that states the search limit. None by default."""
        return {}

    def frame_question(self, question: str, hits: list[Hit]) -> str:
        """The text the prompt is built from when ``prompt_documents`` is set: the question with the documents
        retrieved for it. The question alone by default."""
        return question

    @abstractmethod
    def instruction(self, question: str) -> str:
        """The prompt text for one question (goes into one user message for chat models, raw for base models)."""

    def system_prompt(self) -> str | None:
        """Optional system message for chat models; None puts everything in the user turn."""
        return None

    def chat_messages(self, question: str) -> list[dict[str, str]]:
        """Messages for a chat template (instruct models): the optional system prompt, then the instruction."""
        system = self.system_prompt()
        user = {"role": "user", "content": self.instruction(question)}
        return [{"role": "system", "content": system}, user] if system else [user]

    def raw_prompt(self, question: str) -> str:
        """Plain prompt text for base models without a chat template."""
        system = self.system_prompt()
        return f"{system}\n\n{self.instruction(question)}" if system else self.instruction(question)

    def format_search(self, queries: list[str] | tuple[str, ...]) -> str:
        """The text of a well-formed search call (scripted models, SFT data, tests); inverse of ``parse``."""
        raise NotImplementedError(f"{type(self).__name__} does not define format_search")

    def format_answer(self, answer: str) -> str:
        """The text of a well-formed final answer; inverse of ``parse``."""
        raise NotImplementedError(f"{type(self).__name__} does not define format_answer")

    def format_reasoning(self, text: str) -> str:
        """Reasoning as the model writes it between actions (oracle / SFT data); free text by default."""
        return f"{text} "

    def format_recalled(self, text: str) -> str | None:
        """A step the model answers from its own knowledge, when the protocol marks such steps (R1-Searcher++'s
        internal answers); None when it does not (the text is then ordinary reasoning)."""
        return None

    def format_evidence(self, evidence: str) -> str:
        """The evidence block written before the answer; "" for protocols without one (R-Search has one)."""
        return ""

    @abstractmethod
    def parse(self, turn_text: str) -> Action:
        """The first action in one generated turn. Never raises."""

    @abstractmethod
    def render_observation(self, queries: list[str], hits: list[list[Hit]]) -> str:
        """Text inserted after a search call: retrieved documents wrapped in the protocol's result tags."""

    def observation_suffix(self) -> str:
        """Text every inserted observation ends with that truncation must keep whole (the engine keeps at least
        its tokens when it cuts an over-long observation); "" when the closing tags are short (the default)."""
        return ""

    def observation_documents(self, observation: str) -> str:
        """The documents of an inserted observation as plain text, without the protocol's wrapper tags (R1-Searcher++'s
        rewriter reads them as its own knowledge). The text as given by default."""
        return observation

    def split_documents(self, observation: str) -> list[tuple[str, bool]]:
        """An inserted observation cut for display into ``(text, is_document)`` parts, in order, that join back to
        it: the text around the documents and one part per retrieved document. A part starts at each
        ``document_start`` match; a numbered document only where its number follows the previous one (1 after a
        ``head`` or at the start), so a "(3)" inside a document's text does not cut it. Without documents: one
        ``(observation, False)`` part ([] for "")."""
        cuts: list[tuple[int, bool]] = []
        last = 0
        for m in self.document_start.finditer(observation) if self.document_start else ():
            head, n = m.groupdict().get("head"), m.groupdict().get("n")
            if head is not None or n is None or int(n) == last + 1:
                cuts.append((m.start(), head is None))
                last = 0 if head is not None or n is None else int(n)
        if not any(is_doc for _, is_doc in cuts):
            return [(observation, False)] if observation else []
        cuts = [(0, False), *cuts] if cuts[0][0] > 0 else cuts
        ends = [start for start, _ in cuts[1:]] + [len(observation)]
        return [(observation[start:end], is_doc) for (start, is_doc), end in zip(cuts, ends, strict=True)]

    def marked_blocks(self) -> dict[str, tuple[str, str]]:
        """Blocks of the policy's own text that a viewer shows apart, by kind: ``{"evidence": (open, close)}``
        (R-Search's evidence), ``{"internal": (open, close)}`` (R1-Searcher++'s steps answered from its own
        knowledge). None by default."""
        return {}

    @abstractmethod
    def invalid_feedback(self, action: Invalid) -> str:
        """Text inserted after an invalid action, telling the model how to act correctly."""

    @abstractmethod
    def check_format(self, response: str) -> FormatReport:
        """Check a whole response (policy text and inserted observations) against the protocol's format."""

    def extract_answer(self, response: str) -> str | None:
        """The final answer of a whole response, or None."""
        return self.check_format(response).answer

    def force_answer_text(self) -> str:
        """Text appended before the final forced-answer turn, when the search budget is spent."""
        return ""

    def over_budget_text(self) -> str:
        """Text inserted after a search call past the search budget (the call is not run): the force-answer text
        by default; a protocol whose calls must be answered by a reply message (``tool_call``) says so there."""
        return self.force_answer_text()

    def opening_tags(self) -> tuple[str, ...]:
        """The tags the policy opens (``<think>``), which a chat template's generation prompt may open for it
        (:attr:`template_opening`); none by default."""
        return ()

    @property
    def prefill(self) -> str:
        """The text appended after the rendered prompt: ``response_prefix``, unless the template's opening already
        opened it (R1-Searcher's ``<think>`` after DeepSeek-R1-Distill's ``<think>\\n``)."""
        own, opened = self.response_prefix.strip(), self.template_opening.strip()
        return "" if own and opened.endswith(own) else self.response_prefix

    @property
    def response_opening(self) -> str:
        """The end of the prompt that opens the response's format (the template's opening, then the prefill):
        format checks read a response with it in front, as the model sees it."""
        return self.template_opening + self.prefill

    def strip_opening(self, text: str) -> str:
        """``text``, a whole response as the protocol writes it (oracle and SFT data), without the tag that
        :attr:`response_opening` already opened in the prompt (the text as it follows the prompt)."""
        tag = self.response_opening.strip()
        if not tag or not text.lstrip().startswith(tag):
            return text
        rest = text.lstrip()[len(tag) :]
        return rest.lstrip() if self.response_opening[-1:].isspace() else rest

    def bind_tokenizer(self, tokenizer: Any, style: str = "auto") -> None:
        """Called by the rollout engine (and the oracle and SFT data builders) with the tokenizer whose chat template
        renders the prompt (``style``: ``model.prompt_style``). Finds :attr:`template_opening`; a protocol whose
        inserted text comes from the chat template (``tool_call``) works it out here too, then calls this."""
        tags = self.opening_tags() if tokenizer is not None else ()
        self.template_opening = reply_opening(tokenizer, self.chat_messages("?"), tags, self.chat_tools(), style)

    def chat_tools(self) -> list[dict[str, Any]] | None:
        """JSON function schemas given to the chat template as ``tools=`` with the prompt; None: no tools."""
        return None
