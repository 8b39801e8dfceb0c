"""Query encoding without the framework: the index's encoder exported once to ONNX and run by ONNX Runtime.

Why: a short query through MiniLM is about 1 GFLOP, a few milliseconds of matrix products, but the
sentence-transformers path spends most of its time around them (Python module dispatch, tokenizer wrappers,
tensor conversions), and importing it takes seconds. Serving a query needs only a tokenizer (``tokenizers``), one
ONNX graph (``onnxruntime``) and numpy: no torch, no transformers, no sentence-transformers.

The artifact is built at index-build time (``export_encoder``) and stored with the index, ``dense/query_encoder/``::

    model.onnx       transformer + pooling (+ the model's own Normalize module), inputs input_ids/attention_mask
    tokenizer.json   the model's fast tokenizer, with the model's truncation length (no padding: each batch is padded
                     to its longest text at encode time, texts grouped by length)
    encoder.json     what was exported: source, pooling, max_length, lower-casing, dimension, torch/opset versions

Only sentence-transformers models made of Transformer -> Pooling (cls / mean / max) [-> Normalize] are exported,
which covers MiniLM, MPNet, E5, BGE and GTE; anything else keeps the sentence-transformers path
(``ExportUnsupported``). The sentence-transformers ``Encoder`` stays the reference: tests hold the ONNX path to a
cosine similarity of at least 0.999 with it on real passages, and to the same recall.
"""

from __future__ import annotations

import json
import os
import threading
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from searchrl.models import resolve_embedder
from searchrl.utils import MissingDependency

ARTIFACT_FORMAT = "searchrl-onnx-encoder"
ARTIFACT_VERSION = 1
OPSET = 17
POOLINGS = ("cls", "mean", "max")


class ExportUnsupported(ValueError):
    """The encoder is not a plain Transformer -> Pooling [-> Normalize] model; it keeps sentence-transformers."""


# --------------------------------------------------------------------------------------------------- export
def _model_dir(spec: str) -> Path:
    where = Path(resolve_embedder(spec))
    if where.is_dir():
        return where
    try:  # an HF hub id: use the hub's local cache (no download is attempted where there is no network)
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(str(where)))
    except Exception as err:  # noqa: BLE001 - any failure means "cannot export", the caller falls back
        raise ExportUnsupported(f"cannot find local files for encoder '{spec}': {err}") from None


def read_st_layout(model_dir: Path) -> dict[str, Any]:
    """Pooling, normalisation and tokenizer settings from a sentence-transformers model folder's own config files."""
    modules_file = model_dir / "modules.json"
    if not modules_file.is_file():  # a bare transformers model: sentence-transformers would mean-pool it
        return {"pooling": "mean", "normalize": False, "max_length": None, "do_lower_case": False}
    modules = json.loads(modules_file.read_text(encoding="utf-8"))
    kinds = [m["type"].rsplit(".", 1)[-1] for m in modules]
    if kinds not in (["Transformer", "Pooling"], ["Transformer", "Pooling", "Normalize"]):
        raise ExportUnsupported(f"modules {kinds} (only Transformer -> Pooling [-> Normalize] is exported)")
    if modules[0].get("path", "") not in ("", "."):
        raise ExportUnsupported("the Transformer module lives in a sub-folder")
    pool_cfg = json.loads((model_dir / modules[1]["path"] / "config.json").read_text(encoding="utf-8"))
    if "pooling_mode" in pool_cfg:  # sentence-transformers >= 5 writes one string
        pooling = pool_cfg["pooling_mode"]
    else:
        on = [k.removeprefix("pooling_mode_") for k, v in pool_cfg.items() if k.startswith("pooling_mode_") and v]
        pooling = {"cls_token": "cls", "mean_tokens": "mean", "max_tokens": "max"}.get(on[0]) if len(on) == 1 else None
    if pooling not in POOLINGS:
        raise ExportUnsupported(f"pooling {pool_cfg} (exported: {', '.join(POOLINGS)})")
    st_cfg_file = model_dir / "sentence_bert_config.json"
    st_cfg = json.loads(st_cfg_file.read_text(encoding="utf-8")) if st_cfg_file.is_file() else {}
    prompts_file = model_dir / "config_sentence_transformers.json"
    if prompts_file.is_file() and json.loads(prompts_file.read_text(encoding="utf-8")).get("default_prompt_name"):
        raise ExportUnsupported("the model has a default prompt")
    return {
        "pooling": pooling,
        "normalize": kinds[-1] == "Normalize",
        "max_length": st_cfg.get("max_seq_length"),
        "do_lower_case": bool(st_cfg.get("do_lower_case", False)),
    }


def export_encoder(spec: str, out: str | Path, *, max_length: int | None = None) -> dict[str, Any]:
    """Export encoder ``spec`` (alias, directory or hub id) to ``out`` (model.onnx, tokenizer.json, encoder.json).

    Deterministic for a given model, torch version and opset. Raises ``ExportUnsupported`` for layouts we do not
    export. Imports torch and transformers (build time only).
    """
    import torch
    from transformers import AutoModel, AutoTokenizer

    model_dir = _model_dir(spec)
    layout = read_st_layout(model_dir)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    if not getattr(tokenizer, "is_fast", False):
        raise ExportUnsupported(f"encoder '{spec}' has no fast tokenizer (tokenizer.json)")
    model = AutoModel.from_pretrained(model_dir, attn_implementation="eager").eval()
    limit = max_length or layout["max_length"] or min(tokenizer.model_max_length, 512)
    with_types = "token_type_ids" in tokenizer.model_input_names
    pooling, normalize = layout["pooling"], layout["normalize"]

    class Pooled(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:  # (B, T) each
            extra = {"token_type_ids": torch.zeros_like(input_ids)} if with_types else {}
            h = self.model(input_ids=input_ids, attention_mask=attention_mask, **extra).last_hidden_state  # (B, T, H)
            mask = attention_mask.unsqueeze(-1).to(h.dtype)  # (B, T, 1)
            if pooling == "cls":
                e = h[:, 0]
            elif pooling == "mean":
                e = (h * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
            else:  # max over real tokens, as sentence-transformers does (padding set to -1e9)
                e = torch.where(mask.bool(), h, torch.full_like(h, -1e9)).max(1).values
            return torch.nn.functional.normalize(e, p=2, dim=1) if normalize else e  # (B, H)

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    dummy = torch.ones(2, 8, dtype=torch.long)
    axes = {
        "input_ids": {0: "batch", 1: "tokens"},
        "attention_mask": {0: "batch", 1: "tokens"},
        "embedding": {0: "batch"},
    }
    with torch.inference_mode(), warnings.catch_warnings():
        # Tracing warns of the model code's Python branches, the exporter of how it lowers ops and that it is the
        # legacy one: all expected here (an index build compares the exported graph with sentence-transformers).
        warnings.filterwarnings("ignore", category=torch.jit.TracerWarning)
        warnings.filterwarnings("ignore", category=UserWarning, module=r"torch\.onnx")
        warnings.filterwarnings("ignore", category=DeprecationWarning, module=r"torch\.onnx|searchrl\.retrieval")
        # The TorchScript exporter writes one self-contained file in a couple of seconds; the dynamo exporter
        # (torch >= 2.9's default) writes external weights and took 10 s for MiniLM.
        torch.onnx.export(
            Pooled(),
            (dummy, dummy),
            str(out / "model.onnx"),
            input_names=["input_ids", "attention_mask"],
            output_names=["embedding"],
            dynamic_axes=axes,
            opset_version=OPSET,
            dynamo=False,
        )
    backend = tokenizer.backend_tokenizer
    backend.no_padding()
    backend.enable_truncation(int(limit))
    backend.save(str(out / "tokenizer.json"))
    meta = {
        "format": ARTIFACT_FORMAT,
        "version": ARTIFACT_VERSION,
        "source": spec,
        "pooling": pooling,
        "normalize_in_graph": normalize,
        "max_length": int(limit),
        "do_lower_case": layout["do_lower_case"],
        "pad_id": int(tokenizer.pad_token_id or 0),
        "dimension": int(model.config.hidden_size),
        "opset": OPSET,
        "torch": torch.__version__,
    }
    (out / "encoder.json").write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
    return meta


# ---------------------------------------------------------------------------------------------------- runtime
def default_threads() -> int:
    """``$SEARCHRL_ENCODER_THREADS``, else every CPU this process may use."""
    if env := os.environ.get("SEARCHRL_ENCODER_THREADS"):
        return max(1, int(env))
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


SPIN_MODES = ("run", "always", "off")


def spin_mode() -> str:
    """How ONNX Runtime's pool threads wait between parallel sections: ``$SEARCHRL_ENCODER_SPIN``, default ``run``.

    Spinning instead of sleeping makes one query faster (measured idle on 2 cores: 2.5 ms against 3.7 ms), but
    threads that keep spinning after a call take the cores the HTTP server and its clients need next. ``run`` spins
    inside a call and stops when it returns (a served client got 17% more queries per second than with
    ``always``, the encoder alone the same: ``benchmarks/results/HISTORY.md``); ``always`` keeps
    ONNX Runtime's default spinning; ``off`` (or ``0``) never spins.
    """
    mode = os.environ.get("SEARCHRL_ENCODER_SPIN", "run").strip().lower()
    mode = {"0": "off", "1": "always"}.get(mode, mode)
    if mode not in SPIN_MODES:
        raise ValueError(f"SEARCHRL_ENCODER_SPIN={mode!r} is not one of {', '.join(SPIN_MODES)}; unset it for 'run'")
    return mode


def session_options(threads: int | None = None) -> Any:
    """ONNX Runtime session options for query encoding: ``threads`` (default ``default_threads()``) intra-op
    threads, full graph optimisation, and the pool threads' waiting as ``spin_mode()`` says."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = threads or default_threads()
    so.inter_op_num_threads = 1
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    spin = spin_mode()
    so.add_session_config_entry("session.intra_op.allow_spinning", "0" if spin == "off" else "1")
    so.add_session_config_entry("session.force_spinning_stop", "1" if spin == "run" else "0")
    return so


class OnnxEncoder:
    """``Encoder``'s interface (``options``, ``dimension``, ``encode``) over an exported artifact directory."""

    def __init__(self, directory: str | Path, options: Any, *, threads: int | None = None) -> None:
        try:
            import onnxruntime as ort
            from tokenizers import Tokenizer
        except ImportError as err:
            raise MissingDependency(
                f"{err.name} is missing; `pip install onnxruntime tokenizers` (or load the index with "
                "query_encoder='sentence-transformers')"
            ) from None
        directory = Path(directory)
        meta_file = directory / "encoder.json"
        if not meta_file.is_file():
            raise FileNotFoundError(f"{directory} holds no exported encoder (encoder.json); rebuild the index")
        self.meta = json.loads(meta_file.read_text(encoding="utf-8"))
        if self.meta.get("format") != ARTIFACT_FORMAT or self.meta.get("version") != ARTIFACT_VERSION:
            raise ValueError(f"{meta_file} is not a version-{ARTIFACT_VERSION} exported encoder; rebuild the index")
        self.options = options
        self.dimension = int(self.meta["dimension"])
        self.tokenizer = Tokenizer.from_file(str(directory / "tokenizer.json"))
        self.tokenizer.no_padding()  # encode() pads each batch itself, to its longest text
        self.pad_id = int(self.meta["pad_id"])
        so = session_options(threads)
        self.session = ort.InferenceSession(str(directory / "model.onnx"), so, providers=["CPUExecutionProvider"])
        # One forward pass at a time: concurrent callers would only fight over the same CPU cores.
        self._lock = threading.Lock()

    def encode(self, texts: Sequence[str], *, is_query: bool, batch_size: int = 64) -> np.ndarray:
        """Texts -> (N, D) float32, prefixed and (optionally) L2-normalised, like ``Encoder.encode``."""
        prefix = self.options.query_prefix if is_query else self.options.passage_prefix
        texts = [prefix + t for t in texts]
        if self.meta["do_lower_case"]:
            texts = [t.lower() for t in texts]
        out = np.empty((len(texts), self.dimension), dtype=np.float32)  # (N, D)
        encoded = [e.ids for e in self.tokenizer.encode_batch(texts)] if texts else []
        # Batches of similar lengths: a server's merged batch of mixed queries then pads (and computes) far less.
        order = sorted(range(len(texts)), key=lambda i: len(encoded[i]))
        with self._lock:
            for start in range(0, len(texts), batch_size):
                rows = order[start : start + batch_size]
                width = max(len(encoded[i]) for i in rows)
                ids = np.full((len(rows), width), self.pad_id, dtype=np.int64)  # (B, T)
                mask = np.zeros((len(rows), width), dtype=np.int64)  # (B, T)
                for r, i in enumerate(rows):
                    ids[r, : len(encoded[i])] = encoded[i]
                    mask[r, : len(encoded[i])] = 1
                (emb,) = self.session.run(None, {"input_ids": ids, "attention_mask": mask})  # (B, D)
                out[rows] = emb
        if self.options.normalize:
            out /= np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-12)
        return out
