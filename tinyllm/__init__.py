"""tinyllm: an evaluation system for small language models (see README.md)."""

__version__ = "0.1.0"
