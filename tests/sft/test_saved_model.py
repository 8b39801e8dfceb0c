"""The model directory a run leaves (``final``, ``models/step_<k>``, a checkpoint's ``model``) is usable outside
SearchRL: plain transformers loads it, every file reads as the others do, and a LoRA run's merged copy is the same
files a full fine-tune writes."""

from __future__ import annotations

import stat
from pathlib import Path

import torch
from safetensors import safe_open

from searchrl.config import load_config
from searchrl.rl.checkpoint import save_checkpoint
from searchrl.testing import tiny_model, tokenizer
from searchrl.tuning import save_merged, wrap_lora


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_saved_weights_can_be_read_by_whoever_reads_the_other_files(tmp_path: Path) -> None:
    """safetensors writes its file 0600 whatever the umask: another user (a vLLM server, a container) would see the
    config but fail on the weights."""
    save_merged(tiny_model(), tokenizer(), tmp_path / "final")
    save_checkpoint(tmp_path / "checkpoint", tiny_model(), tokenizer(), {})
    for model_dir in (tmp_path / "final", tmp_path / "checkpoint" / "model"):
        assert _mode(model_dir / "model.safetensors") == _mode(model_dir / "config.json"), model_dir
    assert not list(tmp_path.rglob(".umask-probe"))


def test_a_lora_run_saves_the_merged_model_as_a_full_fine_tune_does(tmp_path: Path) -> None:
    """The merged copy shares no memory between a tied output head and the embeddings; the head must not be
    written a second time, and the directory loads without peft and computes what the adapted model does."""
    from transformers import AutoModelForCausalLM

    cfg = load_config(None, ["model.lora.r=4"])
    model = wrap_lora(tiny_model(), cfg.model.lora)
    torch.manual_seed(0)
    for n, p in model.named_parameters():
        if "lora_B" in n:
            torch.nn.init.normal_(p, std=0.02)  # trained adapters: B is no longer zero
    save_merged(model, tokenizer(), tmp_path / "lora")
    save_merged(tiny_model(), tokenizer(), tmp_path / "full")
    keys = {}
    for name in ("lora", "full"):
        with safe_open(tmp_path / name / "model.safetensors", "pt") as f:
            keys[name] = set(f.keys())
    assert keys["lora"] == keys["full"] and "lm_head.weight" not in keys["lora"]
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path / "lora")
    ids = torch.tensor([[5, 17, 42, 99]])
    model.eval()  # no adapter dropout
    with torch.no_grad():
        torch.testing.assert_close(loaded(ids).logits, model(input_ids=ids).logits)


def _sft(tmp_path: Path, tok, overrides: list[str], model=None):
    from searchrl.sft.trainer import SFTTrainer
    from searchrl.testing import letter_sft_examples

    cfg = load_config("demo", ["sft.epochs=1", "sft.batch_size=4", "sft.warmup_steps=0", *overrides])
    trainer = SFTTrainer(cfg, model or tiny_model(), tok, letter_sft_examples(4), tmp_path)
    trainer.train()
    return trainer


def test_a_base_models_saved_generation_config_stops_where_its_trained_replies_end(tmp_path: Path) -> None:
    """SFT targets end with the chat template's end of a reply (``<|im_end|>``); a base model's generation config
    may name another EOS (Qwen2.5's: ``<|endoftext|>`` alone), so plain ``generate`` and vLLM would run past the
    reply. The saved generation config names both."""
    from transformers import GenerationConfig

    from searchrl.pipeline import load_tokenizer

    tok = load_tokenizer("smollm2-135m-instruct")
    tok.eos_token = "<|endoftext|>"  # as a base model names its EOS
    model = tiny_model()
    model.config.eos_token_id = model.generation_config.eos_token_id = tok.eos_token_id
    _sft(tmp_path, tok, [], model)
    eos = GenerationConfig.from_pretrained(tmp_path / "final").eos_token_id
    assert eos == [tok.eos_token_id, tok.convert_tokens_to_ids("<|im_end|>")]  # the model's own EOS kept first


def test_a_published_generation_config_transformers_only_warns_about_still_saves(tmp_path: Path) -> None:
    """A base model may publish ``temperature`` / ``top_p`` with ``do_sample: false``: transformers loads and saves
    it back with a warning, but refuses to save it once modified. Adding the reply's end to its EOS ids must not
    make every checkpoint save fail; the rest of the file stays as published."""
    import json

    from searchrl.rollout.agent_file import stop_at_reply_end

    published = {"do_sample": False, "temperature": 0.6, "top_p": 0.9, "eos_token_id": 2, "bos_token_id": 1}
    (tmp_path / "generation_config.json").write_text(json.dumps(published), encoding="utf-8")
    stop_at_reply_end(tmp_path, [5])
    saved = json.loads((tmp_path / "generation_config.json").read_text(encoding="utf-8"))
    assert saved == {**published, "eos_token_id": [2, 5]}
    stop_at_reply_end(tmp_path, [5, 2])  # already there: unchanged
    assert json.loads((tmp_path / "generation_config.json").read_text(encoding="utf-8"))["eos_token_id"] == [2, 5]


def test_a_saved_model_records_how_it_was_trained_to_run(tmp_path: Path) -> None:
    """``searchrl.json`` beside the weights: the protocol, its options, the prompt style, documents per search and
    the rollout limits, with the protocol's stop strings and a prompt as the rollout renders it."""
    import json

    from searchrl.generation.prompts import render_prompt
    from searchrl.pipeline import load_tokenizer
    from searchrl.protocols import get_protocol

    tok = load_tokenizer("smollm2-135m-instruct")
    overrides = ["rollout.protocol=r1_searcher", "rollout.max_turns=7", "retrieval.topk=5", "model.prompt_style=chat"]
    trainer = _sft(tmp_path, tok, overrides)
    trainer._save_checkpoint(1, 1, 0, None)  # what SIGTERM or sft.save_every leave: its model records the same
    checkpoint = json.loads((tmp_path / "checkpoint" / "model" / "searchrl.json").read_text())
    record = json.loads((tmp_path / "final" / "searchrl.json").read_text())
    assert checkpoint == record
    settings = record["settings"]
    assert settings["rollout.protocol"] == "r1_searcher" and settings["rollout.max_turns"] == 7
    assert settings["retrieval.topk"] == 5 and settings["model.prompt_style"] == "chat"
    assert settings["rollout.force_answer"] == "hint" and settings["rollout.options"] == {}
    protocol = get_protocol("r1_searcher")
    assert record["stop_strings"] == list(protocol.stop_strings) and record["recipe"] == "demo"
    example = record["example"]
    want = render_prompt(tok, protocol.chat_messages(example["question"]), "chat", prefill=protocol.prefill)
    assert example["prompt"] == want and example["prompt"].endswith("<|im_start|>assistant\n" + protocol.prefill)
    assert "Port Rowan" in example["observation"]


def test_an_rl_runs_final_model_snapshots_and_checkpoint_record_it_too(tmp_path: Path) -> None:
    """``final``, ``models/step_<k>`` and the checkpoint's ``model`` (what a run stopped early leaves) each hold the
    run's ``searchrl.json``, so any of them runs as it was trained."""
    import json

    from searchrl.data.records import QAExample
    from searchrl.testing import letters_trainer

    cfg = load_config(
        None,
        [
            "training.steps=1",
            "training.prompts_per_step=2",
            "training.keep_models_every=1",
            f"training.output_dir={tmp_path}",
            "training.tensorboard=false",
            "rollout.group_size=2",
            "rollout.max_new_tokens=4",
            "rollout.max_turns=1",
            "rollout.max_searches=1",
            "retrieval.topk=4",
            "algorithm.mini_batch_size=4",
        ],
    )
    letters_trainer(cfg, [QAExample(f"q{i}", f"write letters {i}", ["x"]) for i in range(2)]).train()
    for model_dir in ("final", "models/step_1", "checkpoint/model"):
        settings = json.loads((tmp_path / model_dir / "searchrl.json").read_text())["settings"]
        assert settings["retrieval.topk"] == 4 and settings["rollout.max_searches"] == 1, model_dir
