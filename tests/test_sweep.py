"""Checkpoint sweeps without Prefect: steps from names, the bad inputs (one line, nothing
written), a run's releases read in step order by history, compare and the dashboard, and the
summary's last significant improvement. The Sweep flow itself: tests/flows/test_sweep_flow.py."""

from pathlib import Path

import pytest
from typer.testing import CliRunner

from tinyllm import data, history, sweep
from tinyllm.cli import app
from tinyllm.dashboard import build_site, entry_series, load_history, trend_svg
from tinyllm.eval import zoo
from tinyllm.models import bigram
from tinyllm.store import open_store
from tinyllm.tokens import write_tokens


@pytest.mark.parametrize(
    ("name", "step"),
    [
        ("runs/a/step-1200", 1200),
        ("step1200", 1200),
        ("ckpt_1200", 1200),
        ("checkpoint-1200", 1200),
        ("model_step_300.safetensors", 300),
        ("1200", 1200),
        ("final", None),
        ("run-2", None),
    ],
)
def test_step_from_name(name, step):
    assert sweep.step_from_name(name) == step


def _folders(tmp_path, *names):
    for n in names:
        (tmp_path / "run" / n).mkdir(parents=True)
    return tmp_path / "run"


def test_checkpoints_in_step_order_with_explicit_steps(tmp_path):
    run = _folders(tmp_path, "step-30", "ckpt_4", "final")
    got = sweep.resolve_checkpoints(
        [str(run / "step-*"), str(run / "ckpt_4"), str(run / "final")], {"final": 99}
    )
    assert [(Path(c.path).name, c.step) for c in got] == [
        ("ckpt_4", 4),
        ("step-30", 30),
        ("final", 99),
    ]
    assert sweep.default_run(got) == "run"


@pytest.mark.parametrize(
    ("args", "steps", "message"),
    [
        (
            ["nothing/step-*"],
            {},
            "no checkpoint matches 'nothing/step-*': expected a glob of checkpoints",
        ),
        (
            ["{run}/final"],
            {},
            "final: expected a step in the checkpoint's name (step-1200, ckpt_1200, checkpoint-1200 or 1200) or --step final=N, got none",
        ),
        (
            ["{run}/step-3", "{run}/ckpt_3"],
            {},
            "expected one checkpoint per step, got step 3 twice",
        ),
        (
            ["{run}/step-3"],
            {"other": 4},
            "--step other=4: expected the path or name of a checkpoint of the sweep, got none named 'other'",
        ),
        (["{run}/missing"], {}, "missing: checkpoint not found"),
    ],
)
def test_bad_checkpoints_are_one_line(tmp_path, args, steps, message):
    run = _folders(tmp_path, "step-3", "ckpt_3", "final")
    with pytest.raises(sweep.SweepError) as e:
        sweep.resolve_checkpoints([a.format(run=run) for a in args], steps)
    assert message in str(e.value) and "\n" not in str(e.value)


def test_cli_glob_matching_nothing_is_one_line_and_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "val.tok").write_bytes(b"")
    res = CliRunner().invoke(app, ["sweep", "runs/a/step-*", "--data", "val.tok", "--store", "st"])
    assert res.exit_code == 2
    assert (
        res.output.strip()
        == "error: no checkpoint matches 'runs/a/step-*': expected a glob of checkpoints"
    )
    assert not (tmp_path / "st").exists()
    res = CliRunner().invoke(app, ["sweep", "val.tok", "--data", "val.tok", "--store", "st"])
    assert res.exit_code == 2 and "val.tok: expected a step in the checkpoint's name" in res.output
    assert not (tmp_path / "st").exists()


# ---- a run's releases in step order ------------------------------------------------------------


@pytest.fixture(scope="module")
def lee_run(tmp_path_factory):
    """Bigram checkpoints of one run (the Lee corpus' first N training bytes at step N) and its
    validation text; steps 30000 and 30010 differ by 10 bytes of training text."""
    tmp = tmp_path_factory.mktemp("lee-run")
    train = data.lee_bytes("train")
    write_tokens(tmp / "val.tok", data.lee_bytes("val"))
    for n in (300, 3000, 30000, 30010):
        bigram.save(bigram.train(bigram.Config(k=0.5), train[:n], seed=0), tmp / "a" / f"step-{n}")
    return tmp


def publish(store, folder, run, ckpt):
    """What the Sweep flow does for one checkpoint, through the same library calls."""
    template, base = sweep.sweep_template(data=str(folder / "val.tok"), first=ckpt)
    rows, items, base_items, units = [], {}, {}, {}
    for e in sweep.checkpoint_manifest(template, ckpt).entries:
        row, arr, b, u = zoo.score_entry_result(e, seed=0, base_dir=base)
        rows.append(row)
        items[e.name] = arr
        for into, x in ((base_items, b), (units, u)):
            if x is not None:
                into[e.name] = x
    previous = sweep.previous_of(sweep.run_releases(store, run), ckpt.step, "")
    sweep.publish_checkpoint(
        store, template, run, ckpt, (rows, items, base_items, units), previous=previous
    )


def test_history_compare_and_dashboard_read_a_run_by_step(lee_run, tmp_path):
    st = open_store(tmp_path / "store")
    ckpts = {c.step: c for c in sweep.resolve_checkpoints([str(lee_run / "a" / "step-*")])}
    for step in (300, 30000, 3000):  # step 3000 swept after step 30000
        publish(st, lee_run, "a", ckpts[step])
    assert st.read_compare("a-step-30000").previous == "a-step-300"
    views = load_history(st)
    assert [v.name for v in views] == ["a-step-300", "a-step-3000", "a-step-30000"]
    # 30000's stored comparison is with 300: history and the dashboard compare it with 3000
    assert [v.compare and v.compare.previous for v in views] == [
        None,
        "a-step-300",
        "a-step-3000",
    ]
    assert views[2].verdicts()["val"].verdict == "improved"
    steps = list(history.release_history(st, views, n_perm=1000))
    assert [s.compare and s.compare.previous for s in steps] == [
        None,
        "a-step-300",
        "a-step-3000",
    ]
    series = entry_series("val", views)
    assert series.steps == [300, 3000, 30000]
    assert "training step" in trend_svg(series)
    site = build_site(st, history=views)
    assert '<dd class="run">a, step 3000</dd>' in site["release/a-step-3000.html"].decode()
    page = site["release/a-step-30000.html"].decode()
    assert "a-step-3000.html" in page[page.index("a-step-30000 vs ") :][:120]
    assert site["trends.html"].decode().count("training step") == 1  # the one entry's plot
    with pytest.raises(
        ValueError, match="expected A to be an earlier checkpoint of run 'a' than B"
    ):
        history.compare_releases(st, "a-step-30000", "a-step-3000")


def test_summary_names_the_last_step_that_improved(lee_run, tmp_path):
    st = open_store(tmp_path / "store")
    ckpts = sweep.resolve_checkpoints([str(lee_run / "a" / "step-*")])
    for c in ckpts:
        publish(st, lee_run, "a", c)
    s = sweep.summarize(st, "a")
    assert [p["rows"][0]["verdict"] for p in s["pairs"]] == ["improved", "improved", "unchanged"]
    assert s["last_improved"] == {"val": 30000}
    assert sweep.conclusion(s) == [
        "val: last improved significantly at step 30000; no significant improvement in the 1 "
        "step after it (Holm over the run's 3 paired tests at alpha 0.05)"
    ]


def test_summary_says_plainly_when_no_step_improved(lee_run, tmp_path):
    st = open_store(tmp_path / "store")
    ckpts = sweep.resolve_checkpoints([str(lee_run / "a" / "step-300[01]0")])
    for c in ckpts:
        publish(st, lee_run, "b", c)
    s = sweep.summarize(st, "b")
    assert s["last_improved"] == {"val": None}
    assert sweep.conclusion(s) == [
        "val: no step improved significantly (Holm over the run's 1 paired test at alpha 0.05)"
    ]


def test_history_command_names_each_checkpoints_step(lee_run, tmp_path):
    st = open_store(tmp_path / "store")
    for c in sweep.resolve_checkpoints(
        [str(lee_run / "a" / "step-300"), str(lee_run / "a" / "step-3000")]
    ):
        publish(st, lee_run, "a", c)
    res = CliRunner().invoke(app, ["history", "--store", str(tmp_path / "store")])
    assert res.exit_code == 0, res.output
    titles = [ln for ln in res.output.splitlines() if ln.startswith("a-step-")]
    assert len(titles) == 2
    assert titles[0].startswith("a-step-300  (") and titles[0].endswith(
        ")  step 300 of run a  (first release)"
    )
    assert titles[1].startswith("a-step-3000  (")
    assert ")  step 3000 of run a  a-step-3000 vs a-step-300: 1 improved" in titles[1]


def test_reports_with_and_without_a_run_validate_and_run_goes_with_step(lee_run, tmp_path):
    from tinyllm.report import ReportSchemaError, validate_report

    st = open_store(tmp_path / "store")
    publish(st, lee_run, "a", sweep.resolve_checkpoints([str(lee_run / "a" / "step-300")])[0])
    report = st.read_report("a-step-300")
    assert (report["run"], report["step"]) == ("a", 300)
    old = {k: v for k, v in report.items() if k not in ("run", "step")}  # before sweeps
    validate_report(old)
    for half in ({"run": "a"}, {"step": 300}):
        with pytest.raises(ReportSchemaError, match="is a dependency of"):
            validate_report(old | half)
