"""The multi-hop curriculum on the synthetic world, per question kind.

    python benchmarks/bench_multihop_world.py [--run] [--recipe multihop_world] [--out runs/multihop_world]
                                              [--cold coldstart_eval --rl rl --eval eval] [overrides...]

With ``--run`` it first runs ``searchrl run --recipe multihop_world --out OUT [overrides]`` (finished stages are
skipped). It then reads what the run measured, nothing typed in by hand:

- each stage's wall time and CPU time (``OUT/<stage>/DONE``);
- the agent's greedy EM per question kind on the world's dev questions after the cold start (``--cold`` stage)
  and after RL (``--eval`` stage), and over the multi-hop kinds together (bridge, comparison, three-hop);
- the RL curve (``--rl`` stage's ``metrics.jsonl``);

and writes ``benchmarks/results/<recipe>.{json,md}``, the curve PNGs and a viewer page of the dev trajectories
after RL into ``benchmarks/results/<recipe>/`` (``--recipe multihop_world_tool_call``: the same report for the
JSON tool-call variant, whose well-formed column is the share of well-formed tool-call trajectories).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path

from searchrl.utils import write_portable

RESULTS = Path(__file__).parent / "results"
MULTI_HOP = ("bridge", "comparison", "three_hop")
KEYS = ("n", "em", "f1", "well_formed", "searches")


def per_kind(summary: dict) -> dict[str, dict]:
    """``{kind: {n, em, ...}}`` of the agent rows, plus ``all`` and ``multi_hop`` (the n-weighted mean of the
    multi-hop kinds)."""
    kinds = {r["kind"]: {k: r.get(k) for k in KEYS} for r in summary.get("by_kind", []) if r["method"] == "agent"}
    out = {"all": {k: v for k, v in next(r for r in summary["rows"] if r["method"] == "agent").items() if k in KEYS}}
    multi = [kinds[k] for k in MULTI_HOP if k in kinds]
    n = sum(m["n"] for m in multi)
    if n:
        out["multi_hop"] = {"n": n, **{k: sum(m[k] * m["n"] for m in multi) / n for k in KEYS if k != "n"}}
    return {**out, **dict(sorted(kinds.items()))}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--run", action="store_true", help="run (or resume) the pipeline first")
    ap.add_argument("--recipe", default="multihop_world", help="the recipe; names the report")
    ap.add_argument("--out", default=None, help="the run directory (default runs/<recipe>)")
    ap.add_argument("--cold", default="coldstart_eval", help="the stage that evaluates the cold start")
    ap.add_argument("--rl", default="rl", help="the RL stage (comma-separated: RL stages that continue each other)")
    ap.add_argument("--eval", default="eval", help="the stage that evaluates the final RL model")
    ap.add_argument("--mid", default="", help="comma-separated evaluations of intermediate RL models (extra rows)")
    ap.add_argument("--results", default=str(RESULTS), help="where the report goes")
    ap.add_argument("--command", help="the command that made OUT, for the report (default: the --run command)")
    ap.add_argument("overrides", nargs="*", help="overrides for --run, e.g. training.steps=8")
    args = ap.parse_args()
    out, results = Path(args.out or f"runs/{args.recipe}"), Path(args.results)
    command = ["searchrl", "run", "--recipe", args.recipe, "--out", str(out), *args.overrides]
    if args.run:
        subprocess.run([str(Path(sys.executable).parent / "searchrl"), *command[1:]], check=True)

    import yaml

    order = [st["name"] for st in yaml.safe_load((out / "config.yaml").read_text())["pipeline"]]
    stages = {}
    for name in order:
        if (out / name / "DONE").exists():
            done = json.loads((out / name / "DONE").read_text())
            stages[name] = {"seconds": done["seconds"], "cpu_seconds": done.get("cpu_seconds")}
    before = per_kind(json.loads((out / args.cold / "summary.json").read_text()))
    after = per_kind(json.loads((out / args.eval / "summary.json").read_text()))
    mids = {m: per_kind(json.loads((out / m / "summary.json").read_text())) for m in args.mid.split(",") if m}
    rl_stages = args.rl.split(",")
    metrics = []  # the RL stages' steps, numbered on from one stage to the next
    for name in rl_stages:
        offset = metrics[-1]["step"] if metrics else 0
        rows = [json.loads(line) for line in (out / name / "metrics.jsonl").open()]
        metrics += [{**m, "step": m["step"] + offset, "stage": name} for m in rows if "step" in m]
    curve_keys = ("reward/total", "rollout/em", "rollout/well_formed", "rollout/searches", "kl/mean", "time/step_s")
    result = {
        "recipe": args.recipe,
        "command": args.command or " ".join(command),
        "stages": stages,
        "coldstart_seconds": stages.get("coldstart", {}).get("seconds"),
        "rl_seconds": sum(stages.get(n, {}).get("seconds") or 0 for n in rl_stages),
        "before_rl": before,
        "intermediate": mids,
        "after_rl": after,
        "gain": {k: round(after[k]["em"] - before[k]["em"], 3) for k in before if k in after},
        "rl_curve": [{"step": m["step"], "stage": m["stage"], **{k: m.get(k) for k in curve_keys}} for m in metrics],
    }
    art = results / args.recipe
    art.mkdir(parents=True, exist_ok=True)
    from searchrl.viz.plots import plot_run
    from searchrl.viz.viewer import write_viewer

    for name in rl_stages:
        shutil.copy(plot_run(out / name), art / f"{name}_curves.png")
    shutil.copy(plot_run(out / "coldstart"), art / "coldstart_curves.png")
    preds = sorted((out / args.eval / "predictions").glob("*agent*.jsonl"))
    if preds:
        write_viewer(preds, art / "dev_trajectories.html", title=f"{args.recipe}: world dev trajectories after RL")
    write_portable(results / f"{args.recipe}.json", json.dumps(result, indent=2) + "\n")
    write_portable(results / f"{args.recipe}.md", render(result))
    print(render(result))


def _f(x) -> str:
    return "-" if x is None else f"{x:.3f}"


def render(r: dict) -> str:
    b, a, name = r["before_rl"], r["after_rl"], r.get("recipe", "multihop_world")
    kinds = [k for k in b if k not in ("all", "multi_hop")]
    cols = [*kinds, "multi_hop", "all"]
    head = " | ".join(f"{k} ({b[k]['n']})" for k in cols if k in b)
    lines = [
        f"# {name}: the curriculum on the synthetic world, per question kind",
        "",
        f"Command: `{r['command']}` (report: `python benchmarks/bench_multihop_world.py --out ...`). World dev "
        "questions, greedy, BM25 top-3, the `searchrl eval` harness.",
        "",
        f"| agent EM | {head} | searches/q | well-formed |",
        "|---" * (len(cols) + 3) + "|",
    ]
    rows = [("cold start (SFT)", b), *((f"after {m}", v) for m, v in r["intermediate"].items()), ("after RL", a)]
    for label, v in rows:
        lines.append(
            f"| {label} | "
            + " | ".join(_f(v[k]["em"]) for k in cols if k in v)
            + f" | {_f(v['all']['searches'])} | {_f(v['all'].get('well_formed'))} |"
        )
    lines.append("| RL gain | " + " | ".join(f"{r['gain'][k]:+.3f}" for k in cols if k in r["gain"]) + " | | |")
    lines += ["", "Stage times (2 cores):", "", "| stage | wall s | CPU s |", "|---|---|---|"]
    for k, v in r["stages"].items():
        cpu = v.get("cpu_seconds")
        lines.append(f"| {k} | {v['seconds']:.0f} | {'-' if cpu is None else f'{cpu:.0f}'} |")
    lines += [
        "",
        "Curves: "
        + ", ".join(f"[{s}]({name}/{s}_curves.png)" for s in dict.fromkeys(c["stage"] for c in r["rl_curve"]))
        + f", [cold start]({name}/coldstart_curves.png); dev "
        f"trajectories after RL: [{name}/dev_trajectories.html]({name}/dev_trajectories.html).",
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
