"""Several Hugging Face entries in one release on the default (thread) runner.

The EvalSuite flow scores its entries in threads at once; transformers' loading is not
thread-safe (its lazy imports, its process-wide default dtype and patched initialisers, its
meta-device construction), so two HF entries loaded together failed with ``ImportError: cannot
import name 'AutoConfig'`` or ``Cannot copy out of meta tensor``, or loaded random weights.
:func:`tinyllm.models.hf.load` holds one lock while transformers builds a model. The oracle is
``run_zoo`` (the ``--out`` path: one entry after another): every row of one flow run with two
Llama folders and a GPT-2 folder is ok and equal to its row, and the stored per-token NLLs equal
its arrays.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import yaml
from zoo_rows import assert_flow_rows_equal_run_zoo

from tinyllm.eval import zoo
from tinyllm.store import open_store
from tinyllm.tokens import write_tokens
from tinyllm_suite.eval_suite import eval_suite

transformers = pytest.importorskip("transformers")

TEXT = b"the cat sat on the mat. the dog sat on the log. a cat and a dog met on a mat. " * 4
LLAMA = dict(
    vocab_size=256,
    hidden_size=16,
    intermediate_size=32,
    num_hidden_layers=2,
    num_attention_heads=2,
    max_position_embeddings=32,
    bos_token_id=0,
    eos_token_id=0,
)
NAMES = ["llama-a", "llama-b", "gpt2", "llama-a-again"]


@pytest.fixture
def zoo_dir(tmp_path):
    """Two random 2-layer Llamas (seeds 0 and 1), a random 2-layer GPT-2 (byte vocabularies,
    32 positions), 150 byte tokens, and a manifest listing llama-a twice."""
    data = np.frombuffer(TEXT, dtype=np.uint8)
    write_tokens(tmp_path / "val.tok", data[:150])
    for seed, name in enumerate(("llama-a", "llama-b")):
        torch.manual_seed(seed)
        transformers.LlamaForCausalLM(transformers.LlamaConfig(**LLAMA)).save_pretrained(
            tmp_path / name
        )
    torch.manual_seed(2)
    cfg = transformers.GPT2Config(
        vocab_size=256, n_positions=32, n_embd=16, n_layer=2, n_head=2, bos_token_id=0,
        eos_token_id=0,
    )  # fmt: skip
    transformers.GPT2LMHeadModel(cfg).save_pretrained(tmp_path / "gpt2")
    entries = [
        {"name": n, "family": "hf", "checkpoint": n.removesuffix("-again"), "data": "val.tok"}
        for n in NAMES
    ]
    (tmp_path / "zoo.yaml").write_text(yaml.safe_dump({"suite": "zoo", "entries": entries}))
    return tmp_path


def test_hf_entries_of_two_architectures_in_one_flow_run_equal_the_out_path(zoo_dir, tmp_path):
    m = str(zoo_dir / "zoo.yaml")
    out = eval_suite(manifest=m, release="r1", store=str(tmp_path / "store"), seed=0)
    rows = out["report"]["rows"]
    assert [r["name"] for r in rows] == NAMES
    assert [r["status"] for r in rows] == ["ok"] * 4, [r.get("error") for r in rows]
    ref = zoo.run_zoo(m, seed=0)  # one entry after another, as --out runs them
    assert assert_flow_rows_equal_run_zoo(rows, ref, open_store(tmp_path / "store"), "r1") >= 0
    by = {r["name"]: r for r in rows}
    # the same folder twice is the same model; the other folders are other models
    assert by["llama-a"]["value"] == by["llama-a-again"]["value"]
    assert len({by[n]["value"] for n in ("llama-a", "llama-b", "gpt2")}) == 3
    assert all(by[n]["n"] == 149 for n in NAMES)  # tokens 1..149 of 150, each scored once
