"""Shared machinery for the tag-based protocols: action parsing, response scanning, format-check helpers.

Every protocol here marks a search call with an open/close tag pair and receives documents inside a result tag
pair. Two operations recur:

* ``first_action`` finds the first *complete* action in one generated turn (the earliest closing tag that has an
  opening tag before it; the content is taken from the *last* opening tag before it, so nested or repeated opening
  tags yield the innermost text). It is a single linear pass, so huge or adversarial turns stay cheap.
* ``scan`` splits a whole response into events (tags, text, observations). A result block counts as an inserted
  observation only when it directly follows (whitespace aside) a search call's closing tag; any other result tag
  was written by the model itself ("fabricated documents", which R1-Searcher and R1-Searcher++ penalise). The
  observation body is kept opaque, so tags quoted inside retrieved documents never confuse a checker. The texts the
  engine inserts besides documents (feedback, hints) are events of their own: a result block after one of them
  was written by the model, and no block of the model's spans one (the engine parses each turn on its own).

Parsers never raise. Invalid actions carry one of the short reason codes below, which the rollout engine can count.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from searchrl.protocols.base import Action, Answer, Invalid, Protocol, Search
from searchrl.retrieval.base import Hit

# Reason codes carried by ``Invalid``.
NO_ACTION = "no_action"  # the turn holds neither a complete search call nor a complete final answer
EMPTY_QUERY = "empty_query"  # a search call with nothing (or only tags) between its tags
QUERY_TOO_LONG = "query_too_long"  # a query longer than the ``max_query_chars`` option
BAD_JSON = "bad_json"  # the call is not the JSON it must be (RAG-R1 multi-query's list; tool_call's call object)
UNKNOWN_TOOL = "unknown_tool"  # tool_call: the call names a tool other than search
BAD_ARGUMENTS = "bad_arguments"  # tool_call: the arguments are not {"queries": [strings]} or {"query": string}
NO_SEARCH = "no_search"  # a search call under a protocol without search (the reason / rag baselines)
INVALID_REASONS = (NO_ACTION, EMPTY_QUERY, QUERY_TOO_LONG, BAD_JSON, UNKNOWN_TOOL, BAD_ARGUMENTS, NO_SEARCH)

#: the first sentence of the invalid-action feedback, per reason (first person, as the model's own voice).
FEEDBACK_LEAD = {
    NO_ACTION: "My last step was not a valid action: it had neither a complete search call nor a final answer.",
    EMPTY_QUERY: "My last step was not a valid action: the search call held no query.",
    QUERY_TOO_LONG: "My last step was not a valid action: the search query was far too long for a search engine.",
    BAD_JSON: "My last step was not a valid action: the search call was not a plain comma-separated list of queries.",
    NO_SEARCH: "My last step was not a valid action: there is no search engine here.",
}

DEFAULT_MAX_QUERY_CHARS = 500

_WS = re.compile(r"\s+")
_CJK = re.compile(r"[\u4e00-\u9fff]")
# C0 control characters other than tab / newline / carriage return, and the Unicode replacement character.
_UNREADABLE = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\ufffd]")
# Chat-role markers inside a response mean the model is writing the other side of the dialogue. R1-Searcher's
# reward code rejects any "Assistant" / "assistant", even inside retrieved documents; here only the role marker with
# its colon counts ("assistant manager" is a fair answer), and the chat-template tokens, the same failure in other
# models.
ROLE_MARKERS = ("Assistant:", "assistant:", "<|im_start|>", "<|im_end|>", "<|start_header_id|>", "<|eot_id|>")


def quoted_title(hit: Hit) -> str:
    """The title in quotes, as the papers' corpora store it (wiki-18's ``"Title"\\ntext``) and Search-R1's and
    R-Search's observations show it; empty for an untitled passage.

    >>> quoted_title(Hit("d", "Hamlet", "A play.", 1.0)), quoted_title(Hit("d", "", "Text.", 1.0))
    ('"Hamlet"', '')
    """
    return f'"{hit.title}"' if hit.title else ""


def hit_contents(hit: Hit) -> str:
    """``title text`` on one line (the "100-word passages with appended titles" of the papers' corpora)."""
    return f"{hit.title} {hit.text}" if hit.title else hit.text


def collapse_ws(text: str) -> str:
    return _WS.sub(" ", text).strip()


def word_count(text: str) -> int:
    return len(text.split())


# --------------------------------------------------------------------------------------------------- turn parsing
def _tag_regex(tags: Iterable[str]) -> re.Pattern[str]:
    # Longest first so that a tag that is a prefix of another (none today) can never shadow it.
    return re.compile("|".join(re.escape(t) for t in sorted(set(tags), key=len, reverse=True)))


@dataclass(frozen=True)
class Found:
    kind: str  # a key of the ``pairs`` given to ``first_action``
    content: str  # raw text between the tags
    end: int  # index just after the closing tag


def first_action(text: str, pairs: dict[str, tuple[str, str]]) -> Found | None:
    """The earliest-closing complete ``open ... close`` block of any kind in ``pairs``, or None.

    A closing tag with no opening tag of its kind before it is skipped (the scan goes on). The content runs from
    the last opening tag of the same kind before the closing tag, i.e. the innermost block.
    """
    kind_of: dict[str, tuple[str, bool]] = {}
    for kind, (open_tag, close_tag) in pairs.items():
        kind_of[open_tag] = (kind, True)
        kind_of[close_tag] = (kind, False)
    last_open_end: dict[str, int] = {}
    for m in _tag_regex(kind_of).finditer(text):
        kind, is_open = kind_of[m.group(0)]
        if is_open:
            last_open_end[kind] = m.end()
        elif kind in last_open_end:
            return Found(kind, text[last_open_end[kind] : m.start()], m.end())
    return None


def boxed_spans(text: str) -> list[tuple[int, int, int, int]]:
    """Every complete ``\\boxed{...}`` as ``(start, end, content start, content end)``, braces nested to any depth,
    in order of end.

    One pass with a stack and no copies, so a text full of unclosed (or deeply nested) ``\\boxed{`` stays linear.
    """
    spans: list[tuple[int, int, int, int]] = []
    stack: list[tuple[bool, int, int]] = []  # (is_boxed, start of "\boxed{", start of content)
    for m in re.finditer(r"\\boxed\{|\{|\}", text):
        token = m.group(0)
        if token == "}":
            if stack:
                is_boxed, start, content_start = stack.pop()
                if is_boxed:
                    spans.append((start, m.end(), content_start, m.start()))
        else:
            stack.append((token != "{", m.start(), m.end()))
    return spans


def last_box(text: str) -> str | None:
    """The content of ``text``'s last complete ``\\boxed{...}``: the one opened last, so a box nested in a box gives
    the inner one (as math graders' ``last_boxed_only_string`` and nested answer tags read); braces inside it stay
    (``\\boxed{\\frac{1}{2}}`` gives ``\\frac{1}{2}``). None without one."""
    spans = boxed_spans(text)
    if not spans:
        return None
    _, _, start, end = max(spans)  # the greatest start: spans never share one
    return text[start:end]


def unbox(content: str | None) -> str | None:
    """A ``\\boxed{}`` answer stripped, without a LaTeX ``\\text{...}`` wrapping all of it (``\\boxed{\\text{Rome}}``,
    as instruction-tuned models often write it); None when empty.

    >>> unbox(" \\\\text{Rome} "), unbox("\\\\text{A} {B}"), unbox("  ")
    ('Rome', '\\\\text{A} {B}', None)
    """
    if content is None:
        return None
    text = content.strip()
    if text.startswith("\\text{") and text.endswith("}"):
        depth = 0
        for i, ch in enumerate(text[5:], start=5):
            depth += {"{": 1, "}": -1}.get(ch, 0)
            if depth == 0:  # the brace that closes \text{: the wrapper holds everything only if it is the last
                if i == len(text) - 1:
                    text = text[6:-1].strip()
                break
    return text or None


# ----------------------------------------------------------------------------------------------- response scanning
@dataclass(frozen=True)
class Event:
    #: "tag" | "text" | "obs" (an inserted observation; value = its body) | "obs_unclosed" | "inserted" (feedback
    #: or a hint the engine inserted; value = a line break, which stands for it in the model's text)
    kind: str
    value: str


def scan(
    text: str,
    tags: Iterable[str],
    search_close: str,
    result_open: str,
    result_close: str,
    inserted: Iterable[str] = (),
) -> list[Event]:
    """Split a whole response into tag, text and observation events (see the module docstring); each occurrence
    of an ``inserted`` text (the feedback and hints the protocol inserts) is an ``inserted`` event."""
    inserted = {t for t in inserted if t}
    regex = _tag_regex([*tags, search_close, result_open, result_close, *inserted])
    events: list[Event] = []
    pos = 0
    while True:
        m = regex.search(text, pos)
        if m is None:
            break
        if m.start() > pos:
            events.append(Event("text", text[pos : m.start()]))
        tag = m.group(0)
        if tag in inserted:
            events.append(Event("inserted", "\n"))
            pos = m.end()
            continue
        if tag == result_open and _follows_search(events, search_close):
            close_at = text.find(result_close, m.end())
            if close_at < 0:
                events.append(Event("obs_unclosed", text[m.end() :]))
                return events
            events.append(Event("obs", text[m.end() : close_at]))
            pos = close_at + len(result_close)
            continue
        events.append(Event("tag", tag))
        pos = m.end()
    if pos < len(text):
        events.append(Event("text", text[pos:]))
    return events


def _follows_search(events: list[Event], search_close: str) -> bool:
    for ev in reversed(events):
        if ev.kind == "text" and not ev.value.strip():
            continue
        return ev.kind == "tag" and ev.value == search_close
    return False


def count_tag(events: Sequence[Event], tag: str) -> int:
    return sum(1 for ev in events if ev.kind == "tag" and ev.value == tag)


def model_text(events: Sequence[Event]) -> str:
    """The response with every inserted observation (and feedback) replaced by a newline: the text the policy
    wrote."""
    return "".join("\n" if ev.kind.startswith("obs") else ev.value for ev in events)


def last_policy_box(events: Sequence[Event]) -> str | None:
    """The content of the last complete ``\\boxed{...}`` the policy wrote, a box never spanning inserted text (an
    observation or feedback: the engine reads each turn on its own); None without one."""
    pieces: list[str] = []
    for ev in reversed([Event("inserted", ""), *events]):  # the first event closes the first piece
        if ev.kind.startswith("obs") or ev.kind == "inserted":
            box = last_box("".join(reversed(pieces)))
            if box is not None:
                return box
            pieces = []
        else:
            pieces.append(ev.value)
    return None


@dataclass(frozen=True)
class Blocks:
    contents: list[str]  # complete blocks, in order; observation bodies inside a block are left out
    balanced: bool  # every opening tag closed before the next one opens, no stray closing tag


def blocks(events: Sequence[Event], open_tag: str, close_tag: str, *, across_documents: bool = True) -> Blocks:
    """The ``open_tag ... close_tag`` blocks of a response's events. A block open when the engine's feedback or
    hint comes is left unclosed (the engine reads each turn on its own); so is one open when documents come, unless
    ``across_documents`` (a think block may hold search calls and their documents; an answer may not)."""
    contents: list[str] = []
    balanced = True
    current: list[str] | None = None
    for ev in events:
        if current is not None and (ev.kind == "inserted" or (ev.kind.startswith("obs") and not across_documents)):
            balanced, current = False, None
        elif ev.kind == "tag" and ev.value == open_tag:
            if current is not None:
                balanced = False  # nested / re-opened: restart at the innermost opening
            current = []
        elif ev.kind == "tag" and ev.value == close_tag:
            if current is None:
                balanced = False
            else:
                contents.append("".join(current))
                current = None
        elif current is not None and ev.kind in ("text", "tag"):
            current.append(ev.value)
    if current is not None:
        balanced = False
    return Blocks(contents, balanced)


def unanswered_searches(events: Sequence[Event], search_close: str) -> int:
    """Search calls whose closing tag is not followed (whitespace aside) by an inserted observation."""
    n = 0
    pending = False  # a search call closed and nothing but whitespace seen since
    for ev in events:
        if ev.kind == "text" and not ev.value.strip():
            continue
        if pending and not ev.kind.startswith("obs"):
            n += 1
        pending = ev.kind == "tag" and ev.value == search_close
    return n + pending


def garbled_problems(events: Sequence[Event], cjk: bool = True) -> list[str]:
    """Operational test for "garbled or unreadable content" in the policy's own text (observations excluded).

    R1-Searcher's reward code (spec 001 §11.3) treats CJK characters and chat-role markers as format errors; we
    add control characters and U+FFFD (bytes that did not decode). Retrieved documents are never checked. ``cjk``
    False: CJK characters are text (questions in Chinese or Japanese, whose answers are written in them).
    """
    text = model_text(events)
    problems = []
    if cjk and _CJK.search(text):
        problems.append("CJK characters in the policy's text")
    if _UNREADABLE.search(text):
        problems.append("control or replacement characters in the policy's text")
    if any(marker in text for marker in ROLE_MARKERS):
        problems.append("chat-role marker in the policy's text")
    return problems


# ------------------------------------------------------------------------------------------------- the base class
class TagProtocol(Protocol):
    """Common parts of the five protocols: options, the parser, query cleaning, inserted-text stripping.

    Subclasses set the tag strings and write the prompt, the observation layout, the feedback wording and the
    format checker. Options common to all: ``max_query_chars`` (default 500): a longer query (after whitespace
    is collapsed) makes the action ``Invalid("query_too_long")`` rather than being truncated, because such
    queries are nearly always reasoning leaking into the search call, and the feedback tells the model so.
    """

    search_tags: ClassVar[tuple[str, str]]
    result_tags: ClassVar[tuple[str, str]]
    #: None when the final answer is not a tag pair (R1-Searcher++ uses ``\\boxed{}``).
    answer_tags: ClassVar[tuple[str, str] | None] = ("<answer>", "</answer>")
    #: the protocol's other tags (think, evidence, internal steps): removed from queries, seen by ``scan``.
    other_tags: ClassVar[tuple[str, ...]] = ()
    option_defaults: ClassVar[dict[str, Any]] = {"max_query_chars": DEFAULT_MAX_QUERY_CHARS}

    def __init__(self, **options: Any) -> None:
        unknown = sorted(set(options) - set(self.option_defaults))
        if unknown:
            raise ValueError(
                f"unknown option(s) {', '.join(unknown)} for protocol {self.name!r}; "
                f"valid options: {', '.join(sorted(self.option_defaults))}"
            )
        merged = {**self.option_defaults, **options}
        for key, default in self.option_defaults.items():
            value = merged[key]
            if isinstance(default, bool):
                if not isinstance(value, bool):
                    raise ValueError(f"protocol option {key} must be true or false, got {value!r}")
            elif isinstance(default, int) and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise ValueError(f"protocol option {key} must be a positive integer, got {value!r}")
        super().__init__(**merged)
        self.max_query_chars: int = merged["max_query_chars"]

    # -------------------------------------------------------------------------------------------- tag lists
    @property
    def all_tags(self) -> tuple[str, ...]:
        answer = self.answer_tags or ()
        return (*self.search_tags, *self.result_tags, *answer, *self.other_tags)

    def opening_tags(self) -> tuple[str, ...]:
        """The opening tags of the policy's blocks: search call, answer and the other tags' (think, evidence)."""
        return (self.search_tags[0], *(self.answer_tags or ())[:1], *self.other_tags[0::2])

    def _action_pairs(self) -> dict[str, tuple[str, str]]:
        pairs = {"search": self.search_tags}
        if self.answer_tags is not None:
            pairs["answer"] = self.answer_tags
        return pairs

    # ---------------------------------------------------------------------------------------------- parsing
    def parse(self, turn_text: str) -> Action:
        """The first complete action of the turn (earliest closing tag); ``Invalid`` when there is none."""
        found = first_action(turn_text, self._action_pairs())
        if found is None:
            return Invalid(NO_ACTION)
        if found.kind == "answer":
            return Answer(found.content.strip())
        return self._search_from(found.content)

    def _clean_query(self, raw: str) -> str:
        """Protocol tags removed (they are never part of a query), invisible format characters (zero-width, bidi
        marks) and lone surrogates (half a pair, which a JSON call may escape: no tokenizer or UTF-8 file takes one)
        dropped, whitespace collapsed."""
        for tag in self.all_tags:
            raw = raw.replace(tag, " ")
        if not raw.isascii():
            raw = "".join(ch for ch in raw if unicodedata.category(ch) not in ("Cf", "Cs"))
        return collapse_ws(raw)

    def _split_queries(self, content: str) -> list[str] | Invalid:
        """The queries of one search call; single-query protocols keep the whole content as one query."""
        return [content]

    def _search_from(self, content: str) -> Search | Invalid:
        split = self._split_queries(content)
        if isinstance(split, Invalid):
            return split
        # More queries than allowed: keep the first ``max_queries`` (documented on RAG-R1's protocol); the ones
        # dropped are not checked
        queries = [q for q in (self._clean_query(raw) for raw in split) if q][: self.max_queries]
        if not queries:
            return Invalid(EMPTY_QUERY)
        if any(len(q) > self.max_query_chars for q in queries):
            return Invalid(QUERY_TOO_LONG)
        return Search(tuple(queries))

    # ------------------------------------------------------------------------------------ inserted texts
    def _feedback_how(self) -> str:
        """The second part of the invalid-action feedback: how to search and how to answer."""
        raise NotImplementedError

    def invalid_feedback(self, action: Invalid) -> str:
        lead = FEEDBACK_LEAD.get(action.reason, FEEDBACK_LEAD[NO_ACTION])
        return f"\n{lead} {self._feedback_how()} Let me try again.\n"

    def _inserted_texts(self) -> list[str]:
        texts = {self.invalid_feedback(Invalid(reason)) for reason in INVALID_REASONS}
        force = self.force_answer_text()
        if force:
            texts.add(force)
        return sorted(texts, key=len, reverse=True)

    def scan_response(self, response: str) -> list[Event]:
        """Events of a whole response, read after the prompt's :attr:`response_opening` (the pre-filled or the chat
        template's ``<think>``); the feedback / forced-answer texts are ``inserted`` events."""
        return scan(
            self.response_opening + response,
            self.all_tags,
            self.search_tags[1],
            *self.result_tags,
            inserted=self._inserted_texts(),
        )

    # ----------------------------------------------------------------------------------------- rendering
    def split_documents(self, observation: str) -> list[tuple[str, bool]]:
        """As :meth:`Protocol.split_documents`, with the result block's closing tag (and what follows it) apart from
        the last document."""
        parts = super().split_documents(observation)
        text, is_doc = parts[-1] if parts else ("", False)
        cut = text.rfind(self.result_tags[1]) if is_doc else -1
        if cut > 0:
            parts[-1:] = [(text[:cut], True), (text[cut:], False)]
        return parts

    def observation_documents(self, observation: str) -> str:
        for tag in self.result_tags:
            observation = observation.replace(tag, " ")
        return observation

    def _prepared(self, queries: list[str], hits: list[list[Hit]]) -> list[list[Hit]]:
        """Check the shapes (a mismatch is a programming error) and blank out the result tags in documents.

        A document that happened to contain the closing result tag would otherwise end the block early, and the
        rest of it would read as policy text to the format checker and to the model.
        """
        if len(queries) != len(hits):
            raise ValueError(f"render_observation got {len(queries)} queries but {len(hits)} hit lists")
        if not 1 <= len(queries) <= self.max_queries:
            raise ValueError(f"{self.name} renders 1..{self.max_queries} queries per search call, got {len(queries)}")
        return [[_without_tags(h, self.result_tags) for h in per_query] for per_query in hits]


def _without_tags(hit: Hit, tags: tuple[str, str]) -> Hit:
    if not any(t in hit.title or t in hit.text for t in tags):
        return hit
    title, text = hit.title, hit.text
    for t in tags:
        title, text = title.replace(t, " "), text.replace(t, " ")
    return Hit(hit.id, title, text, hit.score)
