"""Corpora: read passages from the field's formats, and store them on disk for lazy, memory-mapped access.

Formats (detected per row):
- FlashRAG / Search-R1 JSONL ``{"id", "contents"}``: the title is the first line of ``contents`` (Search-R1 wraps
  it in double quotes, which are stripped); a ``contents`` of one line (Pyserini's MS MARCO) is text without a title;
- JSONL ``{"id", "title", "text"}`` (BEIR's ``_id`` and ``doc_id`` name the id too; ``title`` may be absent);
- KILT pages ``{"wikipedia_title", "text": [paragraphs]}``: chunked into ~100-word passages that keep the title;
- parquet files with either column layout, and ``.json`` files holding one array of such rows;
- ``hf:NAME[:CONFIG]:SPLIT`` datasets whose rows take one of these layouts (BEIR's corpora), written once into
  the cache in FlashRAG's layout (:func:`local_corpus`);
- tab-separated files (``.tsv``, ``.tsv.gz``): DPR's ``psgs_w100.tsv`` with its header ``id text title`` (any
  columns named ``id``, ``text``, ``title`` or ``contents``), or headerless ``id<TAB>text[<TAB>title]`` lines such
  as MS MARCO's ``collection.tsv``.

``PassageStore`` keeps passages as one JSONL file plus an int64 offsets array (numpy memmap), so a 21M-passage
corpus never sits in Python objects: a lookup is one seek and one JSON parse.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import threading
from array import array
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from searchrl.utils import console, lone_surrogate, read_jsonl


@dataclass(frozen=True)
class Passage:
    id: str
    title: str
    text: str
    #: the corpus stored the title in double quotes (wiki-18's ``'"Title"\ntext'``); not part of equality.
    quoted: bool = field(default=False, compare=False, repr=False)

    @property
    def contents(self) -> str:
        """Title line and text as the corpus stored them (quotes included): what a dense build encodes, as Search-R1's
        and FlashRAG's index builders encode each row's ``contents``."""
        return f'"{self.title}"\n{self.text}' if self.quoted else f"{self.title}\n{self.text}"


class CorpusFormatError(ValueError):
    """A corpus row that no supported layout fits; the message names file:line and the fix."""


def split_contents(contents: str) -> tuple[str, str]:
    """``'"Title"\\ntext'`` or ``'Title\\ntext'`` -> (title, text); one line is text without a title.

    >>> split_contents('"Hamlet"\\nA play.'), split_contents("A passage on its own.")
    (('Hamlet', 'A play.'), ('', 'A passage on its own.'))
    """
    title, newline, text = contents.partition("\n")
    if not newline:
        return "", contents.strip()
    title = title.strip()
    if title_quoted(title):
        title = title[1:-1]
    return title, text.strip()


def title_quoted(first_line: str) -> bool:
    """Whether a ``contents`` title line is wrapped in double quotes (``'"Hamlet"'``)."""
    title = first_line.strip()
    return len(title) >= 2 and title[0] == '"' and title[-1] == '"'


#: a character of a script written without spaces between words (Thai, Lao, Myanmar, Khmer, CJK punctuation, kana,
#: the CJK ideographs and their extensions, fullwidth forms): it counts as a word of its own.
UNSPACED = (
    "[\u0e00-\u0eff\u1000-\u109f\u1780-\u17ff\u3001-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uff00-\uffef"
    "\U00020000-\U0003134f]"
)
_WORDS = re.compile(rf"{UNSPACED}|(?:(?!{UNSPACED})\S)+")


def count_words(text: str) -> int:
    """Words of ``text``: whitespace-separated runs, each character of a script written without spaces counted as one.

    >>> count_words("the Dream of the Red Chamber"), count_words("红楼梦的作者是曹雪芹"), count_words("作者 is 曹雪芹")
    (6, 10, 6)
    """
    return len(text.split()) if text.isascii() else len(_WORDS.findall(text))


def chunk_words(text: str, size: int = 100) -> list[str]:
    """Split text into consecutive chunks of ``size`` whitespace-separated words (the last may be shorter)."""
    words = text.split()
    return [" ".join(words[i : i + size]) for i in range(0, len(words), size)]


def chunk_text(text: str, size: int = 100) -> list[str]:
    """:func:`chunk_words`, with words as :func:`count_words` counts them: in text of a script written without spaces
    each character is a word. Whitespace inside a chunk becomes one space.

    >>> chunk_text("a b  c d e", 2), chunk_text("红楼梦的作者 is 曹雪芹", 4)
    (['a b', 'c d', 'e'], ['红楼梦的', '作者 is 曹', '雪芹'])
    """
    if text.isascii() or not re.search(UNSPACED, text):
        return chunk_words(text, size)
    spans = [m.span() for m in _WORDS.finditer(text)]
    cuts = range(0, len(spans), size)
    return [" ".join(text[spans[i][0] : spans[min(i + size, len(spans)) - 1][1]].split()) for i in cuts]


def split_long(passages: Iterable[Passage], max_words: int) -> Iterator[Passage]:
    """Passages of more than ``max_words`` words cut into consecutive ``max_words``-word chunks that keep their title,
    with ids ``<id>#<k>`` (k from 0); shorter ones as they are. For corpora of whole documents, whose passages would
    otherwise be truncated to their head in an observation. Words as :func:`count_words` counts them: a character
    of Chinese, Japanese or Thai is one.

    >>> [(p.id, p.text) for p in split_long([Passage("d", "T", "a b c d e")], 2)]
    [('d#0', 'a b'), ('d#1', 'c d'), ('d#2', 'e')]
    """
    for p in passages:
        chunks = chunk_text(p.text, max_words) if count_words(p.text) > max_words else [p.text]
        if len(chunks) == 1:
            yield p
        else:
            yield from (Passage(f"{p.id}#{k}", p.title, c, p.quoted) for k, c in enumerate(chunks))


#: KILT markup at the start of a paragraph: section headings and list items.
KILT_MARKERS = ("Section::::", "BULLET::::")


def chunk_kilt_page(page: dict, size: int = 100, id_prefix: str | None = None) -> list[Passage]:
    """A KILT page -> ~``size``-word passages, each carrying the page title.

    Follows the reference chunkers (RAG-R1's ``split_kilt_to_100.py``; R1-Searcher's released KILT passages read the
    same way): the paragraphs are joined, the ``Section::::`` / ``BULLET::::`` markers are deleted but the heading
    and list text kept ("Section::::History." -> "History."), and the words are cut into consecutive ``size``-word
    chunks; only the last chunk of a page is shorter. The first paragraph, the title itself, stays, so the first
    passage reads "Title Title is ...", as in the released corpora.
    """
    title = str(page["wikipedia_title"]).strip()
    paragraphs = page["text"]
    if isinstance(paragraphs, str):
        paragraphs = [paragraphs]
    body = " ".join(str(p) for p in paragraphs)
    for marker in KILT_MARKERS:
        body = body.replace(marker, " ")
    prefix = id_prefix if id_prefix is not None else str(page.get("wikipedia_id", title))
    return [Passage(f"{prefix}-{i}", title, chunk) for i, chunk in enumerate(chunk_words(body, size))]


#: The fields that name a passage's id, in the order they are looked up (FlashRAG, BEIR, ir_datasets).
ID_FIELDS = ("id", "_id", "doc_id", "docid")


def _row_id(row: dict, where: str, fields: str) -> str:
    key = next((f for f in ID_FIELDS if row.get(f) is not None and str(row[f]) != ""), None)
    if key is None:
        raise CorpusFormatError(f"{where}: row has {fields} but no 'id' (or '_id'); add an id field")
    return str(row[key])


def _text_field(row: dict, field: str, where: str) -> str:
    """``row[field]`` when it is a string; a null or non-text value (a number, a list) is refused, rather than
    indexed as the text "None"."""
    value = row[field]
    if not isinstance(value, str):
        kind = "null" if value is None else f"not text (a {type(value).__name__})"
        raise CorpusFormatError(f"{where}: {field!r} is {kind}; give it text")
    return value


def _check_unicode(passages: list[Passage], where: str) -> list[Passage]:
    """Refuse text that cannot be written as UTF-8: a lone surrogate, which JSON's ``\\ud800`` escape produces."""
    for p in passages:
        for value in (p.id, p.title, p.text):
            if char := lone_surrogate(value):
                raise CorpusFormatError(
                    f"{where}: lone surrogate {char} (half of a UTF-16 pair) in the passage; remove that escape or "
                    "give its other half"
                )
    return passages


def _row_to_passages(row: dict, where: str, chunk_size: int) -> list[Passage]:
    return _check_unicode(_parse_row(row, where, chunk_size), where)


def _parse_row(row: dict, where: str, chunk_size: int) -> list[Passage]:
    if "contents" in row:
        contents = _text_field(row, "contents", where)
        title, text = split_contents(contents)
        quoted = "\n" in contents and title_quoted(contents.partition("\n")[0])
        return [Passage(_row_id(row, where, "'contents'"), title, text, quoted)]
    if "wikipedia_title" in row and "text" in row:
        return chunk_kilt_page(row, chunk_size)
    if "text" in row:
        title = row.get("title")
        text = _text_field(row, "text", where)
        return [Passage(_row_id(row, where, "'title'/'text'"), str(title or "").strip(), text.strip())]
    raise CorpusFormatError(
        f"{where}: unknown corpus row with fields {sorted(row)}; expected {{id, contents}}, {{id, title, text}} "
        "or a KILT page {wikipedia_title, text}"
    )


def is_tsv(path: str | Path) -> bool:
    """A tab-separated corpus (``.tsv`` or ``.tsv.gz``)."""
    return Path(path).name.lower().endswith((".tsv", ".tsv.gz"))


def _iter_tsv(path: Path) -> Iterator[tuple[int, dict]]:
    """(line number, row) of a tab-separated corpus. With a header naming ``text`` or ``contents``, its columns
    name the fields and cells may be quoted as CSV quotes them (DPR); without one, the columns are id, text and an
    optional title, and quotes are text (MS MARCO)."""
    import csv
    import itertools

    from searchrl.utils import open_lines

    csv.field_size_limit(2**31 - 1)
    lines = (line for _, line in open_lines(path))
    first = next(lines, "")
    header = [c.strip().lower() for c in first.rstrip("\r\n").split("\t")]
    if {"text", "contents"} & set(header):
        reader, names, offset = csv.reader(lines, delimiter="\t"), header, 1
    else:
        reader = csv.reader(itertools.chain([first], lines), delimiter="\t", quoting=csv.QUOTE_NONE)
        names, offset = ["id", "text", "title"], 0
    for cells in reader:
        n = reader.line_num + offset
        if not cells or cells == [""]:
            continue
        if len(cells) != len(names) and not (offset == 0 and len(cells) == 2):  # headerless: the title is optional
            raise CorpusFormatError(
                f"{path}:{n}: {len(cells)} tab-separated columns, expected {len(names)} ({', '.join(names)}); "
                + (
                    "fix that line (quote a cell that holds a tab)"
                    if offset
                    else "fix that line or give the file a header"
                )
            )
        yield n, dict(zip(names, cells, strict=False))


def _iter_rows(path: Path, chunk_size: int) -> Iterator[tuple[int, Passage]]:
    """(line or row number, passage) of every passage in a corpus file."""
    if path.suffix == ".parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        try:
            pf = pq.ParquetFile(path)
        except (pa.ArrowInvalid, OSError) as err:
            raise CorpusFormatError(f"{path}: not a readable parquet file ({err}); re-export it") from None
        n = 0
        for batch in pf.iter_batches(batch_size=10_000):
            for row in batch.to_pylist():
                n += 1
                for p in _row_to_passages(row, f"{path}:row {n}", chunk_size):
                    yield n, p
        return
    if path.suffix == ".json":  # one JSON array of passages (or JSON lines under a .json name)
        from searchrl.data.loaders import _iter_json

        for where, n, row in _iter_json(path):
            if not isinstance(row, dict):
                raise CorpusFormatError(f"{where}: expected a JSON object per passage, got {type(row).__name__}")
            for p in _row_to_passages(row, where, chunk_size):
                yield n, p
        return
    try:
        for i, row in _iter_tsv(path) if is_tsv(path) else read_jsonl(path):
            for p in _row_to_passages(row, f"{path}:{i}", chunk_size):
                yield i, p
    except CorpusFormatError:
        raise
    except ValueError as err:  # read_jsonl's file:line message (not JSON, not an object, not UTF-8)
        raise CorpusFormatError(str(err)) from None
    except (OSError, EOFError) as err:  # a truncated or corrupt .gz
        raise CorpusFormatError(f"{path}: cannot be read ({err}); re-download or re-compress it") from None


def _first_duplicate(
    path: Path, chunk_size: int, hashes: array, lines: array, max_words: int | None = None
) -> tuple[str, int, int] | None:
    """(id, first line, second line) of the duplicated id that repeats earliest, or None.

    Ids are compared by 64-bit hash while streaming (16 bytes a passage, not a dict of 21M strings); a candidate is
    confirmed by re-reading the two lines, so a hash collision is never reported.
    """
    h = np.frombuffer(hashes, dtype=np.int64)
    if len(h) < 2:
        return None
    order = np.argsort(h, kind="stable")
    hs = h[order]
    same = np.nonzero(hs[1:] == hs[:-1])[0]
    if not len(same):
        return None
    ln = np.frombuffer(lines, dtype=np.int64)
    pairs = sorted((int(ln[order[k + 1]]), int(ln[order[k]]), int(order[k]), int(order[k + 1])) for k in same)
    wanted = {pos for _, _, a, b in pairs for pos in (a, b)}
    ids = {pos: p.id for pos, (_, p) in enumerate(_iter_split(path, chunk_size, max_words)) if pos in wanted}
    for second, first, a, b in pairs:
        if ids.get(a) == ids.get(b):
            return ids[a], first, second
    return None


def write_corpus(path: str | Path, passages: Iterable[Passage]) -> int:
    """Write ``passages`` in FlashRAG's corpus layout ``{"id", "contents": "Title\\ntext"}``, streamed, and
    atomically: the file appears complete or not at all. Returns how many."""
    from searchrl.utils import atomic_write_lines

    return atomic_write_lines(
        path, (json.dumps({"id": p.id, "contents": p.contents}, ensure_ascii=False) + "\n" for p in passages)
    )


def hf_passages(source: str, chunk_size: int = 100) -> Iterator[Passage]:
    """Stream the passages of a dataset ``hf:NAME[:CONFIG]:SPLIT`` whose rows take one of the layouts above."""
    from searchrl.data.loaders import _iter_hf, parse_hf_source

    for where, _, row in _iter_hf(*parse_hf_source(source)):
        yield from _row_to_passages(row, where, chunk_size)


def local_corpus(source: str | Path, chunk_size: int = 100) -> Path:
    """The file of a corpus: a path as it is; ``hf:NAME[:CONFIG]:SPLIT`` (a hub dataset, or a local dataset
    directory) read once with ``datasets``, its rows in any layout above, and written in FlashRAG's layout to
    ``<cache>/corpora/<name>-<hash>.jsonl``, whose path is returned (later calls reuse it)."""
    if not str(source).startswith("hf:"):
        return Path(source)
    import re

    from searchrl.data.loaders import parse_hf_source
    from searchrl.models import cache_dir
    from searchrl.utils import source_digest

    local = Path(parse_hf_source(str(source))[0]).expanduser()
    out = cache_dir() / "corpora" / f"{re.sub(r'[^A-Za-z0-9_.-]+', '_', local.name)}-{source_digest(source)}.jsonl"
    if not out.exists():  # an unreachable hub or an unknown name fails in one line (loaders._iter_hf)
        write_corpus(out, hf_passages(str(source), chunk_size))
    return out


def _iter_split(path: Path, chunk_size: int, max_words: int | None) -> Iterator[tuple[int, Passage]]:
    """``_iter_rows``, with passages longer than ``max_words`` words cut as :func:`split_long` cuts them."""
    for line_no, p in _iter_rows(path, chunk_size):
        if max_words is None:
            yield line_no, p
        else:
            for part in split_long([p], max_words):
                yield line_no, part


def iter_passages(path: str | Path, chunk_size: int = 100, max_words: int | None = None) -> Iterator[Passage]:
    """Stream passages from a JSONL (``.jsonl.gz`` too) or parquet corpus, whatever its layout.

    ``max_words``: passages longer than this are cut into chunks with ids ``<id>#<k>`` (:func:`split_long`).
    Passages with neither title nor text are kept (ids stay as given) and counted in one warning at the end.
    A passage id that occurs twice (after that cut, so a chunk ``d#1`` that meets a passage ``d#1`` counts)
    raises :class:`CorpusFormatError` naming the id and its first two lines, once the file has been read (before
    an index built from it is written).
    """
    path = local_corpus(path, chunk_size)
    if not path.exists():
        raise FileNotFoundError(f"corpus not found: {path}")
    hashes, lines = array("q"), array("q")
    empty, first_empty = 0, 0
    for line_no, p in _iter_split(path, chunk_size, max_words):
        hashes.append(hash(p.id))
        lines.append(line_no)
        if not (p.text.strip() or p.title.strip()):
            empty += 1
            first_empty = first_empty or line_no
        yield p
    if empty:
        console.print(
            f"[yellow]warning:[/yellow] {path}: {empty} passage(s) have no title and no text (first at line "
            f"{first_empty}); they are indexed but hold nothing to find, so drop or fill them"
        )
    dup = _first_duplicate(path, chunk_size, hashes, lines, max_words)
    if dup is not None:
        pid, first, second = dup
        cut = ""
        if max_words and "#" in pid:
            cut = f" (after cutting passages longer than {max_words} words into <id>#<k> chunks)"
        raise CorpusFormatError(
            f"{path}: passage id {pid!r} occurs twice, at lines {first} and {second}{cut}; give every passage its "
            "own id"
        )


def read_at(fd: int, size: int, offset: int) -> bytes:
    """``size`` bytes of ``fd`` at ``offset``: ``os.pread`` where there is one, else (Windows) a seek and a read under
    a lock, so that threads sharing ``fd`` do not move each other's file position."""
    if hasattr(os, "pread"):
        return os.pread(fd, size, offset)
    with _SEEK_LOCK:
        os.lseek(fd, offset, os.SEEK_SET)
        return os.read(fd, size)


_SEEK_LOCK = threading.Lock()


def file_fingerprint(path: str | Path) -> str:
    """sha256 over size + first and last MiB (the whole file up to 2 MiB): cheap for huge files, changes when the
    corpus changes. An edit in the middle of a file over 2 MiB that keeps its size goes unseen."""
    path = Path(path)
    h = hashlib.sha256()
    size = path.stat().st_size
    h.update(str(size).encode())
    with path.open("rb") as f:
        h.update(f.read(1 << 20))
        if size > 2 << 20:
            f.seek(-(1 << 20), 2)
        h.update(f.read())  # up to 2 MiB: the rest of the file
    return h.hexdigest()[:16]


class PassageStore:
    """Passages on disk (``passages.jsonl`` + ``offsets.npy``), read lazily through a memory map."""

    def __init__(self, directory: str | Path) -> None:
        self.dir = Path(directory)
        self._offsets = np.load(self.dir / "offsets.npy", mmap_mode="r")  # (N + 1,) int64 byte offsets
        # positional reads (read_at) need no shared file position, so concurrent readers are safe.
        self._fd = os.open(self.dir / "passages.jsonl", os.O_RDONLY | getattr(os, "O_BINARY", 0))  # Windows: binary
        self._id_to_index: dict[str, int] | None = None

    @classmethod
    def build(cls, passages: Iterable[Passage], directory: str | Path) -> PassageStore:
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        # A packed int64 array, not a list of Python ints: 21M offsets take 168 MB, not ~800 MB.
        offsets = array("q", [0])
        with (directory / "passages.jsonl").open("wb") as f:
            for p in passages:
                row = {"id": p.id, "title": p.title, "text": p.text} | ({"quoted": True} if p.quoted else {})
                line = (json.dumps(row, ensure_ascii=False) + "\n").encode()
                f.write(line)
                offsets.append(offsets[-1] + len(line))
        np.save(directory / "offsets.npy", np.frombuffer(offsets, dtype=np.int64))
        return cls(directory)

    def __len__(self) -> int:
        return len(self._offsets) - 1

    def __getitem__(self, i: int) -> Passage:
        if not 0 <= i < len(self):
            raise IndexError(i)
        start, end = int(self._offsets[i]), int(self._offsets[i + 1])
        row = json.loads(read_at(self._fd, end - start, start))
        return Passage(row["id"], row["title"], row["text"], row.get("quoted", False))

    def get_many(self, indices: Iterable[int]) -> list[Passage]:
        return [self[int(i)] for i in indices]

    def __iter__(self) -> Iterator[Passage]:
        for i in range(len(self)):
            yield self[i]

    def index_of(self, passage_id: str) -> int:
        """Row of a passage id (builds the id map on first use)."""
        if self._id_to_index is None:
            self._id_to_index = {p.id: i for i, p in enumerate(self)}
        return self._id_to_index[passage_id]

    def close(self) -> None:
        """Release the passage file and the offsets' memory map (Windows cannot rename a directory holding either:
        ``index build`` moves its staging directory into place once the store is closed)."""
        os.close(self._fd)
        self._offsets = np.zeros(1, dtype=np.int64)
