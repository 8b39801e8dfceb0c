"""``searchrl data``: generate a synthetic world, split and inspect QA files and corpora.

The commands that build training data (``oracle``, ``rejection-sample``, ``select-difficulty``) live in
:mod:`searchrl.commands.data_build` and are attached to this sub-app too.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from searchrl.commands.common import FIELD, field_map, not_an_input, writable_dir, writable_file

app = typer.Typer(
    help="Datasets and corpora: generate a synthetic world, inspect QA files and corpora.\n\n"
    "Example: searchrl data inspect hf:RUC-NLPIR/FlashRAG_datasets:nq:test --limit 100",
    no_args_is_help=True,
)
#: results go to stdout (logs and progress go to stderr through searchrl.utils.console); questions, passages and file
#: names are shown as written: no rich markup ("[/b]" would end the listing with an error, "[citation needed]"
#: would vanish) and no emoji codes (":100:")
out = Console(markup=False, emoji=False)

_WORLD_FILES = ("corpus.jsonl", "train.jsonl", "dev.jsonl", "test.jsonl")


@app.command("synth")
def synth(
    out_dir: Path = typer.Option(
        ..., "--out", help="directory to write corpus.jsonl, train/dev/test.jsonl, world.json", callback=writable_dir
    ),
    entities: int = typer.Option(600, "--entities", help="number of entities (one passage each)"),
    seed: int = typer.Option(0, "--seed", help="random seed; the same seed gives byte-identical files"),
    surface: str = typer.Option(
        "fixed", "--surface", help="question wording: fixed (one per question shape) or varied (several per shape)"
    ),
    relations: str = typer.Option(
        "fixed", "--relations", help="fixed (the world's twelve relations) or open (also a broad pool of further ones)"
    ),
    yes_no: float = typer.Option(
        0.0, "--yes-no", help="share of comparison questions asked as yes/no ('Were A and B born in the same city?')"
    ),
    bridge_comparisons: float = typer.Option(
        0.0,
        "--bridge-comparisons",
        help="share of comparison questions comparing by a year one hop away ('Which film has the director who...')",
    ),
    deaths: bool = typer.Option(
        False, "--deaths", help="also compare people, and works by their creators, on the year they died"
    ),
) -> None:
    """Generate a synthetic multi-hop world: a fictional encyclopedia plus train/dev/test questions.

    Example: searchrl data synth --out data/world --entities 2000 --seed 0
    """
    from searchrl.stages import synth_world

    t0 = time.perf_counter()
    if surface not in ("fixed", "varied"):
        raise typer.BadParameter(f"{surface!r}: use fixed or varied", param_hint="--surface")
    if relations not in ("fixed", "open"):
        raise typer.BadParameter(f"{relations!r}: use fixed or open", param_hint="--relations")
    from searchrl.data.synth import check_comparison_shares

    try:
        check_comparison_shares(yes_no, bridge_comparisons)
    except ValueError as err:
        raise typer.BadParameter(str(err), param_hint="--yes-no / --bridge-comparisons") from err
    world = synth_world(out_dir, entities, seed, surface, relations, yes_no, bridge_comparisons, deaths)
    seconds = time.perf_counter() - t0
    summary = world.summary()
    table = Table("split", "single_hop", "bridge", "three_hop", "comparison", "total", title="questions")
    for split, counts in summary["questions"].items():
        table.add_row(split, *(str(counts[k]) for k in ("single_hop", "bridge", "three_hop", "comparison", "total")))
    words = summary["passage_words"]
    out.print(
        f"world: {summary['entities']} entities {summary['entity_kinds']}, {summary['passages']} passages "
        f"({words['min']}-{words['max']} words, mean {words['mean']}), seed {seed}, {seconds:.2f} s"
    )
    out.print(table)
    files = sorted(p.name for p in Path(out_dir).iterdir() if p.is_file())
    out.print(f"wrote {', '.join(files)} to {Path(out_dir).resolve()}")


@app.command("split")
def split(
    source: str = typer.Argument(..., help="QA file (FlashRAG / R1-Searcher JSONL) or hf:NAME[:CONFIG]:SPLIT"),
    out_dir: Path = typer.Option(
        ..., "--out", help="directory to write train.jsonl and heldout.jsonl", callback=writable_dir
    ),
    heldout: int = typer.Option(100, "--heldout", help="questions to hold out"),
    fields: list[str] = FIELD,
) -> None:
    """Split a QA file into train.jsonl and heldout.jsonl by a fixed rule: the questions with the smallest SHA-256 of
    their id are held out (no seed, independent of row order).

    The files written name the parts as usual (id, question, golden_answers), whatever --field mapped.

    Example: searchrl data split data/2wiki/dev.jsonl --out runs/2wiki --heldout 100
    """
    from searchrl.stages import split_questions

    not_an_input(out_dir / "train.jsonl", [source])
    not_an_input(out_dir / "heldout.jsonl", [source])
    train, held = split_questions(source, out_dir, heldout, fields=field_map(fields))
    out.print(f"{train} train, {held} held-out questions in {out_dir}")


@app.command("contexts")
def contexts(
    sources: list[str] = typer.Argument(..., help="QA files (or hf:NAME[:CONFIG]:SPLIT) whose rows carry passages"),
    out_file: Path = typer.Option(..., "--out", help="corpus JSONL to write ({id, contents})", callback=writable_file),
) -> None:
    """Write a corpus of the passages the questions ship with: HotpotQA's and 2WikiMultiHopQA's context, MuSiQue's
    paragraphs, DPR's ctxs. Each distinct title and text is one passage with a content-hash id; index it with
    searchrl index build.

    Example: searchrl data contexts hotpot_dev_distractor_v1.json --out runs/hotpot/corpus.jsonl
    """
    from searchrl.data.contexts import shipped_passages
    from searchrl.data.corpus import write_corpus
    from searchrl.data.loaders import iter_rows

    not_an_input(out_file, sources)
    rows = (row for source in sources for row in iter_rows(source))  # answers not needed: test sets have none
    n = write_corpus(out_file, shipped_passages(rows))
    out.print(f"{n} passage{'' if n == 1 else 's'} from {', '.join(sources)} in {out_file}")


@dataclass
class _Range:
    """Running min / mean / max without keeping the values."""

    n: int = 0
    total: float = 0.0
    lo: float = float("inf")
    hi: float = float("-inf")

    def add(self, x: float) -> None:
        self.n, self.total, self.lo, self.hi = self.n + 1, self.total + x, min(self.lo, x), max(self.hi, x)

    def __str__(self) -> str:
        return "-" if not self.n else f"min {self.lo:g} / mean {self.total / self.n:.1f} / max {self.hi:g}"


@dataclass
class _QAStats:
    count: int = 0
    question_words: _Range = field(default_factory=_Range)
    answers: _Range = field(default_factory=_Range)
    hops: Counter = field(default_factory=Counter)
    kinds: Counter = field(default_factory=Counter)
    styles: Counter = field(default_factory=Counter)
    metadata_keys: Counter = field(default_factory=Counter)
    duplicate_ids: int = 0


def _kind_of_fields(fields: Iterable[str]) -> str | None:
    """'sft' for SFT data (token ids or a whole response), 'qa' when the fields name a question (in any case; verl's
    rows keep theirs in ``prompt``), 'corpus' when they name passage text, else None."""
    from searchrl.data.fields import QUESTION_FIELDS

    names = {str(f).strip().lower() for f in fields}
    if names & {"prompt_ids", "action_mask", "response", "completion", "messages", "conversations"}:
        return "sft"  # trajectories, step-level samples or text SFT rows (searchrl.sft.text_data)
    if {"instruction", "output"} <= names:
        return "sft"  # LLaMA-Factory's alpaca rows
    if names & set(QUESTION_FIELDS):
        return "qa"
    return "corpus" if names & {"contents", "wikipedia_title", "text"} else None


def _first_row_kind(source: str | Path) -> str:
    """'qa' or 'corpus' of a ``.json`` array or an ``hf:`` dataset, from its first row (a question file unless the
    row is a passage)."""
    from searchrl.data.loaders import iter_rows

    return _kind_of_fields(next((row for _, row in iter_rows(source)), {})) or "qa"


def _detect(path: Path) -> str:
    """'qa' or 'corpus', from the first row's fields (``.csv`` tables are QA files, as the datasets release them; a
    ``.tsv`` is a QA table when its header names a question, else a corpus)."""
    from searchrl.data.corpus import is_tsv

    if path.suffix == ".json":  # an array of questions (HotpotQA, 2Wiki) or of passages
        return _first_row_kind(path)
    if path.suffix == ".csv":
        return "qa"
    if is_tsv(path):  # a header that names a question: a QA table
        from searchrl.utils import open_lines

        header = next((line for _, line in open_lines(path)), "").lstrip("\ufeff").rstrip("\r\n")
        return "qa" if _kind_of_fields(header.split("\t")) == "qa" else "corpus"
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        fields = set(pq.ParquetFile(path).schema_arrow.names)
    else:
        from searchrl.utils import open_lines

        fields = set()
        for i, line in open_lines(path):  # .jsonl or .jsonl.gz
            if line.strip():
                try:
                    fields = set(json.loads(line))
                except (json.JSONDecodeError, TypeError):
                    raise ValueError(f"{path}:{i}: not a JSON object; inspect reads JSONL or parquet") from None
                break
    if kind := _kind_of_fields(fields):
        return kind
    if not fields:
        raise ValueError(f"{path}: no rows; give a QA file or a corpus with at least one JSON object per line")
    raise ValueError(
        f"{path}: cannot tell a QA file (needs 'question', 'query' or 'input') from a corpus (needs 'contents', "
        f"'text' or 'wikipedia_title'); first row has fields {sorted(fields)}: for a QA file under other names, "
        "name them with --field question=NAME --field answers=NAME"
    )


def _inspect_qa(
    source: str | Path, n: int, limit: int | None, styles: bool = False, fields: dict[str, str] | None = None
) -> None:
    from searchrl.data.loaders import iter_qa
    from searchrl.data.styles import question_style

    stats, seen, samples = _QAStats(), set(), []
    for ex in iter_qa(source, fields=fields):
        stats.count += 1
        stats.duplicate_ids += ex.id in seen or "id_in_file" in ex.metadata  # made unique on loading, or not
        seen.add(ex.id)
        stats.question_words.add(len(ex.question.split()))
        stats.answers.add(len(ex.answers))
        if ex.kind:
            stats.kinds[ex.kind] += 1
        stats.styles[question_style(ex)] += 1
        if isinstance(ex.metadata.get("chain"), list):
            stats.hops[len(ex.metadata["chain"])] += 1
        stats.metadata_keys.update(ex.metadata.keys())
        if len(samples) < n:
            samples.append(ex)
        if limit is not None and stats.count >= limit:
            break
    table = Table("statistic", "value", title=f"QA: {source}" + (f" (first {limit} rows)" if limit else ""))
    table.add_row("questions", f"{stats.count:,}")
    table.add_row("duplicate ids", str(stats.duplicate_ids))
    table.add_row("words per question", str(stats.question_words))
    table.add_row("answers per question", str(stats.answers))
    if stats.kinds:
        table.add_row("kinds", ", ".join(f"{k} {v}" for k, v in sorted(stats.kinds.items())))
    top = ", ".join(f"{s!r} {c}" for s, c in stats.styles.most_common(3))
    table.add_row("question styles", f"{len(stats.styles):,} (most common: {top}; --styles lists them all)")
    if stats.hops:
        table.add_row("hops in chain", ", ".join(f"{k}: {v}" for k, v in sorted(stats.hops.items())))
    if stats.metadata_keys:
        table.add_row("metadata fields", ", ".join(f"{k} ({v})" for k, v in stats.metadata_keys.most_common(12)))
    out.print(table)
    rows = Table("id", "question", "answers", "kind", title="samples")
    for ex in samples:
        rows.add_row(ex.id, ex.question, " | ".join(ex.answers), ex.kind or "")
    out.print(rows)
    if styles:
        listed = Table("style", "questions", "share", title="question styles (data.styles, data.held_out_styles)")
        for style, count in sorted(stats.styles.items(), key=lambda sc: (-sc[1], sc[0])):
            listed.add_row(style, str(count), f"{count / stats.count:.1%}")
        out.print(listed)


def _inspect_sft(path: Path, n: int, limit: int | None) -> None:
    """SFT data: trajectories (``searchrl data oracle`` / ``rejection-sample`` / ``text``), step-level samples
    (``--slice``) or text rows, counted by layout with their token counts and searches."""
    from searchrl.sft.text_data import is_text_row, sft_rows, text_layout

    layouts, stops, searches = Counter(), Counter(), Counter()
    prompt, target, trained, samples, count = _Range(), _Range(), _Range(), [], 0
    for _, row in sft_rows(path):
        count += 1
        if is_text_row(row):
            layouts["text: " + text_layout(row)] += 1
        elif "action_mask" in row:
            layouts["trajectory"] += 1
            stops[row.get("stop_reason") or "-"] += 1
            searches[sum(t.get("action") == "search" for t in row.get("turns") or [])] += 1
            prompt.add(len(row.get("prompt_ids") or []))
            target.add(len(row.get("response_ids") or []))
            trained.add(sum(row["action_mask"]))
        else:
            layouts[f"step-level: {row.get('kind', '-')}"] += 1
            prompt.add(len(row.get("prompt_ids") or []))
            target.add(len(row.get("response_ids") or []))
            trained.add(sum(row.get("loss_mask") or []))
        if len(samples) < n:
            samples.append(row)
        if limit is not None and count >= limit:
            break
    table = Table("statistic", "value", title=f"SFT data: {path}" + (f" (first {limit} rows)" if limit else ""))
    table.add_row("rows", f"{count:,}")
    table.add_row("layouts", ", ".join(f"{k} {v}" for k, v in layouts.most_common()))
    if prompt.n:
        table.add_row("prompt tokens", str(prompt))
        table.add_row("response tokens", str(target))
        table.add_row("tokens trained on", str(trained))
    if searches:
        table.add_row("searches per trajectory", ", ".join(f"{k}: {v}" for k, v in sorted(searches.items())))
        table.add_row("stop reasons", ", ".join(f"{k} {v}" for k, v in stops.most_common()))
    out.print(table)
    rows = Table("id", "question (or a sample's kind)", title="samples")
    for row in samples:
        ident = row.get("uid") or row.get("id") or row.get("source_uid") or "-"
        rows.add_row(str(ident), str(row.get("question") or row.get("kind") or "")[:200])
    out.print(rows)


def _inspect_corpus(path: Path | str, n: int, limit: int | None) -> None:
    from searchrl.data.corpus import hf_passages, iter_passages

    count, words, titles, empty_titles, samples = 0, _Range(), Counter(), 0, []
    for p in hf_passages(path) if str(path).startswith("hf:") else iter_passages(path):
        count += 1
        words.add(len(p.text.split()))
        titles[p.title] += 1
        empty_titles += not p.title
        if len(samples) < n:
            samples.append(p)
        if limit is not None and count >= limit:
            break
    per_title = _Range()
    for c in titles.values():
        per_title.add(c)
    table = Table("statistic", "value", title=f"corpus: {path}" + (f" (first {limit} passages)" if limit else ""))
    table.add_row("passages", f"{count:,}")
    table.add_row("words per passage", str(words))
    table.add_row("distinct titles", f"{len(titles.keys() - {''}):,}")
    table.add_row("passages per title", str(per_title))
    table.add_row("passages without a title", str(empty_titles))
    out.print(table)
    rows = Table("id", "title", "text", title="samples")
    for p in samples:
        rows.add_row(p.id, p.title, p.text if len(p.text) <= 160 else p.text[:157] + "...")
    out.print(rows)


@app.command("inspect")
def inspect(
    path: str = typer.Argument(
        ..., help="a QA file or corpus (JSONL/parquet), a world directory, or hf:NAME[:CONFIG]:SPLIT"
    ),
    n: int = typer.Option(3, "--n", help="sample rows to show"),
    limit: int | None = typer.Option(None, "--limit", help="read at most this many rows (for huge corpora)"),
    styles: bool = typer.Option(False, "--styles", help="list every question style of a QA file with its count"),
    fields: list[str] = FIELD,
) -> None:
    """Print counts, field statistics and sample rows of a QA file, a corpus or SFT data (detected from the fields).

    Example: searchrl data inspect data/world/dev.jsonl --n 5 --styles
    """
    mapping = field_map(fields)  # a mapping says the file holds questions
    if path.startswith("hf:"):
        if mapping or _first_row_kind(path) == "qa":
            _inspect_qa(path, n, limit, styles, mapping)
        else:
            _inspect_corpus(path, n, limit)
        return
    p = Path(path).expanduser()
    if not p.exists():
        raise FileNotFoundError(f"nothing to inspect at {p}; give a JSONL/parquet file or a world directory")
    files = [p / f for f in _WORLD_FILES if (p / f).exists()] if p.is_dir() else [p]
    if not files:
        raise FileNotFoundError(f"{p} holds none of {', '.join(_WORLD_FILES)}; pass a file instead")
    for f in files:
        kind = "qa" if mapping and not p.is_dir() else _detect(f)  # in a world directory the corpus stays a corpus
        if kind == "sft":
            _inspect_sft(f, n, limit)
        elif kind == "qa":
            _inspect_qa(f, n, limit, styles, mapping)
        else:
            _inspect_corpus(f, n, limit)
