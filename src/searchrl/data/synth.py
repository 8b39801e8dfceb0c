"""A synthetic multi-hop world: a fictional encyclopedia whose answers no model can know without searching.

The world holds people, cities, countries, organisations and works (films, books, albums) tied by typed relations
(``born_in``, ``spouse``, ``employer``, ``founder``, ``headquarters``, ``creator``, ``publisher``, ``country``,
``capital``) and year attributes. Every name is made of invented syllables and is unique across the world, so
parametric knowledge cannot answer and a name never points at two entities.

Each entity gets one passage of encyclopedic prose (title = name; the text opens with the name; 60-120 words) that
states all of its facts, plus distractor sentences naming other entities and near-miss facts (another city it moved
to, an office abroad, a work it is compared with), so that retrieval and reading are not trivial.

Questions come in four kinds, and each records its reasoning chain in ``metadata``:

- ``single_hop``: one fact of a named entity ("In which city was X born?");
- ``bridge``: two hops through an unnamed entity ("Where was the director of W born?");
- ``three_hop``: three hops ("In which country was the director of W born?");
- ``comparison``: two entities compared on a year ("Who was born first, X or Y?"); one hop per entity, ordered so
  the answer's own passage comes last.

``metadata["chain"]`` lists the hops as ``{"sub_question", "query", "passage_id", "answer", "relation"}``; the hop
answer occurs in the hop's passage and the final answer in the last hop's passage (tested). Splits are disjoint by
question: a question (and every other phrasing of the same facts) lands in exactly one split.

Everything draws from one seeded ``random.Random``; the same seed gives byte-identical files.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from searchrl.data._real_words import REAL_WORDS
from searchrl.data.corpus import Passage
from searchrl.data.records import QAExample
from searchrl.utils import atomic_write_text

#: Bumped whenever a change alters the generated files for a given seed.
GENERATOR_VERSION = 1
KINDS = ("single_hop", "bridge", "three_hop", "comparison")
SPLITS = ("train", "dev", "test")
#: Share of each question kind in every split (HotpotQA has about a fifth comparison questions; we use fewer).
KIND_SHARES = {"single_hop": 0.30, "bridge": 0.35, "three_hop": 0.20, "comparison": 0.15}
MIN_ENTITIES = 20
MIN_WORDS, MAX_WORDS = 60, 120

# ------------------------------------------------------------------------------------------------------ names
# Syllables for invented names. Any real word they happen to spell is rejected (``_real_words.REAL_WORDS``; a test
# checks a whole world against the MiniLM WordPiece vocabulary when that model is cached).
_ONSETS = "b d f g h k l m n p r s t v z br dr gr kr tr th st sk vr zh".split()
_SIMPLE_ONSETS = "b d f g k l m n p r s t v z th".split()  # after a closed syllable, to avoid consonant pile-ups
_VOWELS = "a e i o u a e i o ae ei ou y".split()
_CODAS = ["", "", "", ""] + "n r l s th k x m nd rn v".split()
_CITY_SUFFIXES = ("", "", "", "holm", "mar", "ven", "dor", "ith", "wick", "ost")
_COUNTRY_SUFFIXES = ("ia", "ora", "esh", "and", "ovia", "ara", "un", "eth")
_VOWEL_SET = frozenset("aeiouy")


def _invent(rng: random.Random, n_syllables: int) -> str:
    parts: list[str] = []
    for i in range(n_syllables):
        if i == 0:
            onset = "" if rng.random() < 0.2 else rng.choice(_ONSETS)
        else:
            onset = rng.choice(_SIMPLE_ONSETS if parts[-1][-1] not in _VOWEL_SET else _ONSETS)
        parts.append(onset + rng.choice(_VOWELS) + rng.choice(_CODAS))
    return "".join(parts)


def _plausible(word: str, min_len: int) -> bool:
    """Pronounceable enough: ``min_len``-10 letters, no letter three times in a row, at most 2 consonants in a row."""
    if not min_len <= len(word) <= 10 or word in REAL_WORDS:
        return False
    run_letter, run_cons = 1, 0
    for i, ch in enumerate(word):
        run_letter = run_letter + 1 if i and ch == word[i - 1] else 1
        run_cons = 0 if ch in _VOWEL_SET else run_cons + 1
        if run_letter >= 3 or run_cons > 2 + (word[i - 1 : i + 1] in ("th", "zh")):
            return False
    return True


class _NameMaker:
    """Invented words, unique across the whole world (one registry for every kind of name)."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.used: set[str] = set()  # membership only; never iterated, so set order cannot leak into output

    def word(self, syllables: tuple[int, ...] = (2, 2, 3), suffixes: tuple[str, ...] = ("",), min_len: int = 6) -> str:
        """A new invented word, never a real one: short inventions often are ("Oslo", "Homer"), so names have at
        least ``min_len`` letters, and every real word the syllables can spell is rejected (``REAL_WORDS``)."""
        for _ in range(10_000):
            raw = _invent(self.rng, self.rng.choice(syllables)) + self.rng.choice(suffixes)
            if _plausible(raw, min_len) and raw not in self.used:
                self.used.add(raw)
                return raw.capitalize()
        raise RuntimeError("name space exhausted; lower the entity count")  # needs far more than 10^5 entities


# ------------------------------------------------------------------------------------------------------ entities
@dataclass
class Entity:
    """One thing in the world. ``relations`` map a relation name to another entity's id."""

    id: str
    kind: str  # "person" | "city" | "country" | "organisation" | "work"
    name: str
    aliases: list[str]  # answer strings that count as correct, the full name first
    attrs: dict[str, Any] = field(default_factory=dict)
    relations: dict[str, str] = field(default_factory=dict)

    @property
    def short(self) -> str:
        """How running prose refers back to the entity (a person's surname; otherwise the full name)."""
        return self.aliases[-1] if self.kind == "person" else self.name

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "kind": self.kind,
            "name": self.name,
            "aliases": self.aliases,
            "attrs": self.attrs,
            "relations": self.relations,
        }


@dataclass
class World:
    seed: int
    entities: list[Entity]
    passages: list[Passage]
    questions: dict[str, list[QAExample]]  # split name -> questions

    def __post_init__(self) -> None:
        self._by_id = {e.id: e for e in self.entities}
        # Lookups the passage builders draw distractors from (ids in creation order, so draws are reproducible).
        self.ids_by_kind: dict[str, list[str]] = {}
        for e in self.entities:
            self.ids_by_kind.setdefault(e.kind, []).append(e.id)
        self.cities_of: dict[str, list[str]] = {c: [] for c in self.ids_by_kind.get("country", [])}
        for c in self.ids_by_kind.get("city", []):
            self.cities_of[self._by_id[c].relations["country"]].append(c)

    def entity(self, entity_id: str) -> Entity:
        return self._by_id[entity_id]

    def summary(self) -> dict[str, Any]:
        entity_counts: dict[str, int] = {}
        for e in self.entities:
            entity_counts[e.kind] = entity_counts.get(e.kind, 0) + 1
        questions = {
            split: {k: sum(q.metadata["kind"] == k for q in qs) for k in KINDS} | {"total": len(qs)}
            for split, qs in self.questions.items()
        }
        words = [len(p.text.split()) for p in self.passages]
        return {
            "generator_version": GENERATOR_VERSION,
            "seed": self.seed,
            "entities": len(self.entities),
            "entity_kinds": dict(sorted(entity_counts.items())),
            "passages": len(self.passages),
            "passage_words": {"min": min(words), "mean": round(sum(words) / len(words), 1), "max": max(words)},
            "questions": questions,
        }


#: Earliest birth year for people in these occupations, and for founders of these organisations (no 1790 films).
_EARLIEST_BIRTH = {"film director": 1860, "musician": 1850, "film studio": 1850, "record label": 1850}
_OCCUPATIONS = tuple(
    "architect chemist painter engineer economist politician physician journalist"
    " botanist sculptor mathematician diplomat historian photographer astronomer".split()
)
_CREATOR_OCCUPATION = {"film": "film director", "book": "novelist", "album": "musician"}
_CREATOR_NOUN = {"film": "director", "book": "author", "album": "performer"}
_PUBLISHER_KIND = {"film": "film studio", "book": "publishing house", "album": "record label"}
_PUBLISHER_NOUN = {"film": "studio", "book": "publisher", "album": "label"}
_ORG_KINDS = {  # kind -> (name suffixes, industry phrase)
    "film studio": (("Pictures", "Studios", "Films"), "film production"),
    "publishing house": (("Press", "Books", "Publishing"), "book publishing"),
    "record label": (("Records", "Sound", "Recordings"), "music recording"),
    "company": (("Works", "Industries", "Holdings", "Foundry", "Trading Company"), "manufacturing and trade"),
    "university": (("University", "Institute", "College"), "teaching and research"),
    "newspaper": (("Gazette", "Courier", "Herald"), "news publishing"),
    "orchestra": (("Philharmonic", "Orchestra", "Ensemble"), "concert music"),
}
_GENRES = {
    "film": ("drama", "comedy", "thriller", "documentary", "western", "science fiction", "musical"),
    "book": ("historical", "mystery", "adventure", "satirical", "epistolary", "gothic", "pastoral"),
    "album": ("folk", "jazz", "ambient", "rock", "chamber pop", "electronic", "blues"),
}
_TITLE_NOUNS = tuple(
    "Lanterns Harbour Orchard Winter Bells Ashes Tides Archive Garden"
    " Mirrors Crossing Salt Embers Lighthouse Meridian Hollow Tower Letters".split()
)
_LATER_EDITION = {
    "film": "A restored print was released",
    "book": "A revised edition followed",
    "album": "A remastered edition came out",
}
_RIVER_WORDS = ("river", "lake", "bay", "valley", "plateau", "delta")
_CITY_FEATURES = tuple(
    "covered markets, stone bridges, clock towers, salt works, canal locks,"
    " terraced vineyards, tanneries, glass kilns, cathedral school, spring fair".split(", ")
)
_LANG_SUFFIX = ("ic", "ese", "ian", "i")


def _kind_counts(n: int) -> dict[str, int]:
    counts = {
        "country": max(2, round(n * 0.025)),
        "city": max(4, round(n * 0.12)),
        "organisation": max(3, round(n * 0.15)),
        "person": max(6, round(n * 0.40)),
    }
    counts["work"] = n - sum(counts.values())
    return counts


def _build_entities(n: int, rng: random.Random) -> list[Entity]:
    """Countries -> cities -> people -> organisations -> employers/spouses -> works, so every reference resolves."""
    names = _NameMaker(rng)
    counts = _kind_counts(n)
    entities: list[Entity] = []

    def new(kind: str, name: str, aliases: list[str], **attrs: Any) -> Entity:
        e = Entity(f"e{len(entities):05d}", kind, name, aliases, dict(attrs))
        entities.append(e)
        return e

    countries = []
    for _ in range(counts["country"]):
        name = names.word((2,), _COUNTRY_SUFFIXES)
        lang = names.word((2,), _LANG_SUFFIX)
        countries.append(
            new(
                "country",
                name,
                [name],
                population=rng.randrange(800, 90_000) * 1000,
                language=lang,
                independence_year=rng.randint(1550, 1960),
            )
        )
    cities = []
    for i in range(counts["city"]):
        name = names.word((2, 2, 3), _CITY_SUFFIXES)
        city = new(
            "city",
            name,
            [name],
            population=rng.randrange(8, 4000) * 1000,
            founding_year=rng.randint(700, 1750),
            feature=rng.choice(_CITY_FEATURES),
            water=f"{names.word((2,))} {rng.choice(_RIVER_WORDS)}",
        )
        # Round-robin first so every country has a city (its capital), then at random.
        country = countries[i] if i < len(countries) else rng.choice(countries)
        city.relations["country"] = country.id
        cities.append(city)
    for country in countries:
        country.relations["capital"] = next(c.id for c in cities if c.relations["country"] == country.id)

    work_subtypes = [("film", "book", "album")[i % 3] for i in range(counts["work"])]
    rng.shuffle(work_subtypes)
    n_creators = {s: max(1, work_subtypes.count(s) // 3) for s in ("film", "book", "album")}
    occupations = [occ for s, k in n_creators.items() for occ in [_CREATOR_OCCUPATION[s]] * k]
    occupations += [rng.choice(_OCCUPATIONS) for _ in range(counts["person"] - len(occupations))]
    rng.shuffle(occupations)
    first_names = [
        names.word((2,), ("", "", "a", "o", "en", "is"), min_len=5) for _ in range(max(4, counts["person"] // 3))
    ]
    people = []
    for occ in occupations:
        first, last = rng.choice(first_names), names.word((2, 2, 3))
        born = rng.randint(_EARLIEST_BIRTH.get(occ, 1760), 1985)
        person = new("person", f"{first} {last}", [f"{first} {last}", last], birth_year=born, occupation=occ)
        if born + 90 < 2020 or (born < 1940 and rng.random() < 0.5):  # a second year in the text, near the first
            person.attrs["death_year"] = min(born + rng.randint(38, 95), 2019)
        person.relations["born_in"] = rng.choice(cities).id
        people.append(person)

    org_kinds = list(_ORG_KINDS)
    orgs = []
    for i in range(counts["organisation"]):
        kind = org_kinds[i % len(org_kinds)]  # round-robin so studios, publishers and labels always exist
        stem = names.word((2, 2, 3))
        name = f"{stem} {rng.choice(_ORG_KINDS[kind][0])}"
        # Film studios and record labels need founders born late enough for the technology to exist.
        founders = [p for p in people if p.attrs["birth_year"] >= _EARLIEST_BIRTH.get(kind, 0)] or people
        founder = rng.choice(founders)
        org = new(
            "organisation",
            name,
            [name, stem],
            subtype=kind,
            staff=rng.randrange(2, 400) * 10,
            founding_year=founder.attrs["birth_year"] + rng.randint(24, 60),
        )
        org.relations["founder"] = founder.id
        org.relations["headquarters"] = rng.choice(cities).id
        orgs.append(org)

    by_year = sorted(people, key=lambda p: (p.attrs["birth_year"], p.id))
    for a, b in zip(by_year[0::2], by_year[1::2], strict=False):  # neighbours in age make plausible couples
        if rng.random() < 0.4:
            a.relations["spouse"], b.relations["spouse"] = b.id, a.id
    for person in people:
        if rng.random() < 0.55:
            options = [o for o in orgs if o.attrs["founding_year"] <= person.attrs["birth_year"] + 45]
            if options:
                person.relations["employer"] = rng.choice(options).id

    creators = {s: [p for p in people if p.attrs["occupation"] == _CREATOR_OCCUPATION[s]] for s in n_creators}
    publishers = {s: [o for o in orgs if o.attrs["subtype"] == _PUBLISHER_KIND[s]] for s in n_creators}
    for subtype in work_subtypes:
        title = _work_title(subtype, names, rng)
        creator = rng.choice(creators[subtype])
        born = creator.attrs["birth_year"]
        year = rng.randint(born + 22, min(born + 65, creator.attrs.get("death_year", 2023)))
        work = new(
            "work",
            title,
            [title],
            subtype=subtype,
            genre=rng.choice(_GENRES[subtype]),
            year=year,
            size=_work_size(subtype, rng),
        )
        work.relations["creator"] = creator.id
        # A publisher that already existed when the work came out, if there is one.
        existing = [o for o in publishers[subtype] if o.attrs["founding_year"] <= year]
        work.relations["publisher"] = rng.choice(existing or publishers[subtype]).id
    return entities


def _work_title(subtype: str, names: _NameMaker, rng: random.Random) -> str:
    """Titles always contain an invented word, so no real title is reproduced."""
    word = names.word((2, 2, 3))
    pattern = rng.randrange(4)
    if pattern == 0:
        return f"The {rng.choice(_TITLE_NOUNS)} of {word}"
    if pattern == 1:
        return word
    if pattern == 2:
        return f"{word} {rng.choice(_TITLE_NOUNS)}"
    return {"film": f"Return to {word}", "book": f"A Summer in {word}", "album": f"Songs from {word}"}[subtype]


def _work_size(subtype: str, rng: random.Random) -> int:
    return {"film": rng.randint(78, 175), "book": rng.randint(120, 780), "album": rng.randint(6, 16)}[subtype]


# ------------------------------------------------------------------------------------------------------ passages
def _an(phrase: object) -> str:
    """``phrase`` with its indefinite article: "an architect", "an 1899 film", "a 1920 film"."""
    text = str(phrase)
    vowel_sound = (text[0] in "aeiou" and not text.startswith("uni")) or text.startswith(("8", "11", "18"))
    return f"{'an' if vowel_sound else 'a'} {text}"


def _pick(rng: random.Random, ids: list[str], w: World, avoid: tuple[str, ...] = ()) -> Entity | None:
    """A random other entity for a distractor sentence (None if the only candidates are to be avoided)."""
    e = w.entity(rng.choice(ids))
    return None if e.id in avoid else e


def _person_text(e: Entity, w: World, rng: random.Random) -> tuple[list[str], list[str]]:
    """(fact sentences, optional sentences); facts are never dropped, optional ones fill the passage to length."""
    s, a = e.short, e.attrs
    born = w.entity(e.relations["born_in"])
    facts = [
        rng.choice(
            [
                f"{e.name} was {_an(a['occupation'])} born in {born.name} in {a['birth_year']}.",
                f"{e.name} was {_an(a['occupation'])}, born in {a['birth_year']} in the city of {born.name}.",
                f"{e.name} (born {a['birth_year']} in {born.name}) was {_an(a['occupation'])}.",
            ]
        )
    ]
    if "employer" in e.relations:
        org = w.entity(e.relations["employer"]).name
        facts.append(
            rng.choice(
                [
                    f"For most of a long career {s} worked for {org}.",
                    f"{s} was employed by {org}.",
                    f"{s} spent many years on the staff of {org}.",
                ]
            )
        )
    if "spouse" in e.relations:
        spouse = w.entity(e.relations["spouse"]).name
        facts.append(rng.choice([f"{s} was married to {spouse}.", f"{s}'s spouse was {spouse}."]))
    # Distractors: other cities (moved to, studied in), other people, and a second year (death) near the birth year.
    moved = _pick(rng, w.ids_by_kind["city"], w, avoid=(born.id,))
    studied = _pick(rng, w.ids_by_kind["city"], w, avoid=(born.id,))
    other = _pick(rng, w.ids_by_kind["person"], w, avoid=(e.id, e.relations.get("spouse", "")))
    optional = [
        f"In {a['birth_year'] + rng.randint(15, 40)} {s} moved to {moved.name}." if moved else "",
        f"{s} studied in {studied.name} before taking up work as {_an(a['occupation'])}." if studied else "",
        rng.choice(
            [
                f"{s} corresponded for years with the {other.attrs['occupation']} {other.name}.",
                f"A portrait of {s} by a pupil of {other.name} survives.",
                f"{s} was often confused with {other.name}, who moved in the same circles.",
            ]
        )
        if other
        else "",
        f"{s} died in {a['death_year']}." if "death_year" in a else "",
        rng.choice(
            [
                "Contemporaries described the young {s} as patient, exacting and fond of long walks.",
                "{s} kept detailed notebooks, most of which are now lost.",
                "Several letters written by {s} were published after {s}'s death.",
            ]
        ).format(s=s),
        f"{s} received an honorary medal late in life.",
        f"Colleagues remembered {s} as a generous teacher and a severe critic.",
    ]
    return facts, [o for o in optional if o]


def _city_text(e: Entity, w: World, rng: random.Random) -> tuple[list[str], list[str]]:
    a = e.attrs
    country = w.entity(e.relations["country"])
    facts = [
        rng.choice(
            [
                f"{e.name} is a city in {country.name}.",
                f"{e.name} is a city located in {country.name}.",
                f"{e.name} is a city of {country.name}.",
            ]
        ),
        rng.choice([f"It was founded in {a['founding_year']}.", f"The city was founded in {a['founding_year']}."]),
    ]
    if country.relations["capital"] == e.id:
        facts.insert(1, f"It is the capital of {country.name}.")
    twin = _pick(rng, w.ids_by_kind["city"], w, avoid=(e.id,))
    writer = _pick(rng, w.ids_by_kind["person"], w)
    optional = [
        f"It has a population of about {a['population']:,} and lies on the {a['water']}.",
        f"{e.name} is known for its {a['feature']}.",
        f"Since {rng.randint(1950, 2005)} it has been twinned with {twin.name}." if twin else "",
        f"The {writer.attrs['occupation']} {writer.name} described its streets in a well-known letter."
        if writer
        else "",
        "Its old town was rebuilt after a great fire.",
        f"A railway line reached {e.name} in {rng.randint(1840, 1910)}.",
        f"A university was established there in {rng.randint(1600, 1960)}.",
    ]
    return facts, [o for o in optional if o]


def _country_text(e: Entity, w: World, rng: random.Random) -> tuple[list[str], list[str]]:
    a = e.attrs
    capital = w.entity(e.relations["capital"]).name
    facts = [
        rng.choice(
            [
                f"{e.name} is a country whose capital is {capital}.",
                f"{e.name} is a country; its capital city is {capital}.",
            ]
        )
    ]
    # Near misses for "what is the capital": other cities of the same country.
    others = [w.entity(c).name for c in w.cities_of[e.id] if c != e.relations["capital"]]
    neighbour = _pick(rng, w.ids_by_kind["country"], w, avoid=(e.id,))
    optional = [
        f"It has about {a['population']:,} inhabitants, and its official language is {a['language']}.",
        f"{e.name} became independent in {a['independence_year']}.",
        f"Other large cities include {', '.join(others[:3])}." if others else "",
        f"Its largest port is {others[-1]}." if len(others) > 3 else "",
        f"It shares a long border with {neighbour.name}." if neighbour else "",
        "Its economy rests on farming, fishing and a growing service sector.",
        "The national assembly meets twice a year.",
        "Much of the interior is high, dry pasture.",
    ]
    return facts, [o for o in optional if o]


def _org_text(e: Entity, w: World, rng: random.Random) -> tuple[list[str], list[str]]:
    a = e.attrs
    founder = w.entity(e.relations["founder"])
    hq = w.entity(e.relations["headquarters"])
    facts = [
        rng.choice(
            [
                f"{e.name} is {_an(a['subtype'])} founded in {a['founding_year']} by {founder.name}.",
                f"{e.name} is {_an(a['subtype'])} that {founder.name} founded in {a['founding_year']}.",
            ]
        ),
        rng.choice(
            [
                f"Its headquarters are in {hq.name}.",
                f"It is headquartered in {hq.name}.",
                f"The {a['subtype']} is based in {hq.name}.",
            ]
        ),
    ]
    # Near misses for "who founded" (a first director, a backer) and "where is it based" (a branch office).
    director = _pick(rng, w.ids_by_kind["person"], w, avoid=(founder.id,))
    backer = _pick(rng, w.ids_by_kind["person"], w, avoid=(founder.id,))
    branch = _pick(rng, w.ids_by_kind["city"], w, avoid=(hq.id,))
    optional = [
        f"It works in {_ORG_KINDS[a['subtype']][1]} and employs about {a['staff']:,} people.",
        f"Its first director was {director.name}." if director else "",
        f"Among its early backers was {backer.name}." if backer else "",
        f"In {a['founding_year'] + rng.randint(5, 60)} it opened a branch office in {branch.name}." if branch else "",
        f"It moved into its present building in {a['founding_year'] + rng.randint(3, 90)}.",
        "Its archive is open to researchers by appointment.",
        "It has changed owners several times.",
    ]
    return facts, [o for o in optional if o]


def _work_text(e: Entity, w: World, rng: random.Random) -> tuple[list[str], list[str]]:
    a = e.attrs
    creator = w.entity(e.relations["creator"])
    pub = w.entity(e.relations["publisher"]).name
    sub, genre, year = a["subtype"], a["genre"], a["year"]
    # A second person near the work (lead actor, cover designer, producer): a near miss for "who made it".
    helper = _pick(rng, w.ids_by_kind["person"], w, avoid=(creator.id,))
    if sub == "film":
        facts = [
            rng.choice(
                [
                    f"{e.name} is {_an(year)} {genre} film directed by {creator.name}.",
                    f"{e.name} is {_an(genre)} film from {year}, directed by {creator.name}.",
                ]
            ),
            rng.choice([f"It was produced by {pub}.", f"The film was made by the studio {pub}."]),
        ]
        extra = [
            "It was later shown with subtitles in several languages.",
            f"It runs for {a['size']} minutes.",
            f"The lead role was played by {helper.name}." if helper else "",
        ]
    elif sub == "book":
        facts = [
            rng.choice(
                [
                    f"{e.name} is {_an(genre)} novel by {creator.name}, first published in {year}.",
                    f"{e.name} is {_an(genre)} novel written by {creator.name} and published in {year}.",
                ]
            ),
            rng.choice([f"It was published by {pub}.", f"The publisher was {pub}."]),
        ]
        extra = [
            f"The first edition has {a['size']} pages.",
            f"The cover was designed by {helper.name}." if helper else "",
        ]
    else:
        facts = [
            rng.choice(
                [
                    f"{e.name} is {_an(year)} {genre} album by {creator.name}.",
                    f"{e.name} is {_an(genre)} album recorded by {creator.name} and released in {year}.",
                ]
            ),
            rng.choice([f"It was released on the {pub} label.", f"It came out on {pub}."]),
        ]
        extra = [
            "Two of its songs became radio favourites.",
            f"It has {a['size']} tracks.",
            f"The sessions were produced by {helper.name}." if helper else "",
        ]
    other = _pick(rng, w.ids_by_kind["work"], w, avoid=(e.id,))
    place = _pick(rng, w.ids_by_kind["city"], w)
    optional = extra + [
        f"Critics often compare it with {other.name}." if other else "",
        f"It was first presented in {place.name}." if place else "",
        f"{_LATER_EDITION[sub]} in {year + rng.randint(2, 30)}.",
        "Reviews at the time were mixed.",
    ]
    return facts, [o for o in optional if o]


_TEXT_BUILDERS: dict[str, Callable[[Entity, World, random.Random], tuple[list[str], list[str]]]] = {
    "person": _person_text,
    "city": _city_text,
    "country": _country_text,
    "organisation": _org_text,
    "work": _work_text,
}


def _passage(e: Entity, w: World, rng: random.Random) -> Passage:
    """Facts first (the text opens with the name), then optional sentences until a random target length is met."""
    facts, optional = _TEXT_BUILDERS[e.kind](e, w, rng)
    rng.shuffle(optional)
    sentences = list(facts)
    target = rng.randint(MIN_WORDS + 10, MAX_WORDS - 15)
    words = sum(len(s.split()) for s in sentences)
    for extra in optional:
        if words >= target:
            break
        if words + len(extra.split()) <= MAX_WORDS:
            # Anywhere after the first sentence, so a sentence's position is no cue to whether it is a fact.
            sentences.insert(rng.randint(1, len(sentences)), extra)
            words += len(extra.split())
    # Neutral filler for the rare passage still short; it names nothing, so it cannot change an answer.
    filler = [
        "Some sources give slightly different dates.",
        "Local histories mention it only briefly.",
        "Little else is recorded in the standard references.",
        "Further details are in the works cited.",
    ]
    for extra in filler:
        if words >= MIN_WORDS:
            break
        sentences.append(extra)
        words += len(extra.split())
    return Passage(e.id, e.name, " ".join(sentences))


# ------------------------------------------------------------------------------------------------------ questions
_YEAR_ATTRS = ("birth_year", "founding_year", "year")  # the attributes questions ask about (answers are years)


@dataclass(frozen=True)
class _Hop:
    relation: str
    subject: Entity
    answer: str  # entity name or year
    target: Entity | None  # the entity reached, None for a year


def _follow(e: Entity, relation: str, w: World) -> _Hop | None:
    if relation in e.relations:
        t = w.entity(e.relations[relation])
        return _Hop(relation, e, t.name, t)
    if relation in _YEAR_ATTRS and relation in e.attrs:
        return _Hop(relation, e, str(e.attrs[relation]), None)
    return None


def _hop_question(h: _Hop) -> tuple[str, str]:
    """(sub-question, search query) that ask for one hop about a named subject."""
    s, sub = h.subject.name, h.subject.attrs.get("subtype")
    match h.relation:
        case "born_in":
            return f"In which city was {s} born?", f"{s} birthplace born in"
        case "birth_year":
            return f"In which year was {s} born?", f"{s} born year"
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
        sub_q, query = _hop_question(h)
        out.append(
            {
                "sub_question": sub_q,
                "query": query,
                "passage_id": h.subject.id,
                "answer": h.answer,
                "relation": h.relation,
            }
        )
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
            hops, cur = [], e
            for rel in rels:
                hop = _follow(cur, rel, w) if cur is not None else None
                if hop is None:
                    break
                hops.append(hop)
                cur = hop.target
            if len(hops) != len(rels):
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


def _comparison_candidates(w: World, n_wanted: int, rng: random.Random) -> list[_Candidate]:
    out: list[_Candidate] = []
    seen: set[str] = set()
    pools = {kind: [e for e in w.entities if e.kind == kind] for kind, *_ in _COMPARISONS}
    for _ in range(n_wanted * 4):
        if len(out) >= n_wanted:
            break
        kind, attr, q_first, q_later = rng.choice(_COMPARISONS)
        pool = pools[kind]
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


def default_split_sizes(n_entities: int) -> dict[str, int]:
    """Question counts that scale with the world: 3 train questions per entity, an eighth of that for dev and test."""
    held_out = max(10, n_entities // 8)
    return {"train": 3 * n_entities, "dev": held_out, "test": held_out}


def generate_world(n_entities: int, seed: int, split_sizes: dict[str, int] | None = None) -> World:
    """Build a world of ``n_entities`` entities with passages and train/dev/test questions, deterministic in ``seed``.

    ``split_sizes`` overrides :func:`default_split_sizes`; a split gets fewer questions only when the world has too
    few distinct ones left (small worlds).
    """
    if n_entities < MIN_ENTITIES:
        raise ValueError(
            f"a world needs at least {MIN_ENTITIES} entities (got {n_entities}); pass a larger --entities"
        )
    sizes = default_split_sizes(n_entities) | (split_sizes or {})
    if set(sizes) != set(SPLITS) or any(v < 0 for v in sizes.values()):
        raise ValueError(f"split_sizes must give non-negative counts for {list(SPLITS)}; got {split_sizes}")
    rng = random.Random(seed)
    entities = _build_entities(n_entities, rng)
    world = World(seed, entities, [], {})
    world.passages = [_passage(e, world, rng) for e in entities]
    cands = _path_candidates(world)
    n_cmp = round(sum(sizes.values()) * KIND_SHARES["comparison"]) + 10
    cands += _comparison_candidates(world, n_cmp, rng)
    world.questions = _split_questions(cands, sizes, rng)
    return world


def write_world(world: World, out_dir: str | Path) -> dict[str, Path]:
    """Write ``corpus.jsonl`` (FlashRAG ``{"id", "contents"}``), ``train/dev/test.jsonl`` (FlashRAG QA with
    ``metadata``), ``entities.jsonl`` (the knowledge base) and ``world.json`` (seed and counts). Returns the paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)

    def dump(rows: list[dict[str, Any]]) -> str:
        # Every dict is filled in a fixed order and no set is ever iterated, so key order is stable without sorting
        # (the conventional FlashRAG order, id first, stays readable).
        return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)

    paths = {
        "corpus": atomic_write_text(
            out / "corpus.jsonl", dump([{"id": p.id, "contents": p.contents} for p in world.passages])
        )
    }
    for split, qs in world.questions.items():
        paths[split] = atomic_write_text(out / f"{split}.jsonl", dump([q.to_flashrag() for q in qs]))
    paths["entities"] = atomic_write_text(out / "entities.jsonl", dump([e.to_json() for e in world.entities]))
    paths["world"] = atomic_write_text(
        out / "world.json", json.dumps(world.summary(), indent=2, sort_keys=True) + "\n"
    )
    return paths
