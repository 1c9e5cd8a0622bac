"""The tiny Hugging Face Llama the hf family's loading tests save and read back
(tests/models/test_hf_probe.py, test_hf_safety.py): ``LLAMA``, its LlamaConfig keywords, over a
vocabulary of ``V`` ids."""

from __future__ import annotations

V = 300
LLAMA = dict(
    vocab_size=V,
    hidden_size=16,
    intermediate_size=32,
    num_hidden_layers=2,
    num_attention_heads=2,
    max_position_embeddings=32,
)
