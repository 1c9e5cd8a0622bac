"""The flags the ``tinyllm eval`` sub-commands share: the model (``--model`` / ``--hf``), and
where and in what precision it runs (``--device``, ``--dtype``)."""

from __future__ import annotations

from typing import Annotated

import typer

Model = Annotated[str | None, typer.Option("--model", help="A tinyllm lm checkpoint.")]
HF = Annotated[str | None, typer.Option("--hf", help="A local Hugging Face causal LM folder.")]
Device = Annotated[str, typer.Option("--device", help="auto, cpu, cuda, cuda:N or mps.")]
Dtype = Annotated[
    str,
    typer.Option(
        "--dtype",
        help="auto (float32 on CPU, else the checkpoint's half), float32, bfloat16, float16.",
    ),
]
