"""Open relations for the synthetic world (``data.world.relations: open``).

The fixed world ties its entities by twelve relations. A model cold-started on it learns them as a closed
vocabulary, and on real questions it maps a relation it has not seen onto one it knows: "When did X's father die?"
was planned as "Who founded X? In which year was #1 born?". With ``relations: open`` every entity also gets one to
three facts under relations drawn from a broad pool of encyclopedia fields (kin, teachers and rivals, places and
dates of death, a film's screenwriter or a book's editor, an organisation's chair, a city's mayor), stated in its
passage, and about half of each question kind asks for them: alone, chained with each other ("When did the teacher
of X die?", "Who was the mother of X's father?") and chained with the fixed relations ("Where was the screenwriter
of W born?"). There are too many of them to learn as a list, and each hop's search carries the question's own
relation words ("X father"), so what the cold start can learn from them is to search with the words the question
uses. Dates are written in full ("3 November 1829"), as encyclopedias and real questions give them.

Everything here draws from its own generator seeded from the world's seed, so the fixed relations, their passages'
facts and the names are those of the fixed world with the same seed.
"""

from __future__ import annotations

import bisect
import random
import re
from dataclasses import dataclass

from searchrl.data.synth_questions import _answers_for, _Candidate, _follow, _Hop, _hop_question
from searchrl.data.synth_world import _CREATOR_NOUN, _PUBLISHER_NOUN, Entity, World

MONTHS = "January February March April May June July August September October November December".split()
#: Share of each question kind drawn from open relations (the rest are the fixed world's).
OPEN_SHARE = 0.5


@dataclass(frozen=True)
class OpenRelation:
    noun: str  # "father", "place of death": the relation's name and the words its searches use
    subject: str  # entity kind, or "work:<subtype>"
    value: str  # "person" | "city" | "organisation" | "date"
    ask: str  # the question about ``{s}`` (a name or a phrase such as "the teacher of X")
    alt: str = ""  # a second wording for a named subject
    says: tuple[str, ...] = ()  # passage sentences with ``{s}`` and ``{v}``; default: the noun's own forms

    @property
    def answer_kind(self) -> str:
        return {"person": "a person", "city": "a city", "organisation": "an organisation", "date": "a date"}[
            self.value
        ]

    def statements(self) -> tuple[str, ...]:
        return self.says or (f"{{s}}'s {self.noun} was {{v}}.", f"The {self.noun} of {{s}} was {{v}}.")


def _kin(noun: str) -> OpenRelation:
    return OpenRelation(noun, "person", "person", f"Who was the {noun} of {{s}}?", f"Who was {{s}}'s {noun}?")


_POOL: tuple[OpenRelation, ...] = (
    *(_kin(n) for n in ("father", "mother", "brother", "sister", "son", "daughter")),
    *(_kin(n) for n in ("teacher", "student", "rival", "patron", "biographer")),
    OpenRelation(
        "place of death",
        "person",
        "city",
        "Where did {s} die?",
        "What was the place of death of {s}?",
        ("{s} died in {v}.", "{s}'s place of death was {v}."),
    ),
    OpenRelation(
        "place of burial",
        "person",
        "city",
        "Where was {s} buried?",
        "What was the place of burial of {s}?",
        ("{s} was buried in {v}.", "{s}'s place of burial was {v}."),
    ),
    OpenRelation(
        "date of death",
        "person",
        "date",
        "When did {s} die?",
        "What was the date of death of {s}?",
        ("{s} died on {v}.", "{s}'s date of death was {v}."),
    ),
    OpenRelation(
        "date of birth",
        "person",
        "date",
        "When was {s} born?",
        "What was the date of birth of {s}?",
        ("{s} was born on {v}.", "{s}'s date of birth was {v}."),
    ),
    OpenRelation(
        "alma mater",
        "person",
        "organisation",
        "Which university did {s} attend?",
        "What was the alma mater of {s}?",
        ("{s} was educated at {v}.", "{s}'s alma mater was {v}."),
    ),
    OpenRelation("chair", "organisation", "person", "Who was the chair of {s}?", "Who chaired {s}?"),
    OpenRelation("treasurer", "organisation", "person", "Who was the treasurer of {s}?"),
    OpenRelation(
        "parent organisation",
        "organisation",
        "organisation",
        "What is the parent organisation of {s}?",
        "Which organisation owns {s}?",
        ("{s} is owned by {v}.", "The parent organisation of {s} is {v}."),
    ),
    OpenRelation("screenwriter", "work:film", "person", "Who was the screenwriter of {s}?", "Who wrote {s}?"),
    OpenRelation("composer", "work:film", "person", "Who was the composer of {s}?", "Who scored {s}?"),
    OpenRelation("cinematographer", "work:film", "person", "Who was the cinematographer of {s}?"),
    OpenRelation(
        "filming location",
        "work:film",
        "city",
        "Where was {s} filmed?",
        "What was the filming location of {s}?",
        ("{s} was filmed in {v}.", "The filming location of {s} was {v}."),
    ),
    OpenRelation("editor", "work:book", "person", "Who was the editor of {s}?", "Who edited {s}?"),
    OpenRelation("illustrator", "work:book", "person", "Who was the illustrator of {s}?", "Who illustrated {s}?"),
    OpenRelation("translator", "work:book", "person", "Who was the translator of {s}?"),
    OpenRelation(
        "setting",
        "work:book",
        "city",
        "Where is {s} set?",
        "In which city is {s} set?",
        ("{s} is set in {v}.", "The setting of {s} is {v}."),
    ),
    OpenRelation("lyricist", "work:album", "person", "Who was the lyricist of {s}?"),
    OpenRelation("arranger", "work:album", "person", "Who was the arranger of {s}?"),
    OpenRelation(
        "recording location",
        "work:album",
        "city",
        "Where was {s} recorded?",
        "What was the recording location of {s}?",
        ("{s} was recorded in {v}.", "It was recorded in {v}."),
    ),
    OpenRelation("mayor", "city", "person", "Who was the mayor of {s}?", "Who was {s}'s mayor?"),
    OpenRelation("head of state", "country", "person", "Who was the head of state of {s}?"),
    OpenRelation("national poet", "country", "person", "Who is the national poet of {s}?"),
)
OPEN_RELATIONS = {r.noun: r for r in _POOL}
_OLDER = {"father": (18, 50), "mother": (18, 45), "teacher": (10, 50), "patron": (10, 60)}
_YOUNGER = {"son": (18, 50), "daughter": (18, 45), "student": (10, 50), "biographer": (5, 70)}


def _date(rng: random.Random, year: int) -> str:
    return f"{rng.randint(1, 28)} {MONTHS[rng.randrange(12)]} {year}"


def when(text: str) -> tuple[int, int, int] | None:
    """A year ("1850") or a full date ("3 May 1850") as (year, month, day), for ordering; None for anything else."""
    if text.isdigit():
        return int(text), 0, 0
    parts = text.split()
    if len(parts) == 3 and parts[0].isdigit() and parts[1] in MONTHS and parts[2].isdigit():
        return int(parts[2]), MONTHS.index(parts[1]) + 1, int(parts[0])
    return None


def _applies(rel: OpenRelation, e: Entity) -> bool:
    return rel.subject == e.kind or rel.subject == f"{e.kind}:{e.attrs.get('subtype')}"


def add_open_relations(w: World, rng: random.Random) -> None:
    """Give each entity 1-3 open relations it can hold (entity ids in ``relations``, dates in ``attrs``)."""
    people = [w.entity(i) for i in w.ids_by_kind["person"]]
    by_year = sorted(people, key=lambda p: p.attrs["birth_year"])
    years = [p.attrs["birth_year"] for p in by_year]
    orgs = [w.entity(i) for i in w.ids_by_kind["organisation"]]
    universities = [o for o in orgs if o.attrs["subtype"] == "university"] or orgs

    def born_between(lo: int, hi: int, avoid: str) -> Entity | None:
        pool = by_year[bisect.bisect_left(years, lo) : bisect.bisect_right(years, hi)]
        pool = [p for p in pool if p.id != avoid]
        return rng.choice(pool) if pool else None

    for e in w.entities:
        rels = [r for r in _POOL if _applies(r, e)]
        for rel in rng.sample(rels, min(len(rels), rng.randint(1, 3))):
            born = e.attrs.get("birth_year")
            if rel.value == "date":
                year = e.attrs.get("death_year") if rel.noun == "date of death" else born
                if year is not None:
                    e.attrs[rel.noun] = _date(rng, year)
                continue
            if rel.noun in _OLDER and born is not None:
                lo, hi = _OLDER[rel.noun]
                target = born_between(born - hi, born - lo, e.id)
            elif rel.noun in _YOUNGER and born is not None:
                lo, hi = _YOUNGER[rel.noun]
                target = born_between(born + lo, born + hi, e.id)
            elif rel.value == "person":
                target = rng.choice(people)
            elif rel.value == "city":
                target = w.entity(rng.choice(w.ids_by_kind["city"]))
            else:
                target = rng.choice(universities if rel.noun == "alma mater" else orgs)
            if target is not None and target.id != e.id:
                e.relations[rel.noun] = target.id


def open_sentences(e: Entity, w: World, rng: random.Random) -> list[str]:
    """The passage's statements of ``e``'s open relations, in its own words."""
    s = e.short
    out = []
    for noun, rel in OPEN_RELATIONS.items():
        value = e.attrs.get(noun) if rel.value == "date" else e.relations.get(noun)
        if value is None:
            continue
        v = value if rel.value == "date" else w.entity(value).name
        out.append(rng.choice(rel.statements()).format(s=s, v=v))
    return out


# ------------------------------------------------------------------------------------------------------ questions
def _open_hop(e: Entity, noun: str, w: World) -> _Hop | None:
    rel = OPEN_RELATIONS[noun]
    if rel.value == "date":
        if noun not in e.attrs:
            return None
        answer, target = e.attrs[noun], None
    else:
        if noun not in e.relations:
            return None
        target = w.entity(e.relations[noun])
        answer = target.name
    fact = rel.statements()[-1].format(s=e.name, v=answer).rstrip(".")
    return _Hop(noun, e, answer, target, (rel.ask.format(s=e.name), f"{e.name} {noun}", fact, rel.answer_kind))


#: How a chained question names the entity a fixed hop reached ("the director of W").
_FIXED_PHRASE = {
    "creator": "the {cn} of {s}",
    "publisher": "the {pn} of {s}",
    "founder": "the founder of {s}",
    "spouse": "the spouse of {s}",
    "employer": "the employer of {s}",
    "born_in": "the birthplace of {s}",
    "headquarters": "the city where {s} is headquartered",
    "country": "the country of {s}",
    "capital": "the capital of {s}",
}
_FIXED_FOLLOW = ("born_in", "birth_year", "spouse", "employer", "founder", "headquarters", "founding_year")
_FIXED_FOLLOW += ("creator", "publisher", "year", "country", "capital")


def _hops_of(e: Entity, w: World, fixed: bool) -> list[_Hop]:
    """Every hop out of ``e``: its open relations, and its fixed ones when ``fixed``."""
    hops = [h for noun in OPEN_RELATIONS if (h := _open_hop(e, noun, w)) is not None]
    if fixed:
        hops += [h for rel in _FIXED_FOLLOW if (h := _follow(e, rel, w)) is not None]
    return hops


def _phrase(prev: str, h: _Hop, named: bool, rng: random.Random) -> str:
    """The entity hop ``h`` reaches, described from ``prev`` (a name when ``named``, else a phrase)."""
    if h.relation in OPEN_RELATIONS:
        if named and rng.random() < 0.5:
            return f"{prev}'s {h.relation}"
        return f"the {h.relation} of {prev}"
    sub = h.subject.attrs.get("subtype")
    return _FIXED_PHRASE[h.relation].format(s=prev, cn=_CREATOR_NOUN.get(sub, ""), pn=_PUBLISHER_NOUN.get(sub, ""))


def _question(hops: list[_Hop], rng: random.Random) -> str:
    """The whole chain as one question: each hop but the last folded into a phrase, then the last hop's question
    about that phrase."""
    subject = hops[0].subject.name
    for i, h in enumerate(hops[:-1]):
        subject = _phrase(subject, h, i == 0, rng)
    last = hops[-1]
    if last.relation in OPEN_RELATIONS:
        rel = OPEN_RELATIONS[last.relation]
        form = rel.alt if rel.alt and len(hops) == 1 and rng.random() < 0.5 else rel.ask
        return form.format(s=subject)
    return _hop_question(last)[0].replace(last.subject.name, subject, 1)


def open_candidates(w: World, rng: random.Random) -> list[_Candidate]:
    """Questions over the open relations: one hop, two or three hops with at least one open relation (the first
    open, or a fixed hop whose entity a phrase can name, then an open one), and "who died first" comparisons of
    full dates."""
    out: list[_Candidate] = []
    for e in w.entities:
        for h1 in _hops_of(e, w, fixed=True):
            is_open = h1.relation in OPEN_RELATIONS
            if is_open:
                q = _question([h1], rng)
                out.append(_Candidate(f"{e.id}/{h1.relation}", "single_hop", q, _answers_for(h1), [h1], _tpl([h1])))
            if h1.target is None or (not is_open and h1.relation not in _FIXED_PHRASE):
                continue
            for h2 in _hops_of(h1.target, w, fixed=is_open):
                chains = [[h1, h2]]
                if h2.target is not None and (is_open or h2.relation in OPEN_RELATIONS):
                    nexts = _hops_of(h2.target, w, fixed=True)
                    chains += [[h1, h2, h3] for h3 in rng.sample(nexts, min(2, len(nexts)))]
                for hops in chains:
                    ids = [h.subject.id for h in hops] + ([hops[-1].target.id] if hops[-1].target else [])
                    if len(set(ids)) != len(ids) or (
                        len(hops) == 3
                        and hops[1].relation not in OPEN_RELATIONS
                        and hops[1].relation not in _FIXED_PHRASE
                    ):
                        continue
                    kind = "bridge" if len(hops) == 2 else "three_hop"
                    key = f"{e.id}/" + ".".join(h.relation for h in hops)
                    out.append(_Candidate(key, kind, _question(hops, rng), _answers_for(hops[-1]), hops, _tpl(hops)))
    return out + _death_comparisons(w, rng)


def _tpl(hops: list[_Hop]) -> str:
    kind = {1: "single", 2: "bridge", 3: "three_hop"}[len(hops)]
    return f"{kind}:" + ".".join(re.sub(r"\s+", "_", h.relation) for h in hops)


def _death_comparisons(w: World, rng: random.Random) -> list[_Candidate]:
    dead = [w.entity(i) for i in w.ids_by_kind["person"] if "date of death" in w.entity(i).attrs]
    out, seen = [], set()
    for _ in range(min(4 * len(dead), 2000)):
        if len(dead) < 2:
            break
        a, b = rng.sample(dead, 2)
        key = "cmp/" + "/".join(sorted((a.id, b.id)))
        if key in seen or a.attrs["date of death"] == b.attrs["date of death"]:
            continue
        seen.add(key)
        later = rng.random() < 0.5
        ordered = sorted((a, b), key=lambda x: when(x.attrs["date of death"]))
        winner, loser = (ordered[1], ordered[0]) if later else (ordered[0], ordered[1])
        q = f"Who died {'later' if later else 'first'}, {a.name} or {b.name}?"
        hops = [h for x in (loser, winner) if (h := _open_hop(x, "date of death", w)) is not None]
        out.append(_Candidate(key, "comparison", q, list(winner.aliases), hops, "comparison:person.date_of_death"))
    return out


def mix(fixed: list[_Candidate], opened: list[_Candidate], rng: random.Random) -> list[_Candidate]:
    """The fixed candidates plus open ones drawn so that each kind's pool is about ``OPEN_SHARE`` open."""
    out = list(fixed)
    for kind in sorted({c.kind for c in fixed + opened}):
        n_fixed = sum(c.kind == kind for c in fixed)
        pool = [c for c in opened if c.kind == kind]
        n = min(len(pool), max(1, round(n_fixed * OPEN_SHARE / (1 - OPEN_SHARE))))
        out += rng.sample(pool, n)
    return out
