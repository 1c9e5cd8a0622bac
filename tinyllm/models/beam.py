"""Beam search shared by the seq2seq families (seq2seq, transformer, copy), batched over sources
and hypotheses.

A family gives two hooks: ``encode(model, src_ids) -> state`` and ``decode_step(model, state,
prev_ids) -> (log_probs [M, V], state)``. The state is any nesting of tuples, lists and dicts whose
tensors have one row per hypothesis on dim 0; :func:`beam_search` repeats each source's rows
``beam`` times and reorders them after every step with ``index_select`` (non-tensor leaves are
kept as they are).

The search, for ``n`` sources and beam ``K`` (``M = n * K`` rows, row ``i * K + k`` is beam ``k``
of source ``i``)::

    score(y_1..y_t) = sum_j log p(y_j | y_<j, src)        (nats, accumulated in float64)

* step 0 starts every source with one live hypothesis ``[BOS]`` (the other K-1 start at -inf, so
  the first step does not fill the beam with copies of one hypothesis);
* each step extends every live hypothesis by every token (``K * V`` candidates per source) and
  keeps the ``K`` best; a hypothesis that emits ``eos`` is finished: it stays in the beam with a
  constant score (it is extended by ``pad`` at cost 0), competing with the live ones;
* the search stops when every source's beams are finished (or at -inf), or after ``max_len``
  tokens (eos included); a hypothesis cut by ``max_len`` is returned as it is, without eos;
* **ties**: candidates are ranked by a stable descending sort of the ``K * V`` scores laid out as
  ``[beam rank k, token id]``, so among equal scores the candidate of the better-ranked beam
  wins, then the smaller token id. The final choice among the ``K`` beams also keeps the first
  (best-ranked) on ties. Hence beam 1 is exactly greedy decoding with ties to the smallest id;
* **length normalization** (``length_penalty = alpha``, off by default: ``alpha = 0``): only the
  final choice among the K beams is made on ``score / L ** alpha`` with ``L`` the hypothesis'
  length in tokens, eos included (alpha = 1: mean log-probability per token). Without it, sums of
  log-probabilities favour short hypotheses; the search itself always ranks by the raw sum.

Returned hypotheses are token ids WITHOUT the leading BOS and WITH their eos when they finished:
stripping eos and padding is the caller's job (:func:`strip_hypothesis`), so a scorer that
forgets it is caught by its tests.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from tinyllm.tokens import BOS, EOS, PAD

StepFn = Callable[[object, torch.Tensor], tuple[torch.Tensor, object]]


@dataclass(frozen=True)
class BeamResult:
    """Per source: the best hypothesis' ids (eos kept, no BOS), its raw log-probability sum
    (nats) and whether it ended with eos (False: cut at ``max_len``)."""

    ids: list[list[int]]
    scores: list[float]
    finished: list[bool]


def strip_hypothesis(ids, eos: int = EOS, pad: int = PAD) -> list[int]:
    """A hypothesis' ids without its eos and padding: everything before the first ``eos``, with
    any ``pad`` removed. ``[104, 105, EOS, PAD]`` -> ``[104, 105]``; ``[EOS]`` -> ``[]``."""
    out = []
    for t in ids:
        t = int(t)
        if t == eos:
            break
        if t != pad:
            out.append(t)
    return out


def map_state(fn: Callable[[torch.Tensor], torch.Tensor], state):
    """Apply ``fn`` to every tensor of a nested tuple/list/dict state; other leaves unchanged."""
    if isinstance(state, torch.Tensor):
        return fn(state)
    if isinstance(state, tuple | list):
        return type(state)(map_state(fn, s) for s in state)
    if isinstance(state, dict):
        return {k: map_state(fn, v) for k, v in state.items()}
    return state


def _check_args(beam: int, max_len: int, length_penalty: float) -> None:
    if isinstance(beam, bool) or not isinstance(beam, int) or beam < 1:
        raise ValueError(f"beam_search: expected beam to be an int >= 1, got {beam!r}")
    if isinstance(max_len, bool) or not isinstance(max_len, int) or max_len < 1:
        raise ValueError(f"beam_search: expected max_len to be an int >= 1, got {max_len!r}")
    if not length_penalty >= 0.0:
        raise ValueError(f"beam_search: expected length_penalty >= 0, got {length_penalty!r}")


@torch.inference_mode()
def beam_search(
    step: StepFn,
    state,
    n: int,
    *,
    beam: int = 4,
    max_len: int,
    length_penalty: float = 0.0,
    bos: int = BOS,
    eos: int = EOS,
    pad: int = PAD,
) -> BeamResult:
    """Beam search over ``n`` sources whose encoded ``state`` has ``n`` rows (see the module
    docstring for the rules). ``step(state, prev_ids [M]) -> (log_probs [M, V], state)`` with
    ``M = n * beam``; ``log_probs`` are normalized log-probabilities (nats), ``-inf`` allowed.

    Example: a model whose first step gives A 0.5, B 0.4, eos 0.1, then after A eos 0.4 and after
    B eos 0.9: greedy (beam 1) answers ``[A, eos]`` (p = 0.2), beam 2 ``[B, eos]`` (p = 0.36).
    """
    _check_args(beam, max_len, length_penalty)
    K = beam
    if n == 0:
        return BeamResult([], [], [])
    # [n rows] -> [n*K rows]: row i*K + k is beam k of source i
    state = map_state(lambda t: t.repeat_interleave(K, dim=0), state)
    scores = torch.full((n, K), float("-inf"), dtype=torch.float64)
    scores[:, 0] = 0.0  # one live hypothesis per source at the start
    finished = torch.zeros(n, K, dtype=torch.bool)
    lengths = torch.zeros(n, K, dtype=torch.int64)  # tokens so far, eos included
    tokens = torch.empty(n * K, 0, dtype=torch.int64)  # [M, t] the hypotheses, no BOS
    prev = torch.full((n * K,), bos, dtype=torch.int64)
    base = torch.arange(n)[:, None] * K  # [n, 1] first row of each source
    for _ in range(max_len):
        logp, state = step(state, prev)
        V = logp.shape[-1]
        logp = logp.double().view(n, K, V)  # [n, K, V]
        if finished.any():
            # a finished hypothesis has exactly one continuation, pad, at cost 0
            done_row = torch.full((V,), float("-inf"), dtype=torch.float64)
            done_row[pad] = 0.0
            logp = torch.where(finished[:, :, None], done_row, logp)
        cand = (scores[:, :, None] + logp).view(n, K * V)  # [n, K*V], laid out [beam, token]
        # stable descending sort: ties keep [beam rank, token id] order (the documented rule)
        top, idx = torch.sort(cand, dim=1, descending=True, stable=True)
        top, idx = top[:, :K], idx[:, :K]  # [n, K]
        src_beam = torch.div(idx, V, rounding_mode="floor")  # which hypothesis each extends
        tok = idx % V  # [n, K] the token it appends
        rows = (base + src_beam).view(-1)  # [M] rows to keep, in new beam order
        state = map_state(lambda t, r=rows: t.index_select(0, r), state)
        tokens = torch.cat([tokens.index_select(0, rows), tok.view(-1, 1)], dim=1)
        was_done = finished.gather(1, src_beam)
        lengths = lengths.gather(1, src_beam) + (~was_done).long()
        finished = was_done | (tok == eos)
        scores = top
        prev = tok.view(-1)
        live = ~finished & torch.isfinite(scores)  # [n, K]
        if not live.any():
            break
        if length_penalty == 0.0:
            # live scores can only fall: a source whose best finished hypothesis already beats
            # all its live ones is decided (continuing would not change its answer)
            best_done = torch.where(finished, scores, float("-inf")).max(dim=1).values
            best_live = torch.where(live, scores, float("-inf")).max(dim=1).values
            if bool((best_done >= best_live).all()):
                break
    final = scores
    if length_penalty > 0.0:
        final = scores / lengths.clamp(min=1).double() ** length_penalty
    # first maximum = the best-ranked beam on ties
    best = torch.sort(final, dim=1, descending=True, stable=True).indices[:, 0]  # [n]
    rows = (base[:, 0] + best).tolist()
    out_ids, out_scores, out_fin = [], [], []
    for i, r in enumerate(rows):
        L = int(lengths[i, best[i]])
        out_ids.append(tokens[r, :L].tolist())
        out_scores.append(float(scores[i, best[i]]))
        out_fin.append(bool(finished[i, best[i]]))
    return BeamResult(out_ids, out_scores, out_fin)


def greedy_search(
    step: StepFn, state, n: int, *, max_len: int, bos: int = BOS, eos: int = EOS
) -> BeamResult:
    """Greedy decoding written independently of :func:`beam_search` (the reference its beam-1
    case must equal): at each step the most probable token, ties to the smallest id, until eos
    or ``max_len`` tokens. Rows stop being extended once they emit eos."""
    if n == 0:
        return BeamResult([], [], [])
    prev = torch.full((n,), bos, dtype=torch.int64)
    hyps: list[list[int]] = [[] for _ in range(n)]
    sums = [0.0] * n
    done = [False] * n
    with torch.inference_mode():
        for _ in range(max_len):
            logp, state = step(state, prev)
            logp = logp.double()
            # torch.max on CPU does not promise the first index on ties: take the smallest id
            m = logp.max(dim=1, keepdim=True).values
            is_max = logp == m
            tok = torch.where(is_max, torch.arange(logp.shape[1]), logp.shape[1]).min(1).values
            for i in range(n):
                if not done[i]:
                    t = int(tok[i])
                    hyps[i].append(t)
                    sums[i] += float(logp[i, t])
                    done[i] = t == eos
            if all(done):
                break
            prev = tok
    return BeamResult(hyps, sums, done)
