"""R1-Searcher++'s rewriter SFT data (spec 000 §2.2): the documents a search returned in the prompt, an
internal-only reasoning path as the target. Built from oracle trajectories of the synthetic world
(:func:`rewriter_sft_examples`) or from correct retrieval trajectories (:func:`rewriter_sft_from_trajectories`, whose
targets must pass the RL memorizer's own validation). The rewriter itself runs in ``searchrl.rl.memorization``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from searchrl.generation.prompts import reply_end_ids
from searchrl.protocols import get_protocol
from searchrl.protocols._tags import TagProtocol
from searchrl.protocols.base import Protocol
from searchrl.rl.memorization import Memorizer, extract_documents, rewriter_prompt
from searchrl.rollout.trajectory import Trajectory
from searchrl.sft.types import SFTExample


def internal_path(example_chain: Sequence[dict], answer: str, protocol: Protocol | None = None) -> str:
    """An internal-only reasoning path for a synthetic question's chain (the rewriter's SFT target), in
    ``protocol``'s recalled-step and answer formats (default R1-Searcher++'s)."""
    protocol = protocol or get_protocol("r1_searcher_pp")
    steps = "".join(
        protocol.format_recalled(f"I recall that the answer to '{h['sub_question']}' is {h['answer']}.") or ""
        for h in example_chain
    )
    return steps + protocol.format_answer(answer)


def rewriter_sft_examples(oracle: Sequence[Trajectory], protocol: Protocol, tokenizer, style: str = "auto"):
    """Rewriter training data from oracle trajectories (spec 000 §2.2; the paper's "pre-processed" form is NOT
    STATED): the prompt holds the documents the oracle's searches returned and the question; the target is the
    chain written as internal steps and a boxed answer, both in ``protocol``'s formats (as the memorizer prompts the
    rewriter during RL). Loss on every target token."""
    out = []
    eos = reply_end_ids(tokenizer, style)  # the chat template's end of a reply, or EOS
    for t in oracle:
        chain = t.metadata.get("chain") or []
        if not chain:
            raise ValueError(f"trajectory {t.uid} has no metadata.chain; rewriter data needs a synthetic world")
        prompt = rewriter_prompt(tokenizer, t.question, extract_documents(t, protocol), style, protocol)
        target = list(tokenizer.encode(internal_path(chain, t.golds[0], protocol), add_special_tokens=False)) + eos
        out.append(
            SFTExample(
                prompt_ids=list(tokenizer.encode(prompt, add_special_tokens=False)),
                response_ids=target,
                loss_mask=[1] * len(target),
                kind="rewriter",
                source_uid=t.uid,
            )
        )
    return out


#: a sentence's opening that credits the documents ("Based on the search results, ..."), which the memorizer's
#: validation rejects: the rest of the sentence is what the model now knows
_SOURCE_OPENING = re.compile(
    r"(?:(?<=^)|(?<=[.!?]\s))(?:(?:based on|according to|from) (?:the |these |my )?"
    r"(?:search results?|(?:retrieved |given |provided )?(?:documents?|information|passages?))"
    r"(?: (?:above|provided|retrieved))?,?|(?:the )?(?:search results?|documents?|passages?) "
    r"(?:shows?|states?|says?|indicates?|mentions?|confirms?) that)\s+(?P<next>\w)",
    re.IGNORECASE,
)


def _known(text: str) -> str:
    """``text`` without openings that credit the documents, each sentence's first letter kept upper-case."""
    return _SOURCE_OPENING.sub(lambda m: m["next"].upper(), text)


def internalize(traj: Trajectory, protocol: Protocol) -> str:
    """A retrieval trajectory written as an internal-only path (the rewriter's SFT target from real trajectories).

    Search calls and their documents are dropped; the text the policy wrote after each search (up to its next call
    or its final answer) becomes an internal step, since it states what the documents gave, without a sentence opening
    that credits them ("Based on the search results, X" -> "X"). The final answer sentence is kept as it is. The
    paper calls this data "pre-processed" without saying how (spec 000 §2.2).
    """
    if not isinstance(protocol, TagProtocol) or not protocol.answer_marker or protocol.format_recalled("") is None:
        raise ValueError(
            f"internalize needs a protocol with recalled steps and an answer marker (r1_searcher_pp), "
            f"got {protocol.name!r}"
        )
    search_open = protocol.search_tags[0]
    recalled_open = (protocol.format_recalled("\0") or "").split("\0")[0]  # the protocol's own step opening
    parts: list[str] = []
    after_search = False
    for turn in traj.turns:
        text = turn.text
        call_at = text.find(search_open)
        if turn.action == "search" and call_at >= 0:
            text = text[:call_at]
        answer_at = text.find(protocol.answer_marker)
        if answer_at >= 0:  # keep the sentence that carries the answer outside the internal step
            cut = max(text.rfind(". ", 0, answer_at) + 1, text.rfind("\n", 0, answer_at) + 1, 0)
            body, tail = text[:cut].strip(), text[cut:].strip()
        else:
            body, tail = text.strip(), ""
        if body and after_search:
            body = _known(body)
        if body:
            recalled = after_search and recalled_open not in body
            parts.append((protocol.format_recalled(body) or body).rstrip("\n") if recalled else body)
        if tail:
            parts.append(tail)
        after_search = turn.action == "search"
    return "\n".join(parts)


def rewriter_sft_from_trajectories(
    trajs: Sequence[Trajectory], memorizer: Memorizer, tokenizer, style: str = "auto"
) -> tuple[list, dict[str, int]]:
    """Rewriter SFT examples from correct retrieval trajectories (e.g. ``searchrl data rejection-sample`` output):
    the documents their searches returned go in the prompt, :func:`internalize` gives the target, and only targets
    that pass the memorizer's own validation are kept. Returns ``(examples, rejection counts by reason)``."""
    out, rejected = [], {}
    eos = reply_end_ids(tokenizer, style)  # the chat template's end of a reply, or EOS
    for t in trajs:
        docs = extract_documents(t, memorizer.protocol)
        target = internalize(t, memorizer.protocol)
        reason = "no search" if not docs else memorizer.validate(target, t.golds)
        if reason:
            key = reason.split(":")[0]
            rejected[key] = rejected.get(key, 0) + 1
            continue
        resp = list(tokenizer.encode(target, add_special_tokens=False)) + eos
        prompt = rewriter_prompt(tokenizer, t.question, docs, style, memorizer.protocol)
        out.append(
            SFTExample(
                list(tokenizer.encode(prompt, add_special_tokens=False)),
                resp,
                [1] * len(resp),
                kind="rewriter",
                source_uid=t.uid,
            )
        )
    return out, rejected
