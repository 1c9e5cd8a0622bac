"""Demo corpora built from real data that installed packages ship (never downloaded).

The ``lee`` corpus (docs/data.md): gensim's test file ``lee_background.cor``, 300 short news
documents, one per line. 7 of them occur twice, word for word; exact duplicates are dropped (the
first occurrence is kept), leaving 293, so that no val document is also a train document. The
split is by document and deterministic: unique document ``i`` (0-based, in file order) goes to val
when ``i % 10 == 9`` (every 10th: 9, 19, ..., 289) and to train otherwise: 264 train and 29 val
documents. Each document is encoded as its UTF-8 bytes (:class:`tinyllm.tokens.ByteTokenizer`)
followed by one newline byte, and a split is the concatenation of its documents in file order.

    >>> from tinyllm.data import build_lee
    >>> corpus = build_lee("zoo/data")          # writes lee_train.bin and lee_val.bin
    >>> corpus.n_val_bytes                       # about 36 KB

Every file here is written with :func:`tinyllm.safeio.write_atomic` (a fresh random temporary
name beside it, then renamed: a planted link or special file is never written through), and a
file a user names is read only when it is a regular file (:func:`tinyllm.tokens.open_regular`: a
FIFO or a device is refused, saying what it is).
"""

from __future__ import annotations

import datetime
import hashlib
import importlib.util
import io
import json
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tinyllm import safeio
from tinyllm.pairs import read_pairs
from tinyllm.tokens import ByteTokenizer, open_regular, read_tokens, write_tokens

LEE_FILE = "lee_background.cor"
VAL_EVERY = 10  # document i goes to val when i % VAL_EVERY == VAL_EVERY - 1
TRAIN_NAME = "lee_train.bin"
VAL_NAME = "lee_val.bin"
SPLITS = ("train", "val")


class DataError(FileNotFoundError):
    """A data file that should ship with an installed package is missing or unreadable."""


def _write_text(path: Path, text: str) -> Path:
    """``text`` as UTF-8 at ``path``, atomically (:func:`tinyllm.safeio.write_atomic`)."""
    return safeio.write_atomic(path, text.encode("utf-8"), what="data file")


def _read_bytes(path: Path) -> bytes:
    """The bytes of the regular file ``path`` (a FIFO or a device: a ValueError saying so)."""
    with open_regular(path, "data file") as f:
        return f.read()


def gensim_test_data_dir() -> Path:
    """The ``gensim/test/test_data`` folder of the installed gensim (gensim is not imported).

    Raises :class:`DataError` when gensim is not installed.
    """
    spec = importlib.util.find_spec("gensim")
    if spec is None or not spec.submodule_search_locations:
        raise DataError(
            "gensim test data: expected the gensim package to be installed "
            "(it ships lee_background.cor), got no gensim on the path"
        )
    return Path(next(iter(spec.submodule_search_locations))) / "test" / "test_data"


def lee_path() -> Path:
    """Path of ``lee_background.cor`` inside the installed gensim package.

    Raises :class:`DataError` naming the expected path when the file is not there.
    """
    path = gensim_test_data_dir() / LEE_FILE
    if not path.is_file():
        raise DataError(
            f"{path}: expected gensim's test data file {LEE_FILE} here, got no such file "
            "(is the installed gensim wheel complete? it is never downloaded at run time)"
        )
    return path


def lee_documents(path: str | os.PathLike | None = None) -> list[str]:
    """The documents of the Lee corpus: one per line, in file order, without the newline.

    ``path`` defaults to :func:`lee_path`. Empty lines are not documents and are dropped.
    """
    p = Path(path) if path is not None else lee_path()
    try:
        raw = _read_bytes(p)
    except FileNotFoundError:
        raise DataError(f"{p}: expected the Lee corpus file, got no such file") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise DataError(f"{p}: expected UTF-8 text, got undecodable bytes: {e}") from None
    docs = [line.rstrip("\r") for line in text.split("\n") if line.strip()]
    if len(docs) < VAL_EVERY:
        raise DataError(f"{p}: expected at least {VAL_EVERY} documents, got {len(docs)}")
    return docs


def unique_documents(docs: list[str]) -> list[str]:
    """``docs`` without exact duplicates, the first occurrence kept, in order."""
    return list(dict.fromkeys(docs))


def lee_split(path: str | os.PathLike | None = None) -> tuple[list[str], list[str]]:
    """(train, val) documents of the Lee corpus: deduplicated, then :func:`split_documents`."""
    return split_documents(unique_documents(lee_documents(path)))


def split_documents(docs: list[str]) -> tuple[list[str], list[str]]:
    """Deterministic 90/10 split by document: index ``i % 10 == 9`` to val, the rest to train."""
    train = [d for i, d in enumerate(docs) if i % VAL_EVERY != VAL_EVERY - 1]
    val = [d for i, d in enumerate(docs) if i % VAL_EVERY == VAL_EVERY - 1]
    return train, val


def encode_documents(docs: list[str]) -> np.ndarray:
    """Byte ids (uint8) of the documents, each followed by a newline byte, in order."""
    tok = ByteTokenizer()
    if not docs:
        return np.zeros(0, dtype=np.uint8)
    ids = np.concatenate([tok.encode(d + "\n") for d in docs])
    return ids.astype(np.uint8)


def lee_bytes(split: str, path: str | os.PathLike | None = None) -> np.ndarray:
    """The byte ids (uint8, in memory) of one split of the Lee corpus: ``"train"`` or ``"val"``."""
    if split not in SPLITS:
        raise ValueError(f"lee split: expected one of {list(SPLITS)}, got {split!r}")
    train, val = lee_split(path)
    return encode_documents(train if split == "train" else val)


@dataclass(frozen=True)
class LeeCorpus:
    """Where :func:`build_lee` wrote the token files, and their sizes (bytes = tokens)."""

    train_path: Path
    val_path: Path
    n_train_bytes: int
    n_val_bytes: int
    n_train_docs: int
    n_val_docs: int


def build_lee(out_dir: str | os.PathLike, path: str | os.PathLike | None = None) -> LeeCorpus:
    """Write ``lee_train.bin`` and ``lee_val.bin`` (token files, uint8 ids) into ``out_dir``.

    ``path`` defaults to gensim's installed ``lee_background.cor``. Returns a :class:`LeeCorpus`.
    """
    out = Path(out_dir)
    train_docs, val_docs = lee_split(path)
    train, val = encode_documents(train_docs), encode_documents(val_docs)
    train_path = write_tokens(out / TRAIN_NAME, train, dtype="uint8")
    val_path = write_tokens(out / VAL_NAME, val, dtype="uint8")
    return LeeCorpus(
        train_path=train_path,
        val_path=val_path,
        n_train_bytes=int(train.size),
        n_val_bytes=int(val.size),
        n_train_docs=len(train_docs),
        n_val_docs=len(val_docs),
    )


# ---- rows: labelled sentences (formats/rows.md) ------------------------------------------------

POLARITY_FILE = "pang_lee_polarity.cor"
POLARITY_ENCODING = "cp1252"  # the file is Windows-1252 (0x97 em dash, 0xe9 e-acute), not UTF-8
POLARITY_NAME = "polarity.jsonl"
LANGID_NAME = "langid.jsonl"
LANGID_LANGUAGES = ("en", "fr", "de", "es", "it")
LANGID_CATEGORIES = ("territories", "languages", "currencies")  # babel.Locale attributes
ROW_SPLITS = ("train", "val")
VAL_BUCKETS = 5  # a row goes to val when hash_bucket(sentence) == 0: 1 in 5, an 80/20 split


@dataclass(frozen=True)
class Row:
    """One labelled sentence of a rows file: its split ("train" or "val"), text and label, and
    its cross-fitting fold (an int >= 0, or None when the file gives none)."""

    split: str
    sentence: str
    label: str
    fold: int | None = None


def hash_bucket(sentence: str) -> int:
    """The first 8 bytes of ``sha256(sentence as UTF-8)``, read as a little-endian integer,
    modulo 5: a number 0..4 that needs no seed and stays the same whatever else is in the file.
    It is a rows file's ``fold`` and decides its split (:func:`hash_split`)."""
    h = int.from_bytes(hashlib.sha256(sentence.encode("utf-8")).digest()[:8], "little")
    return h % VAL_BUCKETS


def hash_split(sentence: str) -> str:
    """``"val"`` when :func:`hash_bucket` is 0 (about 20% of sentences), else ``"train"``."""
    return "val" if hash_bucket(sentence) == 0 else "train"


def hashed_row(sentence: str, label: str) -> Row:
    """A row split by :func:`hash_split`, its fold :func:`hash_bucket` (the val rows are fold 0)."""
    return Row(hash_split(sentence), sentence, label, hash_bucket(sentence))


def write_rows(path: str | os.PathLike, rows: list[Row]) -> Path:
    """Write ``rows`` as a rows file (JSONL, formats/rows.md), atomically (temp file + rename);
    a row's ``fold`` is written when it is not None."""
    p = Path(path)
    docs = []
    for r in rows:
        doc: dict[str, Any] = {"split": r.split, "sentence": r.sentence, "label": r.label}
        if r.fold is not None:
            doc["fold"] = r.fold
        docs.append(json.dumps(doc, ensure_ascii=False) + "\n")
    return _write_text(p, "".join(docs))


def read_rows(path: str | os.PathLike) -> list[Row]:
    """Read a rows file (formats/rows.md): one JSON object per line with string ``split``,
    ``sentence`` and ``label`` and an optional int ``fold`` >= 0 (other keys ignored; blank lines
    skipped). Every problem is a ValueError naming the file and line; a file without rows is
    refused."""
    p = Path(path)
    rows = []
    with open_regular(p, "rows file") as raw, io.TextIOWrapper(raw, encoding="utf-8") as f:
        for i, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                doc = json.loads(line)
            except ValueError as e:
                raise ValueError(
                    f"{p}:{i}: expected a JSON object, got a parse error: {e}"
                ) from None
            if not isinstance(doc, dict):
                raise ValueError(f"{p}:{i}: expected a JSON object, got {type(doc).__name__}")
            for key in ("split", "sentence", "label"):
                if not isinstance(doc.get(key), str):
                    raise ValueError(f"{p}:{i}: expected a string {key!r}, got {doc.get(key)!r}")
            if not doc["split"] or not doc["label"]:
                raise ValueError(f"{p}:{i}: expected a non-empty split and label, got {doc!r}")
            fold = doc.get("fold")
            if fold is not None and (type(fold) is not int or fold < 0):
                raise ValueError(f"{p}:{i}: expected 'fold' to be an int >= 0, got {fold!r}")
            rows.append(Row(doc["split"], doc["sentence"], doc["label"], fold))
    if not rows:
        raise ValueError(f"{p}: expected at least one row, got none")
    return rows


def rows_of_split(rows: list[Row], split: str, path: str | os.PathLike = "rows") -> list[Row]:
    """The rows of ``split`` in file order; a ValueError naming ``path`` when there are none."""
    out = [r for r in rows if r.split == split]
    if not out:
        got = sorted({r.split for r in rows})
        raise ValueError(f"{path}: expected rows of split {split!r}, got only splits {got}")
    return out


def read_train_rows(path: str | os.PathLike) -> list[Row]:
    """The ``train`` rows of a rows file (what classifier-langid's ``train`` receives)."""
    return rows_of_split(read_rows(path), "train", path)


def read_all_rows(path: str | os.PathLike) -> list[Row]:
    """Every row of a rows file, each with its fold (what classifier-polarity's cross-fitted
    ``train`` receives: fold model ``i`` is trained on the rows outside fold ``i``)."""
    return read_rows(path)


def polarity_rows(path: str | os.PathLike | None = None) -> list[Row]:
    """gensim's ``pang_lee_polarity.cor`` (200 movie-review snippets, ``__label__neg`` /
    ``__label__pos`` then the text) as rows: label "neg"/"pos", the text stripped, exact
    duplicate sentences dropped (first kept), split and fold by :func:`hashed_row`; file order
    kept."""
    p = Path(path) if path is not None else gensim_test_data_dir() / POLARITY_FILE
    try:
        text = p.read_bytes().decode(POLARITY_ENCODING)
    except FileNotFoundError:
        raise DataError(
            f"{p}: expected gensim's test data file {POLARITY_FILE}, got none"
        ) from None
    rows, seen = [], set()
    for i, line in enumerate(text.split("\n"), 1):
        if not line.strip():
            continue
        tag, _, sentence = line.strip().partition(" ")
        if tag not in ("__label__neg", "__label__pos") or not sentence.strip():
            raise DataError(f"{p}:{i}: expected '__label__neg|pos <text>', got {line[:60]!r}")
        sentence = sentence.strip()
        if sentence in seen:
            continue
        seen.add(sentence)
        rows.append(hashed_row(sentence, tag.removeprefix("__label__")))
    return rows


def langid_rows() -> list[Row]:
    """CLDR display names through babel, labelled by their language: for each language of
    ``LANGID_LANGUAGES`` (en, fr, de, es, it), its names of territories, languages and currencies
    (``babel.Locale(lang).territories`` etc., codes in sorted order). A name that occurs in more
    than one language ("Zimbabwe", "Uruguay") has no single label and is dropped everywhere; a
    name repeated within one language is kept once. Split and fold by :func:`hashed_row`."""
    from babel import Locale  # babel and its CLDR data: only the demo data sets

    found: list[tuple[str, str]] = []
    langs_of: dict[str, set[str]] = {}
    for lang in LANGID_LANGUAGES:
        loc = Locale.parse(lang)
        for cat in LANGID_CATEGORIES:
            names = getattr(loc, cat)
            for code in sorted(names):
                name = str(names[code]).strip()
                if name:
                    found.append((lang, name))
                    langs_of.setdefault(name, set()).add(lang)
    rows, seen = [], set()
    for lang, name in found:
        if len(langs_of[name]) == 1 and name not in seen:
            seen.add(name)
            rows.append(hashed_row(name, lang))
    return rows


def polarity_files(out_dir: str | os.PathLike) -> dict[str, Path]:
    """The polarity rows as a corpus: ``polarity.jsonl`` as ``train`` (read: all its rows, with
    their folds, for cross-fitting) and as ``rows`` (scored: every row by the fold model that
    held it out)."""
    p = write_rows(Path(out_dir) / POLARITY_NAME, polarity_rows())
    return {"train": p, "rows": p}


def langid_files(out_dir: str | os.PathLike) -> dict[str, Path]:
    """The langid rows as a corpus: ``langid.jsonl`` as ``train`` and as ``rows``."""
    p = write_rows(Path(out_dir) / LANGID_NAME, langid_rows())
    return {"train": p, "rows": p}


ENCODER_TRAIN_NAME = "encoder_train.bin"
# How many times the rows' train sentences follow the lee documents in the pretraining text: 3
# makes them ~39% of its bytes instead of ~17% (the val rows are what the encoders are scored
# on; measured for ELECTRA, docs/zoo.md).
ENCODER_ROWS_REPEAT = 3


def encoder_train_documents(rows_repeat: int = ENCODER_ROWS_REPEAT) -> list[str]:
    """The encoders' pretraining text, in order: the 264 lee training documents, then
    ``rows_repeat`` times the sentences of the TRAIN rows of polarity, then of langid (file
    order; never a val row)."""
    if isinstance(rows_repeat, bool) or not isinstance(rows_repeat, int) or rows_repeat < 0:
        raise ValueError(f"rows_repeat: expected an int >= 0, got {rows_repeat!r}")
    lee_train, _ = lee_split()
    rows = [r.sentence for r in polarity_rows() if r.split == "train"]
    rows += [r.sentence for r in langid_rows() if r.split == "train"]
    return lee_train + rows * rows_repeat


def encoder_files(out_dir: str | os.PathLike) -> dict[str, Path]:
    """What the encoders (bert, electra) need: ``train`` = ``encoder_train.bin``, the bytes of
    :func:`encoder_train_documents` (each followed by a newline, as in the lee files), which they
    pretrain on; and both rows files, ``polarity`` and ``langid`` (they are scored on their val
    rows). The rows files' train sentences are in the pretraining text so that the encoders have
    seen text like the val rows (movie-review snippets, names in five languages), not only
    English news; their labels are not, and no val sentence is."""
    out = Path(out_dir)
    files = {
        "polarity": polarity_files(out)["rows"],
        "langid": langid_files(out)["rows"],
    }
    train = write_tokens(
        out / ENCODER_TRAIN_NAME, encode_documents(encoder_train_documents()), dtype="uint8"
    )
    return {"train": train, **files}


# ---- cldr: English -> French names, English -> eight locales' dates (formats/seq2seq-jsonl.md) --

CLDR_NAME_CATEGORIES = ("territories", "languages", "currencies", "scripts")  # babel.Locale attrs
CLDR_DATES = ("1990-01-01", "2019-12-31", 3)  # first day, last day, every 3rd day: 3,653 dates
# Target locales of the dates task, in the order dates are dealt to them: languages whose month
# (and weekday) names inflect or whose order differs from English (lt, hu: year first).
DATE_LOCALES = ("cs", "el", "fi", "hu", "lt", "pl", "ru", "uk")
DATE_FORMAT = "full"  # babel's full date: weekday, day, month name, year
CLDR_TASKS = ("names", "dates8")


def cldr_names_pairs() -> list[tuple[str, str]]:
    """cldr-names: (English, French) CLDR display names of territories, languages, currencies
    and scripts (``babel.Locale("en").territories[code]`` -> ``Locale("fr")...[code]``, codes in
    sorted order, categories in that order), for every code both locales name. An English name
    that occurs twice (under another code or category) keeps its first French name. Sorted by
    the English name."""
    from babel import Locale  # babel, as in langid_rows

    en, fr = Locale.parse("en"), Locale.parse("fr")
    pairs: dict[str, str] = {}
    for cat in CLDR_NAME_CATEGORIES:
        e, f = getattr(en, cat), getattr(fr, cat)
        for code in sorted(e):
            src, tgt = str(e[code]).strip(), str(f.get(code) or "").strip()
            if src and tgt and src not in pairs:
                pairs[src] = tgt
    return sorted(pairs.items())


def cldr_dates_pairs() -> list[tuple[str, str]]:
    """cldr-dates8: English full dates into one of eight locales named by a tag in the source:
    date ``i`` (every 3rd day from 1990-01-01 to 2019-12-31, :data:`CLDR_DATES`, ``i`` from 0)
    goes to locale ``L = DATE_LOCALES[i % 8]``, as ``"[L] " + format_date(d, "full",
    locale="en")`` -> ``format_date(d, "full", locale=L)``, e.g. ``"[fi] Sunday, September 29,
    2019"`` -> ``"sunnuntai 29. syyskuuta 2019"``; in date order. The weekday is in the source,
    so the task is translation (no calendar arithmetic): 8 x (12 month + 7 weekday) names, each
    locale's word order, and its inflected (genitive) month forms."""
    from babel.dates import format_date  # babel, as in langid_rows

    first, last, every = CLDR_DATES
    d, end = datetime.date.fromisoformat(first), datetime.date.fromisoformat(last)
    out = []
    while d <= end:
        loc = DATE_LOCALES[len(out) % len(DATE_LOCALES)]
        src = f"[{loc}] " + format_date(d, DATE_FORMAT, locale="en")
        out.append((src, format_date(d, DATE_FORMAT, locale=loc)))
        d += datetime.timedelta(days=every)
    return out


def write_pairs(path: str | os.PathLike, pairs: list[tuple[str, str]]) -> Path:
    """Write (src, tgt) pairs as a seq2seq task file (JSONL ``{"src", "tgt"}``), atomically."""
    text = "".join(json.dumps({"src": s, "tgt": t}, ensure_ascii=False) + "\n" for s, t in pairs)
    return _write_text(Path(path), text)


def cldr_files(out_dir: str | os.PathLike) -> dict[str, Path]:
    """The cldr corpus: each task's pairs split by :func:`hash_split` of ``src`` (so no source is
    in both splits), written as ``cldr_<task>_<split>.jsonl``; ``train`` is both tasks' train
    pairs together (names first, then dates). Keys: ``train``, ``names_train``, ``names_val``,
    ``dates8_train``, ``dates8_val``."""
    out = Path(out_dir)
    files: dict[str, Path] = {}
    train: list[tuple[str, str]] = []
    for task, pairs in (("names", cldr_names_pairs()), ("dates8", cldr_dates_pairs())):
        for split in ROW_SPLITS:
            part = [p for p in pairs if hash_split(p[0]) == split]
            files[f"{task}_{split}"] = write_pairs(out / f"cldr_{task}_{split}.jsonl", part)
            if split == "train":
                train += part
    files["train"] = write_pairs(out / "cldr_train.jsonl", train)
    return files


def read_cldr_train(path: str | os.PathLike) -> list[tuple[str, str]]:
    """The (src, tgt) pairs of a seq2seq task file (what a seq2seq family's ``train`` gets)."""
    return read_pairs(path)


# ---- wordsim: word2vec's training text and word pairs (formats/word-pairs.md) -----------------

WORD_PATTERN = re.compile(r"[^\W\d_]+")  # a run of letters (Unicode; no digits, no underscore)
WORDSIM_TRAIN_NAME = "wordsim_train.txt"
WORD_PAIR_SOURCES = {"wordsim353": "wordsim353.tsv", "simlex999": "simlex999.txt"}
"""Word-pair file key -> gensim's test data file it is converted from."""
ANALOGY_SOURCE = "questions-words.txt"
"""gensim's analogy questions (formats/analogies.md), copied as they are to ``analogies.txt``."""


def tokenize_words(text: str) -> list[str]:
    """Words of ``text``: lowercased, then every maximal run of letters (regex ``[^\\W\\d_]+``),
    so digits, punctuation and whitespace separate words and are dropped; "Bush's" -> ["bush",
    "s"], "9/11" -> []. Single letters are words."""
    return WORD_PATTERN.findall(text.lower())


def gensim_word_pairs(name: str) -> list[tuple[str, str, float]]:
    """(word 1, word 2, human score) of gensim's ``wordsim353.tsv`` or ``simlex999.txt``
    (``name`` a key of :data:`WORD_PAIR_SOURCES`), in file order: ``#`` lines are the header and
    are skipped; every other line is ``word<TAB>word<TAB>score``. Words keep the source's case
    ("FBI"; lookups lowercase them); a pair listed twice (WordSim353's "money cash") stays twice,
    as in the source."""
    if name not in WORD_PAIR_SOURCES:
        raise ValueError(f"word pairs: expected one of {sorted(WORD_PAIR_SOURCES)}, got {name!r}")
    p = gensim_test_data_dir() / WORD_PAIR_SOURCES[name]
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise DataError(f"{p}: expected gensim's test data file, got no such file") from None
    out = []
    for i, line in enumerate(text.split("\n"), 1):
        if not line.strip() or line.startswith("#"):
            continue
        parts = line.rstrip("\r").split("\t")
        try:
            w1, w2, score = parts[0].strip(), parts[1].strip(), float(parts[2])
        except (IndexError, ValueError):
            raise DataError(f"{p}:{i}: expected 'word<TAB>word<TAB>score', got {line!r}") from None
        if len(parts) != 3 or not w1 or not w2 or " " in w1 + w2:
            raise DataError(f"{p}:{i}: expected 'word<TAB>word<TAB>score', got {line!r}")
        out.append((w1, w2, score))
    return out


def write_word_pairs(
    path: str | os.PathLike, pairs: list[tuple[str, str, float]], source: str = ""
) -> Path:
    """Write a word-pairs file (formats/word-pairs.md): an optional ``# source`` line, then one
    ``w1 w2 score`` line per pair (``repr`` of the float score), atomically."""
    head = f"# {source}\n" if source else ""
    text = head + "".join(f"{a} {b} {s!r}\n" for a, b, s in pairs)
    return _write_text(Path(path), text)


def wordsim_files(out_dir: str | os.PathLike) -> dict[str, Path]:
    """The word2vec corpus: ``train`` = ``wordsim_train.txt``, the lee training documents
    (:func:`lee_split`, the same 264 as the byte models') as text, one per line; ``wordsim353``
    and ``simlex999`` = the word pairs converted from gensim's test data
    (:func:`gensim_word_pairs`) into ``wordsim353.txt`` / ``simlex999.txt``; ``analogies`` =
    gensim's ``questions-words.txt`` byte for byte, as ``analogies.txt``."""
    out = Path(out_dir)
    train_docs, _ = lee_split()
    train = _write_text(out / WORDSIM_TRAIN_NAME, "".join(d + "\n" for d in train_docs))
    files = {"train": train}
    for key, src in WORD_PAIR_SOURCES.items():
        files[key] = write_word_pairs(
            out / f"{key}.txt", gensim_word_pairs(key), source=f"from gensim test data {src}"
        )
    src = gensim_test_data_dir() / ANALOGY_SOURCE
    try:
        questions = _read_bytes(src)
    except FileNotFoundError:
        raise DataError(f"{src}: expected gensim's test data file, got no such file") from None
    files["analogies"] = safeio.write_atomic(out / "analogies.txt", questions, what="data file")
    return files


def read_wordsim_train(path: str | os.PathLike) -> list[list[str]]:
    """The training text as word2vec's ``train`` receives it: one list of words
    (:func:`tokenize_words`) per line (= per document); lines without words are dropped."""
    with open_regular(path, "data file") as raw, io.TextIOWrapper(raw, encoding="utf-8") as f:
        lines = f.read().split("\n")  # universal newlines, as read_text reads
    docs = [tokenize_words(line) for line in lines]
    return [d for d in docs if d]


# ---- the zoo's corpora -------------------------------------------------------------------------


@dataclass(frozen=True)
class Corpus:
    """A corpus the demo zoo trains on (tinyllm.train): ``build(data_dir)`` writes its files into
    the zoo's data folder and returns ``{key: path}`` (always a ``"train"`` key; the other keys
    name the files manifest entries are scored on); ``read_train(files["train"])`` is what a
    family's ``train`` receives. Both are module-level functions: a training worker process
    imports them by name."""

    build: Callable[[Path], dict[str, Path]]
    read_train: Callable[[Path], Any]


def lee_files(out_dir: str | os.PathLike) -> dict[str, Path]:
    """:func:`build_lee` as a corpus: ``{"train": lee_train.bin, "val": lee_val.bin}``."""
    c = build_lee(out_dir)
    return {"train": c.train_path, "val": c.val_path}


def read_lee_train(path: str | os.PathLike) -> np.ndarray:
    """The lee training bytes in memory (uint8, about 317 KB)."""
    return np.array(read_tokens(path))


def read_byte_train(path: str | os.PathLike) -> np.ndarray:
    """A byte token file in memory (uint8): the encoders' pretraining bytes (about 517 KB)."""
    return np.array(read_tokens(path))


CORPORA: dict[str, Corpus] = {
    "lee": Corpus(build=lee_files, read_train=read_lee_train),
    "encoder": Corpus(build=encoder_files, read_train=read_byte_train),
    "polarity": Corpus(build=polarity_files, read_train=read_all_rows),
    "langid": Corpus(build=langid_files, read_train=read_train_rows),
    "cldr": Corpus(build=cldr_files, read_train=read_cldr_train),
    "wordsim": Corpus(build=wordsim_files, read_train=read_wordsim_train),
}
"""Corpus name -> :class:`Corpus`: the only list of the zoo's training data (a recipe's ``data``)."""
