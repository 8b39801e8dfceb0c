"""Oracle trajectories are well-formed in every protocol; SFT puts exactly zero gradient on inserted tokens."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import torch

from searchrl.config import ConfigError, load_config
from searchrl.data.loaders import load_qa
from searchrl.data.synth import generate_world, write_world
from searchrl.generation.fake import ByteTokenizer
from searchrl.protocols import PROTOCOLS, get_protocol
from searchrl.retrieval import build_index, load_index
from searchrl.rl.algorithms import aggregate_loss
from searchrl.rl.batch import collate_trajectories, response_logits, token_logprobs
from searchrl.sft.oracle import _plan_items, oracle_trajectories, plan_style, question_order
from searchrl.sft.trainer import SFTTrainer
from searchrl.testing import tiny_model


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> tuple[Path, object]:
    d = tmp_path_factory.mktemp("world")
    write_world(generate_world(200, seed=3), d)
    index = build_index(d / "corpus.jsonl", "bm25", d / "bm25")
    return d, load_index(index)


@pytest.mark.parametrize("plan", [False, True, "decompose", "decompose_explicit", "decompose_facts"])
@pytest.mark.parametrize("name", sorted(n for n, p in PROTOCOLS.items() if p.searches))
def test_oracle_trajectories_are_well_formed(world, name: str, plan: bool | str) -> None:
    d, retriever = world
    protocol = get_protocol(name, **({"multi_query": True} if name == "rag_r1" else {}))  # tool_call: 3 a call
    examples = load_qa(d / "train.jsonl", limit=40)
    tok = ByteTokenizer()
    trajs = oracle_trajectories(protocol, examples, retriever, tok, topk=3, plan=plan)
    for ex, t in zip(examples, trajs, strict=True):
        response = t.response_text(tok)
        report = protocol.check_format(response)
        assert report.ok, (name, report.problems, response[:600])
        assert report.answer is not None and report.answer.strip() == ex.answers[0]
        assert report.n_searches == t.n_searches >= 1
        assert all(ids for ids in t.turns[0].hit_ids)  # real retrieved documents were inserted
        inserted = tok.decode([i for i, m in zip(t.response_ids, t.action_mask, strict=True) if not m])
        assert inserted == "".join(turn.observation for turn in t.turns)
        n = len(ex.metadata["chain"])
        if protocol.max_queries > 1 and ex.metadata.get("kind") == "comparison":  # one multi-query call
            assert t.n_turns == 2 and len(t.turns[0].queries) == n
            if str(plan).startswith("decompose"):  # the plan and its search steps, then the closing step
                in_order = [h["query"] for h in question_order(ex.metadata["chain"], ex.question)]
                assert t.turns[0].queries == in_order
                first, last = t.turns[0].text, t.turns[-1].text
                assert first.count("Plan: (1) ") == 1 and "Step (1): " in first and "Step (2): " in first
                assert "#1 is " in last and "#2 is " in last and "of #1 and #2: " in last
                assert f"So the answer is {ex.answers[0]}." in last
            continue
        if str(plan).startswith("decompose"):  # the plan first, then one step of it per turn; the last closes it
            assert t.turns[0].text.count("Plan: (1) ") == 1 and f"({n + 1}) " in t.turns[0].text
            assert [f"Step ({i + 1}): " in turn.text for i, turn in enumerate(t.turns)] == [True] * (n + 1)
            closing = "of #1 and #2: " if ex.metadata["kind"] == "comparison" else f"answer #{n}. So the"
            assert f"#{n} is " in t.turns[-1].text and closing in t.turns[-1].text
            if ex.metadata["kind"] == "comparison":  # searched in the question's order, the winner named last
                names = [h["subject"] for h in ex.metadata["chain"]]
                searched = [q for turn in t.turns for q in turn.queries]
                assert sorted(names, key=ex.question.find) == [
                    q[: len(n)] for q, n in zip(searched, sorted(names, key=ex.question.find), strict=True)
                ]
                years = {h["subject"]: int(h["answer"]) for h in ex.metadata["chain"]}
                word = "earlier" if years[ex.answers[0]] == min(years.values()) else "later"
                assert f"pick the {word} of #1 and #2" in t.turns[0].text
                pick = min(years.values()) if word == "earlier" else max(years.values())
                assert f"{pick} is {word}. So the answer is {ex.answers[0]}." in t.turns[-1].text
        elif plan:  # the count, in each step
            assert f"This question needs {n} search" in t.turns[0].text
            assert [f"Search {i + 1} of {n}:" in turn.text for i, turn in enumerate(t.turns[:-1])] == [True] * n
            assert f"That was search {n} of {n}. So the answer is" in t.turns[-1].text


def test_decomposition_refers_to_earlier_answers() -> None:
    chain = [
        {"sub_question": "Which label released Grafou?", "answer": "Treikfou Sound"},
        {"sub_question": "In which city is Treikfou Sound headquartered?", "answer": "Isgaholm"},
        {"sub_question": "In which country is Isgaholm?", "answer": "Stasperun"},
    ]
    assert _plan_items(chain, comparison=False) == [
        "Which label released Grafou?",
        "In which city is #1 headquartered?",
        "In which country is #2?",
        "answer #3.",
    ]
    assert _plan_items(chain[:1] * 2, comparison=True)[-1] == "compare #1 and #2."
    assert _plan_items(chain[:1] * 2, comparison=True, direction="later")[-1] == "pick the later of #1 and #2."
    assert plan_style(True) == "count" and plan_style(False) == "none" and plan_style("decompose") == "decompose"
    with pytest.raises(ValueError, match="sft.oracle_plan"):
        plan_style("steps")


def test_question_order_without_recorded_subjects() -> None:
    """Older worlds record no ``subject``: it is read off the start of the hop's query."""
    chain = [
        {"sub_question": "In which year was Bo Li born?", "query": "Bo Li born year", "answer": "1902"},
        {"sub_question": "In which year was Ana Sol born?", "query": "Ana Sol born year", "answer": "1850"},
    ]
    q = "Who was born first, Ana Sol or Bo Li?"
    assert [h["answer"] for h in question_order(chain, q)] == ["1850", "1902"]
    assert question_order(chain, "Who was born first?") == chain  # names not found: the recorded order


def test_first_turn_samples_extend_the_oracle_data(world) -> None:
    """sft.oracle_first_turns adds step-level samples: the question's prompt -> its first turn, no documents."""
    from searchrl.pipeline import load_split, make_protocol
    from searchrl.stages import sft_examples as oracle_sft_data

    d, _ = world
    cfg = load_config(
        "demo",
        [
            f"data.source={d}",
            "sft.limit=4",
            "sft.oracle_first_turns=6",
            "sft.oracle_plan=decompose",
            "retrieval.kind=bm25",
        ],
    )
    tok = ByteTokenizer()
    data = oracle_sft_data(cfg, make_protocol(cfg), tok)
    questions = [e.question for e in load_split(cfg, "train", 10, kinds=cfg.sft.kinds or None)]
    assert len(data) == 10 and [t.question for t in data[:4]] == questions[:4]
    for q, x in zip(questions[4:], data[4:], strict=True):
        text = tok.decode(x.response_ids)
        assert q in tok.decode(x.prompt_ids) and all(x.loss_mask)
        assert text.startswith("<think> Plan: (1) ") and text.rstrip().endswith("</search>")
        assert "<information>" not in text
    with pytest.raises(ValueError, match="sft.limit"):
        oracle_sft_data(
            cfg.model_copy(update={"sft": cfg.sft.model_copy(update={"limit": None})}), make_protocol(cfg), tok
        )


def test_sft_gradient_is_exactly_zero_on_inserted_tokens(world) -> None:
    d, retriever = world
    tok = ByteTokenizer()
    trajs = oracle_trajectories(get_protocol("search_r1"), load_qa(d / "train.jsonl", limit=3), retriever, tok)
    model = tiny_model()
    b = collate_trajectories(trajs)
    logits = response_logits(model, b)  # (B, T, V)
    logits.retain_grad()
    loss = -aggregate_loss(token_logprobs(logits, b.response_ids), b.action_mask, "token_mean")
    loss.backward()
    g = logits.grad.abs().sum(-1)  # (B, T)
    inserted = (b.response_mask == 1) & (b.action_mask == 0)
    assert inserted.any() and torch.all(g[inserted] == 0)
    assert torch.all(g[b.action_mask == 1] > 0)


def test_sft_trainer_lowers_loss_and_saves(world, tmp_path: Path) -> None:
    d, retriever = world
    tok = ByteTokenizer()
    trajs = oracle_trajectories(get_protocol("search_r1"), load_qa(d / "train.jsonl", limit=8), retriever, tok)
    cfg = load_config(None, ["sft.lr=3e-3", "sft.epochs=6", "sft.batch_size=4", "sft.warmup_steps=0"])
    hist = SFTTrainer(cfg, tiny_model(), tok, trajs, tmp_path).train()
    assert hist[-1]["loss"] < 0.7 * hist[0]["loss"]
    assert (tmp_path / "final" / "config.json").exists() and (tmp_path / "metrics.jsonl").exists()


def test_max_length_cuts_targets_and_drops_examples_without_room() -> None:
    from searchrl.sft.trainer import fit_length
    from searchrl.sft.types import SFTExample

    ex = SFTExample([1] * 6, [2, 3, 4, 5], [1, 0, 1, 1])
    assert fit_length(ex, 10) is ex
    cut = fit_length(ex, 8)
    assert (cut.prompt_ids, cut.response_ids, cut.loss_mask) == ([1] * 6, [2, 3], [1, 0])
    assert fit_length(ex, 6) is None


def test_validation_split_keeps_the_best_epoch(world, tmp_path: Path) -> None:
    d, retriever = world
    tok = ByteTokenizer()
    trajs = oracle_trajectories(get_protocol("search_r1"), load_qa(d / "train.jsonl", limit=10), retriever, tok)
    cut = sorted(len(t.prompt_ids) + len(t.response_ids) for t in trajs)[5]  # about half the examples are longer
    cfg = load_config(
        None,
        [
            "sft.lr=3e-3",
            "sft.epochs=3",
            "sft.batch_size=4",
            "sft.warmup_steps=0",
            "sft.val_fraction=0.2",
            f"sft.max_length={cut}",
        ],
    )
    trainer = SFTTrainer(cfg, tiny_model(), tok, trajs, tmp_path)
    assert len(trainer.val) == 2 and len(trainer.examples) == 8
    n_long = sum(len(t.prompt_ids) + len(t.response_ids) > cut for t in trajs)
    assert trainer.n_truncated == n_long and 0 < n_long < len(trajs)
    assert (
        SFTTrainer(
            cfg.model_copy(update={"sft": cfg.sft.model_copy(update={"max_length": 10**6})}),
            tiny_model(),
            tok,
            trajs,
            tmp_path / "x",
        ).n_truncated
        == 0
    )
    hist = trainer.train()
    vals = [h["val_loss"] for h in hist if "val_loss" in h]
    assert len(vals) == 3 and trainer.best_val == min(vals) and trainer.best_epoch == vals.index(min(vals))
    from transformers import AutoModelForCausalLM

    saved = AutoModelForCausalLM.from_pretrained(tmp_path / "final")
    trainer.model.load_state_dict(saved.state_dict())
    assert trainer.validation_loss() == pytest.approx(min(vals), rel=1e-5)  # final = the best epoch's weights


def test_micro_batches_give_the_batch_gradient(world) -> None:
    """Accumulating micro-batches with the batch's token count gives the same gradient as one pass."""
    from searchrl.rl.batch import TokenScorer
    from searchrl.sft.trainer import sft_loss

    d, retriever = world
    tok = ByteTokenizer()
    trajs = oracle_trajectories(get_protocol("search_r1"), load_qa(d / "train.jsonl", limit=5), retriever, tok)
    model = tiny_model()
    scorer = TokenScorer(model)
    sft_loss(scorer, trajs, 0).backward()
    full = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    n_tok = float(sum(sum(t.action_mask) for t in trajs))
    total = sum(float(_backward(sft_loss(scorer, trajs[s : s + 2], 0, "cpu", n_tok))) for s in range(0, 5, 2))
    for g, p in zip(full, model.parameters(), strict=True):
        torch.testing.assert_close(p.grad, g, rtol=1e-4, atol=1e-6)
    assert total == pytest.approx(float(sft_loss(scorer, trajs, 0)), rel=1e-5)


def _backward(loss):
    loss.backward()
    return loss.detach()


def test_balanced_oracle_data_covers_every_template(world) -> None:
    """sft.oracle_balance takes the questions round-robin over templates: the first n hold every shape ~equally."""
    import collections

    from searchrl.pipeline import load_split, make_protocol
    from searchrl.sft.oracle import round_robin_by_template
    from searchrl.stages import sft_examples as oracle_sft_data

    d, _ = world
    train = load_split(load_config("demo", [f"data.source={d}", "data.kinds=[]"]), "train")
    templates = collections.Counter(e.metadata["template"] for e in train)
    assert len(templates) > 5 and max(templates.values()) > 2 * min(templates.values())
    order = round_robin_by_template(train)
    assert sorted(e.id for e in order) == sorted(e.id for e in train)
    first = collections.Counter(e.metadata["template"] for e in order[: 2 * len(templates)])
    assert set(first) == set(templates) and set(first.values()) <= {1, 2}
    for t in templates:  # file order kept within a template
        assert [e.id for e in order if e.metadata["template"] == t] == [
            e.id for e in train if e.metadata["template"] == t
        ]
    n = len(templates)
    cfg = load_config(
        "demo",
        [
            f"data.source={d}",
            "sft.limit=3",
            f"sft.oracle_first_turns={n}",
            "sft.kinds=[]",
            "sft.oracle_balance=true",
            "retrieval.kind=bm25",
        ],
    )
    data = oracle_sft_data(cfg, make_protocol(cfg), ByteTokenizer())
    assert [x.question for x in data[:3]] == [e.question for e in order[:3]]
    assert len(data) == 3 + n


def test_oracle_mix_picks_the_whole_trajectories_per_kind(world) -> None:
    """sft.oracle_mix: the first n questions of each kind (file order) as whole trajectories, then first turns of
    the questions not taken; asking for more of a kind than the split holds, or a clashing limit, is an error."""
    from searchrl.pipeline import load_split, make_protocol
    from searchrl.stages import sft_examples as oracle_sft_data

    d, _ = world
    over = [f"data.source={d}", "sft.kinds=[]", "sft.limit=null", "retrieval.kind=bm25", "sft.oracle_plan=decompose"]
    cfg = load_config("demo", [*over, 'sft.oracle_mix={"comparison": 3, "single_hop": 2}', "sft.oracle_first_turns=5"])
    train = load_split(cfg, "train", kinds=[])
    tok = ByteTokenizer()
    data = oracle_sft_data(cfg, make_protocol(cfg), tok)
    want = [e for e in train if e.metadata["kind"] == "comparison"][:3]
    want += [e for e in train if e.metadata["kind"] == "single_hop"][:2]
    assert [t.question for t in data[:5]] == [e.question for e in want]
    rest = [e.question for e in train if e not in want][:5]
    assert len(data) == 10 and all(q in tok.decode(x.prompt_ids) for q, x in zip(rest, data[5:], strict=True))
    assert all("<information>" not in tok.decode(x.response_ids) for x in data[5:])
    with pytest.raises(ValueError, match="comparison"):
        oracle_sft_data(load_config("demo", [*over, 'sft.oracle_mix={"comparison": 100000}']), None, tok)
    with pytest.raises(ValueError, match="sft.limit"):
        oracle_sft_data(load_config("demo", [*over, 'sft.oracle_mix={"bridge": 2}', "sft.limit=3"]), None, tok)


def test_decompose_explicit_states_the_kind_of_answer_before_the_plan(world) -> None:
    from searchrl.sft.oracle import oracle_texts

    d, _ = world
    protocol = get_protocol("search_r1")
    kinds = {"country": "a country", "born_in": "a city", "founding_year": "a year", "founder": "a person"}
    seen = set()
    for ex in load_qa(d / "train.jsonl", limit=200):
        first = oracle_texts(protocol, ex, "decompose_explicit")[0][0]
        plain = oracle_texts(protocol, ex, "decompose")[0][0]
        relation = ex.metadata["chain"][-1]["relation"]
        if ex.metadata["kind"] == "comparison":
            assert first == plain
        elif relation in kinds:
            seen.add(relation)
            assert first == plain.replace("Plan: ", f"The question asks for {kinds[relation]}. Plan: ", 1)
    assert seen == set(kinds)


def test_oracle_topk_sets_the_documents_per_search_of_the_sft_data_only(world) -> None:
    from searchrl.pipeline import make_protocol
    from searchrl.stages import sft_examples as oracle_sft_data

    d, _ = world
    # bytes are tokens here: room for three whole documents (a cut observation is recorded as cut)
    base = [
        f"data.source={d}",
        "sft.limit=5",
        "retrieval.kind=bm25",
        "retrieval.topk=3",
        "rollout.max_obs_tokens=4000",
    ]
    for extra, k in (([], 3), (["sft.oracle_topk=2"], 2)):
        cfg = load_config("demo", base + extra)
        data = oracle_sft_data(cfg, make_protocol(cfg), ByteTokenizer())
        assert cfg.retrieval.topk == 3 and {len(h) for t in data for turn in t.turns for h in turn.hit_ids} == {k}
        assert all(t.turns[0].observation.count("Doc ") == k for t in data)
    with pytest.raises(ConfigError, match="oracle_topk"):
        load_config("demo", base + ["sft.oracle_topk=0"])


def test_decompose_facts_writes_each_finding_about_its_subject(world) -> None:
    """Each hop's note is the world's fact about the hop's subject, then the reference: "Vramzen was written by
    Mokpirn Pivveix, so #1 is Mokpirn Pivveix."; otherwise the text is decompose_explicit's."""
    from searchrl.sft.oracle import oracle_texts

    d, _ = world
    protocol = get_protocol("search_r1")
    relations = set()
    for ex in load_qa(d / "train.jsonl", limit=200):
        chain = ex.metadata["chain"]
        facts = oracle_texts(protocol, ex, "decompose_facts")
        plain = oracle_texts(protocol, ex, "decompose_explicit")
        if ex.metadata["kind"] == "comparison":
            chain = [h for h in chain if h["sub_question"] in facts[0][0]]
            chain = sorted(chain, key=lambda h: facts[0][0].find(h["sub_question"]))
        for k, hop in enumerate(chain, start=1):
            relations.add(hop["relation"])
            assert hop["subject"] in hop["fact"] and hop["fact"].endswith(hop["answer"])
            assert f"{hop['fact']}, so #{k} is {hop['answer']}." in facts[k][0]
        undone = [f for f, _ in facts]
        for hop in chain:
            undone = [t.replace(hop["fact"] + ", so #", "#") for t in undone]
        assert undone == [t for t, _ in plain]
    assert len(relations) >= 10  # every relation the world asks about has its own statement


@pytest.mark.parametrize("name", sorted(n for n, p in PROTOCOLS.items() if p.searches))
def test_a_question_without_a_chain_is_searched_as_asked_when_asked_to(world, name: str) -> None:
    d, retriever = world
    protocol = get_protocol(name, **({"multi_query": True} if name == "rag_r1" else {}))
    real = [replace(ex, metadata={}) for ex in load_qa(d / "train.jsonl", limit=6)]  # no recorded chain
    tok = ByteTokenizer()
    with pytest.raises(ValueError, match="sft.oracle_unchained=question"):
        oracle_trajectories(protocol, real, retriever, tok, topk=3)
    trajs = oracle_trajectories(protocol, real, retriever, tok, topk=3, unchained="question")
    for ex, t in zip(real, trajs, strict=True):
        report = protocol.check_format(t.response_text(tok))
        assert report.ok, (name, report.problems)
        assert report.answer is not None and report.answer.strip() == ex.answers[0]
        asked = ex.question.replace(",", " ") if protocol.max_queries > 1 else ex.question
        assert t.n_turns == 2 and t.turns[0].queries == [" ".join(asked.split())] and t.turns[0].hit_ids[0]


@pytest.mark.parametrize("plan", [False, "decompose"])
@pytest.mark.parametrize("name", ["search_r1", "rag_r1", "r_search"])
def test_yes_no_comparisons_close_with_the_verdict(tmp_path: Path, name: str, plan: bool | str) -> None:
    """A world's yes/no comparisons: the trajectory states whether the two ends are the same before answering; a
    multi-query protocol sends the two hops in one call only when both ask about an entity the question names."""
    write_world(generate_world(200, seed=3, yes_no=1.0), tmp_path)
    retriever = load_index(build_index(tmp_path / "corpus.jsonl", "bm25", tmp_path / "bm25"))
    examples = [q for q in load_qa(tmp_path / "train.jsonl") if q.answers[0] in ("yes", "no")]
    examples = sorted(examples, key=lambda q: len(q.metadata["chain"]))[:: max(1, len(examples) // 12)]
    assert {len(q.metadata["chain"]) for q in examples} >= {2, 4}
    protocol = get_protocol(name, **({"multi_query": True} if name == "rag_r1" else {}))
    tok = ByteTokenizer()
    for ex, t in zip(
        examples, oracle_trajectories(protocol, examples, retriever, tok, topk=3, plan=plan), strict=True
    ):
        chain = ex.metadata["chain"]
        report = protocol.check_format(t.response_text(tok))
        assert report.ok and report.answer.strip() == ex.answers[0], (report.problems, ex.question)
        ends = chain[len(chain) // 2 - 1]["answer"], chain[-1]["answer"]
        verdict = "are the same." if ex.answers[0] == "yes" else "are different."
        assert f"{ends[0]} and {ends[1]} {verdict} So the answer is {ex.answers[0]}." in t.turns[-1].text
        if plan == "decompose":
            assert f"check whether #{len(chain) // 2} and #{len(chain)} are the same." in t.turns[0].text
        parallel = protocol.max_queries > 1 and len(chain) == 2
        assert t.n_turns == (2 if parallel else len(chain) + 1), ex.question


@pytest.mark.parametrize("plan", [False, "decompose"])
def test_bridge_comparisons_set_the_two_years_side_by_side(tmp_path: Path, plan: bool | str) -> None:
    """A bridge comparison's trajectory searches both sides hop by hop, then names each entity with its year and the
    year the question asks for before answering with the entity."""
    write_world(generate_world(300, seed=3, bridge_comparisons=1.0), tmp_path)
    retriever = load_index(build_index(tmp_path / "corpus.jsonl", "bm25", tmp_path / "bm25"))
    examples = [q for q in load_qa(tmp_path / "train.jsonl") if q.metadata["template"].startswith("comparison:bri")]
    examples = examples[:10]
    protocol, tok = get_protocol("search_r1"), ByteTokenizer()
    for ex, t in zip(
        examples, oracle_trajectories(protocol, examples, retriever, tok, topk=3, plan=plan), strict=True
    ):
        chain = ex.metadata["chain"]
        assert protocol.check_format(t.response_text(tok)).answer.strip() == ex.answers[0]
        years = {chain[0]["subject"]: chain[1]["answer"], chain[2]["subject"]: chain[3]["answer"]}
        word = "earlier" if int(years[ex.answers[0]]) == min(map(int, years.values())) else "later"
        side_by_side = ", ".join(f"{name} {year}" for name, year in years.items())
        assert (
            f"{side_by_side}. {years[ex.answers[0]]} is {word}. So the answer is {ex.answers[0]}." in t.turns[-1].text
        )
        assert t.n_turns == 5
        if plan == "decompose":
            assert f"pick the {word} of #2 and #4." in t.turns[0].text


def test_sft_data_sources_train_together_and_real_questions_are_picked_by_form(world, tmp_path: Path) -> None:
    """sft.data as a list: the world's oracle data (shaped by sft.oracle_mix) plus a trajectories file (not); the
    oracle of a real QA file under sft.oracle_unchained=question keeps only the asked forms."""
    import json

    from searchrl.pipeline import make_protocol
    from searchrl.stages import sft_examples
    from searchrl.stages.data import oracle_data, write_oracle_data

    d, _ = world
    qa = tmp_path / "real"
    qa.mkdir()
    rows = [
        ("Who was born first, Ada Lovelace or Charles Babbage?", "Charles Babbage"),
        ("Where was the director of film Or Else born?", "Paris"),
        ("Are both films from France?", "no"),
        ("Which film came out earlier, Rope or Vertigo?", "Rope"),
    ]
    lines = [json.dumps({"id": f"q{i}", "question": q, "golden_answers": [a]}) for i, (q, a) in enumerate(rows)]
    (qa / "train.jsonl").write_text("\n".join(lines) + "\n")
    over = [f"data.source={qa}", f"data.corpus={d / 'corpus.jsonl'}", "retrieval.kind=bm25", "sft.kinds=[]"]
    cfg = load_config("demo", [*over, "sft.oracle_unchained=question", "sft.limit=null"])
    tok = ByteTokenizer()
    choice = oracle_data(cfg, tok, forms="choice")
    assert [t.question for t in choice] == [rows[0][0], rows[3][0]]
    assert [t.question for t in oracle_data(cfg, tok, forms=["yes/no", "open"])] == [rows[1][0], rows[2][0]]
    with pytest.raises(ValueError, match="oracle forms \\['multiple'\\]: use choice, yes/no, open"):
        oracle_data(cfg, tok, forms=["multiple"])
    real = tmp_path / "real.jsonl"
    write_oracle_data(cfg, real, forms=["choice"])
    mix = 'sft.oracle_mix={"comparison": 2, "single_hop": 1}'
    world_cfg = load_config("demo", [f"data.source={d}", "retrieval.kind=bm25", "sft.kinds=[]", "sft.limit=null", mix])
    alone = sft_examples(world_cfg, make_protocol(world_cfg), tok)
    both_cfg = world_cfg.model_copy(update={"sft": world_cfg.sft.model_copy(update={"data": ["oracle", str(real)]})})
    both = sft_examples(both_cfg, make_protocol(both_cfg), tok)
    assert len(alone) == 3 and len(both) == 5  # the mix shapes the oracle source only; the file adds its two
    assert [tok.decode(x.prompt_ids) for x in both[:3]] == [tok.decode(x.prompt_ids) for x in alone]
    saved = [json.loads(line) for line in real.read_text().splitlines()]  # the policy's tokenizer wrote them
    assert [list(x.prompt_ids) for x in both[3:]] == [r["prompt_ids"] for r in saved]
    with pytest.raises(ValueError, match="empty list"):
        sft_examples(both_cfg.model_copy(update={"sft": both_cfg.sft.model_copy(update={"data": []})}), None, tok)


@pytest.mark.parametrize("name", ["search_r1", "rag_r1", "r1_searcher"])
def test_a_choice_question_without_a_chain_looks_up_each_option(world, name: str) -> None:
    """sft.oracle_unchained=options: "..., A or B?" searches A, then B (one call under multi-query), then answers
    the gold; a question that names no options is searched as asked."""
    from searchrl.data.records import QAExample

    _, retriever = world
    protocol = get_protocol(name, **({"multi_query": True} if name == "rag_r1" else {}))
    choice = QAExample(
        "c", "Who was born first, Ada Lovelace or George Nevill, 1st Earl?", ["George Nevill, 1st Earl"]
    )
    other = QAExample("o", "Where was the director of film Or Else born?", ["Paris"])
    trajs = oracle_trajectories(protocol, [choice, other], retriever, ByteTokenizer(), topk=2, unchained="options")
    tok = ByteTokenizer()
    for t, ex in zip(trajs, [choice, other], strict=True):
        report = protocol.check_format(t.response_text(tok))
        assert report.ok and report.answer.strip() == ex.answers[0], (name, report.problems)
    searched = [t.queries for t in trajs[0].turns if t.queries]
    if protocol.max_queries > 1:
        assert searched == [["Ada Lovelace", "George Nevill 1st Earl"]]  # commas separate a call's queries
    else:
        assert searched == [["Ada Lovelace"], ["George Nevill, 1st Earl"]]
    assert [t.queries for t in trajs[1].turns if t.queries] == [[other.question]]
    closing = trajs[0].turns[-1].text  # the answer is tied to the question's options, not to any name
    assert "Ada Lovelace and George Nevill, 1st Earl" in closing and "options" not in trajs[1].turns[-1].text


class _Shelf:
    """A retriever over a few fixed documents: every query gets the same ones."""

    def __init__(self, docs: list[tuple[str, str]]) -> None:
        from searchrl.retrieval.base import Hit

        self.hits = [Hit(f"d{i}", title, f"{title} {text}", 1.0) for i, (title, text) in enumerate(docs)]

    def search(self, queries: list[str], topk: int) -> list[list]:
        return [self.hits[:topk] for _ in queries]


@pytest.mark.parametrize("name", ["search_r1", "r1_searcher"])
def test_grounded_real_questions_quote_the_sentence_that_holds_the_answer(name: str) -> None:
    """sft.oracle_grounded: a question searched as asked is kept only when a document holds a gold the question
    does not name; its closing step quotes that sentence (without the title the corpus repeats) and answers with
    the gold found there. A choice question whose options' years are not both in the documents is dropped."""
    from searchrl.data.records import QAExample
    from searchrl.sft.oracle import evidence_sentence

    shelf = _Shelf(
        [
            ("Rope (film)", "Rope is a 1948 film. It was directed by George Dewhurst."),
            ("George Dewhurst", "George Dewhurst (1889 - 1968 in Tooting, London) was a director. He wrote plays."),
        ]
    )
    found = QAExample("f", "Where did the director of film Rope die?", ["Greater London", "London"])
    missed = QAExample("m", "Who is the mother of George Dewhurst?", ["Mary Dewhurst"])
    named = QAExample("n", "Was Rope or Vertigo released first?", ["Rope"])
    choice = QAExample("c", "Which film came out earlier, Rope or Vertigo?", ["Rope"])
    protocol = get_protocol(name)
    tok = ByteTokenizer()
    examples = [found, missed, named, choice]
    trajs = oracle_trajectories(protocol, examples, shelf, tok, topk=2, unchained="options", grounded=True)
    assert [t.question_id for t in trajs] == ["f"]  # no passage of Vertigo: its year is unread
    closing = trajs[0].turns[-1].text
    assert (
        "The documents say: George Dewhurst (1889 - 1968 in Tooting, London) was a director. So the answer" in closing
    )
    report = protocol.check_format(trajs[0].response_text(tok))
    assert report.ok and report.answer.strip() == "London" and trajs[0].answer == "London"
    assert len(oracle_trajectories(protocol, examples, shelf, tok, topk=2, unchained="options")) == 4  # not grounded
    long = _Shelf([("T", " ".join(f"w{i}" for i in range(60)) + " Paris " + " ".join(f"v{i}" for i in range(60)))])
    window = evidence_sentence(long.search(["q"], 1)[0:1], ["Paris"], max_words=10).split()
    assert len(window) == 10 and window[5] == "Paris"
    assert evidence_sentence(shelf.search(["q"], 2), ["Berlin"]) is None


def test_a_grounded_oracle_limit_counts_the_kept_trajectories(tmp_path: Path) -> None:
    """oracle_data under sft.oracle_grounded: questions whose documents miss the gold are skipped before
    sft.limit is applied, so the limit is met from later questions."""
    import json

    from searchrl.stages.data import oracle_data

    docs = [
        ("Rope (film)", "Rope is a 1948 film directed by Alfred Hitchcock."),
        ("Alfred Hitchcock", "Alfred Hitchcock was born in Leytonstone, London."),
        ("Vertigo (film)", "Vertigo is a 1958 thriller film."),
    ]
    (tmp_path / "corpus.jsonl").write_text(
        "".join(json.dumps({"id": str(i), "contents": f"{t}\n{x}"}) + "\n" for i, (t, x) in enumerate(docs))
    )
    rows = [
        ("Who composed the music of film Vertigo?", "Bernard Herrmann"),  # no document holds it
        ("Who directed the film Rope?", "Alfred Hitchcock"),
        ("Where was the director of film Rope born?", "Leytonstone"),
    ]
    lines = [json.dumps({"id": f"q{i}", "question": q, "golden_answers": [a]}) for i, (q, a) in enumerate(rows)]
    (tmp_path / "train.jsonl").write_text("\n".join(lines) + "\n")
    over = [f"data.source={tmp_path}", "retrieval.kind=bm25", "sft.kinds=[]", "sft.oracle_unchained=question"]
    over.append("rollout.max_obs_tokens=4000")  # bytes are tokens here: the three documents whole
    tok = ByteTokenizer()
    grounded = load_config("demo", [*over, "sft.oracle_grounded=true", "sft.limit=1", "sft.oracle_topk=3"])
    assert [t.question_id for t in oracle_data(grounded, tok)] == ["q1"]
    everything = grounded.model_copy(update={"sft": grounded.sft.model_copy(update={"limit": None})})
    assert [t.question_id for t in oracle_data(everything, tok)] == ["q1", "q2"]
    plain = load_config("demo", [*over, "sft.limit=1"])
    assert [t.question_id for t in oracle_data(plain, tok)] == ["q0"]


@pytest.mark.parametrize("name", ["search_r1", "rag_r1"])
def test_name_options_makes_a_choice_comparison_close_on_its_options(world, name: str) -> None:
    """sft.oracle_name_options: the closing step of a world's "..., A or B?" comparison names both options (and
    for years sets them side by side) before the answer; other questions, and the default, are unchanged."""
    from searchrl.rewards.forms import choice_options
    from searchrl.sft.oracle import oracle_texts

    d, _ = world
    protocol = get_protocol(name, **({"multi_query": True} if name == "rag_r1" else {}))
    examples = load_qa(d / "train.jsonl")
    choices = [e for e in examples if e.metadata.get("kind") == "comparison" and choice_options(e.question)]
    others = [e for e in examples if not choice_options(e.question)][:20]
    assert choices and others
    for ex in choices:
        a, b = choice_options(ex.question)
        closing = oracle_texts(protocol, ex, name_options=True)[-1][0]
        assert (
            f"The question names two options, {a} and {b}." in closing
            and f"<answer> {ex.answers[0]} </answer>" in closing
        )
        assert "options" not in oracle_texts(protocol, ex)[-1][0]
        if (
            name == "search_r1"
            and len(ex.metadata["chain"]) == 2
            and all(h["answer"].isdigit() for h in ex.metadata["chain"])
        ):
            years = sorted((h["answer"] for h in ex.metadata["chain"]), key=int)
            assert f"{years[0]} is earlier." in closing or f"{years[1]} is later." in closing, closing
    for ex in others:
        assert oracle_texts(protocol, ex, name_options=True) == oracle_texts(protocol, ex)


class _ByTitle(_Shelf):
    """A retriever that returns the documents whose title starts with the query."""

    def search(self, queries: list[str], topk: int) -> list[list]:
        return [[h for h in self.hits if h.title.startswith(q)][:topk] for q in queries]


@pytest.mark.parametrize("name", ["search_r1", "r1_searcher"])
def test_grounded_choice_questions_set_their_options_years_side_by_side(name: str) -> None:
    """sft.oracle_grounded with options: a choice question comparing years is kept only when the years read off
    each option's own passage decide its gold; the closing sets them side by side, and questions comparing no year,
    or whose year a passage does not open with, or whose years pick the other option, are dropped."""
    from searchrl.data.records import QAExample

    shelf = _ByTitle(
        [
            ("Rope (film)", "Rope is a 1948 American film directed by Alfred Hitchcock."),
            ("Vertigo", "Vertigo is a 1958 film. It was remade in 1998."),
            ("Ada Byron", "Ada Byron (10 December 1815 - 27 November 1852) was a mathematician."),
            ("Carl Berg", "Carl Berg (born 3 May 1791 in Oslo; died 1871) was a painter."),
            ("Dora Holm", "Dora Holm (1801 – 1899) was a poet born in 1801."),
        ]
    )
    asked = [
        QAExample("early", "Which film came out earlier, Rope or Vertigo?", ["rope"]),
        QAExample("misread", "Which film came out later, Rope or Vertigo?", ["Rope"]),
        QAExample("died", "Who died first, Dora Holm or Ada Byron?", ["Ada Byron"]),
        QAExample("born", "Who is younger, Carl Berg or Ada Byron?", ["Ada Byron"]),
        QAExample("bridge", "Which film has the director who died first, Rope or Vertigo?", ["Rope"]),
        QAExample("longer", "Who lived longer, Dora Holm or Ada Byron?", ["Dora Holm"]),
        QAExample("unborn", "Who died first, Carl Berg or Ada Byron?", ["Ada Byron"]),
    ]
    protocol = get_protocol(name)
    tok = ByteTokenizer()
    trajs = oracle_trajectories(protocol, asked, shelf, tok, topk=2, unchained="options", grounded=True)
    assert [t.question_id for t in trajs] == ["early", "died", "born"]
    closings = [t.turns[-1].text for t in trajs]
    assert (
        "two options, Rope and Vertigo. Rope 1948, Vertigo 1958. 1948 is earlier. So the answer is Rope."
        in (closings[0])
    )
    assert "Dora Holm 1899, Ada Byron 1852. 1852 is earlier." in closings[1]
    assert "Carl Berg 1791, Ada Byron 1815. 1815 is later. So the answer is Ada Byron." in closings[2]
    for t in trajs:  # answered with the option as the question spells it, searched option by option
        report = protocol.check_format(t.response_text(tok))
        assert report.ok and report.answer.strip() == t.answer and t.answer in t.question
        options = [o.strip() for o in t.question[:-1].split(",")[1].split(" or ")]
        assert [q for turn in t.turns for q in turn.queries] == options


def test_the_demo_cold_start_on_real_questions_names_the_fix(world, tmp_path: Path) -> None:
    """The demo's cold start picks synthetic kinds (sft.kinds: [single_hop]); pointed at real questions, which have
    none, it says what to do instead of only that no question is of that kind."""
    from searchrl.stages.data import oracle_data

    d, _ = world
    (tmp_path / "train.jsonl").write_text('{"id": "q1", "question": "Who wrote Hamlet?", "answer": "Shakespeare"}\n')
    cfg = load_config("demo", [f"data.source={tmp_path}", f"data.corpus={d / 'corpus.jsonl'}"])
    with pytest.raises(
        ValueError, match=r"of kinds \['single_hop'\]; its questions have no synthetic kinds .*sft\.data="
    ):
        oracle_data(cfg, ByteTokenizer())
    world_cfg = load_config("demo", [f"data.source={d}", "sft.kinds=[nine_hop]"])
    with pytest.raises(ValueError, match=r"no question has the kind 'nine_hop' \(did you mean 'single_hop'\?\)"):
        oracle_data(world_cfg, ByteTokenizer())
