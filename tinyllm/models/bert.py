"""BERT: a byte-level Transformer encoder with a masked-language-model head (Devlin et al. 2019).

Input ``[CLS] b_1 ... b_n [PAD]...`` (``tinyllm.tokens.encode_batch(..., cls=True)``): learned
token embeddings over the 261 ids (256 bytes + the specials of :mod:`tinyllm.tokens`) plus
learned positions, ``n_layer`` pre-LayerNorm blocks of bidirectional self-attention
(``layers.Block(causal=False)``) with a key-padding mask (no position attends to a PAD), a final
LayerNorm. The MLM head is BERT's: ``dense -> GELU -> LayerNorm``, then a decoder tied to the
embeddings of the 256 bytes plus a bias, so it scores bytes only (a special id is never a target).

Masking (:func:`mlm_mask`): each byte position (id 0..255) is selected independently with
probability ``p``; of the selected ones 80% become MASK, 10% a uniformly random byte, 10% stay as
they are (the 80/10/10 rule). Special ids (PAD, BOS, EOS, MASK, CLS: every id >= 256) are NEVER
selected. The loss is the cross entropy of the original byte at the selected positions only.

Pretraining reads random windows of ``max_len - 1`` bytes of a byte corpus, each behind a CLS.

Shapes: ``B`` batch, ``T`` tokens (``<= max_len``), ``D`` = ``n_embd``, ``V`` = 261 input ids,
256 output classes (bytes).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from tinyllm.checkpoint import expected_from, load_tensors, read_family_config, save_checkpoint
from tinyllm.models.layers import Block, init_gpt_weights
from tinyllm.models.training import lr_at, optimizer_step
from tinyllm.tokens import CLS, MASK, N_BYTES, PAD, VOCAB_WITH_SPECIALS, encode_batch

ARCH = "bert"
KIND = "mlm"

LN_EPS = 1e-5
# Weight init std (Linear and Embedding). BERT's and GPT-2's 0.02 suits width 768; at width 16-64
# the attention values are then so small that MLM sits on the unigram plateau for hundreds of
# steps (measured: 1 x 32, 300 steps, "the cat sat..." text: loss 2.30 and masked accuracy 0.24 =
# the most frequent byte with 0.02; loss 1.13, accuracy 0.57 with 0.1; 1.26 / 0.53 with 0.2).
INIT_STD = 0.1


def check_encoder_shape(cfg, who: str) -> None:
    """The encoder fields shared by bert, electra and classifier configs, validated."""
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


@dataclass(frozen=True)
class Config:
    """A BERT's shape. ``max_len`` counts every input position, the CLS included."""

    max_len: int = 64
    n_layer: int = 2
    n_head: int = 4
    n_embd: int = 64
    dropout: float = 0.0
    mask_prob: float = 0.15  # p of mlm_mask during pretraining

    def __post_init__(self) -> None:
        check_encoder_shape(self, "bert.Config")
        if not isinstance(self.mask_prob, int | float) or not 0.0 < self.mask_prob < 1.0:
            raise ValueError(
                f"bert.Config.mask_prob: expected a float in (0, 1), got {self.mask_prob!r}"
            )


# The demo zoo's BERT (tinyllm/train.py reads these), sized so that bert + electra + the two
# classifiers need ~4 single-thread CPU minutes. Measured (seed 0, one torch thread; masked
# accuracy on the val rows, entry rng seed 0, vs the most frequent masked byte):
# * pretrained on encoder_train.bin (lee train + 3 x the rows files' train sentences,
#   docs/data.md), rel_bias not decayed, 1500 steps, 45 CPU s (build_zoo + run_zoo, busy
#   machine): polarity 0.4236 [0.3765, 0.4722] n 406 vs 0.1650; langid 0.3198 [0.2984, 0.3420]
#   n 1754 vs 0.0895.
# * the same recipe on the lee train bytes only, rel_bias decayed (commit e98b260, rerun on the
#   same masks): polarity 0.4606 [0.4127, 0.5092] (paired p vs the row above 0.09); langid
#   0.2366 [0.2173, 0.2571] (p 0.0001: the rows text helps langid). The classifiers fine-tuned
#   from each: polarity 0.4286 -> 0.5102 of 49 (p 0.54), langid 0.6646 -> 0.6571 of 799 (p 0.64).
# * an earlier measurement (61 CPU s) gave polarity 0.428 vs 0.203 and langid 0.223 vs 0.107 (other
#   masks: its baselines differ); with init std 0.02 instead of INIT_STD (and no
#   relative-position bias) that run stayed near the unigram plateau: polarity 0.261, langid 0.128.
ZOO_CONFIG = Config(max_len=64, n_layer=2, n_head=4, n_embd=64)
ZOO_STEPS = 1500
ZOO_TRAIN_KWARGS: dict = {"batch_size": 32, "lr": 2e-3}
ZOO_COST_S = 59.0  # single-thread CPU seconds of ZOO_STEPS


class Encoder(nn.Module):
    """The bidirectional trunk shared by bert, electra (generator and discriminator) and the
    classifier's backbone: ``ln_f(blocks(wte(ids) + wpe(positions)))`` -> ``[B, T, D]``."""

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


class Model(nn.Module):
    """Encoder + MLM head: ``model(ids)`` -> byte logits ``[B, T, 256]`` at every position."""

    def __init__(self, cfg: Config) -> None:
        super().__init__()
        self.cfg = cfg
        self.encoder = Encoder(cfg.max_len, cfg.n_layer, cfg.n_head, cfg.n_embd, cfg.dropout)
        self.head = MLMHead(cfg.n_embd)
        init_gpt_weights(self, cfg.n_layer, std=INIT_STD)

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


# ---------------------------------------------------------------------------------------- train


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


def cls_windows(a: np.ndarray, rng: np.random.Generator, batch_size: int, max_len: int):
    """``batch_size`` random windows of ``max_len - 1`` bytes of ``a``, each behind a CLS:
    int64 ``[B, max_len]``."""
    starts = rng.integers(0, a.size - (max_len - 1) + 1, size=batch_size)  # [B]
    win = a[starts[:, None] + np.arange(max_len - 1)]  # [B, max_len - 1]
    return np.concatenate([np.full((batch_size, 1), CLS), win.astype(np.int64)], axis=1)


def train(
    cfg: Config,
    data,
    *,
    seed: int,
    steps: int,
    progress: Callable[[int, int, float], None] | None = None,
    batch_size: int = 32,
    lr: float = 2e-3,
    weight_decay: float = 0.01,
    warmup: int | None = None,
    grad_clip: float = 1.0,
) -> Model:
    """Pretrain a BERT by masked-language modelling on ``data`` (1-d byte ids, e.g. the lee
    train bytes) with AdamW.

    Each step draws ``batch_size`` windows of ``max_len - 1`` bytes at uniform random offsets,
    puts a CLS in front, masks them with :func:`mlm_mask` (``p = cfg.mask_prob``) and minimises
    the mean cross entropy (nats) of the original bytes at the selected positions. Windows and
    masks come from ``numpy.random.default_rng(seed)``, the weights from
    ``torch.manual_seed(seed)``. Learning rate: linear warmup (default ``steps // 20``), cosine
    decay to ``lr / 10``. ``progress(step, total, loss)`` after each step (1-based). Returns the
    model in eval mode.
    """
    if steps < 1:
        raise ValueError(f"bert.train: expected steps >= 1, got {steps}")
    a = check_byte_corpus(data, cfg.max_len, "bert.train")
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    model = Model(cfg)
    model.train()
    opt = adamw(model, lr, weight_decay)
    warmup = max(1, steps // 20) if warmup is None else warmup
    for step in range(steps):
        for g in opt.param_groups:
            g["lr"] = lr_at(step, steps, lr, warmup)
        win = cls_windows(a, rng, batch_size, cfg.max_len)  # [B, T]
        inputs, sel = mlm_mask(win, rng, cfg.mask_prob)
        if not sel.any():  # a batch with nothing selected has no loss; skip it (tiny p only)
            sel[0, 1] = True
        logits = model.logits_at(torch.from_numpy(inputs), torch.from_numpy(sel))  # [N, 256]
        loss = F.cross_entropy(logits, torch.from_numpy(win[sel]))
        optimizer_step(model, opt, loss, grad_clip)
        if progress is not None:
            progress(step + 1, steps, loss.item())
    model.eval()
    return model


# ------------------------------------------------------------------------------ save / load


def save(model: Model, path: str | os.PathLike) -> Path:
    """Write the checkpoint folder ``path`` (config.json + model.safetensors)."""
    return save_checkpoint(
        path,
        ARCH,
        dataclasses.asdict(model.cfg),
        model.state_dict(),
        tokenizer={"type": "byte", "vocab_size": N_BYTES, "specials": "tinyllm.tokens"},
    )


def load(path: str | os.PathLike) -> Model:
    """Read a checkpoint folder written by :func:`save`; every tensor's name, shape, dtype and
    finiteness is checked against a freshly built model (CheckpointError naming the file)."""
    cfg = read_family_config(path, ARCH, Config)
    model = Model(cfg)
    model.load_state_dict(load_tensors(path, expected_from(model.state_dict())), strict=True)
    model.eval()
    return model


# ---------------------------------------------------------------------------------- scoring


def encode_rows(texts: Sequence[str], max_len: int) -> np.ndarray:
    """``[CLS] bytes`` rows of ``texts``, cut to ``max_len`` and right-padded: int64 ``[B, T]``."""
    ids, _ = encode_batch(list(texts), cls=True, max_len=max_len)
    return ids


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


def mlm_accuracy(
    model: Model,
    texts: Sequence[str],
    rng: np.random.Generator,
    *,
    p: float = 0.15,
    batch_size: int = 256,
) -> tuple[np.ndarray, np.ndarray]:
    """Masked-byte predictions on ``texts``: ``(correct, targets)``, one entry per selected
    position, in row order then position order.

    Each text becomes ``[CLS] bytes`` (cut to ``max_len``); :func:`mask_rows` masks it with the
    80/10/10 rule drawn from ``rng`` (the same masking as in training, so the 10% of selected
    positions left unchanged and the 10% replaced by a random byte are scored too); the
    prediction at a selected position is ``argmax`` of the 256 byte logits.
    ``correct[k] = 1.0`` when it equals the original byte ``targets[k]``, else 0.0 (float64).
    The accuracy is ``correct.mean()``; a row in which nothing was selected adds nothing.
    """
    rows = encode_rows(texts, model.cfg.max_len)
    inputs, sel = mask_rows(rows, rng, p)
    preds = []
    was_training = model.training
    model.eval()
    try:
        with torch.inference_mode():
            for s in range(0, len(rows), batch_size):
                b_sel = torch.from_numpy(sel[s : s + batch_size])
                if not bool(b_sel.any()):
                    continue
                logits = model.logits_at(torch.from_numpy(inputs[s : s + batch_size]), b_sel)
                preds.append(logits.argmax(-1).numpy())  # [N_b]
    finally:
        model.train(was_training)
    targets = rows[sel]  # [N], row-major = the order of the batches above
    pred = np.concatenate(preds) if preds else np.zeros(0, dtype=np.int64)
    return (pred == targets).astype(np.float64), targets
