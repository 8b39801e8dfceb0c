"""The synthetic world's entities: invented names, the entity records and their relations (see
``searchrl.data.synth`` for the world as a whole)."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

from searchrl.data._real_words import REAL_WORDS
from searchrl.data.corpus import Passage
from searchrl.data.records import QAExample

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
