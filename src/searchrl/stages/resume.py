"""Whether an RL or SFT run may go on from its checkpoint: the settings it started with (``<output_dir>/config.yaml``)
and the model it started from (a fingerprint of its starting model's weight files, ``<output_dir>/init_from.json``:
``training.init_from`` for RL, ``model.policy`` for SFT) must be the ones it would start with now; only RL's
``training.steps`` may grow."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import yaml

from searchrl.config import RunConfig
from searchrl.config.extensions import code_digests
from searchrl.rl.run_dir import INIT_FILE, INPUTS_FILE
from searchrl.utils import atomic_write_text, weights_fingerprint


def _flat(d: Any, prefix: str = "") -> dict[str, Any]:
    if not isinstance(d, dict):
        return {prefix: d}
    out: dict[str, Any] = {}
    for k, v in d.items():
        out |= _flat(v, f"{prefix}.{k}" if prefix else str(k))
    return out


def settings_diff(cfg: RunConfig, saved: Path) -> list[str]:
    """The dotted settings in which ``cfg`` differs from the config saved at ``saved`` (``training.steps`` and where or
    how often the run saves, logs and evaluates aside: :data:`_NOT_OUTCOME`);
    ``["(no saved config)"]`` when there is none. A key on one side only (a setting another SearchRL version did not
    have) counts only when its value is not empty: a run saved before ``plugins`` existed had none."""
    if not saved.exists():
        return ["(no saved config)"]
    old = _flat(yaml.safe_load(saved.read_text(encoding="utf-8")) or {})
    new = _flat(json.loads(cfg.model_dump_json()))
    empty = (None, [], {})
    return sorted(
        k
        for k in old.keys() | new.keys()
        if k != "training.steps"
        and k not in _NOT_OUTCOME
        and old.get(k) != new.get(k)
        and not ((k not in old and new[k] in empty) or (k not in new and old[k] in empty))
    )


def record_init(cfg: RunConfig) -> None:
    """Note the fingerprints of the model a fresh run starts from and of its training question file, beside its
    outputs."""
    out = Path(cfg.training.output_dir)
    note_start(out, cfg.training.init_from or cfg.model.policy)
    atomic_write_text(out / INPUTS_FILE, json.dumps(train_inputs(cfg)))


def note_start(out: Path, start: str) -> None:
    """Note the fingerprint of the model a fresh run into ``out`` starts from (``start``)."""
    Path(out).mkdir(parents=True, exist_ok=True)
    atomic_write_text(Path(out) / INIT_FILE, json.dumps(weights_fingerprint(start)))


def start_changed(out: Path, start: str) -> str | None:
    """Why ``out``'s checkpoint was trained from other weights than ``start``'s now (None: the same, or not noted)."""
    noted = Path(out) / INIT_FILE
    if noted.exists() and json.loads(noted.read_text(encoding="utf-8")) != weights_fingerprint(start):
        return f"the starting model {start} changed since the checkpoint (an earlier stage ran again)"
    return None


def train_inputs(cfg: RunConfig) -> dict[str, str]:
    """``{path: fingerprint}`` of the training question file (none for a synthetic world or a hub dataset): its data
    position is a position in those questions, so a file edited in place must not be resumed into."""
    return file_fingerprints(cfg, [cfg.data.train])


def resume_mismatch(cfg: RunConfig) -> str | None:
    """Why ``cfg`` may not go on from its output directory's checkpoint (None: it may): a changed setting RL reads
    (:data:`_READS`, plugins), a smaller ``training.steps``, or a starting model whose weights changed since (an
    earlier stage ran again)."""
    out = Path(cfg.training.output_dir)
    reads = ("plugins", *_READS["rl"])  # not the recipe's pipeline:, SFT or evaluation settings, which RL never reads
    diff = settings_diff(cfg, out / "config.yaml")
    changed = [k for k in diff if k.startswith("(") or any(k == r or k.startswith(f"{r}.") for r in reads)]
    if changed:
        return f"settings differ from the checkpoint's ({', '.join(changed[:5])}{', ...' if len(changed) > 5 else ''})"
    # only training.steps may grow: a checkpoint past a smaller one would train nothing, the longer run's model kept
    saved = yaml.safe_load((out / "config.yaml").read_text(encoding="utf-8")) or {}
    steps = (saved.get("training") or {}).get("steps")
    if isinstance(steps, int) and cfg.training.steps < steps:
        return f"training.steps={cfg.training.steps} is below the {steps} the checkpoint's run was started with"
    if why := start_changed(out, cfg.training.init_from or cfg.model.policy):
        return why
    inputs = out / INPUTS_FILE
    if inputs.exists():
        now = train_inputs(cfg)
        edited = [p for p, f in json.loads(inputs.read_text(encoding="utf-8")).items() if p in now and now[p] != f]
        if edited:
            return f"the training questions {edited[0]} changed since the checkpoint"
    return None


def sft_resume_mismatch(cfg: RunConfig, out: Path) -> str | None:
    """Why an SFT run may not go on from ``out``'s checkpoint (None: it may): a setting SFT reads differs from the
    stopped run's (settings only RL or evaluation read do not count), or its starting model's weights changed."""
    diff = settings_diff(cfg, out / "config.yaml")
    changed = [k for k in diff if any(k == r or k.startswith(f"{r}.") for r in _READS["sft"])]
    if changed or not (out / "config.yaml").exists():
        shown = ", ".join(changed[:5]) + (", ..." if len(changed) > 5 else "") if changed else "no saved config"
        return f"settings differ from the checkpoint's ({shown})"
    return start_changed(out, cfg.model.policy)


#: the config sections each kind of stage reads: what its DONE marker compares (a change elsewhere, e.g. in
#: ``training.steps`` for the data and SFT stages before RL, leaves it done). The stage itself and its starting model
#: always count.
_READS = {
    "synth": ("data.world",),
    "index": ("data", "retrieval"),
    "split": ("data",),
    "oracle": ("model.policy", "data", "retrieval", "rollout", "sft"),  # the policy's tokenizer cuts documents
    "rejection-sample": ("model", "data", "retrieval", "rollout", "reward", "sft"),
    "select-difficulty": ("model", "data", "retrieval", "rollout", "reward"),
    "sft": ("model", "data", "retrieval", "rollout", "sft", "training.seed", "training.max_grad_norm"),
    "rl": ("model", "data", "retrieval", "rollout", "reward", "algorithm", "training", "memorization"),
    "eval": ("model", "data", "retrieval", "rollout", "evaluation"),
}
#: settings that change where or how visibly a stage runs, not what it makes (the runner sets an RL stage's
#: output directory itself)
_NOT_OUTCOME = (
    "model.device",
    "training.tensorboard",
    "training.wandb",
    "training.output_dir",
    # how often a run saves, evaluates, logs and profiles: a resumed run may do these more or less often
    "training.save_every",
    "sft.save_every",
    "training.keep_models_every",
    "training.eval_every",
    "training.eval_limit",
    "training.log_rollouts",
    "training.profile_step",
    # how many non-finite updates in a row stop a run: raised to let a stopped one go on
    "training.max_skipped_steps",
)
_PREFIXED = re.compile(r"^([a-z_]+:)?(.+)$")  # "rewriter:PATH" names a path after its kind


def stage_settings(stage: Any, cfg: RunConfig, model: str | None, run_dir: Path) -> dict[str, Any]:
    """A pipeline stage's settings as its ``DONE`` marker records them: the stage (references resolved), the config
    sections its kind reads (:data:`_READS`), the model it started from, and a digest of each file of your code it
    ran (plugins, reward functions), so that editing one makes the stage run again, and of the starting model's
    weights when it lies outside the run directory. A path inside the run directory is written ``${run}/...``, so
    the same run named by a relative or an absolute path is the same run."""
    root = os.path.abspath(run_dir)

    def placed(v: Any) -> Any:
        if isinstance(v, list):
            return [placed(x) for x in v]
        if isinstance(v, dict):
            return {k: placed(x) for k, x in v.items()}
        if isinstance(v, str) and (m := _PREFIXED.match(v)) and ("/" in v or os.sep in v or v == str(run_dir)):
            path = os.path.abspath(m.group(2))
            if path == root or path.startswith(root + os.sep):
                return (m.group(1) or "") + "${run}" + path[len(root) :]
        return v

    kind = stage.op if stage.kind == "data" else stage.kind
    reads = _READS.get(str(kind), ())
    config = {
        k: v
        for k, v in _flat(json.loads(cfg.model_dump_json())).items()
        if any(k == r or k.startswith(r + ".") for r in reads) and k not in _NOT_OUTCOME
    }
    # the code it ran: your plugins (in the stages that can call them) and the reward functions of those that score
    plugins = cfg.plugins if kind not in ("synth", "index", "split") else []
    code = [*plugins, *(c.name for c in cfg.reward.components if ":" in c.name and "reward" in reads)]
    # a model outside the run trained again in place: its weights' fingerprint (inside it, the stage that wrote them
    # running again re-runs the stages after it)
    outside = model and not os.path.abspath(model).startswith(root + os.sep)
    own = json.loads(stage.model_dump_json())  # its set: less what changes only how it runs, as in the config
    own["set"] = {k: v for k, v in (own.get("set") or {}).items() if k not in _NOT_OUTCOME}
    raw = {
        "stage": own,
        "config": config,
        "model": model,
        "model_files": weights_fingerprint(model) if outside else [],
        "code": code_digests(code),
        "inputs": input_fingerprints(stage, cfg, str(kind), root),
    }
    return {k: placed(v) for k, v in _flat(raw).items()}


#: the stage kinds that read ``data.<field>`` when their ``data:`` names no file
_DEFAULT_INPUT = {
    "index": "corpus",
    "split": "train",
    "rl": "train",
    "rejection-sample": "train",
    "select-difficulty": "train",
}


def input_fingerprints(stage: Any, cfg: RunConfig, kind: str, root: str) -> dict[str, str]:
    """``{path: fingerprint}`` of the files outside the run directory that a stage reads as its input (its ``data:``,
    else the config's questions or corpus file, or an SFT stage's ``sft.data``; an evaluation's datasets, their
    corpora and indexes): so that a corpus or a question file edited in place (same path) makes the stage run again,
    rather than leaving an index or a split made from the old file. An index it searches counts by its manifest,
    which a rebuild rewrites."""
    from searchrl.config.evaluation import CONTEXTS

    data = stage.data
    names = [str(d) for d in (data if isinstance(data, list) else [data])] if data else []
    if kind == "sft":  # its data: is its sft.data, which names its files (a rewriter's trajectories as rewriter:FILE)
        sft = names or (cfg.sft.data if isinstance(cfg.sft.data, list) else [cfg.sft.data])
        sft = [str(d).removeprefix("rewriter:") for d in sft if d not in ("oracle", "rewriter_oracle")]
        names = [os.path.abspath(d) for d in sft]  # the SFT stage reads them from the working directory
    if not names and kind in _DEFAULT_INPUT:
        names = [getattr(cfg.data, _DEFAULT_INPUT[kind])]
    if kind == "index" and names == [CONTEXTS]:  # the paragraphs the training questions ship with
        names = [cfg.data.train]
    indexes = [cfg.retrieval.index] if kind != "index" and "retrieval" in _READS.get(kind, ()) else []
    if kind == "eval":
        from searchrl.pipeline import eval_set_indexes

        sets = [d for d in cfg.evaluation.datasets if not isinstance(d, str)]
        names += [] if data else [d if isinstance(d, str) else d.data for d in cfg.evaluation.datasets]
        names += [d.corpus for d in sets if d.corpus]
        indexes += eval_set_indexes(cfg)
    names += [os.path.join(os.path.abspath(i), "manifest.json") for i in indexes if i]
    return file_fingerprints(cfg, names, root)


def file_fingerprints(cfg: RunConfig, names: list[str], root: str | None = None) -> dict[str, str]:
    """``{path: fingerprint}`` of the named data files (absolute, or in ``data.source``) that exist, outside the run
    directory ``root`` (a run's own files are its stages' business)."""
    from searchrl.data.corpus import file_fingerprint
    from searchrl.pipeline import data_file

    out = {}
    for name in names:
        if os.path.isabs(name):
            path = os.path.abspath(name)
        elif cfg.data.source != "synthetic" and os.path.isdir(cfg.data.source):  # a world's files are the cache's
            path = os.path.abspath(data_file(cfg.data.source, name))  # an hf: source or `contexts`: no file
        else:
            continue
        inside = root is not None and (path == root or path.startswith(root + os.sep))
        if os.path.isfile(path) and not inside:
            out[path] = file_fingerprint(path)
    return out


def changed_settings(done: Path, settings: dict[str, Any]) -> list[str]:
    """The settings of a stage marked ``done`` that changed since it ran ([]: none, or the marker predates recorded
    settings). Settings that exist on one side only (another SearchRL version) do not count."""
    old = json.loads(done.read_text(encoding="utf-8") or "{}").get("settings")
    if not isinstance(old, dict):
        return []
    return sorted(k for k in old.keys() & settings.keys() if old[k] != settings[k])


#: the one change for which a finished RL stage goes on from its last checkpoint (more steps); any other starts it
#: again, since resuming at its last step would train nothing and keep the old model
GOES_ON = {"config.training.steps"}


def changed_since(done: Path, settings: dict[str, Any]) -> str | None:
    """Why a stage marked ``done`` must run again: its settings changed since (None: they did not, or the marker
    predates recorded settings). Settings that exist on one side only (another SearchRL version) do not count."""
    diff = changed_settings(done, settings)
    model = settings.get("model")
    diff = [f"file {k.removeprefix('inputs.')}" if k.startswith("inputs.") else k for k in diff]
    diff = [f"weights of {model}" if k == "model_files" else k for k in diff]
    if not diff:
        return None
    return f"settings changed since it ran ({', '.join(diff[:5])}{', ...' if len(diff) > 5 else ''})"


def clear_stage(sdir: Path) -> None:
    """Empty a pipeline stage's directory for a fresh start, keeping what a stopped build, sampling or evaluation goes
    on from: a staging directory ``.NAME.partial`` (a dense index's encoded vectors), ``NAME.<pass>.partial`` (a
    sampling stage's finished questions) and ``predictions/*.partial`` (an evaluation's answered batches). All are
    keyed to their settings, so a changed stage starts them afresh."""
    import shutil

    def remove(path: Path) -> None:
        shutil.rmtree(path) if path.is_dir() and not path.is_symlink() else path.unlink()

    for path in sdir.iterdir():
        if path.name.endswith(".partial"):
            continue
        if path.name == "predictions" and path.is_dir():
            for inner in path.iterdir():
                if not inner.name.endswith(".partial"):
                    remove(inner)
            continue
        remove(path)
