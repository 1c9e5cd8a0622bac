"""``tinyllm eval ppl --text`` at its edges: a text path that is a symbolic link loop is one line
naming the file (not a raw OSError), and a model is never fed ids of another tokenizer
(docs/definitions.md, "Bits per byte, and text in"): ``--tokenizer byte`` against a BPE model, alone
or through ``--against``, is refused before anything is scored."""

import pytest
import torch
from transformers import LlamaForCausalLM
from typer.testing import CliRunner

from tinyllm.cli import app
from tinyllm.data import lee_split
from tinyllm.eval import single
from tinyllm.eval.text import read_lm_tokens
from tinyllm.models import gpt, hf_train
from tinyllm.tokens import ByteTokenizer


def _invoke(args):
    return CliRunner().invoke(app, [str(a) for a in args])


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """A byte-level gpt checkpoint, a Llama folder with its own BPE, a text."""
    d = tmp_path_factory.mktemp("probe")
    train, val = lee_split()
    tok = hf_train.train_bpe("".join(t + "\n" for t in train[:40]), 200)
    torch.manual_seed(0)
    gpt.save(gpt.Model(gpt.Config(block_size=32, n_layer=1, n_head=2, n_embd=16)), d / "gpt")
    cfg = hf_train.llama_config(hf_train.Config(hidden=16, n_layer=1, intermediate=32), len(tok), 0)
    LlamaForCausalLM(cfg).save_pretrained(d / "llama")
    tok.save_pretrained(d / "llama")
    (d / "t.txt").write_text(val[0] + "\n", encoding="utf-8")
    return d


def test_a_symlink_loop_is_one_line_naming_the_file(models, tmp_path):
    loop = tmp_path / "loop.txt"
    loop.symlink_to(loop)
    with pytest.raises(
        ValueError, match="loop.txt: expected a readable text file, got a symbolic link loop$"
    ):
        read_lm_tokens(loop, ByteTokenizer())
    for extra in ([], ["--against", models / "gpt"]):
        r = _invoke(["eval", "ppl", "--model", models / "gpt", "--text", loop, *extra])
        assert r.exit_code == 2
        assert (
            r.output == f"error: {loop}: expected a readable text file, got a symbolic link loop\n"
        )


def test_byte_values_are_never_fed_to_a_bpe_model(models):
    llama, gpt_dir, text = models / "llama", models / "gpt", models / "t.txt"
    # the Llama's own BPE, asked for by its folder: the same tokenizer, accepted
    same = _invoke(["eval", "ppl", "--hf", llama, "--text", text, "--tokenizer", llama, "--json"])
    assert same.exit_code == 0, same.output
    for args, who in (
        (["--hf", llama, "--tokenizer", "byte"], llama),
        (["--model", gpt_dir, "--tokenizer", llama], gpt_dir),
        (["--model", gpt_dir, "--tokenizer", "byte", "--against", llama], llama),
    ):
        r = _invoke(["eval", "ppl", "--text", text, *args])
        assert r.exit_code == 2, r.output
        assert r.output.startswith(
            f"error: --tokenizer {args[3]}: expected the tokenizer of {who} ("
        )
        assert "a model is never fed ids of another tokenizer" in r.output
        assert len(r.output.splitlines()) == 1
    # without --tokenizer each model reads its own: different tokenizers do not pair per token,
    # each bpb comes with its interval over documents, side by side
    out = single.compare_text(str(text), str(llama), model=str(gpt_dir))
    assert out["paired"] is False and out["tokenizer_a"] == "byte"
    assert out["note"] == "different tokenizers: compared by bpb only, unpaired"
    assert out["tokenizer_b"].startswith("hf-sha256:") and out["delta_bpb"]["lo"] is None
