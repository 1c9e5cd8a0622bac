"""GPT: a decoder-only byte-level Transformer (Radford et al. 2019, GPT-2's layout).

Learned token and position embeddings, ``n_layer`` pre-LayerNorm blocks of causal multi-head
self-attention (``scaled_dot_product_attention``) and a GELU MLP, a final LayerNorm and a linear
head over the vocabulary, by default tied to the token embedding as in GPT-2.

Parameter names follow Hugging Face's ``GPT2LMHeadModel`` without its ``transformer.`` prefix
(``wte``, ``wpe``, ``h.{i}.attn.c_attn``, ``ln_f``, ``lm_head``), so converting to and from
GPT-2 (:func:`tinyllm.models.hf.load_hf_gpt2`, :func:`tinyllm.models.hf.export_hf`) is a rename
plus a transpose of the Conv1D weights.

The instrument reads the model through ``hidden`` + ``lm_head`` (the head only at scored
positions) and ``hidden_cached`` (multiple choice from a KV cache); :func:`token_nlls` scores
strided windows with :mod:`tinyllm.windows`, which sits below the families: a family never
imports :mod:`tinyllm.eval`.

Shapes: ``B`` batch, ``T`` tokens (``<= block_size``), ``D`` = ``n_embd``, ``V`` = ``vocab_size``.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from tinyllm import windows
from tinyllm.checkpoint import (
    CONFIG_NAME,
    WEIGHTS_NAME,
    CheckpointError,
    expected_from,
    load_tensors,
    tensor_header,
)
from tinyllm.models.gpt_cache import KVCache, check_capacity
from tinyllm.models.layers import ACTIVATIONS, Block, init_gpt_weights
from tinyllm.models.training import (
    check_adamw_settings,
    read_configs,
    run_steps,
    save_model,
    scoring,
    settings_of,
)

ARCH = "gpt"
KIND = "lm"
WINDOWED = True  # token_nlls scores strided windows (tinyllm.windows.resolve_windows)

LN_EPS = 1e-5  # GPT-2's LayerNorm epsilon; HF checkpoints with another value are refused (hf.py)


@dataclass(frozen=True)
class Config:
    """A GPT's shape. ``activation`` is "gelu" (exact, erf) or "gelu_tanh" (GPT-2's "gelu_new");
    ``tie_weights`` shares the token embedding with the output head (GPT-2 does)."""

    vocab_size: int = 256
    block_size: int = 128  # the longest context, = number of learned positions
    n_layer: int = 4
    n_head: int = 4
    n_embd: int = 128
    dropout: float = 0.0
    bias: bool = True  # biases in every Linear and LayerNorm
    tie_weights: bool = True
    activation: str = "gelu_tanh"

    def __post_init__(self) -> None:
        for name in ("vocab_size", "block_size", "n_layer", "n_head", "n_embd"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ValueError(f"Config.{name}: expected a positive int, got {v!r}")
        if self.n_embd % self.n_head:
            raise ValueError(
                f"Config.n_embd: expected a multiple of n_head={self.n_head}, got {self.n_embd}"
            )
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"Config.dropout: expected a float in [0, 1), got {self.dropout!r}")
        if self.activation not in ACTIVATIONS:
            raise ValueError(
                f"Config.activation: expected one of {list(ACTIVATIONS)}, got {self.activation!r}"
            )


@dataclass(frozen=True)
class TrainConfig:
    """Training: AdamW (betas 0.9, 0.95; weight decay on the Linear matrices only) on
    ``batch_size`` windows a step, warmup (None: ``steps // 20``) then cosine decay to
    ``lr / 10``, gradient-norm clipping at ``grad_clip`` (0 = off)."""

    batch_size: int = 32
    lr: float = 3e-3
    weight_decay: float = 0.1
    warmup: int | None = None
    grad_clip: float = 1.0

    def __post_init__(self) -> None:
        check_adamw_settings(self, "gpt.TrainConfig")


# hidden(keep=) runs the last block at the kept rows only when that skips at least this many
# rows (batch x positions): below, the mask and the slicing cost more than the rows they save
# (one 32-token window of the zoo GPT, 16 kept: 2% slower, bench/bench_ppl.py --budget batch 1)
_MIN_ROWS_SAVED = 64


def _mlp_inplace(mlp: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """``mlp(x)`` in inference with its GELU in place (the same kernel, one fresh tensor less)."""
    h = mlp.c_fc(x)  # [B, T, 4D]
    h = torch._C._nn.gelu_(h, approximate=mlp.act.approximate)  # = mlp.act(h)
    return mlp.c_proj(h)  # [B, T, D]


def _check_keep(keep: slice, n_tok: int) -> tuple[int, int]:
    if not isinstance(keep, slice) or keep.step not in (None, 1):
        raise ValueError(f"gpt: expected keep to be a slice with step 1, got {keep!r}")
    lo, hi, _ = keep.indices(n_tok)
    if hi <= lo:
        raise ValueError(
            f"gpt: expected keep to select at least one of {n_tok} positions, got {keep!r}"
        )
    return lo, hi


class Model(nn.Module):
    """Decoder-only Transformer: ``logits = lm_head(hidden(idx))``; ``train_cfg``: the settings
    it was trained with (the defaults for a fresh model)."""

    def __init__(self, cfg: Config) -> None:
        super().__init__()
        self.cfg = cfg
        self.train_cfg = TrainConfig()
        self.wte = nn.Embedding(cfg.vocab_size, cfg.n_embd)  # token embedding [V, D]
        self.wpe = nn.Embedding(cfg.block_size, cfg.n_embd)  # learned positions [block_size, D]
        self.drop = nn.Dropout(cfg.dropout)
        self.h = nn.ModuleList(
            Block(
                cfg.n_embd,
                cfg.n_head,
                causal=True,
                dropout=cfg.dropout,
                bias=cfg.bias,
                activation=cfg.activation,
                eps=LN_EPS,
            )
            for _ in range(cfg.n_layer)
        )
        self.ln_f = nn.LayerNorm(cfg.n_embd, eps=LN_EPS, bias=cfg.bias)
        self.lm_head = nn.Linear(cfg.n_embd, cfg.vocab_size, bias=False)  # weight [V, D]
        init_gpt_weights(self, cfg.n_layer)
        if cfg.tie_weights:
            # one Parameter, two names: the head scores a byte by its embedding's dot product
            self.lm_head.weight = self.wte.weight

    def hidden(self, idx: torch.Tensor, keep: slice | None = None) -> torch.Tensor:
        """Final-LayerNorm output ``[B, T, D]`` for token ids ``idx`` ``[B, T]``.

        ``keep = slice(lo, hi)`` returns positions ``lo .. hi-1`` only, ``[B, hi - lo, D]``, equal
        to ``hidden(idx)[:, lo:hi]``: every position still runs through the blocks before the last
        (their keys and values are read), but the last block computes its queries' attention
        output and its MLP at the kept positions only. Strided perplexity keeps the positions it
        scores (half of each window at stride ctx/2), so that block does half the work. The
        result agrees with the full pass to float32 rounding (the matrices have fewer rows).
        """
        if idx.dim() != 2:
            raise ValueError(f"gpt: expected idx of shape [B, T], got {list(idx.shape)}")
        n_tok = idx.shape[1]  # T
        if n_tok > self.cfg.block_size:
            raise ValueError(
                f"gpt: expected at most block_size={self.cfg.block_size} tokens, got {n_tok}"
            )
        lo, hi = (0, n_tok) if keep is None else _check_keep(keep, n_tok)
        pos = torch.arange(n_tok, device=idx.device)  # [T]
        x = self.drop(self.wte(idx) + self.wpe(pos))  # [B, T, D] + [T, D] -> [B, T, D]
        if self.training or torch.is_grad_enabled():  # training: the modules, with autograd
            for block in self.h:
                x = block(x)  # [B, T, D], causal: position t reads tokens 0..t only
            return self.ln_f(x[:, lo:hi])  # [B, hi - lo, D]
        for block in self.h[:-1]:
            x = self._block(block, x)  # [B, T, D]
        if idx.shape[0] * (n_tok - (hi - lo)) < _MIN_ROWS_SAVED:  # too few rows to gain
            return self.ln_f(self._block(self.h[-1], x)[:, lo:hi])  # [B, hi - lo, D]
        return self.ln_f(self._block(self.h[-1], x, lo, hi))  # [B, hi - lo, D]

    def _block(
        self, block: Block, x: torch.Tensor, lo: int = 0, hi: int | None = None
    ) -> torch.Tensor:
        """``block(x)[:, lo:hi]`` in inference, with the same modules and kernels as
        ``Block.forward`` (so the same numbers at full span): keys and values from positions
        ``0 .. hi-1`` of ``x`` ``[B, T, D]``, queries, attention output and MLP at ``lo .. hi-1``
        only. Why not just call the module: the GELU and the residual additions run in place,
        which saves a fresh ``[B, T, 4D]`` and two ``[B, T, D]`` tensors per block (at 2048
        tokens a fresh 2 MB tensor costs page faults). No dropout: inference only; ``x`` may be
        overwritten."""
        B, T, D = x.shape
        hi = T if hi is None else hi
        H = self.cfg.n_head
        attn, mlp = block.attn, block.mlp
        q, k, v = attn.c_attn(block.ln_1(x[:, :hi])).split(D, dim=2)  # 3 x [B, hi, D]
        k, v = (t.view(B, hi, H, D // H).transpose(1, 2) for t in (k, v))  # [B, H, hi, Dh]
        if lo == 0:
            q = q.view(B, hi, H, D // H).transpose(1, 2)  # [B, H, hi, Dh]
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            q = q[:, lo:].reshape(B, hi - lo, H, D // H).transpose(1, 2)  # [B, H, Tq, Dh]
            # positions >= hi are read by no kept query. The query at position lo + i reads
            # keys 0 .. lo + i: the triangle aligned to the bottom right corner (is_causal
            # would align it to the top left, i.e. to position 0)
            mask = torch.ones(hi - lo, hi, dtype=torch.bool, device=x.device).tril(lo)
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)  # [B, H, Tq, Dh]
        y = y.transpose(1, 2).reshape(B, hi - lo, D)  # [B, Tq, D]
        x = x[:, lo:hi] + attn.c_proj(y) if (lo, hi) != (0, T) else x.add_(attn.c_proj(y))
        return x.add_(_mlp_inplace(mlp, block.ln_2(x)))  # [B, Tq, D]

    def hidden_cached(
        self,
        idx: torch.Tensor,
        past: KVCache | None = None,
        *,
        positions: torch.Tensor | None = None,
        past_valid: torch.Tensor | None = None,
        new_mask: torch.Tensor | None = None,
        last: torch.Tensor | None = None,
        capacity: int | None = None,
    ) -> tuple[torch.Tensor, KVCache]:
        """Incremental decoding: hidden states of ``idx`` read after the tokens cached in ``past``.

        Returns ``(h [B, T, D], cache)``: ``h`` is what :meth:`hidden` gives at these positions
        for the whole sequence (cached tokens + ``idx``), and ``cache`` holds the keys and values
        of the cached tokens followed by those of ``idx`` (feed it back to read further tokens).
        Token t of ``idx`` attends to the valid cached keys and to tokens 0..t of ``idx``.

        * ``positions`` ``[B, T]`` int: the learned position of each token (default
          ``S + arange(T)`` with ``S = past.length``), so that rows of one batch may continue
          contexts of different lengths;
        * ``past_valid`` ``[B, S]`` bool: which cached keys each row may attend to (default all),
          e.g. ``arange(S) < ctx_len[:, None]`` for right-padded contexts;
        * ``new_mask`` ``[B, T, T]`` bool: which tokens of ``idx`` each token of ``idx`` attends to
          (default the causal triangle). Several continuations of one context can then share a
          row: each attends to the context and, causally, to its own tokens only (a tree).

        * ``last`` ``[B]`` int: return only the hidden state of token ``last[b]`` of each row,
          ``h`` ``[B, 1, D]`` (e.g. a right-padded context's last token, which predicts what
          follows). The cache still holds every position; in inference the last block computes
          its attention output and MLP at these B rows only (its keys and values come from
          every position), as :meth:`hidden` does with ``keep``.
        * ``capacity`` C (only without ``past``): return a fixed-capacity cache of C positions
          (:class:`KVCache` ``filled``), so that each later call writes its keys and values in
          place, ``[B, H, C, Dh]`` allocated once, and attention reads the first ``S + T``
          positions: greedy decoding pays no copy of the whole cache per token. A call that
          would overflow it raises ValueError.

        Same weights and the same arithmetic as :meth:`hidden`; only the matrix shapes differ,
        so results agree to float32 rounding (about 1e-6).
        """
        if idx.dim() != 2:
            raise ValueError(f"gpt: expected idx of shape [B, T], got {list(idx.shape)}")
        B, T = idx.shape
        S = 0 if past is None else past.length
        if past is not None and past.batch != B:
            raise ValueError(f"gpt: expected a cache of batch {B}, got {past.batch}")
        check_capacity(capacity, past, T)
        if positions is None:
            positions = (S + torch.arange(T, device=idx.device)).expand(B, T)  # [B, T]
        if positions.shape != (B, T):
            raise ValueError(
                f"gpt: expected positions of shape [{B}, {T}], got {list(positions.shape)}"
            )
        lo, top = torch.stack(torch.aminmax(positions)).tolist() if positions.numel() else (0, 0)
        if top >= self.cfg.block_size or lo < 0:  # one host sync for both bounds
            raise ValueError(
                f"gpt: expected positions in [0, block_size={self.cfg.block_size}), got [{lo}, {top}]"
            )
        mask = None  # [B, 1, T, S + T] bool, True where attention is allowed
        if past is not None or new_mask is not None:
            tri = torch.ones(T, T, dtype=torch.bool, device=idx.device).tril()  # [T, T]
            new = tri.expand(B, T, T) if new_mask is None else new_mask.to(torch.bool)
            if new.shape != (B, T, T):
                raise ValueError(
                    f"gpt: expected new_mask of shape [{B}, {T}, {T}], got {list(new.shape)}"
                )
            old = (
                torch.ones(B, S, dtype=torch.bool, device=idx.device)
                if past_valid is None
                else past_valid.to(torch.bool)
            )  # [B, S]
            if old.shape != (B, S):
                raise ValueError(
                    f"gpt: expected past_valid of shape [{B}, {S}], got {list(old.shape)}"
                )
            mask = torch.cat([old[:, None, :].expand(B, T, S), new], dim=2)
            # [B, 1, T, S + T], broadcast over heads; as the additive float mask SDPA would
            # make of it in every layer (0 where allowed, -inf elsewhere), made once here
            mask = torch.zeros(mask.shape, dtype=self.wte.weight.dtype, device=idx.device)[
                :, None
            ].masked_fill_(~mask[:, None], float("-inf"))
        if last is not None:
            last = torch.as_tensor(last, dtype=torch.int64, device=idx.device)
            if last.shape != (B,) or (B and not (0 <= int(last.min()) <= int(last.max()) < T)):
                raise ValueError(
                    f"gpt: expected last of shape [{B}] with values in [0, {T}), got "
                    f"{list(last.shape)} {last.tolist() if last.numel() <= 8 else ''}".rstrip()
                )
        infer = not (self.training or torch.is_grad_enabled())  # in-place MLP and residuals
        x = self.drop(self.wte(idx) + self.wpe(positions))  # [B, T, D]
        D, H = self.cfg.n_embd, self.cfg.n_head
        ks: list[torch.Tensor] = []
        vs: list[torch.Tensor] = []
        for i, block in enumerate(self.h):
            attn = block.attn
            q, k, v = attn.c_attn(block.ln_1(x)).split(D, dim=2)  # 3 x [B, T, D]
            q, k, v = (t.view(B, T, H, D // H).transpose(1, 2) for t in (q, k, v))  # [B,H,T,Dh]
            if past is not None:
                k, v = past.append(i, k, v)  # [B, H, S + T, Dh]
                ks.append(k)
                vs.append(v)
            elif capacity is not None:  # a fresh fixed-capacity cache: T tokens, C - T free
                ks.append(torch.cat([k, k.new_zeros(B, H, capacity - T, D // H)], dim=2))
                vs.append(torch.cat([v, v.new_zeros(B, H, capacity - T, D // H)], dim=2))
            else:
                ks.append(k)
                vs.append(v)
            p = attn.dropout if self.training else 0.0
            if last is not None and infer and i == len(self.h) - 1:  # B query rows only
                rows = torch.arange(B, device=idx.device)
                q = q[rows, :, last][:, :, None]  # [B, H, 1, Dh]
                if mask is None:  # causal: row b's query reads tokens 0 .. last[b]
                    keep = torch.arange(T, device=idx.device)[None, :] <= last[:, None]
                    m1 = keep[:, None, None]  # [B, 1, 1, T] bool
                else:
                    m1 = mask[rows, :, last][:, :, None]  # [B, 1, 1, S + T] additive
                y = F.scaled_dot_product_attention(q, k, v, attn_mask=m1)  # [B, H, 1, Dh]
                y = y.transpose(1, 2).reshape(B, 1, D)  # [B, 1, D]
                x = x[rows, last][:, None].add_(attn.c_proj(y))  # [B, 1, D]
                x = x.add_(_mlp_inplace(block.mlp, block.ln_2(x)))  # [B, 1, D]
                continue
            if mask is None:  # no cache: the plain causal triangle, as in hidden()
                y = F.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=True)
            else:
                y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p)
            y = y.transpose(1, 2).contiguous().view(B, T, D)  # [B, H, T, Dh] -> [B, T, D]
            if infer:  # as Block.forward, the GELU and additions in place (see _block)
                x = x.add_(attn.c_proj(y))
                x = x.add_(_mlp_inplace(block.mlp, block.ln_2(x)))  # [B, T, D]
            else:
                x = x + attn.resid_drop(attn.c_proj(y))
                x = x + block.mlp(block.ln_2(x))  # [B, T, D]
        if last is not None and not infer:  # the modules ran every row: pick them here
            x = x[torch.arange(B, device=idx.device), last][:, None]  # [B, 1, D]
        if past is not None and past.filled is not None:  # the same tensors, S + T filled
            return self.ln_f(x), KVCache(past.k, past.v, S + T)
        return self.ln_f(x), KVCache(ks, vs, None if capacity is None else T)

    def forward(
        self, idx: torch.Tensor, targets: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """``(logits [B, T, V], loss)``; ``loss`` = mean cross entropy (nats) over all ``B*T``
        targets ``[B, T]`` (logits at t predict ``targets[:, t]``), or None without targets."""
        logits = self.lm_head(self.hidden(idx))  # [B, T, D] -> [B, T, V]
        if targets is None:
            return logits, None
        loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1))
        return logits, loss

    def num_params(self) -> int:
        """Distinct parameters (a tied head counts once)."""
        return sum(p.numel() for p in self.parameters())


# ---------------------------------------------------------------------------------------- train


def _check_data(data, cfg: Config) -> np.ndarray:
    a = np.asarray(data)
    if a.ndim != 1:
        raise ValueError(f"gpt.train: expected a 1-d array of token ids, got shape {a.shape}")
    if not np.issubdtype(a.dtype, np.integer):
        raise ValueError(f"gpt.train: expected integer token ids, got dtype {a.dtype}")
    if a.size < cfg.block_size + 2:
        raise ValueError(
            f"gpt.train: expected at least block_size + 2 = {cfg.block_size + 2} tokens, "
            f"got {a.size}"
        )
    lo, hi = int(a.min()), int(a.max())
    if lo < 0 or hi >= cfg.vocab_size:
        raise ValueError(
            f"gpt.train: expected ids in [0, {cfg.vocab_size}), got values in [{lo}, {hi}]"
        )
    return a


def train(
    cfg: Config,
    data,
    *,
    seed: int,
    steps: int,
    progress: Callable[[int, int, float], None] | None = None,
    **settings,
) -> Model:
    """Train a GPT on random windows of ``data`` (1-d byte ids) with AdamW; ``settings`` are
    :class:`TrainConfig`'s fields.

    Each step draws ``batch_size`` windows of ``block_size + 1`` tokens at uniform random offsets
    (``numpy.random.default_rng(seed)``; the weights come from ``torch.manual_seed(seed)``), so a
    run is reproducible on one machine and thread count. The learning rate warms up linearly for
    ``warmup`` steps (default ``steps // 20``) and then decays by a cosine to ``lr / 10``. Weight
    decay applies to matrices only (not to biases, LayerNorms or embeddings). ``progress(step,
    total, loss)`` is called after each step with 1-based ``step``. Returns the model in eval mode.
    """
    tc = settings_of(TrainConfig, settings, "gpt.train")
    if steps < 1:
        raise ValueError(f"gpt.train: expected steps >= 1, got {steps}")
    a = _check_data(data, cfg)
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    model = Model(cfg)
    model.train_cfg = tc
    tokens = torch.from_numpy(a.astype(np.int64))  # the whole corpus as int64 (~8 bytes/byte)
    offsets = torch.arange(cfg.block_size + 1)  # [T+1]

    # decay the matrices of Linear layers only; embeddings (wte, wpe), biases, LayerNorms not
    params = dict(model.named_parameters())  # a tied head appears once, as wte.weight
    decay = [p for n, p in params.items() if p.dim() == 2 and not n.startswith(("wte", "wpe"))]
    no_decay = [p for n, p in params.items() if not any(p is q for q in decay)]
    opt = torch.optim.AdamW(
        [
            {"params": decay, "weight_decay": tc.weight_decay},
            {"params": no_decay, "weight_decay": 0.0},
        ],
        lr=tc.lr,
        betas=(0.9, 0.95),
    )

    def batch_loss(step: int) -> torch.Tensor:
        starts = torch.from_numpy(rng.integers(0, a.size - cfg.block_size - 1, size=tc.batch_size))
        win = tokens[starts[:, None] + offsets]  # [B, T+1]
        _, loss = model(win[:, :-1], win[:, 1:])  # predict token t+1 from tokens <= t
        return loss

    warmup = max(1, steps // 20) if tc.warmup is None else tc.warmup
    run_steps(
        model, opt, steps, batch_loss, lr=tc.lr, warmup=warmup, clip=tc.grad_clip, progress=progress
    )
    return model


# ------------------------------------------------------------------------------ save / load


def stored_tensors(model: Model) -> dict[str, torch.Tensor]:
    """The tensors a checkpoint stores, by name: the state dict without ``lm_head.weight`` when
    it is tied to ``wte.weight``."""
    sd = model.state_dict()
    if model.cfg.tie_weights:
        # safetensors refuses two names for one storage: keep wte only, re-tie on load
        del sd["lm_head.weight"]
    return sd


def save(model: Model, path: str | os.PathLike) -> Path:
    """Write the checkpoint folder ``path`` (config.json with the config and the training
    settings, model.safetensors)."""
    return save_model(model, path, ARCH, tensors=stored_tensors(model))


def _check_config_sizes(path: Path, cfg: Config) -> None:
    """The config's sizes against the weights' header, before a model is allocated: a
    ``block_size`` of 10**15 in config.json is a CheckpointError naming the file and the key,
    not an allocation of petabytes (n_head divides n_embd, so it is bounded by it too)."""
    weights = path / WEIGHTS_NAME
    header = tensor_header(weights)
    where = path / CONFIG_NAME
    for name, keys in (
        ("wte.weight", ("vocab_size", "n_embd")),
        ("wpe.weight", ("block_size", "n_embd")),
    ):
        if name not in header:
            raise CheckpointError(
                f"{weights}: expected a tensor {name!r} (a gpt checkpoint), got tensors "
                f"{sorted(header)[:8]}"
            )
        shape = header[name][0]
        for dim, key in enumerate(keys):
            if len(shape) != 2 or shape[dim] != getattr(cfg, key):
                raise CheckpointError(
                    f"{where}: {key}: expected {shape[dim] if len(shape) == 2 else '?'} "
                    f"({name} in {WEIGHTS_NAME} is {list(shape)}), got {getattr(cfg, key)}"
                )
    layers = {k.split(".")[1] for k in header if k.startswith("h.") and k.count(".") >= 2}
    if len(layers) != cfg.n_layer:
        raise CheckpointError(
            f"{where}: n_layer: expected {len(layers)} (the blocks h.* in {WEIGHTS_NAME}), "
            f"got {cfg.n_layer}"
        )


def load(path: str | os.PathLike) -> Model:
    """Read a checkpoint folder written by :func:`save`; the config's sizes are checked against
    the weights' header first (:func:`_check_config_sizes`), then every tensor's name, shape,
    dtype and finiteness against a freshly built model (CheckpointError naming the file)."""
    cfg, train_cfg = read_configs(path, ARCH, Config, TrainConfig)
    _check_config_sizes(Path(path), cfg)
    model = Model(cfg)
    tensors = load_tensors(path, expected_from(stored_tensors(model)))
    if cfg.tie_weights:
        tensors["lm_head.weight"] = tensors["wte.weight"]
    model.load_state_dict(tensors, strict=True)
    model.train_cfg = train_cfg
    model.eval()
    return model


# ---------------------------------------------------------------------------------- scoring


def token_nlls(
    model: Model,
    ids,
    ctx_len: int | None = None,
    stride: int | None = None,
    *,
    batch_size: int | None = None,
    progress: Callable[[int, int], object] | None = None,
) -> np.ndarray:
    """NLL in nats of tokens 1..n-1 of ``ids``: ``float64[n-1]``, by the strided windows of
    docs/definitions.md, strided perplexity (:func:`tinyllm.windows.token_nlls`), resolved by
    :func:`tinyllm.windows.window_plan`: ``ctx_len`` default ``block_size`` and at most that,
    ``stride`` default ``max(1, ctx_len // 2)`` (each token after the first window sees at least
    ctx_len/2 tokens). ``batch_size`` (windows per forward pass; None:
    :func:`tinyllm.windows.default_batch_size`) and ``progress(done, total)`` are passed through
    to the windows."""
    plan = windows.window_plan(model, ctx_len, stride, name=ARCH)
    kw = {} if batch_size is None else {"batch_size": batch_size}
    with scoring(model):  # no dropout while scoring
        return windows.token_nlls(model, ids, plan.ctx_len, plan.stride, progress=progress, **kw)
