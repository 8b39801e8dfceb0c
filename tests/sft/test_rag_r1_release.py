"""RAG-R1's released data read by SearchRL: the step-level SFT rows in the layouts of LLaMA-Factory (the SFT tool
the authors' README recommends: a ``.json`` array of alpaca ``{"instruction", "input", "output"}`` or sharegpt
``{"conversations"}`` rows) and the filtered RL questions (a ``.json`` array of ``{"question", "golden_answers":
str}``). The rows below are written here in those layouts, not copied from the release."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from searchrl.config import load_config
from searchrl.data.loaders import load_qa
from searchrl.generation.fake import ByteTokenizer
from searchrl.protocols import get_protocol
from searchrl.rollout.engine import build_prompt_text
from searchrl.sft.pipelines import slice_steps
from searchrl.sft.text_data import is_text_row, text_trajectory
from searchrl.stages.train import sft_examples

# The authors' multi-query instruction (hotpotqa_search_mq.py), as their SFT rows would carry it.
INSTRUCTION = (
    "Answer the given question. You must conduct reasoning inside <think> and </think> first every time you get new "
    "information. After reasoning, if you find you lack some knowledge, you can call a search engine by <search> "
    "query_1,query_2 </search> and it will return the top searched results for each query between <information> and "
    "</information>. You can search as many times as you want, using up to three queries each time. If you find no "
    "further external knowledge needed, you can directly provide the answer inside <answer> and </answer>, without "
    "detailed illustrations. For example, <answer> Beijing </answer>. Question: {question}\n"
)
QUESTION = "Which magazine was started first, Arthur's Magazine or First for Women?"
SEARCH = "<think> I need both founding years. </think>\n"
SEARCH += "<search> Arthur's Magazine founded, First for Women founded </search>"
INFORMATION = (
    "\n<information>\n"
    '{\n  "query": [\n    "Arthur\'s Magazine founded",\n    "First for Women founded"\n  ],\n'
    '  "documents": [\n    "Doc 1: Arthur\'s Magazine (1844-1846) was an American literary periodical.",\n'
    '    "Doc 1: First for Women is a woman\'s magazine started in 1989."\n  ]\n}\n</information>\n'
)
ANSWER = "<think> 1844 is before 1989. </think>\n<answer> Arthur's Magazine </answer>"
# Figure 1's categories 2 and 3 (a search from the question; an answer after documents) and 1 (an answer at once).
ALPACA = [
    {"instruction": INSTRUCTION.format(question=QUESTION), "input": "", "output": SEARCH},
    {"instruction": INSTRUCTION.format(question=QUESTION), "input": SEARCH + INFORMATION, "output": ANSWER},
    {
        "instruction": INSTRUCTION.format(question="Are Jane and First for Women both women's magazines?"),
        "input": "",
        "output": "<think> Both are magazines for women. </think>\n<answer> yes </answer>",
    },
]
# Qwen2.5-Instruct's chat template without tools, as LLaMA-Factory's ``qwen`` template writes it (the same default
# system prompt); the Qwen3 tokenizer in ../shared/data has no default system prompt.
QWEN25_TEMPLATE = (
    "{% if messages[0]['role'] == 'system' %}{{ '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}"
    "{% else %}{{ '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant."
    "<|im_end|>\\n' }}{% endif %}{% for m in messages %}{% if m['role'] != 'system' or not loop.first %}"
    "{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' }}{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
LLAMA_FACTORY_SYSTEM = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."


def _mq() -> object:
    return get_protocol("rag_r1", multi_query=True, max_queries=3)


def _llama_factory(tok, row: dict) -> tuple[list[int], list[int]]:
    """LLaMA-Factory's supervised encoding of one alpaca row under its ``qwen`` template (``converter.py``,
    ``template.py``, ``processor/supervised.py``): the user turn is instruction and input joined by a newline; each
    template element is tokenized on its own; the prompt is masked (-100); the target is the output, ``<|im_end|>``
    and a newline. Returns (input ids, labels)."""
    user = "\n".join(x for x in (row["instruction"], row["input"]) if x)
    source = [f"<|im_start|>system\n{LLAMA_FACTORY_SYSTEM}<|im_end|>\n", f"<|im_start|>user\n{user}<|im_end|>\n"]
    source[-1] += "<|im_start|>assistant\n"  # format_user's slot ends with the assistant's header
    src = [i for part in source for i in tok.encode(part, add_special_tokens=False)]
    tgt = tok.encode(row["output"] + "<|im_end|>\n", add_special_tokens=False)
    return src + tgt, [-100] * len(src) + tgt


def test_alpaca_and_sharegpt_rows_in_a_json_array_are_sft_data(tmp_path: Path) -> None:
    """A ``.json`` array of alpaca rows (the release's file type) is read by ``sft.data``; a sharegpt row gives the
    same example; KILT's ``{"input", "output"}`` questions stay QA rows."""
    path = tmp_path / "SFT_train_data_mq.json"
    path.write_text(json.dumps(ALPACA, indent=4))
    cfg = load_config("rag_r1", [f"sft.data={path}", "model.prompt_style=raw"])
    tok = ByteTokenizer()
    examples = sft_examples(cfg, _mq(), tok)
    assert len(examples) == 3
    for ex, row in zip(examples, ALPACA, strict=True):
        assert tok.decode(ex.prompt_ids) == "\n".join(x for x in (row["instruction"], row["input"]) if x)
        assert ex.response_ids[-1] == tok.eos_token_id and set(ex.loss_mask) == {1}  # no documents in a target
        assert tok.decode(ex.response_ids[:-1]) == row["output"]
    turns = [{"from": "human", "value": ALPACA[1]["instruction"] + "\n" + ALPACA[1]["input"]}]
    sharegpt = {"conversations": [*turns, {"from": "gpt", "value": ALPACA[1]["output"]}]}
    t = text_trajectory(sharegpt, _mq(), tok, style="raw")
    assert (t.prompt_ids, t.response_ids) == (examples[1].prompt_ids, examples[1].response_ids)
    assert is_text_row(ALPACA[0]) and is_text_row(sharegpt)
    with_history = {**ALPACA[1], "history": [["earlier question", "earlier reply"]]}
    h = text_trajectory(with_history, _mq(), tok, style="raw")  # an earlier reply is prompt, never trained on
    assert (
        tok.decode(h.prompt_ids).startswith("earlier question\n\nearlier reply\n\n")
        and h.response_ids == t.response_ids
    )
    tool_turn = {"conversations": [*turns, {"from": "observation", "value": "docs"}, sharegpt["conversations"][-1]]}
    with pytest.raises(ValueError, match="sharegpt turn from 'observation' is not read"):
        text_trajectory(tool_turn, _mq(), tok, style="raw", where="steps.json:row 4")
    assert not is_text_row({"id": "kilt-1", "input": "who wrote hamlet?", "output": [{"answer": "Shakespeare"}]})


def test_inspect_and_data_text_read_a_json_array(tmp_path: Path, monkeypatch) -> None:
    from typer.testing import CliRunner

    from searchrl.commands import app
    from searchrl.stages import data as data_stages

    path = tmp_path / "SFT_train_data_mq.json"
    path.write_text(json.dumps(ALPACA, indent=4))
    res = CliRunner().invoke(app, ["data", "inspect", str(path)])
    assert res.exit_code == 0, res.output + repr(res.exception)
    assert "text: alpaca 3" in res.output
    monkeypatch.setattr(data_stages, "load_tokenizer", lambda model: ByteTokenizer())
    out = tmp_path / "trajs.jsonl"
    res = CliRunner().invoke(
        app, ["data", "text", str(path), "--recipe", "rag_r1", "--prompt-style", "raw", "--out", str(out)]
    )
    assert res.exit_code == 0, res.output + repr(res.exception)
    assert len(out.read_text().splitlines()) == 3


def test_tokens_and_loss_mask_are_llama_factorys(shared_data: Path) -> None:
    """With a Qwen2.5-Instruct tokenizer, an alpaca row trains on exactly LLaMA-Factory's target tokens, after
    exactly its prompt tokens, except the newline LLaMA-Factory's ``qwen`` template puts after ``<|im_end|>``
    (a token no generation reaches: decoding stops at ``<|im_end|>``)."""
    from transformers import AutoTokenizer

    path = shared_data / "tokenizers" / "qwen3"
    if not path.is_dir():
        pytest.skip(f"no Qwen tokenizer at {path}")
    tok = AutoTokenizer.from_pretrained(path)
    tok.chat_template = QWEN25_TEMPLATE
    assert tok.eos_token == "<|im_end|>"  # as Qwen2.5-Instruct's, and LLaMA-Factory's replace_eos
    for row in ALPACA:
        t = text_trajectory(row, _mq(), tok)
        ids, labels = _llama_factory(tok, row)
        prompt = [i for i, label in zip(ids, labels, strict=True) if label == -100]
        trained = [label for label in labels if label != -100]
        assert t.prompt_ids == prompt
        assert [i for i, m in zip(t.response_ids, t.action_mask, strict=True) if m] == trained[:-1]
        assert t.response_ids == ids[len(prompt) : -1] and tok.decode(trained[-1:]) == "\n"


def test_the_released_rl_questions_load_with_their_one_gold_string(tmp_path: Path) -> None:
    """``data.train`` reads the release's ``.json`` array; ``golden_answers`` is one string, kept whole (commas
    included); the question is kept as written: the authors' preprocessing adds a '?' to a question without one
    (about 3% of their rows), SearchRL does not."""
    rows = [
        {"question": "Who was born first, Pablo Trapero or Aleksander Ford?", "golden_answers": "Aleksander Ford"},
        {
            "question": "In which city is the museum in Springfield, Massachusetts ",
            "golden_answers": "Washington, D.C.",
        },
    ]
    path = tmp_path / "train_data.json"
    path.write_text(json.dumps(rows, indent=4))
    examples = load_qa(path)
    assert [ex.answers for ex in examples] == [["Aleksander Ford"], ["Washington, D.C."]]
    assert examples[1].question == rows[1]["question"].strip()
    prompt = build_prompt_text(_mq(), ByteTokenizer(), examples[0].question, "raw")
    for rule in ("<think>", "<search> query_1,query_2 </search>", "<information>", "up to three queries", "<answer>"):
        assert rule in prompt
    assert prompt.endswith(f"Question: {rows[0]['question']}\n")


def test_sliced_steps_have_figure_1s_kinds_and_contexts() -> None:
    """A whole teacher trajectory in RAG-R1's multi-query tags, cut by ``--slice``: one sample per step, of Figure
    1's kinds; documents are only ever context; a later step's context is the prompt and every earlier step with
    its documents, in the model's own turn (as the rollout shows them), where an alpaca row puts them in the user
    turn."""
    tok, protocol = ByteTokenizer(), _mq()
    second = "<think> I need the second founding year. </think>\n<search> First for Women founded </search>"
    info = (
        '\n<information>\n{\n  "query": [\n    "First for Women founded"\n  ],\n  "documents": [\n    "Doc 1: 1989."\n'
    )
    info += "  ]\n}\n</information>\n"
    row = {"question": QUESTION, "response": SEARCH + INFORMATION + second + info + ANSWER}
    t = text_trajectory(row, protocol, tok, style="raw")
    samples = slice_steps(t)
    assert [s.kind for s in samples] == ["question_search", "documents_search", "documents_answer"]
    targets = [SEARCH, second, ANSWER]
    prompt, contexts = tok.decode(t.prompt_ids), ["", SEARCH + INFORMATION, SEARCH + INFORMATION + second + info]
    for s, target, before in zip(samples, targets, contexts, strict=True):
        assert set(s.loss_mask) == {1} and "<information>" not in tok.decode(s.response_ids)
        assert tok.decode(s.response_ids).removesuffix(tok.decode([tok.eos_token_id])) == target
        assert tok.decode(s.prompt_ids) == prompt + before


def test_rows_that_end_at_a_search_call_are_step_samples_not_another_protocols_data(capsys) -> None:
    """Step-level search samples (Figure 1's categories 2 and 4) end at ``</search>`` with no answer: a file of them
    alone is in the protocol's tags, so it is read, and the warning says why they hold no answer."""
    from searchrl.sft.text_data import text_trajectories

    rows = [(f"steps.json:row {i}", {**ALPACA[0], "input": "x" * i}) for i in range(1, 3)]
    trajs = text_trajectories(rows, _mq(), ByteTokenizer(), "raw", "steps.json")
    assert [t.turns[-1].action for t in trajs] == ["search", "search"]
    logged = " ".join(capsys.readouterr().err.split())
    assert "2 of them end at a search call, as step-level search samples do" in logged
    with pytest.raises(ValueError, match="set rollout.protocol"):
        text_trajectories(rows, get_protocol("r1_searcher"), ByteTokenizer(), "raw", "steps.json")
