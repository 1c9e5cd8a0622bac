"""Multiple-choice requests and the two ways to score them (docs/definitions.md, multiple choice).

A request (:class:`Req`) is one choice of one item, tokenized and truncated by lm-eval's rules
(:func:`make_requests`): the model reads ``ctx + cont[:-1]`` and the choice's log-likelihood is
read at the position before each of its tokens. :func:`plain_lls` scores requests with full
forward passes (every distinct ``ctx + cont[:-1]`` once); :func:`cached_lls` runs each shared
context prefix once (:func:`prefix_groups`) and feeds the rest of each context and its choice
after the prefix's cached keys and values, through a cache engine
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


def common_prefix(a: np.ndarray, b: np.ndarray) -> int:
    """The number of leading tokens ``a`` and ``b`` share.

    Example: ``common_prefix([5, 6, 7], [5, 6, 9, 1])`` -> 2."""
    n = min(a.size, b.size)
    diff = np.flatnonzero(a[:n] != b[:n])
    return int(diff[0]) if diff.size else n


def prefix_groups(
    ctxs: Sequence[np.ndarray], widths: Sequence[Sequence[int]], max_row: int
) -> list[tuple[int, list[int]]]:
    """Contexts that share a token prefix, grouped: ``[(prefix length p, [context ids])]``.

    The contexts are sorted by their tokens; a context joins the group before it when it
    shares ``m >= 1`` tokens with the group's prefix, ``2 m >= p`` (the prefix at most halves)
    and the group's row stays within ``max_row`` tokens. A group's row holds, for each request
    of each member, the tokens fed after the prefix: ``len(ctx) - p + len(cont) - 1``
    (``widths[u]`` lists the continuation lengths of context u's requests). A context alone is
    a group with ``p = len(ctx)``: nothing but its continuations is fed after it.

    Example: contexts ``[1 2 3 4]``, ``[1 2 3 9]``, ``[7 8]`` with one 2-token continuation
    each -> ``[(3, [0, 1]), (2, [2])]``.
    """

    def row(members: list[int], p: int) -> int:
        return sum(len(ctxs[u]) - p + c - 1 for u in members for c in widths[u])

    groups: list[tuple[int, list[int]]] = []
    for u in sorted(range(len(ctxs)), key=lambda u: ctxs[u].tolist()):
        if groups:
            p, members = groups[-1]
            m = common_prefix(ctxs[members[0]][:p], ctxs[u])
            if m >= 1 and 2 * m >= p and row([*members, u], m) <= max_row:
                groups[-1] = (m, [*members, u])
                continue
        groups.append((len(ctxs[u]), [u]))
    return groups


def cached_lls(
    engine: Any,
    reqs: list[Req],
    budget: int,
    ll: list[float],
    finished: Callable[[Iterable[int]], None] | None,
    max_pad: float = MAX_PAD,
    max_logits: int = MAX_LOGITS,
    max_row: int | None = None,
) -> None:
    """Each shared context prefix runs once (batched across items, longest first); every
    request is then fed after its prefix's cached keys and values, the requests of one prefix
    packed in one row (:func:`prefix_groups`, rows of at most ``max_row`` tokens, default
    ``budget // 4``). A request whose context is its prefix reads its first choice token from
    the prefix's last position and feeds ``cont[:-1]``; any other feeds the rest of its context
    and ``cont[:-1]``, reading every choice token there. Contexts of one item that differ only
    after a common start (winogrande's options fill a blank; few-shot prompts) thus share it.
    ``max_pad`` as in :func:`budget_batches` (the cache check passes 1.0: every row of its
    probe in one padded pass). ``engine`` has ``head``, ``prefill(x, lens)`` and
    ``extend(state, rows, lens, y, pos, new_mask)`` (:mod:`tinyllm.eval.lm.kvcache`). Writes
    ``ll[k]`` (nats) for every request: ``sum_j ln p(cont_j | ctx, cont_<j)``."""
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
    cap = max(1, budget // 4) if max_row is None else max_row
    groups = prefix_groups(ctxs, [[reqs[k].cont.size for k in ks] for ks in of_ctx], cap)
    pre = [ctxs[members[0]][:p] for p, members in groups]  # the prefix each group runs once
    of_pre = [[k for u in members for k in of_ctx[u]] for _, members in groups]
    order = sorted(range(len(groups)), key=lambda g: -pre[g].size)
    v = out_features(engine.head)
    dev = model_device(engine.head)  # inputs go where the model is; LLs come back to the CPU
    for sl in budget_batches([pre[g].size for g in order], budget, max_pad=max_pad):
        batch = order[sl]
        x = pad([pre[g] for g in batch]).to(dev)  # [Bc, Lc]
        lens = torch.tensor([pre[g].size for g in batch], device=dev)  # [Bc]
        h_last, state = engine.prefill(x, lens)  # [Bc, D] at each prefix's last token
        ks = [k for g in batch for k in of_pre[g]]
        row_of = {g: b for b, g in enumerate(batch)}
        for k in ks:
            ll[k] = 0.0
        # the first choice token of every request whose context is its prefix, read at the
        # prefix's last position: the head and log-softmax run once per prefix
        first = [
            (row_of[g], k) for g in batch for k in of_pre[g] if reqs[k].ctx.size == pre[g].size
        ]
        if first:
            rows = torch.tensor([b for b, _ in first], device=dev)
            tgt = torch.tensor([int(reqs[k].cont[0]) for _, k in first], device=dev)  # [R]
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
                    ll[first[i][1]] = val
        # what each request feeds after its prefix: the rest of its context, then cont[:-1]
        # (never the last token); the requests of one prefix share a row (packed one after
        # another, each attending to the prefix and causally to itself only), so the prefix's
        # keys and values are copied once per row, not per request
        tail = {k: reqs[k].ctx[pre[g].size :] for g in batch for k in of_pre[g]}
        feed = {k: np.concatenate([tail[k], reqs[k].cont[:-1]]) for k in ks}
        rows_of = [(g, [k for k in of_pre[g] if feed[k].size]) for g in batch]
        rows_of = [r for r in rows_of if r[1]]
        rows_of.sort(key=lambda r: -sum(feed[k].size for k in r[1]))
        widths = [sum(feed[k].size for k in r[1]) for r in rows_of]
        for sl2 in budget_batches(widths, budget, max_pad=max_pad):
            part = [r[0] for r in rows_of[sl2]]  # the prefix of each row
            row_reqs = [r[1] for r in rows_of[sl2]]
            tq = widths[sl2.start]
            y = torch.zeros(len(part), tq, dtype=torch.int64)  # [Bq, Tq] packed requests
            pos = torch.zeros(len(part), tq, dtype=torch.int64)
            seg = torch.full((len(part), tq), -1, dtype=torch.int64)  # request id, -1: pad
            r_i, c_i, tg, spans = [], [], [], []
            for b, g in enumerate(part):
                at, n_pre = 0, pre[g].size
                for k in row_reqs[b]:
                    q, t, cont = feed[k].size, tail[k].size, reqs[k].cont
                    y[b, at : at + q] = torch.from_numpy(feed[k])
                    pos[b, at : at + q] = n_pre + torch.arange(q)
                    seg[b, at : at + q] = k
                    # choice token j is read at the fed token before it: index t - 1 + j
                    # (with no tail, token 0 came from the prefix's last position)
                    want = cont if t else cont[1:]
                    lo = at + t - 1 if t else at
                    r_i.append(torch.full((want.size,), b))
                    c_i.append(torch.arange(lo, lo + want.size))
                    tg.append(torch.from_numpy(want))
                    spans.append((k, want.size))
                    at += q
                pos[b, at:] = n_pre  # padding: any valid position, never read
            j = torch.arange(tq)
            # a token attends to the earlier tokens of its own segment; padding to itself only
            causal = j[None, None, :] <= j[None, :, None]  # [1, Tq, Tq]
            new_mask = ((seg[:, :, None] == seg[:, None, :]) & causal) | torch.eye(
                tq, dtype=torch.bool
            )
            crow = torch.tensor([row_of[g] for g in part], device=dev)
            y, pos, new_mask = y.to(dev), pos.to(dev), new_mask.to(dev)
            h2 = engine.extend(state, crow, lens[crow], y, pos, new_mask)  # [Bq, Tq, D]
            hs = h2[torch.cat(r_i).to(dev), torch.cat(c_i).to(dev)]  # [M, D]: scored positions
            tgt2 = torch.cat(tg).to(dev)
            nll = nll_blocks(
                lambda lo, hi, hs=hs: engine.head(hs[lo:hi]), hs.shape[0], v, tgt2, max_logits
            )
            at = 0
            for k, n in spans:
                ll[k] -= math.fsum(nll[at : at + n])
                at += n
        if finished is not None:
            finished(ks)
