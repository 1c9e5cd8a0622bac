"""Transformer building blocks shared by the transformer, gpt, bert and electra families.

Module and parameter names follow GPT-2's (``c_attn``, ``c_proj``, ``c_fc``, ``ln_1``, ``ln_2``)
so that converting to and from Hugging Face checkpoints is a rename plus a transpose.

Shapes: ``B`` batch, ``T`` sequence length, ``D`` model width (``n_embd``), ``H`` heads,
``Dh = D // H`` head width, ``F`` the MLP's hidden width (``4 * D``).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

ACTIVATIONS = ("gelu", "gelu_tanh")
"""Valid MLP activations: exact GELU (erf) or GPT-2's tanh approximation ("gelu_new" in HF)."""


def _check_activation(activation: str) -> str:
    if activation not in ACTIVATIONS:
        raise ValueError(f"activation: expected one of {list(ACTIVATIONS)}, got {activation!r}")
    return activation


class SelfAttention(nn.Module):
    """Multi-head self-attention through ``F.scaled_dot_product_attention``.

    ``causal=True`` lets position t attend to positions <= t only (decoder); ``causal=False``
    attends everywhere (encoder). The optional ``mask`` is boolean, broadcastable to
    ``[B, H, T, T]``, True where attention is allowed (e.g. ``pad_mask[:, None, None, :]`` for
    key padding); with ``causal=True`` it is combined with the causal mask.
    """

    def __init__(
        self, n_embd: int, n_head: int, *, dropout: float = 0.0, bias: bool = True, causal: bool
    ) -> None:
        super().__init__()
        if n_embd % n_head != 0:
            raise ValueError(f"n_embd: expected a multiple of n_head={n_head}, got {n_embd}")
        self.n_head = n_head
        self.causal = causal
        self.dropout = dropout
        self.c_attn = nn.Linear(n_embd, 3 * n_embd, bias=bias)  # q, k, v in one matmul
        self.c_proj = nn.Linear(n_embd, n_embd, bias=bias)
        self.resid_drop = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        B, T, D = x.shape
        H = self.n_head
        q, k, v = self.c_attn(x).split(D, dim=2)  # 3 x [B, T, D]
        # [B, T, D] -> [B, H, T, Dh]: each head attends independently
        q = q.view(B, T, H, D // H).transpose(1, 2)
        k = k.view(B, T, H, D // H).transpose(1, 2)
        v = v.view(B, T, H, D // H).transpose(1, 2)
        p = self.dropout if self.training else 0.0
        if mask is None:
            # softmax(q k^T / sqrt(Dh)) v, the upper triangle masked out when causal
            y = F.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=self.causal)
        else:
            # SDPA refuses is_causal together with attn_mask: fold the triangle into the mask
            if self.causal:
                tri = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()  # [T, T]
                mask = mask & tri
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p)
        y = y.transpose(1, 2).contiguous().view(B, T, D)  # [B, H, T, Dh] -> [B, T, D]
        return self.resid_drop(self.c_proj(y))


class MLP(nn.Module):
    """Position-wise feed-forward: ``c_proj(act(c_fc(x)))``, D -> F -> D."""

    def __init__(
        self,
        n_embd: int,
        hidden: int | None = None,
        *,
        dropout: float = 0.0,
        bias: bool = True,
        activation: str = "gelu",
    ) -> None:
        super().__init__()
        hidden = 4 * n_embd if hidden is None else hidden
        _check_activation(activation)
        self.c_fc = nn.Linear(n_embd, hidden, bias=bias)
        # GPT-2 uses the tanh approximation; matching HF's logits to 1e-5 needs the same one
        self.act = nn.GELU(approximate="tanh" if activation == "gelu_tanh" else "none")
        self.c_proj = nn.Linear(hidden, n_embd, bias=bias)
        self.drop = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.drop(self.c_proj(self.act(self.c_fc(x))))  # [B, T, D] -> [B, T, D]


class Block(nn.Module):
    """Pre-LayerNorm Transformer block: ``x + attn(ln_1(x))``, then ``x + mlp(ln_2(x))``.

    Normalizing before each sublayer (GPT-2) keeps the residual stream an identity path, which
    trains stably without warmup tricks at small scale.
    """

    def __init__(
        self,
        n_embd: int,
        n_head: int,
        *,
        causal: bool,
        dropout: float = 0.0,
        bias: bool = True,
        activation: str = "gelu",
        eps: float = 1e-5,
    ) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(n_embd, eps=eps, bias=bias)
        self.attn = SelfAttention(n_embd, n_head, dropout=dropout, bias=bias, causal=causal)
        self.ln_2 = nn.LayerNorm(n_embd, eps=eps, bias=bias)
        self.mlp = MLP(n_embd, dropout=dropout, bias=bias, activation=activation)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x), mask)  # [B, T, D]
        return x + self.mlp(self.ln_2(x))  # [B, T, D]


class CrossAttention(nn.Module):
    """Multi-head attention of queries ``x`` [B, T, D] over a memory ``mem`` [B, S, D] (the
    encoder's output) through ``F.scaled_dot_product_attention``. The optional boolean ``mask``
    is broadcastable to ``[B, H, T, S]``, True where attention is allowed (e.g.
    ``src_mask[:, None, None, :]`` for the source's padding)."""

    def __init__(self, n_embd: int, n_head: int, *, dropout: float = 0.0, bias: bool = True):
        super().__init__()
        if n_embd % n_head != 0:
            raise ValueError(f"n_embd: expected a multiple of n_head={n_head}, got {n_embd}")
        self.n_head = n_head
        self.dropout = dropout
        self.c_q = nn.Linear(n_embd, n_embd, bias=bias)  # queries from the decoder
        self.c_kv = nn.Linear(n_embd, 2 * n_embd, bias=bias)  # keys, values from the memory
        self.c_proj = nn.Linear(n_embd, n_embd, bias=bias)
        self.resid_drop = nn.Dropout(dropout)

    def memory_kv(self, mem: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Keys and values of the memory, ``2 x [B, H, S, Dh]`` (computed once per source when
        decoding step by step)."""
        B, S, D = mem.shape
        H = self.n_head
        k, v = self.c_kv(mem).split(D, dim=2)  # 2 x [B, S, D]
        k = k.view(B, S, H, D // H).transpose(1, 2)  # [B, H, S, Dh]
        v = v.view(B, S, H, D // H).transpose(1, 2)
        return k, v

    def attend(
        self, x: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Queries ``x`` [B, T, D] over precomputed memory keys/values (:meth:`memory_kv`)."""
        B, T, D = x.shape
        H = self.n_head
        q = self.c_q(x).view(B, T, H, D // H).transpose(1, 2)  # [B, H, T, Dh]
        p = self.dropout if self.training else 0.0
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p)  # [B,H,T,Dh]
        y = y.transpose(1, 2).contiguous().view(B, T, D)
        return self.resid_drop(self.c_proj(y))

    def forward(
        self, x: torch.Tensor, mem: torch.Tensor, mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        return self.attend(x, *self.memory_kv(mem), mask)


class DecoderBlock(nn.Module):
    """Pre-LayerNorm encoder-decoder block (Vaswani et al. 2017 with the norms moved first):
    ``x + self_attn(ln_1(x))`` (causal), then ``x + cross_attn(ln_2(x), mem)``, then
    ``x + mlp(ln_3(x))``."""

    def __init__(
        self,
        n_embd: int,
        n_head: int,
        *,
        dropout: float = 0.0,
        bias: bool = True,
        activation: str = "gelu",
        eps: float = 1e-5,
    ) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(n_embd, eps=eps, bias=bias)
        self.attn = SelfAttention(n_embd, n_head, dropout=dropout, bias=bias, causal=True)
        self.ln_2 = nn.LayerNorm(n_embd, eps=eps, bias=bias)
        self.cross = CrossAttention(n_embd, n_head, dropout=dropout, bias=bias)
        self.ln_3 = nn.LayerNorm(n_embd, eps=eps, bias=bias)
        self.mlp = MLP(n_embd, dropout=dropout, bias=bias, activation=activation)

    def forward(
        self, x: torch.Tensor, mem: torch.Tensor, mem_mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))  # [B, T, D], position t reads targets 0..t
        x = x + self.cross(self.ln_2(x), mem, mem_mask)  # [B, T, D], reads the whole source
        return x + self.mlp(self.ln_3(x))  # [B, T, D]

    def step(
        self,
        x: torch.Tensor,
        past_k: torch.Tensor,
        past_v: torch.Tensor,
        mem_k: torch.Tensor,
        mem_v: torch.Tensor,
        mem_mask: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """One new position ``x`` [B, 1, D] given the self-attention keys/values of the earlier
        positions ``past_k``, ``past_v`` [B, H, t, Dh] and the memory's (:meth:`CrossAttention.
        memory_kv`): ``(y [B, 1, D], k, v [B, H, t+1, Dh])``. The same function as
        :meth:`forward` at the last position (the new position attends to all earlier ones and
        itself: causal by construction), at O(t) instead of O(t^2) per step."""
        B, _, D = x.shape
        H = self.attn.n_head
        q, k, v = self.attn.c_attn(self.ln_1(x)).split(D, dim=2)  # 3 x [B, 1, D]
        q = q.view(B, 1, H, D // H).transpose(1, 2)  # [B, H, 1, Dh]
        k = torch.cat([past_k, k.view(B, 1, H, D // H).transpose(1, 2)], dim=2)  # [B,H,t+1,Dh]
        v = torch.cat([past_v, v.view(B, 1, H, D // H).transpose(1, 2)], dim=2)
        p = self.attn.dropout if self.training else 0.0
        y = F.scaled_dot_product_attention(q, k, v, dropout_p=p)  # [B, H, 1, Dh]
        y = y.transpose(1, 2).contiguous().view(B, 1, D)
        x = x + self.attn.resid_drop(self.attn.c_proj(y))
        x = x + self.cross.attend(self.ln_2(x), mem_k, mem_v, mem_mask)
        return x + self.mlp(self.ln_3(x)), k, v


def init_gpt_weights(module: nn.Module, n_layer: int, std: float = 0.02) -> None:
    """GPT-2 initialization, in place: Linear and Embedding weights N(0, std), biases zero,
    LayerNorms unit, and each residual projection (``c_proj``) N(0, std / sqrt(2 * n_layer)) so
    the residual stream's variance does not grow with depth (two residual additions per block)."""
    for m in module.modules():
        if isinstance(m, nn.Linear | nn.Embedding):
            nn.init.normal_(m.weight, 0.0, std)
        elif isinstance(m, nn.LayerNorm) and m.weight is not None:
            nn.init.ones_(m.weight)
        if getattr(m, "bias", None) is not None:
            nn.init.zeros_(m.bias)
    for name, p in module.named_parameters():
        if name.endswith("c_proj.weight"):
            nn.init.normal_(p, 0.0, std / (2 * n_layer) ** 0.5)
