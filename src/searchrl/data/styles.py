"""Question styles: the template a question follows, to train on some styles and measure transfer to the others.

A synthetic-world question (one whose ``metadata`` has a ``kind``) has its generator's template as its style
(``metadata["template"]``, e.g. ``bridge:born_in.country``; its kind when it has none). Any other question gets a
*generic* template from its text alone, with rules of English question structure and nothing specific to a dataset:

- named-entity-like spans become :data:`PLACEHOLDER`: runs of capitalised words and numbers that do not start the
  sentence (with the lower-case name particles of :data:`CONNECTORS` between two capitalised words, ``Bank of
  England``), quoted text, a parenthesised part right after such a span (``Nocturne (1946 Film)``), and two spans
  separated by a comma only (``Drive, He Said``; ``Paris, Texas``) become one;
- a possessive ending stays outside the placeholder (``<e>'s father``);
- the rest is lower-cased, whitespace collapsed.

"What nationality is the director of film 3000 Nights?" and "... of film Le Mans?" both give "what nationality is the
director of film <e>?". :func:`select_styles` keeps or drops questions by style (a synthetic kind also names all of
its templates); a style name no question has is an error naming the styles there are.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Sequence

from searchrl.data.records import QAExample

#: what a named-entity-like span becomes in a generic template.
PLACEHOLDER = "<e>"
#: lower-case name particles kept inside a run of capitalised words when a capitalised word follows them (``Bank of
#: England``, ``Alexander the Great``, ``Ludwig van Beethoven``). Prepositions are not among them, so a title's
#: lower-case words split it (``Lost in Translation`` -> ``<e> in <e>``) but ``Is Oslo in Norway?`` keeps its two
#: entities, and neither are ``and`` / ``or``, which join two entities.
CONNECTORS = frozenset("of the de la le les du da das dos von van der den del della di y al el bin ibn".split())

_TOKEN = re.compile(r"[^\W_][\w'’.\-]*")
_QUOTED = re.compile(r"\"[^\"]+\"|“[^”]+”|«[^»]+»")
_POSSESSIVE = re.compile(r"['’][sS]?$")
_INITIAL = re.compile(r"^[^\W\d_]\.$")  # "A." in "A. K. M. Nurul Islam"
_E = re.escape(PLACEHOLDER)
#: a span's own punctuation: two spans joined by a comma or a title's separator (``Drive, He Said``; ``Solaris: The
#: Return``; ``Tom & Jerry``), a parenthesised part after a span, marks stuck to its ends (``Oklahoma!``, ``¡Three
#: Amigos!``, ``'Til Death``) unless they end the question.
_MERGE = re.compile(rf"{_E}(?:\s*[,:&+/–—-]\s*{_E}|\s*\([^()]*\)|[?!.'’]+(?=\s+\S|[?,;:]))|[¡¿'‘]{_E}")
_SPACES = re.compile(r"\s+")


def question_kind(example: QAExample) -> str | None:
    """A synthetic-world question's kind (``single_hop``, ``bridge``, ``three_hop``, ``comparison``), else None."""
    kind = example.metadata.get("kind")
    return str(kind) if kind else None


def question_style(example: QAExample) -> str:
    """A synthetic question's template (its kind when it has none); any other question's generic template."""
    kind = question_kind(example)
    if kind is not None:
        return str(example.metadata.get("template") or kind)
    return question_template(example.question)


def _capitalised(token: str) -> bool:
    return token[0].isupper() or token[0].isdigit()


def _sentence_start(tokens: Sequence[re.Match], i: int, text: str) -> bool:
    """The first word, or a word after a ``?`` / ``!``, or after a lower-case word that ends with a full stop."""
    if i == 0:
        return True
    prev = tokens[i - 1]
    between = text[prev.end() : tokens[i].start()]
    if "?" in between or "!" in between:
        return True
    word = prev.group()
    return word.endswith(".") and not _capitalised(word) and not _INITIAL.match(word)


def _spans(text: str) -> list[tuple[int, int]]:
    """``(start, end)`` of every run of capitalised words and numbers that does not start a sentence."""
    tokens = list(_TOKEN.finditer(text))
    spans: list[tuple[int, int]] = []
    i = 0
    while i < len(tokens):
        if not _capitalised(tokens[i].group()) or _sentence_start(tokens, i, text):
            i += 1
            continue
        j = i
        while j + 1 < len(tokens):
            nxt = tokens[j + 1].group()
            if text[tokens[j].end() : tokens[j + 1].start()].strip():  # punctuation between: the run ends
                break
            if _capitalised(nxt) and not _sentence_start(tokens, j + 1, text):
                j += 1
            elif (
                nxt.lower() == nxt
                and nxt in CONNECTORS
                and j + 2 < len(tokens)
                and _capitalised(tokens[j + 2].group())
                and not text[tokens[j + 1].end() : tokens[j + 2].start()].strip()
            ):
                j += 2
            else:
                break
        start, end = tokens[i].start(), tokens[j].end()
        last = tokens[j].group()
        if (m := _POSSESSIVE.search(last)) and len(last) > len(m.group()):
            end -= len(m.group())
        elif last.endswith(".") and not _INITIAL.match(last):
            end -= len(last) - len(last.rstrip("."))
        spans.append((start, end))
        i = j + 1
    return spans


def question_template(text: str) -> str:
    """The generic template of a question's text (see the module docstring)."""
    text = _QUOTED.sub(PLACEHOLDER, text)
    parts: list[str] = []
    pos = 0
    for start, end in _spans(text):
        parts += [text[pos:start].lower(), PLACEHOLDER]
        pos = end
    out = "".join([*parts, text[pos:].lower()]).replace(f"{PLACEHOLDER} 's", f"{PLACEHOLDER}'s")
    while (merged := _MERGE.sub(PLACEHOLDER, out)) != out:
        out = merged
    return _SPACES.sub(" ", out).strip()


def style_counts(examples: Iterable[QAExample]) -> Counter[str]:
    """How many questions each style has."""
    return Counter(question_style(e) for e in examples)


def _matches(example: QAExample, names: set[str]) -> bool:
    return question_style(example) in names or question_kind(example) in names


def select_styles(
    examples: Sequence[QAExample],
    keep: Sequence[str] = (),
    drop: Sequence[str] = (),
    where: str = "the questions",
) -> list[QAExample]:
    """The questions whose style (or synthetic kind) is in ``keep`` (all when empty) and not in ``drop``.

    A name that no question of ``examples`` has is a ValueError naming the styles there are (``where`` says which
    questions, e.g. the file)."""
    if not keep and not drop:
        return list(examples)
    counts = style_counts(examples)
    known = set(counts) | {k for e in examples if (k := question_kind(e)) is not None}
    unknown = [s for s in dict.fromkeys([*keep, *drop]) if s not in known]
    if unknown:
        listed = ", ".join(f"{s!r} ({n})" for s, n in sorted(counts.items(), key=lambda sn: (-sn[1], sn[0]))[:40])
        more = f" and {len(counts) - 40} more" if len(counts) > 40 else ""
        kinds = sorted(known - set(counts))
        also = f"; kinds: {', '.join(kinds)}" if kinds else ""
        raise ValueError(
            f"no question of {where} has the style {', '.join(map(repr, unknown))}; styles there (questions): "
            f"{listed}{more}{also} (`searchrl data inspect FILE --styles` lists them all)"
        )
    keep_set, drop_set = set(keep), set(drop)
    return [e for e in examples if (not keep_set or _matches(e, keep_set)) and not _matches(e, drop_set)]


def rarest_styles(examples: Sequence[QAExample], fraction: float = 1 / 3) -> list[str]:
    """The rarest ``fraction`` of the styles of ``examples`` (at least one, never all when there are two or more):
    fewest questions first, ties by name, so the choice is deterministic."""
    if not 0 < fraction < 1:
        raise ValueError(f"fraction must be between 0 and 1 (got {fraction})")
    counts = style_counts(examples)
    if len(counts) < 2:
        raise ValueError(f"holding out styles needs at least two styles ({len(counts)} in the questions)")
    n = min(len(counts) - 1, max(1, round(fraction * len(counts))))
    return sorted(counts, key=lambda s: (counts[s], s))[:n]
