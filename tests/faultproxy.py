"""A loopback TCP proxy between Kafka clients and a broker that loses Produce responses.

It reads the 4-byte frame sizes of both directions and the request header (api key, correlation
id). With `drop_every=N`, every Nth Produce request is forwarded to the broker, and when the
broker's response to it arrives the proxy swallows it and cuts both connections: the write
happened, the client never hears so, and retries. Start the broker with `--advertised` set to
the proxy's address so that clients reconnect through it.
"""

from __future__ import annotations

import socket
import struct
import threading

PRODUCE = 0
_SIZE = struct.Struct(">i")
_REQ_HEAD = struct.Struct(">hhi")  # api key, api version, correlation id
MAX_FRAME = 200 << 20


def _recv_exact(sock: socket.socket, n: int) -> bytes | None:
    buf = bytearray()
    while len(buf) < n:
        try:
            chunk = sock.recv(n - len(buf))
        except OSError:
            return None
        if not chunk:
            return None
        buf += chunk
    return bytes(buf)


def _read_frame(sock: socket.socket) -> bytes | None:
    head = _recv_exact(sock, 4)
    if head is None:
        return None
    (size,) = _SIZE.unpack(head)
    if size < 4 or size > MAX_FRAME:
        return None
    body = _recv_exact(sock, size)
    return None if body is None else head + body


class _Pair:
    def __init__(self, proxy: FaultProxy, client: socket.socket, broker: socket.socket) -> None:
        self.proxy = proxy
        self.client = client
        self.broker = broker
        self.cut_ids: set[int] = set()
        self.lock = threading.Lock()
        self.closed = False

    def close(self) -> None:
        with self.lock:
            if self.closed:
                return
            self.closed = True
        for s in (self.client, self.broker):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()

    def client_to_broker(self) -> None:
        try:
            while True:
                frame = _read_frame(self.client)
                if frame is None or len(frame) < 4 + _REQ_HEAD.size:
                    return
                api_key, _version, cid = _REQ_HEAD.unpack_from(frame, 4)
                if api_key == PRODUCE and self.proxy._should_cut():
                    with self.lock:
                        self.cut_ids.add(cid)
                self.broker.sendall(frame)
        except OSError:
            pass
        finally:
            self.close()

    def broker_to_client(self) -> None:
        try:
            while True:
                frame = _read_frame(self.broker)
                if frame is None:
                    return
                (cid,) = _SIZE.unpack_from(frame, 4)
                with self.lock:
                    cut = cid in self.cut_ids
                if cut:  # the broker wrote it; the client will never know
                    self.proxy._count_drop()
                    return
                self.client.sendall(frame)
        except OSError:
            pass
        finally:
            self.close()


class FaultProxy:
    def __init__(self, target_port: int, target_host: str = "127.0.0.1") -> None:
        self.target = (target_host, target_port)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.listener.settimeout(0.2)
        self.port = self.listener.getsockname()[1]
        self.drop_every = 0
        self.max_drops: int | None = None
        self.pause_after_drop = False
        #: cleared while new connections wait in the listen backlog (see pause_after_drop)
        self._accepting = threading.Event()
        self._accepting.set()
        self.produce_requests = 0
        self.dropped = 0
        self._lock = threading.Lock()
        self._pairs: list[_Pair] = []
        self._threads: list[threading.Thread] = []
        self._stopping = threading.Event()
        self._acceptor = threading.Thread(target=self._accept_loop, name="faultproxy-accept", daemon=True)
        self._acceptor.start()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def drop_produce_responses(self, every: int, max_drops: int | None = None, pause_after_drop: bool = False) -> None:
        """Lose the response of every `every`th Produce request from now on (0 stops). With
        pause_after_drop, connections made after a drop wait until `resume()`."""
        with self._lock:
            self.drop_every = every
            self.max_drops = max_drops
            self.pause_after_drop = pause_after_drop

    def resume(self) -> None:
        self._accepting.set()

    def _should_cut(self) -> bool:
        with self._lock:
            self.produce_requests += 1
            if not self.drop_every or (self.max_drops is not None and self.dropped >= self.max_drops):
                return False
            return self.produce_requests % self.drop_every == 0

    def _count_drop(self) -> None:
        with self._lock:
            self.dropped += 1
            if self.pause_after_drop:
                self._accepting.clear()

    def _accept_loop(self) -> None:
        while not self._stopping.is_set():
            if not self._accepting.wait(0.2):
                continue
            try:
                client, _ = self.listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            try:
                broker = socket.create_connection(self.target, timeout=5)
                broker.settimeout(None)
            except OSError:
                client.close()
                continue
            client.settimeout(None)
            pair = _Pair(self, client, broker)
            threads = [
                threading.Thread(target=pair.client_to_broker, daemon=True),
                threading.Thread(target=pair.broker_to_client, daemon=True),
            ]
            with self._lock:
                self._pairs = [p for p in self._pairs if not p.closed] + [pair]
                self._threads = [t for t in self._threads if t.is_alive()] + threads
            for t in threads:
                t.start()

    def close(self) -> None:
        self._stopping.set()
        self.listener.close()
        self._acceptor.join(timeout=5)
        with self._lock:
            pairs, threads = list(self._pairs), list(self._threads)
        for p in pairs:
            p.close()
        for t in threads:
            t.join(timeout=5)

    def __enter__(self) -> FaultProxy:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
