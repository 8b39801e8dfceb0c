"""A synthetic multi-hop world: a fictional encyclopedia whose answers no model can know without searching.

The world holds people, cities, countries, organisations and works (films, books, albums) tied by typed relations
(``born_in``, ``spouse``, ``employer``, ``founder``, ``headquarters``, ``creator``, ``publisher``, ``country``,
``capital``) and year attributes; with ``relations="open"`` also a broad pool of further relations
(``searchrl.data.synth_open``). Every name is made of invented syllables and is unique across the world, so
parametric knowledge cannot answer and a name never points at two entities.

Each entity gets one passage of encyclopedic prose (title = name; the text opens with the name; 60-120 words) that
states all of its facts, plus distractor sentences naming other entities and near-miss facts (another city it moved
to, an office abroad, a work it is compared with), so that retrieval and reading are not trivial.

Questions come in four kinds, and each records its reasoning chain in ``metadata``:

- ``single_hop``: one fact of a named entity ("In which city was X born?");
- ``bridge``: two hops through an unnamed entity ("Where was the director of W born?");
- ``three_hop``: three hops ("In which country was the director of W born?");
- ``comparison``: two entities compared on a year ("Who was born first, X or Y?"); one hop per entity, ordered so
  the answer's own passage comes last. With ``yes_no`` > 0 a share of them ask instead whether two entities lead to
  the same one ("Were A and B born in the same country?"): the same one to three hops from each, answered yes or no;
  with ``bridge_comparisons`` > 0 a share compare them by a year one hop away ("Which film has the director who was
  born earlier, A or B?"): two hops from each, the named entity the answer.

``metadata["chain"]`` lists the hops as ``{"sub_question", "query", "passage_id", "answer", "relation"}``; the hop
answer occurs in the hop's passage and the final answer (yes/no aside) in the last hop's passage (tested). Splits
are disjoint by question: a question (and every other phrasing of the same facts) lands in exactly one split.

Everything draws from one seeded ``random.Random``; the same seed gives byte-identical files.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from searchrl.data.synth_open import add_open_relations, mix, open_candidates, open_sentences
from searchrl.data.synth_questions import (
    _bridge_comparison_candidates,
    _comparison_candidates,
    _path_candidates,
    _same_candidates,
    _split_questions,
)
from searchrl.data.synth_surface import SURFACES, vary_questions
from searchrl.data.synth_text import _passage
from searchrl.data.synth_world import (  # noqa: F401  (re-exported: the world's public names live here)
    _TITLE_NOUNS,
    GENERATOR_VERSION,
    KIND_SHARES,
    KINDS,
    MAX_WORDS,
    MIN_ENTITIES,
    MIN_WORDS,
    SPLITS,
    Entity,
    World,
    _build_entities,
)
from searchrl.utils import atomic_write_text

#: ``relations``: the fixed twelve relations only, or with the open pool of ``synth_open``.
RELATIONS = ("fixed", "open")


def default_split_sizes(n_entities: int) -> dict[str, int]:
    """Question counts that scale with the world: 3 train questions per entity, an eighth of that for dev and test."""
    held_out = max(10, n_entities // 8)
    return {"train": 3 * n_entities, "dev": held_out, "test": held_out}


def check_comparison_shares(yes_no: float, bridge_comparisons: float) -> None:
    """Raise ValueError unless both are shares of the comparison questions (0-1) that sum to at most 1."""
    if not (0.0 <= yes_no <= 1.0 and 0.0 <= bridge_comparisons <= 1.0 and yes_no + bridge_comparisons <= 1.0):
        raise ValueError(
            f"yes_no={yes_no}, bridge_comparisons={bridge_comparisons}: give shares of the comparison questions from "
            "0 to 1 that sum to at most 1"
        )


def generate_world(
    n_entities: int,
    seed: int,
    split_sizes: dict[str, int] | None = None,
    surface: str = "fixed",
    relations: str = "fixed",
    yes_no: float = 0.0,
    bridge_comparisons: float = 0.0,
    deaths: bool = False,
) -> World:
    """Build a world of ``n_entities`` entities with passages and train/dev/test questions, deterministic in ``seed``.

    ``split_sizes`` overrides :func:`default_split_sizes`; a split gets fewer questions only when the world has too
    few distinct ones left (small worlds). ``surface="varied"`` re-words the questions
    (:mod:`searchrl.data.synth_surface`); everything else is the fixed world's. ``relations="open"`` adds facts
    under a broad pool of further relations and draws about half of each question kind from them
    (:mod:`searchrl.data.synth_open`). ``yes_no`` (0-1) of the comparison questions ask instead whether two named
    entities lead to the same one ("Were A and B born in the same country?", answered yes or no), drawn from their
    own random stream; ``bridge_comparisons`` of them compare two named entities by a year one hop away from each
    ("Which film has the director who was born earlier, A or B?"), from another. ``deaths`` also compares people,
    and works by their creators, on the year they died ("Who died first, A or B?").
    """
    check_comparison_shares(yes_no, bridge_comparisons)
    if surface not in SURFACES:
        raise ValueError(f"surface {surface!r}: use one of {', '.join(SURFACES)}")
    if relations not in RELATIONS:
        raise ValueError(f"relations {relations!r}: use one of {', '.join(RELATIONS)}")
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
    orng = random.Random(f"{seed}/open")  # its own stream: the fixed world's draws stay as they are
    if relations == "open":
        add_open_relations(world, orng)
    world.passages = [
        _passage(e, world, rng, open_sentences(e, world, orng) if relations == "open" else ()) for e in entities
    ]
    cands = _path_candidates(world)
    n_cmp = round(sum(sizes.values()) * KIND_SHARES["comparison"]) + 10
    n_same, n_bridge = round(n_cmp * yes_no), round(n_cmp * bridge_comparisons)
    cands += _comparison_candidates(world, n_cmp - n_same - n_bridge, rng, deaths)
    if n_same:
        cands += _same_candidates(world, n_same, random.Random(f"{seed}/yes_no"))
    if n_bridge:
        cands += _bridge_comparison_candidates(world, n_bridge, random.Random(f"{seed}/bridge_comparisons"), deaths)
    if relations == "open":
        cands = mix(cands, open_candidates(world, orng), orng)
    world.questions = _split_questions(cands, sizes, rng)
    if surface == "varied":
        vary_questions(world, seed)
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
