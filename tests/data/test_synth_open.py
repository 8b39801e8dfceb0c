"""The synthetic world's open relations (``relations="open"``): the chain invariants hold for them, about half of
each question kind asks for them, the fixed world inside is unchanged, and the oracle plans them."""

from __future__ import annotations

import pytest

from searchrl.data.synth import World, generate_world
from searchrl.data.synth_open import OPEN_RELATIONS, when
from searchrl.protocols import get_protocol
from searchrl.sft.oracle import oracle_texts


@pytest.fixture(scope="module")
def world() -> World:
    return generate_world(800, seed=3, relations="open")


def _is_open(q) -> bool:
    return any(h["relation"] in OPEN_RELATIONS for h in q.metadata["chain"])


def test_open_chains_keep_the_world_invariants(world: World) -> None:
    text = {p.id: p.text for p in world.passages}
    title = {p.id: p.title for p in world.passages}
    n_open = 0
    for q in (q for qs in world.questions.values() for q in qs if _is_open(q)):
        n_open += 1
        chain, kind = q.metadata["chain"], q.metadata["kind"]
        for hop in chain:
            assert hop["answer"] in text[hop["passage_id"]], (q.question, hop)
            assert title[hop["passage_id"]] in hop["query"] and title[hop["passage_id"]] in hop["sub_question"]
            if hop["relation"] in OPEN_RELATIONS:
                # the search carries the relation's own words, and the chain says what kind of answer it is
                assert hop["query"].endswith(hop["relation"]) and hop["answer_kind"].startswith("a")
        assert q.answers[0] in text[chain[-1]["passage_id"]]
        if kind in ("bridge", "three_hop"):
            for prev, nxt in zip(chain, chain[1:], strict=False):
                assert prev["answer"] == title[nxt["passage_id"]], q.question
            assert title[chain[0]["passage_id"]] in q.question
            assert not any(h["answer"] in q.question for h in chain), q.question
        if kind == "comparison":
            dates = [when(h["answer"]) for h in chain]
            names = [title[h["passage_id"]] for h in chain]
            winner = names[dates.index(min(dates) if "first" in q.question else max(dates))]
            assert dates[0] != dates[1] and q.answers[0] == winner, q.question
    assert n_open > 100


def test_about_half_of_each_kind_is_open(world: World) -> None:
    train = world.questions["train"]
    for kind in ("single_hop", "bridge", "three_hop"):
        qs = [q for q in train if q.metadata["kind"] == kind]
        share = sum(map(_is_open, qs)) / len(qs)
        assert 0.3 <= share <= 0.6, (kind, share)
    assert any(_is_open(q) for q in train if q.metadata["kind"] == "comparison")
    # many relations, not a handful: what makes a closed vocabulary unlearnable
    used = {h["relation"] for q in train for h in q.metadata["chain"]} & set(OPEN_RELATIONS)
    assert len(used) >= 20


def test_the_fixed_world_inside_is_unchanged(world: World) -> None:
    fixed = generate_world(800, seed=3)
    assert [e.name for e in fixed.entities] == [e.name for e in world.entities]
    for a, b in zip(fixed.entities, world.entities, strict=True):
        assert {k: v for k, v in b.relations.items() if k not in OPEN_RELATIONS} == a.relations
    assert generate_world(100, seed=1, relations="fixed").passages == generate_world(100, seed=1).passages
    with pytest.raises(ValueError, match="relations 'odd'"):
        generate_world(100, seed=1, relations="odd")


def test_oracle_plans_open_questions(world: World) -> None:
    protocol = get_protocol("search_r1")
    train = world.questions["train"]
    bridge = next(
        q
        for q in train
        if q.metadata["kind"] == "bridge" and _is_open(q) and q.metadata["chain"][-1]["relation"] == "date of death"
    )
    turns = oracle_texts(protocol, bridge, plan="decompose_facts")
    assert "The question asks for a date." in turns[0][0] and "#1" in turns[0][0]
    assert turns[-1][0].count(bridge.answers[0]) >= 1 and len(turns) == 3
    cmp = next(q for q in train if q.metadata["kind"] == "comparison" and _is_open(q))
    last = oracle_texts(protocol, cmp, plan="decompose_facts")[-1][0]
    direction = "earlier" if "first" in cmp.question else "later"
    assert f"is {direction}." in last and cmp.answers[0] in last
