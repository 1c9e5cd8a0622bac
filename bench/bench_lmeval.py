"""Benchmark: lm-eval's ``simple_evaluate`` end to end, tinyllm's backend against lm-eval's HFLM.

One model object (transformers ``GPT2LMHeadModel`` from a ``GPT2Config`` with random weights,
no download) and one tokenizer (a byte-level BPE trained on gensim's lee corpus) are shared by
both sides. Each task is lm-eval's REAL bundled config included by a local YAML that overrides
only ``dataset_path: json`` + ``dataset_kwargs.data_files``, with documents in the dataset's own
schema built from the lee text (tests/lmeval/lmeval_helpers.py). Per task and side:
``lm_eval.simple_evaluate(model=..., tasks=[task], limit=N, log_samples=True)``, wall time of
the whole call (task building, requests, scoring, metrics), alternating which side goes first,
after one untimed call per task that builds its dataset cache (else the first side pays it);
HFLM at ``batch_size=8``, TinyLLM at its defaults (``batch_size=8``). Reported: docs/s of each,
the speed-up, and per-document agreement (acc / acc_norm / exact_match and generations).

    python bench/bench_lmeval.py            # writes its section of docs/benchmarks.md
    python bench/bench_lmeval.py --quick    # few documents, prints, writes nothing
    python bench/bench_lmeval.py --no-write # all documents, prints, writes nothing
    python bench/bench_lmeval.py --tasks gsm8k  # those tasks only, prints, writes nothing

Needs the ``bench`` extra (lm_eval[hf]); never part of make test.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_CACHE", tempfile.mkdtemp(prefix="tl-bench-lmeval-"))

import torch  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "lmeval"))  # the tests' document builders

import lmeval_helpers as H  # noqa: E402

SECTION = "## lm-eval tasks end to end: the tinyllm backend against HFLM"
METRICS = ("acc", "acc_norm", "exact_match")


def tasks_of(n: int, n_gen: int) -> dict:
    return {
        "arc_easy": (
            "arc/arc_easy.yaml",
            {s: H.arc_docs(n) for s in ("train", "validation", "test")},
        ),
        "hellaswag": (
            "hellaswag/hellaswag.yaml",
            {s: H.hellaswag_docs(n) for s in ("train", "validation")},
        ),
        "winogrande": (
            "winogrande/default.yaml",
            {s: H.winogrande_docs(n) for s in ("train", "validation")},
        ),
        "copa": (
            "super_glue/copa/default.yaml",
            {s: H.copa_docs(n) for s in ("train", "validation")},
        ),
        "mmlu_anatomy": (
            "mmlu/default/mmlu_anatomy.yaml",
            {"test": H.mmlu_docs(n), "dev": H.mmlu_docs(5, 20)},
        ),
        "lambada_openai": ("lambada/lambada_openai.yaml", {"test": H.lambada_docs(n)}),
        "gsm8k": ("gsm8k/gsm8k.yaml", {"test": H.gsm8k_docs(n_gen), "train": H.gsm8k_docs(8, 30)}),
    }


def timed(lm):
    """``lm`` with its request methods timed: ``lm.scoring_s`` adds up their wall time."""
    lm.scoring_s = 0.0
    for name in ("loglikelihood", "loglikelihood_rolling", "generate_until"):
        fn = getattr(lm, name)

        def wrap(*a, _fn=fn, **k):
            t = time.perf_counter()
            try:
                return _fn(*a, **k)
            finally:
                lm.scoring_s += time.perf_counter() - t

        setattr(lm, name, wrap)
    return lm


def run(model, tm, task, limit):
    import lm_eval

    model = timed(model)
    t0 = time.perf_counter()
    out = lm_eval.simple_evaluate(
        model=model, tasks=[task], task_manager=tm, limit=limit, log_samples=True
    )
    return time.perf_counter() - t0, out["samples"][task], model.scoring_s


def agree(a: list[dict], b: list[dict]) -> tuple[int, int]:
    same = 0
    for x, y in zip(a, b, strict=True):
        gen_same = all(
            rx[0] == ry[0]
            for rx, ry in zip(x["resps"], y["resps"], strict=True)
            if isinstance(ry[0], str)
        )
        same += gen_same and all(x.get(m) == y.get(m) for m in METRICS)
    return same, len(a)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--docs", type=int, default=40)
    ap.add_argument("--gen-docs", type=int, default=8)
    ap.add_argument("--no-write", action="store_true", help="print the table only")
    ap.add_argument(
        "--tasks", default="", help="comma-separated task names (default: all); implies no write"
    )
    args = ap.parse_args()
    n, n_gen = (6, 2) if args.quick else (args.docs, args.gen_docs)
    torch.set_num_threads(1)

    from lm_eval.models.huggingface import HFLM
    from lm_eval.tasks import TaskManager

    from tinyllm.eval.lmeval.backend import TinyLLM

    tok = H.bpe_tokenizer()
    import transformers

    cfg = transformers.GPT2Config(
        vocab_size=len(tok),
        n_positions=1024,
        n_embd=256,
        n_layer=4,
        n_head=4,
        bos_token_id=tok.eos_token_id,
        eos_token_id=tok.eos_token_id,
    )
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(cfg).eval()
    params = sum(p.numel() for p in model.parameters()) / 1e6
    d = Path(tempfile.mkdtemp(prefix="tl-bench-tasks-"))
    tasks = tasks_of(n, n_gen)
    if args.tasks:
        want = args.tasks.split(",")
        unknown = [t for t in want if t not in tasks]
        if unknown:
            raise SystemExit(f"--tasks: expected names from {list(tasks)}, got {unknown}")
        tasks = {t: tasks[t] for t in want}
    H.write_tasks(d, tasks=tasks)
    tm = TaskManager(include_path=str(d), include_defaults=False)
    load0 = os.getloadavg()[0]
    rows = []
    for task in tasks:  # builds each task's dataset cache once, before anything is timed
        run(HFLM(pretrained=model, tokenizer=tok, batch_size=8), tm, task, 1)
    for i, task in enumerate(tasks):
        limit = n_gen if task == "gsm8k" else n
        sides = {
            "hflm": lambda: HFLM(pretrained=model, tokenizer=tok, batch_size=8),
            "tinyllm": lambda: TinyLLM(model, tok),
        }
        order = ["hflm", "tinyllm"] if i % 2 == 0 else ["tinyllm", "hflm"]
        got = {s: run(sides[s](), tm, task, limit) for s in order}
        same, total = agree(got["tinyllm"][1], got["hflm"][1])
        row = {
            "task": task,
            "docs": limit,
            "hflm": limit / got["hflm"][0],
            "tinyllm": limit / got["tinyllm"][0],
            "hflm_s": got["hflm"][2],
            "tinyllm_s": got["tinyllm"][2],
            "same": same,
            "samples": total,
        }
        row["x"] = row["tinyllm"] / row["hflm"]
        row["xs"] = row["hflm_s"] / row["tinyllm_s"]
        rows.append(row)
        print(
            f"{task}: HFLM {row['hflm']:.2f} docs/s, tinyllm {row['tinyllm']:.2f} docs/s, "
            f"{row['x']:.2f}x, per-doc same {same}/{total}",
            flush=True,
        )
    load1 = os.getloadavg()[0]
    lines = [
        SECTION,
        "",
        f"Command: `python bench/bench_lmeval.py` (GPT2LMHeadModel {params:.1f}M params, hidden 256, "
        f"4 layers, random weights; BPE of {len(tok)} tokens; 1 torch thread, {platform.machine()}, "
        f"load average {load0:.1f} at the start, {load1:.1f} at the end: the machine is shared). "
        "Docs/s is documents over the wall time of the whole `simple_evaluate` call, task building "
        "and metrics included; scoring s is the wall time inside the backend's request methods "
        "(loglikelihood, loglikelihood_rolling, generate_until) alone. Per-doc same: the logged samples whose acc / acc_norm / exact_match "
        "and generations are identical (gsm8k logs each document once per filter).",
        "",
        "| task | docs | HFLM (batch 8) docs/s | tinyllm docs/s | speed-up end to end "
        "| scoring s HFLM / tinyllm | scoring speed-up | per-doc same |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['task']} | {r['docs']} | {r['hflm']:.2f} | {r['tinyllm']:.2f} "
            f"| {r['x']:.2f}x | {r['hflm_s']:.2f} / {r['tinyllm_s']:.2f} | {r['xs']:.2f}x "
            f"| {r['same']}/{r['samples']} |"
        )
    lines.append("")
    text = "\n".join(lines)
    print(text)
    if not (args.quick or args.no_write or args.tasks):
        path = ROOT / "docs" / "benchmarks.md"
        doc = path.read_text(encoding="utf-8")
        start = doc.find(SECTION)
        if start >= 0:
            end = doc.find("\n## ", start + len(SECTION))
            doc = doc[:start] + text + (doc[end + 1 :] if end >= 0 else "")
        else:
            doc = doc.rstrip("\n") + "\n\n" + text
        path.write_text(doc, encoding="utf-8")


if __name__ == "__main__":
    main()
