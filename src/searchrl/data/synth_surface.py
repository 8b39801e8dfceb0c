"""Varied question wording for the synthetic world (``data.world.surface: varied``).

A fixed world asks each question shape in one wording ("In which country was X born?"). A model cold-started on it
learns the wording along with the skill, and real questions are worded otherwise ("X was born in which country?",
"Of A and B, who is older?"). With ``surface: varied`` every question is re-worded after the world is built: each
shape has several wordings (the fixed one, a HotpotQA-like bridge phrasing that names the start entity first, a
"What is the ... of ..." form, an imperative "Name the ..." or a clause that states the first hop), and each
question draws one with its own seeded generator. Only the question text changes: the answers, the recorded chain
(sub-questions, queries, facts) and the splits stay those of the fixed world with the same seed, so a varied world
and a fixed one differ in wording alone.
"""

from __future__ import annotations

import random

from searchrl.data.records import QAExample
from searchrl.data.synth_world import _CREATOR_NOUN, _PUBLISHER_NOUN, World

#: template id (``metadata.template`` without the kind) -> further wordings; ``{s}`` the start entity, ``{cn}`` /
#: ``{pn}`` the work's creator / publisher noun. The fixed wording stays one of the choices.
_PATHS: dict[str, tuple[str, ...]] = {
    "born_in.country": (
        "{s} was born in which country?",
        "What is the country of birth of {s}?",
        "Name the country where {s} was born.",
    ),
    "spouse.born_in": (
        "{s}'s spouse was born in which city?",
        "What is the birthplace of the person {s} married?",
        "{s} was married to someone born where?",
    ),
    "employer.founder": (
        "Who is the founder of {s}'s employer?",
        "{s} worked for an organisation; who founded it?",
        "The organisation that employed {s} was founded by whom?",
    ),
    "employer.headquarters": (
        "Where is the organisation that employed {s} headquartered?",
        "{s} worked for an organisation based in which city?",
        "What city hosts the headquarters of {s}'s employer?",
    ),
    "founder.born_in": (
        "What is the birthplace of the founder of {s}?",
        "{s} was founded by someone born in which city?",
        "The person who founded {s} was born where?",
    ),
    "founder.birth_year": (
        "When was the founder of {s} born?",
        "{s}'s founder was born in what year?",
        "What is the birth year of the person who founded {s}?",
    ),
    "headquarters.country": (
        "{s} has its headquarters in which country?",
        "What country is {s} based in?",
        "Name the country where {s} is headquartered.",
    ),
    "country.capital": (
        "{s} lies in a country; what is its capital?",
        "Which city is the capital of the country {s} is in?",
        "Name the capital of the country where {s} lies.",
    ),
    "creator.born_in": (
        "The {cn} of {s} was born in which city?",
        "What is the birthplace of {s}'s {cn}?",
        "Where was {s}'s {cn} born?",
    ),
    "creator.birth_year": (
        "When was the {cn} of {s} born?",
        "{s}'s {cn} was born in what year?",
        "What is the birth year of the {cn} of {s}?",
    ),
    "creator.spouse": (
        "Whom did the {cn} of {s} marry?",
        "Who is the spouse of {s}'s {cn}?",
        "The {cn} of {s} was married to whom?",
    ),
    "publisher.founder": (
        "Who is the founder of the {pn} of {s}?",
        "{s}'s {pn} was founded by whom?",
        "The {pn} behind {s} was founded by which person?",
    ),
    "publisher.headquarters": (
        "Where is the {pn} of {s} headquartered?",
        "{s}'s {pn} is based in which city?",
        "What city is the {pn} of {s} located in?",
    ),
    "publisher.founding_year": (
        "When was the {pn} of {s} founded?",
        "{s}'s {pn} was founded in what year?",
        "What is the founding year of the {pn} of {s}?",
    ),
    "born_in.country.capital": (
        "{s} was born in a country; what is its capital?",
        "Which city is the capital of the country of birth of {s}?",
        "Name the capital of the country {s} was born in.",
    ),
    "employer.founder.born_in": (
        "{s} worked for an organisation whose founder was born where?",
        "What is the birthplace of the person who founded {s}'s employer?",
        "The founder of the organisation that employed {s} was born in which city?",
    ),
    "employer.headquarters.country": (
        "{s}'s employer has its headquarters in which country?",
        "What country is the organisation that employed {s} based in?",
        "Name the country where {s}'s employer is headquartered.",
    ),
    "founder.born_in.country": (
        "The founder of {s} was born in which country?",
        "What is the country of birth of {s}'s founder?",
        "{s} was founded by someone born in which country?",
    ),
    "creator.born_in.country": (
        "The {cn} of {s} was born in which country?",
        "What is the country of birth of {s}'s {cn}?",
        "{s}'s {cn} was born in which country?",
    ),
    "creator.spouse.born_in": (
        "The {cn} of {s} was married to someone born where?",
        "What is the birthplace of the spouse of {s}'s {cn}?",
        "The spouse of {s}'s {cn} was born in which city?",
    ),
    "publisher.founder.birth_year": (
        "When was the founder of {s}'s {pn} born?",
        "The {pn} of {s} was founded by someone born in what year?",
        "What is the birth year of the person who founded the {pn} of {s}?",
    ),
    "publisher.headquarters.country": (
        "The {pn} of {s} is based in which country?",
        "What country is {s}'s {pn} located in?",
        "Name the country where the {pn} of {s} has its headquarters.",
    ),
}

#: single-hop relation -> wordings (``{s}`` the subject, ``{cn}`` / ``{pn}`` as above, ``{made}`` the creation verb)
_SINGLE: dict[str, tuple[str, ...]] = {
    "born_in": ("{s} was born in which city?", "What is the birthplace of {s}?", "Where was {s} born?"),
    "birth_year": ("When was {s} born?", "{s} was born in what year?", "What is the birth year of {s}?"),
    "spouse": ("Whom did {s} marry?", "Who is the spouse of {s}?", "{s} was married to whom?"),
    "employer": ("Who employed {s}?", "{s} worked for which organisation?", "What is the employer of {s}?"),
    "founder": ("Who is the founder of {s}?", "{s} was founded by whom?", "Name the person who founded {s}."),
    "headquarters": ("Where is {s} based?", "{s} is headquartered in which city?", "What city is {s} based in?"),
    "founding_year": ("When was {s} founded?", "{s} was founded in what year?", "What is the founding year of {s}?"),
    "creator": ("Who is the {cn} of {s}?", "{s} was {made} by whom?", "Name the {cn} of {s}."),
    "publisher": ("Who is the {pn} of {s}?", "{s} came out through which {pn}?", "Name the {pn} of {s}."),
    "year": ("When did {s} come out?", "{s} came out in what year?", "What is the release year of {s}?"),
    "country": ("{s} is in which country?", "What country is {s} in?", "Name the country where {s} lies."),
    "capital": ("Which city is the capital of {s}?", "{s} has which city as its capital?", "Name the capital of {s}."),
}

#: comparison (entity kind, or kind.attribute) -> (wordings asking for the earlier one, for the later one)
_COMPARE: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "person": (
        ("Of {a} and {b}, who is older?", "Between {a} and {b}, who was born earlier?", "{a} or {b}: who came first?"),
        ("Of {a} and {b}, who is younger?", "Between {a} and {b}, who was born later?", "{a} or {b}: who came later?"),
    ),
    "organisation": (
        ("Of {a} and {b}, which is older?", "Which of {a} and {b} was set up first?"),
        ("Of {a} and {b}, which is newer?", "Which of {a} and {b} was set up later?"),
    ),
    "work": (
        ("Of {a} and {b}, which came out earlier?", "Which of {a} and {b} is older?"),
        ("Of {a} and {b}, which came out later?", "Which of {a} and {b} is newer?"),
    ),
    "person.death_year": (
        ("Of {a} and {b}, who died earlier?", "Between {a} and {b}, who passed away first?"),
        ("Of {a} and {b}, who died later?", "Between {a} and {b}, who passed away later?"),
    ),
    "city": (
        ("Of the cities {a} and {b}, which is older?", "Between {a} and {b}, which city was founded first?"),
        ("Of the cities {a} and {b}, which is younger?", "Between {a} and {b}, which city was founded later?"),
    ),
}
_MADE = {"film": "directed", "book": "written", "album": "recorded"}

SURFACES = ("fixed", "varied")


def _reword(ex: QAExample, world: World, rng: random.Random) -> str:
    template = str(ex.metadata.get("template") or "")
    kind, _, shape = template.partition(":")
    chain = ex.metadata.get("chain") or []
    if not chain:
        return ex.question
    if kind == "comparison":
        if not all(str(h["answer"]).isdigit() for h in chain):
            return ex.question  # full dates (open relations): no year wordings apply
        first, second = sorted((h["subject"] for h in chain), key=ex.question.find)  # the question's order
        years = {h["subject"]: int(h["answer"]) for h in chain}
        earlier = years[chain[-1]["subject"]] == min(years.values())  # the answer's hop is recorded last
        wordings = (_COMPARE.get(shape) or _COMPARE[shape.split(".")[0]])[0 if earlier else 1]
        choice = rng.choice((None, *wordings))
        return ex.question if choice is None else choice.format(a=first, b=second)
    start = world.entity(chain[0]["passage_id"])
    sub = start.attrs.get("subtype")
    names = {"s": chain[0]["subject"], "cn": _CREATOR_NOUN.get(sub, ""), "pn": _PUBLISHER_NOUN.get(sub, "")}
    wordings = _SINGLE.get(shape, ()) if kind == "single" else _PATHS.get(shape, ())
    choice = rng.choice((None, *wordings))
    return ex.question if choice is None else choice.format(**names, made=_MADE.get(sub, "made"))


def vary_questions(world: World, seed: int) -> None:
    """Re-word every question of ``world`` in place (see the module docstring); deterministic in ``seed``."""
    rng = random.Random(f"surface/{seed}")
    for split, examples in world.questions.items():
        world.questions[split] = [
            QAExample(ex.id, _reword(ex, world, rng), list(ex.answers), dict(ex.metadata)) for ex in examples
        ]
