"""Benchmark on a CUDA GPU: tinyllm against the Hugging Face recipe and lm-eval, fp32 and bf16.

One Llama-shaped ``LlamaForCausalLM`` (random weights, no download; 8 layers, 1024 wide, GQA
16/4 heads, SwiGLU 2816, vocab 32000, 1024 positions), moved to the GPU in each dtype by the
one rule of :mod:`tinyllm.device` (``place``):

* strided perplexity, ctx 1024, stride 512: Hugging Face's fixed-length recipe (bench/bench_ppl.py
  ``hf_recipe``: one window per pass, full logits, the loss from ``labels``) vs
  ``lm.token_nlls`` (head only at the scored positions, its default batch) in tokens/s, and the
  largest per-token NLL difference between the two;
* multiple choice on the lee "which sentence comes next" items of bench/bench_mc.py: lm-eval's
  ``HFLM.loglikelihood`` (batch 32) vs ``lm.choice_lls`` in items/s, and the largest
  per-choice LL difference.

Times are wall seconds with ``torch.cuda.synchronize()`` around each timed call, the fastest of
``--reps`` interleaved repetitions. The table replaces this benchmark's section of
docs/benchmarks.md. Without CUDA the script says so and exits with status 2, writing nothing.

    python bench/bench_gpu.py              # on a CUDA machine; writes docs/benchmarks.md
    python bench/bench_gpu.py --quick      # smaller model and inputs, prints only
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import torch
from docsection import show

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

SECTION = "## GPU: strided perplexity and multiple choice (bench/bench_gpu.py)"
SHAPE = dict(
    hidden_size=1024,
    intermediate_size=2816,
    num_hidden_layers=8,
    num_attention_heads=16,
    num_key_value_heads=4,
    vocab_size=32000,
    max_position_embeddings=1024,
)
QUICK = dict(SHAPE, hidden_size=256, intermediate_size=688, num_hidden_layers=2)


def build(shape: dict, dtype: str, seed: int = 0):
    import transformers

    from tinyllm.device import place

    torch.manual_seed(seed)
    model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**shape)).eval()
    return place(model, "cuda", dtype)


def timed(fn):
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    out = fn()
    torch.cuda.synchronize()
    return time.perf_counter() - t0, out


def ppl_rows(model, dtype: str, windows: int, reps: int) -> dict:
    from bench_ppl import hf_recipe

    from tinyllm.eval import lm

    C, s = 1024, 512
    n = C + (windows - 1) * s
    ids = np.random.default_rng(0).integers(0, model.config.vocab_size, n)
    ids_t = torch.as_tensor(ids)[None].to("cuda")
    hf_recipe(model, ids_t[:, :C], C, s)  # warm-up: kernels, the allocator, our view check
    lm.token_nlls(model, ids[:C], C, s)
    best = {"recipe": float("inf"), "ours": float("inf")}
    got = {}
    for rep in range(reps):
        for who in ("recipe", "ours") if rep % 2 == 0 else ("ours", "recipe"):
            if who == "recipe":
                sec, out = timed(lambda: hf_recipe(model, ids_t, C, s)[3])
            else:
                sec, out = timed(lambda: lm.token_nlls(model, ids, C, s))
            best[who] = min(best[who], sec)
            got[who] = out
    return {
        "dtype": dtype,
        "tokens": n - 1,
        "recipe_tok_s": (n - 1) / best["recipe"],
        "ours_tok_s": (n - 1) / best["ours"],
        "speedup": best["recipe"] / best["ours"],
        "max_diff": float(np.nanmax(np.abs(got["ours"] - got["recipe"]))),
    }


def mc_rows(model, dtype: str, n_items: int, reps: int) -> dict | None:
    try:
        from lm_eval.models.huggingface import HFLM
    except ImportError:
        print("lm_eval is not installed: the multiple-choice rows are skipped", flush=True)
        return None
    from bench_mc import TASKS, lmeval_lls, make_items, make_tokenizer, ours_lls, sentences

    items = make_items(n_items, 0, *TASKS["sentence"])
    tok = make_tokenizer("bpe", [" ".join(x) for x in sentences()])
    hflm = HFLM(pretrained=model, tokenizer=tok, batch_size=32, max_length=1024)
    warm = make_items(8, 1, *TASKS["sentence"])
    lmeval_lls(hflm, warm)
    ours_lls(model, tok, warm)
    best = {"lmeval": float("inf"), "ours": float("inf")}
    got = {}
    for rep in range(reps):
        for who in ("lmeval", "ours") if rep % 2 == 0 else ("ours", "lmeval"):
            fn = (
                (lambda: lmeval_lls(hflm, items))
                if who == "lmeval"
                else (lambda: ours_lls(model, tok, items))
            )
            sec, out = timed(fn)
            best[who] = min(best[who], sec)
            got[who] = out
    diff = max(float(np.abs(a - b).max()) for a, b in zip(got["lmeval"], got["ours"], strict=True))
    return {
        "dtype": dtype,
        "items": n_items,
        "lmeval_items_s": n_items / best["lmeval"],
        "ours_items_s": n_items / best["ours"],
        "speedup": best["lmeval"] / best["ours"],
        "max_diff": diff,
    }


def markdown(ppl: list[dict], mc: list[dict], shape: dict, cmd: str) -> str:
    dev = torch.cuda.get_device_name(0)
    lines = [
        SECTION,
        "",
        "<!-- written by bench/bench_gpu.py -->",
        "",
        f"`{cmd}` on {dev}, torch {torch.__version__}; LlamaForCausalLM with random weights "
        f"({shape['num_hidden_layers']} layers, {shape['hidden_size']} wide, "
        f"{shape['num_attention_heads']}/{shape['num_key_value_heads']} heads, vocab "
        f"{shape['vocab_size']}). Wall seconds around `torch.cuda.synchronize()`, fastest of "
        "the interleaved repetitions.",
        "",
        "| dtype | tokens | HF recipe tokens/s | tinyllm tokens/s | speed-up | max NLL diff |",
        "|---|---|---|---|---|---|",
    ]
    for r in ppl:
        lines.append(
            f"| {r['dtype']} | {r['tokens']} | {r['recipe_tok_s']:,.0f} | {r['ours_tok_s']:,.0f} "
            f"| {r['speedup']:.2f}x | {r['max_diff']:.1e} |"
        )
    if mc:
        lines += [
            "",
            "| dtype | items | lm-eval HFLM items/s | tinyllm items/s | speed-up | max LL diff |",
            "|---|---|---|---|---|---|",
        ]
        for r in mc:
            lines.append(
                f"| {r['dtype']} | {r['items']} | {r['lmeval_items_s']:.1f} | "
                f"{r['ours_items_s']:.1f} | {r['speedup']:.2f}x | {r['max_diff']:.1e} |"
            )
    lines.append("")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small model and inputs; write nothing")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--dtypes", default="float32,bfloat16")
    ap.add_argument("--out", default=str(ROOT / "docs" / "benchmarks.md"))
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print(
            "bench_gpu: expected a CUDA device (torch.cuda.is_available()), got none "
            f"(torch {torch.__version__}); nothing was measured or written",
            file=sys.stderr,
        )
        raise SystemExit(2)
    shape = QUICK if args.quick else SHAPE
    ppl, mc = [], []
    for dtype in args.dtypes.split(","):
        model = build(shape, dtype)
        ppl.append(ppl_rows(model, dtype, 4 if args.quick else 16, args.reps))
        print(ppl[-1], flush=True)
        row = mc_rows(model, dtype, 32 if args.quick else 256, args.reps)
        if row is not None:
            mc.append(row)
            print(row, flush=True)
        del model
        torch.cuda.empty_cache()
    cmd = "python bench/bench_gpu.py" + (" --quick" if args.quick else "")
    text = markdown(ppl, mc, shape, cmd)
    show(text, SECTION, write=not args.quick, path=Path(args.out))


if __name__ == "__main__":
    main()
