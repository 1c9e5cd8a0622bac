"""Every shell command in README.md and formats/*.md is executed, so the docs cannot drift from the
code.

The fenced blocks (```bash, ```sh, ```shell, or unlabelled blocks whose first command is
`tinyllm` / `.venv/bin/tinyllm` / `make`) are read in order, file by file, and run in ONE scratch
folder laid out like a checkout after `make demo`: a small zoo built by the test with
tinyllm.train.build_zoo (tiny recipes, but the demo's real GPT config, so its context is the
demo's; a shortened val file) in `zoo/`, plus the files the commands name:
`path/to/hf-model` (a tiny GPT-2 with a byte-level tokenizer, saved with save_pretrained),
`my.tok`, `my-task.jsonl` / `task.jsonl` (formats/task-jsonl.md), lm-eval task YAMLs, and
`s3://bucket/...` (a moto server on 127.0.0.1). Each `tinyllm` command runs in this process
through the real CLI and must exit 0.

Checked differently, and why:
* flow mode (`--release` without `--out`): the CLI parses and validates the command as usual
  (manifest, release name, store, --previous, --only), then the EvalSuite flow is replaced by
  its library equivalent (tinyllm.eval.zoo.run_zoo + tinyllm.publish.publish_run): a Prefect
  server is not started here; tests/flows/ run the flow itself;
* `tinyllm sweep`: parsed and checked as usual, then the Sweep flow is replaced by its library
  equivalent (tinyllm.sweep.publish_checkpoint per checkpoint, tinyllm.sweep.summarize);
  tests/flows/test_sweep_flow.py runs the flow itself;
* `tinyllm zoo build`: parsed, then build_zoo is called with the tiny recipes (the demo's
  recipes train for minutes; tests/test_train.py covers them);
* `--serve PORT` (blocks until Ctrl-C) and `--open` (a browser): the same command without them;
* `make <target>`: `make -n <target>` (the target exists and its recipe expands); `make test`
  is the command running this test, `make demo` takes minutes;
* ```python blocks are not executed (they use names the reader brings, like `model`).
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from s3server import aws_env
from typer.testing import CliRunner

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "formats").glob("*.md"))]
FENCE = re.compile(r"^```([a-z]*)\s*$")
SHELL_LANGS = {"bash", "sh", "shell", "console"}
STARTS = ("tinyllm", ".venv/bin/tinyllm", "make")


def doc_commands() -> list[tuple[str, int, str]]:
    """``(file, line number, command)`` for every shell command in the docs, in order."""
    out = []
    for path in DOCS:
        lines = path.read_text(encoding="utf-8").splitlines()
        i = 0
        while i < len(lines):
            m = FENCE.match(lines[i])
            if not m:
                i += 1
                continue
            lang, body, start = m.group(1), [], i + 1
            i += 1
            while i < len(lines) and not lines[i].startswith("```"):
                body.append((i + 1, lines[i]))
                i += 1
            i += 1
            cmds = [(n, t.strip()) for n, t in body if t.strip() and not t.strip().startswith("#")]
            if not cmds:
                continue
            if lang in SHELL_LANGS or (not lang and cmds[0][1].split()[0] in STARTS):
                rel = str(path.relative_to(ROOT))
                out += [(rel, n, c) for n, c in cmds]
            del start
    return out


COMMANDS = doc_commands()


def test_the_docs_have_commands():
    files = {f for f, _, _ in COMMANDS}
    assert "README.md" in files and len(COMMANDS) >= 10


TINY_RECIPES = None


def _tiny_recipes():
    from tinyllm import train

    demo_gpt = train.default_recipes()["gpt"]
    return {
        "bigram": train.Recipe(config={"k": 0.5}),
        "ngram": train.Recipe(config={"order": 3}),
        "nplm": train.Recipe(config={"context": 3, "emb_dim": 8, "hidden": 16}, steps=3),
        "rnnlm": train.Recipe(
            config={"emb_dim": 8, "hidden": 16}, train_config={"bptt": 8}, steps=3
        ),
        # the demo's GPT config (its context is what the docs' --ctx-len must fit), 2 steps
        "gpt": train.Recipe(
            config=dict(demo_gpt.config),
            steps=2,
            train_config={"batch_size": 2},
            options=dict(demo_gpt.options),
        ),
    }


def _hf_model(folder: Path) -> None:
    """A tiny random GPT-2 with a 256-symbol byte-level BPE tokenizer (no hub access)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

    cfg = GPT2Config(vocab_size=256, n_positions=1024, n_embd=16, n_layer=1, n_head=2)
    GPT2LMHeadModel(cfg).save_pretrained(folder, safe_serialization=True)
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    tok = Tokenizer(models.BPE(vocab={c: i for i, c in enumerate(sorted(alphabet))}, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    PreTrainedTokenizerFast(tokenizer_object=tok).save_pretrained(folder)


@pytest.fixture(scope="module")
def checkout(tmp_path_factory, moto_endpoint):
    """The scratch folder: zoo/, the named input files, an S3 bucket."""
    import boto3

    from tests.test_lmeval_import import ARC_YAML, HAND
    from tests.test_lmeval_import import DOCS as LMEVAL_DOCS
    from tinyllm import train
    from tinyllm.tokens import read_tokens, write_tokens

    tmp = tmp_path_factory.mktemp("checkout")
    train.build_zoo(tmp / "zoo", seed=0, progress=False, jobs=1, recipes=_tiny_recipes())
    val = tmp / "zoo" / "data" / "lee_val.bin"
    ids = np.array(read_tokens(val)[:1200])
    write_tokens(val, ids)  # shorter: every command over it takes a moment, not minutes
    write_tokens(tmp / "my.tok", ids[:600])
    tasks = "".join(json.dumps(d) + "\n" for d in HAND)
    for name in ("my-task.jsonl", "task.jsonl"):
        (tmp / name).write_text(tasks, encoding="utf-8")
    docs = "".join(json.dumps(d, ensure_ascii=False) + "\n" for d in LMEVAL_DOCS)
    for yml in (tmp / "my-lmeval-task.yaml", tmp / "path" / "to" / "task.yaml"):
        (yml.parent / "data").mkdir(parents=True, exist_ok=True)
        (yml.parent / "data" / "test.jsonl").write_text(docs, encoding="utf-8")
        yml.write_text(ARC_YAML, encoding="utf-8")
    _hf_model(tmp / "path" / "to" / "hf-model")
    for name in ("step-100", "step-200", "final"):  # a training run's checkpoints (tinyllm sweep)
        shutil.copytree(tmp / "zoo" / "gpt", tmp / "runs" / "gpt-a" / name)
    env = aws_env(moto_endpoint, tmp)
    boto3.client("s3", endpoint_url=moto_endpoint, region_name="us-east-1", aws_access_key_id="testing",
                 aws_secret_access_key="testing").create_bucket(Bucket="bucket")  # fmt: skip
    return tmp, env


def _flow_equivalent(manifest, release, store, only, previous, seed, *_display):
    """What the EvalSuite flow does, through the same library calls, without Prefect."""
    from tinyllm.eval import zoo
    from tinyllm.publish import publish_run
    from tinyllm.report import load_manifest
    from tinyllm.store import open_store

    m = load_manifest(manifest)
    names = [e.name for e in m.entries if not only or e.name in only]
    rows, items, base_items = [], {}, {}
    for e in m.entries:
        if e.name in names:
            row, arr, base = zoo.score_entry_arrays(e, seed=seed, base_dir=Path(manifest).parent)
            rows.append(row)
            if arr is not None:
                items[e.name] = arr
            if base is not None:
                base_items[e.name] = base
    run = zoo.build_run_report(m, rows, seed=seed, release=release)
    order = [e.name for e in m.entries]
    return publish_run(
        open_store(store),
        release,
        run,
        items,
        order=order,
        previous=previous,
        seed=seed,
        baseline_items=base_items,
    )


def _sweep_equivalent(template, checkpoints, run, store, *, base_dir, seed, **_display):
    """What the Sweep flow does, through the same library calls, without Prefect."""
    from tinyllm import sweep
    from tinyllm.eval import zoo
    from tinyllm.report import parse_manifest
    from tinyllm.store import open_store

    st, m, done = open_store(store), parse_manifest(template), []
    for c in sorted((sweep.Checkpoint(**c) for c in checkpoints), key=lambda c: c.step):
        rows, items, base_items, units = [], {}, {}, {}
        for e in sweep.checkpoint_manifest(m, c).entries:
            row, arr, base, u = zoo.score_entry_result(e, seed=seed, base_dir=base_dir)
            rows.append(row)
            for kept, x in ((items, arr), (base_items, base), (units, u)):
                if x is not None:
                    kept[e.name] = x
        release = sweep.release_name(run, c.step)
        previous = sweep.previous_of(sweep.run_releases(st, run), c.step, release)
        scored = (rows, items, base_items, units)
        sweep.publish_checkpoint(st, m, run, c, scored, previous=previous, seed=seed)
        done.append({"step": c.step, "release": release, "cached": [], "published": True})
    summary = sweep.summarize(st, run, seed=seed)
    return {"run": run, "store": st.uri, "checkpoints": done, "summary": summary, "dashboard": None}


def _run_tinyllm(args: list[str], monkeypatch, checkout_env) -> None:
    from tinyllm import cli, train
    from tinyllm_suite import run as suite_run
    from tinyllm_suite import sweep as suite_sweep

    for k, v in checkout_env.items():
        monkeypatch.setenv(k, v)
    monkeypatch.setattr(suite_run, "run_suite_flow", _flow_equivalent)
    monkeypatch.setattr(suite_sweep, "run_sweep_flow", _sweep_equivalent)
    real_build = train.build_zoo
    monkeypatch.setattr(
        train,
        "build_zoo",
        lambda out, **kw: real_build(
            f"{out}-tiny", **{**kw, "recipes": _tiny_recipes(), "jobs": 1}
        ),
    )
    args = [a for a in args if a != "--open"]
    if "--serve" in args:
        i = args.index("--serve")
        del args[i : i + 2]
    res = CliRunner().invoke(cli.app, args)
    assert res.exit_code == 0, f"exit {res.exit_code}\n{res.output[-3000:]}\n{res.exception!r}"


def yaml_manifests() -> list[tuple[str, int, str]]:
    """``(file, line, text)`` of every ```yaml block in formats/*.md that is a zoo manifest."""
    out = []
    for path in DOCS:
        text = path.read_text(encoding="utf-8")
        for m in re.finditer(r"^```yaml\n(.*?)^```", text, flags=re.S | re.M):
            if re.search(r"^entries:", m.group(1), flags=re.M):
                line = text[: m.start()].count("\n") + 1
                out.append((str(path.relative_to(ROOT)), line, m.group(1)))
    return out


MANIFESTS = yaml_manifests()


@pytest.mark.parametrize(
    ("doc", "line", "text"), MANIFESTS, ids=[f"{f}:{n}" for f, n, _ in MANIFESTS]
)
def test_doc_manifest_is_valid_and_fits_the_demo_gpt(doc, line, text):
    """A manifest shown in the docs is one the zoo accepts; a gpt entry's window fits the demo
    GPT's context (the zoo's own recipe)."""
    import yaml

    from tinyllm import train
    from tinyllm.report import parse_manifest

    m = parse_manifest(yaml.safe_load(text))
    block = train.default_recipes()["gpt"].config["block_size"]
    for e in m.entries:
        if e.family == "gpt" and e.options.ctx_len is not None:
            assert e.options.ctx_len <= block, f"{doc}:{line}: {e.name} ctx_len > {block}"


@pytest.mark.parametrize(
    ("doc", "line", "command"), COMMANDS, ids=[f"{f}:{n}" for f, n, _ in COMMANDS]
)
def test_doc_command_runs(doc, line, command, checkout, monkeypatch):
    tmp, env = checkout
    monkeypatch.chdir(tmp)
    argv = shlex.split(command, comments=True)
    if argv[0] in ("tinyllm", ".venv/bin/tinyllm"):
        _run_tinyllm(argv[1:], monkeypatch, env)
    elif argv[0] == "make":
        res = subprocess.run(
            ["make", "-n", *argv[1:]], cwd=ROOT, capture_output=True, text=True, timeout=60
        )
        assert res.returncode == 0, res.stderr
    else:
        pytest.fail(f"{doc}:{line}: no way to run {argv[0]!r} in the docs test: {command}")
