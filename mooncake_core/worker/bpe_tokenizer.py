"""The checkpoint's own tokenizer and chat template (GGUF ``gpt2`` byte-level BPE).

Built with the ``tokenizers`` library from the vocabulary and merges stored in the GGUF
file; control tokens (``<|im_start|>`` ...) are special tokens, matched whole and never
split. The chat template is the checkpoint's Jinja template, rendered in a sandbox.
:class:`IncrementalDecoder` turns a token stream into text that never splits a UTF-8
character across chunks.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from mooncake_core.config.models import ModelConfig
from mooncake_core.worker.checkpoint import (
    CheckpointError,
    GGUFCheckpoint,
    find_checkpoint,
    open_checkpoint,
)
from mooncake_core.worker.tokenizer import ByteTokenizer

__all__ = ["BPETokenizer", "IncrementalDecoder", "TextTokenizer", "tokenizer_for"]


class TextTokenizer(Protocol):
    """What the front door needs of a tokenizer."""

    eos: int

    def encode(self, text: str, *, add_bos: bool = ...) -> list[int]: ...

    def decode(self, ids: Sequence[int]) -> str: ...


def tokenizer_for(model: ModelConfig) -> ByteTokenizer | BPETokenizer:
    """The checkpoint's tokenizer, or the byte tokenizer for the random model.

    Raises:
        CheckpointError: the checkpoint cannot be read.
    """
    if model.checkpoint is None:
        return ByteTokenizer()
    return BPETokenizer(open_checkpoint(find_checkpoint(model.checkpoint)))


# llama.cpp's pre-tokenizer regexes by ``tokenizer.ggml.pre`` (digits split one by one
# first for these, then GPT-2's split).
_GPT2_SPLIT = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
_SINGLE_DIGITS = {"smollm", "starcoder", "refact"}
_CONTROL = 3


class BPETokenizer:
    """Encode and decode with a checkpoint's byte-level BPE vocabulary.

    Args:
        ck: the opened GGUF checkpoint.

    Raises:
        CheckpointError: the ``tokenizers`` package is missing or the file's tokenizer is
            not byte-level BPE.
    """

    def __init__(self, ck: GGUFCheckpoint) -> None:
        try:
            from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
        except ImportError:
            raise CheckpointError("a real model needs the 'tokenizers' package") from None
        model = ck.reader.fields.get("tokenizer.ggml.model")
        kind = model.contents() if model is not None else None
        if kind != "gpt2":
            raise CheckpointError(f"model checkpoint {ck.path}: tokenizer {kind!r} unsupported")
        pre_f = ck.reader.fields.get("tokenizer.ggml.pre")
        pre = pre_f.contents() if pre_f is not None else "default"
        vocab = {tok: i for i, tok in enumerate(ck.tokens)}
        merges: list[tuple[str, str]] = []
        for m in ck.merges:
            a, _, b = m.partition(" ")
            merges.append((a, b))
        tk = Tokenizer(models.BPE(vocab=vocab, merges=merges, fuse_unk=False))
        steps: list[Any] = []
        if pre in _SINGLE_DIGITS:
            steps.append(pre_tokenizers.Digits(individual_digits=True))
        steps.append(pre_tokenizers.Split(Regex(_GPT2_SPLIT), behavior="isolated"))
        steps.append(pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False))
        tk.pre_tokenizer = pre_tokenizers.Sequence(steps)
        tk.decoder = decoders.ByteLevel()
        from tokenizers import AddedToken

        self.special = {i for i, t in enumerate(ck.token_types) if t == _CONTROL}
        tk.add_special_tokens(
            [AddedToken(ck.tokens[i], special=True, normalized=False) for i in sorted(self.special)]
        )
        self._tk = tk
        self.bos = ck.bos
        self.eos = ck.eos
        self.vocab_size = len(ck.tokens)
        self.chat_template = ck.chat_template

    def encode(self, text: str, *, add_bos: bool = False) -> list[int]:
        """Token ids of ``text`` (special tokens in the text are matched whole)."""
        ids: list[int] = self._tk.encode(text, add_special_tokens=False).ids
        return [self.bos, *ids] if add_bos else ids

    def decode(self, ids: Sequence[int], *, skip_special: bool = True) -> str:
        """Text of ``ids`` (special tokens dropped unless asked; bad UTF-8 replaced).

        Raises:
            ValueError: an id outside the vocabulary.
        """
        for i in ids:
            if not 0 <= i < self.vocab_size:
                raise ValueError(f"token id {i} is outside the vocabulary [0, {self.vocab_size})")
        return str(self._tk.decode(list(ids), skip_special_tokens=skip_special))

    def apply_chat_template(
        self, messages: Sequence[Mapping[str, Any]], *, add_generation_prompt: bool = True
    ) -> str:
        """The prompt text for ``messages`` by the checkpoint's chat template.

        Raises:
            ValueError: the checkpoint has no chat template, or it fails on these messages.
        """
        if not self.chat_template:
            raise ValueError("this model has no chat template")
        import jinja2.sandbox

        env = jinja2.sandbox.ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
        try:
            tpl = env.from_string(self.chat_template)
            return tpl.render(
                messages=list(messages),
                add_generation_prompt=add_generation_prompt,
                bos_token=self._tk.id_to_token(self.bos) or "",
                eos_token=self._tk.id_to_token(self.eos) or "",
            )
        except jinja2.TemplateError as e:
            raise ValueError(f"chat template failed: {e}") from None


class IncrementalDecoder:
    """Text of a growing token list, chunk by chunk, never splitting a UTF-8 character.

    Each :meth:`push` returns the new text that is complete; bytes of a character that
    later tokens finish are held back until then.
    """

    def __init__(self, tokenizer: TextTokenizer) -> None:
        self._tok = tokenizer
        self._ids: list[int] = []
        self._emitted = 0

    def push(self, token: int) -> str:
        """Add ``token``; return the text that became complete."""
        self._ids.append(token)
        text = self._tok.decode(self._ids)
        if text.endswith("\ufffd"):
            return ""  # an incomplete character: wait for the next token
        new = text[self._emitted :]
        self._emitted = len(text)
        return new

    def flush(self) -> str:
        """Whatever is left (replacement characters for bytes that never completed)."""
        text = self._tok.decode(self._ids)
        new = text[self._emitted :]
        self._emitted = len(text)
        return new
