"""The synthetic world's passages: one encyclopedic paragraph per entity with its facts and distractors."""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence

from searchrl.data.corpus import Passage
from searchrl.data.synth_world import _LATER_EDITION, _ORG_KINDS, MAX_WORDS, MIN_WORDS, Entity, World


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


def _passage(e: Entity, w: World, rng: random.Random, more_facts: Sequence[str] = ()) -> Passage:
    """Facts first (the text opens with the name; ``more_facts`` after the entity's own), then optional sentences
    until a random target length is met."""
    facts, optional = _TEXT_BUILDERS[e.kind](e, w, rng)
    facts += more_facts
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
