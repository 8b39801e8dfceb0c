"""SFT behaviours that a mutation audit of ``searchrl.sft`` found unpinned, each with hand-written expected values."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from searchrl.config import load_config
from searchrl.data.records import QAExample
from searchrl.generation.fake import ByteTokenizer
from searchrl.protocols import get_protocol
from searchrl.retrieval.base import Hit
from searchrl.rollout.trajectory import Trajectory, Turn
from searchrl.sft.attempts import _round_seed, sample_attempts
from searchrl.sft.option_years import compared_direction, option_years, year_in_passage, years_text
from searchrl.sft.pipelines import select_answerable, select_by_attempts, slice_steps
from searchrl.sft.quotas import apply_quotas, match, parse_quotas
from searchrl.sft.text_data import text_trajectory
from searchrl.sft.trainer import SFTTrainer, fit_length
from searchrl.sft.types import QUESTION_ANSWER, QUESTION_SEARCH, SFTExample
from searchrl.testing import letter_sft_examples, tiny_model, tokenizer


# ---------------------------------------------------------------------------------------------------- types
def test_an_example_refuses_a_loss_mask_that_does_not_align_or_is_not_binary() -> None:
    with pytest.raises(ValueError, match="3 response ids but 2 loss-mask entries"):
        SFTExample([1], [2, 3, 4], [1, 1])
    with pytest.raises(ValueError, match="must be 0 or 1"):
        SFTExample([1], [2, 3], [1, 2])
    with pytest.raises(ValueError, match="must be 0 or 1"):
        SFTExample([1], [2, 3], [1, -100])


def test_an_examples_target_tokens_are_its_loss_mask_ones() -> None:
    assert SFTExample([1], [2, 3, 4, 5, 6], [1, 0, 0, 1, 1]).n_target_tokens == 3


# --------------------------------------------------------------------------------------------------- quotas
def test_a_zero_quota_is_allowed_and_keeps_none_of_its_source() -> None:
    quotas = parse_quotas(["hotpotqa=0", "nq=2"])
    assert quotas == {("hotpotqa", "*"): 0, ("nq", "*"): 2}
    rows = [("a", "hotpotqa"), ("b", "nq"), ("c", "hotpotqa"), ("d", "nq"), ("e", "nq")]
    kept, counts = apply_quotas(rows, quotas, source=lambda r: r[1])
    assert counts == {"hotpotqa/*": 0, "nq/*": 2}
    assert [s for _, s in kept] == ["nq", "nq"]


def test_a_source_quota_is_more_specific_than_a_bucket_quota() -> None:
    quotas = parse_quotas(["hotpotqa=1", "*/hard=5"])
    assert match(quotas, "hotpotqa", "hard") == ("hotpotqa", "*")
    assert match(quotas, "nq", "hard") == ("*", "hard")
    assert match(quotas, "nq", "easy") is None
    rows = [("a", "hotpotqa"), ("b", "hotpotqa"), ("c", "nq")]
    kept, counts = apply_quotas(rows, quotas, source=lambda r: r[1], bucket=lambda r: "hard")
    assert counts == {"hotpotqa/*": 1, "*/hard": 1} and len(kept) == 2


# ---------------------------------------------------------------------------------------------- option years
def test_the_death_year_is_the_first_year_after_the_dash() -> None:
    text = "Ada Byron (10 December 1815 – 27 November 1852, buried 1853) was a mathematician."
    assert year_in_passage(text, "death") == 1852
    assert year_in_passage(text, "birth") == 1815


def test_an_options_passage_is_one_whose_title_is_the_option_not_a_longer_name() -> None:
    hits = [
        [
            Hit("1", "Adam Smith", "Adam Smith (1723 – 1790) was an economist.", 1.0),
            Hit("2", "Ada (poet)", "Ada (1815 – 1852) was a poet.", 0.9),
        ],
        [Hit("3", "Bob", "Bob (born 4 May 1950) is a singer.", 1.0)],
    ]
    assert option_years("Who was born first, Ada or Bob?", ["Ada", "Bob"], hits) == [1815, 1950]


def test_tied_years_decide_nothing() -> None:
    assert years_text("Which film came out earlier, A or B?", ["A", "B"], [1957, 1957], ["A"]) is None
    assert years_text("Which film came out later, A or B?", ["A", "B"], [1957, 1957], ["B"]) is None


def test_a_question_that_asks_both_ways_has_no_direction() -> None:
    assert compared_direction("Who was born earlier and died later, Ada or Bob?") is None
    assert compared_direction("Who was born earlier, Ada or Bob?") == "earlier"


# ------------------------------------------------------------------------------------------------- attempts
def test_sampling_needs_at_least_one_attempt_and_unique_question_ids() -> None:
    qs = [QAExample("q1", "one?", ["a"]), QAExample("q2", "two?", ["b"]), QAExample("q1", "three?", ["c"])]
    with pytest.raises(ValueError, match="must be >= 1, got 0"):
        sample_attempts(None, qs[:2], 0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="question id 'q1' occurs 2 times"):
        sample_attempts(None, qs, 1)  # type: ignore[arg-type]


def test_every_tag_and_round_draws_its_own_seed() -> None:
    seeds = {_round_seed(0, tag, r) for tag in ("initial", "retry", "rs") for r in range(3)}
    assert len(seeds) == 9 and all(0 <= s < 2**27 for s in seeds)
    assert _round_seed(0, "rs", 1) == _round_seed(0, "rs", 1) != _round_seed(1, "rs", 1)


# -------------------------------------------------------------------------------------------------- trainer
def test_fit_length_keeps_an_exact_fit_cuts_the_target_and_drops_a_prompt_without_room() -> None:
    ex = SFTExample([1, 2], [3, 4, 5], [1, 0, 1], source_uid="t1")
    assert fit_length(ex, 5) is ex
    cut = fit_length(ex, 4)
    assert cut is not None and (cut.prompt_ids, cut.response_ids, cut.loss_mask) == ([1, 2], [3, 4], [1, 0])
    assert cut.source_uid == "t1"
    assert fit_length(ex, 3).response_ids == [3]
    assert fit_length(ex, 2) is None


def test_the_trainer_counts_cut_dropped_and_targetless_examples_apart() -> None:
    examples = [
        SFTExample([65, 66], [70, 71, 72], [1, 1, 1], source_uid="fits"),  # 5 tokens
        SFTExample([65, 66], [70, 71, 72, 73, 74], [1, 1, 1, 1, 1], source_uid="cut"),  # 7 -> cut to 5
        SFTExample([65, 66, 67, 68, 69], [70], [1], source_uid="dropped"),  # the prompt fills the 5 tokens
        SFTExample([65, 66, 67], [70, 71, 72], [0, 0, 1], source_uid="cut_to_nothing"),  # cut to [0, 0]
    ]
    trainer = SFTTrainer(load_config(None, ["sft.max_length=5"]), tiny_model(), tokenizer(), examples, "unused")
    assert (trainer.n_truncated, trainer.n_dropped, trainer.n_no_target) == (2, 1, 1)
    assert [e.source_uid for e in trainer.examples] == ["fits", "cut"]
    assert [len(e.response_ids) for e in trainer.examples] == [3, 3]


def _masked() -> list[SFTExample]:
    """Four examples whose targets are partly masked (documents inside the target), of different lengths."""
    tok = tokenizer()
    out = []
    for i, (q, a, mask) in enumerate([("qq", " ab", [1, 0, 1]), ("q", " a", [1, 0]), ("qqq", " abc", [1, 0, 0, 1])]):
        p, r = tok.encode(f"{q}{i}:"), tok.encode(a)
        out.append(SFTExample(p, r, (mask + [1] * len(r))[: len(r)], source_uid=f"t{i}"))
    p, r = tok.encode("qqqq3:"), tok.encode(" abcd")
    out.append(SFTExample(p, r, [1] + [0] * (len(r) - 1), source_uid="t3"))
    return out


def _token_mean_nll(model, examples: list[SFTExample]) -> float:
    """The NLL of every loss_mask == 1 token, each example run alone, averaged over those tokens."""
    nll, n = 0.0, 0
    for e in examples:
        with torch.no_grad():
            logits = model(torch.tensor([e.prompt_ids + e.response_ids])).logits[0, len(e.prompt_ids) - 1 : -1]
        per_token = torch.nn.functional.cross_entropy(logits.float(), torch.tensor(e.response_ids), reduction="none")
        nll, n = nll + float((per_token * torch.tensor(e.loss_mask, dtype=torch.float)).sum()), n + sum(e.loss_mask)
    return nll / n


def test_the_validation_loss_is_the_token_mean_over_masked_targets() -> None:
    cfg = load_config(None, ["sft.val_fraction=0.5", "sft.batch_size=2", "sft.micro_batch_size=1"])
    trainer = SFTTrainer(cfg, tiny_model(), tokenizer(), _masked(), "unused")
    assert len(trainer.val) == 2
    assert trainer.validation_loss() == pytest.approx(_token_mean_nll(trainer.model, trainer.val), rel=1e-5)


def test_a_steps_loss_is_the_token_mean_over_the_batchs_masked_targets(tmp_path) -> None:
    cfg = load_config(None, ["sft.batch_size=4", "sft.micro_batch_size=1", "sft.epochs=1", "sft.warmup_steps=0"])
    examples = _masked()
    trainer = SFTTrainer(cfg, tiny_model(), tokenizer(), examples, tmp_path)
    expected = _token_mean_nll(trainer.model, examples)  # before the step: the loss it logs
    history = trainer.train()
    assert len(history) == 1 and history[0]["loss"] == pytest.approx(expected, rel=1e-5)


# ---------------------------------------------------------------------------------------------- step slices
def test_a_search_turn_without_a_result_leaves_the_next_step_a_question_step() -> None:
    t = Trajectory("u#0", "u", "u", "q?", ["a"], prompt_ids=[1, 2])
    t.append([10, 11], sampled=True, logprobs=[0.0] * 2)
    t.turns.append(Turn(text="s", action="search", finish_reason="stop", n_gen_tokens=2))  # no observation
    t.append([12, 13, 14], sampled=True, logprobs=[0.0] * 3)
    t.turns.append(Turn(text="a", action="answer", finish_reason="stop", n_gen_tokens=3))
    steps = slice_steps(t)
    assert [s.kind for s in steps] == [QUESTION_SEARCH, QUESTION_ANSWER]
    assert (steps[1].prompt_ids, steps[1].response_ids, steps[1].loss_mask) == ([1, 2, 10, 11], [12, 13, 14], [1] * 3)


def test_selection_settings_out_of_range_are_refused_before_sampling() -> None:
    qs = [QAExample("q1", "one?", ["a"])]
    with pytest.raises(ValueError, match="easy_fraction must be within"):
        select_answerable(None, qs, 2, 1.5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="need 1 <= easy_below <= hard_above"):
        select_by_attempts(None, qs, 24, easy_below=12, hard_above=11)  # type: ignore[arg-type]


# ------------------------------------------------------------------------------------------------ text data
def test_a_text_response_without_an_answer_did_not_stop_at_one() -> None:
    row = {"question": "q?", "response": "<think>I am not sure.</think>"}
    t = text_trajectory(row, get_protocol("search_r1"), ByteTokenizer())
    assert t.stop_reason == "none" and t.answer is None
    row = {"question": "q?", "response": "<think>Sure.</think>\n<answer>x</answer>"}
    assert text_trajectory(row, get_protocol("search_r1"), ByteTokenizer()).stop_reason == "answer"


def test_a_turn_whose_tokens_are_split_by_inserted_text_is_refused() -> None:
    t = Trajectory("u#0", "u", "u", "q?", ["a"], prompt_ids=[1])
    t.append([10], sampled=True, logprobs=[0.0])
    t.append([20], sampled=False)  # inserted text inside the one turn's sampled tokens
    t.append([11, 12], sampled=True, logprobs=[0.0] * 2)
    t.turns.append(Turn(text="a", action="answer", finish_reason="stop", n_gen_tokens=3))
    with pytest.raises(ValueError, match="not contiguous"):
        slice_steps(t)


# --------------------------------------------------------------------------------------------------- oracle
class _ThinkOpening(ByteTokenizer):
    """Bytes as tokens, with a chat template whose generation prompt opens the reply with ``<think>\\n``."""

    chat_template = "opens <think>"

    def apply_chat_template(self, messages, add_generation_prompt=True, tokenize=False, **_):
        text = "".join(f"[{m['role']}] {m['content']}\n" for m in messages)
        return text + ("[assistant] <think>\n" if add_generation_prompt else "")


class _OneDocument:
    def search(self, queries: list[str], topk: int) -> list[list[Hit]]:
        return [[Hit("7", "Dune", "Dune is by Frank Herbert.", 1.0)] for _ in queries]


_DUNE_CHAIN = [
    {"sub_question": "Who wrote Dune?", "answer": "Frank Herbert", "query": "Dune author"},
    {"sub_question": "Where was Frank Herbert born?", "answer": "Tacoma", "query": "Frank Herbert birthplace"},
]


def test_the_oracle_writes_a_think_block_the_prompt_opened_once() -> None:
    from searchrl.sft.oracle import oracle_trajectories

    tok = _ThinkOpening()
    ex = QAExample("q", "Where was the author of Dune born?", ["Tacoma"], metadata={"chain": _DUNE_CHAIN})
    (t,) = oracle_trajectories(get_protocol("search_r1"), [ex], _OneDocument(), tok, topk=1)
    assert tok.decode(t.prompt_ids).endswith("[assistant] <think>\n")
    assert [turn.text for turn in t.turns] == [  # the first goes on in the opened block; later ones open theirs
        "First, I need to know: Who wrote Dune? </think>\n<search> Dune author </search>",
        "<think> The documents say the answer to 'Who wrote Dune?' is Frank Herbert. Next, I need to know: Where was "
        "Frank Herbert born? </think>\n<search> Frank Herbert birthplace </search>",
        "<think> The documents say the answer to 'Where was Frank Herbert born?' is Tacoma. So the answer is Tacoma. "
        "</think>\n<answer> Tacoma </answer>",
    ]
    assert tok.decode(t.response_ids).startswith("First, I need to know: Who wrote Dune? </think>\n<search>")


# ------------------------------------------------------------------------------------------------- rewriter
def test_only_the_turn_right_after_a_search_becomes_an_internal_step() -> None:
    from searchrl.sft.rewriter import internalize

    t = Trajectory("x#0", "x", "x", "Where is Lyon?", ["France"], prompt_ids=[5])
    t.turns = [
        Turn(
            text="I need the country of Lyon. <|begin_external_search|>Lyon country<|end_external_search|>",
            action="search",
            finish_reason="stop",
            queries=["Lyon country"],
            observation=" <|begin_search_result|>\n(1)Lyon: Lyon is a city in France.\n<|end_search_result|>",
        ),
        Turn(text="Lyon is a city in France.", action="invalid", finish_reason="stop"),
        Turn(text="It is not Paris. So the answer is \\boxed{France}.", action="answer", finish_reason="eos"),
    ]
    assert internalize(t, get_protocol("r1_searcher_pp")) == (
        "I need the country of Lyon.\n<|begin_internal_answer|>Lyon is a city in France.<|end_internal_answer|>\n"
        "It is not Paris.\nSo the answer is \\boxed{France}."
    )


def test_a_later_epoch_that_only_ties_the_best_validation_loss_is_not_kept(tmp_path, monkeypatch) -> None:
    cfg = load_config(None, ["sft.val_fraction=0.2", "sft.epochs=3", "sft.batch_size=4", "sft.warmup_steps=0"])
    trainer = SFTTrainer(cfg, tiny_model(), tokenizer(), letter_sft_examples(10), tmp_path)
    losses = iter([0.7, 0.5, 0.5])
    monkeypatch.setattr(trainer, "validation_loss", lambda: next(losses))
    trainer.train()
    assert (trainer.best_epoch, trainer.best_val) == (1, 0.5)


@pytest.mark.parametrize(
    "row",
    [
        {"messages": [{"role": "user", "content": "q?"}, "It is x."]},
        {"messages": [{"role": "user"}, {"role": "assistant", "content": "<answer>x</answer>"}]},
        {"prompt": [{"content": "q?"}], "completion": "<answer>x</answer>"},
    ],
)
def test_a_chat_message_without_a_role_and_content_is_refused_naming_the_row(row: dict) -> None:
    with pytest.raises(ValueError, match=r"^data.jsonl:3: field '(messages|prompt)' must be a list of chat messages"):
        text_trajectory(row, get_protocol("search_r1"), ByteTokenizer(), where="data.jsonl:3")


@pytest.mark.parametrize(
    ("row", "field"),
    [
        ({"messages": [{"role": "assistant", "content": "<answer>x</answer>"}]}, "messages"),
        ({"conversations": [{"from": "gpt", "value": "<answer>x</answer>"}]}, "conversations"),
    ],
)
def test_a_reply_without_a_prompt_message_before_it_is_refused(row: dict, field: str) -> None:
    with pytest.raises(ValueError, match=f"^data.jsonl:3: '{field}' must end with the assistant's reply, after the"):
        text_trajectory(row, get_protocol("search_r1"), ByteTokenizer(), where="data.jsonl:3")


def test_a_chat_rows_question_is_its_last_user_message() -> None:
    row = {
        "messages": [
            {"role": "user", "content": "Who wrote Dune?"},
            {"role": "assistant", "content": "Frank Herbert."},
            {"role": "user", "content": "Where was he born?"},
            {"role": "assistant", "content": "<think>Tacoma.</think>\n<answer>Tacoma</answer>"},
        ]
    }
    t = text_trajectory(row, get_protocol("search_r1"), ByteTokenizer())
    assert t.question == "Where was he born?"
    given = {"prompt": row["messages"][:3], "completion": row["messages"][3]}
    assert text_trajectory(given, get_protocol("search_r1"), ByteTokenizer()).question == "Where was he born?"


@pytest.mark.parametrize("history", [[["Who wrote Dune?"]], ["Who wrote Dune?"], [["a", "b", "c"]]])
def test_an_alpaca_history_that_is_not_prompt_response_pairs_is_refused(history: list) -> None:
    row = {"instruction": "Where was he born?", "output": "<answer>Tacoma</answer>", "history": history}
    with pytest.raises(ValueError, match=r"^data.jsonl:3: field 'history' must be a list of \[prompt, response\]"):
        text_trajectory(row, get_protocol("search_r1"), ByteTokenizer(), where="data.jsonl:3")


def test_the_validation_share_rounds_to_the_nearest_example() -> None:
    cfg = load_config(None, ["sft.val_fraction=0.3"])
    trainer = SFTTrainer(cfg, tiny_model(), tokenizer(), letter_sft_examples(9), "unused")  # 2.7 -> 3
    assert (len(trainer.val), len(trainer.examples)) == (3, 6)


def test_a_validation_split_that_takes_every_example_is_refused() -> None:
    one_trajectory = [replace(e, source_uid="t0") for e in letter_sft_examples(4)]  # held out whole or not at all
    with pytest.raises(ValueError, match=r"sft.val_fraction=0.25 leaves no training example"):
        SFTTrainer(load_config(None, ["sft.val_fraction=0.25"]), tiny_model(), tokenizer(), one_trajectory, "unused")


class _ByQuery:
    docs = {
        "Dune author": Hit("1", "Dune", "Dune is by Frank Herbert.", 1.0),
        "Frank Herbert birthplace": Hit("2", "Frank Herbert", "Frank Herbert was born in Tacoma.", 1.0),
    }

    def search(self, queries: list[str], topk: int) -> list[list[Hit]]:
        return [[self.docs[q]] for q in queries]


def test_each_oracle_search_shows_the_documents_of_its_own_query() -> None:
    from searchrl.sft.oracle import oracle_trajectories

    two = QAExample("q2", "Where was the author of Dune born?", ["Tacoma"], metadata={"chain": _DUNE_CHAIN})
    one = QAExample("q1", "Where was Frank Herbert born?", ["Tacoma"], metadata={"chain": _DUNE_CHAIN[1:]})
    t2, t1 = oracle_trajectories(get_protocol("search_r1"), [two, one], _ByQuery(), ByteTokenizer(), topk=1)
    assert [turn.hit_ids for turn in t2.turns] == [[["1"]], [["2"]], []]
    assert [turn.observation for turn in t2.turns] == [
        '\n\n<information>Doc 1(Title: "Dune") Dune is by Frank Herbert.</information>\n\n',
        '\n\n<information>Doc 1(Title: "Frank Herbert") Frank Herbert was born in Tacoma.</information>\n\n',
        "",
    ]
    assert [turn.hit_ids for turn in t1.turns] == [[["2"]], []]


class _RopeDocument:
    def search(self, queries: list[str], topk: int) -> list[list[Hit]]:
        return [[Hit("1", "Rope (film)", "Rope is a 1948 film. It was directed by Alfred Hitchcock.", 1.0)]] * len(
            queries
        )


def test_a_grounded_oracle_drops_a_question_that_names_its_own_gold() -> None:
    from searchrl.sft.oracle import oracle_trajectories

    named = QAExample("n", "Was Rope directed by Alfred Hitchcock or by Orson Welles?", ["Alfred Hitchcock"])
    asked = QAExample("a", "Who directed the film Rope?", ["Alfred Hitchcock"])
    trajs = oracle_trajectories(
        get_protocol("search_r1"),
        [named, asked],
        _RopeDocument(),
        ByteTokenizer(),
        1,
        unchained="question",
        grounded=True,
    )
    assert [t.question_id for t in trajs] == ["a"]
    assert trajs[0].turns[-1].text == (
        "<think> The documents say: It was directed by Alfred Hitchcock. So the answer is Alfred Hitchcock. </think>\n"
        "<answer> Alfred Hitchcock </answer>"
    )


def test_a_choice_question_looked_up_by_option_closes_on_its_options_not_a_quoted_sentence() -> None:
    from searchrl.sft.oracle import oracle_texts

    choice = QAExample("c", "Which film came out earlier, Rope or Vertigo?", ["Rope"])
    texts = oracle_texts(get_protocol("search_r1"), choice, unchained="options", evidence="Rope is a 1948 film.")
    assert texts[-1] == (
        "<think> The question names two options, Rope and Vertigo. So the answer is Rope. </think>\n"
        "<answer> Rope </answer>",
        [],
    )


def test_the_runs_optimizer_steps_count_a_last_partial_batch(monkeypatch) -> None:
    from types import SimpleNamespace

    from searchrl.sft import trainer as trainer_module

    said: list[str] = []
    monkeypatch.setattr(trainer_module, "console", SimpleNamespace(log=said.append))
    cfg = load_config(None, ["sft.batch_size=4", "sft.epochs=2", "sft.warmup_steps=7"])
    SFTTrainer(cfg, tiny_model(), tokenizer(), letter_sft_examples(10), "unused")  # 3 batches an epoch, the last of 2
    assert any("sft.warmup_steps=7 is more than the run's 6 optimizer steps" in line for line in said)
    said.clear()
    cfg = load_config(None, ["sft.batch_size=4", "sft.epochs=2", "sft.warmup_steps=6"])
    SFTTrainer(cfg, tiny_model(), tokenizer(), letter_sft_examples(10), "unused")
    assert not any("warmup" in line for line in said)


def test_the_rag_oracle_prompt_holds_the_documents_retrieved_with_the_question() -> None:
    from searchrl.sft.oracle import oracle_trajectories

    asked: list[tuple[list[str], int]] = []

    class Recording(_RopeDocument):
        def search(self, queries: list[str], topk: int) -> list[list[Hit]]:
            asked.append((list(queries), topk))
            return super().search(queries, topk)

    tok = ByteTokenizer()
    ex = QAExample("a", "Who directed the film Rope?", ["Alfred Hitchcock"])
    (t,) = oracle_trajectories(get_protocol("rag"), [ex], Recording(), tok, topk=1)
    assert asked == [(["Who directed the film Rope?"], 1)]
    assert tok.decode(t.prompt_ids).endswith(
        'Documents:\nDoc 1(Title: "Rope (film)") Rope is a 1948 film. It was directed by Alfred Hitchcock.\n\n'
        "Question: Who directed the film Rope?\n"
    )
    assert (
        t.question == "Who directed the film Rope?" and t.response_text(tok) == "<answer> Alfred Hitchcock </answer>"
    )


def test_a_decomposition_refers_to_the_latest_answer_a_sub_question_names() -> None:
    from searchrl.sft.oracle import _plan_items

    chain = [
        {"sub_question": "Which city is the capital of France?", "answer": "Paris"},
        {"sub_question": "Which club is named after Paris?", "answer": "Paris Saint-Germain"},
        {"sub_question": "Who owns Paris Saint-Germain?", "answer": "QSI"},
    ]
    assert _plan_items(chain, comparison=False) == [
        "Which city is the capital of France?",
        "Which club is named after #1?",
        "Who owns #2?",  # not "Who owns #1 Saint-Germain?"
        "answer #3.",
    ]


@pytest.mark.parametrize("plan", ["decompose", False])
def test_a_multi_query_call_of_a_comparison_has_no_comma_inside_a_query(plan: str | bool) -> None:
    from searchrl.sft.oracle import oracle_texts

    chain = [
        {"sub_question": "When did Rope come out?", "answer": "1948", "query": "Rope, film year", "subject": "Rope"},
        {
            "sub_question": "When did Vertigo come out?",
            "answer": "1958",
            "query": "Vertigo, film",
            "subject": "Vertigo",
        },
    ]
    metadata = {"chain": chain, "kind": "comparison"}
    ex = QAExample("c", "Which film came out earlier, Rope or Vertigo?", ["Rope"], metadata=metadata)
    text, queries = oracle_texts(get_protocol("rag_r1", multi_query=True), ex, plan=plan)[0]
    assert queries == ["Rope  film year", "Vertigo  film"]  # commas separate a call's queries
    assert text.endswith("<search> Rope  film year, Vertigo  film </search>")
