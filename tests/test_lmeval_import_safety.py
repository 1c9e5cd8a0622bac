"""`task import-lmeval` on hostile inputs: a task file downloaded from anywhere is untrusted.

Templates render in jinja2's ImmutableSandboxedEnvironment (the `__globals__` escape that runs a
shell command is refused, naming the YAML file and key, and nothing is written); YAML is read
with a bounded alias expansion and an include cycle is named; `--out` is checked before anything
is converted and written to a fresh random temporary name (a FIFO, a link or a device given as
`--out`, or a planted `<out>.tmp` link, are never written through); a FIFO or a device given as
a config or data file is refused at once, saying what it is.
"""

from __future__ import annotations

import json
import os
import stat

import pytest
from fs_helpers import chardev, within
from typer.testing import CliRunner

from tinyllm import lmeval_import
from tinyllm.cli import app
from tinyllm.lmeval_import import TaskImportError, convert, import_task

DOCS = [
    {"q": "What do bees make?", "opts": ["milk", "honey"], "gold": 1},
    {"q": "Which is a planet?", "opts": ["Mars", "Sirius"], "gold": 0},
]


def _task(tmp_path, **keys) -> object:
    """A valid two-document task in ``tmp_path``; ``keys`` replace its YAML keys."""
    (tmp_path / "data.jsonl").write_text("".join(json.dumps(d) + "\n" for d in DOCS))
    cfg = {
        "output_type": "multiple_choice",
        "dataset_path": "json",
        "dataset_kwargs": {"data_files": {"test": str(tmp_path / "data.jsonl")}},
        "test_split": "test",
        "doc_to_text": "Q: {{q}}",
        "doc_to_choice": "opts",
        "doc_to_target": "gold",
    }
    cfg.update(keys)
    y = tmp_path / "task.yaml"
    y.write_text(json.dumps(cfg))  # JSON is YAML
    return y


# ---- templates are sandboxed -----------------------------------------------------------

PAYLOADS = [
    "{{ cycler.__init__.__globals__.os.popen('touch MARK').read() }}",
    "{{ lipsum.__globals__['os'].popen('touch MARK').read() }}",
    "{{ self.__init__.__globals__.__builtins__.__import__('os').system('touch MARK') }}",
    "{{ joiner.__init__.__globals__.os.system('touch MARK') }}",
    "{{ ''.__class__.__mro__[1].__subclasses__() }}",
]


@pytest.mark.parametrize("payload", PAYLOADS)
def test_a_template_cannot_run_a_shell_command(tmp_path, payload):
    mark = tmp_path / "pwned"
    y = _task(tmp_path, doc_to_text=payload.replace("MARK", str(mark)) + "Q: {{q}}")
    out = tmp_path / "out" / "task.jsonl"
    (tmp_path / "out").mkdir()
    with pytest.raises(TaskImportError) as e:
        import_task(y, out)
    msg = str(e.value)
    assert not mark.exists()  # the command never ran
    assert msg.startswith(f"{y}: doc_to_text: expected a template that reads only the document")
    assert "unsafe" in msg and "\n" not in msg
    assert os.listdir(tmp_path / "out") == []  # nothing written, no temporary file left


@pytest.mark.parametrize("key", ["doc_to_choice", "doc_to_target"])
def test_every_templated_key_is_sandboxed(tmp_path, key):
    mark = tmp_path / "pwned"
    payload = PAYLOADS[0].replace("MARK", str(mark))
    y = _task(tmp_path, **{key: payload})
    with pytest.raises(TaskImportError, match=f"^{y}: {key}: expected a template") as e:
        convert(y)
    assert not mark.exists() and "\n" not in str(e.value)


@pytest.mark.parametrize(
    ("payload", "why"),
    [
        (
            "{{ 'a' * 10**7 }}",
            "expected a repeated sequence of at most 1000000 items, got 1 x 10000000",
        ),
        (
            "{{ 10**7 * ['a'] }}",
            "expected a repeated sequence of at most 1000000 items, got 1 x 10000000",
        ),
        ("{{ 7 ** 1000000 }}", "expected a power of at most 4096 bits, got 7 ** 1000000"),
    ],
)
def test_a_template_cannot_exhaust_memory(tmp_path, payload, why):
    y = _task(tmp_path, doc_to_text=payload + "Q: {{q}}")
    with pytest.raises(TaskImportError) as e:
        convert(y)
    assert str(e.value).startswith(f"{y}: doc_to_text: expected a template that reads only")
    assert why in str(e.value)


def test_bounded_operators_still_compute_within_the_bounds(tmp_path):
    y = _task(tmp_path, doc_to_text="{{ '-' * 3 }}{{ 2 ** 10 }}{{ 3 * 4 }} {{q}}")
    assert convert(y)[0]["context"] == "---102412 What do bees make?"


def test_an_unsafe_template_from_an_included_file_names_that_file(tmp_path):
    mark = tmp_path / "pwned"
    base = tmp_path / "_base.yaml"
    base.write_text(json.dumps({"doc_to_text": PAYLOADS[0].replace("MARK", str(mark))}))
    y = _task(tmp_path)
    cfg = json.loads(y.read_text())
    del cfg["doc_to_text"]
    cfg["include"] = "_base.yaml"
    y.write_text(json.dumps(cfg))
    with pytest.raises(TaskImportError, match=f"^{base}: doc_to_text: expected a template"):
        convert(y)
    assert not mark.exists()


def test_lm_eval_templates_still_render_in_the_sandbox(tmp_path):
    """Filters, methods that do not mutate, indexing and lm-eval's regex_replace all work."""
    y = _task(
        tmp_path,
        doc_to_text="{{ q | upper | regex_replace('  +', ' ') }} / {{ q.split(' ')|join('-') }}"
        " / {{ '%s!'|format(q.strip()) }} / {{ opts|length }} {{ opts[0] }}",
        doc_to_choice="{{ opts }}",
        doc_to_target="{{ opts.index(opts[gold]) }}",
    )
    items = convert(y)
    assert items[0]["context"] == (
        "WHAT DO BEES MAKE? / What-do-bees-make? / What do bees make?! / 2 milk"
    )
    assert [it["gold"] for it in items] == [1, 0]
    assert items[1]["choices"] == ["Mars", "Sirius"]


# ---- YAML: include cycles, alias bombs ---------------------------------------------------------


def test_a_self_include_is_named_not_a_recursion_error(tmp_path):
    y = _task(tmp_path)
    cfg = json.loads(y.read_text())
    cfg["include"] = "task.yaml"
    y.write_text(json.dumps(cfg))
    with pytest.raises(TaskImportError) as e:
        convert(y)
    assert str(e.value) == f"{y}: include: expected no include cycle, got {y} -> {y}"


def test_an_include_cycle_through_two_files_is_named(tmp_path):
    a, b = tmp_path / "a.yaml", tmp_path / "b.yaml"
    a.write_text("include: b.yaml\noutput_type: multiple_choice\n")
    b.write_text("include: a.yaml\n")
    with pytest.raises(TaskImportError) as e:
        convert(a)
    assert str(e.value) == f"{a}: include: expected no include cycle, got {a} -> {b} -> {a}"


def test_a_deep_include_chain_is_bounded(tmp_path):
    for i in range(40):
        (tmp_path / f"t{i}.yaml").write_text(f"include: t{i + 1}.yaml\n")
    (tmp_path / "t40.yaml").write_text("output_type: multiple_choice\n")
    with pytest.raises(TaskImportError, match="expected at most 32 nested includes, got more"):
        convert(tmp_path / "t0.yaml")


def test_an_alias_bomb_in_an_unused_key_is_refused(tmp_path):
    """9 levels of 9 aliases: 387 million nodes once expanded, a few hundred bytes of YAML."""
    cfg = json.loads(_task(tmp_path).read_text())
    bomb = ["  a: &a [x, x, x, x, x, x, x, x, x]"]
    for prev, cur in zip("abcdefgh", "bcdefghi", strict=True):
        bomb.append(f"  {cur}: &{cur} [{', '.join([f'*{prev}'] * 9)}]")
    y = tmp_path / "task.yaml"
    y.write_text(
        "".join(f"{k}: {json.dumps(v)}\n" for k, v in cfg.items()) + "unused:\n" + "\n".join(bomb)
    )
    with pytest.raises(TaskImportError, match="alias bomb") as e:
        convert(y)
    assert str(e.value).startswith(f"{y}: expected a YAML task config, got: {y}: expected a YAML")


# ---- --out: checked first, written atomically to a random temporary name ----------------------


def _special(kind: str, path, victim) -> None:
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "symlink":
        os.symlink(victim, path)
    elif kind == "device":
        chardev(path)
    else:
        path.mkdir()


@pytest.mark.parametrize(
    "kind, got",
    [
        ("fifo", "a FIFO"),
        ("symlink", "a symbolic link"),
        ("device", "a character device"),
        ("folder", "a folder"),
    ],
)
def test_a_special_out_is_refused_before_any_work(tmp_path, kind, got):
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    out = tmp_path / "out.jsonl"
    _special(kind, out, victim)
    before = os.lstat(out)
    for y in (_task(tmp_path), tmp_path / "no-such-task.yaml"):  # a good task and a bad one
        with pytest.raises(ValueError) as e:
            import_task(y, out)
        assert str(e.value) == f"--out {out}: expected a regular file or a new path, got {got}"
    after = os.lstat(out)
    assert stat.S_IFMT(after.st_mode) == stat.S_IFMT(before.st_mode)  # still what it was
    assert after.st_ino == before.st_ino
    assert victim.read_text() == "keep me"
    assert sorted(os.listdir(tmp_path)) == sorted(
        ["data.jsonl", "task.yaml", "victim.txt", out.name]
    )
    with pytest.raises(ValueError, match=f"got {got}"):
        lmeval_import.check_out(out)


def test_cli_refuses_a_fifo_out_with_exit_2(tmp_path):
    y = _task(tmp_path)
    out = tmp_path / "out.jsonl"
    os.mkfifo(out)
    with within(20):
        r = CliRunner().invoke(app, ["task", "import-lmeval", str(y), "--out", str(out)])
    assert r.exit_code == 2, r.output
    assert "expected a regular file or a new path, got a FIFO" in r.output
    assert "Traceback" not in r.output and stat.S_ISFIFO(os.lstat(out).st_mode)


def test_a_planted_tmp_link_beside_out_is_not_followed(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    out = tmp_path / "out.jsonl"
    os.symlink(victim, tmp_path / "out.jsonl.tmp")
    path, n = import_task(_task(tmp_path), out)
    assert (path, n) == (out, 2)
    assert victim.read_text() == "keep me"
    assert stat.S_ISREG(os.lstat(out).st_mode)
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    assert [x["context"] for x in lines] == ["Q: What do bees make?", "Q: Which is a planet?"]
    assert os.path.islink(tmp_path / "out.jsonl.tmp")  # left alone, not renamed into place
    assert stat.S_IMODE(os.stat(out).st_mode) == 0o644


def test_an_existing_regular_out_is_replaced(tmp_path):
    out = tmp_path / "out.jsonl"
    out.write_text("old\n")
    import_task(_task(tmp_path), out)
    assert len(out.read_text().splitlines()) == 2


# ---- config and data files that are not regular files ------------------------------------------


@pytest.mark.parametrize("kind, got", [("fifo", "a FIFO"), ("device", "a character device")])
def test_a_special_data_file_is_refused_at_once(tmp_path, kind, got):
    y = _task(tmp_path)
    data = tmp_path / "data.jsonl"
    data.unlink()
    _special(kind, data, None)
    with within(10), pytest.raises(TaskImportError) as e:
        import_task(y, tmp_path / "out.jsonl")
    assert str(e.value) == f"data file {data}: expected a regular file, got {got}"
    assert not (tmp_path / "out.jsonl").exists()


def test_a_fifo_task_config_is_refused_at_once(tmp_path):
    y = tmp_path / "task.yaml"
    os.mkfifo(y)
    with within(10), pytest.raises(TaskImportError) as e:
        convert(y)
    assert str(e.value) == f"task config {y}: expected a regular file, got a FIFO"
    with pytest.raises(TaskImportError, match="task config not found"):
        convert(tmp_path / "missing.yaml")


def test_an_oversized_task_config_is_refused_unread(tmp_path):
    y = tmp_path / "task.yaml"
    y.write_bytes(b"# " + b"x" * (1 << 20) + b"\n")
    with pytest.raises(TaskImportError, match=r"expected at most 1048576 bytes, got 1048579"):
        convert(y)
