"""The checkpoint's own tokenizer and chat template.

* GGUF (``gpt2`` byte-level BPE): built with the ``tokenizers`` library from the
  vocabulary and merges stored in the file; control tokens (``<|im_start|>`` ...) are
  special tokens, matched whole and never split. ``add_bos`` puts the file's BOS first.
* Hugging Face directory: ``tokenizer.json`` loaded as it is (any model the
  ``tokenizers`` library reads), plus the special tokens ``tokenizer_config.json`` names
  that it lacks (added as special tokens, as transformers does). ``add_bos`` runs the
  file's post-processor (what ``AutoTokenizer``'s ``add_special_tokens=True`` does:
  Llama 3 and Mistral files put BOS first, Qwen2's add nothing); transformers 5 ignores
  ``add_bos_token`` in ``tokenizer_config.json`` when there is a ``tokenizer.json``, and
  so do we. transformers' per-family classes (``Qwen2Tokenizer``, ``LlamaTokenizer``)
  rebuild the normaliser and pre-tokenizer from their own definitions, which for the
  published checkpoints are those of the file; the file is what we follow.

The chat template is the checkpoint's Jinja template, rendered in a sandbox with the
globals transformers gives it (``raise_exception``, ``strftime_now``, a ``tojson`` that
keeps non-ASCII). :class:`IncrementalDecoder` turns a token stream into text that never
splits a UTF-8 character across chunks.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, Protocol

from mooncake_core.config.models import ModelConfig
from mooncake_core.worker.checkpoint import (
    CheckpointError,
    GGUFCheckpoint,
    HFCheckpoint,
    find_checkpoint,
    open_checkpoint,
    token_text,
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
_SPECIAL_KEYS = ("bos_token", "eos_token", "unk_token", "pad_token")
"""Special tokens a ``tokenizer_config.json`` names (also passed to the chat template)."""


def _gguf_tokenizer(ck: GGUFCheckpoint) -> tuple[Any, dict[str, str]]:
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers

    kind = ck.reader.fields.get("tokenizer.ggml.model")
    if kind != "gpt2":
        raise CheckpointError(f"model checkpoint {ck.path}: tokenizer {kind!r} unsupported")
    pre = ck.reader.fields.get("tokenizer.ggml.pre", "default")
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
    special = sorted(i for i, t in enumerate(ck.token_types) if t == _CONTROL)
    tk.add_special_tokens(
        [AddedToken(ck.tokens[i], special=True, normalized=False) for i in special]
    )
    texts = {
        "bos_token": ck.tokens[ck.bos] if ck.bos is not None else "",
        "eos_token": ck.tokens[ck.eos],
    }
    if texts["bos_token"]:
        _bos_post_processor(tk, texts["bos_token"])
    return tk, texts


def _hf_tokenizer(ck: HFCheckpoint) -> tuple[Any, dict[str, str]]:
    from tokenizers import AddedToken, Tokenizer

    file = os.path.join(ck.path, "tokenizer.json")
    if not os.path.isfile(file):
        raise CheckpointError(
            f"model checkpoint {ck.path}: no tokenizer.json (only fast tokenizers are supported)"
        )
    try:
        tk = Tokenizer.from_file(file)
    except Exception as e:  # the library raises a bare Exception on a bad file
        raise CheckpointError(
            f"model checkpoint {ck.path}: unreadable tokenizer.json ({e})"
        ) from None
    cfg = ck.tokenizer_config
    texts = {k: t for k in _SPECIAL_KEYS if (t := token_text(cfg.get(k))) is not None}
    extra = cfg.get("extra_special_tokens") or cfg.get("additional_special_tokens") or []
    if isinstance(extra, Mapping):
        extra = list(extra.values())
    named = [*texts.values(), *(t for e in extra if (t := token_text(e)) is not None)]
    have = {t.content for t in tk.get_added_tokens_decoder().values()}
    missing = list(dict.fromkeys(t for t in named if t not in have))
    tk.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in missing])
    return tk, texts


def _bos_post_processor(tk: Any, bos: str) -> None:
    # encode(add_special_tokens=True) puts BOS first (a GGUF file's add_bos).
    from tokenizers import processors

    tk.post_processor = processors.TemplateProcessing(
        single=[bos, "$A"],
        pair=[bos, "$A", bos, "$B:1"],
        special_tokens=[(bos, tk.token_to_id(bos))],
    )


class BPETokenizer:
    """Encode and decode with a checkpoint's tokenizer (GGUF BPE or ``tokenizer.json``).

    Args:
        ck: the opened checkpoint.

    Raises:
        CheckpointError: the ``tokenizers`` package is missing, the GGUF file's tokenizer
            is not byte-level BPE, or the directory has no readable ``tokenizer.json``.
    """

    def __init__(self, ck: GGUFCheckpoint | HFCheckpoint) -> None:
        try:
            import tokenizers  # noqa: F401
        except ImportError:
            raise CheckpointError("a real model needs the 'tokenizers' package") from None
        if isinstance(ck, HFCheckpoint):
            tk, self._texts = _hf_tokenizer(ck)
        else:
            tk, self._texts = _gguf_tokenizer(ck)
        self._tk = tk
        self.bos = ck.bos
        self.eos = ck.eos
        self.vocab_size = max(tk.get_vocab_size(with_added_tokens=True), ck.shape["vocab_size"])
        self.chat_template = ck.chat_template

    def encode(self, text: str, *, add_bos: bool = False) -> list[int]:
        """Token ids of ``text`` (special tokens in the text are matched whole).

        ``add_bos``: add the checkpoint's special tokens around it (see the module doc).
        """
        return list(self._tk.encode(text, add_special_tokens=add_bos).ids)

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
        import jinja2.ext
        import jinja2.sandbox

        def raise_exception(message: str) -> None:
            raise jinja2.TemplateError(message)

        env = jinja2.sandbox.ImmutableSandboxedEnvironment(
            trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols]
        )
        env.filters["tojson"] = _tojson
        env.globals.update(
            raise_exception=raise_exception,
            strftime_now=lambda fmt: datetime.now().strftime(fmt),
        )
        try:
            tpl = env.from_string(self.chat_template)
            return tpl.render(
                messages=list(messages), add_generation_prompt=add_generation_prompt, **self._texts
            )
        except jinja2.TemplateError as e:
            raise ValueError(f"chat template failed: {e}") from None


def _tojson(
    x: Any,
    ensure_ascii: bool = False,
    indent: int | None = None,
    separators: tuple[str, str] | None = None,
    sort_keys: bool = False,
) -> str:
    # transformers' filter: Jinja's own escapes HTML characters, and non-ASCII is kept.
    return json.dumps(
        x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
    )


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
