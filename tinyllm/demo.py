"""`make demo`: the main job on the embedded defaults, with whatever parts exist so far."""

from __future__ import annotations

import math

from rich.console import Console

from tinyllm import stats


def run_demo(console: Console) -> int:
    """Run the demo; returns the process exit status."""
    console.print("[bold]tinyllm demo[/bold]")
    acc = stats.NLLAccumulator()
    acc.add([math.log(2), math.log(3), math.log(4), math.log(3), math.log(4)])
    console.print(
        f"SPEC worked example (n=6, C=4, s=2): ppl = {acc.ppl:.4f} (expected 288^(1/5) = "
        f"{288**0.2:.4f})"
    )
    console.print("The zoo and the EvalSuite are not built yet: only the foundations ran.")
    return 0
