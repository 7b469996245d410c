"""Shared by the real-model tests that check us against ``transformers``: the prompts,
the mixed corpus (English, code, Chinese, emoji, whitespace, digits) and the module skip
when a reference package is missing."""

from __future__ import annotations

import importlib.util

import pytest

QUESTIONS = [
    "What is the capital of France? Answer in one word.",
    "Write a haiku about the sea.",
    "List three prime numbers.",
    "Translate 'good morning' into Spanish.",
    "def fib(n):",
]
CORPUS = [
    "The quick brown fox jumps over the lazy dog.",
    "def f(x):\n    return x ** 2  # square\n\tprint(f(12345))",
    "我们今天去北京天安门广场。",
    "emoji: 🚀🔥👍🏽 and ünïcödé, naïve café",
    "  leading spaces, trailing\n\n\nnewlines   ",
    "<|im_start|>user\nhi<|im_end|>\n",
    "1234567890 3.14159 -42 0x1F",
]


def require(*modules: str) -> None:
    """Skip the calling test module, with the reason, unless ``modules`` are importable."""
    for mod in modules:
        if importlib.util.find_spec(mod) is None:
            pytest.skip(f"the reference needs the {mod!r} package", allow_module_level=True)
