"""Training a small Hugging Face ``LlamaForCausalLM`` with its own byte-level BPE: the zoo's
``hf`` row (docs/zoo.md), a real subword model scored in the same bits-per-byte column as the
byte families (docs/definitions.md, bits per byte and text in, "Text in").

:func:`train` takes the byte ids of a UTF-8 training text (what the ``lee`` corpus gives every
lm family), trains a byte-level BPE on its lines with the ``tokenizers`` library
(:func:`train_bpe`: 256 byte symbols, ``n_merges`` merges, one special token ``<|endoftext|>``
that is BOS and EOS, as GPT-2's), then a randomly initialized ``LlamaForCausalLM`` on random
windows of the tokenized text. :func:`save` writes the folder the ``hf`` family reads:
``save_pretrained`` (config.json + model.safetensors) and the tokenizer beside it, which
``AutoTokenizer.from_pretrained(folder, local_files_only=True)`` loads. The shape and the
training settings are recorded in config.json under ``tl_train``.

``transformers`` and ``tokenizers`` are imported only inside the functions that use them: both
are optional dependencies, and importing the families stays fast.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from tinyllm.models.training import lr_at, optimizer_step, settings_of

SPECIAL = "<|endoftext|>"  # the BPE's one special token: BOS (the prefix token) and EOS
TOKENIZER_ATTR = "tl_tokenizer"  # the trained model's tokenizer, until save writes it
RECORD_KEY = "tl_train"  # config.json key of the shape and settings it was trained with


@dataclass(frozen=True)
class Config:
    """The model's shape and its tokenizer's size: a ``LlamaConfig`` of ``hidden`` wide,
    ``n_layer`` blocks, ``n_head`` query heads sharing ``n_kv_head`` key/value heads (GQA),
    an MLP of ``intermediate`` (SwiGLU), ``ctx_len`` positions (RoPE), tied embeddings; the BPE
    vocabulary is ``256 + n_merges + 1`` (bytes, merges, ``<|endoftext|>``)."""

    n_merges: int = 1000
    hidden: int = 128
    n_layer: int = 4
    n_head: int = 4
    n_kv_head: int = 2
    intermediate: int = 384
    ctx_len: int = 128

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"hf_train.Config.{f.name}: expected an int >= 1, got {v!r}")
        if self.hidden % self.n_head or self.n_head % self.n_kv_head:
            raise ValueError(
                f"hf_train.Config: expected hidden % n_head == 0 and n_head % n_kv_head == 0, "
                f"got hidden={self.hidden}, n_head={self.n_head}, n_kv_head={self.n_kv_head}"
            )


@dataclass(frozen=True)
class TrainConfig:
    """AdamW on windows of ``seq_len + 1`` tokens, ``batch_size`` per step; linear warmup over
    ``warmup`` steps (None: a twentieth of them) then a cosine to ``lr / 10``."""

    batch_size: int = 16
    seq_len: int = 64
    lr: float = 3e-3
    weight_decay: float = 0.1
    warmup: int | None = None
    grad_clip: float = 1.0


def text_of(data: Any) -> str:
    """The UTF-8 text of ``data``: a str as it is, or 1-d byte ids (0..255), decoded strictly."""
    if isinstance(data, str):
        return data
    a = np.asarray(data)
    if a.ndim != 1 or not np.issubdtype(a.dtype, np.integer):
        raise ValueError(
            f"hf_train: expected a text or 1-d byte ids, got shape {a.shape} {a.dtype}"
        )
    if a.size and (int(a.min()) < 0 or int(a.max()) > 255):
        raise ValueError(
            f"hf_train: expected byte ids 0..255, got values in {int(a.min())}..{int(a.max())}"
        )
    try:
        return a.astype(np.uint8).tobytes().decode("utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(f"hf_train: expected UTF-8 bytes, got a bad byte at {e.start}") from None


def train_bpe(text: str, n_merges: int) -> Any:
    """A byte-level BPE (GPT-2's pre-tokenizer and decoder, no prefix space) with ``n_merges``
    merges learned from the lines of ``text`` by ``tokenizers``' ``BpeTrainer``, wrapped as a
    transformers fast tokenizer whose BOS and EOS are ``<|endoftext|>`` (id 0).

    Example: ``train_bpe(text, 1000)`` has ``len(tok) == 1257`` when the text has enough
    distinct pairs (256 bytes + 1000 merges + the special token)."""
    # optional dependencies: only training an HF model needs them
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast  # optional dependencies, as above

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=1 + 256 + n_merges,
        special_tokens=[SPECIAL],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    bpe.train_from_iterator(text.splitlines(keepends=True), trainer)
    return PreTrainedTokenizerFast(tokenizer_object=bpe, bos_token=SPECIAL, eos_token=SPECIAL)


def llama_config(cfg: Config, vocab_size: int, bos: int) -> Any:
    """The ``LlamaConfig`` of ``cfg`` for a vocabulary of ``vocab_size`` ids, BOS = EOS =
    ``bos``, no dropout."""
    from transformers import LlamaConfig  # optional dependency, as above

    return LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=cfg.hidden,
        intermediate_size=cfg.intermediate,
        num_hidden_layers=cfg.n_layer,
        num_attention_heads=cfg.n_head,
        num_key_value_heads=cfg.n_kv_head,
        max_position_embeddings=cfg.ctx_len,
        tie_word_embeddings=True,
        attention_dropout=0.0,
        bos_token_id=bos,
        eos_token_id=bos,
        pad_token_id=None,
    )


def train(
    cfg: Config,
    data: Any,
    *,
    seed: int,
    steps: int,
    progress: Callable[[int, int, float], None] | None = None,
    **settings,
) -> Any:
    """Train the BPE, then a ``LlamaForCausalLM`` from random weights (``torch.manual_seed(seed)``)
    for ``steps`` AdamW steps on ``data`` (a UTF-8 text or its byte ids); ``settings`` are
    :class:`TrainConfig`'s fields.

    The text is tokenized whole with no special tokens and ``<|endoftext|>`` in front (the
    prefix token the text route prepends when scoring); each step reads ``batch_size`` windows of
    ``seq_len + 1`` tokens at offsets from ``numpy.random.default_rng(seed)`` and minimizes the
    mean NLL of tokens 1..seq_len. ``progress(step, total, loss)`` after each step. Returns the
    model in eval mode, its tokenizer kept for :func:`save`.
    """
    from transformers import LlamaForCausalLM  # optional dependency, as above

    tc = settings_of(TrainConfig, settings, "hf_train.train")
    if steps < 1:
        raise ValueError(f"hf_train.train: expected steps >= 1, got {steps}")
    if tc.seq_len > cfg.ctx_len:
        raise ValueError(
            f"hf_train.train: expected seq_len <= ctx_len={cfg.ctx_len}, got {tc.seq_len}"
        )
    text = text_of(data)
    tok = train_bpe(text, cfg.n_merges)
    bos = int(tok.bos_token_id)
    ids = tok(text, add_special_tokens=False, verbose=False)["input_ids"]
    stream = torch.tensor([bos, *ids], dtype=torch.int64)
    if stream.numel() < tc.seq_len + 2:
        raise ValueError(
            f"hf_train.train: expected at least {tc.seq_len + 2} tokens of text, "
            f"got {stream.numel()}"
        )
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    model = LlamaForCausalLM(llama_config(cfg, len(tok), bos))
    model.train()
    decay = [p for n, p in model.named_parameters() if p.dim() == 2 and "embed" not in n]
    rest = [p for p in model.parameters() if not any(p is q for q in decay)]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": tc.weight_decay}, {"params": rest, "weight_decay": 0.0}],
        lr=tc.lr,
        betas=(0.9, 0.95),
    )
    warmup = max(1, steps // 20) if tc.warmup is None else tc.warmup
    offsets = torch.arange(tc.seq_len + 1)  # [T+1]
    for step in range(steps):
        for g in opt.param_groups:
            g["lr"] = lr_at(step, steps, tc.lr, warmup)
        starts = rng.integers(0, stream.numel() - tc.seq_len - 1, size=tc.batch_size)
        win = stream[torch.from_numpy(starts)[:, None] + offsets]  # [B, T+1]
        logits = model(input_ids=win[:, :-1], use_cache=False).logits  # [B, T, V]
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), win[:, 1:].flatten())
        optimizer_step(model, opt, loss, tc.grad_clip)
        if progress is not None:
            progress(step + 1, steps, loss.item())
    model.eval()
    setattr(
        model.config,
        RECORD_KEY,
        {
            "config": dataclasses.asdict(cfg),
            "train_config": dataclasses.asdict(tc),
            "seed": int(seed),
            "steps": int(steps),
        },
    )
    setattr(model, TOKENIZER_ATTR, tok)
    return model


def save(model: Any, path: str | os.PathLike) -> Path:
    """Write the folder ``path``: ``model.save_pretrained`` (config.json, model.safetensors) and
    the tokenizer :func:`train` kept (tokenizer.json, tokenizer_config.json). Returns the folder.
    Raises ValueError for a model :func:`train` did not make (no tokenizer to save)."""
    tok = getattr(model, TOKENIZER_ATTR, None)
    if tok is None:
        raise ValueError(
            f"hf_train.save: expected a model trained by hf_train.train (with its tokenizer), "
            f"got {type(model).__name__} without one"
        )
    d = Path(path)
    d.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(d), safe_serialization=True)
    tok.save_pretrained(str(d))
    return d
