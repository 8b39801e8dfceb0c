from __future__ import annotations

from searchrl.eval.diagnostics import diagnose, failure_shares, query_entities, shares_table


def _turn(action: str, queries: list[str] | None = None, observation: str = "") -> dict:
    return {"action": action, "queries": queries or [], "observation": observation, "text": ""}


def _agent_row(prediction, turns, golds=("Paris",), well_formed=True, question="Where was Ada Vell born?") -> dict:
    return {
        "dataset": "d",
        "method": "agent",
        "question": question,
        "golds": list(golds),
        "prediction": prediction,
        "well_formed": well_formed,
        "searches": sum(t["action"] == "search" for t in turns),
        "trajectory": {"turns": turns},
    }


def test_query_entities() -> None:
    assert query_entities("Who wrote The Silent Tide in 1990") == ["The Silent Tide", "1990"]
    assert query_entities("Ada Vell birthplace") == ["Ada Vell"]
    assert query_entities("birthplace of the author") == []


def test_reading_failure_when_the_gold_was_retrieved() -> None:
    row = _agent_row("Lyon", [_turn("search", ["Ada Vell"], "Ada Vell was born in Paris."), _turn("answer")])
    d = diagnose(row)
    assert d["gold_in_docs"] and d["reading_failure"]
    assert not d["retrieval_failure"] and not d["hallucinated_hop"] and not d["no_search"]


def test_correct_answer_is_no_failure() -> None:
    row = _agent_row("Paris", [_turn("search", ["Ada Vell"], "Ada Vell was born in Paris."), _turn("answer")])
    d = diagnose(row)
    assert d["gold_in_docs"] and not d["reading_failure"] and not d["retrieval_failure"]


def test_gold_in_chinese_documents_is_found_without_spaces() -> None:
    doc = "《红楼梦》是清代作家曹雪芹创作的长篇小说。"
    turns = [_turn("search", ["红楼梦 作者"], doc), _turn("answer")]
    d = diagnose(_agent_row("不知道", turns, golds=["曹雪芹"], question="《红楼梦》的作者是谁？"))
    assert d["gold_in_docs"] and d["reading_failure"] and not d["retrieval_failure"]


def test_retrieval_failure_and_made_up_hop() -> None:
    turns = [
        _turn("search", ["Ada Vell"], "Ada Vell is a painter."),
        _turn("search", ["The Silent Tide author"], "Nothing relevant."),  # a novel nobody mentioned
        _turn("answer"),
    ]
    d = diagnose(_agent_row("Rome", turns))
    assert d["gold_in_docs"] is False and d["retrieval_failure"] and d["hallucinated_hop"]


def test_an_entity_from_an_earlier_document_is_not_made_up() -> None:
    turns = [
        _turn("search", ["Ada Vell"], "Ada Vell wrote The Silent Tide."),
        _turn("search", ["The Silent Tide publisher"], "Published by Orm House in Paris."),
        _turn("answer"),
    ]
    assert not diagnose(_agent_row("Paris", turns))["hallucinated_hop"]


def test_no_search_and_format_failure() -> None:
    d = diagnose(_agent_row(None, [_turn("none")], well_formed=False))
    assert d["no_search"] and d["format_failure"] and d["gold_in_docs"] is None and not d["searched"]


def test_rag_trace_with_documents() -> None:
    row = {
        "dataset": "d",
        "method": "naive_rag",
        "question": "Where was Ada Vell born?",
        "golds": ["Paris"],
        "prediction": "She was born in Paris, France.",
        "searches": 1,
        "trajectory": {"queries": ["Where was Ada Vell born?"], "docs": ["Ada Vell (born in Paris) ..."]},
    }
    d = diagnose(row)
    assert d["gold_in_docs"] and d["reading_failure"] and not d["no_search"]


def test_failure_shares_and_table() -> None:
    rows = [
        _agent_row("Lyon", [_turn("search", ["Ada Vell"], "born in Paris"), _turn("answer")]),
        _agent_row("Paris", [_turn("search", ["Ada Vell"], "born in Paris"), _turn("answer")]),
        _agent_row(None, [_turn("none")], well_formed=False),
    ]
    shares = failure_shares(rows)[("d", "agent")]
    assert shares["gold_in_docs"] == 1.0  # over the two rows that retrieved text
    assert shares["reading_failure"] == 1 / 3
    assert shares["no_search"] == 1 / 3 and shares["format_failure"] == 1 / 3
    lines = shares_table({("d", "agent"): shares}, ["d"])
    assert lines[2].startswith("| d | agent | 100% | 33% |")


def test_the_viewer_summary_shows_the_failure_shares() -> None:
    from searchrl.viz.records import parse_row, summarize
    from searchrl.viz.viewer import render_html

    rows = [
        _agent_row("Lyon", [_turn("search", ["Ada Vell"], "born in Paris"), _turn("answer")]),
        _agent_row("Paris", [_turn("search", ["Ada Vell"], "born in Paris"), _turn("answer")]),
    ]
    records = []
    for i, row in enumerate(rows):
        row.update(source="eval/d/agent", score=None, metrics={}, diagnostics=diagnose(row))
        records.append(parse_row(row, f"f:{i}"))
    shares = summarize(records)["diagnostics"]
    assert shares["gold_in_docs"] == 1.0 and shares["reading_failure"] == 0.5 and "no_search" in shares
    assert 'data-stat="diag-reading_failure"' in render_html(records)


def test_choice_options_are_read_from_a_or_b_questions() -> None:
    from searchrl.eval.diagnostics import choice_options

    assert choice_options("Which film came out first, The Tide or Blue Lake?") == ["The Tide", "Blue Lake"]
    # an option may hold a comma after the first one
    assert choice_options("Who died first, Ada Vell or George Orm, 2nd Earl of Lake?") == [
        "Ada Vell",
        "George Orm, 2nd Earl of Lake",
    ]
    assert choice_options("Where was Ada Vell born?") == []
    assert choice_options("Who wrote Either Or?") == []  # no comma before the options


def test_a_reply_naming_both_options_is_hedged_and_its_cover_em_not_counted() -> None:
    from searchrl.eval.diagnostics import add_diagnostics

    question = "Which film came out first, The Tide or The Tide Returns?"
    both = _agent_row("The Tide Returns, then The Tide", [_turn("answer")], golds=["The Tide"], question=question)
    one = _agent_row("The Tide Returns", [_turn("answer")], golds=["The Tide"], question=question)
    right = _agent_row("The Tide", [_turn("answer")], golds=["The Tide"], question=question)
    plain = _agent_row("Paris, not Rome", [_turn("answer")])  # not a choice question: never hedged
    for row, cover in ((both, 1.0), (one, 0.0), (right, 1.0), (plain, 1.0)):
        row["metrics"] = {"cover_em": cover}
        add_diagnostics(row)
    assert both["diagnostics"]["hedged"] and both["metrics"]["cover_em_committed"] == 0.0
    # naming the longer option does not also name the shorter one inside it
    assert one["diagnostics"]["hedged"] is False and one["metrics"]["cover_em_committed"] == 0.0
    assert right["diagnostics"]["hedged"] is False and right["metrics"]["cover_em_committed"] == 1.0
    assert plain["diagnostics"]["hedged"] is None and plain["metrics"]["cover_em_committed"] == 1.0
    shares = failure_shares([both, one, right, plain])[("d", "agent")]
    assert shares["hedged"] == 1 / 3  # over the three choice questions


def test_the_summary_scores_committed_cover_em(tmp_path) -> None:
    from searchrl.data.records import QAExample
    from searchrl.eval.harness import evaluate
    from searchrl.eval.method import Prediction

    class Restate:  # a method that restates the question
        name = "restate"

        def answer(self, batch):
            return [Prediction(text=ex.question) for ex in batch]

    data = {
        "toy": [
            QAExample("1", "Who was born first, Ada Vell or Tom Hale?", ["Tom Hale"]),
            QAExample("2", "Where was Ada Vell born, in Paris?", ["Paris"]),
        ]
    }
    result = evaluate(data, {"restate": Restate()}, tmp_path, metrics=["em", "cover_em"], show=False)
    (row,) = result.rows
    assert row["cover_em"] == 1.0 and row["cover_em_committed"] == 0.5
    assert "cover-EM (committed)" in (tmp_path / "summary.md").read_text()
