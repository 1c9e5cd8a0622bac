"""Benchmark: strided ``token_nlls`` against the Hugging Face recipe beyond GPT-2.

The architectures users bring (transformers configs with random weights, no download), each in
one run, side by side: a Llama shape (4 layers, 256 wide, grouped-query attention, SwiGLU 688)
with a 512 and a 32k vocabulary, and Mistral, Qwen2, GPT-NeoX, OPT, Phi and Gemma at the same
width with a 512 vocabulary. None has a GPT-2 twin: tinyllm reads each through its base model
(:class:`tinyllm.models.hf.BaseModelView`: the head only at the scored positions; the model's own
``logits_to_keep`` where the hidden-state hook does not reproduce its logits).

* recipe: Hugging Face's fixed-length perplexity loop (bench/bench_ppl.py ``hf_recipe``: batch 1,
  full logits, the loss from ``labels``);
* tinyllm b1: ``lm.token_nlls(..., batch_size=1)``; tinyllm default: no ``batch_size``, so
  on these 48-window texts the faster of 1 and ``DEFAULT_TOKEN_BUDGET // ctx_len`` windows per
  pass, measured once per model (``tinyllm.windows.measured_batch``; the warm-up call pays the
  trial, the pick is reported).

Times are CPU seconds of the process (``time.process_time``: the 2 cores are shared), each
method's fastest whole run of ``reps``, the methods interleaved and rotated every repetition.

    python bench/bench_ppl_arch.py --threads 1      # writes docs/benchmarks.md
    python bench/bench_ppl_arch.py --quick          # llama-512 only, prints, writes nothing
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from bench_ppl import hf_recipe  # noqa: E402
from docsection import show  # noqa: E402

from tinyllm import windows  # noqa: E402
from tinyllm.eval import lm  # noqa: E402

SECTION = "## Strided perplexity beyond GPT-2: Llama shapes and other architectures"
WIDTH = dict(hidden_size=256, intermediate_size=688, num_hidden_layers=4, num_attention_heads=4)
CTX, STRIDE = 256, 128


def build(arch: str, vocab: int, seed: int = 0):
    import transformers as T

    torch.manual_seed(seed)
    c = dict(WIDTH, vocab_size=vocab, max_position_embeddings=CTX)
    if arch == "llama":
        m = T.LlamaForCausalLM(T.LlamaConfig(**c, num_key_value_heads=2))
    elif arch == "mistral":
        m = T.MistralForCausalLM(T.MistralConfig(**c, num_key_value_heads=2, sliding_window=64))
    elif arch == "qwen2":
        m = T.Qwen2ForCausalLM(T.Qwen2Config(**c, num_key_value_heads=2))
    elif arch == "gpt-neox":
        m = T.GPTNeoXForCausalLM(T.GPTNeoXConfig(**c))
    elif arch == "opt":
        m = T.OPTForCausalLM(
            T.OPTConfig(
                vocab_size=vocab,
                hidden_size=256,
                ffn_dim=688,
                num_hidden_layers=4,
                num_attention_heads=4,
                max_position_embeddings=CTX,
                word_embed_proj_dim=256,
            )
        )
    elif arch == "phi":
        m = T.PhiForCausalLM(T.PhiConfig(**c))
    elif arch == "gemma":
        m = T.GemmaForCausalLM(T.GemmaConfig(**c, num_key_value_heads=1, head_dim=64))
    else:
        raise ValueError(f"arch: expected one of the SHAPES' archs, got {arch!r}")
    return m.eval()


# name -> (arch, vocab, windows, reps)
SHAPES = {
    "llama-512": ("llama", 512, 48, 4),
    "llama-32k": ("llama", 32000, 48, 3),
    "mistral-512 (window 64)": ("mistral", 512, 48, 3),
    "qwen2-512": ("qwen2", 512, 48, 3),
    "gpt-neox-512": ("gpt-neox", 512, 48, 3),
    "opt-512": ("opt", 512, 48, 3),
    "phi-512": ("phi", 512, 48, 3),
    "gemma-512": ("gemma", 512, 48, 3),
}


def run(name: str) -> dict:
    arch, vocab, n_windows, reps = SHAPES[name]
    model = build(arch, vocab)
    n = CTX + (n_windows - 1) * STRIDE
    ids = np.random.default_rng(0).integers(0, vocab, n)
    ids_t = torch.as_tensor(ids)[None]
    hf_recipe(model, ids_t[:, :CTX], CTX, STRIDE)  # warm-up, and the one-time view check
    lm.token_nlls(model, ids, CTX, STRIDE)  # warm-up: the batch size is measured here
    picked = windows.measured_batches(model).get((CTX, STRIDE))
    methods = {
        "recipe": lambda: hf_recipe(model, ids_t, CTX, STRIDE)[3],
        "b1": lambda: lm.token_nlls(model, ids, CTX, STRIDE, batch_size=1),
        "default": lambda: lm.token_nlls(model, ids, CTX, STRIDE),
    }
    best = dict.fromkeys(methods, float("inf"))
    out = {}
    names = list(methods)
    for rep in range(reps):
        for meth in names[rep % 3 :] + names[: rep % 3]:
            t0 = time.process_time()
            out[meth] = methods[meth]()
            best[meth] = min(best[meth], time.process_time() - t0)
    diff = float(np.nanmax(np.abs(out["b1"] - out["recipe"])))
    r = {
        "name": name,
        "windows": n_windows,
        "tokens": n - 1,
        "best": best,
        "speedup_b1": best["recipe"] / best["b1"],
        "speedup_default": best["recipe"] / best["default"],
        "max_diff": diff,
        "picked": picked,
    }
    print(r, flush=True)
    return r


def markdown(rows: list[dict], cmd: str, load: str, threads: int) -> str:
    lines = [
        SECTION,
        "",
        "<!-- written by bench/bench_ppl_arch.py -->",
        "",
        f"`{cmd}` (bench/bench_ppl_arch.py). torch {torch.__version__}, {threads} torch "
        f"thread(s), {os.cpu_count()} cores ({platform.machine()}){load}, fp32, random weights; "
        f"ctx {CTX}, stride {STRIDE}; 4 layers, 256 wide. CPU seconds, each method's fastest "
        "whole run, methods interleaved.",
        "",
        "| shape | windows | recipe s | tinyllm b1 s | tinyllm default s (windows per pass) | "
        "speed-up b1 | speed-up default | max per-token NLL diff |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        b = r["best"]
        lines.append(
            f"| {r['name']} | {r['windows']} | {b['recipe']:.3f} | {b['b1']:.3f} | "
            f"{b['default']:.3f} ({r['picked']}) | {r['speedup_b1']:.2f}x | {r['speedup_default']:.2f}x | "
            f"{r['max_diff']:.1e} |"
        )
    lines.append("")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="llama-512 only; write nothing")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch default)")
    ap.add_argument("--shapes", default=",".join(SHAPES))
    ap.add_argument("--out", default=str(ROOT / "docs" / "benchmarks.md"))
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    load0 = os.getloadavg()[0]
    names = ["llama-512"] if args.quick else args.shapes.split(",")
    rows = [run(n) for n in names]
    load = f", load average {load0:.1f} at the start and {os.getloadavg()[0]:.1f} at the end"
    cmd = "python bench/bench_ppl_arch.py" + (f" --threads {args.threads}" if args.threads else "")
    text = markdown(rows, cmd, load, torch.get_num_threads())
    show(text, SECTION, write=not args.quick, path=Path(args.out))


if __name__ == "__main__":
    main()
