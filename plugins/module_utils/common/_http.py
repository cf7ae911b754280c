# Copyright: (c) 2026, llmfleet.specdec contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# Private to the collection: HTTP with a total deadline, capped bodies, credential-safe redirects, redacted URLs (stdlib).
"""One HTTP client for every module that talks to a server, so that a hostile server costs bounded time and memory.

- ``timeout`` bounds each wait for the socket; ``total_timeout`` bounds the whole request (connect, every
  redirect, the headers and the body): a watchdog shuts the socket down at the deadline, so a server that
  drips one byte a second cannot hold the caller longer than that.
- Bodies are read in pieces and refused past a cap (:meth:`HttpReply.read_all`).
- Redirects are followed by hand. On a redirect to another origin (scheme, host or port) the credential
  headers (``Authorization``, ``Cookie``, ``Proxy-Authorization``) and every header the caller names as
  sensitive are dropped, as browsers and ``requests`` do.
- Every failure is :class:`HttpError` with a message that names the URL through :func:`redact_url`:
  pre-signed URLs carry their credentials in the query string, so no message repeats it.
"""
from __future__ import annotations

import base64
import http.client
import math
import re
import socket
import ssl
import threading
import time
import urllib.parse
import urllib.request
from typing import Any, Iterable, Mapping

from ansible_collections.llmfleet.specdec.plugins.module_utils.common._errors import SpecdecError

CREDENTIAL_HEADERS = frozenset({"authorization", "cookie", "proxy-authorization"})
REDIRECT_STATUSES = (301, 302, 303, 307, 308)
MAX_REDIRECTS = 10
READ_PIECE = 64 * 1024
# total_timeout left unset is timeout plus this: a healthy server's slowest wait plus time to send the body
TOTAL_GRACE = 300
USER_AGENT = "llmfleet.specdec"

_URL_IN_TEXT = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"<>]+")
_PATH_QUERY = re.compile(r"(/[^\s'\"?#]*)(\?[^\s'\"]*)")
_HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")


class HttpError(SpecdecError):
    """A request that failed: no connection, a broken or hostile reply, past the deadline or the body cap.

    ``timed_out`` says whether a timeout (per read or total) ended it.
    """

    def __init__(self, message: str, timed_out: bool = False) -> None:
        super().__init__(message)
        self.timed_out = timed_out


# ---------------------------------------------------------------------------------------------
# redaction


def redact_url(url: Any) -> str:
    """``url`` without its userinfo, query string and fragment (each replaced by ``***``), for messages and results.

    A pre-signed URL's query string is a credential, and so is ``user:password@``; scheme, host, port
    and path stay, so the message still says which server and file it means.
    """
    text = str(url)
    try:
        parts = urllib.parse.urlsplit(text)
        netloc = parts.netloc
    except ValueError:  # an unparsable URL: cut at the first character that may start a secret
        return re.sub(r"[?#].*$", "?***", re.sub(r"//[^/@]*@", "//***@", text), flags=re.S)
    if "@" in netloc:
        netloc = "***@" + netloc.rpartition("@")[2]
    out = f"{parts.scheme}://{netloc}{parts.path}" if parts.scheme or netloc else parts.path
    if parts.query or text.rstrip("#").endswith("?"):
        out += "?***"
    if parts.fragment:
        out += "#***"
    return out


def redact_text(text: Any) -> str:
    """``text`` with every URL in it passed through :func:`redact_url`, and the query string of any bare
    path (``/m.gguf?sig=...``) cut too: for messages that quote other errors."""
    text = _URL_IN_TEXT.sub(lambda m: redact_url(m.group(0)), str(text))
    return _PATH_QUERY.sub(lambda m: m.group(1) + "?***", text)


def checked_headers(headers: Mapping[Any, Any]) -> dict[str, str]:
    """``headers`` as strings; a header that HTTP cannot carry is refused naming only the header, never
    its value (a value is often a token)."""
    out = {}
    for name, value in headers.items():
        name, value = str(name), str(value)
        if not _HEADER_NAME.match(name):
            raise HttpError(f"url_headers: {name[:60]!r} is not a valid HTTP header name; fix or remove it")
        if "\r" in value or "\n" in value:
            raise HttpError(f"url_headers: the value of {name} contains a line break; remove it")
        try:
            value.encode("latin-1")
        except UnicodeEncodeError:
            raise HttpError(f"url_headers: the value of {name} has characters HTTP headers cannot carry "
                            "(only Latin-1); encode it the way the server expects") from None
        out[name] = value
    return out


def origin(url: str) -> tuple[str, str, int]:
    """(scheme, host, port) of an http(s) URL, the port made explicit."""
    parts = urllib.parse.urlsplit(url)
    scheme = parts.scheme.lower()
    return scheme, (parts.hostname or "").lower(), parts.port or (443 if scheme == "https" else 80)


# ---------------------------------------------------------------------------------------------
# the deadline


class _Watchdog:
    """Shuts the request's socket down when the total deadline passes, whatever phase it is blocked in."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.expires = time.monotonic() + seconds
        self.fired = False
        self._lock = threading.Lock()
        self._sock: socket.socket | None = None
        self._timer = threading.Timer(max(seconds, 0.0), self._fire)
        self._timer.daemon = True  # a pending deadline never keeps the module's process alive
        self._timer.start()

    def remaining(self) -> float:
        return self.expires - time.monotonic()

    def attach(self, sock: socket.socket) -> None:
        with self._lock:
            self._sock = sock
            if self.fired:
                self._shutdown()

    def _fire(self) -> None:
        with self._lock:
            self.fired = True
            self._shutdown()

    def _shutdown(self) -> None:
        if self._sock is not None:
            try:
                self._sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass  # already closed: nothing is blocked on it any more

    def cancel(self) -> None:
        self._timer.cancel()


def _connection(scheme: str, host: str, port: int, timeout: float, watchdog: _Watchdog,
                context: ssl.SSLContext | None) -> http.client.HTTPConnection:
    base = http.client.HTTPSConnection if scheme == "https" else http.client.HTTPConnection

    class Watched(base):  # type: ignore[misc, valid-type]
        def connect(self) -> None:
            super().connect()
            watchdog.attach(self.sock)  # the final socket (TLS-wrapped for https)

    if scheme == "https":
        return Watched(host, port, timeout=timeout, context=context)
    return Watched(host, port, timeout=timeout)


def _ssl_context(validate_certs: bool) -> ssl.SSLContext:
    context = ssl.create_default_context()
    if not validate_certs:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    return context


# ---------------------------------------------------------------------------------------------
# the reply


class HttpReply:
    """An open reply: ``status``, ``reason``, ``headers``; the body is read with :meth:`read`,
    :meth:`read_some` or :meth:`read_all`, each under the request's deadline. Close it."""

    def __init__(self, resp: http.client.HTTPResponse, conn: http.client.HTTPConnection, watchdog: _Watchdog,
                 label: str, timeout: float) -> None:
        self._resp = resp
        self._conn = conn
        self._watchdog = watchdog
        self.label = label  # "GET <redacted url>", the start of every message
        self.timeout = timeout
        self.status = resp.status
        self.reason = resp.reason
        self.headers = resp.headers
        self.received = 0  # body bytes so far, for the messages

    def _failure(self, exc: BaseException | None) -> HttpError:
        got = self.received
        if self._watchdog.fired:
            return HttpError(f"{self.label}: no complete answer within total_timeout ({self._watchdog.seconds:g} s; "
                             f"{got} bytes of the body had arrived); the server is too slow or stalls. "
                             "Raise total_timeout if it is only slow", timed_out=True)
        if isinstance(exc, (socket.timeout, TimeoutError)):
            return HttpError(f"{self.label}: the reply stalled: no data for {self.timeout:g} s after {got} bytes "
                             "of the body; raise timeout if the server is only slow", timed_out=True)
        if exc is None:
            return HttpError(f"{self.label}: the server closed the connection after {got} bytes of the body, "
                             "before the length it announced (a truncated reply)")
        return HttpError(f"{self.label}: the reply broke after {got} bytes of the body "
                         f"({type(exc).__name__}: {redact_text(exc)}); the server or the network failed mid-reply")

    def _read1(self, n: int) -> bytes:
        try:
            data = self._resp.read1(n)
        except Exception as exc:  # a broken chunk, a reset, a stall: every way a body can fail
            raise self._failure(exc) from None
        if not data and (self._watchdog.fired  # the watchdog's shutdown looks like an end of file
                         or self._resp.length):  # announced bytes never came
            raise self._failure(None)
        self.received += len(data)
        return data

    def read_some(self, n: int, need: int = 1) -> bytes:
        """At least ``need`` bytes (fewer only at the end of the body) and at most ``n``, without waiting
        for more than ``need`` once that much has arrived."""
        parts: list[bytes] = []
        got = 0
        while got < max(need, 1) and got < n:
            data = self._read1(n - got)
            if not data:
                break
            parts.append(data)
            got += len(data)
        return b"".join(parts)

    def read(self, n: int) -> bytes:
        """Exactly ``n`` bytes, fewer only where the body ends."""
        return self.read_some(n, need=n)

    def read_all(self, cap: int, what: str = "the reply") -> bytearray:
        """The whole body; more than ``cap`` bytes is an error (memory stays about ``cap``)."""
        body = bytearray()
        while True:
            data = self._read1(READ_PIECE)
            if not data:
                return body
            body += data
            if len(body) > cap:
                raise HttpError(f"{self.label}: {what} is larger than {cap} bytes, more than any reply of the "
                                "server expected here; check that the URL points at that server")

    def close(self) -> None:
        self._watchdog.cancel()
        try:
            self._resp.close()
        finally:
            self._conn.close()

    def __enter__(self) -> HttpReply:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# ---------------------------------------------------------------------------------------------
# the request


def _basic(parts: urllib.parse.SplitResult) -> str | None:
    """The Basic authorization of a URL's ``user:password@``, or None."""
    if parts.username is None:
        return None
    userinfo = f"{urllib.parse.unquote(parts.username)}:{urllib.parse.unquote(parts.password or '')}"
    return "Basic " + base64.b64encode(userinfo.encode("utf-8")).decode("ascii")


def _proxy_for(scheme: str, host: str) -> tuple[str, int, dict[str, str]] | None:
    """(host, port, headers for the proxy) of the environment's proxy for ``scheme``, as urllib reads it."""
    proxy = urllib.request.getproxies().get(scheme)
    if not proxy or urllib.request.proxy_bypass(host):
        return None
    if "://" not in proxy:
        proxy = "http://" + proxy
    _dummy, phost, pport = origin(proxy)
    auth = _basic(urllib.parse.urlsplit(proxy))
    return phost, pport, ({"Proxy-Authorization": auth} if auth else {})


def request(method: str, url: str, *, headers: Mapping[str, str] | None = None, data: bytes | None = None,
            timeout: float = 30, total_timeout: float | None = None, validate_certs: bool = True,
            use_proxy: bool = False, sensitive: Iterable[str] = (), follow_redirects: bool = True) -> HttpReply:
    """Send one request (following up to :data:`MAX_REDIRECTS` redirects) and return the open reply of any status.

    ``sensitive`` names headers (besides :data:`CREDENTIAL_HEADERS`) that must not leave the first
    origin; ``total_timeout`` None is ``timeout`` + :data:`TOTAL_GRACE`; ``follow_redirects`` False returns a
    redirect as the reply it is. Raises :class:`HttpError` with the URL redacted.
    """
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or math.isnan(timeout) or timeout <= 0:
        raise HttpError(f"timeout: expected a number of seconds > 0, got {timeout!r}")
    if total_timeout is None:
        total_timeout = timeout + TOTAL_GRACE
    if (isinstance(total_timeout, bool) or not isinstance(total_timeout, (int, float)) or math.isnan(total_timeout)
            or total_timeout <= 0):
        raise HttpError(f"total_timeout: expected a number of seconds > 0, got {total_timeout!r}")
    drop = CREDENTIAL_HEADERS | {h.lower() for h in sensitive}
    hdrs = checked_headers(headers or {})
    try:
        auth = _basic(urllib.parse.urlsplit(url))
    except ValueError:
        auth = None  # the loop below names the bad URL
    if auth and not any(k.lower() == "authorization" for k in hdrs):
        hdrs["Authorization"] = auth  # user:password@ of the URL, for its own origin only
    first = None
    watchdog = _Watchdog(total_timeout)
    context: ssl.SSLContext | None = None
    try:
        for _dummy in range(MAX_REDIRECTS + 1):
            label = f"{method} {redact_url(url)}"
            try:
                parts = urllib.parse.urlsplit(url)
                here = origin(url)  # reads the port: a bad one raises here
            except ValueError as exc:
                raise HttpError(f"{label}: not a valid URL ({redact_text(exc)}); check the host and port") from None
            scheme = parts.scheme.lower()
            if scheme not in ("http", "https") or not parts.hostname:
                raise HttpError(f"{label}: expected an http:// or https:// URL with a host")
            if first is None:
                first = here
            elif here != first:
                # another origin: what authenticated us to the first one must not reach this one
                hdrs = {k: v for k, v in hdrs.items() if k.lower() not in drop}
            send = dict(hdrs)
            send.setdefault("User-Agent", USER_AGENT)
            target = urllib.parse.urlunsplit(("", "", parts.path or "/", parts.query, ""))
            host, port = here[1], here[2]
            proxy = _proxy_for(scheme, host) if use_proxy else None
            if scheme == "https" and context is None:
                context = _ssl_context(validate_certs)
            remaining = watchdog.remaining()
            if remaining <= 0:
                raise HttpError(f"{label}: no complete answer within total_timeout ({total_timeout:g} s)",
                                timed_out=True)
            per_op = min(timeout, remaining)
            if proxy and scheme == "http":
                conn = _connection("http", proxy[0], proxy[1], per_op, watchdog, None)
                target = urllib.parse.urlunsplit(("http", parts.netloc.rpartition("@")[2], parts.path or "/",
                                                  parts.query, ""))
                send.update(proxy[2])
            elif proxy:
                conn = _connection("https", proxy[0], proxy[1], per_op, watchdog, context)
                conn.set_tunnel(host, port, headers=proxy[2])
            else:
                conn = _connection(scheme, host, port, per_op, watchdog, context)
            resp = _send(conn, method, target, data, send, label, timeout, watchdog)
            location = resp.headers.get("Location")
            if resp.status not in REDIRECT_STATUSES or not location or not follow_redirects:
                return HttpReply(resp, conn, watchdog, label, timeout)
            resp.close()
            conn.close()
            url = urllib.parse.urljoin(url, location.strip())
            if resp.status == 303 or (resp.status in (301, 302) and method == "POST"):
                method, data = "GET", None  # as browsers do: the body is not sent on
                hdrs = {k: v for k, v in hdrs.items() if k.lower() not in ("content-type", "content-length")}
        raise HttpError(f"{label}: more than {MAX_REDIRECTS} redirects; check the URL")
    except BaseException:
        watchdog.cancel()
        raise


def _send(conn: http.client.HTTPConnection, method: str, target: str, data: bytes | None,
          headers: dict[str, str], label: str, timeout: float, watchdog: _Watchdog) -> http.client.HTTPResponse:
    try:
        conn.request(method, target, body=data, headers=headers)
        resp = conn.getresponse()
        if watchdog.fired:  # headers cut short by the deadline end early, not in an error
            raise TimeoutError("total deadline")
        return resp
    except Exception as exc:  # refused, reset, a bad status line, too many headers, a stall: all named
        conn.close()
        if watchdog.fired:
            raise HttpError(f"{label}: no complete answer within total_timeout ({watchdog.seconds:g} s); "
                            "the server is too slow or stalls. Raise total_timeout if it is only slow",
                            timed_out=True) from None
        if isinstance(exc, (socket.timeout, TimeoutError)):
            raise HttpError(f"{label}: no answer within {timeout:g} s; the server is busy or stalled, "
                            "or raise timeout", timed_out=True) from None
        if isinstance(exc, http.client.HTTPException) and not isinstance(exc, http.client.RemoteDisconnected):
            raise HttpError(f"{label}: the server's reply is not valid HTTP ({type(exc).__name__}: "
                            f"{redact_text(exc)[:200]}); is this the right server and port?") from None
        if isinstance(exc, ssl.SSLError):
            raise HttpError(f"{label}: TLS failed ({redact_text(exc)}); check the certificate, "
                            "or set validate_certs=false for a server you trust") from None
        raise HttpError(f"{label}: cannot reach the server ({type(exc).__name__}: {redact_text(exc)}); "
                        "is it running and is the URL right?") from None


def probe(url: str, timeout: float) -> tuple[int, str]:
    """A health probe: (status, the start of the body); status 0 when nothing answered. Never through a proxy and
    never to where a redirect points: health is the answer of the server asked (a 3xx is not health), so a server
    that redirects cannot make another origin's 200 count for it. ``total_timeout`` bounds the whole exchange, so
    a server that drips its reply cannot stall a health wait."""
    try:
        with request("GET", url, timeout=timeout, total_timeout=2 * timeout, use_proxy=False,
                     follow_redirects=False) as reply:
            return reply.status, reply.read(2048).decode("utf-8", "replace")
    except HttpError as exc:
        return 0, str(exc)
