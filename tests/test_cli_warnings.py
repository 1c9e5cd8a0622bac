"""In the `tinyllm` command every Python warning is one line on stderr, ``warning: <message>``
(no category, file, line or source); ``--debug`` keeps Python's form."""

from __future__ import annotations

import json
import subprocess
import sys
import warnings

import numpy as np
import pytest

from tinyllm import cli
from tinyllm.console import warning_line
from tinyllm.models import bigram

TEXT = b"the cat sat on the mat. the dog sat on the log. a cat and a dog met by the log. " * 6
CUT = (
    "cut {n} context tokens from the left of 5 of 5 context + choice pairs to fit the model's "
    "context of {L} tokens (lm-eval's rule: the model reads (context + choice)[-(L+1):][:-1])"
)


@pytest.fixture
def task(tmp_path):
    """A bigram checkpoint and a 2-item task whose contexts are longer than --max-length."""
    bigram.save(bigram.train(bigram.Config(k=0.5), np.frombuffer(TEXT, np.uint8), seed=0),
                tmp_path / "bigram")  # fmt: skip
    items = [
        {"context": "the cat", "choices": [" sat", " dog"], "gold": 0},
        {"context": "a dog met by the", "choices": [" log", " mat", " cat"], "gold": 0},
    ]
    (tmp_path / "t.jsonl").write_text("".join(json.dumps(i) + "\n" for i in items))
    return ["eval", "task", "--task", tmp_path / "t.jsonl", "--model", tmp_path / "bigram"]


def run_main(monkeypatch, capsys, *args):
    """The installed entry point (cli.main, with its error boundary and warning format)."""
    monkeypatch.setitem(cli.DEBUG, "on", False)
    monkeypatch.setattr(sys, "argv", ["tinyllm", *map(str, args)])
    with pytest.raises(SystemExit) as ex:
        cli.main()
    out = capsys.readouterr()
    return ex.value.code, out.out, out.err


def cut_tokens(L: int) -> int:
    """The context tokens (bytes) lm-eval's rule drops: ctx + choice keeps its last L + 1
    tokens, so a pair keeps L + 1 - len(choice) context tokens of its context."""
    pairs = [("the cat", " sat"), ("the cat", " dog")]
    pairs += [("a dog met by the", c) for c in (" log", " mat", " cat")]
    return sum(max(0, len(c) - (L + 1 - len(ch))) for c, ch in pairs)


def test_a_warning_of_the_instrument_is_one_line(task, monkeypatch, capsys):
    # the contexts are cut to fit --max-length 7: the instrument warns (tinyllm/eval/lm/tasks.py)
    code, out, err = run_main(monkeypatch, capsys, *task, "--max-length", "7", "--json", "-q")
    assert code in (0, None), err
    assert cut_tokens(7) == 2 * 3 + 3 * 12  # "the cat" keeps 4 of 7, "a dog met by the" 4 of 16
    assert err.splitlines() == [f"warning: {CUT.format(n=42, L=7)}"], err
    assert "UserWarning" not in err and ".py:" not in err
    assert json.loads(out)["n"] == 2


def test_debug_keeps_pythons_full_warning(task):
    # a process of its own: Python's own warning printer, not pytest's recorder, writes it
    argv = [sys.executable, "-m", "tinyllm.cli", "--debug", *map(str, task), "--max-len", "8"]
    res = subprocess.run([*argv, "-q"], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    assert cut_tokens(8) == 2 * 2 + 3 * 11
    assert f"UserWarning: {CUT.format(n=37, L=8)}" in res.stderr
    assert "tasks.py:" in res.stderr  # the file and line of the warning, then its source line
    assert not any(ln.startswith("warning: ") for ln in res.stderr.splitlines())


def test_warning_line_folds_newlines_and_drops_the_category():
    assert warning_line(UserWarning("a\n  b")) == "warning: a b"
    assert warning_line("plain") == "warning: plain"


def test_show_warning_writes_to_the_file_it_is_given(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(cli.DEBUG, "on", False)
    with open(tmp_path / "log", "w") as f:
        cli.show_warning(RuntimeWarning("x\ny"), RuntimeWarning, "/a/b.py", 3, f)
    assert (tmp_path / "log").read_text() == "warning: x y\n"
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        monkeypatch.setattr(warnings, "showwarning", cli.show_warning)
        warnings.warn("from the code\nin two lines", UserWarning, stacklevel=1)
    assert capsys.readouterr().err == "warning: from the code in two lines\n"
