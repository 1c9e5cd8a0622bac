"""lm-eval's ``LM`` API on our scoring engine: :class:`TinyLLM`, registered as ``tinyllm``.

Requests are tokenized exactly as lm-eval's ``HFLM`` does (``_encode_pair``: trailing
whitespace of the context moves to the continuation, the whole is encoded and the context's
tokens split off; an empty context is the prefix token), truncated by its rule (the model reads
``(ctx + cont)[-(L+1):][:-1]``), then scored by :mod:`tinyllm.eval.lm`:

* ``loglikelihood``: each context encoded once per call; each shared context prefix runs once
  (contexts that differ only after a common start, as winogrande's options filling a blank or
  few-shot prompts: :func:`tinyllm.eval.lm.scoring.cached_lls`), every request continued from
  its KV cache (:func:`tinyllm.eval.lm.kvcache.cache_engine`, checked against the plain pass),
  batched across documents by a token budget. ``is_greedy`` needs the argmax at every
  continuation position: it is computed (with the log-likelihood, from one full pass) for every
  request that is its document's only one (``output_type: loglikelihood`` tasks such as
  LAMBADA; for requests that name no document, those whose context has one continuation), and
  for all requests with ``greedy="all"`` (a multiple-choice task whose metrics include
  ``exact_match``: :func:`tinyllm.eval.lmeval.run.evaluate` sets it for such tasks). Elsewhere it is
  False without being computed (lm-eval's multiple-choice ``process_results`` reads
  ``is_greedy[gold]`` for every document, but reports it only as ``exact_match``).
* ``loglikelihood_rolling``: ``rolling="lmeval"`` (default) scores lm-eval's own disjoint
  windows (``lm_eval.utils.get_rolling_token_windows`` with ``context_len=1``), so numbers match
  published ones (the windows of all documents batched together, the output head's blocks
  written into reused buffers: :meth:`TinyLLM._window_lls`); ``rolling="strided"`` scores the
  prefix token + text with our strided windows (docs/definitions.md, strided perplexity: every
  token after the first window has at least ``L - stride`` tokens of context), the fairer
  number.
* ``generate_until``: greedy from the model's KV cache (:mod:`tinyllm.eval.lmeval.generate`), the
  context left-truncated to ``L - max_gen_toks``, stopping at the ``until`` strings (and the
  end-of-sequence token), the text cut at the first stop string, as ``HFLM`` does.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Any

import numpy as np
import torch

from tinyllm.eval.lmeval import require_lm_eval

require_lm_eval()

from lm_eval.api.model import LM  # noqa: E402  (after the check naming the extra)
from lm_eval.api.registry import register_model  # noqa: E402
from lm_eval.models.utils import (  # noqa: E402
    handle_stop_sequences,
    normalize_gen_kwargs,
    postprocess_generated_text,
)
from lm_eval.utils import get_rolling_token_windows, make_disjoint_window  # noqa: E402

from tinyllm.eval import lm  # noqa: E402
from tinyllm.eval.lm.heads import views  # noqa: E402
from tinyllm.eval.lm.kvcache import cache_engine  # noqa: E402
from tinyllm.eval.lm.scoring import Req, budget_batches, cached_lls, pad, plain_lls  # noqa: E402
from tinyllm.eval.lmeval.generate import greedy_tokens, stop_strings  # noqa: E402
from tinyllm.logits import MAX_LOGITS, Head, call_logits, eval_mode  # noqa: E402
from tinyllm.models import hf  # noqa: E402
from tinyllm.tokens import ByteTokenizer, prefix_token_id  # noqa: E402

ROLLING = ("lmeval", "strided")
"""The values of ``rolling``: lm-eval's disjoint windows (published numbers) or our strided
windows (every token after the first window read with at least ``L - stride`` tokens)."""

GREEDY = ("auto", "all")
"""The values of ``greedy``: ``is_greedy`` for requests whose context has one continuation
(``"auto"``) or for every request (``"all"``)."""

DEFAULT_MAX_LENGTH = 2048
"""HFLM's ``_DEFAULT_MAX_LENGTH``: the context of a model whose config names none."""

DEFAULT_MAX_GEN_TOKS = 256
"""HFLM's ``max_gen_toks`` when a task's ``generation_kwargs`` give none."""

DEFAULT_GEN_BATCH = 32
"""Rows per generation batch by default. A decode step on the CPU is bound by reading the
weights (and, at a 50k vocabulary, the output head) once per step whatever the rows, so 32 rows
a step cost far less than 4 steps of 8: on gpt2-6x512 (bench/bench_lmeval.py, gsm8k, 16
documents, 64 tokens, two runs at one load) generation took HFLM's batch 8 2.7x our time at
32 rows and 2.0x at 8 rows. Each row's cache holds ``2 * n_layer * (T + max_gen_toks) * n_embd``
floats."""


def _check_choice(name: str, v: Any, options: tuple) -> str:
    if v not in options:
        raise ValueError(f"{name}: expected one of {list(options)}, got {v!r}")
    return v


@register_model("tinyllm")
class TinyLLM(LM):
    """An lm-eval model over our engine: ``lm_eval.simple_evaluate(model=TinyLLM(m, tok))``.

    ``model``: a Hugging Face causal LM (``tinyllm.models.hf.load``) or our GPT; ``tokenizer``:
    its Hugging Face tokenizer or :class:`~tinyllm.tokens.ByteTokenizer`. ``max_length`` L
    (default: the model's own context, :func:`tinyllm.eval.lm.model_ctx_len`, else 2048 as
    HFLM), ``batch_size`` rows per generation batch (default :data:`DEFAULT_GEN_BATCH`),
    ``token_budget`` tokens per scoring pass, ``rolling`` in :data:`ROLLING` with ``stride``
    (default ``L // 2``) for ``"strided"``,
    ``greedy`` in :data:`GREEDY`, ``prefix_token_id`` (default the tokenizer's BOS, else EOS).

    Example: ``TinyLLM(GPT2LMHeadModel(cfg), tok).loglikelihood(reqs)`` -> ``[(ll, greedy)]``
    with ``ll`` equal to HFLM's within float32 rounding.
    """

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        *,
        max_length: int | None = None,
        batch_size: int = DEFAULT_GEN_BATCH,
        token_budget: int | None = None,
        rolling: str = "lmeval",
        stride: int | None = None,
        greedy: str = "auto",
        prefix_token_id: int | None = None,
    ) -> None:
        super().__init__()
        self.model, self.tokenizer = model, tokenizer
        own = lm.model_ctx_len(model)
        self.max_length = int(max_length or own or DEFAULT_MAX_LENGTH)
        if own is not None and self.max_length > own:
            raise ValueError(
                f"max_length: expected at most the model's context of {own}, got {max_length}"
            )
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size: expected an int >= 1, got {batch_size!r}")
        self.batch_size = batch_size
        self.token_budget = int(token_budget or max(lm.DEFAULT_MC_TOKEN_BUDGET, self.max_length))
        self.rolling = _check_choice("rolling", rolling, ROLLING)
        self.stride = int(stride) if stride is not None else max(1, self.max_length // 2)
        self.greedy = _check_choice("greedy", greedy, GREEDY)
        self.prefix = prefix_token_id if prefix_token_id is not None else _prefix(tokenizer)

    @classmethod
    def create_from_arg_string(cls, arg_string: str, additional_config: dict | None = None):
        """``--model tinyllm --model_args pretrained=DIR[,dtype=D,device=X,batch_size=N,
        max_length=N,rolling=strided,...]`` (``hf=DIR`` the same): a local Hugging Face folder
        loaded by :func:`tinyllm.models.hf.load` with its own tokenizer (:func:`model_args`)."""
        from lm_eval.utils import simple_parse_args_string  # only for lm-eval's own CLI

        return cls.create_from_arg_obj(simple_parse_args_string(arg_string), additional_config)

    @classmethod
    def create_from_arg_obj(cls, arg_dict: dict, additional_config: dict | None = None):
        """The same from lm-eval's parsed ``model_args`` (its CLI hands a dict here)."""
        folder, load_kw, kw = model_args(arg_dict, additional_config)
        return cls(hf.load(folder, quiet=True, **load_kw), hf.load_tokenizer(folder), **kw)

    # ------------------------------------------------------------------ tokenization (HFLM's)

    @property
    def eot_token_id(self) -> int | None:
        return getattr(self.tokenizer, "eos_token_id", None)

    def tok_encode(self, text: str) -> list[int]:
        """HFLM's ``tok_encode``: the tokenizer's own defaults, no special tokens when the text
        already starts with the prefix token's string; one id per byte for ByteTokenizer."""
        if isinstance(self.tokenizer, ByteTokenizer):
            return self.tokenizer.encode(text).tolist()
        kw = {}
        if self.prefix is not None and text.startswith(self.tokenizer.decode(self.prefix)):
            kw["add_special_tokens"] = False
        return list(self.tokenizer.encode(text, **kw))

    def tok_decode(self, ids: list[int]) -> str:
        if isinstance(self.tokenizer, ByteTokenizer):
            return self.tokenizer.decode(ids)
        return self.tokenizer.decode(ids, skip_special_tokens=True)

    def encode_pair(
        self, context: str, continuation: str, enc: dict[str, list[int]] | None = None
    ) -> tuple[list[int], list[int]]:
        """HFLM's request encoding: an empty context is ``[prefix]``; otherwise trailing
        whitespace moves to the continuation and ``enc(ctx + cont)`` is split after
        ``enc(ctx)``. ``enc``: a cache of ``enc(ctx)`` by context text, filled here (the
        choices of one document repeat its context)."""
        if context == "":
            if self.prefix is None:
                raise ValueError(
                    "context: expected a non-empty context for a tokenizer without a BOS or "
                    "EOS token (pass prefix_token_id), got ''"
                )
            return [self.prefix], self.tok_encode(continuation)
        n = len(context) - len(context.rstrip())
        if n:
            continuation, context = context[-n:] + continuation, context[:-n]
        if enc is None:
            ctx = self.tok_encode(context)
        elif (ctx := enc.get(context)) is None:
            ctx = enc[context] = self.tok_encode(context)
        whole = self.tok_encode(context + continuation)
        return ctx, whole[len(ctx) :]

    def _req(self, k: int, ctx: list[int], cont: list[int], where: str) -> Req:
        L = self.max_length
        if not cont:
            raise ValueError(f"{where}: expected a continuation of at least one token, got none")
        if len(cont) > L:
            raise ValueError(
                f"{where}: continuation is {len(cont)} tokens; expected at most max_length {L}"
            )
        extra = len(ctx) + len(cont) - (L + 1)
        if extra > 0:  # (ctx + cont)[-(L+1):][:-1]: cut the context's first tokens
            ctx = ctx[extra:]
        return Req(k, np.asarray(ctx, dtype=np.int64), np.asarray(cont, dtype=np.int64))

    # ------------------------------------------------------------------------ the LM API

    def loglikelihood(self, requests, disable_tqdm: bool = False) -> list[tuple[float, bool]]:
        """``(LL, is_greedy)`` per request ``(context, continuation)``: ``LL`` in nats."""
        enc: dict[str, list[int]] = {}  # the contexts of one call, each encoded once
        reqs = [
            self._req(k, *self.encode_pair(*r.args, enc=enc), where=f"request {k}")
            for k, r in enumerate(requests)
        ]
        return self.score_requests(reqs, alone=_alone_in_doc(requests))

    def score_requests(
        self, reqs: list[Req], alone: list[bool] | None = None
    ) -> list[tuple[float, bool]]:
        """``(LL, is_greedy)`` of token-level requests (see the module docstring). ``alone[k]``:
        request k is its document's only request (an ``output_type: loglikelihood`` task), so
        its ``is_greedy`` is computed; None: requests whose context has one continuation.
        Identical requests are scored once and share the result, so equal choices tie exactly
        (lm-eval then picks the first, as on HFLM) instead of by float rounding."""
        keys = [(r.ctx.tobytes(), r.cont.tobytes()) for r in reqs]
        once: dict[tuple[bytes, bytes], int] = {}
        for k, key in enumerate(keys):
            once.setdefault(key, k)
        if len(once) < len(reqs):
            sub_alone = None
            if alone is not None:
                any_alone: dict[tuple[bytes, bytes], bool] = {}
                for key, a in zip(keys, alone, strict=True):
                    any_alone[key] = any_alone.get(key, False) or a
                sub_alone = [any_alone[key] for key in once]
            got = self.score_requests([reqs[k] for k in once.values()], sub_alone)
            at = {key: i for i, key in enumerate(once)}
            return [got[at[key]] for key in keys]
        if alone is None:
            n_of = Counter(r.ctx.tobytes() for r in reqs)
            alone = [n_of[r.ctx.tobytes()] == 1 for r in reqs]
        full = [k for k in range(len(reqs)) if self.greedy == "all" or alone[k]]
        rest = sorted(set(range(len(reqs))) - set(full))
        out: list[tuple[float, bool]] = [(math.nan, False)] * len(reqs)
        with eval_mode(self.model), torch.inference_mode():
            for k, v in zip(full, self._full_pass([reqs[k] for k in full]), strict=True):
                out[k] = v
            if rest:
                sub = [reqs[k] for k in rest]
                ll = [math.nan] * len(sub)
                engine = cache_engine(self.model, sub)
                if engine is None:
                    plain_lls(self.model, sub, range(len(sub)), self.token_budget, ll, None)
                else:
                    cached_lls(engine, sub, self.token_budget, ll, None)
                for k, v in zip(rest, ll, strict=True):
                    out[k] = (v, False)  # not computed: see the module docstring
        return out

    def _full_pass(self, reqs: list[Req]) -> list[tuple[float, bool]]:
        """LL and is_greedy from one pass of ``ctx + cont[:-1]``, right-padded, longest first,
        batched by the token budget: the output head at the continuation positions only
        (:class:`tinyllm.logits.Head`'s hidden states + head, once that view reproduced the
        model's logits), else the model's full logits."""
        seqs = [np.concatenate([r.ctx, r.cont[:-1]]) for r in reqs]
        order = sorted(range(len(reqs)), key=lambda i: -seqs[i].size)
        out: list[tuple[float, bool]] = [(math.nan, False)] * len(reqs)
        dev = _device(self.model)
        head: Head | None = None
        for sl in budget_batches([seqs[i].size for i in order], self.token_budget):
            batch = order[sl]
            x = pad([seqs[i] for i in batch]).to(dev)
            if head is None:
                head = Head(self.model, x, views(self.model))
            at = [torch.arange(reqs[i].ctx.size - 1, seqs[i].size) for i in batch]
            if head.hidden is not None and head.head is not None:
                h = head.hidden(x)  # [B, T, D]
                z = head.head(torch.cat([h[b, a] for b, a in enumerate(at)]))  # [M, V]
            else:
                logits = call_logits(self.model, x)  # [B, T, V]
                z = torch.cat([logits[b, a] for b, a in enumerate(at)])
            lp = torch.log_softmax(z.float(), dim=-1)  # [M, V]: every continuation position
            tgt = torch.from_numpy(np.concatenate([reqs[i].cont for i in batch])).to(lp.device)
            got = lp.gather(1, tgt[:, None])[:, 0].double().tolist()
            hit = (lp.argmax(-1) == tgt).tolist()
            lo = 0
            for i, a in zip(batch, at, strict=True):
                n = a.numel()
                out[i] = (math.fsum(got[lo : lo + n]), all(hit[lo : lo + n]))
                lo += n
        return out

    def loglikelihood_rolling(self, requests, disable_tqdm: bool = False) -> list[float]:
        """The LL (nats) of each whole text: the prefix token + the text's tokens, every text
        token scored once, on lm-eval's windows or our strided ones (``rolling``)."""
        texts = [r.args[0] for r in requests]
        if self.prefix is None:
            raise ValueError(
                "loglikelihood_rolling: expected a tokenizer with a BOS or EOS token (lm-eval "
                "prepends it so every text token is scored; pass prefix_token_id), got none"
            )
        if self.rolling == "strided":
            out = []
            for text in texts:
                ids = np.asarray([self.prefix, *self.tok_encode(text)], dtype=np.int64)
                C = min(self.max_length, ids.size)
                nll = lm.token_nlls(self.model, ids, C, min(self.stride, C - 1)) if C > 1 else []
                out.append(-math.fsum(nll))
            return out
        reqs, owner = [], []
        for i, text in enumerate(texts):
            windows = get_rolling_token_windows(
                token_list=self.tok_encode(text),
                prefix_token=self.prefix,
                max_seq_len=self.max_length,
                context_len=1,
            )
            for ctx, pred in map(make_disjoint_window, windows):
                reqs.append(Req(len(reqs), np.asarray(ctx), np.asarray(pred)))
                owner.append(i)
        ll = self._window_lls(reqs)
        sums = [0.0] * len(texts)
        parts: list[list[float]] = [[] for _ in texts]
        for i, v in zip(owner, ll, strict=True):
            parts[i].append(v)
        for i, p in enumerate(parts):
            sums[i] = math.fsum(p)
        return sums

    def _window_lls(self, reqs: list[Req]) -> list[float]:
        """The LL (nats) of each of lm-eval's rolling windows, as :func:`plain_lls` computes
        it: the windows of every document in one list, longest first, batched by the token
        budget; the hidden states at the scored positions (:class:`tinyllm.logits.Head`), then
        the output head and its log-softmax in blocks of at most ``MAX_LOGITS`` elements, each
        block written into the same two buffers. Every token of a text is scored, so each window
        has up to ``max_length`` rows of ``V`` logits: fresh ``[rows, V]`` blocks would be fresh
        memory on every step (mapped by the OS page by page; on gpt2-6x512, a fifth of the CPU
        time of head + log-softmax), where reused buffers give the same numbers without it.
        A head that is not a float32 ``nn.Linear`` over the hidden states is scored by
        :func:`plain_lls`."""
        ll = [math.nan] * len(reqs)
        if not reqs:
            return ll
        seqs = [np.concatenate([r.ctx, r.cont[:-1]]) for r in reqs]
        order = sorted(range(len(reqs)), key=lambda i: -seqs[i].size)
        dev = _device(self.model)
        bufs: tuple[torch.Tensor, torch.Tensor] | None = None
        lin = None
        with eval_mode(self.model), torch.inference_mode():
            for sl in budget_batches([seqs[i].size for i in order], self.token_budget):
                batch = order[sl]
                x = pad([seqs[i] for i in batch]).to(dev)
                if lin is None:
                    lin = _linear_head(Head(self.model, x, views(self.model)))
                    if lin is None:
                        plain_lls(self.model, reqs, range(len(reqs)), self.token_budget, ll, None)
                        return ll
                head, w, b = lin
                rows = torch.cat(
                    [torch.full((reqs[i].cont.size,), k) for k, i in enumerate(batch)]
                ).to(dev)
                cols = torch.cat(
                    [torch.arange(reqs[i].ctx.size - 1, seqs[i].size) for i in batch]
                ).to(dev)
                tgt = torch.from_numpy(np.concatenate([reqs[i].cont for i in batch])).to(dev)
                if head.keep:  # as Head.nlls: the last block at the scored span only
                    lo, hi = int(cols.min()), int(cols.max()) + 1
                    h = head.hidden(x, keep=slice(lo, hi))[rows, cols - lo]  # [M, D]
                else:
                    h = head.hidden(x)[rows, cols]  # [M, D]
                V = w.shape[0]
                if int(tgt.max()) >= V:
                    raise ValueError(
                        f"expected token ids < the model's vocabulary size {V}, "
                        f"got id {int(tgt.max())}"
                    )
                step = max(1, MAX_LOGITS // V)
                if bufs is None or bufs[0].shape[0] < min(step, h.shape[0]):
                    n = min(step, max(h.shape[0], self.token_budget))
                    bufs = (w.new_empty(n, V), w.new_empty(n, V))
                nll = np.empty(h.shape[0], dtype=np.float64)
                for lo in range(0, h.shape[0], step):
                    hi = min(h.shape[0], lo + step)
                    z, lp = bufs[0][: hi - lo], bufs[1][: hi - lo]
                    if b is None:
                        torch.mm(h[lo:hi], w.t(), out=z)
                    else:
                        torch.addmm(b, h[lo:hi], w.t(), out=z)
                    torch.log_softmax(z, dim=-1, out=lp)
                    nll[lo:hi] = -lp.gather(1, tgt[lo:hi, None])[:, 0].double().cpu().numpy()
                at = 0
                for i in batch:
                    n = reqs[i].cont.size
                    ll[i] = -math.fsum(nll[at : at + n])
                    at += n
        return ll

    def generate_until(self, requests, disable_tqdm: bool = False) -> list[str]:
        """Greedy continuations of ``(context, gen_kwargs)`` cut at the first stop string."""
        out: list[str] = [""] * len(requests)
        groups: dict[str, list[int]] = {}
        for k, r in enumerate(requests):
            groups.setdefault(repr(sorted(r.args[1].items())), []).append(k)
        eos_text = None
        if self.eot_token_id is not None:
            eos_text = self.tokenizer.decode([self.eot_token_id], skip_special_tokens=False)
        for ks in groups.values():
            kw = normalize_gen_kwargs(dict(requests[ks[0]].args[1]), DEFAULT_MAX_GEN_TOKS)
            if kw.get("do_sample"):
                raise ValueError(
                    f"generation_kwargs: expected do_sample false (greedy), got {kw!r}"
                )
            until = handle_stop_sequences(kw.pop("until", None), eos=eos_text)
            max_new = int(kw.pop("max_gen_toks"))
            max_ctx = self.max_length - max_new
            if max_ctx < 1:
                raise ValueError(
                    f"max_gen_toks: expected fewer than max_length {self.max_length}, got {max_new}"
                )
            ctxs = [self.tok_encode(requests[k].args[0])[-max_ctx:] for k in ks]

            stop = stop_strings(until, self.tok_decode)  # decodes a tail window per step
            toks = greedy_tokens(
                self.model, ctxs, max_new, stop, self._eos_ids(), self.batch_size, self._pad()
            )
            for k, t in zip(ks, toks, strict=True):
                out[k] = postprocess_generated_text(self.tok_decode(t), until, None)
        return out

    def _eos_ids(self) -> set[int]:
        ids = set()
        for src in (self.tokenizer, getattr(self.model, "generation_config", None)):
            v = getattr(src, "eos_token_id", None)
            ids.update(v if isinstance(v, list) else [] if v is None else [v])
        return {int(i) for i in ids}

    def _pad(self) -> int:
        for v in (getattr(self.tokenizer, "pad_token_id", None), self.eot_token_id):
            if isinstance(v, int):
                return v
        return 0


def _alone_in_doc(requests: list) -> list[bool] | None:
    """Per lm-eval ``Instance``: whether it is the only request of its ``(task_name, doc_id)``;
    None when some request names no document."""
    docs = [(getattr(r, "task_name", None), getattr(r, "doc_id", None)) for r in requests]
    if any(d is None for _, d in docs):
        return None
    n = Counter(docs)
    return [n[d] == 1 for d in docs]


def _linear_head(head: Head) -> tuple[Head, torch.Tensor, torch.Tensor | None] | None:
    """``(head, weight, bias)`` when ``head`` scores as a float32 ``nn.Linear`` over its
    hidden states (so ``mm(h, weight.T) + bias`` is the head's own output), else None."""
    lin = head.head
    if head.hidden is None or head.keep_logits is not None or type(lin) is not torch.nn.Linear:
        return None
    w, b = lin.weight, lin.bias
    if w.dtype != torch.float32 or (b is not None and b.dtype != torch.float32):
        return None
    return head, w, b


def _prefix(tokenizer: Any) -> int | None:
    return None if isinstance(tokenizer, ByteTokenizer) else prefix_token_id(tokenizer)


def _device(model: Any) -> torch.device:
    p = next(iter(model.parameters()), None) if hasattr(model, "parameters") else None
    return p.device if p is not None else torch.device("cpu")


LOAD_ARGS = ("dtype", "device")
"""lm-eval's model args that say how the folder is loaded (:func:`tinyllm.models.hf.load`)."""


def model_args(args: dict, additional_config: dict | None = None) -> tuple[str, dict, dict]:
    """``(folder, load keywords, TinyLLM keywords)`` of lm-eval's parsed ``--model_args``.

    The folder is ``pretrained=DIR`` (lm-eval's name) or ``hf=DIR`` (both: the same folder);
    ``dtype`` and ``device`` (``"auto"`` when absent; lm-eval's ``--device`` arrives in
    ``additional_config``) load it; ``batch_size`` (``--batch_size`` too; ``"auto"``: our
    default) is rows per generation batch; every other key is a :class:`TinyLLM` keyword.
    ``max_batch_size`` and a None value in ``additional_config`` are ignored (lm-eval's CLI
    passes them for every model)."""
    args = dict(args)
    names = {k: args.pop(k) for k in ("pretrained", "hf") if k in args}
    folders = {str(v) for v in names.values()}
    if not folders:
        raise ValueError(f"model_args: expected pretrained=DIR (a local HF folder), got {args!r}")
    if len(folders) > 1:
        raise ValueError(
            f"model_args: expected one folder, got pretrained={names['pretrained']!r} "
            f"and hf={names['hf']!r}"
        )
    extra = {k: v for k, v in (additional_config or {}).items() if v is not None}
    load_kw = {k: str(args.pop(k, extra.get(k, "auto"))) for k in LOAD_ARGS}
    batch = args.pop("batch_size", extra.get("batch_size"))
    if batch is not None and not str(batch).startswith("auto"):
        if isinstance(batch, str) and batch.isdigit():
            batch = int(batch)
        args["batch_size"] = batch
    return folders.pop(), load_kw, args
