"""Where and in what precision a model is scored: the one rule for the CLI, the zoo and the API.

* device: ``auto | cpu | cuda | cuda:N | mps``; ``"auto"`` is ``cuda`` when
  ``torch.cuda.is_available()``, else ``cpu`` (never mps unasked);
* dtype: ``auto | float32 | bfloat16 | float16``; ``"auto"`` is float32 on CPU (whatever the
  checkpoint stores: half-precision matmuls on CPU are slow and their NLLs differ), and on an
  accelerator the checkpoint's own dtype when that is bfloat16 or float16, else float32.

Scoring reads every model's device from its parameters (:func:`model_device`): inputs are built
on the CPU and moved there, and every NLL comes back as float64 on the CPU. The log-softmax runs
in float32 or wider whatever the weights' dtype (:func:`tinyllm.logits.nll_blocks`).

Layers: this module sits at the library's root and imports nothing of the project.
"""

from __future__ import annotations

import re
from typing import Any

import torch

DEVICES = ("auto", "cpu", "cuda", "cuda:N", "mps")
"""The accepted device spellings (``cuda:N``: a CUDA device index, e.g. ``cuda:1``)."""

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
"""The accepted dtype names besides ``"auto"``, and their torch dtypes."""

_CUDA_N = re.compile(r"cuda:(\d+)")


def resolve_device(spec: Any = "auto") -> torch.device:
    """The torch device of ``spec`` (a string of :data:`DEVICES`, a ``torch.device`` or None
    for ``"auto"``): ``"auto"`` -> ``cuda`` when CUDA is available, else ``cpu``.

    Raises ValueError naming the valid spellings for anything else, and for a device this
    machine does not have (``cuda`` without CUDA, ``cuda:3`` on a machine with 2 GPUs, ``mps``
    without Metal).

    Example: ``resolve_device("cpu")`` -> ``device(type='cpu')``.
    """
    if spec is None or spec == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if isinstance(spec, torch.device):
        spec = str(spec)
    if not isinstance(spec, str) or not (spec in ("cpu", "cuda", "mps") or _CUDA_N.fullmatch(spec)):
        raise ValueError(f"device: expected one of {list(DEVICES)}, got {spec!r}")
    if spec.startswith("cuda"):
        if not torch.cuda.is_available():
            raise ValueError(f"device: expected a device this machine has, got {spec!r} (no CUDA)")
        m = _CUDA_N.fullmatch(spec)
        if m and int(m.group(1)) >= torch.cuda.device_count():
            raise ValueError(
                f"device: expected cuda:0 .. cuda:{torch.cuda.device_count() - 1}, got {spec!r}"
            )
    if spec == "mps" and not (
        getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available()
    ):
        raise ValueError("device: expected a device this machine has, got 'mps' (no Metal)")
    return torch.device(spec)


def resolve_dtype(spec: Any = "auto", device: Any = "cpu", stored: Any = None) -> torch.dtype:
    """The weights' dtype for ``spec`` (``"auto"``, a name of :data:`DTYPES`, a torch dtype, or
    None for ``"auto"``) on ``device``; ``stored`` is the checkpoint's own dtype (a torch dtype
    or its name, e.g. a Hugging Face config's ``torch_dtype``), read only by ``"auto"``.

    ``"auto"``: float32 on CPU; elsewhere ``stored`` when it is bfloat16 or float16, else
    float32.

    Example: ``resolve_dtype("auto", "cpu", "bfloat16")`` -> ``torch.float32``;
    ``resolve_dtype("auto", "cuda", "bfloat16")`` -> ``torch.bfloat16``.
    """
    if isinstance(spec, torch.dtype):
        if spec not in DTYPES.values():
            raise ValueError(f"dtype: expected one of {['auto', *DTYPES]}, got {spec}")
        return spec
    if spec is None or spec == "auto":
        dev = torch.device(device) if not isinstance(device, torch.device) else device
        if dev.type == "cpu":
            return torch.float32
        half = _as_dtype(stored)
        return half if half in (torch.bfloat16, torch.float16) else torch.float32
    if not isinstance(spec, str) or spec not in DTYPES:
        raise ValueError(f"dtype: expected one of {['auto', *DTYPES]}, got {spec!r}")
    return DTYPES[spec]


def _as_dtype(stored: Any) -> torch.dtype | None:
    if isinstance(stored, torch.dtype):
        return stored
    if isinstance(stored, str):
        return getattr(torch, stored.removeprefix("torch."), None)
    return None


def model_device(model: Any) -> torch.device:
    """The device of ``model``'s first parameter (or buffer), ``cpu`` for a model without
    tensors (a count-based family, a plain callable). Inputs are moved there before a call."""
    for attr in ("parameters", "buffers"):
        fn = getattr(model, attr, None)
        if callable(fn):
            try:
                for t in fn():
                    return t.device
            except TypeError:  # a ``parameters`` that is not torch's
                pass
    return torch.device("cpu")


def model_dtype(model: Any) -> torch.dtype:
    """The dtype of ``model``'s first floating-point parameter, float32 when it has none: the
    precision the cache check's tolerance follows (:func:`tinyllm.logits.tolerance`)."""
    fn = getattr(model, "parameters", None)
    if callable(fn):
        try:
            for p in fn():
                if p.is_floating_point():
                    return p.dtype
        except TypeError:
            pass
    return torch.float32


def place(model: Any, device: Any = "auto", dtype: Any = "auto", stored: Any = None) -> Any:
    """``model`` moved to :func:`resolve_device` ``(device)`` in :func:`resolve_dtype`
    ``(dtype, that device, stored)`` (an ``nn.Module``; anything else is returned as it is):
    the one rule for our own checkpoints, as :func:`tinyllm.models.hf.load` applies it."""
    dev = resolve_device(device)
    dt = resolve_dtype(dtype, dev, stored)
    if isinstance(model, torch.nn.Module):
        model.to(device=dev, dtype=dt)
    return model
