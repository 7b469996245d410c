"""Challenge-response authentication of data-plane connections (sans-IO).

::

    server                                   client
    HELLO  flags=AUTH_REQUIRED, server nonce  ->
                                          <-  AUTH  client nonce || HMAC(secret, "c" || sn || cn)
    AUTH_OK  HMAC(secret, "s" || cn || sn)  ->   (client checks: mutual)

The server's nonce is fresh per connection, so a recorded AUTH answer is useless on
another connection (replay); the client's nonce makes the server's proof fresh too.
"""

from __future__ import annotations

import hashlib
import hmac
import os

NONCE_SIZE = 32
MAC_SIZE = 32
_CLIENT_TAG = b"mooncake-transfer/client"
_SERVER_TAG = b"mooncake-transfer/server"


def new_nonce() -> bytes:
    """A fresh random nonce."""
    return os.urandom(NONCE_SIZE)


def client_proof(secret: bytes, server_nonce: bytes, client_nonce: bytes) -> bytes:
    """What the client sends to prove it knows ``secret``."""
    return hmac.new(secret, _CLIENT_TAG + server_nonce + client_nonce, hashlib.sha256).digest()


def server_proof(secret: bytes, server_nonce: bytes, client_nonce: bytes) -> bytes:
    """What the server answers to prove it knows ``secret`` too."""
    return hmac.new(secret, _SERVER_TAG + client_nonce + server_nonce, hashlib.sha256).digest()


def verify(expected: bytes, got: bytes) -> bool:
    """Constant-time comparison of two proofs."""
    return len(got) == len(expected) and hmac.compare_digest(expected, got)
