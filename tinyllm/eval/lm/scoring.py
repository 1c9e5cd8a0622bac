"""Multiple-choice requests and the two ways to score them (SPEC.md section 3).

A request (:class:`Req`) is one choice of one item, tokenized and truncated by lm-eval's rules
(:func:`make_requests`): the model reads ``ctx + cont[:-1]`` and the choice's log-likelihood is
read at the position before each of its tokens. :func:`plain_lls` scores requests with full
forward passes (every distinct ``ctx + cont[:-1]`` once); :func:`cached_lls` runs each distinct
context once and feeds the choices after its cached keys and values, through a cache engine
(:mod:`tinyllm.eval.lm.kvcache`). Both batch rows of several items, longest first, within a
token budget (:func:`budget_batches`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from tinyllm.device import model_device
from tinyllm.eval.lm.heads import views
from tinyllm.logits import MAX_LOGITS, Head, nll_blocks, out_features

MAX_PAD = 0.25
"""A row joins a batch only if it is at least ``1 - MAX_PAD`` (75%) of the batch's longest row
(:func:`budget_batches`)."""


@dataclass(frozen=True)
class Req:
    """One choice of one item, tokenized and truncated: the model reads ``ctx + cont[:-1]``."""

    item: int
    ctx: np.ndarray  # the context tokens fed (after left truncation), >= 1
    cont: np.ndarray  # the scored tokens (delimiter + choice), >= 1


def encode(tok: Any, text: str) -> np.ndarray:
    """``tok.encode(text)`` as a 1-d int64 array; a Hugging Face tokenizer (one with
    ``all_special_ids``) is asked for no special tokens (no BOS/EOS around the pieces)."""
    if hasattr(tok, "all_special_ids"):
        # a Hugging Face tokenizer: no BOS/EOS around the pieces we concatenate
        ids = tok.encode(text, add_special_tokens=False)
    else:
        ids = tok.encode(text)
    return np.asarray(ids, dtype=np.int64).reshape(-1)


def check_choices(context: Any, choices: Any) -> list[str]:
    """The choices as a list, after checking ``context`` is a str and ``choices`` a non-empty
    list of non-empty strings (TypeError / ValueError otherwise)."""
    if not isinstance(context, str):
        raise TypeError(f"context: expected a str, got {type(context).__name__}")
    if isinstance(choices, str) or not isinstance(choices, Sequence) or len(choices) < 1:
        raise ValueError(f"choices: expected a non-empty list of strings, got {choices!r}")
    for i, c in enumerate(choices):
        if not isinstance(c, str) or not c:
            raise ValueError(f"choices[{i}]: expected a non-empty string, got {c!r}")
    return list(choices)


def check_delimiter(d: Any, where: str = "target_delimiter") -> str | None:
    """``d`` unchanged when it is a str or None, else a ValueError naming ``where``."""
    if d is not None and not isinstance(d, str):
        raise ValueError(f"{where}: expected a string (or absent), got {d!r}")
    return d


def encode_pair(tok: Any, context: str, continuation: str) -> tuple[np.ndarray, np.ndarray]:
    """lm-eval's ``_encode_pair`` for causal models: trailing whitespace of the context moves
    to the continuation, the whole is encoded, and the context's own tokens are split off.

    Example (bytes): ``encode_pair(tok, "abc  ", "x")`` -> ``(enc("abc"), enc("  x"))``.
    """
    n = len(context) - len(context.rstrip())
    if n:
        continuation = context[-n:] + continuation
        context = context[:-n]
    whole = encode(tok, context + continuation)
    ctx = encode(tok, context)
    return ctx, whole[ctx.size :]


def make_requests(
    tok: Any, items: Sequence[dict], delimiter: str | None, max_len: int | None
) -> tuple[list[Req], int, int]:
    """Tokenize every (item, choice) and truncate; returns (requests, tokens cut, requests cut).

    With ``max_len`` L the model reads ``(ctx + cont)[-(L+1):][:-1]`` (lm-eval's rule): the
    context is cut from the left only when ``len(ctx) + len(cont) > L + 1``. ``delimiter`` (or,
    when None, each item's ``target_delimiter``) is scored with the choice
    (:func:`encode_pair`); without one, context and choice are encoded separately. Errors name
    the item (its ``_where``, the task file line, when it has one).
    """
    reqs: list[Req] = []
    cut_tokens = cut_reqs = 0
    for i, it in enumerate(items):
        context, choices = it["context"], check_choices(it["context"], it["choices"])
        d = delimiter if delimiter is not None else it.get("target_delimiter")
        where = it.get("_where") or f"item {i}"
        ctx0 = None if d is not None else encode(tok, context)
        for j, text in enumerate(choices):
            if d is None:
                ctx, cont = ctx0, encode(tok, text)
            else:
                ctx, cont = encode_pair(tok, context, d + text)
            if ctx.size < 1:
                raise ValueError(
                    f"{where}: context {context!r}: expected at least one token (the first "
                    "choice token is read at the position before it), got none"
                )
            if cont.size < 1:
                raise ValueError(
                    f"{where}: choices[{j}] {text!r}: expected at least one token, got none"
                )
            if max_len is not None:
                if cont.size > max_len:
                    raise ValueError(
                        f"{where}: choices[{j}] is {cont.size} tokens; expected at most the "
                        f"model's context of {max_len} tokens (left truncation keeps the whole "
                        "choice and at least one context token, or nothing can be scored)"
                    )
                extra = ctx.size + cont.size - (max_len + 1)
                if extra > 0:  # (ctx + cont)[-(L+1):][:-1]: cut the context's first tokens
                    ctx = ctx[extra:]
                    cut_tokens += extra
                    cut_reqs += 1
            reqs.append(Req(i, ctx, cont))
    return reqs, cut_tokens, cut_reqs


def pad(seqs: Sequence[np.ndarray]) -> torch.Tensor:
    """Right-pad 1-d id arrays with 0 into ``[B, max len]`` int64 (causal: padding after a
    sequence cannot change what is read inside it)."""
    xs = np.zeros((len(seqs), max(s.size for s in seqs)), dtype=np.int64)
    for b, s in enumerate(seqs):
        xs[b, : s.size] = s
    return torch.from_numpy(xs)


def budget_batches(
    lengths: Sequence[int], budget: int, extra: int = 0, max_pad: float = MAX_PAD
) -> Iterator[slice]:
    """Consecutive slices of a length-sorted (longest first) list: rows x (longest + extra)
    stays within ``budget`` tokens, and no row is padded by more than ``max_pad`` of the
    longest (padding is computed and thrown away); at least one row each.

    Example: ``list(budget_batches([8, 6, 5], 4096))`` -> ``[slice(0, 2), slice(2, 3)]``.
    """
    lo = 0
    while lo < len(lengths):
        hi = lo + 1
        width = lengths[lo] + extra
        while (
            hi < len(lengths)
            and (hi - lo + 1) * width <= budget
            and lengths[hi] >= (1.0 - max_pad) * lengths[lo]
        ):
            hi += 1
        yield slice(lo, hi)
        lo = hi


def plain_lls(
    model: Any,
    reqs: list[Req],
    which: Iterable[int],
    budget: int,
    ll: list[float],
    finished: Callable[[Iterable[int]], None] | None,
    max_logits: int = MAX_LOGITS,
) -> None:
    """No cache: each distinct input ``ctx + cont[:-1]`` runs once (choices of one token share
    their context's pass), longest first, batched by the token budget. Writes ``ll[k]`` (nats)
    for every k in ``which`` and calls ``finished(ks)`` after each pass."""
    inputs: dict[bytes, int] = {}
    seqs: list[np.ndarray] = []
    users: list[list[int]] = []
    for k in which:
        r = reqs[k]
        s = np.concatenate([r.ctx, r.cont[:-1]])
        key = s.tobytes()
        if key not in inputs:
            inputs[key] = len(seqs)
            seqs.append(s)
            users.append([])
        users[inputs[key]].append(k)
    order = sorted(range(len(seqs)), key=lambda u: -seqs[u].size)
    head: Head | None = None
    dev = model_device(model)  # inputs go where the model is; LLs come back to the CPU
    for sl in budget_batches([seqs[u].size for u in order], budget):
        batch = order[sl]
        x = pad([seqs[u] for u in batch]).to(dev)
        rows, cols, tgts, ks = [], [], [], []
        for b, u in enumerate(batch):
            for k in users[u]:
                r = reqs[k]
                # choice token t (at input index len(ctx) + t) is read at index len(ctx) + t - 1
                cols.append(np.arange(r.ctx.size - 1, r.ctx.size - 1 + r.cont.size))
                rows.append(np.full(r.cont.size, b))
                tgts.append(r.cont)
                ks.append(k)
        r_t = torch.from_numpy(np.concatenate(rows).astype(np.int64)).to(dev)
        c_t = torch.from_numpy(np.concatenate(cols).astype(np.int64)).to(dev)
        t_t = torch.from_numpy(np.concatenate(tgts).astype(np.int64)).to(dev)
        if head is None:
            head = Head(model, x, views(model))
        nll = head.nlls(x, r_t, c_t, t_t, max_logits=max_logits)
        bounds = np.cumsum([0] + [t.size for t in tgts])
        for i, k in enumerate(ks):
            ll[k] = -math.fsum(nll[bounds[i] : bounds[i + 1]])
        if finished is not None:
            finished(ks)


def cached_lls(
    engine: Any,
    reqs: list[Req],
    budget: int,
    ll: list[float],
    finished: Callable[[Iterable[int]], None] | None,
    max_pad: float = MAX_PAD,
    max_logits: int = MAX_LOGITS,
) -> None:
    """Each distinct context runs once (batched across items, longest first); the first choice
    token is read from the context's last position, the others from ``cont[:-1]`` fed after the
    context's cached keys and values, the choices of one context packed in one row. ``max_pad``
    as in :func:`budget_batches` (the cache check passes 1.0: every row of its probe in one
    padded pass). ``engine`` has ``head``, ``prefill(x, lens)`` and
    ``extend(state, rows, lens, y, pos, new_mask)`` (:mod:`tinyllm.eval.lm.kvcache`). Writes
    ``ll[k]`` (nats) for every request."""
    ctx_id: dict[bytes, int] = {}
    ctxs: list[np.ndarray] = []
    of_ctx: list[list[int]] = []
    for k, r in enumerate(reqs):
        key = r.ctx.tobytes()
        if key not in ctx_id:
            ctx_id[key] = len(ctxs)
            ctxs.append(r.ctx)
            of_ctx.append([])
        of_ctx[ctx_id[key]].append(k)
    order = sorted(range(len(ctxs)), key=lambda u: -ctxs[u].size)
    v = out_features(engine.head)
    dev = model_device(engine.head)  # inputs go where the model is; LLs come back to the CPU
    for sl in budget_batches([ctxs[u].size for u in order], budget, max_pad=max_pad):
        batch = order[sl]
        x = pad([ctxs[u] for u in batch]).to(dev)  # [Bc, Lc]
        lens = torch.tensor([ctxs[u].size for u in batch], device=dev)  # [Bc]
        h_last, state = engine.prefill(x, lens)  # [Bc, D] at each context's last token
        ks = [k for u in batch for k in of_ctx[u]]
        row_of = {u: b for b, u in enumerate(batch)}
        # the first choice token of every request, read at its context's last position: the
        # head and log-softmax run once per context, shared by all of its choices
        rows = torch.tensor([row_of[ctx_id[reqs[k].ctx.tobytes()]] for k in ks], device=dev)
        tgt = torch.tensor([int(reqs[k].cont[0]) for k in ks], device=dev)  # [R]
        step = max(1, max_logits // max(v, 1))
        for lo in range(0, len(batch), step):
            z = engine.head(h_last[lo : lo + step])  # [rows, V]
            if int(tgt.max()) >= z.shape[1]:
                raise ValueError(
                    f"expected token ids < the model's vocabulary size {z.shape[1]}, "
                    f"got id {int(tgt.max())}"
                )
            lp = torch.log_softmax(z.float(), dim=-1)
            sel = ((rows >= lo) & (rows < lo + step)).nonzero()[:, 0]
            got = lp[rows[sel] - lo, tgt[sel]].double()
            for i, val in zip(sel.tolist(), got.tolist(), strict=True):
                ll[ks[i]] = val
        # the rest of each choice, fed after its cached context: the choices of one context
        # share a row (packed one after another, each attending to the context and causally to
        # itself only), so the context's keys and values are copied once per context, not per
        # choice. (One row per choice would attend over fewer masked pairs when the choices are
        # long, but measured slower on the tiny "sentence" task: bench/bench_mc.py.)
        groups = [(u, [k for k in of_ctx[u] if reqs[k].cont.size > 1]) for u in batch]
        groups = [g for g in groups if g[1]]
        groups.sort(key=lambda g: -sum(reqs[k].cont.size - 1 for k in g[1]))
        widths = [sum(reqs[k].cont.size - 1 for k in g[1]) for g in groups]
        for sl2 in budget_batches(widths, budget, max_pad=max_pad):
            part = [g[0] for g in groups[sl2]]  # the context of each row
            row_reqs = [g[1] for g in groups[sl2]]
            tq = widths[sl2.start]
            y = torch.zeros(len(part), tq, dtype=torch.int64)  # [Bq, Tq] packed choices
            pos = torch.zeros(len(part), tq, dtype=torch.int64)
            seg = torch.full((len(part), tq), -1, dtype=torch.int64)  # request id, -1: pad
            r_i, c_i, tg, spans = [], [], [], []
            for b, u in enumerate(part):
                at, n_ctx = 0, ctxs[u].size
                for k in row_reqs[b]:
                    q = reqs[k].cont.size - 1  # never the last token
                    y[b, at : at + q] = torch.from_numpy(reqs[k].cont[:-1])
                    pos[b, at : at + q] = n_ctx + torch.arange(q)
                    seg[b, at : at + q] = k
                    r_i.append(torch.full((q,), b))
                    c_i.append(torch.arange(at, at + q))
                    tg.append(torch.from_numpy(reqs[k].cont[1:]))
                    spans.append((k, q))
                    at += q
                pos[b, at:] = n_ctx  # padding: any valid position, never read
            j = torch.arange(tq)
            # a token attends to the earlier tokens of its own segment; padding to itself only
            causal = j[None, None, :] <= j[None, :, None]  # [1, Tq, Tq]
            new_mask = ((seg[:, :, None] == seg[:, None, :]) & causal) | torch.eye(
                tq, dtype=torch.bool
            )
            crow = torch.tensor([row_of[u] for u in part], device=dev)
            y, pos, new_mask = y.to(dev), pos.to(dev), new_mask.to(dev)
            h2 = engine.extend(state, crow, lens[crow], y, pos, new_mask)  # [Bq, Tq, D]
            hs = h2[torch.cat(r_i).to(dev), torch.cat(c_i).to(dev)]  # [M, D]: scored positions
            tgt2 = torch.cat(tg).to(dev)
            nll = nll_blocks(
                lambda lo, hi, hs=hs: engine.head(hs[lo:hi]), hs.shape[0], v, tgt2, max_logits
            )
            at = 0
            for k, q in spans:
                ll[k] -= math.fsum(nll[at : at + q])
                at += q
        if finished is not None:
            finished(ks)
