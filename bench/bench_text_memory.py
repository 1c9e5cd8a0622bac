"""Peak memory of the text route (`tinyllm eval ppl --hf DIR --text FILE`) by text size.

Each measurement runs in a fresh Python process that loads a tiny Hugging Face Llama with its
own byte-level BPE (tinyllm/models/hf_train.py: ``train_bpe`` on the lee training documents,
``n_merges`` merges), reads the text in that tokenizer (``tinyllm.eval.text.read_lm_tokens``,
what ``score_text`` calls) and, in ``score`` mode, scores it (``text_ppl``, windows of 128
tokens every 64, one torch thread). The process reports from /proc/self/status its resident
memory after loading the model (VmRSS) and its high-water mark (VmHWM) after tokenizing and at
the end; ``ru_maxrss`` is read too as a cross-check. Texts are gensim's lee_background.cor
(tinyllm/data.py) repeated to 1 MB, 20 MB and 200 MB.

With ``--old REV`` the same child runs on the code of that git revision (``git archive`` into a
temporary folder, put first on PYTHONPATH), side by side; sizes above ``--old-up-to`` MB are not
run on it (the old route held about 300 bytes per text byte). ``--score-up-to`` MB bounds the
sizes that are also scored (scoring 200 MB on 2 cores takes long; the memory bar is about
tokenizing and holding the ids). ``--write`` puts the table in docs/benchmarks.md between its
markers.

    python bench/bench_text_memory.py --old 37e264a --write
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from docsection import write_section

ROOT = Path(__file__).resolve().parents[1]
BEGIN = "<!-- text-memory: written by bench/bench_text_memory.py -->"
END = "<!-- /text-memory -->"
MB = 1_000_000
CTX, STRIDE = 128, 64


def _status() -> dict:
    out = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            out[key] = int(value.split()[0]) / 1024  # kB -> MiB
    return out


def child(args: dict) -> None:
    """One measurement; prints one JSON line."""
    import torch

    torch.set_num_threads(1)
    from tinyllm.eval import single, text

    m = single.open_lm(hf=args["model"])
    tok = text.model_tokenizer(m.model, "hf")
    model_rss = _status()["VmRSS"]
    t0, c0 = time.perf_counter(), time.process_time()
    tokens = text.read_lm_tokens(args["text"], tok)
    tok_s, tok_cpu = time.perf_counter() - t0, time.process_time() - c0
    after_tok = _status()
    out = {
        "model_rss": model_rss,
        "tok_hwm": after_tok["VmHWM"],
        "tok_rss": after_tok["VmRSS"],
        "tok_s": tok_s,
        "tok_cpu": tok_cpu,
        "n_tokens": int(tokens.ids.size),
        "dtype": str(tokens.ids.dtype),
        "mapped": isinstance(tokens.ids.base, memoryview),
    }
    if args["score"]:
        if args.get("first"):  # the first tokens only: the scorer over the mapped file
            tokens = dataclasses.replace(tokens, ids=tokens.ids[: args["first"]])
        t0, c0 = time.perf_counter(), time.process_time()
        res = text.text_ppl(m.model, tokens, CTX, STRIDE)
        out |= {"score_s": time.perf_counter() - t0, "score_cpu": time.process_time() - c0}
        out |= {"scored": res["n_tokens"], "bpb": res["bpb"]["value"]}
    out["end_hwm"] = _status()["VmHWM"]
    out["ru_maxrss"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps(out))


def build_model(folder: Path, n_merges: int) -> None:
    import torch
    from transformers import LlamaForCausalLM

    from tinyllm.data import lee_split
    from tinyllm.models import hf_train

    train, _ = lee_split()
    tok = hf_train.train_bpe("".join(d + "\n" for d in train), n_merges=n_merges)
    torch.manual_seed(0)
    cfg = hf_train.Config(n_merges=n_merges, hidden=64, n_layer=2, intermediate=192)
    LlamaForCausalLM(hf_train.llama_config(cfg, len(tok), 0)).save_pretrained(folder)
    tok.save_pretrained(folder)


def build_text(path: Path, size: int) -> None:
    """lee_background.cor (ASCII) repeated to exactly ``size`` bytes."""
    from tinyllm.data import lee_path

    base = lee_path().read_bytes()
    with open(path, "wb") as f:
        left = size
        while left > 0:
            chunk = base[:left]
            f.write(chunk)
            left -= len(chunk)


def this_code() -> str:
    """The code measured as "new": the checkout's commit, marked when its files differ."""
    git = ["git", "-C", str(ROOT)]
    head = subprocess.run([*git, "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    dirty = subprocess.run([*git, "status", "--porcelain", "--", "tinyllm"], capture_output=True)
    return head.stdout.strip() + (" + changes" if dirty.stdout.strip() else "")


def run_child(code: Path | None, args: dict) -> dict:
    env = dict(os.environ)
    if code is not None:
        env["PYTHONPATH"] = str(code)
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", json.dumps(args)]
    res = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    if res.returncode != 0:
        tail = res.stderr.strip().splitlines()[-1:] or [f"exit {res.returncode}"]
        return {"error": tail[0][:200]}
    return json.loads(res.stdout.strip().splitlines()[-1])


def render(rows: list[dict], meta: dict) -> str:
    def mib(v: float) -> str:
        return f"{v:,.0f}"

    lines = [
        BEGIN,
        "",
        f"`{meta['command']}` (bench/bench_text_memory.py). x86_64, {os.cpu_count()} cores, "
        f"load average {meta['load0']:.1f} at the start and {meta['load1']:.1f} at the end. "
        f"A tiny Llama ({meta['params']:,} parameters, fp32) with its own byte-level BPE "
        f"({meta['vocab']} ids: 256 bytes, {meta['n_merges']} merges, BOS) trained on the lee "
        "training documents; texts: lee_background.cor repeated to the size. Each row is a fresh "
        "process: `model` is its resident memory after loading torch, transformers and the "
        "model; `tokenized` the high-water mark (VmHWM) after `read_lm_tokens`; `end` after "
        f"scoring too (`text_ppl`, windows of {CTX} every {STRIDE}) where scored, else the same; "
        "`ru_maxrss` the kernel's peak for the process. MiB.",
        "",
        "| code | text | tokens | ids | scored tokens | model MiB | tokenized MiB | end MiB | "
        "ru_maxrss MiB | end / model | tokenize s (CPU s) | score s (CPU s) | bpb |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        size = f"{r['size'] // MB} MB"
        if "error" in r:
            lines.append(f"| {r['code']} | {size} | | | | | | | | | | | failed: {r['error']} |")
            continue
        ids = f"{r['dtype']}, " + ("temp file" if r["mapped"] else "memory")
        cells = [
            r["code"],
            size,
            f"{r['n_tokens']:,}",
            ids,
            f"{r['scored']:,}" if "scored" in r else "none",
            mib(r["model_rss"]),
            mib(r["tok_hwm"]),
            mib(r["end_hwm"]),
            mib(r["ru_maxrss"]),
            f"{r['end_hwm'] / r['model_rss']:.2f}",
            f"{r['tok_s']:.1f} ({r['tok_cpu']:.1f})",
            f"{r['score_s']:.1f} ({r['score_cpu']:.1f})" if "score_s" in r else "-",
            f"{r['bpb']:.6f}" if r.get("scored") == r["n_tokens"] - 1 else "-",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    new = [
        r["end_hwm"] / r["model_rss"] for r in rows if r["code"] == meta["new"] and "error" not in r
    ]
    if new:
        verdict = "met" if max(new) <= 2 else "not met"
        lines += ["", f"The bar (peak memory within 2x of the loaded model "
                      f"whatever the text's size): {verdict} here, the largest end / model of "
                      f"{meta['new']} is {max(new):.2f}."]  # fmt: skip
    lines += ["", *meta["notes"], "", END]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--sizes", default="1,20,200", help="text sizes in MB (default 1,20,200)")
    ap.add_argument("--score-up-to", type=int, default=20, help="score texts up to this many MB")
    ap.add_argument(
        "--first",
        type=int,
        default=10_000_000,
        help="larger texts: score their first FIRST tokens (0: none), read from the mapped file",
    )
    ap.add_argument("--old", help="also run the code of this git revision (e.g. 37e264a)")
    ap.add_argument("--old-up-to", type=int, default=20, help="old code: texts up to this many MB")
    ap.add_argument("--n-merges", type=int, default=1000)
    ap.add_argument("--work", help="folder for the texts and the model (default: a temp folder)")
    ap.add_argument("--write", action="store_true", help="write the table to docs/benchmarks.md")
    a = ap.parse_args()
    if a.child:
        child(json.loads(a.child))
        return
    argv = " ".join(["python bench/bench_text_memory.py", *sys.argv[1:]])
    load0 = os.getloadavg()[0]
    work = Path(a.work or tempfile.mkdtemp(prefix="bench-text-memory-"))
    work.mkdir(parents=True, exist_ok=True)
    model = work / "model"
    if not (model / "config.json").is_file():
        build_model(model, a.n_merges)
    old = None
    if a.old:
        old = work / f"old-{a.old}"
        if not old.is_dir():
            old.mkdir()
            archive = subprocess.run(["git", "-C", str(ROOT), "archive", a.old],
                                     capture_output=True, check=True).stdout  # fmt: skip
            subprocess.run(["tar", "-x", "-C", str(old)], input=archive, check=True)
    rows = []
    for size in [int(s) * MB for s in a.sizes.split(",")]:
        path = work / f"text-{size // MB}MB.txt"
        if not path.is_file() or path.stat().st_size != size:
            build_text(path, size)
        score = size <= a.score_up_to * MB
        runs = [("new", None)]
        if old is not None and size <= a.old_up_to * MB:
            runs.insert(0, (a.old, old))
        for code, tree in runs:
            job = {"model": str(model), "text": str(path), "score": score or bool(a.first)}
            job["first"] = None if score else a.first
            r = run_child(tree, job)
            rows.append(r | {"code": this_code() if tree is None else code, "size": size})
            print(json.dumps(rows[-1]), flush=True)
    from transformers import AutoConfig

    cfg = AutoConfig.from_pretrained(model)
    import safetensors.numpy

    params = sum(v.size for v in safetensors.numpy.load_file(model / "model.safetensors").values())
    full = [r for r in rows if r.get("scored") == r.get("n_tokens", 0) - 1]
    part = [r for r in rows if "scored" in r and r not in full]
    est = ""
    if full and part:
        rate = full[-1]["scored"] / full[-1]["score_s"]  # tokens a second, the largest scored
        est = (
            f"; scoring all {part[-1]['n_tokens']:,} tokens would take about "
            f"{part[-1]['n_tokens'] / rate / 60:.0f} minutes at the {full[-1]['size'] // MB} MB "
            "row's rate"
        )
    notes = [
        f"Texts above {a.score_up_to} MB are tokenized and held whole, and only their first "
        f"{a.first:,} tokens are scored, from the mapped temporary file (the scorer reads the "
        f"ids a batch of windows at a time and releases the mapped ids behind them){est}. "
        "Seconds are wall time on 2 cores shared with other jobs, CPU seconds (the process's, "
        "all threads) beside them; bpb of the texts scored whole.",
    ]
    if old is not None:
        notes.append(
            f"{a.old} is the code before this change, run on the same model and texts; sizes "
            f"above {a.old_up_to} MB were not run on it."
        )
    meta = {"new": this_code(), "command": argv, "load0": load0, "load1": os.getloadavg()[0], "params": params,
            "vocab": cfg.vocab_size, "n_merges": a.n_merges, "notes": notes}  # fmt: skip
    section = render(rows, meta)
    print(section)
    if a.write:
        print("wrote", write_section(section, BEGIN, end=END, heading="## Text route memory"))


if __name__ == "__main__":
    main()
