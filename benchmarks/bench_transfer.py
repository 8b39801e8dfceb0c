"""Transfer: does a trained search agent's skill carry over to question styles it never trained on?

    python benchmarks/bench_transfer.py --setting held_out_kind [--hold-out three_hop]
    python benchmarks/bench_transfer.py --setting world_to_real --real DIR [--qa dev.jsonl] [--heldout 100]
    python benchmarks/bench_transfer.py --setting held_out_template --real DIR [--qa dev.jsonl] [--heldout 100]
    ... --smoke      # a few minutes at tiny sizes: checks that the setting runs, writes no result
    ... --collect    # only rebuild the report from an existing run (--out)

A *style* is what :mod:`searchrl.data.styles` gives a question: a synthetic-world question's generator template (its
kind names all of that kind's templates), any other question's generic template from its text ("who is the father
of <e>?"). Each setting is one ``searchrl run`` pipeline (``pipeline=`` overrides a recipe's stages) from the bundled
model:

- ``world_to_real`` (recipe multihop_world): the cold start and GRPO on the synthetic world only, then the agent
  evaluated on the world's dev questions (the styles it trained on) and on real questions (``--real DIR``: a FlashRAG
  QA file ``--qa`` and ``corpus.jsonl``, searched through their own BM25 index; every real question is a held-out
  style): the ``--heldout`` part of the QA file's split, the questions multihop_cpu's agent is scored on, with naive
  RAG (the same RL model) beside the agent; its world has open relations (``--relations``; fixed in the other
  settings);
- ``held_out_kind`` (recipe multihop_world): the cold start and GRPO on the world's questions minus one kind
  (``--hold-out``, default three_hop: ``data.held_out_styles`` of both training stages), evaluated per kind on the
  world's dev questions;
- ``held_out_template`` (recipe multihop_cpu): the world cold start, then GRPO on the training part of the real QA
  file (split by ``searchrl data split``'s hash rule, ``--heldout`` questions held out) minus its rarest templates
  (the rarest ``--hold-out-fraction`` of the training part's templates, fewest questions first, ties by name),
  evaluated per template on the held-out part. A held-out question is *in style* when RL trained on its template,
  *held out* otherwise (a template removed from training, or one the training part never had).

Both the cold-started and the RL model are evaluated (the agent, greedy), so the report shows what RL added on the
styles it trained on and on the others. Without ``--profile`` the stages run at the recipe's sizes (hours on 2
CPU cores); ``--smoke`` uses the laptop profile and a few questions. The report reads the per-question predictions
(each row carries its ``style`` and ``kind``) and writes ``benchmarks/results/transfer_<setting>.{json,md}``: EM, F1
and cover-EM of in-style and held-out-style questions before and after RL, and per kind or style.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from statistics import fmean

from searchrl.utils import write_portable

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
SETTINGS = ("world_to_real", "held_out_kind", "held_out_template")
RECIPES = {"world_to_real": "multihop_world", "held_out_kind": "multihop_world", "held_out_template": "multihop_cpu"}
MULTI_HOP = ["bridge", "three_hop", "comparison"]
KINDS = ["single_hop", *MULTI_HOP]
SCORES = ("em", "f1", "cover_em")
LABELS = {"em": "EM", "f1": "F1", "cover_em": "cover-EM"}
#: --smoke: tiny stages, only to check that a setting runs (laptop profile underneath)
SMOKE = {
    "sft.limit": 4,
    "sft.oracle_mix": {},
    "sft.oracle_first_turns": 0,
    "rollout.max_new_tokens": 24,
    "rollout.max_turns": 2,
    "training.eval_every": 0,
    "training.save_every": 0,
}
#: what the setting's run directory records about the split between trained and held-out styles
SETTING_FILE = "transfer_setting.json"


def _sft_set(smoke: bool, extra: dict | None = None) -> dict:
    return {**{k: v for k, v in SMOKE.items() if k.startswith("sft.") and smoke}, **(extra or {})}


def _rl_set(steps: int | None, smoke: bool, extra: dict) -> dict:
    out = {k: v for k, v in SMOKE.items() if smoke and k.split(".")[0] in ("rollout", "training")}
    return {**out, **({"training.steps": steps} if steps else {}), **extra}


def _eval(name: str, data: str, limit: int, init_from: str | None = None, methods: tuple = ("agent",)) -> dict:
    stage = {
        "name": name,
        "kind": "eval",
        "data": [data],
        "set": {"evaluation.methods": list(methods), "evaluation.limit": limit},
    }
    return {**stage, "init_from": init_from} if init_from else stage


def pipeline(
    setting: str,
    *,
    steps: int | None,
    eval_limit: int,
    smoke: bool = False,
    hold_out: str = "three_hop",
    real: Path | None = None,
    qa: str | None = None,
    heldout: int = 100,
    held_out_styles: list[str] | None = None,
    relations: str = "fixed",
) -> list[dict]:
    """The run's stages for one setting (see the module docstring); ``relations``: the world's (fixed or open)."""
    world = [
        {"name": "world", "kind": "data", "op": "synth", "args": {"relations": relations}},
        {"name": "world_index", "kind": "data", "op": "index", "data": "${world}/corpus.jsonl"},
    ]
    dev = "${world}/dev.jsonl"
    if setting == "held_out_kind":
        held = {"data.held_out_styles": [hold_out]}
        return [
            *world,
            {"name": "coldstart", "kind": "sft", "set": _sft_set(smoke, held)},
            _eval("coldstart_eval", dev, eval_limit),
            {
                "name": "rl",
                "kind": "rl",
                "init_from": "${coldstart}",
                "data": "${world}/train.jsonl",
                "set": _rl_set(steps, smoke, {"data.dev": dev, "data.kinds": MULTI_HOP, **held}),
            },
            _eval("eval", dev, eval_limit),
        ]
    assert real is not None and qa is not None
    real_qa, corpus = str(real / qa), str(real / "corpus.jsonl")
    coldstart = {"name": "coldstart", "kind": "sft", "set": _sft_set(smoke)}
    if setting == "world_to_real":
        return [
            *world,
            coldstart,
            _eval("coldstart_eval", dev, eval_limit),
            {
                "name": "rl",
                "kind": "rl",
                "init_from": "${coldstart}",
                "data": "${world}/train.jsonl",
                "set": _rl_set(steps, smoke, {"data.dev": dev, "data.kinds": MULTI_HOP}),
            },
            _eval("eval", dev, eval_limit),
            # the held-out part of multihop_cpu's split (same hash rule and size): the questions its agent is scored on
            {"name": "split", "kind": "data", "op": "split", "data": real_qa, "args": {"heldout": heldout}},
            {"name": "real_index", "kind": "data", "op": "index", "data": corpus},  # later stages search it
            _eval("coldstart_eval_real", "${split}/heldout.jsonl", eval_limit, init_from="${coldstart}"),
            _eval("eval_real", "${split}/heldout.jsonl", eval_limit, "${rl}", ("naive_rag", "agent")),
        ]
    if setting == "held_out_template":
        held = "${split}/heldout.jsonl"
        rl_set = {"data.source": str(real), "data.dev": held, "data.held_out_styles": list(held_out_styles or [])}
        return [
            *world,
            coldstart,
            {"name": "split", "kind": "data", "op": "split", "data": real_qa, "args": {"heldout": heldout}},
            {"name": "index", "kind": "data", "op": "index", "data": corpus},
            _eval("coldstart_eval", held, eval_limit, init_from="${coldstart}"),
            {
                "name": "rl",
                "kind": "rl",
                "init_from": "${coldstart}",
                "data": "${split}/train.jsonl",
                "set": _rl_set(steps, smoke, rl_set),
            },
            _eval("eval", held, eval_limit),
        ]
    raise ValueError(f"unknown setting {setting!r}; choose one of {', '.join(SETTINGS)}")


def real_inputs(setting: str, real: str | None, qa: str | None) -> tuple[Path | None, str | None]:
    """The real data directory and its QA file name, checked; (None, None) for a setting that needs none."""
    if setting == "held_out_kind":
        return None, None
    if real is None:
        raise SystemExit(
            f"--setting {setting} needs real questions: pass --real DIR, a directory with a FlashRAG QA file "
            "(--qa, default train.jsonl or dev.jsonl) and corpus.jsonl, e.g. a 2WikiMultihopQA sample"
        )
    d = Path(real).expanduser().resolve()
    if qa is None:
        qa = next((f for f in ("train.jsonl", "dev.jsonl", "test.jsonl") if (d / f).exists()), None)
    missing = [str(d / f) for f in (qa or "train.jsonl or dev.jsonl", "corpus.jsonl") if not (d / f).exists()]
    if missing:
        raise SystemExit(f"--real {real}: {' and '.join(missing)} not found; give a directory holding both")
    return d, qa


def choose_held_out(real: Path, qa: str, heldout: int, fraction: float) -> dict:
    """held_out_template's styles: the rarest ``fraction`` of the training part's templates, and what RL trains on."""
    from searchrl.data.loaders import load_qa
    from searchrl.data.splits import heldout_split
    from searchrl.data.styles import rarest_styles, style_counts

    train, _ = heldout_split(load_qa(str(real / qa)), heldout)  # the split stage's rule: the same questions
    held = rarest_styles(train, fraction)
    counts = style_counts(train)
    return {
        "held_out_styles": held,
        "trained_styles": sorted(set(counts) - set(held)),
        "train_questions": len(train),
        "train_questions_held_out": sum(counts[s] for s in held),
    }


# ------------------------------------------------------------------------------------------------- report


def predictions(out: Path, stage: str, method: str = "agent") -> list[dict]:
    """One method's per-question rows of an eval stage."""
    files = sorted((out / stage / "predictions").glob(f"*__{method}.jsonl"))
    if not files:
        raise SystemExit(f"{out / stage}: no {method} predictions; run the setting first (without --collect)")
    return [json.loads(line) for f in files for line in f.read_text(encoding="utf-8").splitlines() if line.strip()]


def scores(items: list[dict]) -> dict:
    """n and the mean EM / F1 / cover-EM of some predictions rows (None when there are none)."""
    out: dict = {"n": len(items)}
    for m in SCORES:
        vals = [it["metrics"][m] for it in items if it["metrics"].get(m) is not None]
        out[m] = fmean(vals) if vals else None
    return out


def grouped(items: list[dict], key: Callable[[dict], str]) -> dict[str, dict]:
    groups: dict[str, list[dict]] = {}
    for it in items:
        groups.setdefault(key(it), []).append(it)
    return {g: scores(rows) for g, rows in sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0]))}


def _sides(setting: str, info: dict) -> tuple[Callable[[dict], str], Callable[[dict], str], str]:
    """(in_style or held_out of a predictions row, its group in the breakdown, the breakdown's name)."""
    if setting == "held_out_kind":
        held = set(info["held_out_styles"])

        def kind_side(it: dict) -> str:
            return "held_out" if it.get("kind") in held or it.get("style") in held else "in_style"

        return kind_side, lambda it: it.get("kind") or "-", "by_kind"
    trained = set(info["trained_styles"])

    def style_side(it: dict) -> str:
        return "in_style" if it.get("style") in trained else "held_out"

    return style_side, lambda it: f"{style_side(it)}: {it.get('style')}", "by_style"


def collect(out: Path, setting: str, info: dict) -> dict:
    """In-style / held-out scores of the cold start and of the RL model, and the per kind or style breakdown."""
    models = {"coldstart": "coldstart_eval", "rl": "eval"}
    if setting == "world_to_real":  # in style: the world's dev questions; held out: every real question
        res = {
            model: {
                "in_style": scores(predictions(out, stage)),
                "held_out": scores(predictions(out, f"{stage}_real")),
                "by_kind": grouped(predictions(out, stage), lambda it: it.get("kind") or "-"),
            }
            for model, stage in models.items()
        }
        # naive RAG with the RL model on the same real questions: the retrieval-alone line the agent must beat
        res["rl"]["naive_rag_held_out"] = scores(predictions(out, "eval_real", "naive_rag"))
        return res
    side, key, by = _sides(setting, info)
    res = {}
    for model, stage in models.items():
        items = predictions(out, stage)
        res[model] = {
            "in_style": scores([it for it in items if side(it) == "in_style"]),
            "held_out": scores([it for it in items if side(it) == "held_out"]),
            by: grouped(items, key),
        }
    return res


def _f(v: float | None) -> str:
    return "-" if v is None else f"{100 * v:.1f}"


DESCRIPTIONS = {
    "world_to_real": "the cold start and GRPO on the synthetic world only; in style: the world's dev questions, held "
    "out: real questions (`--real`), searched through their own BM25 index",
    "held_out_kind": "the cold start and GRPO on the synthetic world without one question kind "
    "(`data.held_out_styles`); in style: the world's dev questions of the other kinds, held out: that kind's",
    "held_out_template": "the world cold start, then GRPO on the real training questions without their rarest "
    "templates (`data.held_out_styles`); in style: held-out questions of a template RL trained on, held out: the "
    "others (removed from training, or absent from it)",
}


def report(res: dict) -> str:
    meta, runs = res["meta"], res["runs"]
    lines = [
        f"# Transfer to held-out question styles: {meta['setting']}",
        "",
        f"{meta['date']}, {meta['machine']}, load average {meta['load_avg'][0]:.1f} at the end; the stages took "
        f"{meta['wall_s']:.0f} s. "
        f"`{meta['bench_command']}`: `searchrl run --recipe {meta['recipe']}` with {DESCRIPTIONS[meta['setting']]}. "
        f"Held out: {', '.join(f'`{s}`' for s in meta['held_out_styles']) or 'every real question'}. "
        "The agent, greedy, before RL (the cold start) and after; scores in %. One run.",
        "",
        "| model | in-style n | in-style EM | in-style F1 | in-style cover-EM | held-out n | held-out EM "
        "| held-out F1 | held-out cover-EM |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for model, r in runs.items():
        a, b = r["in_style"], r["held_out"]
        lines.append(
            f"| {model} | {a['n']} | "
            + " | ".join(_f(a[m]) for m in SCORES)
            + f" | {b['n']} | "
            + " | ".join(_f(b[m]) for m in SCORES)
            + " |"
        )
    rag = runs["rl"].get("naive_rag_held_out")
    if rag:
        lines.append(f"| naive RAG (RL model) | | | | | {rag['n']} | " + " | ".join(_f(rag[m]) for m in SCORES) + " |")
    by = next(k for k in runs["rl"] if k.startswith("by_"))
    label = by.removeprefix("by_")
    where = " of the world's dev questions" if meta["setting"] == "world_to_real" else ""
    lines += ["", f"Per {label}{where}:", ""]
    lines += [
        f"| {label} | n | " + " | ".join(f"{LABELS[m]} before RL | {LABELS[m]} after RL" for m in SCORES) + " |",
        "|---|---:|" + "---:|---:|" * len(SCORES),
    ]
    for group, after in runs["rl"][by].items():
        before = runs["coldstart"][by].get(group, {})
        cells = " | ".join(f"{_f(before.get(m))} | {_f(after[m])}" for m in SCORES)
        lines.append(f"| {group.replace('|', '/')} | {after['n']} | {cells} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--setting", required=True, choices=SETTINGS)
    ap.add_argument("--out", default=None, help="the run directory (default runs/transfer_<setting>[_smoke])")
    ap.add_argument("--real", default=None, help="world_to_real, held_out_template: a directory of real questions")
    ap.add_argument("--qa", default=None, help="the QA file in --real (default train.jsonl, else dev.jsonl)")
    ap.add_argument("--hold-out", default="three_hop", choices=KINDS, help="held_out_kind: the kind held out")
    ap.add_argument(
        "--heldout",
        type=int,
        default=100,
        help="world_to_real, held_out_template: questions held out of the QA file (its split)",
    )
    ap.add_argument("--hold-out-fraction", type=float, default=1 / 3, help="held_out_template: share of templates")
    ap.add_argument("--steps", type=int, default=None, help="RL steps (default: the recipe's)")
    ap.add_argument("--eval-limit", type=int, default=100, help="questions per evaluation")
    ap.add_argument("--profile", default=None, help="a profile for the recipe (--smoke: laptop)")
    ap.add_argument(
        "--relations",
        choices=("fixed", "open"),
        default=None,
        help="the world's relations (default: open for world_to_real, where open relations carried over better to "
        "real questions; fixed otherwise)",
    )
    ap.add_argument("--smoke", action="store_true", help="tiny sizes; prints, writes no result")
    ap.add_argument("--collect", action="store_true", help="only rebuild the report from an existing run")
    args = ap.parse_args()
    real, qa = real_inputs(args.setting, args.real, args.qa)
    if args.smoke:
        args.steps, args.eval_limit, args.heldout, args.profile = 1, 3, min(args.heldout, 20), "laptop"
    out = Path(args.out or ROOT / "runs" / f"transfer_{args.setting}{'_smoke' if args.smoke else ''}")
    if args.collect:
        info = json.loads((out / SETTING_FILE).read_text())
    elif args.setting == "held_out_template":
        assert real is not None and qa is not None
        info = choose_held_out(real, qa, args.heldout, args.hold_out_fraction)
    else:
        info = {"held_out_styles": [args.hold_out] if args.setting == "held_out_kind" else []}
    stages = pipeline(
        args.setting,
        steps=args.steps,
        eval_limit=args.eval_limit,
        smoke=args.smoke,
        hold_out=args.hold_out,
        real=real,
        qa=qa,
        heldout=args.heldout,
        held_out_styles=info["held_out_styles"],
        relations=args.relations or ("open" if args.setting == "world_to_real" else "fixed"),
    )
    recipe = RECIPES[args.setting]
    cmd = [sys.executable, "-m", "searchrl", "run", "--recipe", recipe, "--out", str(out)]
    cmd += ["--profile", args.profile] if args.profile else []
    if not args.collect:
        out.mkdir(parents=True, exist_ok=True)
        (out / SETTING_FILE).write_text(json.dumps(info, indent=1) + "\n")
        subprocess.run([*cmd, "pipeline=" + json.dumps(stages)], check=True)
    ran = json.loads((out / "summary.json").read_text())["stages"]
    stage_seconds = {s["name"]: s["seconds"] for s in ran}
    res = {
        "meta": {
            "setting": args.setting,
            "recipe": recipe,
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "machine": f"{platform.machine()}, {len(os.sched_getaffinity(0))} CPUs",
            "load_avg": list(os.getloadavg()),
            "wall_s": round(sum(stage_seconds.values()), 1),  # the stages' own times (when they ran)
            "stage_seconds": stage_seconds,
            "bench_command": " ".join(["python", *sys.argv]),
            "command": " ".join(cmd) + f" pipeline=<{', '.join(s['name'] for s in stages)}>",
            "smoke": args.smoke,
            **info,
        },
        "runs": collect(out, args.setting, info),
    }
    text = report(res)
    if args.smoke:  # a smoke run's numbers say nothing: printed, never written as a result
        print(json.dumps(res, indent=1))
    else:
        write_portable(RESULTS / f"transfer_{args.setting}.json", json.dumps(res, indent=1))
        write_portable(RESULTS / f"transfer_{args.setting}.md", text)
    print(text)


if __name__ == "__main__":
    main()
