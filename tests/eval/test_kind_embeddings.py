"""The embeddings kind (tinyllm/eval/kinds/embeddings.py): word-pairs files, Spearman over the
in-vocabulary pairs (= scipy.stats.spearmanr, = gensim's evaluate_word_pairs), the Fisher z
interval with sqrt(n - 3) (a hand value), the zoo row and how compare treats it."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import spearmanr

from tinyllm import compare_checks
from tinyllm.compare import compare_reports
from tinyllm.data import WORD_PAIR_SOURCES, gensim_word_pairs, wordsim_files
from tinyllm.eval import kinds, report_files, zoo
from tinyllm.eval.kinds import SCORERS
from tinyllm.eval.kinds import embeddings as kind
from tinyllm.models import word2vec as w2v
from tinyllm.report import Entry

# 2-d unit vectors: pair k is (x_k, ref) with x_k at angle theta_k from ref, so its cosine is
# cos(theta_k); a larger rank gets a smaller angle, i.e. a larger cosine.
COS_RANKS = [5, 1, 2, 3, 7, 4, 6]  # against human ranks 1..7: sum d^2 = 28 -> rho = 0.5 exactly
HUMAN = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0]


def hand_vectors() -> dict[str, np.ndarray]:
    vecs = {"ref": np.array([1.0, 0.0], np.float32)}
    for k, r in enumerate(COS_RANKS):
        theta = (8 - r) * 0.2
        vecs[f"x{k}"] = np.array([math.cos(theta), math.sin(theta)], np.float32)
    return vecs


def write_pairs(path: Path, pairs, header: str = "# test pairs\n") -> Path:
    path.write_text(header + "".join(f"{a} {b} {s}\n" for a, b, s in pairs), encoding="utf-8")
    return path


def entry(name, checkpoint, data) -> Entry:
    return Entry.model_validate(
        {"name": name, "family": "word2vec", "checkpoint": str(checkpoint), "data": str(data)}
    )


@pytest.fixture
def hand_case(tmp_path):
    """A checkpoint of the hand vectors and a pairs file: 7 in-vocabulary pairs (rho = 0.5),
    plus 3 pairs with an out-of-vocabulary word, one of them in upper case (found: lowercased)."""
    ckpt = w2v.save(w2v.from_vectors(hand_vectors()), tmp_path / "w2v")
    pairs = [(f"x{k}", "ref", h) for k, h in enumerate(HUMAN)]
    pairs[3] = ("X3", "REF", HUMAN[3])  # lookups lowercase: still in the vocabulary
    pairs += [("zebra", "ref", 9.0), ("x1", "unicorn", 0.5), ("zebra", "unicorn", 3.0)]
    return ckpt, write_pairs(tmp_path / "pairs.txt", pairs)


# ---- the file format ---------------------------------------------------------------------------


def test_read_word_pairs(tmp_path):
    p = tmp_path / "p.txt"
    p.write_text("# header\n\nlove sex 6.77\ntiger\tcat  7.35\nA b -1e-2\n", encoding="utf-8")
    assert kind.read_word_pairs(p) == [
        ("love", "sex", 6.77),
        ("tiger", "cat", 7.35),
        ("A", "b", -0.01),
    ]


@pytest.mark.parametrize(
    "text, match",
    [
        ("a b 1\na b\n", r"p.txt:2: expected 'w1 w2 score' \(3 fields\), got 2"),
        ("a b c d\n", r"p.txt:1: expected 'w1 w2 score' \(3 fields\), got 4"),
        ("a b high\n", r"p.txt:1: expected a number as the score, got 'high'"),
        ("a b nan\n", r"p.txt:1: expected a finite score"),
        ("# only a comment\n", r"p.txt: expected at least one 'w1 w2 score' line"),
    ],
)
def test_read_word_pairs_refuses_bad_lines(tmp_path, text, match):
    p = tmp_path / "p.txt"
    p.write_text(text, encoding="utf-8")
    with pytest.raises(ValueError, match=match):
        kind.read_word_pairs(p)


def test_converted_files_hold_every_pair_of_gensims_data(tmp_path):
    files = wordsim_files(tmp_path)
    assert set(files) == {"train", "analogies", *WORD_PAIR_SOURCES}
    assert files["analogies"].read_bytes() == questions_path().read_bytes()  # as gensim ships it
    assert kind.is_analogy_file(files["analogies"])
    assert not any(kind.is_analogy_file(files[k]) for k in WORD_PAIR_SOURCES)
    got = kind.read_word_pairs(files["wordsim353"])
    assert len(got) == 353 and got[0] == ("love", "sex", 6.77)
    assert ("stock", "CD", 1.31) in got  # case kept as in the source
    assert len(kind.read_word_pairs(files["simlex999"])) == 999
    assert got == gensim_word_pairs("wordsim353")


# ---- the score ---------------------------------------------------------------------------------


def test_spearman_and_fisher_z_interval_by_hand(hand_case):
    ckpt, pairs = hand_case
    row = zoo.score_entry(entry("ws", ckpt, pairs))
    assert row["status"] == "ok", row["error"]
    assert row["metric"] == "spearman" and row["interval"] == "fisher_z"
    assert row["n"] == 7 and row["value"] == pytest.approx(0.5, abs=1e-12)
    # tanh(atanh(0.5) -+ 1.959964 / sqrt(7 - 3)), by hand: (-0.405886, 0.910303)
    assert row["lo"] == pytest.approx(-0.405886, abs=1e-6)
    assert row["hi"] == pytest.approx(0.910303, abs=1e-6)
    d = row["details"]
    assert d["pairs"] == 10 and d["oov_pairs"] == 3 and d["coverage"] == pytest.approx(0.7)
    assert d["oov_words"] == 2  # zebra, unicorn
    assert d["human_scores"] == HUMAN + [9.0, 0.5, 3.0]  # every pair of the file, in order
    row2, items = zoo.score_entry_items(entry("ws", ckpt, pairs))
    assert row2["items"] == "items/ws.npy"
    vecs = hand_vectors()
    cos = [float(vecs[f"x{k}"].astype(np.float64) @ vecs["ref"]) for k in range(7)]
    assert items[:7] == pytest.approx(cos, abs=1e-7)  # unit vectors: the cosine is the dot
    assert np.isnan(items[7:]).all() and items.size == 10  # pair i of the file is item i


def test_spearman_equals_scipy_on_the_in_vocabulary_pairs(tmp_path):
    rng = np.random.default_rng(0)
    words = [f"w{i}" for i in range(40)]
    vecs = {w: rng.normal(size=8).astype(np.float32) for w in words}
    model = w2v.from_vectors(vecs)
    pairs = [
        (words[i], words[j], float(rng.integers(0, 5))) for i, j in rng.integers(0, 40, (60, 2))
    ]
    pairs += [("w1", "oov", 2.0), ("oov2", "w3", 1.0)]  # ties in the human scores, too
    path = write_pairs(tmp_path / "p.txt", pairs)
    scored = kind.score(
        entry("x", tmp_path, path), model, path, np.random.default_rng(0), kind.Options()
    )
    cos = [
        float(vecs[a] @ vecs[b] / (np.linalg.norm(vecs[a]) * np.linalg.norm(vecs[b])))
        for a, b, _ in pairs[:60]
    ]
    want = spearmanr(cos, [s for _, _, s in pairs[:60]]).statistic
    assert scored.n == 60 and scored.interval.value == pytest.approx(want, abs=1e-9)
    half = 1.959963984540054 / math.sqrt(60 - 3)
    assert scored.interval.lo == pytest.approx(math.tanh(math.atanh(want) - half), abs=1e-12)


def test_same_spearman_and_oov_as_gensims_evaluate_word_pairs(hand_case, tmp_path):
    """Differential: gensim reads the vectors back from save_word2vec and evaluates the same
    pairs file (case-insensitive, as our lookups)."""
    from gensim.models import KeyedVectors

    ckpt, pairs = hand_case
    rng = np.random.default_rng(1)
    vecs = {f"v{i}": rng.normal(size=5).astype(np.float32) for i in range(30)}
    words = list(vecs)
    extra = [
        (words[i], words[j], float(rng.uniform(0, 10)))
        for i, j in rng.integers(0, 30, (50, 2))
        if i != j  # a word with itself: cosine 1 in float64 (tied), not always in gensim's float32
    ]
    extra += [("V3", "missing", 1.0)]
    path = write_pairs(tmp_path / "p2.txt", extra)
    kv = KeyedVectors.load_word2vec_format(
        str(w2v.save_word2vec(vecs, tmp_path / "v.txt")), binary=False
    )
    _, (g_rho, _), g_oov = kv.evaluate_word_pairs(str(path), delimiter=" ")
    scored = kind.score(entry("x", ckpt, path), w2v.from_vectors(vecs), path, None, kind.Options())
    assert scored.interval.value == pytest.approx(g_rho, abs=1e-6)
    assert 100 * scored.details["oov_pairs"] / scored.details["pairs"] == pytest.approx(g_oov)


def test_too_few_pairs_in_vocabulary_is_an_error_row(tmp_path):
    ckpt = w2v.save(w2v.from_vectors(hand_vectors()), tmp_path / "w2v")
    path = write_pairs(tmp_path / "p.txt", [("x0", "ref", 1), ("x1", "ref", 2), ("x2", "zzz", 3)])
    row = zoo.score_entry(entry("ws", ckpt, path))
    assert row["status"] == "error" and row["value"] is None
    assert "expected at least 4 pairs with both words in the vocabulary" in row["error"]["message"]
    assert "got 2 of 3" in row["error"]["message"]


def test_rng_is_unused_same_row_for_any_seed(hand_case):
    ckpt, pairs = hand_case
    a = zoo.score_entry(entry("ws", ckpt, pairs), seed=0)
    b = zoo.score_entry(entry("ws", ckpt, pairs), seed=123)
    assert (a["value"], a["lo"], a["hi"], a["n"]) == (b["value"], b["lo"], b["hi"], b["n"])


def test_registered_and_the_report_validates(hand_case, tmp_path):
    assert SCORERS["embeddings"] is kind.score and kinds.METRIC_OF_KIND["embeddings"] == "spearman"
    ckpt, pairs = hand_case
    manifest = {
        "suite": "zoo",
        "entries": [
            {"name": "w2v-ws", "family": "word2vec", "checkpoint": str(ckpt), "data": str(pairs)}
        ],
    }
    report = zoo.run_zoo(manifest, seed=0, release="r1")
    out = report_files.write_report(report, tmp_path / "rep" / "report.json")  # schema-validated
    doc = report_files.read_report(out).to_json()
    row = doc["rows"][0]
    assert row["status"] == "ok" and row["items"] == "items/w2v-ws.npy"
    assert row["kind"] == "embeddings"
    items = report_files.load_items(out, row)
    assert items.size == 10 and int(np.isnan(items).sum()) == 3
    assert (
        compare_checks.row_items_problem(compare_checks.parse_row(row), items) is None
    )  # n, rho and the human scores agree


def test_compare_knows_which_kinds_have_nan_items():
    """compare imports no kind: its table of coverage kinds is the kinds' NAN_ITEMS."""
    from tinyllm.eval.kinds import KIND_MODULES

    nan_kinds = {m.KIND for m in KIND_MODULES if getattr(m, "NAN_ITEMS", 0)}
    assert nan_kinds == compare_checks.COVERAGE_KINDS
    assert compare_checks.HUMAN_KEY == kind.HUMAN_KEY


def test_two_releases_of_a_spearman_row_are_compared_pair_by_pair(hand_case, tmp_path):
    """The same checkpoint twice: unchanged, p 1, delta 0 on the 7 pairs both cover; a release
    whose vectors rank the pairs exactly as the humans do: rho 1 vs 0.5, tested."""
    ckpt, pairs = hand_case
    row, items = zoo.score_entry_items(entry("ws", ckpt, pairs))
    vecs = hand_vectors()
    for k in range(7):  # angles that shrink with the human rank: cosines in the human order
        theta = (8 - (k + 1)) * 0.2
        vecs[f"x{k}"] = np.array([math.cos(theta), math.sin(theta)], np.float32)
    better = w2v.save(w2v.from_vectors(vecs), tmp_path / "better")
    row_b, items_b = zoo.score_entry_items(entry("ws", better, pairs))
    assert row_b["value"] == pytest.approx(1.0)

    def rep(release, r):
        return {"release": release, "created_at": None, "rows": [dict(r)]}

    same = compare_reports(rep("r1", row), rep("r2", row), lambda n: items, lambda n: items)
    (r,) = same.rows
    assert (r.verdict, r.p, r.delta, r.n) == ("unchanged", 1.0, 0.0, 7)
    cmp = compare_reports(rep("r1", row), rep("r2", row_b), lambda n: items, lambda n: items_b)
    (r,) = cmp.rows
    assert r.n == 7 and r.delta == pytest.approx(0.5, abs=1e-12)
    assert r.reason is None and r.p is not None and r.lo <= r.delta <= r.hi
    # 7 pairs: exact over the 2**7 swap patterns, too few for p < 0.05 here
    assert r.verdict == "unchanged" and r.p * 128 == round(r.p * 128)


# ---- word pairs: OOV pairs, the scored positions, the fewest pairs, any locale -------------------


def test_pairs_after_an_oov_pair_are_still_scored(tmp_path):
    """Out-of-vocabulary pairs first: every in-vocabulary pair after them still counts (rho is
    the hand value 0.5 of the 7 pairs); OOV words are counted as the file spells them."""
    ckpt = w2v.save(w2v.from_vectors(hand_vectors()), tmp_path / "w2v")
    pairs = [("zebra", "unicorn", 3.0), ("x0", "dragon", 1.0)]
    pairs += [(f"x{k}", "ref", h) for k, h in enumerate(HUMAN)]
    path = write_pairs(tmp_path / "p.txt", pairs)
    row = zoo.score_entry(entry("ws", ckpt, path))
    assert row["status"] == "ok", row["error"]
    assert row["n"] == 7 and row["value"] == pytest.approx(0.5, abs=1e-12)
    assert row["details"]["oov_pairs"] == 2 and row["details"]["oov_words"] == 3


def test_pair_similarities_returns_the_scored_positions_and_refuses_non_finite():
    table = {("a", "b"): 0.5, ("c", "d"): -0.25}

    def sim(model, w1, w2):
        return table.get((w1, w2))

    pairs = [("x", "y", 1.0), ("a", "b", 2.0), ("q", "r", 3.0), ("c", "d", 4.0)]
    cos, human, idx = kind.pair_similarities(sim, None, pairs)
    assert idx == [1, 3]
    assert cos.dtype == human.dtype == np.float64
    assert cos.tolist() == [0.5, -0.25] and human.tolist() == [2.0, 4.0]
    with pytest.raises(ValueError) as ei:
        kind.pair_similarities(lambda m, a, b: float("nan"), None, pairs)
    assert str(ei.value) == "similarity('x', 'y'): expected a finite number, got nan"


def test_four_pairs_are_enough_and_pearson_is_scipys(tmp_path):
    from scipy.stats import pearsonr

    vecs = hand_vectors()
    ckpt = w2v.save(w2v.from_vectors(vecs), tmp_path / "w2v")
    pairs = [(f"x{k}", "ref", h) for k, h in enumerate(HUMAN[:4])]
    path = write_pairs(tmp_path / "p.txt", pairs)
    row = zoo.score_entry(entry("ws", ckpt, path))
    assert row["status"] == "ok", row["error"]
    cos = [float(vecs[f"x{k}"] @ vecs["ref"]) for k in range(4)]  # unit vectors
    rho = spearmanr(cos, HUMAN[:4]).statistic
    assert row["n"] == 4 and row["value"] == pytest.approx(rho, abs=1e-12)
    half = 1.959963984540054 / math.sqrt(4 - 3)
    assert row["lo"] == pytest.approx(math.tanh(math.atanh(rho) - half), abs=1e-9)
    pearson = pearsonr(cos, HUMAN[:4]).statistic
    assert row["details"]["pearson"] == pytest.approx(pearson, abs=1e-6)


def test_word_pairs_are_read_as_utf8_whatever_the_locale(tmp_path):
    import locale
    import sys

    if sys.flags.utf8_mode:
        pytest.skip("Python's UTF-8 mode ignores the locale")
    p = write_pairs(tmp_path / "p.txt", [("café", "thé", 7.5)])
    old = locale.setlocale(locale.LC_CTYPE)
    locale.setlocale(locale.LC_CTYPE, "C")  # default text encoding: ASCII
    try:
        got = kind.read_word_pairs(p)
    finally:
        locale.setlocale(locale.LC_CTYPE, old)
    assert got == [("café", "thé", 7.5)]


# ---- word analogies ----------------------------------------------------------------------------


def questions_path():
    from gensim.test.utils import datapath

    return Path(datapath("questions-words.txt"))


def write_questions(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def test_read_analogies_and_the_file_test(tmp_path):
    qs = kind.read_analogies(questions_path())
    assert len(qs) == 19544 and len({q[0] for q in qs}) == 14
    assert qs[0] == ("capital-common-countries", "Athens", "Greece", "Baghdad", "Iraq")
    assert kind.is_analogy_file(questions_path())
    p = write_pairs(tmp_path / "p.txt", [("a", "b", 1.0)])
    assert not kind.is_analogy_file(p)
    q = write_questions(tmp_path / "q.txt", "\n: s1\na b c d\n\n: s 2\nE f g h\n")
    assert kind.read_analogies(q) == [("s1", "a", "b", "c", "d"), ("s 2", "E", "f", "g", "h")]


@pytest.mark.parametrize(
    "text, match",
    [
        ("a b c d\n", r"q.txt:1: expected a ': section' line before the first question"),
        (": s\na b c\n", r"q.txt:2: expected 'a b c d' \(4 words\), got 3"),
        (": s\n", r"q.txt: expected at least one 'a b c d' question, got none"),
    ],
)
def test_read_analogies_refuses_bad_lines(tmp_path, text, match):
    with pytest.raises(ValueError, match=match):
        kind.read_analogies(write_questions(tmp_path / "q.txt", text))


def planted_vectors(rng, questions, dim=16):
    """Vectors of every question word in which each section's b - a is one offset plus noise,
    so that 3CosAdd answers many questions and misses others; mixed-case duplicates added."""
    words = sorted({w for q in questions for w in q[1:]})
    vecs = {w: rng.normal(size=dim).astype(np.float32) for w in words}
    for section in dict.fromkeys(q[0] for q in questions):
        off = 2 * rng.normal(size=dim).astype(np.float32)
        for _, a, b, c, d in (q for q in questions if q[0] == section):
            vecs[b] = vecs[a] + off + 0.4 * rng.normal(size=dim).astype(np.float32)
            vecs[d] = vecs[c] + off + 0.4 * rng.normal(size=dim).astype(np.float32)
    # a second, less frequent spelling of 40 capitalized words (listed after every other word)
    # with a random vector: lookups find the first spelling, and neither spelling of a, b or c
    # may be the answer
    for w in [w for w in words if w.lower() != w and w.lower() not in vecs][:40]:
        vecs[w.lower()] = rng.normal(size=dim).astype(np.float32)
    return vecs


@pytest.mark.parametrize("source", ["lee_fasttext", "planted"])
def test_analogies_equal_gensims_evaluate_word_analogies(source, tmp_path):
    """Differential: the same vectors, the same questions-words.txt, gensim's 3CosAdd (with its
    case-insensitive lookups, restrict_vocab and OOV skipping) and ours: the same accuracy,
    the same questions answered right, the same out-of-vocabulary count."""
    from gensim.models import KeyedVectors
    from gensim.test.utils import datapath

    path, restrict = questions_path(), 300_000
    if source == "lee_fasttext":  # real vectors trained on the lee text (gensim's test data)
        kv = KeyedVectors.load_word2vec_format(datapath("lee_fasttext.vec"))
    else:  # the first 100 questions of each section (gensim answers one question at a time)
        lines, count = [], 0
        for line in path.read_text(encoding="utf-8").splitlines():
            count = 0 if line.startswith(": ") else count + 1
            if count <= 100:
                lines.append(line)
        path = write_questions(tmp_path / "q.txt", "\n".join(lines) + "\n")
        vecs = planted_vectors(np.random.default_rng(0), kind.read_analogies(path))
        kv = KeyedVectors(16)
        kv.add_vectors(list(vecs), np.stack(list(vecs.values())))
        restrict = 500  # cuts off some question words: more OOV questions
    questions = kind.read_analogies(path)
    score, sections = kv.evaluate_word_analogies(str(path), restrict_vocab=restrict)
    items = kind.solve_analogies(kv.index_to_key, kv.vectors, questions, restrict_vocab=restrict)
    answered = ~np.isnan(items)
    assert np.nanmean(items) == pytest.approx(score, abs=1e-15)
    total = sections[-1]
    assert int(np.nansum(items)) == len(total["correct"])
    assert int(answered.sum()) == len(total["correct"]) + len(total["incorrect"])
    right = {
        tuple(w.upper() for w in q[1:]) for q, x in zip(questions, items, strict=True) if x == 1
    }
    assert right == set(total["correct"])
    if source == "planted":
        assert 0.3 < score < 0.95 and answered.sum() < len(questions)


def test_analogy_row_through_the_zoo(tmp_path):
    """A word2vec checkpoint scored on an analogy file: acc with its Wilson interval, items per
    question in file order (NaN out of vocabulary), the OOV count and the sections."""
    from tinyllm.stats import wilson_interval

    e = np.eye(4, dtype=np.float32)
    vecs = {"man": e[0], "king": e[0] + e[1], "woman": e[2], "queen": e[2] + e[1], "pear": e[3]}
    ckpt = w2v.save(w2v.from_vectors(vecs), tmp_path / "w2v")
    q = write_questions(
        tmp_path / "q.txt",
        ": royals\nman king woman queen\nMAN KING WOMAN QUEEN\nman king woman pear\n"
        ": other\nman king woman unicorn\nking man queen woman\n",
    )
    row, items = zoo.score_entry_items(entry("an", ckpt, q))
    assert row["status"] == "ok", row["error"]
    assert (row["metric"], row["interval"], row["kind"]) == ("acc", "wilson", "embeddings")
    assert items.tolist()[:3] == [1.0, 1.0, 0.0] and np.isnan(items[3]) and items[4] == 1.0
    ci = wilson_interval(3, 4)
    assert (row["value"], row["lo"], row["hi"], row["n"]) == (0.75, ci.lo, ci.hi, 4)
    d = row["details"]
    assert (d["questions"], d["oov_questions"], d["coverage"]) == (5, 1, 0.8)
    assert d["sections"] == {
        "royals": {"correct": 2, "answered": 3, "questions": 3},
        "other": {"correct": 1, "answered": 1, "questions": 2},
    }
    assert compare_checks.row_items_problem(compare_checks.parse_row(row), items) is None
    none = write_questions(tmp_path / "none.txt", ": s\nzebra lion tiger cat\n")
    bad = zoo.score_entry(entry("an", ckpt, none))
    assert bad["status"] == "error"
    assert (
        "expected at least one question with its four words in the vocabulary, got none of 1"
        in (bad["error"]["message"])
    )
