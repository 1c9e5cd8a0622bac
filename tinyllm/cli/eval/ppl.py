"""`tinyllm eval ppl`: strided perplexity of one model on a text or a token file, or two models
paired over its documents (:func:`tinyllm.eval.single.run_ppl`)."""

from __future__ import annotations

import functools
import json
from typing import Annotated

import typer
from rich.console import Console

from tinyllm.cli.app import console, eval_app
from tinyllm.cli.common import Quiet, fail
from tinyllm.cli.eval.options import HF, Device, Dtype, Model
from tinyllm.console import Progress, interval_table

Data = Annotated[str | None, typer.Option("--data", help="Token file (formats/tokens-bin.md).")]
TextFile = Annotated[
    str | None,
    typer.Option("--text", help="UTF-8 text, read in the model's own tokenizer (or --tokenizer)."),
]
TextTokenizer = Annotated[
    str | None,
    typer.Option(
        "--tokenizer",
        help="The text's tokenizer: byte or a tokenizer folder (default: the model's).",
    ),
]
Against = Annotated[
    str | None,
    typer.Option(
        "--against",
        help="A second model (HF folder or checkpoint): the mean per-token NLL difference "
        "and its interval over documents, the paired permutation p (different tokenizers: "
        "each bpb, unpaired).",
    ),
]
CtxLen = Annotated[
    int | None,
    typer.Option("--ctx-len", min=2, help="Window length C (default: the model's context)."),
]
Stride = Annotated[
    int | None, typer.Option("--stride", min=1, help="Stride s, 1 <= s < C (default: C // 2).")
]
NBytes = Annotated[
    int,
    typer.Option(
        "--n-bytes",
        min=0,
        help="UTF-8 bytes of the scored text, at least the scored tokens (0: one token per byte).",
    ),
]
BatchSize = Annotated[
    int | None,
    typer.Option(
        "--batch-size",
        min=1,
        help="Windows per forward pass (default: 2048 // C, a budget of 2048 tokens).",
    ),
]
DocSep = Annotated[
    str,
    typer.Option(
        "--doc-sep",
        show_default=False,
        help="The separator ending each document of --text (the units of the intervals); "
        "'none': no boundaries (contiguous blocks). Default: one document per line.",
    ),
]


@eval_app.command("ppl")
def eval_ppl_cmd(
    data: Data = None,
    text: TextFile = None,
    model: Model = None,
    hf: HF = None,
    tokenizer: TextTokenizer = None,
    against: Against = None,
    doc_sep: DocSep = "\n",
    ctx_len: CtxLen = None,
    stride: Stride = None,
    n_bytes: NBytes = 0,
    batch_size: BatchSize = None,
    device: Device = "auto",
    dtype: Dtype = "auto",
    seed: Annotated[int, typer.Option("--seed", help="Seed of --against's permutations.")] = 0,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON for machines.")] = False,
    quiet: Quiet = False,
) -> None:
    """Strided perplexity of a text or a token file: mean NLL, perplexity and bits per byte.

    A text is read in the model's own tokenizer, bpb divides by the UTF-8 bytes the scored tokens cover, and each interval is over the text's documents (--doc-sep); --against pairs a second model over the documents. Our gpt and Hugging Face models are scored with strided windows (every token once, at least C - s tokens of context after the first window); other lm families with their own NLLs.
    """
    from tinyllm.eval import single  # torch and the models: not for --help

    check_ppl_route(data, text, against, tokenizer, n_bytes)
    opts = dict(model=model, hf=hf, ctx_len=ctx_len, stride=stride, device=device, dtype=dtype)
    opts |= dict(tokenizer=tokenizer, n_bytes=n_bytes, seed=seed, doc_sep=doc_sep)
    bar, note = functools.partial(Progress, quiet=quiet), Console(stderr=True).print
    try:  # CheckpointError and TokenFileError are ValueErrors
        out = single.run_ppl(
            data, text, against, **opts, batch_size=batch_size, progress=bar, note=note
        )
    except ValueError as e:
        raise fail(str(e)) from None
    if as_json:
        typer.echo(json.dumps(out, indent=2))
    else:
        console.print(delta_table(out) if against else ppl_table(out, text is not None))


def check_ppl_route(data, text, against, tokenizer, n_bytes) -> None:
    """One input, and each flag only where it means something (before any model is loaded)."""
    if (data is None) == (text is None):
        raise fail("expected exactly one of --data TOKENS or --text FILE")
    if data is not None and (against is not None or tokenizer is not None):
        flag = "--against" if against is not None else "--tokenizer"
        raise fail(f"{flag}: expected --text FILE (a text in the model's tokenizer), got --data")
    if text is not None and n_bytes:
        raise fail("--n-bytes: expected only with --data (a text's bytes are counted), got --text")


def ppl_table(out: dict, text: bool):
    """The perplexity table: nll, ppl, bpb with their intervals; the caption says what bpb
    divides by."""
    window = "" if out["ctx_len"] is None else f", ctx {out['ctx_len']}, stride {out['stride']}"
    if text:
        bytes_note = f"over the text's {out['n_bytes']} bytes ({out['tokenizer']} tokens)"
    elif out["n_bytes"] == out["n_tokens"]:
        bytes_note = "one token per byte"
    else:
        bytes_note = f"{out['n_bytes']} bytes"
    rows = [("nll", out["nll"], "nats/token"), ("ppl", out["ppl"], "perplexity")]
    rows.append(("bpb", out["bpb"], "bits/byte"))
    caption = f"{out['n_tokens']} tokens scored{window}; bpb: {bytes_note}"
    if "n_units" in out:
        caption += f"; intervals over {out['n_units']} units ({out['interval']})"
    if out.get("interval_warning"):
        caption += f"; {out['interval_warning']}"
    return interval_table(f"perplexity of {out['model']} on {out['data']}", rows, caption)


def delta_table(out: dict):
    """``--against``: B - A per token (nats) and per byte (bits) with their intervals over
    documents, p and the smallest difference the comparison can see; in different tokenizers
    each model's bpb with its interval, unpaired."""
    title = f"{out['against']} against {out['model']} on {out['data']}"
    if not out.get("paired", True):
        rows = [(f"bpb {out['model']}", out["bpb_a"], "bits/byte")]
        rows.append((f"bpb {out['against']}", out["bpb_b"], "bits/byte"))
        units = f"{out['n_units_a']} and {out['n_units_b']} units"
        return interval_table(title, rows, f"{out['note']}; {units}")
    rows = [("delta", out["delta"], "nats/token"), ("delta_bpb", out["delta_bpb"], "bits/byte")]
    window = "" if out["ctx_len"] is None else f", ctx {out['ctx_len']}, stride {out['stride']}"
    caption = (
        f"{out['against']} - {out['model']} (positive: {out['against']} is worse); "
        f"paired permutation p = {out['p']:.4g} over {out['n_units']} units; mde "
        f"{out['mde_bpb']:.4g} bits/byte; {out['n_tokens']} tokens, {out['n_bytes']} bytes"
        f"{window}" + (f"; {out['interval_warning']}" if out.get("interval_warning") else "")
    )
    return interval_table(title, rows, caption)
