"""tinyllm export: a release's rows and per-item scores (with their unit ids) as CSV and Parquet
files that read back to the stored report, comparison and arrays; only inside --out."""

from __future__ import annotations

import csv
import importlib.util
import os

import numpy as np
import pytest
from export_helpers import DOC_OF, MAJORITY, two_releases
from typer.testing import CliRunner

from tinyllm import export, safeio
from tinyllm.cli import app
from tinyllm.store import StoreKeyError

NUMBERS = ("value", "lo", "hi", "n", "n_units", "seconds")
VERDICT = {"delta": "delta", "delta_lo": "lo", "delta_hi": "hi", "p": "p"}


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    return two_releases(tmp_path_factory.mktemp("export") / "store")[0]


def parse(cell: str, kind: str):
    """A CSV cell as the type its column declares (empty: None)."""
    if cell == "":
        return None
    return {"float": float, "int": int, "string": str}[kind](cell)


def read_csv(path, columns) -> list[dict]:
    kinds = dict(columns)
    with open(path, newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        assert tuple(reader.fieldnames) == tuple(kinds)
        return [{k: parse(v, kinds[k]) for k, v in line.items()} for line in reader]


def check_rows(store, release: str, lines: list[dict]) -> None:
    """Each line equals its stored row, field for field, and its stored comparison's verdict."""
    report, cmp = store.read_report(release), store.read_compare(release)
    verdicts = cmp.by_name()
    assert [line["entry"] for line in lines] == [r["name"] for r in report["rows"]]
    for line, row in zip(lines, report["rows"], strict=True):
        assert line["release"] == release and line["created_at"] == report["created_at"]
        assert {k: line[k] for k in NUMBERS} == {k: row.get(k) for k in NUMBERS}
        assert line["status"] == row["status"] and line["metric"] == row["metric"]
        assert line["error"] == (row["error"] or {}).get("message")
        v = verdicts[row["name"]]
        assert line["vs_previous"] == v.verdict and line["previous"] == cmp.previous
        assert {k: line[k] for k in VERDICT} == {k: getattr(v, f) for k, f in VERDICT.items()}
        assert line["p_adjusted"] == v.p_adjusted
        beats = row.get("beats_baseline") or {}
        assert line["beats_baseline"] == beats.get("verdict")
        assert line["beats_baseline_p"] == beats.get("p")
    by = {line["entry"]: line for line in lines}
    assert by["broken"]["error_type"] == "RowItemsMismatchError" and by["broken"]["value"] is None
    assert by["gpt"]["p_adjusted"] is not None and by["gpt"]["vs_previous"] == "unchanged"


def check_items(store, release: str, lines: list[dict]) -> None:
    """The lines of each entry are its stored scores in order, with its unit ids (the stored
    ones; the item index when every item is its own unit) and its baseline's scores."""
    load = store.items_loader(release)
    entries = list(dict.fromkeys(line["entry"] for line in lines))
    assert entries == ["gpt", "cls"]  # the error row has no scores
    for name in entries:
        mine = [line for line in lines if line["entry"] == name]
        assert [line["item"] for line in mine] == list(range(len(mine)))
        assert np.array_equal([line["score"] for line in mine], load(name))  # bit for bit
        assert {line["release"] for line in mine} == {release}
    units = {n: [line["unit"] for line in lines if line["entry"] == n] for n in entries}
    assert units["gpt"] == DOC_OF.tolist()
    assert units["cls"] == list(range(MAJORITY.size))
    base = {n: [line["baseline_score"] for line in lines if line["entry"] == n] for n in entries}
    assert base["cls"] == MAJORITY.tolist() and set(base["gpt"]) == {None}


def test_csv_reads_back_as_the_stored_rows_comparison_and_arrays(store, tmp_path):
    got = export.export_release(store, "r2", tmp_path / "out", "csv")
    assert (got.rows_path.name, got.items_path.name) == ("r2.rows.csv", "r2.items.csv")
    assert (got.n_rows, got.n_items) == (3, DOC_OF.size + MAJORITY.size)
    check_rows(store, "r2", read_csv(got.rows_path, export.ROW_COLUMNS))
    check_items(store, "r2", read_csv(got.items_path, export.ITEM_COLUMNS))
    # the first release has no comparison: its verdict columns are empty
    first = read_csv(
        export.export_release(store, "r1", tmp_path / "out").rows_path, export.ROW_COLUMNS
    )
    assert {(r["previous"], r["vs_previous"], r["p"]) for r in first} == {(None, None, None)}
    assert sorted(os.listdir(tmp_path / "out")) == [
        "r1.items.csv",
        "r1.rows.csv",
        "r2.items.csv",
        "r2.rows.csv",
    ]


def test_parquet_reads_back_as_the_stored_rows_comparison_and_arrays(store, tmp_path):
    pq = pytest.importorskip("pyarrow.parquet")
    got = export.export_release(store, "r2", tmp_path / "out", "parquet")
    rows = pq.read_table(got.rows_path)
    assert rows.column_names == [n for n, _ in export.ROW_COLUMNS]
    assert str(rows.schema.field("n").type) == "int64"
    check_rows(store, "r2", rows.to_pylist())
    items = pq.read_table(got.items_path)
    assert [str(t) for t in items.schema.types] == [
        "string",
        "string",
        "int64",
        "double",
        "int64",
        "double",
    ]
    check_items(store, "r2", items.to_pylist())
    pd = pytest.importorskip("pandas")  # what a notebook does with it
    frame = pd.read_parquet(got.items_path)
    assert frame.groupby("entry")["unit"].nunique().to_dict() == {"cls": 8, "gpt": 5}


def test_nothing_is_written_through_a_link_or_outside_out(store, tmp_path):
    target = tmp_path / "elsewhere"
    target.mkdir()
    (tmp_path / "link").symlink_to(target)
    with pytest.raises(export.ExportError) as ei:
        export.export_release(store, "r2", tmp_path / "link", "csv")
    assert (
        str(ei.value)
        == f"--out {tmp_path / 'link'}: expected a folder or a new path, got a symbolic link"
    )
    assert os.listdir(target) == []
    # a link planted where a file goes is refused, and the file it points to is left alone
    out = tmp_path / "out"
    out.mkdir()
    victim = tmp_path / "victim.txt"
    victim.write_text("keep")
    (out / "r2.rows.csv").symlink_to(victim)
    with pytest.raises(safeio.UnsafePathError, match="r2.rows.csv: expected a regular file"):
        export.export_release(store, "r2", out, "csv")
    assert victim.read_text() == "keep"
    # a release the store does not have: the store's error naming its releases, nothing written
    with pytest.raises(StoreKeyError, match=r"no such report: release 'r9' is not in the store"):
        export.export_release(store, "r9", tmp_path / "new", "csv")
    assert not (tmp_path / "new").exists()


def test_format_errors_are_one_line_naming_the_formats_or_the_extra(monkeypatch):
    with pytest.raises(export.ExportError) as ei:
        export.check_format("xlsx")
    assert str(ei.value) == "--format: expected one of csv, parquet, got 'xlsx'"
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "pyarrow" else real(name, *a)
    )
    with pytest.raises(export.ExportError) as ei:
        export.check_format("parquet")
    assert "pip install 'tinyllm[parquet]'" in str(ei.value) and "\n" not in str(ei.value)


def test_cli_export_writes_both_files_and_refuses_bad_arguments_in_one_line(store, tmp_path):
    out = tmp_path / "out"
    args = ["export", "r2", "--store", str(store.root)]
    res = CliRunner().invoke(app, [*args, "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert f"3 rows: {out / 'r2.rows.csv'}" in res.output
    assert f"{DOC_OF.size + MAJORITY.size} items: {out / 'r2.items.csv'}" in res.output
    check_items(store, "r2", read_csv(out / "r2.items.csv", export.ITEM_COLUMNS))
    for extra, want in (
        (["--out", str(out), "--format", "xlsx"], "--format: expected one of csv, parquet"),
        ([], "export: expected --out DIR, --track NAME or both, got neither"),
        (["--track", "tensorboard"], "--track: expected one of mlflow, wandb, got 'tensorboard'"),
    ):
        res = CliRunner().invoke(app, [*args, *extra])
        assert res.exit_code == 2, res.output
        assert res.output.strip() == f"error: {want}" or want in res.output
        assert len(res.output.strip().splitlines()) == 1, res.output
    res = CliRunner().invoke(app, ["export", "r9", "--store", str(store.root), "--out", str(out)])
    assert res.exit_code == 2 and "release 'r9' is not in the store" in res.output


def test_an_s3_release_exports_as_a_local_one(tmp_path, s3_env):
    boto3 = pytest.importorskip("boto3")
    boto3.client("s3").create_bucket(Bucket="evals")
    s3 = two_releases("s3://evals/team")[0]
    res = CliRunner().invoke(
        app, ["export", "r2", "--store", "s3://evals/team", "--out", str(tmp_path / "out")]
    )
    assert res.exit_code == 0, res.output
    check_rows(s3, "r2", read_csv(tmp_path / "out" / "r2.rows.csv", export.ROW_COLUMNS))
    check_items(s3, "r2", read_csv(tmp_path / "out" / "r2.items.csv", export.ITEM_COLUMNS))
