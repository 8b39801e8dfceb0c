"""Text SFT data: a prompt and a whole response in a protocol's tags become the trajectory a rollout would record."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from searchrl.config import load_config
from searchrl.data.loaders import load_qa
from searchrl.data.synth import generate_world, write_world
from searchrl.generation.fake import ByteTokenizer
from searchrl.pipeline import load_tokenizer
from searchrl.protocols import PROTOCOLS, Protocol, TagProtocol, get_protocol
from searchrl.retrieval import build_index, load_index
from searchrl.rollout.engine import build_prompt_text
from searchrl.sft.oracle import oracle_trajectories
from searchrl.sft.text_data import is_text_row, observation_spans, text_trajectories, text_trajectory
from searchrl.stages.train import sft_examples

TAG_PROTOCOLS = sorted(n for n, p in PROTOCOLS.items() if p.searches and issubclass(p, TagProtocol))
SEARCH_R1 = (
    "<think>I need the film's director.</think>\n<search>The Face in the Fog director</search>\n\n"
    '<information>Doc 1(Title: "The Face in the Fog") a 1936 film directed by Robert F. Hill.</information>\n\n'
    "<think>It says Robert F. Hill.</think>\n<answer>Robert F. Hill</answer>"
)


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> tuple[Path, object]:
    d = tmp_path_factory.mktemp("world")
    write_world(generate_world(200, seed=5), d)
    return d, load_index(build_index(d / "corpus.jsonl", "bm25", d / "bm25"))


@pytest.mark.parametrize("name", TAG_PROTOCOLS)
def test_the_text_of_an_oracle_trajectory_gives_back_its_tokens_and_mask(world, name: str) -> None:
    """Written out as text and read back, each trajectory has the same prompt, response tokens, loss mask, queries
    and answer: the observations are found where the engine inserted them, in every tag protocol."""
    d, retriever = world
    protocol = get_protocol(name, **({"multi_query": True} if name == "rag_r1" else {}))
    tok = ByteTokenizer()
    examples = load_qa(d / "train.jsonl", limit=25)
    for ex, oracle in zip(examples, oracle_trajectories(protocol, examples, retriever, tok), strict=True):
        prefix = protocol.response_prefix  # a response as a teacher writes it opens with the pre-filled tag
        row = {"id": ex.id, "question": ex.question, "golden_answers": ex.answers}
        row["response"] = prefix + oracle.response_text(tok)
        t = text_trajectory(row, protocol, tok)
        assert t.prompt_ids == oracle.prompt_ids
        assert t.response_ids == oracle.response_ids, name
        assert t.action_mask == oracle.action_mask, (name, t.segments(tok))
        assert [turn.queries for turn in t.turns] == [turn.queries for turn in oracle.turns]
        assert [turn.observation for turn in t.turns] == [turn.observation for turn in oracle.turns]
        assert t.answer == oracle.answer and t.golds == ex.answers and t.question_id == ex.id
        assert t.metadata["format_problems"] == []


def test_a_result_block_not_after_a_search_call_is_the_models_own_text() -> None:
    protocol = get_protocol("search_r1")
    made_up = "<think>I recall:</think>\n<information>Made up.</information>\n<answer>x</answer>"
    assert observation_spans(protocol, made_up) == []
    t = text_trajectory({"question": "q?", "response": made_up}, protocol, ByteTokenizer())
    assert set(t.action_mask) == {1}
    spans = observation_spans(protocol, SEARCH_R1)
    (start, end, text) = spans[0]
    assert text == SEARCH_R1[start:end]
    assert len(spans) == 1 and SEARCH_R1[start:end].startswith("\n\n<information>Doc 1")
    assert SEARCH_R1[start:end].endswith("Robert F. Hill.</information>\n\n") and SEARCH_R1[end:].startswith("<think>")


def test_trl_and_chat_layouts_keep_their_own_prompt() -> None:
    protocol, tok = get_protocol("search_r1"), ByteTokenizer()
    given = {"prompt": "Answer with search. Question: who?\n", "completion": SEARCH_R1}
    t = text_trajectory(given, protocol, tok)
    assert tok.decode(t.prompt_ids) == given["prompt"]
    messages = [{"role": "user", "content": "who?"}, {"role": "assistant", "content": SEARCH_R1}]
    chat = text_trajectory({"messages": messages}, protocol, tok)
    assert chat.response_ids == t.response_ids and chat.action_mask == t.action_mask
    assert chat.question == "who?" and tok.decode(chat.prompt_ids).startswith("who?")
    plain = text_trajectory({"question": "who?", "response": SEARCH_R1}, protocol, tok)
    assert tok.decode(plain.prompt_ids) == build_prompt_text(protocol, tok, "who?")
    assert [turn.action for turn in plain.turns] == ["search", "answer"]
    assert plain.response_ids[-1] == tok.eos_token_id and plain.action_mask[-1] == 1


def test_a_pre_filled_reply_opening_moves_into_the_prompt() -> None:
    protocol, tok = get_protocol("r1_searcher"), ByteTokenizer()
    assert protocol.response_prefix == "<think>"
    t = text_trajectory(
        {"prompt": "Q: who?\n", "completion": "<think>Easy.</think>\n<answer>x</answer>"}, protocol, tok
    )
    assert tok.decode(t.prompt_ids) == "Q: who?\n<think>"
    assert t.response_text(tok).startswith("Easy.</think>") and t.answer == "x"


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ({"question": "q?", "response": ""}, "field 'response' must be a non-empty string"),
        ({"response": SEARCH_R1}, "missing field 'question'"),
        ({"messages": [{"role": "user", "content": "q?"}]}, "must end with the assistant's reply"),
        ({"prompt": "q", "completion": [{"role": "user", "content": "x"}]}, "must be the assistant's reply"),
        ({"messages": "q?"}, "must be a list of chat messages"),
        ({"question": "q?", "response": "<search>x</search>\n<information>never closed"}, "is never closed"),
    ],
)
def test_malformed_text_rows_fail_in_one_line_naming_the_row(row: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message) as err:
        text_trajectory(row, get_protocol("search_r1"), ByteTokenizer(), where="data.jsonl:3")
    assert str(err.value).startswith("data.jsonl:3") and "\n" not in str(err.value)


def test_data_in_another_protocols_tags_is_refused_and_a_few_bad_rows_are_kept() -> None:
    tok = ByteTokenizer()
    rows = [(f"f:{i}", {"question": "q?", "response": SEARCH_R1}) for i in range(3)]
    with pytest.raises(ValueError, match="set rollout.protocol to the one whose tags the data uses"):
        text_trajectories(rows, get_protocol("r1_searcher_pp"), tok)
    mixed = [*rows, ("f:9", {"question": "q?", "response": "no tags at all"})]
    trajs = text_trajectories(mixed, get_protocol("search_r1"), tok)
    assert len(trajs) == 4 and trajs[-1].metadata["format_problems"]

    class Untagged(Protocol):  # a protocol whose observations the text cannot show
        name, stop_strings = "untagged", ()
        parse = render_observation = invalid_feedback = check_format = instruction = None  # type: ignore[assignment]

    with pytest.raises(ValueError, match="needs a protocol with search and result tags"):
        text_trajectory(rows[0][1], Untagged(), tok)


def test_sft_data_names_a_text_file(tmp_path: Path) -> None:
    """``sft.data=FILE`` of text rows gives SFT examples whose loss skips the documents."""
    path = tmp_path / "teacher.jsonl"
    rows = [{"id": f"q{i}", "question": f"Who directed film {i}?", "response": SEARCH_R1} for i in range(3)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert all(is_text_row(r) for r in rows) and not is_text_row({"prompt_ids": [], "response": "x"})
    cfg = load_config("demo", [f"sft.data={path}", "sft.limit=2"])
    tok = ByteTokenizer()
    examples = sft_examples(cfg, get_protocol("search_r1"), tok)
    assert len(examples) == 2
    masked = tok.decode([i for i, m in zip(examples[0].response_ids, examples[0].loss_mask, strict=True) if not m])
    assert masked.strip().startswith("<information>") and masked.strip().endswith("</information>")


@pytest.fixture(scope="module", params=["smollm2", "qwen3"])
def real_tokenizer(request):
    """The bundled model's tokenizer, and Qwen3's (its chat template renders tools; ../shared/data)."""
    if request.param == "smollm2":
        return load_tokenizer("smollm2-135m-instruct")
    path = request.getfixturevalue("shared_data") / "tokenizers" / "qwen3"
    if not path.is_dir():
        pytest.skip(f"no Qwen3 tokenizer at {path}")
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(path)


@pytest.mark.parametrize("name", TAG_PROTOCOLS)
def test_real_tokenizers_give_back_the_oracles_tokens_from_the_text_it_decodes_to(world, real_tokenizer, name) -> None:
    """Byte-level BPE and chat templates: the text ``response_text`` decodes to (tool_call's reply frame without its
    special tokens) reads back to the same ids and mask."""
    d, retriever = world
    protocol, tok = get_protocol(name), real_tokenizer
    examples = load_qa(d / "train.jsonl", limit=8)
    for ex, oracle in zip(examples, oracle_trajectories(protocol, examples, retriever, tok), strict=True):
        row = {"question": ex.question, "response": protocol.response_prefix + oracle.response_text(tok)}
        t = text_trajectory(row, protocol, tok)
        assert (t.prompt_ids, t.response_ids) == (oracle.prompt_ids, oracle.response_ids), name
        assert t.action_mask == oracle.action_mask, name


def test_data_text_command_writes_trajectories_and_step_level_samples(tmp_path: Path, monkeypatch) -> None:
    import typer
    from typer.testing import CliRunner

    from searchrl.commands import data_build
    from searchrl.rollout.trajectory import Trajectory
    from searchrl.stages import data as data_stages

    app = typer.Typer()
    data_build.register(app)
    monkeypatch.setattr(data_stages, "load_tokenizer", lambda model: ByteTokenizer())
    src, out, steps = tmp_path / "teacher.jsonl", tmp_path / "trajs.jsonl", tmp_path / "steps.jsonl"
    src.write_text(
        "".join(json.dumps({"id": f"q{i}", "question": "who?", "response": SEARCH_R1}) + "\n" for i in range(3))
    )
    res = CliRunner().invoke(app, ["text", str(src), "--protocol", "search_r1", "--limit", "2", "--out", str(out)])
    assert res.exit_code == 0, res.output + repr(res.exception)
    trajs = [Trajectory.from_dict(json.loads(line)) for line in out.read_text().splitlines()]
    assert [t.question_id for t in trajs] == ["q0", "q1"] and trajs[0].n_searches == 1
    res = CliRunner().invoke(app, ["text", str(src), "--protocol", "search_r1", "--slice", "--out", str(steps)])
    assert res.exit_code == 0, res.output + repr(res.exception)
    kinds = [json.loads(line)["kind"] for line in steps.read_text().splitlines()]
    assert kinds == ["question_search", "documents_answer"] * 3
    res = CliRunner().invoke(app, ["text", str(src), "--protocol", "r_search", "--out", str(out)])
    assert isinstance(res.exception, ValueError) and "set rollout.protocol" in str(res.exception)
