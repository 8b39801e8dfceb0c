"""QA loading: the field's dataset layouts -> one record type, :class:`~searchrl.data.records.QAExample`.

Accepted sources:

- a JSONL file (``.jsonl.gz`` too, ``.parquet``, ``.csv`` / ``.tsv``, or ``.json`` holding one array of rows) in
  FlashRAG layout ``{"id", "question", "golden_answers": [...]}`` or R1-Searcher layout ``{"question", "answer": str |
  [str]}``. The datasets' own releases load as they come: an ``answers`` list (Natural Questions open), HotpotQA's and
  2WikiMultiHopQA's ``_id``, MuSiQue's ``answer_aliases`` (added to the gold answers), TriviaQA's ``answer: {"value",
  "aliases"}``, SQuAD's ``answers: {"text": [...]}`` and PopQA's ``possible_answers`` (a JSON list in a string).
  Search-R1's (verl's) parquet rows load from their prompt's text after ``Question:`` and
  ``reward_model.ground_truth.target``; capitalised fields (Bamboogle's ``.csv``, TriviaQA's ``.json``) too, and
  DPR's header-less ``question<TAB>["answer", ...]`` files. A CSV answer cell may hold a list; booleans are yes/no. The
  question may also be named ``query``, ``problem`` (SimpleQA, BrowseComp), ``input`` (KILT, whose ``output``
  answers are the gold answers) or ``prompt`` (Frames). Rows without an id get ``<file stem>-<line>``;
- a directory: ``<dir>/<split>.jsonl`` (or ``.json``, ``.parquet``; e.g. a synthetic world), or a dataset saved
  with ``save_to_disk``;
- ``hf:NAME[:CONFIG]:SPLIT``, e.g. ``hf:RUC-NLPIR/FlashRAG_datasets:hotpotqa:dev``, read with
  ``datasets.load_dataset`` (NAME may also be a local dataset directory). Hub downloads use huggingface_hub's
  timeouts (``HF_HUB_ETAG_TIMEOUT`` / ``HF_HUB_DOWNLOAD_TIMEOUT``, 10 s by default).

Fields other than id/question/answers are kept in ``metadata`` (merged with a ``metadata`` field if there is one).
A malformed row raises ``ValueError`` naming ``file:line``, the missing field and the layouts that are expected.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from rich.markup import escape

from searchrl.config.base import check_fields
from searchrl.data.fields import (
    ALIAS_FIELDS,
    ANSWER_FIELDS,
    ID_FIELDS,
    LIST_CELLS,
    QUESTION_FIELDS,
    mapped,
    note_question_field,
)
from searchrl.data.records import QAExample
from searchrl.utils import MissingDependency, console, error_line, lone_surrogate, open_lines

_EXPECTED = "expected FlashRAG {id, question, golden_answers} or R1-Searcher {question, answer} rows"


def question_text(question: str) -> str:
    """Search-R1's question clean-up: strip whitespace and end with a question mark.

    >>> question_text("  who wrote hamlet ")
    'who wrote hamlet?'
    """
    q = question.strip()
    return q if q.endswith("?") else q + "?"


def _unwrap(value: Any, field: str) -> Any:
    """The datasets' answer containers -> a string or a list: TriviaQA's ``{"value", "aliases"}``, SQuAD's
    ``{"text": [...]}``, PopQA's ``possible_answers`` (a JSON list in a string); anything else as it is."""
    if isinstance(value, dict):
        if "value" in value:
            return [value["value"], *(value.get("aliases") or [])]
        if "text" in value:
            return value["text"]
    if field == "possible_answers" and isinstance(value, str) and value.startswith("["):
        try:
            parsed = json.loads(value)
        except json.JSONDecodeError:
            return value
        return parsed if isinstance(parsed, list) else value
    return value


def _answer_text(a: str | int | float | bool) -> str:
    """One gold answer as text: a boolean as yes/no (StrategyQA's ``answer: true``; as R1-Searcher's evaluation
    maps them), a whole float as an integer (a numeric column read back as ``6.0``)."""
    if isinstance(a, bool):
        return "yes" if a else "no"
    if isinstance(a, float) and a.is_integer():
        return str(int(a))
    return str(a).strip()


def _answers(value: Any, where: str, field: str) -> list[str]:
    value = _unwrap(value, field)
    if isinstance(value, str | int | float):
        value = [value]
    if not isinstance(value, list | tuple) or not all(isinstance(a, str | int | float) for a in value):
        raise ValueError(
            f"{where}: field '{field}' must be a string or a list of strings (or TriviaQA's {{value, aliases}}, "
            f"SQuAD's {{text}}), got {value!r:.80}"
        )
    if any(isinstance(a, float) and a != a for a in value):  # NaN: an empty cell of a numeric column
        raise ValueError(f"{where}: field '{field}' holds NaN (an empty numeric cell); give the gold answer")
    answers = list(dict.fromkeys(t for t in map(_answer_text, value) if t))  # TriviaQA's aliases repeat its value
    for a in answers:
        _encodable(a, where, field)
    if not answers:
        raise ValueError(f"{where}: field '{field}' is empty; give at least one gold answer")
    return answers


def _encodable(text: str, where: str, field: str) -> None:
    """Refuse a lone surrogate (JSON's ``\\ud800`` escape without its other half), which no tokenizer encodes, as
    the corpus reader does."""
    if char := lone_surrogate(text):
        raise ValueError(
            f"{where}: lone surrogate {char} (half of a UTF-16 pair) in field '{field}'; remove that escape or give "
            "its other half"
        )


def _list_cell(value: str) -> Any:
    """A text cell holding a list of answers (``["a", "b"]`` as JSON, or ``['a', 'b']`` / ``[1990, 1991]`` as pandas
    writes a list column to CSV and DPR's question files hold them) -> the list (an empty one is then refused as no
    answer); any other text (``[citation needed]``) as it is."""
    parsed = _scalar_list(value)
    return value if parsed is None else parsed


def _scalar_list(text: str) -> list | None:
    """``text`` read as a JSON or Python list of strings and numbers; None when it is not one."""
    text = text.strip()
    if not (text.startswith("[") and text.endswith("]")):
        return None
    import ast

    for parse in (json.loads, ast.literal_eval):
        try:
            parsed = parse(text)
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            continue
        if isinstance(parsed, list) and all(isinstance(a, str | int | float) for a in parsed):
            return parsed
    return None


def _from_verl(row: dict[str, Any]) -> dict[str, Any]:
    """A verl / Search-R1 training row (``prompt`` messages, ``reward_model.ground_truth.target``) without the
    original ``question`` column -> the question after the template's last ``Question:`` and the targets as gold
    answers; any other row as it is."""
    truth = (row.get("reward_model") or {}).get("ground_truth") if isinstance(row.get("reward_model"), dict) else None
    prompt = row.get("prompt")
    if "question" in row or not isinstance(truth, dict) or "target" not in truth or not isinstance(prompt, list):
        return row
    user = next((m.get("content") for m in reversed(prompt) if isinstance(m, dict) and m.get("role") == "user"), "")
    _, marker, question = str(user).rpartition("Question:")
    rest = {k: v for k, v in row.items() if k not in ("prompt", "reward_model")}
    index = (row.get("extra_info") or {}).get("index") if isinstance(row.get("extra_info"), dict) else None
    if index is not None and not any(row.get(f) is not None for f in ID_FIELDS):  # unique across merged sources
        rest["id"] = f"{row['data_source']}-{index}" if row.get("data_source") else str(index)
    return {**rest, "question": question.strip() if marker else "", "golden_answers": truth["target"]}


def _lower_keys(row: dict[str, Any]) -> dict[str, Any]:
    """Capitalised layouts (Bamboogle's CSV ``Question, Answer``, TriviaQA's ``Question``, ``Answer: {Value,
    Aliases}``, Frames' ``Prompt``) -> lower-case keys, an answer dict's too; rows with a lower-case question field
    as they are."""
    if any(f in row for f in QUESTION_FIELDS) or not any(str(k).lower() in QUESTION_FIELDS for k in row):
        return row
    return {
        str(k).lower(): {str(kk).lower(): vv for kk, vv in v.items()} if isinstance(v, dict) else v
        for k, v in row.items()
    }


def _renamed(row: dict[str, Any]) -> dict[str, Any]:
    """Another name of the question (``query``, ``problem``, KILT's ``input``, a ``prompt`` string) -> ``question``;
    KILT's ``output: [{"answer", "provenance"}, ...]`` -> ``golden_answers``. Other rows as they are."""
    if "question" not in row:
        name = next((f for f in QUESTION_FIELDS if isinstance(row.get(f), str)), None)
        if name:
            row = {"question": row[name], **{k: v for k, v in row.items() if k != name}}
    output = row.get("output")
    if any(f in row for f in ANSWER_FIELDS) or not isinstance(output, list):
        return row
    answers = [o["answer"] for o in output if isinstance(o, dict) and isinstance(o.get("answer"), str)]
    if not any(a.strip() for a in answers):
        return row
    provenance = [p for o in output if isinstance(o, dict) for p in o.get("provenance") or []]
    rest = {k: v for k, v in row.items() if k != "output"}
    return {**rest, "golden_answers": [a for a in answers if a.strip()], "provenance": provenance}


def row_to_example(
    row: dict[str, Any],
    where: str,
    default_id: str,
    normalize: bool = False,
    fields: Mapping[str, str] | None = None,
    need_answers: bool = True,
) -> QAExample:
    """One dataset row -> QAExample. ``where`` (``file:line``) and ``default_id`` are used for errors and ids;
    ``fields`` maps a part to the row's field when the row names it otherwise (``{"question": "query_text"}``).
    Without ``need_answers`` a row with no answer field gets none."""
    if not isinstance(row, dict):
        raise ValueError(f"{where}: expected a JSON object per row, got {type(row).__name__}")
    if fields:
        row = mapped(row, fields, where)
    verl = _from_verl(_lower_keys(row))
    from_verl, row = verl is not row, _renamed(verl)
    present = [f for f in ("question", *ANSWER_FIELDS) if f in row]
    if "question" not in row:
        raise ValueError(
            f"{where}: missing field 'question' (or 'query', 'problem', 'input') ({_EXPECTED}; found fields "
            f"{sorted(row)}); name yours with fields: {{question: NAME}} (data.fields, --field question=NAME)"
        )
    answer_field = next((f for f in ANSWER_FIELDS if f in row and row[f] is not None), None)
    if answer_field is None and need_answers:
        raise ValueError(
            f"{where}: no 'golden_answers' (or 'answer'), or only null ones ({_EXPECTED}; found fields "
            f"{sorted(row)}); name yours with fields: {{answers: NAME}} (data.fields, --field answers=NAME)"
        )
    question = row["question"]
    if not isinstance(question, str) or not question.strip():
        hint = "; a verl prompt needs 'Question: ...' in its user message" if from_verl else ""
        raise ValueError(f"{where}: field 'question' must be a non-empty string{hint}")
    _encodable(question, where, "question")
    id_field = next((f for f in ID_FIELDS if row.get(f) is not None and str(row[f]) != ""), None)
    answers = _answers(row[answer_field], where, answer_field) if answer_field else []
    aliases = [f for f in ALIAS_FIELDS if row.get(f)]
    for field in aliases:
        answers = list(dict.fromkeys([*answers, *_answers(row[field], where, field)]))
    metadata = dict(row["metadata"]) if isinstance(row.get("metadata"), dict) else {}
    skip = {"metadata", *present, *aliases, *([id_field] if id_field else [])}
    metadata.update({k: v for k, v in row.items() if k not in skip})
    if "metadata" in row and not isinstance(row["metadata"], dict) and row["metadata"] is not None:
        metadata["metadata"] = row["metadata"]
    return QAExample(
        id=str(row[id_field]) if id_field else default_id,
        question=question_text(question) if normalize else question.strip(),
        answers=answers,
        metadata=metadata,
    )


def _iter_jsonl(path: Path) -> Iterator[tuple[str, int, dict[str, Any]]]:
    try:
        for i, line in open_lines(path):  # .jsonl or .jsonl.gz; a non-UTF-8 line names file:line
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as err:
                raise ValueError(f"{path}:{i}: not valid JSON ({err.msg}); fix or remove that line") from None
            yield f"{path}:{i}", i, row
    except (OSError, EOFError) as err:  # a truncated or corrupt .gz
        raise ValueError(f"{path}: cannot be read ({err}); re-download or re-compress it") from None


def _iter_json(path: Path) -> Iterator[tuple[str, int, dict[str, Any]]]:
    """A ``.json`` file: one JSON array of rows (HotpotQA's and 2WikiMultiHopQA's releases), an object whose
    ``data`` is that array, or JSON lines under a ``.json`` name."""
    try:
        text = path.read_text(encoding="utf-8-sig")  # -sig: an editor's byte-order mark (json.loads refuses one)
    except (OSError, UnicodeDecodeError) as err:
        raise ValueError(f"{path}: cannot be read ({err}); check the file's encoding (UTF-8)") from None
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as err:
        if err.msg == "Extra data":  # several JSON values: JSON lines
            yield from _iter_jsonl(path)
            return
        raise ValueError(f"{path}: not valid JSON ({err.msg} at line {err.lineno}); fix the file") from None
    if isinstance(doc, dict):  # {"data": [...]}; TriviaQA's {"Data": [...]}
        doc = next((doc[k] for k in ("data", "Data") if isinstance(doc.get(k), list)), doc)
    if not isinstance(doc, list):
        raise ValueError(f"{path}: expected a JSON array of question rows (or JSON lines), got a {type(doc).__name__}")
    for n, row in enumerate(doc, 1):
        yield f"{path}:row {n}", n, row


def _iter_csv(path: Path, lists: set[str] = LIST_CELLS) -> Iterator[tuple[str, int, dict[str, Any]]]:
    """A ``.csv`` / ``.tsv`` file with a header row (Bamboogle's ``Question,Answer``); each cell a string, an answer
    cell holding a list (JSON, or a Python literal as pandas writes one) read as that list. DPR's question files
    (``nq-test.qa.csv``: no header, ``question<TAB>["answer", ...]``) load too."""
    import csv

    try:
        with path.open(encoding="utf-8-sig", newline="") as f:  # -sig: a spreadsheet's byte-order mark
            first = f.readline()
            f.seek(0)
            tab = path.suffix == ".tsv" or "\t" in first
            reader = csv.reader(f, delimiter="\t" if tab else ",")
            header = next(reader, None)
            if header is None:
                return
            headless = _dpr_row(header)
            names = ["question", "answers"] if headless else header
            rows = [header] if headless else []
            for n, cells in enumerate(_chain(rows, reader), 1):
                if not any(c.strip() for c in cells):
                    continue  # a blank line
                line = n if headless else reader.line_num
                where = f"{path}:{line}"
                row = dict(zip(names, cells, strict=False))
                row = {k: _list_cell(v) if k.lower() in lists else v for k, v in row.items()}
                yield where, line, row
    except UnicodeDecodeError as err:
        raise ValueError(f"{path}: not UTF-8 ({err.reason}); re-save the file as UTF-8") from None


def _chain(first: list[list[str]], rest: Iterator[list[str]]) -> Iterator[list[str]]:
    yield from first
    yield from rest


def _dpr_row(cells: list[str]) -> bool:
    """A first row that is data, not a header: two cells, the second a list of answers (DPR's question files)."""
    return len(cells) == 2 and cells[0].strip().lower() not in QUESTION_FIELDS and bool(_scalar_list(cells[1]))


def _iter_parquet(path: Path) -> Iterator[tuple[str, int, dict[str, Any]]]:
    import pyarrow.parquet as pq

    n = 0
    for batch in pq.ParquetFile(path).iter_batches(batch_size=10_000):
        for row in batch.to_pylist():
            n += 1
            yield f"{path}:row {n}", n, row


def _is_saved_dataset(path: Path) -> bool:
    """A directory written by ``Dataset.save_to_disk`` / ``DatasetDict.save_to_disk``."""
    return (path / "state.json").exists() or (path / "dataset_dict.json").exists()


def _iter_hf(name: str, config: str | None, split: str) -> Iterator[tuple[str, int, dict[str, Any]]]:
    try:
        import datasets
    except ImportError as err:  # pragma: no cover - datasets is a core dependency
        raise MissingDependency("reading hf: sources needs the 'datasets' package: pip install datasets") from err
    local = Path(name).expanduser()
    if local.is_dir() and _is_saved_dataset(local):
        ds = datasets.load_from_disk(str(local))
        if isinstance(ds, datasets.DatasetDict):
            if split not in ds:
                raise ValueError(
                    f"{local} has splits {sorted(ds)}, not '{split}'; name one as hf:{local}:SPLIT, e.g. "
                    f"hf:{local}:{sorted(ds)[0]}"
                )
            ds = ds[split]
    else:
        try:
            ds = datasets.load_dataset(str(local) if local.is_dir() else name, config, split=split)
        except ValueError as err:  # unknown split or config: datasets' message lists the valid ones
            if config and (local / config).is_dir():  # a local copy whose README declares no configs (FlashRAG's
                rows, _ = _rows(local / config, split)  # folders nq/, hotpotqa/): the folder's <split> file
                yield from rows
                return
            raise ValueError(f"hf:{name}{':' + config if config else ''}:{split}: {err}") from None
        except Exception as err:  # offline, or no such dataset: one line that names the fix
            first = error_line(err)
            raise ValueError(
                f"hf:{name}{':' + config if config else ''}:{split}: cannot be loaded ({first}); where the hub cannot "
                f"be reached, download it (huggingface-cli download --repo-type dataset {name} --local-dir DIR) and "
                "give hf:DIR[:CONFIG]:SPLIT or its files"
            ) from None
    label = f"hf:{name}{':' + config if config else ''}:{split}"
    for i, row in enumerate(ds, 1):
        yield f"{label}:row {i}", i, row


def parse_hf_source(source: str, split: str | None = None) -> tuple[str, str | None, str]:
    """``hf:NAME[:CONFIG]:SPLIT`` -> (name, config, split). ``split`` fills in a source written ``hf:NAME``.

    >>> parse_hf_source("hf:RUC-NLPIR/FlashRAG_datasets:hotpotqa:dev")
    ('RUC-NLPIR/FlashRAG_datasets', 'hotpotqa', 'dev')
    """
    parts = source.removeprefix("hf:").split(":")
    if len(parts) == 1 and split:
        parts.append(split)
    if len(parts) not in (2, 3) or not all(parts):
        raise ValueError(
            f"bad HF source '{source}'; write hf:NAME[:CONFIG]:SPLIT, e.g. hf:RUC-NLPIR/FlashRAG_datasets:nq:test"
        )
    name, config, in_split = (parts[0], None, parts[1]) if len(parts) == 2 else (parts[0], parts[1], parts[2])
    if split and split != in_split:
        raise ValueError(f"'{source}' names split '{in_split}' but split='{split}' was also given; keep one")
    return name, config, in_split


def _rows(
    source: str | Path, split: str | None, fields: Mapping[str, str] | None = None
) -> tuple[Iterable[tuple[str, int, dict[str, Any]]], str]:
    """(rows as (where, index, row), prefix for default ids); ``fields``: a CSV's answers column of another name
    holds lists as the usual one does."""
    if isinstance(source, str) and source.startswith("hf:"):
        name, config, sp = parse_hf_source(source, split)
        return _iter_hf(name, config, sp), sp
    path = Path(source).expanduser()
    if path.is_dir():
        if _is_saved_dataset(path):
            return _iter_hf(str(path), None, split or "train"), split or "train"
        if split is None:
            raise ValueError(f"{path} is a directory; pass split= (e.g. 'dev') to read {path}/<split>.jsonl")
        for ext in (".jsonl", ".jsonl.gz", ".parquet", ".json"):
            if (path / f"{split}{ext}").exists():
                path = path / f"{split}{ext}"
                break
        else:
            raise FileNotFoundError(
                f"no {split}.jsonl(.gz), {split}.parquet or {split}.json in {path}; check the split name"
            )
    elif not path.exists():
        raise FileNotFoundError(f"QA file not found: {path} (for Hugging Face datasets write hf:NAME[:CONFIG]:SPLIT)")
    elif split is not None and Path(path.name.removesuffix(".gz")).stem != split:
        raise ValueError(f"split='{split}' only applies to directories and hf: sources; drop it for the file {path}")
    stem = Path(path.name.removesuffix(".gz")).stem  # dev.jsonl.gz -> dev
    if path.suffix == ".parquet":
        return _iter_parquet(path), stem
    if path.suffix == ".json":
        return _iter_json(path), stem
    if path.suffix in (".csv", ".tsv"):
        return _iter_csv(
            path, {*LIST_CELLS, *[str(v).lower() for k, v in (fields or {}).items() if k == "answers"]}
        ), stem
    return _iter_jsonl(path), stem


def iter_rows(source: str | Path, split: str | None = None) -> Iterator[tuple[str, dict[str, Any]]]:
    """Every row of a QA source as it is, with its location (``file:line``): for readers that need other fields
    than a question and its answers (a test set without answers still has its paragraphs)."""
    rows, _ = _rows(source, split)
    for where, _, row in rows:
        if not isinstance(row, dict):
            raise ValueError(f"{where}: expected a JSON object per row, got {type(row).__name__}")
        yield where, row


def iter_qa(
    source: str | Path,
    split: str | None = None,
    normalize: bool = False,
    fields: Mapping[str, str] | None = None,
) -> Iterator[QAExample]:
    """Stream QA examples from any supported source (see the module docstring). ``fields`` maps a question's parts
    to the source's field names where they differ: ``{"question": "query_text", "answers": "gold", "id": "uid"}``.

    An id that an earlier row of another question already has (files merged from datasets whose ids each restart
    at ``train_0``) becomes ``<id>@<line>`` (``@<row>`` in an array or parquet file; ``metadata.id_in_file`` keeps
    the id as written), with one warning: an id names one question's rollout group, its split side and its
    rewrites. A question repeated under its id stays as it is.
    """
    fields = check_fields(fields)
    rows, prefix = _rows(source, split, fields)
    seen: dict[str, str] = {}
    warned = noted = False
    for where, index, row in rows:
        if not noted and "question" not in fields and isinstance(row, dict):
            noted = note_question_field(row, where)
        ex = row_to_example(row, where, f"{prefix}-{index}", normalize, fields)
        if seen.setdefault(ex.id, ex.question) != ex.question:
            if not warned:
                warned = True
                console.log(
                    f"[yellow]warning:[/yellow] {escape(where)}: id {escape(repr(ex.id))} already names another "
                    "question; ids repeated for other questions get '@' and their line (give each question its own id)"
                )
            ex = dataclasses.replace(ex, id=f"{ex.id}@{index}", metadata={**ex.metadata, "id_in_file": ex.id})
            seen.setdefault(ex.id, ex.question)
        yield ex


def load_qa(
    source: str | Path,
    split: str | None = None,
    limit: int | None = None,
    normalize: bool = False,
    fields: Mapping[str, str] | None = None,
) -> list[QAExample]:
    """Load QA examples from a file, a directory or ``hf:NAME[:CONFIG]:SPLIT``.

    ``limit`` keeps the first N examples (without reading the rest); ``normalize`` applies :func:`question_text`
    (off by default, so questions stay exactly as the dataset has them); ``fields`` as in :func:`iter_qa`.
    """
    if limit is not None and limit < 0:
        raise ValueError(f"limit must be >= 0, got {limit}")
    out: list[QAExample] = []
    if limit == 0:
        return out
    for ex in iter_qa(source, split, normalize, fields):
        out.append(ex)
        if limit is not None and len(out) >= limit:
            break
    return out
