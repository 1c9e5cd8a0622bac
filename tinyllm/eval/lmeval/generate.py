"""Greedy generation from a KV cache, batched, with stop conditions (lm-eval's ``generate_until``).

:func:`greedy_tokens` continues token contexts by ``argmax`` one token at a time:

* a model with ``hidden_cached`` + ``lm_head`` (our GPT) runs on a fixed-capacity cache (keys
  and values written in place, none copied per token): rows of a batch are right-padded, each
  new token at its own row's next position, the padding's keys never read, a row that stops
  dropped from the batch. A Hugging Face GPT-2 runs this way on its twin
  (:func:`tinyllm.models.hf.gpt2_twin`: our GPT on views of its weights) once the twin's logits
  reproduced the model's own on the first context's first :data:`tinyllm.logits.VERIFY_LEN`
  tokens (:data:`tinyllm.logits.VERIFY_TOL`; the twin reads the model's own weight tensors, so
  a variant it does not implement shows on any prefix);
* any other Hugging Face causal LM runs on its own cache (``past_key_values``): rows of a batch
  are left-padded, with an attention mask and position ids that skip the padding, as
  ``model.generate`` does;
* any other model is rerun on the whole sequence at every step (``model(ids) -> logits``).

A row stops at an end-of-sequence id (left out of its tokens), when ``stop(tokens)`` says so, or
after ``max_new`` tokens; the batch stops when every row has. :func:`stop_strings` makes a
``stop`` for stop strings whose cost per step does not grow with the generated text.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import ExitStack
from typing import Any

import torch

from tinyllm.logits import VERIFY_LEN, VERIFY_TOL, call_logits, eval_mode
from tinyllm.models import hf as hf_family


def _is_hf(model: Any) -> bool:
    return callable(getattr(model, "get_output_embeddings", None))


def _has_gpt_cache(model: Any) -> bool:
    return callable(getattr(model, "hidden_cached", None)) and hasattr(model, "lm_head")


def _device(model: Any) -> torch.device:
    p = next(iter(model.parameters()), None) if hasattr(model, "parameters") else None
    return p.device if p is not None else torch.device("cpu")


def batches(lengths: Sequence[int], batch_size: int, same_length: bool) -> list[list[int]]:
    """Indices of contexts grouped for generation: longest first, ``batch_size`` rows at most,
    and with ``same_length`` only contexts of one length in a batch.

    Example: ``batches([3, 5, 3], 2, True)`` -> ``[[1], [0, 2]]``.
    """
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    out: list[list[int]] = []
    for i in order:
        if (
            out
            and len(out[-1]) < batch_size
            and (not same_length or lengths[out[-1][0]] == lengths[i])
        ):
            out[-1].append(i)
        else:
            out.append([i])
    return out


def greedy_tokens(
    model: Any,
    contexts: Sequence[Sequence[int]],
    max_new: int,
    stop: Callable[[list[int]], bool],
    eos_ids: set[int],
    batch_size: int = 8,
    pad_id: int = 0,
) -> list[list[int]]:
    """The greedy continuation of every context, ``list[int]`` each (its end-of-sequence id
    left out): ``x_{t+1} = argmax_v p(v | x_0 .. x_t)``, at most ``max_new`` tokens, a row
    ending at the first id in ``eos_ids`` or once ``stop(row_tokens)`` is true.

    Example: a model whose logits always favour id 7, ``max_new=3`` -> ``[[7, 7, 7]]`` per
    context (``[[]]`` when 7 is in ``eos_ids``).
    """
    if max_new < 1:
        raise ValueError(f"max_gen_toks: expected an int >= 1, got {max_new}")
    for i, c in enumerate(contexts):
        if len(c) < 1:
            raise ValueError(f"context {i}: expected at least one token, got none")
    out: list[list[int]] = [[] for _ in contexts]
    if not contexts:
        return out
    hf, gptc = _is_hf(model), _has_gpt_cache(model)
    with ExitStack() as stack:
        stack.enter_context(eval_mode(model))
        stack.enter_context(torch.inference_mode())
        twin = _checked_twin(model, contexts[0]) if hf else None
        if twin is not None:  # dropout off in the twin's own modules too
            stack.enter_context(eval_mode(twin))
            model, hf, gptc = twin, False, True
        groups = batches([len(c) for c in contexts], batch_size, same_length=not (hf or gptc))
        for g in groups:
            rows = [list(contexts[i]) for i in g]
            if hf:
                got = _hf_batch(model, rows, max_new, stop, eos_ids, pad_id)
            elif gptc:
                got = _gpt_batch(model, rows, max_new, stop, eos_ids)
            else:
                got = _plain_batch(model, rows, max_new, stop, eos_ids)
            for i, toks in zip(g, got, strict=True):
                out[i] = toks
    return out


def _checked_twin(model: Any, ctx: Sequence[int]) -> Any:
    """The model's GPT-2 twin when its logits on the first ``VERIFY_LEN`` tokens of ``ctx``
    match the model's own, else None (a full context would cost two prefills of one row)."""
    twin = hf_family.gpt2_twin(model)
    if twin is None:
        return None
    x = torch.tensor([list(ctx[:VERIFY_LEN])], dtype=torch.long, device=_device(model))
    want = call_logits(model, x)
    got = twin.lm_head(twin.hidden(x))
    return (
        twin if (got - want).abs().max() <= VERIFY_TOL * max(1.0, float(want.abs().max())) else None
    )


def stop_strings(
    until: Sequence[str], decode: Callable[[list[int]], str]
) -> Callable[[list[int]], bool]:
    """``stop`` for :func:`greedy_tokens`: true once ``decode(tokens)`` contains a string of
    ``until``, at a cost per step that does not grow with the tokens generated.

    Each step decodes the last ``w = b + 1`` tokens only, ``b`` the longest stop string's UTF-8
    bytes, and confirms a hit on the whole text. Why ``b`` tokens hold any newly appeared stop
    string ``u`` (``b_u <= b`` bytes): decoding is UTF-8 over the tokens' bytes (invalid bytes
    -> U+FFFD), so every character of ``decode(toks[:-1])`` but a trailing incomplete one is a
    character of ``decode(toks)`` at the same bytes; a ``u`` absent from the first and present
    in the second therefore ends in the newest token's bytes, and its ``b_u`` bytes start at most
    ``b_u - 1`` bytes before them, which at least one byte per token puts in the ``b_u - 1``
    tokens before the newest. A window that starts inside a multi-byte character decodes its
    stray bytes to U+FFFD and resynchronises at the next character, so ``u``'s characters (which
    start on a character) decode as in the whole text. The one extra token covers decoders that
    alter the window's first token (a SentencePiece decoder strips its leading space). A token
    of no bytes (a skipped special token) can push ``u`` out of the window: the row then runs
    on, which changes no result, since the text is cut at its first stop string afterwards; the
    confirmation on the whole text keeps a window artefact (a U+FFFD in ``u``) from stopping a
    row early. Example: ``stop_strings(["Question:"], tok.decode)`` decodes 10 tokens a step.
    """
    strs = list(until)
    w = max((len(u.encode("utf-8")) for u in strs), default=0) + 1

    def stop(toks: list[int]) -> bool:
        if not strs or not any(u in decode(toks[-w:]) for u in strs):
            return False
        text = decode(toks)
        return any(u in text for u in strs)

    return stop


class _Rows:
    """The generated tokens of a batch and which rows are still running."""

    def __init__(self, n: int, stop: Callable[[list[int]], bool], eos_ids: set[int]) -> None:
        self.toks: list[list[int]] = [[] for _ in range(n)]
        self.done = [False] * n
        self.stop, self.eos = stop, eos_ids

    def add(self, nxt: torch.Tensor, live: Sequence[int] | None = None) -> bool:
        """Append each running row's next id (``nxt[j]`` is row ``live[j]``'s, all rows by
        default); True when every row has stopped."""
        for b, t in zip(range(len(self.toks)) if live is None else live, nxt.tolist(), strict=True):
            if self.done[b]:
                continue
            if t in self.eos:
                self.done[b] = True
                continue
            self.toks[b].append(t)
            if self.stop(self.toks[b]):
                self.done[b] = True
        return all(self.done)


def _hf_batch(model, rows, max_new, stop, eos_ids, pad_id) -> list[list[int]]:
    dev = _device(model)
    T = max(len(r) for r in rows)
    x = torch.full((len(rows), T), pad_id, dtype=torch.long)  # [B, T] left-padded
    mask = torch.zeros(len(rows), T, dtype=torch.long)
    for b, r in enumerate(rows):
        x[b, T - len(r) :] = torch.tensor(r)
        mask[b, T - len(r) :] = 1
    x, mask = x.to(dev), mask.to(dev)
    pos = (mask.cumsum(-1) - 1).clamp(min=0)  # padding skipped, as model.generate does
    o = model(input_ids=x, attention_mask=mask, position_ids=pos, use_cache=True)
    state = _Rows(len(rows), stop, eos_ids)
    last = pos[:, -1:]
    for step in range(max_new):
        nxt = o.logits[:, -1].argmax(-1)  # [B]
        if state.add(nxt) or step == max_new - 1:
            break
        mask = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=1)
        last = last + 1
        o = model(
            input_ids=nxt[:, None],
            attention_mask=mask,
            position_ids=last,
            past_key_values=o.past_key_values,
            use_cache=True,
        )
    return state.toks


def _gpt_batch(model, rows, max_new, stop, eos_ids) -> list[list[int]]:
    """Greedy steps on a fixed-capacity cache (``hidden_cached(capacity=)``: keys and values
    written in place, none copied per token); a row that stops leaves the batch (its cache rows
    dropped), so the steps after it compute only the running rows."""
    dev = _device(model)
    B, T = len(rows), max(len(r) for r in rows)
    x = torch.zeros(B, T, dtype=torch.long)  # [B, T] right-padded
    for b, r in enumerate(rows):
        x[b, : len(r)] = torch.tensor(r)
    x = x.to(dev)
    lens = torch.tensor([len(r) for r in rows], device=dev)  # [B]
    # learned positions end at block_size: row b's step-th new token sits at lens[b] + step
    n = min(max_new, model.cfg.block_size - T + 1)
    cap = T + max(n, 1) - 1  # the context and each token fed back (not the last generated)
    h, cache = model.hidden_cached(x, last=lens - 1, capacity=cap)  # h [B, 1, D] at lens - 1
    valid = torch.ones(B, cap, dtype=torch.bool, device=dev)  # [B, C]: padding never read
    valid[:, :T] = torch.arange(T, device=dev)[None, :] < lens[:, None]
    state = _Rows(B, stop, eos_ids)
    live = list(range(B))  # the batch row of each cache row
    for step in range(n):
        nxt = model.lm_head(h[:, -1]).argmax(-1)  # [B']
        if state.add(nxt, live) or step == n - 1:
            break
        keep = [j for j, b in enumerate(live) if not state.done[b]]
        if len(keep) < len(live):  # drop the stopped rows: one copy, fewer rows every step on
            at = torch.tensor(keep, device=dev)
            cache, valid, lens, nxt = cache.select(at), valid[at], lens[at], nxt[at]
            live = [live[j] for j in keep]
        h, cache = model.hidden_cached(
            nxt[:, None], cache, positions=(lens + step)[:, None], past_valid=valid[:, : T + step]
        )
    return state.toks


def _plain_batch(model, rows, max_new, stop, eos_ids) -> list[list[int]]:
    x = torch.tensor(rows, dtype=torch.long)  # [B, T], one length
    state = _Rows(len(rows), stop, eos_ids)
    for _ in range(max_new):
        nxt = call_logits(model, x)[:, -1].argmax(-1)
        if state.add(nxt):
            break
        x = torch.cat([x, nxt[:, None]], dim=1)
    return state.toks
