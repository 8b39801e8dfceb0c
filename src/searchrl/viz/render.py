"""Text pieces of the viewer page: escaping (every field), query and block marks in the policy's text, and inserted
observations cut into their documents by the protocol that wrote them.

Untrusted text is always escaped; control characters (other than newline and tab), bidirectional overrides and
isolates are shown as visible escapes (``\\x1b``, ``\\u202e``) and a lone surrogate as U+FFFD, so no field can hide
text, reorder the text around it or stop the page from being written.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping, Sequence
from html import escape
from typing import Any

from searchrl.protocols import PROTOCOLS, Protocol
from searchrl.viz.records import COLLAPSE_CHARS, COLLAPSE_LINES, _str

#: an observation (or an evaluation row's context) shows at most this many characters; a note says how many more
MAX_SHOWN_CHARS = 20_000

_UNSHOWN = re.compile("[\x00-\x08\x0b-\x1f\x7f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")


def _visible(m: re.Match[str]) -> str:
    c = ord(m.group())
    if 0xD800 <= c <= 0xDFFF:  # a lone surrogate (JSON "\ud800"): not encodable, shown as the replacement character
        return "\ufffd"
    return f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}"


def esc(x: Any) -> str:
    """``x`` as HTML text (also safe inside a quoted attribute), with control characters made visible."""
    return _UNSHOWN.sub(_visible, escape(_str(x), quote=True))


def fmt(x: float | None, pct: bool = False, digits: int = 3) -> str:
    """``0.5`` -> ``0.5``, ``1/3`` -> ``0.333``; with ``pct``, ``0.5`` -> ``50.0%``; None -> ``n/a``."""
    if x is None:
        return "n/a"
    if pct:
        return f"{100 * x:.1f}%"
    text = f"{x:.{digits}f}".rstrip("0").rstrip(".")
    return "0" if text in ("", "-0") else text


def plural(n: int, one: str, many: str) -> str:
    return f"{n} {one if n == 1 else many}"


# ------------------------------------------------------------------------------------------------ protocols


def protocol_named(name: str | None) -> Protocol | None:
    """The protocol registered as ``name`` now, with its default options; None for an unknown name or a protocol
    that cannot be built without options."""
    cls = PROTOCOLS.get(name or "")
    return _built(cls) if cls else None


@functools.cache
def _built(cls: type[Protocol]) -> Protocol | None:  # one instance per class: a re-registered name gets its new one
    try:
        return cls()
    except (TypeError, ValueError):
        return None


def _searching() -> list[Protocol]:
    return [p for name, cls in PROTOCOLS.items() if cls.searches and (p := protocol_named(name)) is not None]


def marked_blocks(protocol: str | None) -> dict[str, tuple[str, str]]:
    """The blocks of the policy's text shown apart: the protocol's own, or every protocol's when it is not known
    (rows written before trajectories recorded their protocol; the tags are distinct)."""
    known = protocol_named(protocol)
    if known is not None:
        return known.marked_blocks()
    return {kind: tags for p in _searching() for kind, tags in p.marked_blocks().items()}


def split_documents(text: str, protocol: str | None = None) -> list[tuple[str, bool]]:
    """An observation cut into ``(part, is_document)`` by its protocol (:meth:`Protocol.split_documents`); without
    a known protocol, by the one that finds the most documents in it (the first of those).

    >>> split_documents("<information>Doc 1(Title: A) a. Doc 2(Title: B) b.</information>", "search_r1")
    [('<information>', False), ('Doc 1(Title: A) a. ', True), ('Doc 2(Title: B) b.', True), ('</information>', False)]
    """
    known = protocol_named(protocol)
    cuts = [p.split_documents(text) for p in ([known] if known is not None else _searching())]
    best = max(cuts, key=lambda parts: sum(is_doc for _, is_doc in parts), default=[])
    return best if any(is_doc for _, is_doc in best) else [(text, False)] if text else []


# ------------------------------------------------------------------------------------------------ pieces


def _blocks_pattern(blocks: Mapping[str, tuple[str, str]]) -> re.Pattern[str]:
    alternatives = (f"(?P<b{i}>{re.escape(o)}.*?(?:{re.escape(c)}|\\Z))" for i, (o, c) in enumerate(blocks.values()))
    return re.compile("|".join(alternatives), re.S)


def blocks_in(text: str, blocks: Mapping[str, tuple[str, str]]) -> set[str]:
    """The kinds of ``blocks`` that :func:`highlight` marks in ``text``.

    >>> sorted(blocks_in("<a>x</a> <b>y", {"one": ("<a>", "</a>"), "two": ("<b>", "</b>"), "three": ("<c>", "</c>")}))
    ['one', 'two']
    """
    kinds = list(blocks)
    return (
        {kinds[int(m.lastgroup[1:])] for m in _blocks_pattern(blocks).finditer(text) if m.lastgroup}
        if blocks
        else set()
    )


def highlight(text: str, queries: Sequence[str] = (), blocks: Mapping[str, tuple[str, str]] | None = None) -> str:
    """Escaped ``text``: each block of ``blocks`` (kind -> its open and close tags) in a ``<span class="blk KIND">``,
    every occurrence of a query in a ``<mark class="q">`` (one pass over the text; the longest query first)."""
    needles = sorted({q for q in queries if q.strip()}, key=len, reverse=True)
    find = re.compile("|".join(map(re.escape, needles))) if needles else None

    def marked(piece: str) -> str:
        if find is None:
            return esc(piece)
        out, i = [], 0
        for m in find.finditer(piece):
            out += [esc(piece[i : m.start()]), f'<mark class="q">{esc(m.group())}</mark>']
            i = m.end()
        return "".join(out) + esc(piece[i:])

    if not blocks:
        return marked(text)
    kinds, out, i = list(blocks), [], 0
    for m in _blocks_pattern(blocks).finditer(text):
        kind = kinds[int(m.lastgroup[1:])] if m.lastgroup else ""
        out += [marked(text[i : m.start()]), f'<span class="blk {esc(kind)}">{marked(m.group())}</span>']
        i = m.end()
    return "".join(out) + marked(text[i:])


def observation_html(text: str, n_tokens: int, label: str = "inserted", protocol: str | None = None) -> str:
    """Inserted text in a shaded box (collapsed when long): one block per retrieved document, at most
    ``MAX_SHOWN_CHARS`` characters and a note of how many more there are."""
    long = len(text) > COLLAPSE_CHARS or text.count("\n") + 1 > COLLAPSE_LINES
    size = f"{n_tokens} tokens, " if n_tokens else ""
    parts = split_documents(text, protocol)
    n_docs = sum(is_doc for _, is_doc in parts)
    body, budget = [], MAX_SHOWN_CHARS
    for part, is_doc in parts:
        shown = part[: max(budget, 0)]
        budget -= len(shown)
        if shown.strip():
            body.append(f'<pre class="inserted{" doc" if is_doc else ""}">{esc(shown.strip())}</pre>')
    hidden = sum(len(part) for part, _ in parts) - (MAX_SHOWN_CHARS - budget)
    if hidden > 0:
        body.append(f'<div class="clipped">… {hidden} more characters not shown</div>')
    return (
        f'<details class="inserted"{"" if long else " open"}><summary>{esc(label)} ({size}{len(text)} chars'
        f"{', ' + plural(n_docs, 'document', 'documents') if n_docs else ''})</summary>{''.join(body)}</details>"
    )
