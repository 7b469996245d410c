"""rdma transport, target side: answer LOOKUP+FLAG_RDMA with a connected queue pair.

A target serves one-sided RDMA passively: it creates an RC queue pair for the
initiator, moves it to RTS towards the initiator's queue pair, and replies with its
own coordinates plus the memory key and base address of the requested segment. The
HCA then serves READs and WRITEs without the CPU; bounds are enforced by the memory
key (it covers exactly the segment) and were checked by the initiator beforehand.

The queue pair lives as long as the control connection: the connection thread blocks
on it and destroys the queue pair when the initiator closes it (or the server stops).
"""

from __future__ import annotations

import json
import logging
import socket
from collections.abc import Callable
from typing import Any

from . import handshake
from .protocol import Op, ProtocolError, Status
from .rdma_info import FLAG_RDMA, KIND_REQUEST, RdmaInfo, RdmaInfoError, SegmentKey, decode
from .request import TransferError
from .server import DataServer

log = logging.getLogger(__name__)

KeysFn = Callable[[int], SegmentKey]
"""segment id -> its key (rkey, base address, length); KeyError if unknown or not rdma."""


class RdmaAcceptor:
    """Creates target-side queue pairs for rdma requests.

    Args:
        device: The engine's ``rdma_verbs.RdmaDevice``.
        keys: Looks up the memory key of an exposed segment.
    """

    def __init__(self, device: Any, keys: KeysFn) -> None:
        self._dev = device
        self._keys = keys

    def accept(self, request: RdmaInfo) -> tuple[RdmaInfo, Any]:
        """Connect a new queue pair to the requester.

        Returns:
            (REPLY block, the ``RcQueuePair`` to close when the connection ends).

        Raises:
            KeyError: A requested segment is unknown or not registered for rdma.
            RdmaInfoError: The block is not a REQUEST or names no segment.
            TransferError: The device refused the queue pair.
        """
        if request.kind != KIND_REQUEST or not request.segments:
            raise RdmaInfoError("rdma info block is not a request for at least one segment")
        keys = [self._keys(s.segment_id) for s in request.segments]
        from .rdma_verbs import reply_info

        try:
            qp = self._dev.queue_pair(1)  # passive: the initiator's QP carries the window
        except Exception as exc:  # PyverbsError (pyverbs is optional: not importable here)
            raise TransferError(f"{self._dev.name}: cannot create a queue pair: {exc}") from exc
        try:
            qp.connect(request)
        except Exception as exc:  # PyverbsError
            qp.close()
            raise TransferError(f"{self._dev.name}: cannot connect the queue pair: {exc}") from exc
        return reply_info(qp, keys), qp


class RdmaDataServer(DataServer):
    """A ``DataServer`` whose control loop also answers rdma connection requests.

    Args:
        acceptor: Creates the queue pairs.
        *args: As ``DataServer``.
    """

    def __init__(self, acceptor: RdmaAcceptor, *args: Any) -> None:
        self._acceptor = acceptor
        super().__init__(*args)

    def _control_loop(self, conn: socket.socket) -> bool:
        """LOOKUPs (plain or rdma) until START_DATA (True) or the peer leaves (False)."""
        held: list[Any] = []
        try:
            while True:
                try:
                    frame = handshake.recv_frame(conn)
                except ConnectionError:
                    return False
                op = frame.header.op
                if op == Op.START_DATA:
                    if held:
                        raise ProtocolError("START_DATA on a connection that holds a queue pair")
                    return True
                if op != Op.LOOKUP:
                    raise ProtocolError(f"unexpected {op.name} frame after the handshake")
                if frame.header.flags & FLAG_RDMA:
                    qp = self._rdma_lookup(conn, frame.payload)
                    if qp is not None:
                        held.append(qp)
                        conn.settimeout(None)  # lives as long as the initiator keeps it
                    continue
                self._plain_lookup(conn, frame.payload)
        finally:
            for qp in held:
                qp.close()

    def _rdma_lookup(self, conn: socket.socket, payload: bytes) -> Any:
        try:
            reply, qp = self._acceptor.accept(decode(payload))
        except RdmaInfoError as exc:
            self.counters.add("malformed_frames")
            handshake.send_frame(conn, Op.ERROR, str(exc).encode(), status=Status.BAD_REQUEST)
            return None
        except KeyError as exc:
            msg = exc.args[0] if exc.args else str(exc)
            handshake.send_frame(conn, Op.ERROR, str(msg).encode(), status=Status.UNKNOWN_SEGMENT)
            return None
        except TransferError as exc:
            handshake.send_frame(conn, Op.ERROR, str(exc).encode(), status=Status.BAD_REQUEST)
            return None
        try:
            handshake.send_frame(conn, Op.LOOKUP_RESP, reply.encode(), flags=FLAG_RDMA)
        except OSError:
            qp.close()
            raise
        self.counters.add("rdma_connections")
        return qp

    def _plain_lookup(self, conn: socket.socket, payload: bytes) -> None:
        name = payload.decode(errors="replace")
        try:
            reply = self._lookup(name, self.address)
        except (KeyError, ValueError, RuntimeError) as exc:
            msg = exc.args[0] if exc.args else str(exc)
            handshake.send_frame(conn, Op.ERROR, str(msg).encode(), status=Status.UNKNOWN_SEGMENT)
            return
        handshake.send_frame(conn, Op.LOOKUP_RESP, json.dumps(reply).encode())
