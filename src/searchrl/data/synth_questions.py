"""The synthetic world's questions: single-hop, bridge, three-hop and comparison questions with their reasoning
chains, split disjointly into train / dev / test."""

from __future__ import annotations

import random
from dataclasses import dataclass

from searchrl.data.records import QAExample
from searchrl.data.synth_world import _CREATOR_NOUN, _PUBLISHER_NOUN, KIND_SHARES, KINDS, SPLITS, Entity, World

# ------------------------------------------------------------------------------------------------------ questions
_YEAR_ATTRS = ("birth_year", "founding_year", "year", "death_year")  # attributes questions ask about (answers: years)


@dataclass(frozen=True)
class _Hop:
    relation: str
    subject: Entity
    answer: str  # entity name or year
    target: Entity | None  # the entity reached, None for a year
    #: (sub-question, query, fact, answer kind) of a relation outside the fixed twelve (``synth_open``)
    words: tuple[str, str, str, str] | None = None


def _follow(e: Entity, relation: str, w: World) -> _Hop | None:
    if relation in e.relations:
        t = w.entity(e.relations[relation])
        return _Hop(relation, e, t.name, t)
    if relation in _YEAR_ATTRS and relation in e.attrs:
        return _Hop(relation, e, str(e.attrs[relation]), None)
    return None


def _path(e: Entity, rels: tuple[str, ...], w: World) -> list[_Hop] | None:
    """The hops from ``e`` along ``rels`` (only the last may end at a year), None where a relation is missing."""
    hops: list[_Hop] = []
    cur: Entity | None = e
    for rel in rels:
        hop = _follow(cur, rel, w) if cur is not None else None
        if hop is None:
            return None
        hops.append(hop)
        cur = hop.target
    return hops


def _hop_question(h: _Hop) -> tuple[str, str]:
    """(sub-question, search query) that ask for one hop about a named subject."""
    s, sub = h.subject.name, h.subject.attrs.get("subtype")
    match h.relation:
        case "born_in":
            return f"In which city was {s} born?", f"{s} birthplace born in"
        case "birth_year":
            return f"In which year was {s} born?", f"{s} born year"
        case "death_year":
            return f"In which year did {s} die?", f"{s} died year"
        case "spouse":
            return f"Who was {s} married to?", f"{s} spouse married to"
        case "employer":
            return f"Which organisation did {s} work for?", f"{s} employer worked for"
        case "founder":
            return f"Who founded {s}?", f"{s} founder founded by"
        case "headquarters":
            return f"In which city is {s} headquartered?", f"{s} headquarters"
        case "founding_year":
            return f"In which year was {s} founded?", f"{s} founded year"
        case "creator":
            verb = {"film": "directed", "book": "wrote", "album": "recorded"}[sub]
            return f"Who {verb} {s}?", f"{s} {_CREATOR_NOUN[sub]}"
        case "publisher":
            verb = {"film": "produced", "book": "published", "album": "released"}[sub]
            return f"Which {_PUBLISHER_NOUN[sub]} {verb} {s}?", f"{s} {_PUBLISHER_NOUN[sub]}"
        case "year":
            verb = {"film": "released", "book": "published", "album": "released"}[sub]
            return f"In which year was {s} {verb}?", f"{s} {verb} year"
        case "country":
            return f"In which country is {s}?", f"{s} city country"
        case "capital":
            return f"What is the capital of {s}?", f"{s} capital city"
    raise ValueError(f"no question template for relation {h.relation!r}")


#: a work's creator / publisher verb and its release verb, by subtype ("directed", "produced", "released")
_CREATED = {"film": "directed", "book": "written", "album": "recorded"}
_ISSUED = {"film": "produced", "book": "published", "album": "released"}
_CAME_OUT = {"film": "released", "book": "published", "album": "released"}


def _hop_fact(h: _Hop) -> str:
    """The hop's answer as a statement about its subject ("Vramzen was written by Mokpirn Pivveix"), the form in
    which an oracle records what the documents said."""
    s, a, sub = h.subject.name, h.answer, h.subject.attrs.get("subtype")
    return {
        "born_in": f"{s} was born in {a}",
        "birth_year": f"{s} was born in {a}",
        "death_year": f"{s} died in {a}",
        "spouse": f"{s} was married to {a}",
        "employer": f"{s} worked for {a}",
        "founder": f"{s} was founded by {a}",
        "headquarters": f"{s} is headquartered in {a}",
        "founding_year": f"{s} was founded in {a}",
        "creator": f"{s} was {_CREATED.get(sub, 'made')} by {a}",
        "publisher": f"{s} was {_ISSUED.get(sub, 'issued')} by {a}",
        "year": f"{s} was {_CAME_OUT.get(sub, 'released')} in {a}",
        "country": f"{s} is in {a}",
        "capital": f"The capital of {s} is {a}",
    }.get(h.relation, f"{s}: {a}")


# Multi-hop templates: (kind, start entity kind, relations followed, question). ``{s}`` is the named start
# entity; ``{cn}`` / ``{pn}`` the creator / publisher noun of a work ("director", "label", ...).
_TEMPLATES: list[tuple[str, str, tuple[str, ...], str]] = [
    ("bridge", "person", ("born_in", "country"), "In which country was {s} born?"),
    ("bridge", "person", ("spouse", "born_in"), "Where was the spouse of {s} born?"),
    ("bridge", "person", ("employer", "founder"), "Who founded the organisation {s} worked for?"),
    ("bridge", "person", ("employer", "headquarters"), "In which city is {s}'s employer headquartered?"),
    ("bridge", "organisation", ("founder", "born_in"), "Where was the founder of {s} born?"),
    ("bridge", "organisation", ("founder", "birth_year"), "In which year was the founder of {s} born?"),
    ("bridge", "organisation", ("headquarters", "country"), "In which country is {s} headquartered?"),
    ("bridge", "city", ("country", "capital"), "What is the capital of the country where {s} lies?"),
    ("bridge", "work", ("creator", "born_in"), "Where was the {cn} of {s} born?"),
    ("bridge", "work", ("creator", "birth_year"), "In which year was the {cn} of {s} born?"),
    ("bridge", "work", ("creator", "spouse"), "Who was the {cn} of {s} married to?"),
    ("bridge", "work", ("publisher", "founder"), "Who founded the {pn} of {s}?"),
    ("bridge", "work", ("publisher", "headquarters"), "In which city is the {pn} of {s} based?"),
    ("bridge", "work", ("publisher", "founding_year"), "In which year was the {pn} of {s} founded?"),
    (
        "three_hop",
        "person",
        ("born_in", "country", "capital"),
        "What is the capital of the country where {s} was born?",
    ),
    ("three_hop", "person", ("employer", "founder", "born_in"), "Where was the founder of {s}'s employer born?"),
    (
        "three_hop",
        "person",
        ("employer", "headquarters", "country"),
        "In which country is the organisation {s} worked for headquartered?",
    ),
    ("three_hop", "organisation", ("founder", "born_in", "country"), "In which country was the founder of {s} born?"),
    ("three_hop", "work", ("creator", "born_in", "country"), "In which country was the {cn} of {s} born?"),
    ("three_hop", "work", ("creator", "spouse", "born_in"), "Where was the spouse of the {cn} of {s} born?"),
    (
        "three_hop",
        "work",
        ("publisher", "founder", "birth_year"),
        "In which year was the founder of the {pn} of {s} born?",
    ),
    ("three_hop", "work", ("publisher", "headquarters", "country"), "In which country is the {pn} of {s} based?"),
]

_SINGLE_RELATIONS = {
    "person": ("born_in", "birth_year", "spouse", "employer"),
    "organisation": ("founder", "headquarters", "founding_year"),
    "work": ("creator", "publisher", "year"),
    "city": ("country", "founding_year"),
    "country": ("capital",),
}

# Comparison: (entity kind, year attribute, question for "earlier", question for "later").
_COMPARISONS = [
    ("person", "birth_year", "Who was born first, {a} or {b}?", "Who was born later, {a} or {b}?"),
    (
        "organisation",
        "founding_year",
        "Which was founded earlier, {a} or {b}?",
        "Which was founded later, {a} or {b}?",
    ),
    ("work", "year", "Which came out first, {a} or {b}?", "Which came out more recently, {a} or {b}?"),
    ("city", "founding_year", "Which city was founded earlier, {a} or {b}?", "Which city is younger, {a} or {b}?"),
]
#: with ``data.world.deaths``, people are also compared by the year they died (only people the world lets die)
_DEATH_COMPARISON = ("person", "death_year", "Who died first, {a} or {b}?", "Who died later, {a} or {b}?")


@dataclass(frozen=True)
class _Candidate:
    key: str  # identifies the facts asked about; two candidates with one key never go to different splits
    kind: str
    question: str
    answers: list[str]
    hops: list[_Hop]
    template: str


def _chain(hops: list[_Hop]) -> list[dict[str, str]]:
    out = []
    for h in hops:
        sub_q, query = (h.words[0], h.words[1]) if h.words else _hop_question(h)
        hop = {
            "sub_question": sub_q,
            "query": query,
            "subject": h.subject.name,
            "passage_id": h.subject.id,
            "answer": h.answer,
            "relation": h.relation,
            "fact": h.words[2] if h.words else _hop_fact(h),
        }
        if h.words:
            hop["answer_kind"] = h.words[3]
        out.append(hop)
    return out


def _answers_for(h: _Hop) -> list[str]:
    return list(h.target.aliases) if h.target is not None else [h.answer]


def _path_candidates(w: World) -> list[_Candidate]:
    out: list[_Candidate] = []
    for e in w.entities:
        for rel in _SINGLE_RELATIONS[e.kind]:
            hop = _follow(e, rel, w)
            if hop is not None:
                q, _ = _hop_question(hop)
                out.append(_Candidate(f"{e.id}/{rel}", "single_hop", q, _answers_for(hop), [hop], f"single:{rel}"))
        for kind, start, rels, fmt in _TEMPLATES:
            if e.kind != start:
                continue
            hops = _path(e, rels, w)
            if hops is None:
                continue
            # A chain that loops back (e.g. the spouse of the director is the subject) is not really multi-hop.
            ids = [h.subject.id for h in hops] + ([hops[-1].target.id] if hops[-1].target else [])
            if len(set(ids)) != len(ids):
                continue
            sub = e.attrs.get("subtype")
            q = fmt.format(s=e.name, cn=_CREATOR_NOUN.get(sub, ""), pn=_PUBLISHER_NOUN.get(sub, ""))
            out.append(
                _Candidate(
                    f"{e.id}/{'.'.join(rels)}", kind, q, _answers_for(hops[-1]), hops, f"{kind}:{'.'.join(rels)}"
                )
            )
    return out


def _death_stated(w: World) -> set[str]:
    """The people whose passage gives the year they died (a passage leaves some optional sentences out)."""
    text = {p.id: p.contents for p in w.passages}
    return {e.id for e in w.entities if "death_year" in e.attrs and f"died in {e.attrs['death_year']}" in text[e.id]}


def _comparison_candidates(w: World, n_wanted: int, rng: random.Random, deaths: bool = False) -> list[_Candidate]:
    out: list[_Candidate] = []
    seen: set[str] = set()
    shapes = [*_COMPARISONS, _DEATH_COMPARISON] if deaths else _COMPARISONS
    pools = {(k, attr): [e for e in w.entities if e.kind == k and attr in e.attrs] for k, attr, *_ in shapes}
    if deaths:
        stated = _death_stated(w)
        pools["person", "death_year"] = [e for e in pools["person", "death_year"] if e.id in stated]
    for _ in range(n_wanted * 4):
        if len(out) >= n_wanted:
            break
        kind, attr, q_first, q_later = rng.choice(shapes)
        pool = pools[kind, attr]
        a, b = rng.sample(pool, 2)
        if kind == "work" and a.attrs["subtype"] != b.attrs["subtype"]:
            continue  # comparing a film with an album reads oddly
        if a.attrs[attr] == b.attrs[attr]:
            continue
        key = "cmp/" + "/".join(sorted((a.id, b.id)))
        if key in seen:
            continue
        seen.add(key)
        later = rng.random() < 0.5
        ordered = sorted((a, b), key=lambda x: x.attrs[attr])  # earliest first
        winner = ordered[1] if later else ordered[0]
        loser = ordered[0] if later else ordered[1]
        q = (q_later if later else q_first).format(a=a.name, b=b.name)
        # One hop per entity, the answer's passage last (see the module docstring).
        hops = [_Hop(attr, x, str(x.attrs[attr]), None) for x in (loser, winner)]
        out.append(_Candidate(key, "comparison", q, list(winner.aliases), hops, f"comparison:{kind}.{attr}"))
    return out


#: Same-or-not comparisons (``data.world.yes_no``): (entity kind, relations followed from each entity, question).
#: The answer is "yes" when both paths end at the same entity. ``{cn}`` / ``{pn}``: the works' creator / publisher
#: noun (both works have one subtype).
_SAME: list[tuple[str, tuple[str, ...], str]] = [
    ("person", ("born_in",), "Were {a} and {b} born in the same city?"),
    ("person", ("born_in", "country"), "Were {a} and {b} born in the same country?"),
    ("person", ("employer",), "Did {a} and {b} work for the same organisation?"),
    ("organisation", ("headquarters",), "Are {a} and {b} headquartered in the same city?"),
    ("organisation", ("headquarters", "country"), "Are {a} and {b} based in the same country?"),
    ("organisation", ("founder", "born_in"), "Were the founders of {a} and {b} born in the same city?"),
    ("city", ("country",), "Are the cities {a} and {b} in the same country?"),
    ("work", ("creator",), "Do {a} and {b} have the same {cn}?"),
    ("work", ("publisher",), "Did {a} and {b} come out through the same {pn}?"),
    ("work", ("creator", "born_in", "country"), "Are the {cn}s of {a} and {b} from the same country?"),
]


def _same_candidates(w: World, n_wanted: int, rng: random.Random) -> list[_Candidate]:
    """``n_wanted`` yes/no questions asking whether two named entities lead to the same entity ("Were A and B born in
    the same country?"), half answered "yes". The chain holds A's hops, then B's (the same relations each side)."""
    ends: dict[int, dict[str, list[tuple[Entity, list[_Hop]]]]] = {}  # template -> end entity id -> starts
    for t, (kind, rels, _) in enumerate(_SAME):
        groups: dict[str, list[tuple[Entity, list[_Hop]]]] = {}
        for e in w.entities:
            if e.kind == kind and (hops := _path(e, rels, w)) is not None:
                groups.setdefault(f"{e.attrs.get('subtype', '')}/{hops[-1].target.id}", []).append((e, hops))
        ends[t] = groups
    out: list[_Candidate] = []
    seen: set[str] = set()
    for _ in range(n_wanted * 6):
        if len(out) >= n_wanted:
            break
        t = rng.randrange(len(_SAME))
        kind, rels, fmt = _SAME[t]
        groups = ends[t]
        if not groups:
            continue
        yes = rng.random() < 0.5
        keys = sorted(groups)
        if yes:
            pairs = [k for k in keys if len(groups[k]) > 1]
            if not pairs:
                continue
            (a, a_hops), (b, b_hops) = rng.sample(groups[rng.choice(pairs)], 2)
        else:
            k1 = rng.choice(keys)
            # another end, reached from an entity of the same subtype (no "same director" of a film and an album)
            others = [k for k in keys if k != k1 and k.split("/")[0] == k1.split("/")[0]]
            if not others:
                continue
            (a, a_hops), (b, b_hops) = rng.choice(groups[k1]), rng.choice(groups[rng.choice(others)])
        if a.id == b.id:
            continue
        key = f"same/{'.'.join(rels)}/" + "/".join(sorted((a.id, b.id)))
        if key in seen:
            continue
        seen.add(key)
        sub = a.attrs.get("subtype")
        q = fmt.format(a=a.name, b=b.name, cn=_CREATOR_NOUN.get(sub, ""), pn=_PUBLISHER_NOUN.get(sub, ""))
        template = f"comparison:same.{kind}.{'.'.join(rels)}"
        out.append(_Candidate(key, "comparison", q, ["yes" if yes else "no"], a_hops + b_hops, template))
    return out


#: Bridge comparisons (``data.world.bridge_comparisons``): (entity kind, relations to a year, question asking for the
#: earlier one, for the later one). The answer is the named entity, not the one the years belong to. ``{w}``: the
#: work's subtype; ``{cn}`` / ``{pn}``: its creator / publisher noun.
_BRIDGE_COMPARISONS: list[tuple[str, tuple[str, str], str, str]] = [
    (
        "work",
        ("creator", "birth_year"),
        "Which {w} has the {cn} who was born earlier, {a} or {b}?",
        "Which {w} has the {cn} who was born later, {a} or {b}?",
    ),
    (
        "work",
        ("publisher", "founding_year"),
        "Which {w} came out through the older {pn}, {a} or {b}?",
        "Which {w} came out through the younger {pn}, {a} or {b}?",
    ),
    (
        "person",
        ("spouse", "birth_year"),
        "Whose spouse was born first, {a} or {b}?",
        "Whose spouse was born later, {a} or {b}?",
    ),
    (
        "person",
        ("employer", "founding_year"),
        "Whose employer was founded earlier, {a} or {b}?",
        "Whose employer was founded later, {a} or {b}?",
    ),
    (
        "organisation",
        ("founder", "birth_year"),
        "Which organisation has the founder who was born first, {a} or {b}?",
        "Which organisation has the founder who was born later, {a} or {b}?",
    ),
]
#: with ``data.world.deaths``: works compared by the year their creator died
_DEATH_BRIDGE_COMPARISON = (
    "work",
    ("creator", "death_year"),
    "Which {w} has the {cn} who died earlier, {a} or {b}?",
    "Which {w} has the {cn} who died later, {a} or {b}?",
)


def _bridge_comparison_candidates(
    w: World, n_wanted: int, rng: random.Random, deaths: bool = False
) -> list[_Candidate]:
    """``n_wanted`` comparisons of two named entities by a year one hop away from each ("Which film has the director
    who was born earlier, A or B?"); the answer is the named entity. The chain holds A's two hops, then B's."""
    shapes = [*_BRIDGE_COMPARISONS, _DEATH_BRIDGE_COMPARISON] if deaths else _BRIDGE_COMPARISONS
    starts = {
        t: [(e, hops) for e in w.entities if e.kind == kind and (hops := _path(e, rels, w)) is not None]
        for t, (kind, rels, *_) in enumerate(shapes)
    }
    if deaths:
        stated, t = _death_stated(w), len(shapes) - 1
        starts[t] = [(e, hops) for e, hops in starts[t] if hops[0].target.id in stated]
    out: list[_Candidate] = []
    seen: set[str] = set()
    for _ in range(n_wanted * 6):
        if len(out) >= n_wanted:
            break
        t = rng.randrange(len(shapes))
        kind, rels, q_first, q_later = shapes[t]
        if len(starts[t]) < 2:
            continue
        (a, a_hops), (b, b_hops) = rng.sample(starts[t], 2)
        sub = a.attrs.get("subtype")
        middle = a_hops[0].target.id, b_hops[0].target.id
        if sub != b.attrs.get("subtype") or middle[0] == middle[1] or middle[0] == b.id or middle[1] == a.id:
            continue  # a film against an album, one director for both, or two spouses: no comparison
        years = int(a_hops[-1].answer), int(b_hops[-1].answer)
        if years[0] == years[1]:
            continue
        key = f"bcmp/{'.'.join(rels)}/" + "/".join(sorted((a.id, b.id)))
        if key in seen:
            continue
        seen.add(key)
        later = rng.random() < 0.5
        winner = a if (years[0] > years[1]) == later else b
        names = {
            "a": a.name,
            "b": b.name,
            "w": sub or "",
            "cn": _CREATOR_NOUN.get(sub, ""),
            "pn": _PUBLISHER_NOUN.get(sub, ""),
        }
        q = (q_later if later else q_first).format(**names)
        template = f"comparison:bridge.{kind}.{'.'.join(rels)}"
        out.append(_Candidate(key, "comparison", q, list(winner.aliases), a_hops + b_hops, template))
    return out


def _quotas(size: int) -> dict[str, int]:
    """``size`` split over the kinds by ``KIND_SHARES``, summing exactly to ``size`` (largest remainders first)."""
    exact = {k: size * KIND_SHARES[k] for k in KINDS}
    quota = {k: int(v) for k, v in exact.items()}
    for k in sorted(KINDS, key=lambda k: (quota[k] - exact[k], KINDS.index(k)))[: size - sum(quota.values())]:
        quota[k] += 1
    return quota


def _split_questions(cands: list[_Candidate], sizes: dict[str, int], rng: random.Random) -> dict[str, list[QAExample]]:
    """Fill test, dev, then train with each kind at its share; a key and a question string land in one split only."""
    by_kind: dict[str, list[_Candidate]] = {k: [] for k in KINDS}
    for c in cands:
        by_kind[c.kind].append(c)
    for k in KINDS:
        rng.shuffle(by_kind[k])
    used_keys: set[str] = set()
    used_questions: set[str] = set()

    def take(kind: str) -> _Candidate | None:
        while by_kind[kind]:
            c = by_kind[kind].pop()
            if c.key not in used_keys and c.question not in used_questions:
                used_keys.add(c.key)
                used_questions.add(c.question)
                return c
        return None

    out: dict[str, list[QAExample]] = {}
    for split in ("test", "dev", "train"):
        picked: list[_Candidate] = []
        for k, quota in _quotas(sizes[split]).items():
            while len(picked) < sizes[split] and quota > 0 and (c := take(k)) is not None:
                picked.append(c)
                quota -= 1
        # A small world may run out of one kind: top the split up from the others, in KINDS order.
        for k in KINDS:
            while len(picked) < sizes[split] and (c := take(k)) is not None:
                picked.append(c)
        rng.shuffle(picked)
        out[split] = [
            QAExample(
                f"{split}-{i}",
                c.question,
                c.answers,
                {
                    "kind": c.kind,
                    "template": c.template,
                    "chain": _chain(c.hops),
                    "supporting_ids": list(dict.fromkeys(h.subject.id for h in c.hops)),
                },
            )
            for i, c in enumerate(picked)
        ]
    return {s: out[s] for s in SPLITS}
