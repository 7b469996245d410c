"""Socket side of the handshake: HELLO/AUTH, LOOKUP and the switch to data mode.

Used by the server (one thread per connection) and by clients (the peer directory for
lookups, endpoints for data connections). Blocking sockets with a timeout; the bytes
are encoded and checked by ``protocol`` and ``auth``.
"""

from __future__ import annotations

import json
import socket
import struct
from typing import Any

from . import auth
from .protocol import (
    FLAG_AUTH_REQUIRED,
    HEADER_SIZE,
    MAX_CONTROL_LENGTH,
    Frame,
    Header,
    Op,
    ProtocolError,
    Status,
    decode_header,
    encode_frame,
)
from .request import TransferError

SOCKET_BUFFER = 4 << 20
"""SO_SNDBUF/SO_RCVBUF of data connections: large buffers matter most on loopback."""


class AuthError(TransferError):
    """The peer refused our credentials or failed to prove its own."""


class LocalNicError(OSError):
    """The local NIC address cannot be used (bind failed): a local, not a remote, fault."""


def recv_exact(sock: socket.socket, n: int) -> bytes:
    """Read exactly ``n`` bytes.

    Raises:
        ConnectionError: The peer closed first.
    """
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        k = sock.recv_into(view[got:])
        if k == 0:
            raise ConnectionError(f"peer closed after {got} of {n} bytes")
        got += k
    return bytes(buf)


def recv_frame(sock: socket.socket) -> Frame:
    """Read one control frame.

    Raises:
        ProtocolError: Malformed header, or a data op where a control op belongs.
        ConnectionError: The peer closed.
    """
    header = decode_header(recv_exact(sock, HEADER_SIZE))
    if header.length > MAX_CONTROL_LENGTH or header.op in (Op.READ, Op.WRITE):
        raise ProtocolError(f"unexpected {header.op.name} frame during the handshake")
    payload = recv_exact(sock, header.length) if header.length else b""
    return Frame(header, payload)


def send_frame(sock: socket.socket, op: Op, payload: bytes = b"", **fields: int) -> None:
    """Send one control frame."""
    sock.sendall(encode_frame(Header(op, **fields), payload))


def tune(sock: socket.socket) -> None:
    """Large buffers and no Nagle delay (small request headers must leave at once)."""
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SOCKET_BUFFER)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, SOCKET_BUFFER)


def set_io_timeout(sock: socket.socket, seconds: float) -> None:
    """Blocking mode with kernel send/receive timeouts, for the C loops' raw fd."""
    sock.settimeout(None)
    sec = int(seconds)
    tv = struct.pack("ll", sec, int((seconds - sec) * 1e6))
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, tv)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, tv)


def connect(
    host: str, port: int, *, local_ip: str | None, secret: bytes | None, timeout: float
) -> socket.socket:
    """Connect (from ``local_ip`` if given) and authenticate.

    Raises:
        AuthError: Credentials refused, or we hold a secret and the server cannot prove it.
        OSError: Connect failed or timed out.
        ProtocolError: The server spoke something else.
    """
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        tune(sock)
        sock.settimeout(timeout)
        if local_ip is not None:
            try:
                sock.bind((local_ip, 0))
            except OSError as exc:
                raise LocalNicError(exc.errno, f"cannot bind local NIC {local_ip}: {exc}") from exc
        sock.connect((host, port))
        hello = recv_frame(sock)
        if hello.header.op != Op.HELLO or len(hello.payload) != auth.NONCE_SIZE:
            raise ProtocolError(f"expected HELLO, got {hello.header.op.name}")
        server_nonce = hello.payload
        client_nonce = auth.new_nonce()
        required = bool(hello.header.flags & FLAG_AUTH_REQUIRED)
        if secret is not None and not required:
            raise AuthError(f"{host}:{port} does not authenticate but we hold a secret; refusing")
        proof = auth.client_proof(secret, server_nonce, client_nonce) if secret else b""
        send_frame(sock, Op.AUTH, client_nonce + proof)
        reply = recv_frame(sock)
        if reply.header.op == Op.ERROR:
            raise AuthError(
                f"{host}:{port} refused the connection: {reply.payload.decode(errors='replace')}"
            )
        if reply.header.op != Op.AUTH_OK:
            raise ProtocolError(f"expected AUTH_OK, got {reply.header.op.name}")
        if secret is not None and not auth.verify(
            auth.server_proof(secret, server_nonce, client_nonce), reply.payload
        ):
            raise AuthError(f"{host}:{port} failed to prove the shared secret")
        return sock
    except BaseException:
        sock.close()
        raise


def server_handshake(sock: socket.socket, secret: bytes | None) -> None:
    """Run the server side of HELLO/AUTH on an accepted socket.

    Raises:
        AuthError: Wrong or missing proof (an ERROR frame was sent first).
        ProtocolError, ConnectionError, OSError: The client misbehaved or left.
    """
    server_nonce = auth.new_nonce()
    send_frame(sock, Op.HELLO, server_nonce, flags=FLAG_AUTH_REQUIRED if secret else 0)
    frame = recv_frame(sock)
    if frame.header.op != Op.AUTH or len(frame.payload) < auth.NONCE_SIZE:
        raise ProtocolError(f"expected AUTH, got {frame.header.op.name}")
    client_nonce = frame.payload[: auth.NONCE_SIZE]
    proof = frame.payload[auth.NONCE_SIZE :]
    if secret is not None:
        if not auth.verify(auth.client_proof(secret, server_nonce, client_nonce), proof):
            send_frame(sock, Op.ERROR, b"authentication failed", status=Status.AUTH_FAILED)
            raise AuthError("client failed authentication")
        send_frame(sock, Op.AUTH_OK, auth.server_proof(secret, server_nonce, client_nonce))
    else:
        send_frame(sock, Op.AUTH_OK)


def lookup(sock: socket.socket, segment: str) -> dict[str, Any]:
    """Ask an authenticated server about one of its segments.

    Raises:
        TransferError: The server does not know it (message lists what it has).
    """
    send_frame(sock, Op.LOOKUP, segment.encode())
    reply = recv_frame(sock)
    if reply.header.op == Op.ERROR:
        raise TransferError(reply.payload.decode(errors="replace"))
    if reply.header.op != Op.LOOKUP_RESP:
        raise ProtocolError(f"expected LOOKUP_RESP, got {reply.header.op.name}")
    info = json.loads(reply.payload)
    if not isinstance(info, dict):
        raise ProtocolError("LOOKUP_RESP payload is not an object")
    return info
