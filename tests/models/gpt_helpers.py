"""What the gpt family's tests and the Hugging Face twin's build their models from
(tests/models/test_gpt.py, test_hf.py): a tiny gpt Config, weights random in every parameter, and
random byte ids."""

from __future__ import annotations

import torch

from tinyllm.models import gpt

TINY = gpt.Config(block_size=16, n_layer=2, n_head=2, n_embd=16)


def randomize(model: torch.nn.Module, seed: int = 0) -> torch.nn.Module:
    """Every parameter random (biases and LayerNorms too), so a dropped bias, a missed transpose
    or a swapped name changes the logits; the model in eval mode."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.2)
            if "ln_" in name and name.endswith("weight"):
                p.add_(1.0)  # LayerNorm gains near 1, as in a trained model
    return model.eval()


def random_ids(B: int, T: int, V: int = 256, seed: int = 1) -> torch.Tensor:
    """``[B, T]`` ids uniform in ``0 .. V-1``, from ``seed``."""
    return torch.randint(0, V, (B, T), generator=torch.Generator().manual_seed(seed))
