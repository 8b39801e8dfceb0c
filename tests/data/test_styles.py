"""Question styles: synthetic templates, generic templates of any question's text, and the train-split filters."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from searchrl.config import ConfigError, load_config
from searchrl.data.records import QAExample
from searchrl.data.styles import (
    question_kind,
    question_style,
    question_template,
    rarest_styles,
    select_styles,
    style_counts,
)
from searchrl.pipeline import load_split


def _real(i: int, question: str) -> QAExample:
    return QAExample(f"r{i}", question, ["x"])


def _synth(i: int, kind: str, template: str | None = None) -> QAExample:
    meta = {"kind": kind, **({"template": template} if template else {})}
    return QAExample(f"s{i}", f"Where was the director of Vell Ordo {i} born?", ["x"], meta)


def test_synthetic_question_style_is_its_template_else_its_kind() -> None:
    assert question_style(_synth(0, "bridge", "bridge:creator.born_in")) == "bridge:creator.born_in"
    assert question_style(_synth(1, "comparison")) == "comparison"
    assert question_kind(_synth(0, "bridge", "bridge:creator.born_in")) == "bridge"
    assert question_kind(_real(0, "Who is the father of Anna Berg?")) is None
    # a real dataset's own question type is not a synthetic kind: its style is the generic template
    typed = QAExample("t", "Who is the father of Anna Berg?", ["x"], {"type": "compositional"})
    assert question_style(typed) == "who is the father of <e>?"


@pytest.mark.parametrize(
    ("question", "template"),
    [
        ("What nationality is the director of film 3000 Nights?", "what nationality is the director of film <e>?"),
        ("What nationality is the director of film Le Mans?", "what nationality is the director of film <e>?"),
        ("Who is Sancha Of Castile, Queen Of Navarre's paternal grandfather?", "who is <e>'s paternal grandfather?"),
        ("Which film came out first, Drive, He Said or Ocean Of Pearls?", "which film came out first, <e> or <e>?"),
        ("Where was the director of film Ace High (1968 Film) born?", "where was the director of film <e> born?"),
        (
            "Who was born first out of A. K. M. Nurul Islam and Lajos Kelemen?",
            "who was born first out of <e> and <e>?",
        ),
        ('Who wrote the song "let it be" in 1970?', "who wrote the song <e> in <e>?"),
        ("Is Oslo in Norway?", "is <e> in <e>?"),
        ("Who founded the Bank of England?", "who founded the <e>?"),
        ("Which album came out earlier, Oklahoma! or ¡Three Amigos!?", "which album came out earlier, <e> or <e>?"),
        ("Where did Cezaria Jędrzejewiczowa's   father die?", "where did <e>'s father die?"),
        ("who sings does he love me with reba", "who sings does he love me with reba"),
        ("Where was it filmed. Who directed Blue Lake?", "where was it filmed. who directed <e>?"),
    ],
)
def test_generic_template_of_a_question(question: str, template: str) -> None:
    assert question_template(question) == template


def test_sentence_start_is_never_an_entity_but_a_name_after_it_is() -> None:
    assert question_template("Are North Marion High School and Oslo in the same country?") == (
        "are <e> and <e> in the same country?"
    )


EXAMPLES = [
    _real(0, "Who is the father of Anna Berg?"),
    _real(1, "Who is the father of Tom Hale?"),
    _real(2, "Who is the father of Oslo Vell?"),
    _real(3, "Where was the director of film Blue Lake born?"),
    _real(4, "Where was the director of film Red Sea born?"),
    _real(5, "Who is older, Anna Berg or Tom Hale?"),
]


def test_style_counts_and_rarest_styles_are_deterministic() -> None:
    counts = style_counts(EXAMPLES)
    assert counts == {
        "who is the father of <e>?": 3,
        "where was the director of film <e> born?": 2,
        "who is older, <e> or <e>?": 1,
    }
    assert rarest_styles(EXAMPLES) == ["who is older, <e> or <e>?"]
    assert rarest_styles(list(reversed(EXAMPLES)), 2 / 3) == [
        "who is older, <e> or <e>?",
        "where was the director of film <e> born?",
    ]
    with pytest.raises(ValueError, match="at least two styles"):
        rarest_styles(EXAMPLES[:3])


def test_select_styles_keeps_drops_and_names_the_styles_on_a_typo() -> None:
    father, director = "who is the father of <e>?", "where was the director of film <e> born?"
    assert [e.id for e in select_styles(EXAMPLES, keep=[father])] == ["r0", "r1", "r2"]
    assert [e.id for e in select_styles(EXAMPLES, drop=[father, director])] == ["r5"]
    assert select_styles(EXAMPLES) == EXAMPLES
    with pytest.raises(ValueError) as err:
        select_styles(EXAMPLES, drop=["who is the mother of <e>?"], where="the train split (q.jsonl)")
    msg = str(err.value)
    assert "\n" not in msg and "'who is the mother of <e>?'" in msg and "the train split (q.jsonl)" in msg
    assert f"{father!r} (3)" in msg and f"{director!r} (2)" in msg and "--styles" in msg


def test_a_synthetic_kind_names_all_of_its_templates() -> None:
    world = [_synth(0, "bridge", "bridge:a"), _synth(1, "bridge", "bridge:b"), _synth(2, "three_hop", "three_hop:c")]
    assert [e.id for e in select_styles(world, drop=["bridge"])] == ["s2"]
    assert [e.id for e in select_styles(world, keep=["bridge"], drop=["bridge:b"])] == ["s0"]
    with pytest.raises(ValueError, match="kinds: bridge, three_hop"):
        select_styles(world, drop=["single_hop"])


def _write(path: Path, rows: list[QAExample]) -> None:
    path.write_text("".join(json.dumps(e.to_flashrag()) + "\n" for e in rows))


def test_train_split_filters_apply_to_train_only(tmp_path: Path) -> None:
    _write(tmp_path / "train.jsonl", EXAMPLES)
    _write(tmp_path / "dev.jsonl", EXAMPLES)
    father = "who is the father of <e>?"
    cfg = load_config(None, [f"data.source={tmp_path}", f"data.held_out_styles={json.dumps([father])}"])
    assert [e.id for e in load_split(cfg, "train")] == ["r3", "r4", "r5"]
    assert len(load_split(cfg, "dev")) == len(EXAMPLES)  # evaluation sees every style
    cfg = load_config(None, [f"data.source={tmp_path}", f"data.styles={json.dumps([father])}"])
    assert [e.id for e in load_split(cfg, "train", limit=2)] == ["r0", "r1"]
    cfg = load_config(None, [f"data.source={tmp_path}", 'data.held_out_styles=["who is he?"]'])
    with pytest.raises(ValueError, match=r"no question of the train split \(train.jsonl\) has the style"):
        load_split(cfg, "train")


def test_train_split_filters_combine_with_kinds(tmp_path: Path) -> None:
    world = [_synth(0, "bridge", "bridge:a"), _synth(1, "bridge", "bridge:b"), _synth(2, "three_hop", "three_hop:c")]
    _write(tmp_path / "train.jsonl", [*world, _synth(3, "single_hop", "single:x")])
    over = [f"data.source={tmp_path}", 'data.kinds=["bridge","three_hop"]', 'data.held_out_styles=["three_hop"]']
    assert [e.id for e in load_split(load_config(None, over), "train")] == ["s0", "s1"]


def test_a_style_cannot_be_both_kept_and_held_out() -> None:
    with pytest.raises(ConfigError, match="data.styles and data.held_out_styles both name"):
        load_config(None, ['data.styles=["bridge"]', 'data.held_out_styles=["bridge","comparison"]'])
