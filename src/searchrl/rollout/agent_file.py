"""What a trained model's directory records about running it as it was trained.

Every model a training writes (``final``, ``models/step_<k>``, an RL checkpoint's ``model``) holds ``searchrl.json``:

- ``settings``: the run's protocol and its options, prompt style, documents per search and rollout limits, as dotted
  config keys (:data:`AGENT_SETTINGS`). ``searchrl ask`` and ``searchrl eval`` given ``--model DIR`` without a recipe
  take them as their defaults (their flags and ``--set`` still win).
- ``stop_strings`` (a turn ends at a search call: run it, append the observation, go on), ``answer_stop_strings``
  and ``example``: one question's prompt exactly as the rollout renders it and an observation of two documents, for
  running the agent without SearchRL (vLLM, transformers).

Its ``generation_config.json`` also ends generation at the token that ends a reply under the chat template (the
token SFT targets end with), which a base model's generation config may lack: Qwen2.5's names ``<|endoftext|>`` only,
while its template ends replies with ``<|im_end|>``.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from searchrl.config import RunConfig
from searchrl.generation.prompts import reply_end_ids
from searchrl.protocols.base import Protocol
from searchrl.retrieval.base import Hit

AGENT_FILE = "searchrl.json"

#: the settings an agent's prompt, parsing and rollout follow, as dotted config keys
AGENT_SETTINGS = (
    "rollout.protocol",
    "rollout.options",
    "model.prompt_style",
    "retrieval.topk",
    "rollout.max_turns",
    "rollout.max_searches",
    "rollout.max_new_tokens",
    "rollout.max_obs_tokens",
    "rollout.max_obs_tokens_per_query",
    "rollout.max_total_tokens",
    "rollout.force_answer",
    "rollout.max_queries_per_call",
    "rollout.continue_after_eos",
)

_QUESTION = "Where was the director of The Face in the Fog born?"
_HITS = [
    Hit("d1", "The Face in the Fog", "The Face in the Fog is a 1936 American film directed by Robert F. Hill.", 1.0),
    Hit("d2", "Robert F. Hill", "Robert F. Hill was a Canadian film director born in Port Rowan, Ontario.", 0.5),
]


def agent_record(cfg: RunConfig, protocol: Protocol, tokenizer: Any) -> dict[str, Any]:
    """The contents of ``searchrl.json`` for a model trained under ``cfg`` with ``protocol`` (bound to
    ``tokenizer``, as the rollout engine binds it)."""
    from searchrl.rollout.engine import build_prompt_text

    dumped = cfg.model_dump(mode="json")
    settings = {key: dumped[key.split(".")[0]][key.split(".")[1]] for key in AGENT_SETTINGS}
    if cfg.plugins:  # a protocol of one's own: the files that register it, by their absolute paths
        settings["plugins"] = [str(Path(p).resolve()) if Path(p).is_file() else p for p in cfg.plugins]
    record: dict[str, Any] = {
        "recipe": cfg.name,
        "settings": settings,
        "stop_strings": list(protocol.stop_strings),
        "answer_stop_strings": list(protocol.answer_stop_strings),
    }
    style = cfg.model.prompt_style
    if tokenizer is not None:
        protocol = copy.copy(protocol)  # bound here, not the live one a rollout may be using
        protocol.bind_tokenizer(tokenizer, style)
        record["example"] = {
            "question": _QUESTION,
            "prompt": build_prompt_text(protocol, tokenizer, _QUESTION, style),
            "observation": protocol.render_observation(["Face in the Fog director birthplace"], [_HITS]),
        }
    return record


def record_agent(model_dir: Path, cfg: RunConfig, protocol: Protocol, tokenizer: Any) -> None:
    """Write ``searchrl.json`` into a saved model's directory, and (a full model's, not a LoRA adapter's) make its
    generation config stop at the chat template's end of a reply."""
    model_dir = Path(model_dir)
    record = agent_record(cfg, protocol, tokenizer)
    (model_dir / AGENT_FILE).write_text(json.dumps(record, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    if (model_dir / "config.json").exists():
        stop_at_reply_end(model_dir, reply_end_ids(tokenizer, cfg.model.prompt_style))


def stop_at_reply_end(model_dir: Path, end_ids: list[int]) -> None:
    """Add ``end_ids`` to the EOS ids of the generation config saved in ``model_dir`` (one made from its
    ``config.json`` when it has none), so that ``generate`` and vLLM stop where the trained model ends its reply.
    Only ``eos_token_id`` is rewritten in the file: transformers refuses to save a modified config that it merely
    warns about as published (``temperature`` with ``do_sample: false``)."""
    from transformers import AutoConfig, GenerationConfig

    path = model_dir / "generation_config.json"
    if not path.exists():
        GenerationConfig.from_model_config(AutoConfig.from_pretrained(model_dir)).save_pretrained(model_dir)
    gen = json.loads(path.read_text(encoding="utf-8"))
    eos = gen.get("eos_token_id")
    have = list(eos) if isinstance(eos, list | tuple) else [] if eos is None else [eos]
    missing = [i for i in end_ids if i not in have]
    if missing:
        gen["eos_token_id"] = have + missing if have or len(missing) > 1 else missing[0]
        path.write_text(json.dumps(gen, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def read_agent_settings(model: str | Path | None) -> dict[str, Any] | None:
    """The ``settings`` of a model directory's ``searchrl.json``; None for a hub id, an alias or a directory
    without one."""
    path = None if model is None else Path(model).expanduser() / AGENT_FILE
    if path is None or not path.is_file():
        return None
    try:
        settings = json.loads(path.read_text(encoding="utf-8"))["settings"]
    except (ValueError, KeyError, TypeError):
        raise ValueError(f"{path} is not a SearchRL model record; delete it or save the model again") from None
    if not isinstance(settings, dict):
        raise ValueError(f"{path} is not a SearchRL model record; delete it or save the model again")
    return settings


def agent_overrides(model: str | Path | None, protocol: str | None = None) -> list[str]:
    """The model directory's recorded settings as dotted overrides (``key=<JSON>``), for a command to apply before
    its own; with ``protocol`` other than the recorded one, that protocol's options are left out too. Keys this
    version does not record (another version's) are left out: they are not the user's to fix."""
    settings = {k: v for k, v in (read_agent_settings(model) or {}).items() if k in (*AGENT_SETTINGS, "plugins")}
    if not settings:
        return []
    if protocol is not None and protocol != settings.get("rollout.protocol"):
        settings = {k: v for k, v in settings.items() if k not in ("rollout.protocol", "rollout.options")}
    return [f"{key}={json.dumps(value)}" for key, value in settings.items()]
