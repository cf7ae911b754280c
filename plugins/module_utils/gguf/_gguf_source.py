# Copyright: (c) 2026, llmfleet.specdec contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# Private to the collection: where a GGUF header's bytes come from (a local file or HTTP ranges), standard library only.
"""The byte sources of the GGUF header reader (``_gguf``): a local file read in chunks, or an HTTP(S) URL read
by Range requests through the collection's one HTTP client (``_http``).

This room knows nothing of the GGUF format: ``_gguf.parse_header`` asks a :class:`HeaderBuffer` over a source
for byte ranges and checks every count itself.
"""
from __future__ import annotations

import os
import re
from typing import Any

from ansible_collections.llmfleet.specdec.plugins.module_utils.common._errors import GGUFError, GGUFFetchError
from ansible_collections.llmfleet.specdec.plugins.module_utils.common._http import HttpError, HttpReply, redact_text, redact_url
from ansible_collections.llmfleet.specdec.plugins.module_utils.common._http import request as http_request

DEFAULT_FIRST_READ = 8 * 1024 * 1024
FILE_CHUNK = 4 * 1024 * 1024
# The most bytes one read asks a source for, so a long string costs no second copy of itself in memory.
MAX_READ_PIECE = 16 * 1024 * 1024


# ---------------------------------------------------------------------------------------------
# Sources: where header bytes come from


class FileSource:
    """Sequential reads from a local file."""

    def __init__(self, path: str, chunk: int = FILE_CHUNK) -> None:
        self.name = path
        self.chunk = chunk
        self.requests = 0
        self.bytes_read = 0
        try:
            self._fh = open(path, "rb")
        except OSError as exc:
            raise GGUFError(path, None, f"cannot open the file ({exc.strerror}); check the path") from None
        self.size: int | None = os.fstat(self._fh.fileno()).st_size

    def read(self, offset: int, size: int, need: int | None = None) -> bytes:
        self._fh.seek(offset)
        data = self._fh.read(size)
        self.requests += 1
        self.bytes_read += len(data)
        return data

    def read_into(self, data: bytearray, size: int) -> int:
        """Append up to ``size`` bytes from offset ``len(data)`` to ``data``, in place: the bytes are read
        straight into the buffer 1 MiB at a time, never held twice. One request, as :meth:`read`."""
        self._fh.seek(len(data))
        self.requests += 1
        done = 0
        while done < size:
            step = min(size - done, len(_ZEROS))
            have = len(data)
            data += _ZEROS[:step] if step < len(_ZEROS) else _ZEROS
            with memoryview(data) as mv:
                got = self._fh.readinto(mv[have:have + step])
            if got < step:
                del data[have + got:]
                done += got
                break
            done += got
        self.bytes_read += done
        return done

    def close(self) -> None:
        self._fh.close()


_ZEROS = bytes(1 << 20)
_CONTENT_RANGE = re.compile(r"^\s*bytes\s+(\d+)-(\d+)/(\d+|\*)\s*$", re.I)


class HttpSource:
    """Reads by HTTP Range requests through the collection's bounded HTTP client (``_http``).

    A server that ignores Range (answers 200) is an error unless ``allow_full_read``: then the body
    is streamed and read only as far as the header needs. Every failure, the body's included, is a
    :class:`GGUFFetchError` whose message names the URL without its query string or credentials.
    """

    def __init__(
        self,
        url: str,
        *,
        allow_full_read: bool = False,
        validate_certs: bool = True,
        timeout: float = 30,
        total_timeout: float | None = None,  # None: timeout + _http.TOTAL_GRACE
        headers: dict[str, str] | None = None,
    ) -> None:
        self.url = url
        self.name = redact_url(url)  # what every message and result shows: no pre-signed query
        self.allow_full_read = allow_full_read
        self.validate_certs = validate_certs
        self.timeout = timeout
        self.total_timeout = total_timeout
        self.headers = dict(headers or {})
        self.requests = 0
        self.bytes_read = 0
        self.size: int | None = None
        self._stream: HttpReply | None = None  # an open 200 response being streamed (full-read mode)
        self._stream_pos = 0

    def _open(self, headers: dict[str, str]) -> HttpReply:
        try:
            # the caller's own headers are credentials for this origin only: dropped on a redirect elsewhere
            return http_request("GET", self.url, headers=headers, timeout=self.timeout,
                                total_timeout=self.total_timeout, validate_certs=self.validate_certs,
                                use_proxy=True, sensitive=self.headers)
        except HttpError as exc:
            raise GGUFFetchError(f"{self.name}: cannot fetch the GGUF header: {self._problem(exc)}") from None

    def _problem(self, exc: HttpError) -> str:
        """The error without a repeat of this URL (kept when a redirect made it another one)."""
        text, prefix = str(exc), f"GET {self.name}: "
        return text[len(prefix):] if text.startswith(prefix) else text

    def _body(self, reply: HttpReply, size: int, need: int) -> bytes:
        try:
            return reply.read_some(size, need)
        except HttpError as exc:
            raise GGUFFetchError(f"{self.name}: reading the GGUF header failed: {self._problem(exc)}") from None

    def read(self, offset: int, size: int, need: int | None = None) -> bytes:
        """Up to ``size`` bytes from ``offset``; fewer only at the end of the file, or, when streaming a
        full body, once ``need`` bytes have arrived (so a complete header is not held up by a slow rest)."""
        need = size if need is None else min(need, size)
        if self._stream is not None:
            return self._read_stream(offset, size, need)
        headers = dict(self.headers)
        headers["Range"] = f"bytes={offset}-{offset + size - 1}"
        resp = self._open(headers)
        self.requests += 1
        try:
            return self._answer(resp, offset, size, need)
        finally:
            if resp is not self._stream:
                resp.close()

    def _answer(self, resp: HttpReply, offset: int, size: int, need: int) -> bytes:
        status = resp.status
        if status == 416:
            # The start lies beyond the end: nothing more to read (the caller reports truncation).
            total = _content_range_total(resp.headers.get("Content-Range", ""))
            if total is not None:
                self.size = total
            return b""
        if status == 206:
            crange = resp.headers.get("Content-Range", "")
            m = _CONTENT_RANGE.match(crange)
            if not m or int(m.group(1)) != offset:
                raise GGUFFetchError(
                    f"{self.name}: the server answered a range request with Content-Range {crange[:120]!r}, "
                    f"not one starting at byte {offset}; it does not serve byte ranges correctly"
                )
            if m.group(3) != "*":
                self.size = int(m.group(3))
            data = self._body(resp, size, size)
            self.bytes_read += len(data)
            return data
        if status == 200:
            if not self.allow_full_read:
                raise GGUFFetchError(
                    f"{self.name}: the server does not support HTTP range requests (it answered 200 to "
                    "a Range request), so reading the header would mean downloading the whole file; "
                    "set allow_full_read=true to stream it anyway (only the header is read, then the "
                    "connection is closed)"
                )
            length = resp.headers.get("Content-Length")
            if length and length.isdigit():
                self.size = int(length)
            self._stream = resp
            self._stream_pos = 0
            return self._read_stream(offset, size, need)
        body = b""
        try:
            body = resp.read_some(200)
        except HttpError:
            pass  # the status says enough
        raise GGUFFetchError(
            f"{self.name}: HTTP {status} when reading the GGUF header"
            + (f": {redact_text(body.decode('utf-8', 'replace').strip())}" if body else "")
        )

    def _read_stream(self, offset: int, size: int, need: int) -> bytes:
        if offset != self._stream_pos:
            raise GGUFFetchError(f"{self.name}: internal error: non-sequential read of a streamed body")
        if self._stream is None:  # the caller opened it; a raise, unlike assert, survives python -O
            raise AssertionError(f"{self.name}: internal error: streamed read without a stream")
        data = self._body(self._stream, size, need)
        self._stream_pos += len(data)
        self.bytes_read += len(data)
        return data

    def close(self) -> None:
        if self._stream is not None:
            self._stream.close()
            self._stream = None


def _content_range_total(value: str) -> int | None:
    m = re.search(r"/(\d+)\s*$", value or "")
    return int(m.group(1)) if m else None


class HeaderBuffer:
    """The header bytes from offset 0, grown on demand from a source and never past the limit."""

    def __init__(self, source: FileSource | HttpSource, first_read: int, max_bytes: int,
                 limit_name: str | None = None) -> None:
        self.source = source
        self.data = bytearray()
        self.max_bytes = max_bytes
        self.limit_name = limit_name or f"max_header_bytes ({max_bytes})"
        # Each read fetches at least one chunk, so a header costs ceil(size / chunk) reads and
        # never more than one chunk past its end.
        self.grow = max(first_read, 64 * 1024)

    @property
    def limit(self) -> int:
        """The last byte the header may extend to: the file's end or max_header_bytes."""
        size = self.source.size
        return self.max_bytes if size is None else min(size, self.max_bytes)

    def ensure(self, end: int, at: int) -> None:
        """Make bytes [0, end) available; ``at`` is the offset being parsed, for the error."""
        have = len(self.data)
        if end <= have:
            return
        self._check_room(end, at)
        want = max(end, have + self.grow)
        size = self.source.size
        if size is not None:
            want = min(want, size)
        want = min(want, self.max_bytes)
        # In pieces of at most max(grow, MAX_READ_PIECE): a 200 MB string is never held twice (once
        # read, once appended), and a real header still costs ceil(size / grow) reads.
        piece = max(self.grow, MAX_READ_PIECE)
        read_into = getattr(self.source, "read_into", None)  # a local file reads straight into the buffer
        while len(self.data) < want:
            have = len(self.data)
            ask = min(want - have, piece)
            if read_into is not None:
                got = read_into(self.data, ask)
            else:
                chunk = self.source.read(have, ask, max(min(end - have, ask), 1))
                self.data += chunk
                got = len(chunk)
                del chunk
            if got < ask:
                break  # the end of the file, or a streamed body that sent what the parse needs
        if len(self.data) < end:
            self._check_room(end, at)  # the source may only now have told us its size
            raise GGUFError(self.source.name, at,
                            f"the file is truncated: the header needs byte {end - 1} but the file ends "
                            f"at byte {len(self.data)}")

    def _check_room(self, end: int, at: int) -> None:
        size = self.source.size
        if size is not None and end > size:
            raise GGUFError(self.source.name, at,
                            f"the file is truncated or the header is corrupt: it needs byte {end - 1} "
                            f"but the file is {size} bytes long")
        if end > self.max_bytes:
            raise GGUFError(self.source.name, at,
                            f"the header would extend past {self.limit_name}; raise "
                            "max_header_bytes if this file really has a header that large")

    def limit_text(self) -> str:
        size = self.source.size
        if size is not None and size <= self.max_bytes:
            return f"the end of the file at byte {size} (the file is truncated or the header corrupt)"
        return f"{self.limit_name} (raise max_header_bytes if the header really is that large)"

    def room(self, pos: int) -> int:
        """How many bytes may still follow ``pos`` (file end or the header limit)."""
        return self.limit - pos


def open_source(location: str, **http_options: Any) -> FileSource | HttpSource:
    """A source for a local path or an http(s) URL."""
    if re.match(r"^https?://", location, re.I):
        return HttpSource(location, **http_options)
    return FileSource(location)
