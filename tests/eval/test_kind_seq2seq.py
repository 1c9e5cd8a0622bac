"""The seq2seq kind (tinyllm/eval/kinds/seq2seq.py): task files, exact match with eos stripped,
the zoo row (Wilson interval, per-item scores, only the scored file, same seed -> same row)."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import sys

import numpy as np
import pytest
import torch
import yaml

from tinyllm import stats
from tinyllm.data import cldr_dates_pairs, cldr_files, cldr_names_pairs, hash_split
from tinyllm.eval import kinds, zoo
from tinyllm.eval.kinds import SCORERS
from tinyllm.eval.kinds import seq2seq as kind
from tinyllm.models import copy_baseline, seq2seq
from tinyllm.report import Entry
from tinyllm.tokens import EOS, PAD

PAIRS = [
    ("March 5, 2024", "5 mars 2024"),
    ("Afar", "afar"),
    ("Canada", "Canada"),
    ("nothing", ""),
    ("Côte d’Ivoire", "Côte d’Ivoire"),
    ("", ""),
]


def write_jsonl(path, pairs, extra=None):
    lines = [
        json.dumps({"src": s, "tgt": t, **(extra or {})}, ensure_ascii=False) for s, t in pairs
    ]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def entry(name, family, checkpoint, data, **options):
    d = {"name": name, "family": family, "checkpoint": str(checkpoint), "data": str(data)}
    if options:
        d["options"] = options
    return Entry.model_validate(d)


# ------------------------------------------------------------------------------ task files


def test_read_pairs_reads_in_order_and_ignores_other_keys(tmp_path):
    p = write_jsonl(tmp_path / "t.jsonl", PAIRS, extra={"id": 1})
    assert kind.read_pairs(p) == PAIRS


@pytest.mark.parametrize(
    "text, match",
    [
        ('{"src": "a", "tgt": "b"}\n{"src": "a"}\n', r"t.jsonl:2: expected 'tgt' to be a string"),
        ('{"src": 1, "tgt": "b"}\n', r"t.jsonl:1: expected 'src' to be a string, got 1"),
        ("[1, 2]\n", r"t.jsonl:1: expected a JSON object, got list"),
        ("{oops\n", r"t.jsonl:1: expected a JSON object, got invalid JSON"),
        ("\n\n", r"t.jsonl: expected at least one"),
    ],
)
def test_read_pairs_refuses_bad_lines_naming_file_and_line(tmp_path, text, match):
    p = tmp_path / "t.jsonl"
    p.write_text(text, encoding="utf-8")
    with pytest.raises(ValueError, match=match):
        kind.read_pairs(p)


# ----------------------------------------------------------------------------- exact match


def test_exact_match_strips_eos_and_padding_and_compares_bytes():
    mars = list(b"mars")
    assert kind.exact_match([*mars, EOS], "mars") == 1
    assert kind.exact_match([*mars, EOS, PAD, PAD], "mars") == 1
    assert kind.exact_match([EOS], "") == 1
    assert kind.exact_match([*mars], "mars") == 1  # cut at max_len: no eos to strip
    assert kind.exact_match([*mars, EOS, *b"x"], "mars") == 1  # only up to the first eos
    assert kind.exact_match([*mars, EOS], "Mars") == 0  # no case folding
    assert kind.exact_match([*mars, EOS], "mars ") == 0  # no whitespace normalization
    e_acute = list("é".encode())  # U+00E9, 2 bytes
    e_combining = "e\u0301"  # e + combining acute: the same glyph, other bytes
    assert kind.exact_match([*e_acute, EOS], "é") == 1
    assert kind.exact_match([*e_acute, EOS], e_combining) == 0


# ------------------------------------------------------------------- the eos-bias model


def eos_model():
    """A seq2seq model whose output bias puts (almost) all probability on EOS at every step."""
    torch.manual_seed(0)
    m = seq2seq.Model(seq2seq.Config(emb_dim=8, hidden=16, max_len=32)).eval()
    with torch.no_grad():
        m.out.bias[EOS] = 1e4
    return m


def test_huge_eos_bias_scores_exactly_the_empty_targets(tmp_path):
    data = write_jsonl(tmp_path / "val.jsonl", PAIRS)
    model = eos_model()
    hyps = seq2seq.translate_ids(model, [s for s, _ in PAIRS], beam=4)
    assert hyps == [[EOS]] * len(PAIRS)  # the model answers the empty string everywhere
    scored = kind.score(
        entry("s", "seq2seq", "x", data), model, data, np.random.default_rng(0), kind.Options()
    )
    want = [1.0 if t == "" else 0.0 for _, t in PAIRS]  # items 4 and 6 have empty targets
    assert scored.items.tolist() == want
    assert scored.interval.value == 2 / 6
    assert scored.metric == "exact_match" and scored.method == "wilson"
    assert scored.details == {"beam": 4, "n_empty_targets": 2}
    # with the eos left on the hypothesis, no item would match: [EOS] is not the bytes of ""
    assert [int(h == list(t.encode())) for h, (_, t) in zip(hyps, PAIRS, strict=True)] == [0] * len(
        PAIRS
    )


def test_copy_baseline_scores_the_pairs_spelled_alike(tmp_path):
    data = write_jsonl(tmp_path / "val.jsonl", PAIRS)
    model = copy_baseline.train(copy_baseline.Config(), PAIRS, seed=0)
    scored = kind.score(
        entry("c", "copy", "x", data), model, data, np.random.default_rng(0), kind.Options()
    )
    assert scored.items.tolist() == [float(s == t) for s, t in PAIRS]  # Canada, Côte, ""
    assert scored.interval.value == 3 / 6
    for beam in (1, 2, 5):
        assert copy_baseline.translate(model, [s for s, _ in PAIRS], beam=beam) == [
            s for s, _ in PAIRS
        ]


def test_beam_comes_from_the_entry_options_default_4(tmp_path, monkeypatch):
    data = write_jsonl(tmp_path / "val.jsonl", PAIRS)
    seen = []
    real = copy_baseline.translate_ids

    def spy(model, srcs, beam=4, **kw):
        seen.append(beam)
        return real(model, srcs, beam=beam, **kw)

    monkeypatch.setattr(copy_baseline, "translate_ids", spy)
    model = copy_baseline.Model(copy_baseline.Config())
    rng = np.random.default_rng(0)
    for e in (entry("c", "copy", "x", data), entry("c", "copy", "x", data, beam=2)):
        opts = kind.DEFINITION.read_options(e)
        assert kind.score(e, model, data, rng, opts).details["beam"] == (opts.beam or 4)
    assert seen == [4, 2]


def test_kind_is_registered():
    assert SCORERS["seq2seq"] is kind.score
    assert kinds.METRIC_OF_KIND["seq2seq"] == kind.METRIC == "exact_match"


# ------------------------------------------------------------------------------ the zoo row


@pytest.fixture(scope="module")
def cldr_zoo(tmp_path_factory):
    """The real cldr files and a seq2seq model trained for a few steps on their train pairs."""
    d = tmp_path_factory.mktemp("cldr")
    files = cldr_files(d / "data")
    pairs = kind.read_pairs(files["train"])
    cfg = seq2seq.Config(emb_dim=16, hidden=32, max_len=48)
    model = seq2seq.train(cfg, pairs, seed=0, steps=60, batch_size=32, lr=1e-2, warmup=5)
    seq2seq.save(model, d / "s2s")
    copy_baseline.save(copy_baseline.Model(copy_baseline.Config()), d / "copy")
    return d, files


def test_zoo_row_has_a_wilson_interval_and_one_item_per_val_pair(cldr_zoo, tmp_path):
    d, files = cldr_zoo
    for name, family in (("s2s", "seq2seq"), ("copy", "copy")):
        e = entry(f"{name}-names", family, d / name, files["names_val"], beam=2)
        row = zoo.score_entry(e, seed=0, items_dir=tmp_path / "items")
        assert row["status"] == "ok", row
        items = np.load(tmp_path / "items" / f"{name}-names.npy", allow_pickle=False)
        n_val = len(kind.read_pairs(files["names_val"]))
        assert items.shape == (n_val,) == (row["n"],)
        assert set(np.unique(items)) <= {0.0, 1.0}
        w = stats.wilson_interval(int(items.sum()), n_val)
        assert (row["value"], row["lo"], row["hi"]) == (w.value, w.lo, w.hi)
        assert row["metric"] == "exact_match" and row["interval"] == "wilson"
        if family == "copy":  # copy's items are exactly the pairs spelled alike
            val = kind.read_pairs(files["names_val"])
            assert items.tolist() == [float(s == t) for s, t in val]


def test_only_the_val_split_is_scored(cldr_zoo):
    d, files = cldr_zoo
    names = cldr_names_pairs()
    val = kind.read_pairs(files["names_val"])
    train = kind.read_pairs(files["names_train"])
    assert {s for s, _ in val}.isdisjoint({s for s, _ in train})
    assert all(hash_split(s) == "val" for s, _ in val)
    assert sorted(val + train) == sorted(names)
    assert len(kind.read_pairs(files["dates8_val"])) + len(
        kind.read_pairs(files["dates8_train"])
    ) == len(cldr_dates_pairs())
    assert kind.read_pairs(files["train"]) == train + kind.read_pairs(files["dates8_train"])
    row = zoo.score_entry(entry("copy-names", "copy", d / "copy", files["names_val"]), seed=0)
    assert row["n"] == len(val) < len(names)


def test_same_seed_same_row(cldr_zoo):
    d, files = cldr_zoo
    e = entry("s2s-names", "seq2seq", d / "s2s", files["names_val"], beam=2)

    def strip(r):
        return {k: v for k, v in r.items() if k != "seconds"}

    a, b = zoo.score_entry(e, seed=0), zoo.score_entry(e, seed=0)
    assert a["status"] == "ok" and strip(a) == strip(b)
    assert zoo.score_entry(e, seed=5)["value"] == a["value"]  # the seed draws nothing here


def test_the_manifest_that_zoo_build_writes_for_seq2seq_recipes_is_scored(tmp_path):
    """The default seq2seq recipes' shape (data "cldr", beam 4; two entries each, copy only
    names: on dates8 it is the seq2seq rows' baseline), tiny."""
    from tinyllm import train

    default = train.default_recipes()
    recipes = {}
    for name, small, settings in (
        ("seq2seq", {"emb_dim": 8, "hidden": 16, "max_len": 48}, {"batch_size": 8}),
        ("transformer", {"n_embd": 16, "n_head": 2, "n_enc_layer": 1, "n_dec_layer": 1}, {}),
        ("copy", {}, {}),
    ):
        r = default[name]
        assert r.data == "cldr" and r.options == {"beam": 4}
        tasks = {"names": "names_val"} | ({} if name == "copy" else {"dates8": "dates8_val"})
        assert r.entries == {f"{name}-{t}": split for t, split in tasks.items()}
        recipes[name] = dataclasses.replace(
            r,
            config={**r.config, **small},
            train_config={**r.train_config, **settings},
            steps=2,
        )
    train.build_zoo(tmp_path, progress=False, jobs=1, recipes=recipes)
    m = yaml.safe_load((tmp_path / "zoo.yaml").read_text())
    names = [e["name"] for e in m["entries"]]
    assert names == [f"{f}-{t}" for f in recipes for t in ("names", "dates8")][:-1]
    # score only the copy row here (the tiny trained ones decode to max_len: slow, not useful)
    copy_rows = [e for e in m["entries"] if e["family"] == "copy"]
    rows = [zoo.score_entry(e, base_dir=tmp_path) for e in copy_rows]
    assert [r["status"] for r in rows] == ["ok"]
    assert rows[0]["n"] == 291 and rows[0]["value"] == 21 / 291
    for e in m["entries"]:
        assert zoo.read_config(tmp_path / e["checkpoint"])["tl_arch"] == e["family"]


# ---- reading pairs (blank lines, any locale), refused options, short answers ---------------------


@contextlib.contextmanager
def ascii_locale():
    """LC_CTYPE "C" for the block: Python's default text encoding becomes ASCII, as on a system
    whose locale is not UTF-8."""
    import locale

    if sys.flags.utf8_mode:
        pytest.skip("Python's UTF-8 mode ignores the locale")
    old = locale.setlocale(locale.LC_CTYPE)
    locale.setlocale(locale.LC_CTYPE, "C")
    try:
        yield
    finally:
        locale.setlocale(locale.LC_CTYPE, old)


def test_read_pairs_skips_blank_lines_anywhere_and_reads_utf8_whatever_the_locale(tmp_path):
    p = tmp_path / "t.jsonl"
    lines = [json.dumps({"src": s, "tgt": t}, ensure_ascii=False) for s, t in PAIRS]
    p.write_text("\n".join([lines[0], "", "   ", *lines[1:]]) + "\n", encoding="utf-8")
    with ascii_locale():
        assert kind.read_pairs(p) == PAIRS  # "Côte d’Ivoire" is not ASCII
    p.write_bytes(b'{"src": "a", "tgt": "\xe9"}\n')  # latin-1, not UTF-8
    with pytest.raises(ValueError, match=r"t.jsonl: expected UTF-8 JSONL, got undecodable bytes"):
        kind.read_pairs(p)


def test_window_and_split_options_are_refused_naming_them(tmp_path):
    data = write_jsonl(tmp_path / "val.jsonl", PAIRS)
    for opts in ({"ctx_len": 8}, {"stride": 2}, {"split": "val"}):
        with pytest.raises(ValueError) as ei:
            kind.DEFINITION.read_options(entry("c", "copy", "x", data, **opts))
        (name,) = opts
        assert str(ei.value) == (
            f"entry 'c': options.{name}: expected options of kind seq2seq (beam, device, dtype), "
            f"got {name}"
        )


def test_a_family_that_answers_fewer_hypotheses_is_refused(tmp_path, monkeypatch):
    data = write_jsonl(tmp_path / "val.jsonl", PAIRS)
    real = copy_baseline.translate_ids
    monkeypatch.setattr(
        copy_baseline, "translate_ids", lambda m, srcs, beam=4: real(m, srcs, beam=beam)[:-1]
    )
    model = copy_baseline.Model(copy_baseline.Config())
    with pytest.raises(ValueError) as ei:
        kind.score(entry("c", "copy", "x", data), model, data, None, kind.Options())
    assert str(ei.value) == "copy.translate_ids: expected 6 hypotheses, got 5"
