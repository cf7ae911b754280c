"""A loopback server that speaks raw bytes on 127.0.0.1, for tests of what a hostile or broken HTTP server does.

Each connection's request is parsed (request line, headers, a Content-Length body) and handed, with the
socket, to a script that writes whatever bytes it likes: a bad status line, a short body, a stall, a drip,
a redirect. Bounded: at most ``max_connections`` connections, each script's sleeps end when the server
closes, every socket has a timeout, and everything is shut down on exit.
"""
from __future__ import annotations

import socket
import ssl
import threading
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Callable, Iterator


@dataclass
class Request:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class RawServer:
    """``script(request, conn, server)`` answers one request; ``requests`` records every request seen."""

    script: Callable[[Request, socket.socket, RawServer], None]
    max_connections: int = 200
    tls: ssl.SSLContext | None = None  # serve https with this server-side context
    requests: list[Request] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(16)
        self._sock.settimeout(0.2)
        self.port = self._sock.getsockname()[1]
        self.url = f"{'https' if self.tls else 'http'}://127.0.0.1:{self.port}"
        self._threads: list[threading.Thread] = []
        self._accepter = threading.Thread(target=self._accept, daemon=True)
        self._accepter.start()

    def _accept(self) -> None:
        served = 0
        while not self.stop.is_set() and served < self.max_connections:
            try:
                conn, _dummy = self._sock.accept()
            except (socket.timeout, OSError):
                continue
            served += 1
            t = threading.Thread(target=self._serve, args=(conn,), daemon=True)
            t.start()
            self._threads.append(t)

    def _serve(self, conn: socket.socket) -> None:
        conn.settimeout(10)
        try:
            if self.tls is not None:
                conn = self.tls.wrap_socket(conn, server_side=True)
            req = _read_request(conn)
            if req is not None:
                self.requests.append(req)
                self.script(req, conn, self)
        except (OSError, ssl.SSLError):
            pass  # the client went away: what a hostile server does not care about
        finally:
            try:
                conn.close()
            except OSError:
                pass

    def sleep(self, seconds: float) -> bool:
        """Sleep unless the server is closing; False when it is (the script should stop)."""
        return not self.stop.wait(seconds)

    def close(self) -> None:
        self.stop.set()
        self._accepter.join(5)
        self._sock.close()
        for t in self._threads:
            t.join(5)


def _read_request(conn: socket.socket) -> Request | None:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        if not chunk:
            return None
        data += chunk
        if len(data) > 1 << 20:
            return None
    head, _dummy, rest = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    method, path, _dummy = lines[0].split(" ", 2)
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, _dummy, value = line.partition(":")
        headers[name.strip()] = value.strip()
    length = int(next((v for k, v in headers.items() if k.lower() == "content-length"), "0"))
    while len(rest) < length:
        chunk = conn.recv(65536)
        if not chunk:
            break
        rest += chunk
    return Request(method, path, headers, rest[:length])


def self_signed_context(directory: str) -> ssl.SSLContext:
    """A server-side TLS context with a fresh self-signed certificate for 127.0.0.1."""
    import datetime
    import ipaddress
    import os

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                           critical=False)
            .sign(key, hashes.SHA256()))
    cert_path, key_path = os.path.join(directory, "cert.pem"), os.path.join(directory, "key.pem")
    with open(cert_path, "wb") as fh:
        fh.write(cert.public_bytes(serialization.Encoding.PEM))
    with open(key_path, "wb") as fh:
        fh.write(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                   serialization.NoEncryption()))
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert_path, key_path)
    return context


def header_value(req: Request, name: str) -> str | None:
    """A request header by name, case-insensitively."""
    return next((v for k, v in req.headers.items() if k.lower() == name.lower()), None)


def response(status: str, body: bytes = b"", headers: dict[str, str] | None = None, *,
             length: int | None = None) -> bytes:
    """The bytes of a response; ``length`` overrides Content-Length (a lie, for short bodies)."""
    hdrs = {"Content-Length": str(len(body) if length is None else length)}
    hdrs.update(headers or {})
    head = f"HTTP/1.1 {status}\r\n" + "".join(f"{k}: {v}\r\n" for k, v in hdrs.items()) + "\r\n"
    return head.encode("latin-1") + body


@contextmanager
def raw_server(script: Callable[[Request, socket.socket, RawServer], None],
               max_connections: int = 200, tls: ssl.SSLContext | None = None) -> Iterator[RawServer]:
    """Serve ``script`` on 127.0.0.1 for the length of the block (https with ``tls``)."""
    server = RawServer(script, max_connections, tls)
    try:
        yield server
    finally:
        server.close()
