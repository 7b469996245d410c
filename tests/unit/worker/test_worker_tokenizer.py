"""Byte tokenizer: round trip, specials, bad ids."""

from __future__ import annotations

import pytest

from mooncake_core.worker import BOS, EOS, PAD, VOCAB_SIZE, ByteTokenizer


def test_round_trip_utf8_with_bos() -> None:
    tok = ByteTokenizer()
    ids = tok.encode("héllo, 月")
    assert ids[0] == BOS
    assert ids[1:] == list("héllo, 月".encode())
    assert tok.decode(ids) == "héllo, 月"


def test_specials_are_dropped_and_ids_fit_the_model_vocab() -> None:
    tok = ByteTokenizer()
    assert tok.encode("ab", add_bos=False) == [97, 98]
    assert tok.decode([BOS, 97, PAD, 98, EOS]) == "ab"
    assert (BOS, EOS, PAD, VOCAB_SIZE) == (256, 257, 258, 259)


def test_bad_utf8_is_replaced_and_bad_id_rejected() -> None:
    tok = ByteTokenizer()
    assert tok.decode([0xFF]) == "\ufffd"
    with pytest.raises(ValueError, match="259"):
        tok.decode([259])
    with pytest.raises(ValueError, match="-1"):
        tok.decode([-1])
