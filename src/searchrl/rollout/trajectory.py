"""The trajectory record: exact token provenance for every position of a multi-turn rollout.

``response_ids`` is the concatenation, in order, of the token ids the policy sampled and the token ids of the text the
environment inserted (documents, feedback). Nothing is ever re-tokenized: ``action_mask[i] == 1`` exactly when
``response_ids[i]`` came out of the generator, and ``logprobs[i]`` is its log-probability (0.0 where the mask is 0).
"""

from __future__ import annotations

import zlib
from dataclasses import asdict, dataclass, field, fields, replace
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from searchrl.protocols.base import FormatReport, Protocol


def short(text: str | None, width: int = 60) -> str | None:
    """``text`` on one line, cut to ``width`` characters (an ellipsis marks a cut), for reprs."""
    if text is None:
        return None
    line = " ".join(text.split())
    return line if len(line) <= width else line[: width - 1] + "…"


def _decode(tokenizer, ids: list[int]) -> str:
    """Decode exactly: no clean-up of spaces before punctuation (HF's default would alter document text)."""
    return tokenizer.decode(ids, skip_special_tokens=True, clean_up_tokenization_spaces=False)


@dataclass
class Turn:
    text: str  # the policy's text for this turn
    #: "search" (run) | "search_over_budget" (past max_searches, not run) | "search_repeated" (its queries were all
    #: searched before: not run, ``repeated_query_text`` inserted) | "answer" | "invalid" | "none" (no action, or a
    #: search call in a turn that runs none: the last, or the forced final turn)
    action: str
    finish_reason: str  # generator's: "stop" | "eos" | "length"
    queries: list[str] = field(default_factory=list)
    hit_ids: list[list[str]] = field(default_factory=list)
    observation: str = ""  # inserted text after this turn ("" when none)
    invalid_reason: str = ""
    n_gen_tokens: int = 0
    n_obs_tokens: int = 0
    timings: dict[str, float] = field(default_factory=dict)
    #: the hint inserted after this turn's observation, before the forced final turn (``force_answer: hint``)
    hint: str = ""
    n_hint_tokens: int = 0

    def __repr__(self) -> str:
        queries = f", queries={self.queries!r}" if self.queries else ""
        return (
            f"Turn(action={self.action!r}{queries}, finish={self.finish_reason!r}, text={short(self.text)!r}, "
            f"gen_tokens={self.n_gen_tokens}, obs_tokens={self.n_obs_tokens})"
        )


@dataclass
class Trajectory:
    uid: str  # globally unique: "<question id>#<sample index>"
    group_id: str  # rollouts of one question share it (GRPO / RLOO groups)
    question_id: str
    question: str
    golds: list[str]
    prompt_ids: list[int] = field(repr=False)
    response_ids: list[int] = field(default_factory=list, repr=False)
    action_mask: list[int] = field(default_factory=list, repr=False)  # 1 = sampled by the policy, 0 = inserted
    logprobs: list[float] = field(default_factory=list, repr=False)
    turns: list[Turn] = field(default_factory=list, repr=False)
    answer: str | None = None
    stop_reason: str = ""  # "answer" | "eos" | "length" | "max_turns" | "no_answer" | "max_searches"
    metadata: dict[str, Any] = field(default_factory=dict, repr=False)
    protocol: str = ""  # the protocol that wrote it: a viewer cuts its observations into documents by it

    def __repr__(self) -> str:
        """A summary: ids, the question, how it ended, and counts (the token ids and log-probs stay out)."""
        c = self.counts()
        return (
            f"Trajectory(uid={self.uid!r}, question={short(self.question)!r}, stop={self.stop_reason!r}, "
            f"answer={short(self.answer)!r}, golds={self.golds[:3]!r}, turns={c['turns']}, searches={c['searches']}, "
            f"prompt_tokens={c['prompt_tokens']}, policy_tokens={c['policy_tokens']}, "
            f"inserted_tokens={c['inserted_tokens']})"
        )

    @property
    def stream_key(self) -> int:
        """The key of this trajectory's sampling stream (with the run's seed and the turn): from its uid, so a
        question samples the same tokens whichever batch, and wherever in it, the question is rolled out."""
        return zlib.crc32(self.uid.encode())

    @property
    def n_searches(self) -> int:
        return sum(1 for t in self.turns if t.action == "search" and t.queries)

    @property
    def n_queries(self) -> int:
        return sum(len(t.queries) for t in self.turns)

    @property
    def n_turns(self) -> int:
        return len(self.turns)

    @property
    def n_invalid(self) -> int:
        return sum(1 for t in self.turns if t.action == "invalid")

    @property
    def policy_text(self) -> str:
        """The policy's own text, turn by turn (inserted observations left out)."""
        return "".join(t.text for t in self.turns)

    @property
    def retrieved_text(self) -> str:
        """The documents the trajectory read: those put in its prompt (``metadata.prompt_docs``, the ``rag``
        protocol), then each executed search call's inserted observation."""
        docs = [str(d) for d in self.metadata.get("prompt_docs") or []]
        return "\n".join(docs + [t.observation for t in self.turns if t.action == "search" and t.queries])

    @property
    def n_policy_tokens(self) -> int:
        return sum(self.action_mask)

    def append(self, ids: list[int], sampled: bool, logprobs: list[float] | None = None) -> None:
        self.response_ids.extend(ids)
        self.action_mask.extend([1 if sampled else 0] * len(ids))
        if sampled:
            assert logprobs is not None and len(logprobs) == len(ids), "every sampled token needs its log-prob"
            self.logprobs.extend(logprobs)
        else:
            self.logprobs.extend([0.0] * len(ids))

    def response_text(self, tokenizer) -> str:
        return _decode(tokenizer, self.response_ids)

    def format_report(self, protocol: Protocol, tokenizer) -> FormatReport:
        """The protocol's format check of the response, with what its text alone cannot tell: a result block that
        directly follows a search call the engine did not run (past ``max_searches`` under ``force_answer: silent``,
        where no text comes between the call and the final turn) reads as retrieved documents, but the policy wrote
        it. Such blocks fail the check and are not counted as searches (``n_searches`` is then the engine's count)."""
        report = protocol.check_format(self.response_text(tokenizer))
        forged = report.n_searches - self.n_searches
        if forged <= 0:
            return report
        problem = f"{forged} result block(s) written by the policy after a search call that was not run"
        return replace(report, ok=False, n_searches=self.n_searches, problems=(*report.problems, problem))

    def segments(self, tokenizer) -> list[tuple[str, bool]]:
        """``[(text, sampled_by_policy), ...]``: maximal runs of equal mask, decoded (for viewers)."""
        out: list[tuple[str, bool]] = []
        start = 0
        for i in range(1, len(self.response_ids) + 1):
            if i == len(self.response_ids) or self.action_mask[i] != self.action_mask[start]:
                text = _decode(tokenizer, self.response_ids[start:i])
                out.append((text, bool(self.action_mask[start])))
                start = i
        return out

    def counts(self) -> dict[str, int]:
        return {
            "searches": self.n_searches,
            "queries": self.n_queries,
            "turns": self.n_turns,
            "invalid": self.n_invalid,
            "policy_tokens": self.n_policy_tokens,
            "inserted_tokens": len(self.response_ids) - self.n_policy_tokens,
            "prompt_tokens": len(self.prompt_ids),
        }

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["counts"] = self.counts()
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Trajectory:
        """The record :meth:`to_dict` wrote. Keys that a writer added beside the fields (Search-o1's
        ``reason_in_documents``) are kept in ``metadata``."""
        names = {f.name for f in fields(cls)}
        known = {k: v for k, v in d.items() if k in names}
        extra = {k: v for k, v in d.items() if k not in names and k != "counts"}
        known["metadata"] = {**extra, **dict(known.get("metadata") or {})}
        known["turns"] = [Turn(**t) for t in d.get("turns", [])]
        return cls(**known)
