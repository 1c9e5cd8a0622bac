"""The Sweep flow under prefect_test_harness: the checkpoints of one training run (bigrams
trained on growing prefixes of the Lee corpus), each a release with its step, cached per
checkpoint, the run summarized by its consecutive paired verdicts."""

import json

import pytest

from tinyllm import data
from tinyllm.eval import zoo
from tinyllm.models import bigram
from tinyllm.store import open_store
from tinyllm.sweep import resolve_checkpoints, sweep_template
from tinyllm.tokens import write_tokens
from tinyllm_suite.sweep import sweep

STEPS = (300, 3000, 30000)
LATER = 30010
"""Bytes of training text seen at each checkpoint: the first three each lower the bpb
significantly, the last one (10 more bytes) cannot."""


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    """A training run's checkpoints, ``runs/lee-bigram/step-<N>``, and a validation file."""
    tmp = tmp_path_factory.mktemp("sweep")
    train, val = data.lee_bytes("train"), data.lee_bytes("val")
    write_tokens(tmp / "val.tok", val)  # 29 documents: the units of the paired test
    for n in (*STEPS, LATER):
        folder = tmp / ("later" if n == LATER else "runs") / "lee-bigram" / f"step-{n}"
        bigram.save(bigram.train(bigram.Config(k=0.5), train[:n], seed=0), folder)
    return tmp


class CountingLoader:
    """The real zoo.load_model, counting the checkpoints it loads."""

    def __init__(self, monkeypatch):
        self.real, self.calls = zoo.load_model, []
        monkeypatch.setattr(zoo, "load_model", self)

    def __call__(self, path, **kw):
        self.calls.append(str(path).rsplit("/", 1)[-1])
        return self.real(path, **kw)


def _sweep(run_dir, store, globs):
    ckpts = resolve_checkpoints([str(run_dir / g) for g in globs])
    template, base = sweep_template(data=str(run_dir / "val.tok"), first=ckpts[0])
    return sweep(
        template=template.model_dump(mode="json"),
        checkpoints=[{"path": c.path, "step": c.step} for c in ckpts],
        run="lee-bigram",
        store=str(store),
        base_dir=base,
    )


def test_sweep_then_one_more_checkpoint_scores_only_it(run_dir, tmp_path, monkeypatch):
    store = tmp_path / "store"
    loads = CountingLoader(monkeypatch)
    first = _sweep(run_dir, store, ["runs/lee-bigram/step-*"])
    assert sorted(loads.calls) == sorted(f"step-{n}" for n in STEPS)
    assert [c["step"] for c in first["checkpoints"]] == list(STEPS)
    assert all(c["published"] and c["cached"] == [] for c in first["checkpoints"])
    st = open_store(store)
    for n in STEPS:
        report = st.read_report(f"lee-bigram-step-{n}")
        assert (report["run"], report["step"]) == ("lee-bigram", n)
        assert report["rows"][0]["name"] == "val" and report["rows"][0]["status"] == "ok"
    # each checkpoint compared with the run's previous step, not with the store's latest
    assert st.read_compare("lee-bigram-step-3000").previous == "lee-bigram-step-300"
    assert first["summary"]["last_improved"] == {"val": 30000}

    loads.calls.clear()
    second = _sweep(run_dir, store, ["runs/lee-bigram/step-*", "later/lee-bigram/step-*"])
    assert loads.calls == [f"step-{LATER}"]  # the earlier three came from the cache
    done = {c["step"]: c for c in second["checkpoints"]}
    assert [done[n]["cached"] for n in STEPS] == [["val"]] * 3
    assert [done[n]["published"] for n in STEPS] == [False] * 3  # nothing new to write
    assert done[LATER]["published"] and done[LATER]["cached"] == []
    assert st.read_compare(f"lee-bigram-step-{LATER}").previous == "lee-bigram-step-30000"
    assert len(st.runs("lee-bigram-step-300")) == 1  # not published a second time

    s = second["summary"]
    assert s["steps"] == [*STEPS, LATER] and s["m"] == 3
    verdicts = [p["rows"][0]["verdict"] for p in s["pairs"]]
    assert verdicts == ["improved", "improved", "unchanged"]
    # each pair's paired test over the 29 documents; Holm over the run's 3 tests, where each
    # release's compare.json adjusts over its one row
    ps = [p["rows"][0]["p"] for p in s["pairs"]]
    assert ps[0] == ps[1] == pytest.approx(1 / 10_001) and ps[2] > 0.05
    assert [p["rows"][0]["p_run"] for p in s["pairs"]] == pytest.approx([3 * ps[0]] * 2 + [ps[2]])
    assert st.read_compare("lee-bigram-step-3000").rows[0].p_adjusted == ps[0]
    assert s["last_improved"] == {"val": 30000}
    deltas = [p["rows"][0]["delta"] for p in s["pairs"]]
    assert deltas[0] < deltas[1] < 0 and abs(deltas[2]) < 0.01


def test_sweep_command_on_a_manifest_prints_the_run_summary(run_dir, tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from tinyllm.cli import app

    monkeypatch.chdir(run_dir)
    entry = {"name": "lee", "family": "bigram", "checkpoint": "{checkpoint}", "data": "val.tok"}
    (tmp_path / "sweep.yaml").write_text(json.dumps({"entries": [entry]}))
    (tmp_path / "val.tok").symlink_to(run_dir / "val.tok")  # the manifest's data, beside it
    args = ["sweep", "runs/lee-bigram/step-*", f"later/lee-bigram/step-{LATER}"]
    args += [
        "--run",
        "lee",
        "--manifest",
        str(tmp_path / "sweep.yaml"),
        "--store",
        str(tmp_path / "st"),
    ]
    res = CliRunner().invoke(app, [*args, "--quiet"])
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    assert (
        "lee: last improved significantly at step 30000; no significant improvement in the 1 "
        "step after it (Holm over the run's 3 paired tests at alpha 0.05)"
    ) in lines
    assert any(line.startswith("4 release(s) written to ") for line in lines)
    assert [ln.split()[:4] for ln in lines if "->" in ln.split()[1:2]] == [
        ["300", "->", "3000", "lee"],
        ["3000", "->", "30000", "lee"],
        ["30000", "->", str(LATER), "lee"],
    ]
    assert open_store(tmp_path / "st").read_report("lee-step-3000")["rows"][0]["name"] == "lee"


def test_a_step_swept_in_between_is_compared_with_its_neighbours(run_dir, tmp_path):
    store = tmp_path / "store"
    first = _sweep(run_dir, store, ["runs/lee-bigram/step-300", "runs/lee-bigram/step-30000"])
    assert [c["published"] for c in first["checkpoints"]] == [True, True]
    out = _sweep(run_dir, store, ["runs/lee-bigram/step-*"])
    done = {c["step"]: c for c in out["checkpoints"]}
    # 300 unchanged; 3000 new; 30000 from the cache, published again against its new neighbour
    assert [(done[n]["cached"], done[n]["published"]) for n in STEPS] == [
        (["val"], False),
        ([], True),
        (["val"], True),
    ]
    st = open_store(store)
    assert st.read_compare("lee-bigram-step-30000").previous == "lee-bigram-step-3000"
    assert [p["previous_step"] for p in out["summary"]["pairs"]] == [300, 3000]
