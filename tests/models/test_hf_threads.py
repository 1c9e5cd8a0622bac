"""Loading Hugging Face folders from several threads at once.

transformers' loading is not thread-safe: its lazy imports (``ImportError: cannot import name
'AutoConfig'``), its process-wide default dtype and patched initialisers and its meta-device
construction (``Cannot copy out of meta tensor``, or weights left random) break when two threads
build models at once. :func:`tinyllm.models.hf.load` and :func:`~tinyllm.models.hf.load_tokenizer`
hold one lock (:func:`tinyllm.models.hf_checks.loading`) while transformers is imported and
builds. The oracle: the same folders loaded one after another in the same process give the same
per-token NLLs and token ids, bit for bit. The threads run first in a fresh interpreter, so the
lazy imports race too.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

from tinyllm.models import hf

transformers = pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")

LLAMA = dict(
    vocab_size=300,
    hidden_size=16,
    intermediate_size=32,
    num_hidden_layers=2,
    num_attention_heads=2,
    max_position_embeddings=32,
)

RACE = r"""
import json, sys, threading
import numpy as np
from tinyllm.models import hf  # transformers is not imported yet

folders = sys.argv[1:]
ids = (np.arange(80) * 7) % 256
jobs = folders * 2  # each folder twice, all at once
got, errors = [None] * len(jobs), []
start = threading.Barrier(len(jobs))

def score(f):
    tok = hf.load_tokenizer(f)
    return hf.token_nlls(hf.load(f), ids).tolist(), tok.encode("the cat sat")

def run(i, f):
    start.wait()
    try:
        got[i] = score(f)
    except Exception as e:
        errors.append(f"{type(e).__name__}: {e}")

threads = [threading.Thread(target=run, args=(i, f)) for i, f in enumerate(jobs)]
for t in threads:
    t.start()
for t in threads:
    t.join()
serial = [score(f) for f in folders]
print(json.dumps({"errors": errors, "threads": got, "serial": serial}))
"""


def _tokenizer():
    """A byte-level BPE of 280 ids, trained on a few words."""
    bpe = tokenizers.Tokenizer(tokenizers.models.BPE())
    bpe.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = tokenizers.trainers.BpeTrainer(
        vocab_size=280, initial_alphabet=tokenizers.pre_tokenizers.ByteLevel.alphabet()
    )
    bpe.train_from_iterator(["the cat sat on the mat"] * 20, trainer)
    return transformers.PreTrainedTokenizerFast(tokenizer_object=bpe)


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """Two random Llamas (seeds 0, 1) and a random GPT-2, each with the same tokenizer."""
    root = tmp_path_factory.mktemp("hf-threads")
    tok = _tokenizer()
    out = []
    for seed in (0, 1):
        torch.manual_seed(seed)
        m = transformers.LlamaForCausalLM(transformers.LlamaConfig(**LLAMA))
        out.append(hf.save(m, root / f"llama{seed}"))
    torch.manual_seed(2)
    cfg = transformers.GPT2Config(
        vocab_size=300, n_positions=32, n_embd=16, n_layer=2, n_head=2, bos_token_id=0,
        eos_token_id=0,
    )  # fmt: skip
    out.append(hf.save(transformers.GPT2LMHeadModel(cfg), root / "gpt2"))
    for d in out:
        tok.save_pretrained(d)
    return out


def test_threads_loading_at_once_give_the_serial_loads_nlls(folders):
    env = {k: v for k, v in os.environ.items() if k != "TINYLLM_DEBUG"}
    p = subprocess.run(
        [sys.executable, "-c", RACE, *map(str, folders)],
        capture_output=True, text=True, timeout=300, env=env,
    )  # fmt: skip
    assert p.returncode == 0, p.stderr[-2000:]
    out = json.loads(p.stdout.splitlines()[-1])
    assert out["errors"] == []
    serial = out["serial"] * 2  # the jobs: each folder twice
    assert len(out["threads"]) == 6
    for (nlls, ids), (want_nlls, want_ids) in zip(out["threads"], serial, strict=True):
        assert nlls == want_nlls  # bit for bit
        assert ids == want_ids
    assert len({sum(n) for n, _ in out["serial"]}) == 3  # three models, three sets of NLLs
    assert all(np.isfinite(n).all() and len(n) == 79 for n, _ in out["serial"])
