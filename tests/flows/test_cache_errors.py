"""Only ok rows are reused: an entry whose row is an error is scored again by the next run of the
release or by `--only NAME`; an ok row comes back from the result cache (its task run ends Cached);
`--refresh` scores every entry; `--release` with `--out` is refused.

The planted failure is in the environment, not in our code: during the first run transformers
cannot be imported (a broken install; the issue's thread race failed the same way, with an
ImportError), so the Hugging Face entry is an ImportError row while the bigram is scored. Its
checkpoint, data, seed and code, hence its cache key, are the same in every run.
"""

from __future__ import annotations

import json
import os
import sys

import numpy as np
import pytest
import torch
import yaml
from typer.testing import CliRunner
from zoo_rows import assert_holm, entry_level, unhashed

from tinyllm.cli import app
from tinyllm.models import bigram
from tinyllm.store import open_store
from tinyllm.tokens import write_tokens
from tinyllm_suite.eval_suite import eval_suite
from tinyllm_suite.eval_tasks import entry_cache_key

TEXT = b"the cat sat on the mat. the dog sat on the log. a cat and a dog met on a mat. " * 6
ENTRIES = [
    {"name": "bigram", "family": "bigram", "checkpoint": "bigram", "data": "val.tok"},
    {"name": "hf", "family": "hf", "checkpoint": "hf", "data": "val.tok"},
]


@pytest.fixture
def zoo_dir(tmp_path):
    """A bigram trained from counts, a random 2-layer GPT-2 (saved with save_pretrained, byte
    vocabulary), 200 byte tokens and the manifest of both."""
    from transformers import GPT2Config, GPT2LMHeadModel

    d = tmp_path / "zoo"
    d.mkdir()
    data = np.frombuffer(TEXT, dtype=np.uint8)
    write_tokens(d / "val.tok", data[:200])
    bigram.save(bigram.train(bigram.Config(k=0.5), data, seed=0), d / "bigram")
    torch.manual_seed(0)
    cfg = GPT2Config(
        vocab_size=256, n_positions=64, n_embd=16, n_layer=2, n_head=2, n_inner=32,
        bos_token_id=0, eos_token_id=0,
    )  # fmt: skip
    GPT2LMHeadModel(cfg).eval().save_pretrained(d / "hf")
    (d / "zoo.yaml").write_text(yaml.safe_dump({"suite": "zoo", "entries": ENTRIES}))
    return d


def by_name(out: dict) -> dict[str, dict]:
    return {r["name"]: r for r in out["report"]["rows"]}


def unhashed_row(row: dict) -> dict:
    """A stored row with its arrays' names as the task names them (no content hash)."""
    out = dict(row, items=unhashed(row["items"]), units=unhashed(row.get("units")))
    return dict(out, baseline=dict(row["baseline"], items=unhashed(row["baseline"]["items"])))


def cache_file(zoo_dir, name: str):
    """Where the result cache keeps entry ``name``'s record (a file named by its cache key)."""
    entry = next(e for e in ENTRIES if e["name"] == name)
    key = entry_cache_key(None, {"entry": entry, "base_dir": str(zoo_dir), "seed": 0})
    assert key is not None
    return os.path.join(os.environ["TINYLLM_CACHE_DIR"], key)


def test_an_error_row_is_never_reused_and_an_ok_row_always_is(zoo_dir, tmp_path, monkeypatch):
    m, store = str(zoo_dir / "zoo.yaml"), str(tmp_path / "store")
    with monkeypatch.context() as broken:
        broken.setitem(sys.modules, "transformers", None)  # `import transformers` fails
        r1 = eval_suite(manifest=m, release="r1", store=store)
    rows = by_name(r1)
    assert rows["bigram"]["status"] == "ok"
    assert rows["hf"]["status"] == "error"
    assert rows["hf"]["error"]["type"] == "ModuleNotFoundError"  # an ImportError
    assert "transformers" in rows["hf"]["error"]["message"]
    assert r1["cached"] == []
    # the ok row has a cache record, the error row none
    assert os.path.isfile(cache_file(zoo_dir, "bigram"))
    assert not os.path.exists(cache_file(zoo_dir, "hf"))

    # the failure went away: `--only hf` scores it again (it was served the cached error row)
    r1b = eval_suite(manifest=m, release="r1", store=store, only=["hf"])
    assert r1b["cached"] == []
    hf_row = by_name(r1b)["hf"]
    assert hf_row["status"] == "ok" and hf_row["error"] is None
    assert hf_row["n"] == 199 and 0 < hf_row["lo"] <= hf_row["value"] <= hf_row["hi"]
    assert os.path.isfile(cache_file(zoo_dir, "hf"))
    merged = open_store(store).read_report("r1")["rows"]
    assert [r["status"] for r in merged] == ["ok", "ok"]
    assert merged[1] == hf_row
    # the cached bigram row is the first run's but for what its report decides over all its
    # rows: publish adjusted the merged rows' beats-baseline p together (Holm over 2 now, over
    # the bigram alone in r1) and read their verdicts from it
    assert entry_level(merged[0]) == entry_level(rows["bigram"])
    assert_holm(r1["report"]["rows"])
    assert_holm(merged)
    # a task's row is a family of one (p_adjusted = p); its cache record is that row, equal to
    # the report's but for the report-level fields and the store's content hash in the names
    with open(cache_file(zoo_dir, "hf")) as f:
        cached_hf = json.loads(json.load(f)["result"])["row"]
    assert cached_hf["beats_baseline"]["p_adjusted"] == cached_hf["beats_baseline"]["p"]
    assert hf_row["beats_baseline"]["p_adjusted"] != hf_row["beats_baseline"]["p"]
    assert entry_level(cached_hf) == entry_level(unhashed_row(hf_row))

    # a plain rerun: both ok rows come from the cache, the very rows (wall time included),
    # adjusted together again as its report is built
    r2 = eval_suite(manifest=m, release="r2", store=store)
    assert r2["cached"] == ["bigram", "hf"]
    assert by_name(r2) == {"bigram": merged[0], "hf": hf_row}


def test_a_plain_rerun_scores_again_only_the_entries_that_failed(zoo_dir, tmp_path, monkeypatch):
    m, store = str(zoo_dir / "zoo.yaml"), str(tmp_path / "store")
    with monkeypatch.context() as broken:
        broken.setitem(sys.modules, "transformers", None)
        r1 = eval_suite(manifest=m, release="r1", store=store)
    assert [r["status"] for r in r1["report"]["rows"]] == ["ok", "error"]
    again = eval_suite(manifest=m, release="r1", store=store)
    assert again["cached"] == ["bigram"]
    assert by_name(again)["bigram"] == by_name(r1)["bigram"]
    assert by_name(again)["hf"]["status"] == "ok"


def test_refresh_scores_every_entry_again(zoo_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    m, store = str(zoo_dir / "zoo.yaml"), str(tmp_path / "store")
    args = ["eval", "--suite", "zoo", "--manifest", m, "--store", store]
    first = eval_suite(manifest=m, release="r1", store=store)
    res = CliRunner().invoke(app, [*args, "--release", "r2", "-q"])
    assert res.exit_code == 0, res.output
    assert "2 of 2 rows from the result cache" in res.stdout
    assert "bigram, hf; --refresh scores them again" in res.stdout.replace("\n", "")
    assert open_store(store).read_report("r2")["rows"] == first["report"]["rows"]

    res = CliRunner().invoke(app, [*args, "--release", "r3", "--refresh", "-q", "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout[res.stdout.index("{") :])
    assert out["cached"] == []
    for old, new in zip(first["report"]["rows"], out["report"]["rows"], strict=True):
        assert new["status"] == "ok"
        assert new["seconds"] != old["seconds"]  # scored again, not the cached row
        assert (new["value"], new["lo"], new["hi"], new["n"]) == (
            old["value"],
            old["lo"],
            old["hi"],
            old["n"],
        )
        assert new["checkpoint_sha256"] == old["checkpoint_sha256"]
    again = eval_suite(manifest=m, release="r4", store=store)  # the refreshed rows are cached
    assert again["cached"] == ["bigram", "hf"]
    assert again["report"]["rows"] == out["report"]["rows"]


def test_release_with_out_and_refresh_without_release_are_refused(zoo_dir, tmp_path):
    m, store, report = str(zoo_dir / "zoo.yaml"), tmp_path / "store", tmp_path / "report.json"
    args = ["eval", "--suite", "zoo", "--manifest", m, "--store", str(store)]
    res = CliRunner().invoke(app, [*args, "--release", "r1", "--out", str(report)])
    assert res.exit_code == 2
    lines = res.output.strip().splitlines()
    assert len(lines) == 1, res.output
    assert lines[0] == (
        "error: expected --release (the EvalSuite flow into --store) or --out (a report file, "
        f"no store), got both (--release r1 --out {report})"
    )
    assert not report.exists() and not store.exists()
    res = CliRunner().invoke(app, [*args, "--out", str(report), "--refresh"])
    assert res.exit_code == 2
    assert (
        res.output.strip() == "error: --refresh needs --release (the EvalSuite flow's result cache)"
    )
    assert not report.exists()


def test_a_result_cached_before_units_is_published_and_compared_item_by_item(zoo_dir, tmp_path):
    """A cache record written by a task that returned no ``units`` (before rows knew their
    units) still serves its row: the row is published with ``units`` null and compared with a
    release that has them at the item level, with the note that the units are unknown; a
    refreshed run stores the unit ids again and is compared over them."""
    m = str(zoo_dir / "bigram.yaml")
    (zoo_dir / "bigram.yaml").write_text(yaml.safe_dump({"suite": "zoo", "entries": ENTRIES[:1]}))
    store = str(tmp_path / "store")
    r1 = eval_suite(manifest=m, release="r1", store=store)
    row = r1["report"]["rows"][0]
    # 199 scored tokens of a token file without document boundaries: 11 blocks of 19
    assert (row["n"], row["n_units"], row["details"]["block_len"]) == (199, 11, 19)
    assert row["units"].startswith("items/bigram.units-")
    ids = open_store(store).read_units("r1", row["units"], row["n"])
    np.testing.assert_array_equal(ids, np.arange(199) // 19)

    path = cache_file(zoo_dir, "bigram")
    with open(path) as f:
        record = json.load(f)
    result = json.loads(record["result"])
    assert result["units"] == ids.tolist()
    del result["units"]  # a result as the task returned it before units
    record["result"] = json.dumps(result)
    with open(path, "w") as f:
        json.dump(record, f)

    r2 = eval_suite(manifest=m, release="r2", store=store)
    assert r2["cached"] == ["bigram"]
    old = r2["report"]["rows"][0]
    assert old["units"] is None and old["n_units"] == 11
    assert {k: v for k, v in old.items() if k not in ("units", "items", "baseline")} == {
        k: v for k, v in row.items() if k not in ("units", "items", "baseline")
    }
    (c,) = r2["compare"]["rows"]
    assert c["verdict"] == "unchanged" and c["delta"] == 0.0
    assert c["note"] == "units unknown in the current release: compared at the item level"
    assert c["n_units"] == 199  # every token its own unit

    r3 = eval_suite(manifest=m, release="r3", store=store, previous="r1", refresh=True)
    assert r3["cached"] == []
    assert r3["report"]["rows"][0]["units"] == row["units"]  # the same ids, the same name
    (c,) = r3["compare"]["rows"]
    assert c["note"] is None and c["n_units"] == 11
    with open(path) as f:  # the refreshed record has them again
        assert json.loads(json.load(f)["result"])["units"] == ids.tolist()
