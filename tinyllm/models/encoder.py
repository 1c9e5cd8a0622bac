"""The byte-level bidirectional encoder shared by the bert, electra and classifier families: the
trunk (:class:`Encoder`), BERT's masked-language-model head and the two together
(:class:`MaskedLM`), BERT's masking (:func:`mlm_mask`), the ``[CLS] bytes`` rows and windows they
read, and their AdamW (:func:`adamw`).

Input ``[CLS] b_1 ... b_n [PAD]...`` (``tinyllm.tokens.encode_batch(..., cls=True)``): learned
token embeddings over the 261 ids (256 bytes + the specials of :mod:`tinyllm.tokens`) plus
learned positions, ``n_layer`` pre-LayerNorm blocks of bidirectional self-attention
(``layers.Block(causal=False)``) with a key-padding mask (no position attends to a PAD) and a
learned relative-position bias, a final LayerNorm. The MLM head is BERT's: ``dense -> GELU ->
LayerNorm``, then a decoder tied to the embeddings of the 256 bytes plus a bias, so it scores
bytes only (a special id is never a target).

Shapes: ``B`` batch, ``T`` tokens (``<= max_len``), ``D`` = ``n_embd``, ``V`` = 261 input ids,
256 output classes (bytes).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from tinyllm.models.layers import Block, init_gpt_weights
from tinyllm.tokens import CLS, MASK, N_BYTES, PAD, VOCAB_WITH_SPECIALS, encode_batch

LN_EPS = 1e-5
# Weight init std (Linear and Embedding). BERT's and GPT-2's 0.02 suits width 768; at width 16-64
# the attention values are then so small that MLM sits on the unigram plateau for hundreds of
# steps (docs/zoo.md has the measurement).
INIT_STD = 0.1
# config.json's tokenizer of the encoder families' checkpoints: bytes plus tinyllm.tokens' specials
TOKENIZER = {"type": "byte", "vocab_size": N_BYTES, "specials": "tinyllm.tokens"}


def check_encoder_shape(cfg, who: str) -> None:
    """The encoder fields of a config (``max_len``, ``n_layer``, ``n_head``, ``n_embd``,
    ``dropout``), validated."""
    for name in ("max_len", "n_layer", "n_head", "n_embd"):
        v = getattr(cfg, name)
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise ValueError(f"{who}.{name}: expected a positive int, got {v!r}")
    if cfg.max_len < 2:
        raise ValueError(f"{who}.max_len: expected >= 2 (CLS plus one byte), got {cfg.max_len}")
    if cfg.n_embd % cfg.n_head:
        raise ValueError(
            f"{who}.n_embd: expected a multiple of n_head={cfg.n_head}, got {cfg.n_embd}"
        )
    if not isinstance(cfg.dropout, int | float) or not 0.0 <= cfg.dropout < 1.0:
        raise ValueError(f"{who}.dropout: expected a float in [0, 1), got {cfg.dropout!r}")


def check_mask_prob(p, who: str) -> None:
    """A masking probability: a number in (0, 1)."""
    if not isinstance(p, int | float) or not 0.0 < p < 1.0:
        raise ValueError(f"{who}.mask_prob: expected a float in (0, 1), got {p!r}")


class Encoder(nn.Module):
    """The bidirectional trunk: ``ln_f(blocks(wte(ids) + wpe(positions)))`` -> ``[B, T, D]``."""

    def __init__(
        self, max_len: int, n_layer: int, n_head: int, n_embd: int, dropout: float = 0.0
    ) -> None:
        super().__init__()
        self.max_len = max_len
        self.wte = nn.Embedding(VOCAB_WITH_SPECIALS, n_embd)  # [261, D]: bytes + specials
        self.wpe = nn.Embedding(max_len, n_embd)  # [max_len, D]
        self.drop = nn.Dropout(dropout)
        self.h = nn.ModuleList(
            Block(n_embd, n_head, causal=False, dropout=dropout, eps=LN_EPS) for _ in range(n_layer)
        )
        self.ln_f = nn.LayerNorm(n_embd, eps=LN_EPS)
        # learned relative-position attention bias shared by all layers (T5-style), one logit per
        # head and offset j - i in [-(max_len - 1), max_len - 1]; zero at init (uniform attention)
        self.rel_bias = nn.Parameter(torch.zeros(n_head, 2 * max_len - 1))  # [H, 2*max_len - 1]

    def attn_bias(self, pad: torch.Tensor) -> torch.Tensor:
        """Additive attention logits ``[B or 1, H, T, T]``: the relative-position bias, and -inf
        on PAD keys (a query still sees its row's CLS, so no row of the softmax is all -inf)."""
        T = pad.shape[1]
        off = torch.arange(T, device=pad.device)
        rel = off[None, :] - off[:, None] + self.max_len - 1  # [T, T]: index of offset j - i
        bias = self.rel_bias[:, rel].unsqueeze(0)  # [1, H, T, T]
        if bool(pad.any()):
            neg = torch.zeros(pad.shape, dtype=bias.dtype, device=pad.device)
            neg = neg.masked_fill(pad, float("-inf"))  # [B, T]
            bias = bias + neg[:, None, None, :]  # [B, H, T, T]
        return bias

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """Hidden states ``[B, T, D]`` of ``ids`` ``[B, T]`` (int64, PAD on the right)."""
        if ids.dim() != 2:
            raise ValueError(f"encoder: expected ids of shape [B, T], got {list(ids.shape)}")
        n_tok = ids.shape[1]  # T
        if n_tok > self.max_len:
            raise ValueError(
                f"encoder: expected at most max_len={self.max_len} tokens, got {n_tok}"
            )
        if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= VOCAB_WITH_SPECIALS):
            raise ValueError(
                f"encoder: expected ids in [0, {VOCAB_WITH_SPECIALS}), "
                f"got values in [{int(ids.min())}, {int(ids.max())}]"
            )
        pad = ids == PAD  # [B, T]
        # one float mask for every block: relative-position bias + -inf on PAD keys
        mask = self.attn_bias(pad)
        pos = torch.arange(n_tok, device=ids.device)  # [T]
        x = self.drop(self.wte(ids) + self.wpe(pos))  # [B, T, D]
        for block in self.h:
            x = block(x, mask)  # [B, T, D]; every position reads every non-PAD position
        return self.ln_f(x)  # [B, T, D]


class MLMHead(nn.Module):
    """BERT's prediction head: ``LayerNorm(GELU(dense(h)))`` then the byte embeddings' transpose
    (tied: ``wte.weight[:256]``) plus a bias -> byte logits ``[..., 256]``."""

    def __init__(self, n_embd: int) -> None:
        super().__init__()
        self.dense = nn.Linear(n_embd, n_embd)
        self.ln = nn.LayerNorm(n_embd, eps=LN_EPS)
        self.bias = nn.Parameter(torch.zeros(N_BYTES))

    def forward(self, h: torch.Tensor, wte: torch.Tensor) -> torch.Tensor:
        z = self.ln(F.gelu(self.dense(h)))  # [..., D]
        return F.linear(z, wte[:N_BYTES], self.bias)  # [..., D] x [256, D]^T -> [..., 256]


class MaskedLM(nn.Module):
    """Encoder + MLM head (a BERT; ELECTRA's generator): ``model(ids)`` -> byte logits
    ``[B, T, 256]`` at every position; weights by :func:`init_gpt_weights` with ``INIT_STD``."""

    def __init__(
        self, max_len: int, n_layer: int, n_head: int, n_embd: int, dropout: float = 0.0
    ) -> None:
        super().__init__()
        self.encoder = Encoder(max_len, n_layer, n_head, n_embd, dropout)
        self.head = MLMHead(n_embd)
        init_gpt_weights(self, n_layer, std=INIT_STD)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.head(self.encoder(ids), self.encoder.wte.weight)  # [B, T, 256]

    def logits_at(self, ids: torch.Tensor, sel: torch.Tensor) -> torch.Tensor:
        """Byte logits ``[N, 256]`` at the ``N`` True positions of ``sel`` ``[B, T]`` only (the
        head runs on the selected positions: ~15% of the work of ``forward``'s head)."""
        h = self.encoder(ids)[sel]  # [N, D]
        return self.head(h, self.encoder.wte.weight)  # [N, 256]


# ---------------------------------------------------------------------------------- masking


def mlm_mask(
    ids,
    rng: np.random.Generator,
    p: float = 0.15,
    *,
    mask_frac: float = 0.8,
    random_frac: float = 0.1,
) -> tuple[np.ndarray, np.ndarray]:
    """BERT's masking of an int array ``ids`` (any shape): returns ``(inputs, selected)``.

    Every byte position (id 0..255) is selected independently with probability ``p``; special
    ids (PAD, BOS, EOS, MASK, CLS: every id >= 256) are never selected. A selected position
    becomes MASK with probability ``mask_frac`` (0.8), a uniform random byte with probability
    ``random_frac`` (0.1; it may equal the original), and keeps its byte otherwise (0.1): the
    80/10/10 rule. ``inputs`` is a new int64 array; ``selected`` a bool array, the positions
    whose original byte is the target.

    Draws, in this order and always of ``ids``' full shape (so the same ``rng`` state and the
    same shape give the same masks): ``rng.random`` (selection), ``rng.random`` (which rule),
    ``rng.integers(0, 256)`` (the random bytes).

    >>> inp, sel = mlm_mask(np.array([260, 97, 98, 256]), np.random.default_rng(0), p=0.99)
    >>> sel.tolist()          # CLS and PAD are never selected
    [False, True, True, False]
    """
    a = np.asarray(ids)
    if not np.issubdtype(a.dtype, np.integer):
        raise ValueError(f"mlm_mask: expected integer ids, got dtype {a.dtype}")
    if not 0.0 <= p <= 1.0 or mask_frac < 0 or random_frac < 0 or mask_frac + random_frac > 1:
        raise ValueError(
            "mlm_mask: expected 0 <= p <= 1 and mask_frac, random_frac >= 0 with sum <= 1, "
            f"got p={p}, mask_frac={mask_frac}, random_frac={random_frac}"
        )
    a = a.astype(np.int64)
    eligible = (a >= 0) & (a < N_BYTES)
    selected = eligible & (rng.random(a.shape) < p)
    rule = rng.random(a.shape)
    random_bytes = rng.integers(0, N_BYTES, size=a.shape)
    inputs = a.copy()
    to_mask = selected & (rule < mask_frac)
    to_random = selected & (rule >= mask_frac) & (rule < mask_frac + random_frac)
    inputs[to_mask] = MASK
    inputs[to_random] = random_bytes[to_random]
    return inputs, selected


def mask_rows(
    rows: np.ndarray, rng: np.random.Generator, p: float, **rule
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`mlm_mask` row by row, in row order, each row's draws of its own unpadded length:
    row i's masks depend only on the rng state after rows 0..i-1, so appending a row never
    changes the masks of the rows before it. Returns ``(inputs, selected)`` ``[B, T]``."""
    inputs, selected = rows.copy(), np.zeros(rows.shape, dtype=bool)
    for i, row in enumerate(rows):
        n = int(np.count_nonzero(row != PAD))  # PAD only on the right (encode_batch)
        inputs[i, :n], selected[i, :n] = mlm_mask(row[:n], rng, p, **rule)
    return inputs, selected


# ----------------------------------------------------------------------------- rows and windows


def encode_rows(texts: Sequence[str], max_len: int) -> np.ndarray:
    """``[CLS] bytes`` rows of ``texts``, cut to ``max_len`` and right-padded: int64 ``[B, T]``."""
    ids, _ = encode_batch(list(texts), cls=True, max_len=max_len)
    return ids


def check_byte_corpus(data, max_len: int, who: str) -> np.ndarray:
    """``data`` as a 1-d integer array of byte ids with at least ``max_len`` of them."""
    a = np.asarray(data)
    if a.ndim != 1 or not np.issubdtype(a.dtype, np.integer):
        raise ValueError(
            f"{who}: expected a 1-d integer array of byte ids, got {a.shape} {a.dtype}"
        )
    if a.size < max_len:
        raise ValueError(f"{who}: expected at least max_len={max_len} bytes, got {a.size}")
    lo, hi = int(a.min()), int(a.max())
    if lo < 0 or hi >= N_BYTES:
        raise ValueError(f"{who}: expected byte ids in 0..255, got values in {lo}..{hi}")
    return a


def cls_windows(a: np.ndarray, rng: np.random.Generator, batch_size: int, max_len: int):
    """``batch_size`` random windows of ``max_len - 1`` bytes of ``a``, each behind a CLS:
    int64 ``[B, max_len]``."""
    starts = rng.integers(0, a.size - (max_len - 1) + 1, size=batch_size)  # [B]
    win = a[starts[:, None] + np.arange(max_len - 1)]  # [B, max_len - 1]
    return np.concatenate([np.full((batch_size, 1), CLS), win.astype(np.int64)], axis=1)


# ------------------------------------------------------------------------------------ optimizer

# Parameters that are 2-d but are not Linear matrices, so never weight-decayed: the token and
# position embeddings, and the relative-position attention bias (decay would pull it to zero,
# i.e. towards uniform attention, which is its init, not a prior worth keeping).
NO_DECAY_SUFFIXES = ("wte.weight", "wpe.weight", "rel_bias")


def decays(name: str, prm: torch.Tensor) -> bool:
    """Whether AdamW decays parameter ``name``: the Linear matrices only (2-d, not an embedding,
    not ``rel_bias``); biases and LayerNorm gains and shifts (1-d) never."""
    return prm.dim() == 2 and not name.endswith(NO_DECAY_SUFFIXES)


def adamw(
    model: nn.Module,
    lr: float,
    weight_decay: float,
    *,
    lr_scale: Callable[[str], float] | None = None,
) -> torch.optim.AdamW:
    """AdamW with weight decay on Linear matrices only (:func:`decays`: not embeddings,
    ``rel_bias``, biases, LayerNorms). ``lr_scale(name)`` (default 1.0 for every parameter)
    puts parameters into groups whose ``"lr_scale"`` entry multiplies the schedule's learning
    rate (the train loops set ``g["lr"] = lr_at(...) * g["lr_scale"]``)."""
    groups: dict[tuple[bool, float], list] = {}
    for name, prm in model.named_parameters():
        scale = 1.0 if lr_scale is None else float(lr_scale(name))
        groups.setdefault((decays(name, prm), scale), []).append(prm)
    return torch.optim.AdamW(
        [
            {"params": ps, "weight_decay": weight_decay if d else 0.0, "lr_scale": sc}
            for (d, sc), ps in groups.items()
        ],
        lr=lr,
        betas=(0.9, 0.98),
    )
