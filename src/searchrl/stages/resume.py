"""Whether an RL run may go on from its checkpoint: the settings it started with (``<output_dir>/config.yaml``) and
the model it started from (a fingerprint of ``training.init_from``'s weight files, ``<output_dir>/init_from.json``)
must be the ones it would start with now; only ``training.steps`` may grow."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from searchrl.config import RunConfig
from searchrl.utils import atomic_write_text, weights_fingerprint

INIT_FILE = "init_from.json"


def _flat(d: Any, prefix: str = "") -> dict[str, Any]:
    if not isinstance(d, dict):
        return {prefix: d}
    out: dict[str, Any] = {}
    for k, v in d.items():
        out |= _flat(v, f"{prefix}.{k}" if prefix else str(k))
    return out


def settings_diff(cfg: RunConfig, saved: Path) -> list[str]:
    """The dotted settings in which ``cfg`` differs from the config saved at ``saved`` (``training.steps`` aside);
    ``["(no saved config)"]`` when there is none."""
    if not saved.exists():
        return ["(no saved config)"]
    old = _flat(yaml.safe_load(saved.read_text()) or {})
    new = _flat(json.loads(cfg.model_dump_json()))
    return sorted(k for k in old.keys() | new.keys() if k != "training.steps" and old.get(k) != new.get(k))


def record_init(cfg: RunConfig) -> None:
    """Note the fingerprint of the model a fresh run starts from, beside its outputs."""
    out = Path(cfg.training.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / INIT_FILE, json.dumps(weights_fingerprint(cfg.training.init_from or cfg.model.policy)))


def resume_mismatch(cfg: RunConfig) -> str | None:
    """Why ``cfg`` may not go on from its output directory's checkpoint (None: it may): changed settings, or a
    starting model whose weights changed since (an earlier stage ran again)."""
    out = Path(cfg.training.output_dir)
    changed = settings_diff(cfg, out / "config.yaml")
    if changed:
        return f"settings differ from the checkpoint's ({', '.join(changed[:5])}{', ...' if len(changed) > 5 else ''})"
    noted, start = out / INIT_FILE, cfg.training.init_from or cfg.model.policy
    if noted.exists() and json.loads(noted.read_text()) != weights_fingerprint(start):
        return f"the starting model {start} changed since the checkpoint (an earlier stage ran again)"
    return None
