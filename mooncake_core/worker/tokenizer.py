"""Byte-level tokenizer: token ids 0..255 are bytes, plus three special tokens.

No vocabulary file and no download: any text round-trips through UTF-8 bytes.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["BOS", "EOS", "PAD", "VOCAB_SIZE", "ByteTokenizer"]

BOS = 256
"""Beginning of sequence."""
EOS = 257
"""End of sequence: generation stops after emitting it."""
PAD = 258
"""Padding (never produced by :meth:`ByteTokenizer.encode`)."""
VOCAB_SIZE = 259
"""Smallest vocabulary that holds every byte and the three specials."""


class ByteTokenizer:
    """Encode text to byte ids and back."""

    bos = BOS
    eos = EOS
    pad = PAD
    vocab_size = VOCAB_SIZE

    def encode(self, text: str, *, add_bos: bool = True) -> list[int]:
        """Return the UTF-8 bytes of ``text`` as token ids, after ``BOS`` when asked."""
        ids = list(text.encode("utf-8"))
        return [BOS, *ids] if add_bos else ids

    def decode(self, ids: Sequence[int]) -> str:
        """Return the text of ``ids``; special tokens are dropped, bad UTF-8 is replaced.

        Raises:
            ValueError: an id outside ``[0, VOCAB_SIZE)``.
        """
        out = bytearray()
        for i in ids:
            if not 0 <= i < VOCAB_SIZE:
                raise ValueError(f"token id {i} is outside the byte vocabulary [0, {VOCAB_SIZE})")
            if i < 256:
                out.append(i)
        return out.decode("utf-8", errors="replace")
