"""Text in (docs/definitions.md, bits per byte and text in): tokens with their UTF-8 byte spans (tinyllm/tokens.py), an lm
entry's data as a text in the model's own tokenizer (tinyllm/eval/kinds/lm.py,
tinyllm/eval/text.py), and two models paired on the same tokens.

Oracles are by hand: a byte-level BPE built from an explicit vocabulary whose one merge splits
"é" across two tokens, a whitespace tokenizer that drops spaces, and a uniform model whose NLLs
are all ``ln V``. The BPE of the bar test is trained with ``tokenizers`` on the lee text.
"""

import math

import numpy as np
import pytest
import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import LlamaForCausalLM, PreTrainedTokenizerFast

from tinyllm.data import lee_split
from tinyllm.eval import zoo
from tinyllm.eval.text import load_tokenizer, read_lm_tokens, text_ppl
from tinyllm.eval.text_compare import compare_on_text, paired_nlls
from tinyllm.models import gpt, hf_train
from tinyllm.tokens import BYTE_OF_CHAR, ByteTokenizer, tokenize_text, write_tokens
from tinyllm.windows import iter_windows

LN2 = math.log(2.0)
BYTE_CHAR = {b: c for c, b in BYTE_OF_CHAR.items()}  # byte -> its byte-level BPE character


def byte_level_bpe(merges: list[tuple[str, str]], special: bool = True) -> PreTrainedTokenizerFast:
    """A byte-level BPE with exactly ``merges`` (GPT-2's byte characters), no training."""
    alphabet = [BYTE_CHAR[b] for b in range(256)]
    vocab = {"<|endoftext|>": 0} if special else {}
    for c in alphabet:
        vocab[c] = len(vocab)
    for a, b in merges:
        vocab[a + b] = len(vocab)
    bpe = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    if not special:
        return PreTrainedTokenizerFast(tokenizer_object=bpe)
    return PreTrainedTokenizerFast(
        tokenizer_object=bpe, bos_token="<|endoftext|>", eos_token="<|endoftext|>"
    )


class Uniform(torch.nn.Module):
    """Every next token has probability 1/V: every NLL is ln V."""

    def __init__(self, vocab: int) -> None:
        super().__init__()
        self.vocab = vocab

    def forward(self, ids):
        return torch.zeros(*ids.shape, self.vocab)


# ---- byte spans, by hand ---------------------------------------------------------------------


def test_byte_tokenizer_spans_one_byte_per_token():
    t = tokenize_text("hé€", ByteTokenizer())  # 1 + 2 + 3 bytes
    assert t.ids.tolist() == [0x68, 0xC3, 0xA9, 0xE2, 0x82, 0xAC]
    assert t.starts.tolist() == [0, 1, 2, 3, 4, 5] and t.ends.tolist() == [1, 2, 3, 4, 5, 6]
    assert not t.has_prefix and t.tokenizer == "byte"
    assert t.n_text_bytes == 6 and t.n_scored_bytes == 5  # token 0 is never scored


def test_a_character_split_across_tokens_counts_each_byte_once():
    # "hé!" is 68 C3 A9 21; the one merge "h"+"Ã" (byte C3) splits é: "hÃ" | "©" | "!"
    tok = byte_level_bpe([("h", BYTE_CHAR[0xC3])])
    t = tokenize_text("hé!", tok, prefix=False)
    assert t.token_bytes.tolist() == [2, 1, 1]  # h + the first byte of é, é's second byte, !
    assert t.n_scored_bytes == 2  # token 0 (2 bytes) is unscored: 4 - 2
    p = tokenize_text("hé!", tok)  # BOS (<|endoftext|>, id 0) first: every text token scored
    assert p.ids[0] == 0 and p.has_prefix
    assert p.token_bytes.tolist() == [0, 2, 1, 1]
    assert p.n_scored_bytes == 4 == p.n_text_bytes
    assert p.tokenizer.startswith("hf-sha256:") and p.tokenizer == t.tokenizer


def test_character_offsets_give_spans_when_the_tokenizer_is_not_byte_level():
    # a word-level tokenizer that drops spaces: the gap bytes go to the next token
    wl = Tokenizer(models.WordLevel({"ab": 0, "çd": 1, "[UNK]": 2}, unk_token="[UNK]"))
    wl.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok = PreTrainedTokenizerFast(tokenizer_object=wl)
    t = tokenize_text("ab  çd ", tok)  # bytes: a b _ _ c3 a7 d _ = 8
    assert t.ids.tolist() == [0, 1] and not t.has_prefix
    assert t.starts.tolist() == [0, 2] and t.ends.tolist() == [2, 8]  # trailing space: last
    assert t.n_scored_bytes == 6


def test_strided_windows_score_each_token_once_over_the_scored_bytes():
    tok = byte_level_bpe([("h", BYTE_CHAR[0xC3]), ("l", "l")])
    text = "héllo wörld, héllo!" * 3
    t = tokenize_text(text, tok)
    n, ctx, stride = t.ids.size, 6, 2
    per_window = [t.bytes_of(first, e) for _, e, first in iter_windows(n, ctx, stride)]
    assert sum(per_window) == t.n_scored_bytes == len(text.encode("utf-8"))  # prefix: all bytes
    r = text_ppl(Uniform(len(tok)), t, ctx, stride)
    assert r["n_tokens"] == n - 1  # every text token once (the prefix token has no NLL)
    expected = (n - 1) * math.log(len(tok)) / (t.n_scored_bytes * LN2)
    assert r["bpb"]["value"] == pytest.approx(expected, rel=1e-7)  # float32 log-softmax
    assert r["n_bytes"] == t.n_scored_bytes and r["tokenizer"] == t.tokenizer


# ---- lm data files ---------------------------------------------------------------------------


def test_token_file_of_bytes_is_the_same_text(tmp_path):
    tok = byte_level_bpe([("h", BYTE_CHAR[0xC3])])
    text = "hé! ça va\n"
    (tmp_path / "t.txt").write_text(text, encoding="utf-8")
    write_tokens(tmp_path / "t.tok", ByteTokenizer().encode(text))
    a, b = read_lm_tokens(tmp_path / "t.txt", tok), read_lm_tokens(tmp_path / "t.tok", tok)
    assert np.array_equal(a.ids, b.ids) and a.n_scored_bytes == b.n_scored_bytes


def test_bad_text_is_refused_naming_the_file(tmp_path):
    (tmp_path / "bad.txt").write_bytes(b"ok \xff no")
    with pytest.raises(ValueError, match=r"bad.txt: expected UTF-8 text, got an undecodable byte"):
        read_lm_tokens(tmp_path / "bad.txt", ByteTokenizer())
    with pytest.raises(ValueError, match="expected 'byte' or a tokenizer folder"):
        load_tokenizer(tmp_path / "missing")


# ---- the bar: a byte GPT and a BPE Llama on one text file -------------------------------------


@pytest.fixture(scope="module")
def lee_bpe():
    train, val = lee_split()
    return hf_train.train_bpe("".join(d + "\n" for d in train[:60]), n_merges=300), val


def test_byte_gpt_and_bpe_llama_share_one_text_and_its_bytes(tmp_path, lee_bpe):
    tok, val = lee_bpe
    text = "".join(d + "\n" for d in val[:2])
    (tmp_path / "val.txt").write_text(text, encoding="utf-8")
    n_text = len(text.encode("utf-8"))
    torch.manual_seed(0)
    g = gpt.Model(gpt.Config(block_size=32, n_layer=1, n_head=2, n_embd=16))
    gpt.save(g, tmp_path / "gpt")
    cfg = hf_train.llama_config(hf_train.Config(hidden=32, n_layer=1, intermediate=64), len(tok), 0)
    llama = LlamaForCausalLM(cfg).eval()
    llama.save_pretrained(tmp_path / "llama")
    tok.save_pretrained(tmp_path / "llama")
    rows = {}
    for name, family, opts in (("gpt", "gpt", {"ctx_len": 32, "stride": 16}), ("llama", "hf", {})):
        entry = {"name": name, "family": family, "checkpoint": name, "data": "val.txt"}
        rows[name] = zoo.score_entry(entry | {"options": opts}, seed=0, base_dir=tmp_path)
        assert rows[name]["status"] == "ok", rows[name]["error"]
    d_gpt, d_llama = rows["gpt"]["details"], rows["llama"]["details"]
    assert d_gpt["text_bytes"] == d_llama["text_bytes"] == n_text  # the same text, bytes
    assert d_gpt["tokenizer"] == "byte" and d_llama["tokenizer"].startswith("hf-sha256:")
    # the byte GPT predicts bytes 1..n-1; the Llama reads BOS first and predicts every byte
    assert d_gpt["n_bytes"] == n_text - 1 and rows["gpt"]["n"] == n_text - 1
    assert d_llama["prefix"] and d_llama["n_bytes"] == n_text
    ids = tokenize_text(text, tok).ids
    assert rows["llama"]["n"] == ids.size - 1 < n_text / 2  # BPE tokens, not bytes as ids
    # bpb = sum NLL / (n_bytes ln 2) for both, from the same NLLs the rows' nll report
    for r in rows.values():
        total = r["details"]["nll"]["value"] * r["n"]
        assert r["value"] == pytest.approx(total / (r["details"]["n_bytes"] * LN2), rel=1e-9)


def test_hf_folder_with_a_tokenizer_reads_a_byte_token_file_as_its_text(tmp_path, lee_bpe):
    tok, val = lee_bpe
    text = val[0] + "\n"
    write_tokens(tmp_path / "val.tok", ByteTokenizer().encode(text))
    (tmp_path / "val.txt").write_text(text, encoding="utf-8")
    cfg = hf_train.llama_config(hf_train.Config(hidden=32, n_layer=1, intermediate=64), len(tok), 0)
    torch.manual_seed(0)
    LlamaForCausalLM(cfg).save_pretrained(tmp_path / "m")
    tok.save_pretrained(tmp_path / "m")
    rows = [
        zoo.score_entry(
            {"name": "m", "family": "hf", "checkpoint": "m", "data": data}, base_dir=tmp_path
        )
        for data in ("val.tok", "val.txt")
    ]
    assert rows[0]["status"] == "ok", rows[0]["error"]
    assert rows[0]["value"] == rows[1]["value"] and rows[0]["n"] == rows[1]["n"]
    assert rows[0]["n"] == tokenize_text(text, tok).ids.size - 1


# ---- two models paired on the same tokens -----------------------------------------------------


def test_paired_nlls_by_hand():
    r = paired_nlls([1.0, 2.0, 3.0], [2.0, 2.0, 5.0], n_bytes=6)
    # d = [1, 0, 2]: mean 1, s = 1, t_{0.975,2} = 4.302653
    assert r["delta"]["value"] == pytest.approx(1.0)
    assert r["delta"]["hi"] - 1.0 == pytest.approx(4.302653 / math.sqrt(3), rel=1e-6)
    assert r["delta_bpb"]["value"] == pytest.approx(3.0 / (6 * LN2))
    # exact: |±1 ±0 ±2| = 3 for signs (+,+) and (-,-) of 1 and 2, each with both signs of 0
    assert r["p"] == pytest.approx(4 / 8)


# torch 2.13 marks torch.ao.quantization deprecated; the example uses it as it is
@pytest.mark.filterwarnings("ignore:torch.ao.quantization is deprecated:DeprecationWarning")
@pytest.mark.filterwarnings("ignore:torch.quantize_per_tensor:UserWarning")
def test_a_model_against_itself_and_against_its_int8_copy(lee_bpe):
    tok, val = lee_bpe
    t = tokenize_text("".join(d + "\n" for d in val[:2]), tok)
    torch.manual_seed(0)
    cfg = hf_train.llama_config(
        hf_train.Config(hidden=64, n_layer=2, intermediate=128), len(tok), 0
    )
    m = LlamaForCausalLM(cfg).eval()
    same = compare_on_text(m, t, m, t, 64, 32, rng=np.random.default_rng(0))
    assert same["delta"] == {"value": 0.0, "lo": 0.0, "hi": 0.0} and same["p"] == 1.0
    q = torch.ao.quantization.quantize_dynamic(m, {torch.nn.Linear}, dtype=torch.qint8)
    r = compare_on_text(m, t, q, t, 64, 32, rng=np.random.default_rng(0))
    assert r["n_tokens"] == t.ids.size - 1 and r["n_bytes"] == t.n_scored_bytes
    assert r["delta"]["value"] != 0.0
    assert r["delta"]["lo"] < r["delta"]["value"] < r["delta"]["hi"]
    assert 0.0 < r["p"] <= 1.0
    assert r["nll_b"] - r["nll_a"] == pytest.approx(r["delta"]["value"], abs=1e-12)


def test_pairing_needs_the_same_tokenizer(lee_bpe):
    tok, _ = lee_bpe
    a, b = tokenize_text("héllo there", tok), tokenize_text("héllo there", ByteTokenizer())
    with pytest.raises(
        ValueError, match=r"expected the same tokenizer, got hf-sha256:\w+ and byte"
    ):
        compare_on_text(Uniform(len(tok)), a, Uniform(256), b, 4, 2)


def test_hf_folder_without_a_tokenizer_is_a_byte_model(tmp_path):
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    cfg = GPT2Config(vocab_size=256, n_positions=64, n_embd=16, n_layer=1, n_head=2)
    GPT2LMHeadModel(cfg).save_pretrained(tmp_path / "m")  # as export_hf writes: no tokenizer
    text = "héllo, wörld\n" * 3
    (tmp_path / "t.txt").write_text(text, encoding="utf-8")
    entry = {"name": "m", "family": "hf", "checkpoint": "m", "data": "t.txt"}
    row = zoo.score_entry(entry, base_dir=tmp_path)
    assert row["status"] == "ok", row["error"]
    n = len(text.encode("utf-8"))
    assert row["n"] == row["details"]["n_bytes"] == n - 1 and row["details"]["tokenizer"] == "byte"
