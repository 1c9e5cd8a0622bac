"""Benchmark: do tinyllm's 95% intervals contain the population value 95% of the time, and does
its paired test call a zero population effect 5% of the time? (docs/definitions.md, "Units",
"Intervals", "Paired tests" and "Calibration".)

A population is a real corpus cut into its sampling units, every unit scored once by real models
that never read it (fitted on other text, or cross-fitted: the documents of fold k are scored by
a model fitted on the other folds). Each of ``--samples`` draws takes ``n`` units without
replacement (about a tenth of the population; 29 of the 293 Lee documents) and computes the
interval tinyllm reports, through ``tinyllm.stats``, exactly as a report would. Reported:

* coverage: the share of draws whose 95% interval contains the population value (the value over
  all units: ``sum S_g / sum N_g`` for a ratio, the mean for a proportion), over units (the
  headline interval) and over items (the token-, position- or item-level interval of before:
  Student t, or Wilson for 0/1 items), for contrast;
* for two models A and B on the same units: the coverage of the population difference, and the
  false-positive rate of the paired test on a null made from the real differences: A's values
  shifted so that the population effect is exactly 0 while every unit keeps its own difference
  (for a ratio ``S'^A_g = S^A_g - (r_A - r_B) N_g``, i.e. every item of A minus ``r_A - r_B``;
  for a mean over one-item units ``a'_i = a_i - (mean(a) - mean(b))``), called at p < 0.05.

Kinds (those the zoo's rows use): bpb (``cluster_ratio`` over documents), paired bpb delta
(``paired_t`` interval, sign-flip p over documents), accuracy over positions (``cluster_ratio``
over sentences), exact match and multiple choice with one item per unit (``wilson``; paired:
``paired_t`` over items, which are the units), multiple choice with items clustered in documents
(``cluster_bootstrap`` and ``cluster_ratio``; paired: ``paired_t`` over documents).

Per-unit sums (``S_g``, ``N_g``, sums of squares) are computed once; a draw passes its units'
sums to the estimator as one item per unit, with ``N_g`` as the weights, which is the same
computation as from the items (the first draws are checked against the item-level calls). The
item-level contrast is vectorised over all draws from the same sums.

    python bench/bench_coverage.py                     # 2,000 draws, writes docs/benchmarks.md
    python bench/bench_coverage.py --samples 200 --gpt-steps 0 --no-write
"""

from __future__ import annotations

import argparse
import datetime
import math
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from scipy import stats as sps

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from docsection import show  # noqa: E402

from tinyllm import data, stats  # noqa: E402
from tinyllm.models import bigram, copy_baseline, gpt, ngram  # noqa: E402

SECTION = "## Calibration: interval coverage and paired-test error rates"
BEGIN, END = "<!-- coverage: written by bench/bench_coverage.py -->", "<!-- /coverage -->"
COVER_BAR = (0.93, 0.97)
FPR_BAR = (0.03, 0.07)
N_PERM = 999
FOLDS = 5  # bigram and ngram: documents i % 5 == k are scored by the model fitted on the rest
GPT_FOLDS = 2
GPT_CONFIG = dict(block_size=32, n_layer=2, n_head=4, n_embd=64, dropout=0.0, tie_weights=False)
GPT_TRAIN = dict(batch_size=32, lr=1e-2)  # the zoo's GPT recipe (tinyllm/train.py)
GPT_STEPS = 1200
HEAD500 = "head500.noblanks.cor"  # gensim's test data: 250 Wikipedia articles, stemmed words
MC_EVERY = 10  # a multiple-choice item at every 10th word of a document
MC_TAIL = 8  # context bytes kept before each choice (an order-5 n-gram reads 4)


# ---------------------------------------------------------------------------------- populations


@dataclass(frozen=True)
class Ratio:
    """A population of G units, each with its per-unit sums under several models.

    ``N[g]``: positions (tokens = bytes, or items); ``S[m][g]``: the sum of model m's per-item
    values (NLL in nats, or 0/1 correct); ``Q[m][g]``: the sum of their squares; ``QD[(a, b)][g]``:
    the sum over items of ``(x^a - x^b)^2``; ``items[m]``: per-item values in unit order with
    ``starts`` (only where a row resamples items). ``binary``: 0/1 items (item-level contrast:
    Wilson); ``scale``: value units per nats (``1 / ln 2`` for bpb)."""

    corpus: str
    unit: str
    metric: str
    n_draw: int
    N: np.ndarray
    S: dict = field(default_factory=dict)
    Q: dict = field(default_factory=dict)
    QD: dict = field(default_factory=dict)
    binary: bool = False
    scale: float = 1.0
    items: dict = field(default_factory=dict)
    starts: np.ndarray | None = None
    models: str = ""


def ratio_population(corpus, unit, metric, n_draw, per_unit: dict, pairs=(), **kw) -> Ratio:
    """:class:`Ratio` from ``per_unit[model]`` = a list of per-item arrays, one per unit."""
    N = np.array([x.size for x in next(iter(per_unit.values()))], dtype=np.float64)
    QD = {
        (a, b): np.array([float(np.sum((x - y) ** 2)) for x, y in zip(xa, xb, strict=True)])
        for a, b in pairs
        for xa, xb in [(per_unit[a], per_unit[b])]
    }
    return Ratio(
        corpus,
        unit,
        metric,
        n_draw,
        N,
        S={m: np.array([math.fsum(x) for x in xs]) for m, xs in per_unit.items()},
        Q={m: np.array([float(np.dot(x, x)) for x in xs]) for m, xs in per_unit.items()},
        QD=QD,
        items={m: np.concatenate(xs) for m, xs in per_unit.items()},
        starts=np.concatenate([[0], np.cumsum(N)]).astype(np.int64),
        **kw,
    )


def doc_bytes(docs: list[str]) -> list[bytes]:
    return [d.encode("utf-8") + b"\n" for d in docs]


def stream(docs: list[bytes]) -> np.ndarray:
    """``"\\n"`` then every document (each ending in its newline): every document byte is scored."""
    return np.frombuffer(b"\n" + b"".join(docs), np.uint8).astype(np.int64)


def split_scores(x: np.ndarray, docs: list[bytes]) -> list[np.ndarray]:
    return np.split(x, np.cumsum([len(d) for d in docs])[:-1])


def fit(family: str, docs: list[bytes], seed: int, gpt_steps: int):
    a = np.frombuffer(b"".join(docs), np.uint8)
    if family == "bigram":
        return bigram.train(bigram.Config(k=0.5), a, seed=seed)
    if family == "ngram":
        return ngram.train(ngram.Config(order=5), a, seed=seed)
    cfg = gpt.Config(**GPT_CONFIG)
    return gpt.train(cfg, a.astype(np.int64), seed=seed, steps=gpt_steps, **GPT_TRAIN)


def nlls(family: str, model, ids: np.ndarray) -> np.ndarray:
    """Per-token NLLs (nats) of tokens 1..n-1, as ``tinyllm eval`` scores the family."""
    if family == "gpt":
        return gpt.token_nlls(model, ids, GPT_CONFIG["block_size"], GPT_CONFIG["block_size"] // 2)
    return (bigram if family == "bigram" else ngram).token_nlls(model, ids)


def cross_fit(docs: list[bytes], family: str, folds: int, seed: int, gpt_steps: int = 0):
    """Per-document NLL arrays, document i scored by the model fitted on the documents of the
    other folds (``i % folds``), its fold's documents read as one stream; and the fold models."""
    out: list = [None] * len(docs)
    models = []
    for k in range(folds):
        held = [i for i in range(len(docs)) if i % folds == k]
        model = fit(family, [d for i, d in enumerate(docs) if i % folds != k], seed, gpt_steps)
        models.append(model)
        part = [docs[i] for i in held]
        for i, x in zip(held, split_scores(nlls(family, model, stream(part)), part), strict=True):
            out[i] = x
    return out, models


def argmax_correct(family: str, model, ids: np.ndarray, chunk: int = 2048) -> np.ndarray:
    """1.0 where the model's most likely next byte is the true one, for tokens 1..n-1."""
    if family == "bigram":
        best = model.logits.detach().argmax(dim=1).numpy()
        return (best[ids[:-1]] == ids[1:]).astype(float)
    out = []
    for s in range(1, ids.size, chunk):  # each chunk re-reads the order - 1 bytes before it
        a = max(0, s - model.cfg.order)
        e = min(ids.size, s + chunk)
        logp = model(torch.as_tensor(ids[a : e - 1])[None])[0].numpy()
        out.append(logp[s - 1 - a :].argmax(axis=1) == ids[s:e])
    return np.concatenate(out).astype(float)


def lee_populations(seed: int, gpt_steps: int) -> tuple[list[Ratio], dict]:
    """bpb on the 293 Lee documents, and the fold models (for the multiple-choice items)."""
    docs = doc_bytes(data.unique_documents(data.lee_documents()))
    per, models = {}, {}
    for fam in ("bigram", "ngram"):
        per[fam], models[fam] = cross_fit(docs, fam, FOLDS, seed)
    pairs = [("ngram", "bigram")]
    if gpt_steps:
        torch.set_num_threads(1)
        per["gpt"], _ = cross_fit(docs, "gpt", GPT_FOLDS, seed, gpt_steps)
        pairs.append(("gpt", "ngram"))
    pop = ratio_population(
        "lee (293 news documents)", "document", "bpb", 29, per, pairs, scale=1 / stats.LN2,
        models="cross-fitted",
    )  # fmt: skip
    return [pop], {"docs": docs, "models": models}


def head500_population(seed: int) -> Ratio:
    """bpb on gensim's head500 Wikipedia articles (250 lines, stemmed words), cross-fitted."""
    raw = (data.gensim_test_data_dir() / HEAD500).read_bytes().decode("utf-8")
    docs = doc_bytes(data.unique_documents([x for x in raw.split("\n") if x.strip()]))
    per = {fam: cross_fit(docs, fam, FOLDS, seed)[0] for fam in ("bigram", "ngram")}
    return ratio_population(
        f"head500 ({len(docs)} Wikipedia articles, stemmed)",
        "document",
        "bpb",
        len(docs) // 10,
        per,
        [("ngram", "bigram")],
        scale=1 / stats.LN2,
        models="cross-fitted",
    )


def polarity_populations(seed: int) -> list[Ratio]:
    """The pang_lee polarity snippets (units = snippets), scored by models fitted on the Lee
    documents: bpb, and byte-prediction accuracy over positions."""
    sents = doc_bytes([r.sentence for r in data.polarity_rows()])
    lee = doc_bytes(data.unique_documents(data.lee_documents()))
    ids = stream(sents)
    nll, acc = {}, {}
    for fam in ("bigram", "ngram"):
        model = fit(fam, lee, seed, 0)
        nll[fam] = split_scores(nlls(fam, model, ids), sents)
        acc[fam] = split_scores(argmax_correct(fam, model, ids), sents)
    name = f"polarity ({len(sents)} review snippets)"
    n = len(sents) // 10
    pairs = [("ngram", "bigram")]
    fitted = "fitted on lee"
    return [
        ratio_population(name, "snippet", "bpb", n, nll, pairs, scale=1 / stats.LN2, models=fitted),
        ratio_population(
            name, "snippet", "byte accuracy", n, acc, pairs, binary=True, models=fitted
        ),
    ]


def mc_items(docs: list[bytes], seed: int) -> list[tuple[int, bytes, list[bytes], int]]:
    """(document, context tail, 4 choices, answer) at every 10th word of every document: the
    true next word and 3 other words of the corpus with the same byte length (seeded)."""
    words = [d.rstrip(b"\n").split(b" ") for d in docs]
    by_len: dict[int, list[bytes]] = {}
    for w in sorted({w for ws in words for w in ws if w}):
        by_len.setdefault(len(w), []).append(w)
    rng = np.random.default_rng(seed)
    items = []
    for g, ws in enumerate(words):
        for j in range(MC_EVERY, len(ws), MC_EVERY):
            pool = [w for w in by_len.get(len(ws[j]), []) if w != ws[j]]
            if not ws[j] or len(pool) < 3:
                continue
            choices = [pool[i] for i in rng.choice(len(pool), 3, replace=False)]
            ans = len(items) % 4
            choices.insert(ans, ws[j])
            items.append((g, b" ".join(ws[:j])[-MC_TAIL:], choices, ans))
    return items


def mc_populations(lee: dict, seed: int) -> list[Ratio]:
    """Multiple choice on the Lee documents, each item scored by the fold model of its document:
    ``LL(c)`` of " " + choice after the context (lm-eval's delimiter), acc = argmax."""
    docs, items = lee["docs"], mc_items(lee["docs"], seed)
    correct = {}
    for fam, models in lee["models"].items():
        ok = np.zeros(len(items))
        for k, model in enumerate(models):
            mine = [i for i, it in enumerate(items) if it[0] % FOLDS == k]
            segs = [items[i][1] + b" " + c for i in mine for c in items[i][2]]
            x = np.zeros(sum(map(len, segs)))
            x[1:] = nlls(fam, model, np.frombuffer(b"".join(segs), np.uint8).astype(np.int64))
            cs = np.concatenate([[0.0], np.cumsum(x)])
            ends = np.cumsum([len(s) for s in segs])
            lls = -(cs[ends] - cs[ends - np.array([len(s) - MC_TAIL for s in segs])])
            best = lls.reshape(len(mine), 4).argmax(axis=1)
            ok[mine] = best == np.array([items[i][3] for i in mine])
        correct[fam] = ok
    unit = np.array([it[0] for it in items])
    by_doc = {f: [v[unit == g] for g in range(len(docs))] for f, v in correct.items()}
    keep = [g for g in range(len(docs)) if by_doc["bigram"][g].size]
    by_doc = {f: [v[g] for g in keep] for f, v in by_doc.items()}
    name = f"lee next word, 4 choices ({len(keep)} documents, {len(items)} items)"
    pairs = [("ngram", "bigram")]
    kw = {"binary": True, "models": "cross-fitted"}
    clustered = ratio_population(name, "document", "acc", 29, by_doc, pairs, **kw)
    first = {f: [v[:1] for v in vs] for f, vs in by_doc.items()}
    name = f"lee next word, first item of each of {len(keep)} documents"
    return [ratio_population(name, "item", "acc", 29, first, pairs, **kw), clustered]


def cldr_population() -> Ratio:
    """Exact match on the CLDR English -> French names (one pair, one unit): the zoo's copy
    baseline (tinyllm.models.copy_baseline, beam 1), and copy with the first letter lowercased
    (French writes language names in lower case)."""
    pairs = data.cldr_names_pairs()
    srcs, tgts = [s for s, _ in pairs], [t for _, t in pairs]
    model = copy_baseline.train(copy_baseline.Config(max_len=64), pairs, seed=0)
    hyps = {
        "copy": copy_baseline.translate(model, srcs, beam=1),
        "copy-lower": [s[:1].lower() + s[1:] for s in srcs],
    }
    per = {
        m: [np.array([float(h.encode() == t.encode())]) for h, t in zip(hs, tgts, strict=True)]
        for m, hs in hyps.items()
    }
    name = f"CLDR names en -> fr ({len(pairs)} pairs)"
    return ratio_population(
        name, "pair", "exact match", len(pairs) // 10, per, [("copy-lower", "copy")],
        binary=True, models="rules, no training",
    )  # fmt: skip


# ------------------------------------------------------------------------------------- drawing

CHECKED = 3  # draws of each population whose sums-as-units intervals are checked on the items


def draws(n_units: int, n: int, samples: int, rng: np.random.Generator) -> np.ndarray:
    """``[samples, n]`` unit numbers, each row ``n`` distinct units drawn uniformly."""
    return np.argsort(rng.random((samples, n_units)), axis=1)[:, :n]


def _gather(pop: Ratio, model: str, row: np.ndarray) -> np.ndarray:
    return np.concatenate([pop.items[model][pop.starts[j] : pop.starts[j + 1]] for j in row])


def _singletons(pop: Ratio) -> bool:
    return bool(np.all(pop.N == 1))


def _t_cover(total, n, sq, target) -> np.ndarray:
    """Whether Student t over n items (sum ``total``, sum of squares ``sq``) covers ``target``."""
    mean = total / n
    var = np.maximum(sq - n * mean**2, 0.0) / (n - 1)
    half = sps.t.ppf(0.5 + stats.CONFIDENCE / 2, n - 1) * np.sqrt(var / n)
    return np.abs(mean - target) <= half


def items_cover(pop: Ratio, model: str, idx: np.ndarray, truth: float) -> float | None:
    """Coverage of the item-level interval (each item taken as a unit): Student t over tokens,
    Wilson over 0/1 items; ``None`` when the units are single items (it is the same interval)."""
    if _singletons(pop):
        return None
    k, n = pop.S[model][idx].sum(axis=1), pop.N[idx].sum(axis=1)
    if pop.binary:
        ivs = [stats.wilson_interval(int(round(a)), int(b)) for a, b in zip(k, n, strict=True)]
        return float(np.mean([iv.lo <= truth <= iv.hi for iv in ivs]))
    return float(np.mean(_t_cover(k, n, pop.Q[model][idx].sum(axis=1), truth)))


def value_row(pop: Ratio, model: str, method: str, idx: np.ndarray, rng) -> dict:
    """Coverage of one model's value over ``idx`` draws by the estimator ``method``."""
    S, N = pop.S[model], pop.N
    truth = math.fsum(S) / math.fsum(N)
    units = stats.units_from_lengths([1] * idx.shape[1])
    hits = 0
    for row in idx:
        if method == stats.Method.CLUSTER_BOOTSTRAP:
            u = np.repeat(np.arange(row.size), N[row].astype(np.int64))
            iv = stats.estimate(method, _gather(pop, model, row), u, rng)
        elif method == stats.Method.CLUSTER_RATIO:
            iv = stats.estimate(method, S[row], units, rng, weights=N[row])
        else:
            iv = stats.estimate(method, S[row], units, rng)
        hits += iv.lo <= truth <= iv.hi
    return {
        "kind": pop.metric,
        "corpus": pop.corpus,
        "unit": pop.unit,
        "n": idx.shape[1],
        "model": model,
        "method": str(method),
        "value": truth * pop.scale,
        "cover": hits / len(idx),
        "cover_items": items_cover(pop, model, idx, truth),
    }


def paired_row(pop: Ratio, a: str, b: str, idx: np.ndarray, rng) -> dict:
    """The paired comparison A - B over ``idx`` draws: coverage of the population delta, and
    the calls at p < 0.05 on the null ``S'^A_g = S^A_g - delta N_g`` (population effect 0)."""
    SA, SB, N = pop.S[a], pop.S[b], pop.N
    single = _singletons(pop)
    kind = "mean" if single else "ratio"
    delta = (math.fsum(SA) - math.fsum(SB)) / math.fsum(N)
    SA0 = SA - delta * N
    units = stats.units_from_lengths([1] * idx.shape[1])
    cover = flips = t_calls = 0
    for row in idx:
        kw = {} if single else {"weights": N[row]}
        r = stats.paired_difference(SA[row], SB[row], units, rng, kind=kind, n_perm=N_PERM, **kw)
        cover += r.lo <= delta <= r.hi
        r0 = stats.paired_difference(SA0[row], SB[row], units, rng, kind=kind, n_perm=N_PERM, **kw)
        flips += r0.p < stats.ALPHA
        t_calls += not (r0.lo <= 0.0 <= r0.hi)
    out = {
        "kind": pop.metric,
        "corpus": pop.corpus,
        "unit": pop.unit,
        "n": idx.shape[1],
        "pair": f"{a} - {b}",
        "delta": delta * pop.scale,
        "cover": cover / len(idx),
        "fpr": flips / len(idx),
        "fpr_t": t_calls / len(idx),
        "cover_items": None,
        "fpr_items": None,
    }
    if not single:
        D, QD, n = SA - SB, pop.QD[(a, b)], N[idx].sum(axis=1)
        D0, QD0 = D - delta * N, QD - 2 * delta * D + delta**2 * N  # every item minus delta
        out["cover_items"] = float(np.mean(_t_cover(D[idx].sum(1), n, QD[idx].sum(1), delta)))
        out["fpr_items"] = float(np.mean(~_t_cover(D0[idx].sum(1), n, QD0[idx].sum(1), 0.0)))
    return out


def check_sums(pop: Ratio, idx: np.ndarray, pairs, seed: int) -> None:
    """The sums-as-units calls equal the item-level calls (first :data:`CHECKED` draws), and
    the vectorised item-level t interval equals :func:`tinyllm.stats.iid`."""
    if _singletons(pop):
        return
    for row in idx[:CHECKED]:
        units = stats.units_from_lengths(pop.N[row].astype(np.int64).tolist())
        ones = stats.units_from_lengths([1] * row.size)
        for m in pop.S:
            x = _gather(pop, m, row)
            got = stats.cluster_ratio(pop.S[m][row], ones, weights=pop.N[row])
            want = stats.cluster_ratio(x, units)
            assert np.allclose([got.lo, got.hi], [want.lo, want.hi], rtol=1e-9), (got, want)
            if not pop.binary:
                iv = stats.iid(x)
                k, n, q = x.sum(), x.size, float(np.dot(x, x))
                assert _t_cover(k, n, q, iv.lo + 1e-9 * abs(iv.lo)), (pop.corpus, m)
                assert not _t_cover(k, n, q, iv.lo - 1e-6 * abs(iv.lo)), (pop.corpus, m)
        for a, b in pairs:
            xa, xb = _gather(pop, a, row), _gather(pop, b, row)
            r1 = stats.paired_difference(
                pop.S[a][row], pop.S[b][row], ones, np.random.default_rng(seed),
                kind="ratio", weights=pop.N[row], n_perm=N_PERM,
            )  # fmt: skip
            r2 = stats.paired_difference(
                xa, xb, units, np.random.default_rng(seed), kind="ratio", n_perm=N_PERM
            )
            assert np.allclose([r1.delta, r1.lo, r1.hi], [r2.delta, r2.lo, r2.hi], rtol=1e-9)
            assert r1.p == r2.p, (r1.p, r2.p)


def methods_of(pop: Ratio) -> list[str]:
    """The estimators a row of this population reports (docs/definitions.md, "Intervals")."""
    if _singletons(pop):
        return [stats.Method.WILSON]
    if pop.metric == "acc":  # multiple-choice items clustered in documents
        return [stats.Method.CLUSTER_BOOTSTRAP, stats.Method.CLUSTER_RATIO]
    return [stats.Method.CLUSTER_RATIO]


def pairs_of(pop: Ratio) -> list[tuple[str, str]]:
    return [k for k in pop.QD if k[0] in pop.S and k[1] in pop.S]


def populations(seed: int, gpt_steps: int, corpora) -> list[Ratio]:
    pops: list[Ratio] = []
    lee: dict = {}
    if "lee" in corpora or "mc" in corpora:
        lee_pops, lee = lee_populations(seed, gpt_steps)
        pops += lee_pops if "lee" in corpora else []
    if "head500" in corpora:
        pops.append(head500_population(seed))
    if "polarity" in corpora:
        pops += polarity_populations(seed)
    if "mc" in corpora:
        pops += mc_populations(lee, seed)
    if "cldr" in corpora:
        pops.append(cldr_population())
    return pops


CORPORA = ("lee", "head500", "polarity", "mc", "cldr")


def simulate(pops: list[Ratio], samples: int, seed: int, log=print) -> dict:
    """Every row over ``samples`` draws of each population:
    ``{"values": [...], "paired": [...], "populations": [(corpus, unit, G, items)]}``."""
    values, paired = [], []
    for p, pop in enumerate(pops):
        idx = draws(pop.N.size, pop.n_draw, samples, np.random.default_rng([seed, p]))
        check_sums(pop, idx, pairs_of(pop), seed)
        rng = np.random.default_rng([seed, p, 1])
        for m in pop.S:
            for method in methods_of(pop):
                values.append(value_row(pop, m, method, idx, rng) | {"fitted": pop.models})
                log(_line(values[-1]))
        for a, b in pairs_of(pop):
            paired.append(paired_row(pop, a, b, idx, rng) | {"fitted": pop.models})
            log(_line(paired[-1]))
    info = {(p.corpus, p.unit, int(p.N.size), int(p.N.sum())): None for p in pops}
    return {"values": values, "paired": paired, "populations": list(info)}


def run(samples: int, seed: int, gpt_steps: int, corpora=CORPORA, log=print) -> dict:
    """Build the populations, then :func:`simulate`."""
    t0 = time.perf_counter()
    pops = populations(seed, gpt_steps, corpora)
    log(f"populations built in {time.perf_counter() - t0:.1f} s")
    return simulate(pops, samples, seed, log)


def _line(r: dict) -> str:
    what = r.get("model") or r.get("pair")
    keys = ("cover", "cover_items", "fpr", "fpr_t", "fpr_items")
    return f"  {r['kind']:14s} {r['corpus'][:32]:32s} {what:18s} " + " ".join(
        f"{k} {r[k]:.3f}" for k in keys if r.get(k) is not None
    )


# ------------------------------------------------------------------------------------ the table


def _f(x: float | None) -> str:
    return "=" if x is None else f"{x:.3f}"


def _bar(x: float, bar: tuple[float, float]) -> str:
    return f"{x:.3f}" if bar[0] <= x <= bar[1] else f"**{x:.3f}** (missed)"


def misses(res: dict) -> list[str]:
    """Every unit-level figure outside its bar, as a line."""
    out = []
    for r in res["values"]:
        if not COVER_BAR[0] <= r["cover"] <= COVER_BAR[1]:
            out.append(f"{r['kind']}, {r['corpus']}, {r['model']}, {r['method']}: {r['cover']:.3f}")
    for r in res["paired"]:
        what = f"{r['kind']}, {r['corpus']}, {r['pair']}"
        if not COVER_BAR[0] <= r["cover"] <= COVER_BAR[1]:
            out.append(f"{what}: delta coverage {r['cover']:.3f}")
        if not FPR_BAR[0] <= r["fpr"] <= FPR_BAR[1]:
            out.append(f"{what}: false-positive rate {r['fpr']:.3f}")
    return out


def markdown(res: dict, command: str, seed: int, samples: int, info: str, notes: str = "") -> str:
    se = math.sqrt(0.95 * 0.05 / samples)
    lines = [
        SECTION,
        "",
        BEGIN,
        "",
        f"`{command}` (bench/bench_coverage.py), seed {seed}, {info}. {samples:,} draws per "
        "population, each of n units without replacement; the same draws for every row of a "
        "population. Bars: every coverage over units in "
        f"[{COVER_BAR[0]}, {COVER_BAR[1]}], every false-positive rate of the paired test "
        f"(sign flips over units, what the verdict reads) in [{FPR_BAR[0]}, {FPR_BAR[1]}]. "
        "The item-level columns are the intervals computed as if every token, position or item "
        "were a unit (Student t; Wilson for 0/1 items), for contrast; `=` where the units are "
        f"single items, so both are the same. Monte Carlo standard error of a share near 0.95 "
        f"or 0.05 over {samples:,} draws: {se:.3f}.",
        "",
        "Populations (units, items): "
        + "; ".join(f"{c}: {g} {u}s, {n:,} items" for c, u, g, n in res["populations"])
        + ".",
        "",
        "Values: the share of 95% intervals that contain the population value.",
        "",
        "| kind | population | n drawn | model (fitted) | value over all units | interval "
        "| covers, over units | covers, over items |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in res["values"]:
        lines.append(
            f"| {r['kind']} | {r['corpus']} | {r['n']} {r['unit']}s | {r['model']} "
            f"({r['fitted']}) | {r['value']:.4f} | {r['method']} "
            f"| {_bar(r['cover'], COVER_BAR)} | {_f(r['cover_items'])} |"
        )
    lines += [
        "",
        "Paired A - B: the share of 95% intervals (`paired_t`) that contain the population "
        "difference, and the share of draws called at p < 0.05 on the null with zero population "
        "effect.",
        "",
        "| kind | population | n drawn | A - B (fitted) | delta over all units "
        "| covers, over units | covers, over items | p < 0.05: sign flips over units "
        "| t over units | t over items |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in res["paired"]:
        lines.append(
            f"| {r['kind']} | {r['corpus']} | {r['n']} {r['unit']}s | {r['pair']} "
            f"({r['fitted']}) | {r['delta']:+.4f} | {_bar(r['cover'], COVER_BAR)} "
            f"| {_f(r['cover_items'])} | {_bar(r['fpr'], FPR_BAR)} | {r['fpr_t']:.3f} "
            f"| {_f(r['fpr_items'])} |"
        )
    missed = misses(res)
    lines += [
        "",
        "Bars: "
        + (
            "all met in this run."
            if not missed
            else "missed in this run: " + "; ".join(missed) + "."
        ),
        "",
        NOTES,
        *([notes, ""] if notes else []),
        END,
        "",
    ]
    return "\n".join(lines)


NOTES = """\
How the rows are made. bpb and accuracy over positions: per-unit sums `S_g` (summed NLL in nats,
or correct positions) and `N_g` (bytes = tokens of the byte-level families, or positions); the
value over all units is `sum S_g / sum N_g` (bpb: over ln 2) and a draw's interval is
`cluster_ratio` over its n units (G = n, t with n - 1 df). The null of a ratio row shifts A's
per-unit sums, `S'^A_g = S^A_g - (r_A - r_B) N_g` with `r_A`, `r_B` the population values, which
is A's per-token NLL (or 0/1) minus `r_A - r_B` on every item: the population difference is then
exactly 0 and every unit keeps its own real difference `S^A_g - S^B_g` less its share
`(r_A - r_B) N_g`; the sign-flip test flips `D'_g = S'^A_g - S^B_g`. Rows with one item per
unit (exact match, the first item of each document) shift A's items by the population mean
difference and use `paired_difference(kind="mean")`. Multiple choice: at every 10th word of a
Lee document, the true next word against 3 other words of the corpus with the same byte length,
each scored by `LL(" " + word)` after the context by the fold model that did not read the
document, acc = argmax (ties to the first choice).

Models: bigram (add-k 0.5) and ngram (Kneser-Ney, order 5) from tinyllm.models; on lee, head500
and the multiple-choice items cross-fitted over 5 folds by document (`i % 5`); the GPT in the
zoo's recipe (block 32, 2 layers, 4 heads, 64 wide; batch 32, lr 1e-2; steps in the line above)
cross-fitted over 2 folds, each fold's documents scored as one text by strided windows (ctx 32,
stride 16) as `tinyllm eval` scores it; on the polarity snippets, fitted on the 293 Lee documents
(other text). Exact match: the zoo's copy baseline (`tinyllm.models.copy_baseline`, beam 1) and
copy with the first letter lowercased, a rule with no training (French writes language names in
lower case).

Why coverage sits near 0.96 and the false-positive rate near 0.04, rather than 0.95 and 0.05: a
draw takes about a tenth of a finite population without replacement, so the true standard error
is about `sqrt(1 - n/G)` = 0.95 of the one the intervals and the sign-flip test assume (an
unbounded population); calibrated methods then cover about 0.96 and call about 0.04. A population
is one corpus, so its figures also carry the corpus's quirks (a few long or odd units) besides
the Monte Carlo error above. head500's articles vary most in length (0.6 to 46 KB, 25 drawn):
there the standard error is estimated from few units of very unequal size, which is where we
expect a ratio estimator's interval to fall short first.
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--samples", type=int, default=2000, help="draws per population")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--gpt-steps", type=int, default=GPT_STEPS, help="0: no GPT rows")
    ap.add_argument("--no-write", action="store_true", help="print only")
    ap.add_argument("--notes", default="", help="a paragraph appended to the table's notes")
    ap.add_argument("--out", default=str(ROOT / "docs" / "benchmarks.md"))
    args = ap.parse_args()
    torch.set_num_threads(1)
    t0, load0 = time.perf_counter(), os.getloadavg()[0]
    res = run(args.samples, args.seed, args.gpt_steps)
    command = "python bench/bench_coverage.py" + "".join(
        f" --{k} {v}"
        for k, v, d in (("samples", args.samples, 2000), ("seed", args.seed, 0))
        + (("gpt-steps", args.gpt_steps, GPT_STEPS),)
        if v != d
    )
    info = (
        f"{datetime.date.today().isoformat()}, {os.cpu_count()} cores, load average "
        f"{load0:.1f} at the start and {os.getloadavg()[0]:.1f} at the end, "
        f"{(time.perf_counter() - t0) / 60:.1f} minutes, GPT {args.gpt_steps} steps per fold"
    )
    text = markdown(res, command, args.seed, args.samples, info, args.notes)
    show(text, SECTION, write=not args.no_write, path=Path(args.out))


if __name__ == "__main__":
    main()
