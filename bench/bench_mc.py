"""Benchmark: multiple choice, tinyllm's ``choice_lls`` against lm-evaluation-harness.

One model object (transformers ``GPT2LMHeadModel`` built from a ``GPT2Config`` with random
weights, no download) and one tokenizer are shared by both sides. Items are 4-choice
"which sentence comes next" questions built from real text (gensim's lee corpus): the context is
one to three sentences of a news story, the choices are the story's next sentence and three
sentences from other stories, each cut to at most ``max_words`` words, ``target_delimiter = " "``.

* lm-eval: ``HFLM(pretrained=model, tokenizer=tok, batch_size=8).loglikelihood(requests)`` with
  one ``Instance`` per (context, " " + choice), exactly what a multiple-choice task sends it;
* tinyllm: ``lm.choice_lls(model, tok, items, target_delimiter=" ")``.

Items are cut into blocks; each block is scored by both, alternating which goes first, so
background load hits both alike (this machine is shared). Reported: items/s of each, the ratio
per block (ours / lm-eval) and its median, the largest per-choice log-likelihood difference, and
per-item agreement of acc (argmax LL) and acc_norm (lm-eval: LL / len(choice) in characters;
ours: LL / UTF-8 bytes of the choice; the same on ASCII text). The load average is printed.

    python bench/bench_mc.py                 # both shapes, writes docs/benchmarks.md
    python bench/bench_mc.py --quick         # tiny shape, few items, prints, writes nothing

Needs the ``bench`` extra (``pip install -e .[bench]``: lm_eval[hf]); never part of make test.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import sys
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from docsection import show  # noqa: E402

from tinyllm.eval import lm  # noqa: E402

SHAPES = {
    "tiny": dict(n_layer=4, n_embd=256, n_head=4, ctx=256, tok="byte", items=200, blocks=8),
    "gpt2-small": dict(n_layer=12, n_embd=768, n_head=12, ctx=1024, tok="bpe", items=48, blocks=6),
    # a Llama (RMSNorm, RoPE, SwiGLU, grouped-query attention) with Llama 2's 32k vocabulary:
    # no GPT-2 twin, so the generic path (hidden-state hook + the model's own KV cache)
    "llama": dict(
        arch="llama",
        n_layer=4,
        n_embd=256,
        n_head=4,
        n_kv_head=2,
        ffn=688,
        ctx=256,
        tok="bpe",
        vocab=32000,
        items=96,
        blocks=6,
    ),
}
# (kind, max words per sentence, max context sentences): contexts fit the tiny model's 256
# bytes, so nothing is truncated (with truncation every choice has its own context cut)
TASKS = {"sentence": ("sentence", 12, 2), "cloze": ("cloze", 16, 2)}
SECTION = "## Multiple choice against lm-evaluation-harness"
LLAMA_SECTION = "## Multiple choice against lm-evaluation-harness: a Llama shape"
"""``--shapes llama`` writes its own section, so the GPT-2 rows stay as they were measured."""


def sentences() -> list[list[str]]:
    """Sentences of each lee document (ASCII-only documents, so that characters = bytes)."""
    from tinyllm.data import lee_documents

    docs = []
    for d in lee_documents():
        if not d.isascii():
            continue
        s = [x.strip() for x in re.split(r"(?<=[.!?])\s+", d) if len(x.split()) >= 4]
        if len(s) >= 4:
            docs.append(s)
    return docs


def make_items(n: int, seed: int, kind: str, max_words: int, max_sents: int) -> list[dict]:
    """``n`` 4-choice items from the lee corpus, ``target_delimiter = " "``.

    * ``sentence`` (HellaSwag's shape): context = 1..max_sents sentences of a story, choices =
      the story's next sentence and three sentences of other stories;
    * ``cloze`` (ARC / LAMBADA's shape: long context, short answers): context = 1..max_sents
      sentences and the first words of the next one, choices = its next 1-3 words and three
      word runs of the same length from other stories.

    Every sentence is cut to at most ``max_words`` words.
    """
    rng = np.random.default_rng(seed)
    docs = sentences()

    def cut(s: str) -> str:
        return " ".join(s.split()[:max_words])

    items = []
    while len(items) < n:
        d = int(rng.integers(len(docs)))
        k = int(rng.integers(1, max_sents + 1))
        if len(docs[d]) <= k:
            continue
        start = int(rng.integers(0, len(docs[d]) - k))
        ctx = " ".join(cut(s) for s in docs[d][start : start + k])
        nxt = cut(docs[d][start + k]).split()
        if kind == "sentence":
            right = " ".join(nxt)
            pick = lambda o: cut(docs[o][int(rng.integers(len(docs[o])))])  # noqa: E731
        else:
            m = int(rng.integers(1, 4))
            if len(nxt) < m + 2:
                continue
            at = int(rng.integers(1, len(nxt) - m + 1))
            ctx += " " + " ".join(nxt[:at])
            right = " ".join(nxt[at : at + m])

            def pick(o: int, m: int = m) -> str:
                w = " ".join(docs[o]).split()
                j = int(rng.integers(0, len(w) - m))
                return " ".join(w[j : j + m])

        wrong: list[str] = []
        while len(wrong) < 3:
            o = int(rng.integers(len(docs)))
            w = pick(o) if o != d else right
            if w != right and w not in wrong:  # four different texts: no exact ties
                wrong.append(w)
        gold = int(rng.integers(4))
        choices = wrong[:gold] + [right] + wrong[gold:]
        items.append({"context": ctx, "choices": choices, "gold": gold, "target_delimiter": " "})
    return items


def make_tokenizer(kind: str, texts: list[str]):
    """A Hugging Face fast tokenizer built here (no download): byte-level with no merges (one
    token per byte, + an end-of-text token) or a byte-level BPE of 8000 tokens trained on the
    corpus."""
    import tokenizers
    from transformers import PreTrainedTokenizerFast

    bpe = tokenizers.Tokenizer(tokenizers.models.BPE())
    bpe.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = tokenizers.decoders.ByteLevel()
    size = 257 if kind == "byte" else 8000
    trainer = tokenizers.trainers.BpeTrainer(
        vocab_size=size,
        initial_alphabet=tokenizers.pre_tokenizers.ByteLevel.alphabet(),
        special_tokens=["<|endoftext|>"],
        show_progress=False,
    )
    bpe.train_from_iterator(texts, trainer)
    tok = PreTrainedTokenizerFast(tokenizer_object=bpe, eos_token="<|endoftext|>")
    return tok


def build(shape: dict, vocab: int, seed: int = 0):
    from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    if shape.get("arch") == "llama":
        return LlamaForCausalLM(
            LlamaConfig(
                vocab_size=vocab,
                hidden_size=shape["n_embd"],
                intermediate_size=shape["ffn"],
                num_hidden_layers=shape["n_layer"],
                num_attention_heads=shape["n_head"],
                num_key_value_heads=shape["n_kv_head"],
                max_position_embeddings=shape["ctx"],
            )
        ).eval()
    cfg = GPT2Config(
        vocab_size=vocab,
        n_positions=shape["ctx"],
        n_embd=shape["n_embd"],
        n_layer=shape["n_layer"],
        n_head=shape["n_head"],
    )
    return GPT2LMHeadModel(cfg).eval()


def lmeval_lls(hflm, items: list[dict]) -> list[np.ndarray]:
    from lm_eval.api.instance import Instance

    reqs = [
        Instance("loglikelihood", {}, (it["context"], it["target_delimiter"] + c), j)
        for it in items
        for j, c in enumerate(it["choices"])
    ]
    res = hflm.loglikelihood(reqs, disable_tqdm=True)
    out, k = [], 0
    for it in items:
        out.append(np.asarray([r[0] for r in res[k : k + len(it["choices"])]]))
        k += len(it["choices"])
    return out


def ours_lls(model, tok, items: list[dict]) -> list[np.ndarray]:
    return lm.choice_lls(model, tok, items, target_delimiter=" ")


def run_shape(name: str, shape: dict, task: str, n_items: int, n_blocks: int, seed: int) -> dict:
    from lm_eval.models.huggingface import HFLM

    items = make_items(n_items, seed, *TASKS[task])
    texts = [" ".join(s) for s in sentences()]
    tok = make_tokenizer(shape["tok"], texts)
    vocab = shape.get("vocab", 257 if shape["tok"] == "byte" else 50257)
    model = build(shape, vocab)
    hflm = HFLM(
        pretrained=model, tokenizer=tok, batch_size=8, device="cpu", max_length=shape["ctx"]
    )
    # warm-up (and the one-time cache check of our path) on items not timed
    warm = make_items(4, seed + 1, *TASKS[task])
    lmeval_lls(hflm, warm)
    ours_lls(model, tok, warm)
    blocks = np.array_split(np.arange(n_items), n_blocks)
    t_l, t_o, ratios = 0.0, 0.0, []
    w_l, w_o = 0.0, 0.0  # wall seconds, for reference
    ll_l: list[np.ndarray] = []
    ll_o: list[np.ndarray] = []
    for b, idx in enumerate(blocks):
        sub = [items[i] for i in idx]
        order = ("lmeval", "ours") if b % 2 == 0 else ("ours", "lmeval")
        times, walls = {}, {}
        for who in order:
            # CPU seconds of this process (all its threads): on the shared 2 cores the wall
            # time is mostly other jobs' (a 4 ms block forward took 24 ms of wall time)
            t0, w0 = time.process_time(), time.perf_counter()
            got = lmeval_lls(hflm, sub) if who == "lmeval" else ours_lls(model, tok, sub)
            times[who] = time.process_time() - t0
            walls[who] = time.perf_counter() - w0
            (ll_l if who == "lmeval" else ll_o).extend(got)
        t_l += times["lmeval"]
        t_o += times["ours"]
        w_l += walls["lmeval"]
        w_o += walls["ours"]
        ratios.append(times["lmeval"] / times["ours"])
        print(
            f"  {name} {task} block {b}: lm-eval {len(sub) / times['lmeval']:.2f} items/CPU s, "
            f"ours {len(sub) / times['ours']:.2f} items/s, x{ratios[-1]:.2f} "
            f"(load {os.getloadavg()[0]:.1f})",
            flush=True,
        )
    # ll_l / ll_o were appended block by block in item order
    diff = max(float(np.abs(a - o).max()) for a, o in zip(ll_l, ll_o, strict=True))
    chars = [np.asarray([len(c) for c in it["choices"]], float) for it in items]
    acc_l = [int(np.argmax(a)) for a in ll_l]
    acc_o = list(lm.item_predictions(ll_o, items, "acc"))
    norm_l = [int(np.argmax(a / c)) for a, c in zip(ll_l, chars, strict=True)]
    norm_o = list(lm.item_predictions(ll_o, items, "acc_norm"))
    n_tok = sum(
        len(tok.encode(it["context"])) + sum(len(tok.encode(" " + c)) for c in it["choices"])
        for it in items
    )
    return {
        "shape": name,
        "task": task,
        "seed": seed,
        "params_m": sum(p.numel() for p in model.parameters()) / 1e6,
        "items": n_items,
        "blocks": n_blocks,
        "tokens_per_item": n_tok / n_items,
        "lmeval_items_s": n_items / t_l,
        "ours_items_s": n_items / t_o,
        "ratio_total": t_l / t_o,
        "ratio_wall": w_l / w_o,
        "ratio_median": float(np.median(ratios)),
        "ratio_min": float(min(ratios)),
        "blocks_faster": int(sum(r > 1 for r in ratios)),
        "max_ll_diff": diff,
        "acc_agree": int(sum(a == o for a, o in zip(acc_l, acc_o, strict=True))),
        "acc_norm_agree": int(sum(a == o for a, o in zip(norm_l, norm_o, strict=True))),
        # where the predictions differ: the item, its two picks and lm-eval's LL gap between them
        "disagree": [
            (i, acc_l[i], int(acc_o[i]), float(ll_l[i][acc_l[i]] - ll_l[i][acc_o[i]]))
            for i in range(n_items)
            if acc_l[i] != acc_o[i]
        ],
    }


def items_of(r: dict) -> list[dict]:
    """The items a result row was measured on (rebuilt from its task and seed)."""
    return make_items(r["items"], r["seed"], *TASKS[r["task"]])


def table(rows: list[dict], cmd: str, load: tuple[float, float], section: str = SECTION) -> str:
    lines = [
        section,
        "",
        f"Command: `{cmd}` (1 torch thread, {platform.processor() or platform.machine()}, "
        f"load average {load[0]:.1f} at the start, {load[1]:.1f} at the end: the machine is shared). "
        "Items/s are per CPU second of the process (`time.process_time`, all threads, so "
        "lm-eval's tokenizer threads count); the wall-time ratio is given for reference.",
        "",
        "| shape | task | params | items | tokens/item | lm-eval items/s | tinyllm items/s | speed-up "
        "(total) | per block: median, min, faster | wall-time speed-up | max abs LL diff | acc agree "
        "| acc_norm agree |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['shape']} | {r['task']} | {r['params_m']:.1f}M | {r['items']} | {r['tokens_per_item']:.0f} | "
            f"{r['lmeval_items_s']:.2f} | {r['ours_items_s']:.2f} | {r['ratio_total']:.2f}x | "
            f"{r['ratio_median']:.2f}x, {r['ratio_min']:.2f}x, {r['blocks_faster']}/{r['blocks']} | "
            f"{r['ratio_wall']:.2f}x | "
            f"{r['max_ll_diff']:.1e} | {r['acc_agree']}/{r['items']} | "
            f"{r['acc_norm_agree']}/{r['items']} |"
        )
    for r in rows:
        for i, a, o, gap in r.get("disagree", []):
            lines += [
                "",
                f"{r['shape']} {r['task']}, item {i}: acc picks choice {a} (lm-eval) vs {o} "
                f"(tinyllm); lm-eval's own LLs of the two differ by {gap:.1e} nats, a tie "
                "within float32 rounding (`choices` {a} and {o} are "
                + (
                    "the same text"
                    if items_of(r)[i]["choices"][a] == items_of(r)[i]["choices"][o]
                    else "different texts"
                )
                + ").",
            ]
    lines += [
        "",
        "lm-eval 0.4.13 `HFLM.loglikelihood` at batch 8 (its requests sorted by length, one-token "
        "continuations grouped); tinyllm `choice_lls` at its default token budget: each context "
        "once, choices from the cached keys/values, the last choice token never fed, the output "
        "head only at scored positions"
        + (
            "; the LlamaForCausalLM is read through its base model (the hidden-state hook, its "
            "own DynamicCache; `tinyllm.models.hf.BaseModelView`), checked against its own "
            "logits and plain path on first use. "
            if section == LLAMA_SECTION
            else ", the context pass's last block at each context's last token only; the "
            "GPT2LMHeadModel is run by tinyllm's GPT on views of its own weights "
            "(`tinyllm.models.hf.gpt2_twin`, checked against the model's own logits and plain "
            "path on first use). "
        )
        + "Same model object, same tokenizer, blocks alternated "
        "(which side goes first swaps every block).",
        "",
        bar_line(rows),
        "",
    ]
    return "\n".join(lines)


BAR_RATIO, BAR_LL = 2.0, 1e-4
"""The bar: at least 2x lm-eval's items/s, log-likelihoods within 1e-4 nats of lm-eval's."""


def bar_line(rows: list[dict]) -> str:
    """Whether every row of this run meets the bar, with each row's total speed-up and its
    slowest block, and the largest LL difference."""
    met = all(r["ratio_total"] >= BAR_RATIO and r["max_ll_diff"] <= BAR_LL for r in rows)
    each = "; ".join(
        f"{r['shape']} {r['task']} {r['ratio_total']:.2f}x (slowest block {r['ratio_min']:.2f}x)"
        for r in rows
    )
    worst = max(r["max_ll_diff"] for r in rows)
    return (
        f"The bar (>= {BAR_RATIO:g}x lm-eval's items/s, LLs within {BAR_LL:.0e}) is "
        f"{'met' if met else 'NOT met'} in this run: {each}; largest LL difference {worst:.1e}."
    )


AGREE_SECTION = "## A converted lm-eval task: per-item agreement"

TASK_YAML = """\
task: {name}
dataset_path: json
dataset_kwargs:
  data_files:
    test: {data}
test_split: test
output_type: multiple_choice
doc_to_text: "{{{{context}}}}"
doc_to_choice: "{{{{endings}}}}"
doc_to_target: label
target_delimiter: " "
metric_list:
  - metric: acc
  - metric: acc_norm
"""


def run_agreement(
    name: str, shape: dict, task: str, n_items: int, seed: int, workdir: Path
) -> dict:
    """End to end: the bench items written as an lm-eval task (YAML + JSONL, HellaSwag-style
    fields), run by lm-eval's own evaluator (``simple_evaluate``, per-sample acc / acc_norm);
    the same YAML converted by ``tinyllm task import-lmeval`` and run by ``lm.run_task``."""
    from lm_eval import evaluator
    from lm_eval.models.huggingface import HFLM
    from lm_eval.tasks import TaskManager

    from tinyllm.lmeval_import import import_task

    items = make_items(n_items, seed, *TASKS[task])
    docs = [
        {"context": it["context"], "endings": it["choices"], "label": it["gold"]} for it in items
    ]
    tname = f"tinyllm_bench_{task}"
    workdir.mkdir(parents=True, exist_ok=True)
    data = workdir / f"{tname}.jsonl"
    data.write_text("".join(json.dumps(d) + "\n" for d in docs), encoding="utf-8")
    yml = workdir / f"{tname}.yaml"
    yml.write_text(TASK_YAML.format(name=tname, data=str(data)), encoding="utf-8")
    tok = make_tokenizer(shape["tok"], [" ".join(s) for s in sentences()])
    model = build(shape, 257 if shape["tok"] == "byte" else 50257)
    hflm = HFLM(
        pretrained=model, tokenizer=tok, batch_size=8, device="cpu", max_length=shape["ctx"]
    )
    res = evaluator.simple_evaluate(
        model=hflm,
        tasks=[tname],
        task_manager=TaskManager(include_path=str(workdir), include_defaults=False),
        log_samples=True,
        bootstrap_iters=0,
    )
    samples = sorted(res["samples"][tname], key=lambda r: r["doc_id"])
    conv, _ = import_task(yml, workdir / f"{tname}.tinyllm.jsonl")
    rng = np.random.default_rng(0)
    ours = {
        m: lm.run_task(model, tok, conv, m, rng, n_boot=10).per_item for m in ("acc", "acc_norm")
    }
    lls_o = lm.choice_lls(model, tok, lm.read_task(conv))
    lls_l = [np.asarray([float(r[0][0]) for r in s["resps"]]) for s in samples]
    return {
        "shape": name,
        "task": task,
        "items": n_items,
        "acc_same": int(
            sum(float(s["acc"]) == a for s, a in zip(samples, ours["acc"], strict=True))
        ),
        "acc_norm_same": int(
            sum(float(s["acc_norm"]) == a for s, a in zip(samples, ours["acc_norm"], strict=True))
        ),
        "acc": (float(np.mean([s["acc"] for s in samples])), float(ours["acc"].mean())),
        "acc_norm": (
            float(np.mean([s["acc_norm"] for s in samples])),
            float(ours["acc_norm"].mean()),
        ),
        "max_ll_diff": max(float(np.abs(a - b).max()) for a, b in zip(lls_l, lls_o, strict=True)),
    }


def agree_table(rows: list[dict], cmd: str, load: tuple[float, float]) -> str:
    lines = [
        AGREE_SECTION,
        "",
        f"Command: `{cmd}` (load average {load[0]:.1f} at the start, {load[1]:.1f} at the end). "
        "The bench items written as an lm-eval task (YAML + JSONL data), run by lm-eval 0.4.13's "
        "`simple_evaluate` (per-sample acc and acc_norm, `log_samples`), and the same YAML "
        "converted by `tinyllm task import-lmeval` and run by `lm.run_task`; same model object "
        "and tokenizer.",
        "",
        "| shape | task | items | acc same | acc_norm same | acc lm-eval / tinyllm "
        "| acc_norm lm-eval / tinyllm | max abs LL diff |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['shape']} | {r['task']} | {r['items']} | {r['acc_same']}/{r['items']} "
            f"| {r['acc_norm_same']}/{r['items']} | {r['acc'][0]:.4f} / {r['acc'][1]:.4f} "
            f"| {r['acc_norm'][0]:.4f} / {r['acc_norm'][1]:.4f} | {r['max_ll_diff']:.1e} |"
        )
    lines.append("")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="tiny shape, 40 items, write nothing")
    ap.add_argument("--shapes", default="tiny,gpt2-small")
    ap.add_argument("--tasks", default="sentence,cloze")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", help="also write the rows to this JSON file")
    ap.add_argument(
        "--agree",
        action="store_true",
        help="per-item acc/acc_norm: lm-eval's evaluator on a task vs the converted task",
    )
    ap.add_argument("--agree-items", default="tiny:200,gpt2-small:24")
    args = ap.parse_args()
    torch.set_num_threads(1)
    load0 = os.getloadavg()[0]
    if args.agree:
        import tempfile

        rows = []
        with tempfile.TemporaryDirectory() as d:
            for spec in args.agree_items.split(","):
                name, n = spec.split(":")
                for task in args.tasks.split(","):
                    rows.append(
                        run_agreement(name, SHAPES[name], task, int(n), args.seed, Path(d) / name)
                    )
                    print(json.dumps(rows[-1]), flush=True)
        cmd = f"python bench/bench_mc.py --agree --agree-items {args.agree_items}"
        if args.tasks != "sentence,cloze":
            cmd += f" --tasks {args.tasks}"
        text = agree_table(rows, cmd, (load0, os.getloadavg()[0]))
        show(text, AGREE_SECTION)
        return
    rows = []
    for name in ["tiny"] if args.quick else args.shapes.split(","):
        shape = SHAPES[name]
        n, nb = (40, 4) if args.quick else (shape["items"], shape["blocks"])
        for task in args.tasks.split(","):
            rows.append(run_shape(name, shape, task, n, nb, args.seed))
            print(json.dumps(rows[-1]), flush=True)
    cmd = "python bench/bench_mc.py" + (" --quick" if args.quick else "")
    if args.shapes != "tiny,gpt2-small":
        cmd += f" --shapes {args.shapes}"
    if args.tasks != "sentence,cloze":
        cmd += f" --tasks {args.tasks}"
    section = LLAMA_SECTION if args.shapes == "llama" else SECTION
    text = table(rows, cmd, (load0, os.getloadavg()[0]), section)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))
    show(text, section, write=not args.quick)


if __name__ == "__main__":
    main()
