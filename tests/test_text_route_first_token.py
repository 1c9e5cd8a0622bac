"""A tokenizer without BOS or EOS counts exactly the bytes its scored tokens cover
(docs/definitions.md, "Bits per byte, and text in"): token 0 is unscored and the bytes IT covers are
left out, and a marker the tokenizer inserts (Metaspace's leading "▁", standing for no character of
the text) covers none.

The tokenizer is a real SentencePiece-style BPE trained here with ``tokenizers`` on the lee
text: Metaspace (prepended "▁") with byte fallback, no special tokens. Its token 0 is "▁" alone
when the vocabulary has no "▁" + first character (a bracket, a newline, a character it lacks);
HF gives that "▁" the first character's offsets, so the offsets alone charged it with that
character's bytes.
"""

import math

import pytest
import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import LlamaForCausalLM, PreTrainedTokenizerFast
from typer.testing import CliRunner

from tinyllm.cli import app
from tinyllm.data import lee_split
from tinyllm.eval import single
from tinyllm.eval.text import read_lm_tokens
from tinyllm.models import hf_train
from tinyllm.tokens import tokenize_text

LN2 = math.log(2.0)


@pytest.fixture(scope="module")
def metaspace():
    train, val = lee_split()
    tk = Tokenizer(models.BPE(byte_fallback=True))
    tk.pre_tokenizer = pre_tokenizers.Metaspace(prepend_scheme="first")
    tk.decoder = decoders.Metaspace(prepend_scheme="first")
    bytes_ = [f"<0x{b:02X}>" for b in range(256)]
    trainer = trainers.BpeTrainer(vocab_size=700, special_tokens=bytes_, show_progress=False)
    tk.train_from_iterator(train[:80], trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tk), val


@pytest.mark.parametrize(
    ("text", "pieces", "lengths"),
    [
        ("(x)", ["▁", "(", "x", ")"], [0, 1, 1, 1]),  # the inserted "▁" covers no byte
        ("\nThe", ["▁", "<0x0A>", "T", "he"], [0, 1, 1, 2]),  # nor beside a byte-fallback byte
        ("Éc", ["▁", "<0xC3>", "<0x89>", "c"], [0, 1, 1, 1]),  # each fallback token: one byte
        ("Hello", ["▁H", "ell", "o"], [1, 3, 1]),  # a "▁" merged with a character covers it
        (" Hello", ["▁H", "ell", "o"], [2, 3, 1]),  # a real space: the "▁" covers it
    ],
)
def test_each_token_covers_its_own_bytes(metaspace, text, pieces, lengths):
    tok, _ = metaspace
    t = tokenize_text(text, tok)
    assert tok.convert_ids_to_tokens(t.ids.tolist()) == pieces
    assert t.token_bytes.tolist() == lengths and not t.has_prefix
    assert t.first_bytes == lengths[0]
    assert t.n_scored_bytes == sum(lengths[1:]) == t.n_text_bytes - lengths[0]


def test_bpb_divides_by_every_byte_when_token_0_is_the_inserted_marker(tmp_path, metaspace):
    tok, val = metaspace
    text = "(" + val[0] + ")\n" + val[1] + "\n"  # token 0: "▁" alone
    n = len(text.encode("utf-8"))
    assert tok.convert_ids_to_tokens(tok(text)["input_ids"][:2]) == ["▁", "("]
    torch.manual_seed(0)
    cfg = hf_train.llama_config(hf_train.Config(hidden=16, n_layer=1, intermediate=32), len(tok), 0)
    LlamaForCausalLM(cfg).save_pretrained(tmp_path / "m")
    tok.save_pretrained(tmp_path / "m")
    (tmp_path / "t.txt").write_text(text, encoding="utf-8")
    assert read_lm_tokens(tmp_path / "t.txt", tok).n_scored_bytes == n
    out = single.score_text(str(tmp_path / "t.txt"), hf=str(tmp_path / "m"), ctx_len=64)
    assert not out["prefix"] and out["text_bytes"] == n
    assert out["n_bytes"] == n  # every byte is covered by a scored token (not n - 1)
    assert out["bpb"]["value"] == pytest.approx(out["sum_nll"] / (n * LN2), rel=1e-12)
    r = CliRunner().invoke(
        app, ["eval", "ppl", "--hf", str(tmp_path / "m"), "--text", str(tmp_path / "t.txt")]
    )
    assert r.exit_code == 0, r.output
    assert f"over the text's {n} bytes" in " ".join(r.stdout.split())
    # a text whose token 0 merges "▁" with its first character leaves that character out
    (tmp_path / "h.txt").write_text("Hello" + text, encoding="utf-8")
    out = single.score_text(str(tmp_path / "h.txt"), hf=str(tmp_path / "m"), ctx_len=64)
    assert out["n_bytes"] == n + 5 - 1
