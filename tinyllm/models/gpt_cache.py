"""The GPT's KV cache for incremental decoding (:meth:`tinyllm.models.gpt.Model.hidden_cached`):
a growing cache (a fresh tensor per call) or a fixed-capacity one (allocated once, new keys and
values written in place), and the check of a requested capacity.

Shapes: ``B`` rows, ``H`` heads, ``S`` cached positions, ``C`` capacity, ``T`` new tokens,
``Dh`` head width.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class KVCache:
    """Keys and values of the tokens read so far, for incremental decoding
    (:meth:`tinyllm.models.gpt.Model.hidden_cached`): ``k[l]`` and ``v[l]`` are layer l's
    ``[B, H, C, Dh]``.

    ``filled`` None: a growing cache (``C = S``), new keys and values appended, a fresh tensor
    each call. ``filled`` an int: a fixed-capacity cache (``hidden_cached(capacity=C)``), its
    first ``S = filled`` positions read, new ones written in place at ``S .. S + T - 1``: the
    cache passed in shares its tensors with the one returned, so only the newest is read on."""

    k: list[torch.Tensor]
    v: list[torch.Tensor]
    filled: int | None = None

    @property
    def length(self) -> int:
        """S, the number of cached positions (padding included)."""
        return int(self.k[0].shape[2]) if self.filled is None else self.filled

    @property
    def capacity(self) -> int:
        """C, the positions the cache can hold without a copy (``length`` for a growing one)."""
        return int(self.k[0].shape[2])

    @property
    def batch(self) -> int:
        """B, the number of cached rows."""
        return int(self.k[0].shape[0])

    def select(self, rows: torch.Tensor) -> KVCache:
        """The cache of rows ``rows`` (int ``[B']``, repeats allowed): one row per continuation;
        a fixed-capacity cache stays one, with its capacity and length."""
        return KVCache(
            [t.index_select(0, rows) for t in self.k],
            [t.index_select(0, rows) for t in self.v],
            self.filled,
        )

    def append(self, i: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Layer ``i``'s keys and values ``[B, H, S + T, Dh]``: the cached ones followed by
        ``k``, ``v`` ``[B, H, T, Dh]`` (written in place into a fixed-capacity cache, which must
        have room: :meth:`~tinyllm.models.gpt.Model.hidden_cached` checks it before the first layer)."""
        if self.filled is None:
            return torch.cat([self.k[i], k], dim=2), torch.cat([self.v[i], v], dim=2)
        S, T = self.filled, k.shape[2]
        self.k[i][:, :, S : S + T] = k
        self.v[i][:, :, S : S + T] = v
        return self.k[i][:, :, : S + T], self.v[i][:, :, : S + T]


def check_capacity(capacity: int | None, past: KVCache | None, T: int) -> None:
    """``hidden_cached``'s cache capacity: a new one holds ``T`` tokens, a fixed one has room."""
    bad = isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < T
    if capacity is not None and (bad or past is not None):
        raise ValueError(
            f"gpt: expected capacity an int >= the {T} tokens of idx, for a new cache only, got "
            f"{capacity!r}" + (" with a past cache" if past is not None else "")
        )
    if past is not None and past.filled is not None and past.filled + T > past.capacity:
        raise ValueError(
            f"gpt: expected at most {past.capacity - past.filled} new tokens for a fixed-capacity "
            f"cache of {past.capacity} positions holding {past.filled}, got {T}"
        )
