# Reading GGUF headers from hostile loopback HTTP servers: stalls, bad chunks, drips, redirects, secrets in URLs.
from __future__ import annotations

import json
import re
import socket

import gguf
import numpy as np
import pytest
from ansible.module_utils.common.parameters import PASS_VARS
from ansible.module_utils.testing import patch_module_args

from ansible_collections.llmfleet.specdec.plugins.module_utils.common import _http
from ansible_collections.llmfleet.specdec.plugins.module_utils.common._errors import GGUFFetchError, SpecdecError
from ansible_collections.llmfleet.specdec.plugins.module_utils.gguf._gguf import read_header
from ansible_collections.llmfleet.specdec.plugins.modules import gguf_info
from testbed.hostile_http import RawServer, Request, header_value, raw_server, response, self_signed_context
from testbed.server import free_port

SECRET = "s3cr3t-Signature-0123456789"


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> tuple[bytes, int]:
    """(the file's bytes, where its header ends)."""
    d = tmp_path_factory.mktemp("hostile")
    w = gguf.GGUFWriter(str(d / "m.gguf"), "llama")
    w.add_block_count(2)
    w.add_tokenizer_model("gpt2")
    w.add_token_list([f"token-{i:05d}" for i in range(5000)])
    w.add_tensor("w", np.zeros((256, 1024), dtype=np.float32))  # 1 MiB of data past the header
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    data = (d / "m.gguf").read_bytes()
    return data, read_header(str(d / "m.gguf")).data_offset


def _range(req: Request, size: int) -> tuple[int, int]:
    m = re.match(r"bytes=(\d+)-(\d+)$", header_value(req, "Range") or "")
    assert m, f"expected a Range request, got {req.headers}"
    return int(m.group(1)), min(int(m.group(2)), size - 1)


def _hold(server: RawServer) -> None:
    """Keep the connection open and silent until the test ends (a stalled server)."""
    server.sleep(60)


# --------------------------------------------------------------------------- broken bodies


def test_a_206_that_stalls_mid_body_is_the_projects_error(model: tuple[bytes, int]) -> None:
    data, _dummy = model

    def script(req: Request, conn: socket.socket, server: RawServer) -> None:
        start, end = _range(req, len(data))
        conn.sendall(response("206 Partial Content", data[start:start + 1000], length=end - start + 1,
                              headers={"Content-Range": f"bytes {start}-{end}/{len(data)}"}))
        _hold(server)

    with raw_server(script) as server:
        with pytest.raises(GGUFFetchError, match=r"m\.gguf: reading the GGUF header failed: .*stalled: no data "
                                                 r"for 1 s after 1000 bytes.*raise timeout"):
            read_header(f"{server.url}/m.gguf", timeout=1, first_read=65536)


def test_a_206_cut_short_is_named_truncated(model: tuple[bytes, int]) -> None:
    data, _dummy = model

    def script(req: Request, conn: socket.socket, server: RawServer) -> None:
        start, end = _range(req, len(data))
        conn.sendall(response("206 Partial Content", data[start:start + 1000], length=end - start + 1,
                              headers={"Content-Range": f"bytes {start}-{end}/{len(data)}"}))

    with raw_server(script) as server:
        with pytest.raises(GGUFFetchError, match=r"closed the connection after 1000 bytes.*truncated"):
            read_header(f"{server.url}/m.gguf", first_read=65536)


@pytest.mark.parametrize("status", ["206", "200"])
def test_a_bad_chunked_encoding_is_the_projects_error(model: tuple[bytes, int], status: str) -> None:
    data, _dummy = model

    def script(req: Request, conn: socket.socket, server: RawServer) -> None:
        start, end = _range(req, len(data))
        head = (f"HTTP/1.1 {status} OK\r\nTransfer-Encoding: chunked\r\n"
                f"Content-Range: bytes {start}-{end}/{len(data)}\r\n\r\n").encode()
        conn.sendall(head + b"10\r\n" + data[:16] + b"\r\nzz-not-hex\r\n" + data[16:64])

    with raw_server(script) as server:
        with pytest.raises(GGUFFetchError, match=r"reading the GGUF header failed: .*the reply broke after 16 bytes"):
            read_header(f"{server.url}/m.gguf", allow_full_read=True, first_read=65536)


def test_full_read_stops_once_the_header_has_arrived(model: tuple[bytes, int]) -> None:
    # The server sends the header and then nothing more, keeping the connection open: the header is
    # complete, so the read must not wait for the rest of its first chunk.
    data, header_end = model

    def script(req: Request, conn: socket.socket, server: RawServer) -> None:
        conn.sendall(response("200 OK", data[:header_end], length=len(data)))
        _hold(server)

    with raw_server(script) as server:
        hdr = read_header(f"{server.url}/m.gguf", allow_full_read=True, timeout=5, check_data=False)
    assert hdr.get("tokenizer.ggml.tokens").count == 5000
    assert hdr.bytes_read == header_end and hdr.requests == 1


def test_full_read_of_a_server_that_stops_inside_the_header(model: tuple[bytes, int]) -> None:
    data, header_end = model

    def script(req: Request, conn: socket.socket, server: RawServer) -> None:
        conn.sendall(response("200 OK", data[:header_end // 2], length=len(data)))
        _hold(server)

    with raw_server(script) as server:
        with pytest.raises(GGUFFetchError, match=rf"stalled: no data for 1 s after {header_end // 2} bytes"):
            read_header(f"{server.url}/m.gguf", allow_full_read=True, timeout=1)


def test_full_read_of_a_server_that_closes_inside_the_header(model: tuple[bytes, int]) -> None:
    data, header_end = model

    def script(req: Request, conn: socket.socket, server: RawServer) -> None:
        conn.sendall(response("200 OK", data[:header_end // 2], length=len(data)))

    with raw_server(script) as server:
        with pytest.raises(GGUFFetchError, match=r"closed the connection .*truncated"):
            read_header(f"{server.url}/m.gguf", allow_full_read=True)


# --------------------------------------------------------------------------- the total deadline


def test_a_server_dripping_its_headers_is_cut_at_total_timeout() -> None:
    def script(req: Request, conn: socket.socket, server: RawServer) -> None:
        head = b"HTTP/1.1 206 Partial Content\r\n" + b"X-Pad: " + b"a" * 400 + b"\r\n"
        for i in range(len(head)):  # one byte every 50 ms: 20 s in all, each read well inside timeout
            conn.sendall(head[i:i + 1])
            if not server.sleep(0.05):
                return

    with raw_server(script) as server:
        with pytest.raises(GGUFFetchError, match=r"no complete answer within total_timeout \(1 s\)"):
            read_header(f"{server.url}/m.gguf", timeout=2, total_timeout=1)


def test_a_server_dripping_its_body_is_cut_at_total_timeout(model: tuple[bytes, int]) -> None:
    data, _dummy = model

    def script(req: Request, conn: socket.socket, server: RawServer) -> None:
        start, end = _range(req, len(data))
        conn.sendall(response("206 Partial Content", b"", length=end - start + 1,
                              headers={"Content-Range": f"bytes {start}-{end}/{len(data)}"}))
        for byte in data[start:end + 1]:
            conn.sendall(bytes([byte]))
            if not server.sleep(0.05):
                return

    with raw_server(script) as server:
        with pytest.raises(GGUFFetchError, match=r"no complete answer within total_timeout \(1 s; \d+ bytes"):
            read_header(f"{server.url}/m.gguf", timeout=2, total_timeout=1, first_read=65536)


def test_total_timeout_must_be_positive() -> None:
    with pytest.raises(GGUFFetchError, match=r"total_timeout: expected a number of seconds > 0, got 0"):
        read_header("http://127.0.0.1:9/m.gguf", total_timeout=0)


# --------------------------------------------------------------------------- redirects and credentials


def _serve_ranges(data: bytes):
    def script(req: Request, conn: socket.socket, server: RawServer) -> None:
        start, end = _range(req, len(data))
        conn.sendall(response("206 Partial Content", data[start:end + 1],
                              headers={"Content-Range": f"bytes {start}-{end}/{len(data)}"}))
    return script


def _redirect_to(target: str):
    def script(req: Request, conn: socket.socket, server: RawServer) -> None:
        if req.path.startswith("/same/"):
            conn.sendall(response("302 Found", headers={"Location": "/m.gguf"}))
        else:
            conn.sendall(response("302 Found", headers={"Location": target + "/m.gguf"}))
    return script


CREDENTIALS = {"Authorization": "Bearer t0ken", "Cookie": "session=abc", "Proxy-Authorization": "Basic eA==",
               "X-Api-Key": "k3y"}


def test_a_redirect_to_another_port_drops_every_credential(model: tuple[bytes, int]) -> None:
    data, _dummy = model
    with raw_server(_serve_ranges(data)) as target, raw_server(_redirect_to(target.url)) as redirector:
        hdr = read_header(f"{redirector.url}/m.gguf", headers=CREDENTIALS, check_data=False)
    assert hdr.get("tokenizer.ggml.tokens").count == 5000
    assert all(header_value(r, "Authorization") == "Bearer t0ken" for r in redirector.requests)
    assert target.requests, "the redirect was not followed"
    for r in target.requests:
        for name in CREDENTIALS:
            assert header_value(r, name) is None, f"{name} reached another origin"
        assert header_value(r, "Range") is not None  # the range itself is no secret and must follow


def test_a_redirect_within_the_origin_keeps_the_credentials(model: tuple[bytes, int]) -> None:
    data, _dummy = model

    def script(req: Request, conn: socket.socket, server: RawServer) -> None:
        if req.path.startswith("/same/"):
            conn.sendall(response("302 Found", headers={"Location": "/m.gguf"}))
        else:
            _serve_ranges(data)(req, conn, server)

    with raw_server(script) as server:
        read_header(f"{server.url}/same/m.gguf", headers=CREDENTIALS, check_data=False)
    assert [r.path for r in server.requests[:2]] == ["/same/m.gguf", "/m.gguf"]
    assert all(header_value(r, "X-Api-Key") == "k3y" for r in server.requests)


def test_endless_redirects_end() -> None:
    def script(req: Request, conn: socket.socket, server: RawServer) -> None:
        conn.sendall(response("302 Found", headers={"Location": req.path + "x"}))

    with raw_server(script) as server:
        with pytest.raises(GGUFFetchError, match=r"more than 10 redirects"):
            read_header(f"{server.url}/m.gguf")
    assert len(server.requests) == 11


def test_a_redirect_to_another_scheme_is_refused() -> None:
    def script(req: Request, conn: socket.socket, server: RawServer) -> None:
        conn.sendall(response("302 Found", headers={"Location": "file:///etc/passwd"}))

    with raw_server(script) as server:
        with pytest.raises(GGUFFetchError, match=r"expected an http:// or https:// URL"):
            read_header(f"{server.url}/m.gguf")


# --------------------------------------------------------------------------- secrets in URLs


@pytest.mark.parametrize("url, shown", [
    ("https://host/m.gguf?X-Amz-Signature=abc&X-Amz-Credential=def", "https://host/m.gguf?***"),
    ("https://user:pw@host:8443/a/m.gguf", "https://***@host:8443/a/m.gguf"),
    ("http://u:p@h/m.gguf?sig=1#frag", "http://***@h/m.gguf?***#***"),
    ("http://127.0.0.1:8080/health", "http://127.0.0.1:8080/health"),
    ("http://[::1]:80/x?q", "http://[::1]:80/x?***"),
    ("http://[not-an-ip/x?token=1", "http://[not-an-ip/x?***"),
])
def test_redact_url(url: str, shown: str) -> None:
    assert _http.redact_url(url) == shown


def test_redact_text_redacts_every_url_in_a_message() -> None:
    text = "GET https://a:b@x/y?sig=1 failed, then http://z/w?t=2 too"
    assert _http.redact_text(text) == "GET https://***@x/y?*** failed, then http://z/w?*** too"


def test_no_message_repeats_a_presigned_query_or_userinfo(model: tuple[bytes, int]) -> None:
    def echo_404(req: Request, conn: socket.socket, server: RawServer) -> None:
        # servers like to echo the URL they could not find
        conn.sendall(response("404 Not Found", f"no such object: http://127.0.0.1{req.path}".encode()))

    messages = []
    with raw_server(echo_404) as server:
        base = server.url.replace("http://", f"http://user:{SECRET}@")
        for url in (f"{server.url}/m.gguf?X-Amz-Signature={SECRET}", f"{base}/m.gguf"):
            with pytest.raises(GGUFFetchError) as err:
                read_header(url)
            messages.append(str(err.value))
    with pytest.raises(GGUFFetchError) as err:
        read_header(f"http://127.0.0.1:{free_port()}/m.gguf?sig={SECRET}")
    messages.append(str(err.value))
    assert "HTTP 404" in messages[0] and "cannot reach the server" in messages[2]
    for msg in messages:
        assert SECRET not in msg
        assert "m.gguf?***" in msg or "***@127.0.0.1" in msg


def test_userinfo_becomes_basic_auth_for_its_own_origin_only(model: tuple[bytes, int]) -> None:
    data, _dummy = model
    with raw_server(_serve_ranges(data)) as target, raw_server(_redirect_to(target.url)) as redirector:
        read_header(redirector.url.replace("http://", "http://ann:pw@") + "/m.gguf", check_data=False)
    assert header_value(redirector.requests[0], "Authorization") == "Basic YW5uOnB3"
    assert all(header_value(r, "Authorization") is None for r in target.requests)


# --------------------------------------------------------------------------- the module


def test_gguf_info_never_returns_url_headers(model: tuple[bytes, int], capsys: pytest.CaptureFixture[str]) -> None:
    data, _dummy = model
    with raw_server(_serve_ranges(data)) as server:
        args = {"path": f"{server.url}/m.gguf", "url_headers": {"Authorization": f"Bearer {SECRET}"}}
        if "inject_invocation" in PASS_VARS:
            # ansible-core 2.21 returns the module's invocation only when the controller asks for it (2.19 always)
            args["_ansible_inject_invocation"] = True
        with patch_module_args(args), pytest.raises(SystemExit):
            gguf_info.main()
    raw = capsys.readouterr().out
    out = json.loads(raw)
    assert out.get("failed") is not True, out.get("msg")
    assert header_value(server.requests[0], "Authorization") == f"Bearer {SECRET}"  # it was sent
    assert SECRET not in raw
    assert out["invocation"]["module_args"]["url_headers"] == {"Authorization": "VALUE_SPECIFIED_IN_NO_LOG_PARAMETER"}


def test_gguf_info_fails_cleanly_on_a_stalling_server(model: tuple[bytes, int],
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    data, _dummy = model

    def script(req: Request, conn: socket.socket, server: RawServer) -> None:
        start, end = _range(req, len(data))
        conn.sendall(response("206 Partial Content", data[start:start + 100], length=end - start + 1,
                              headers={"Content-Range": f"bytes {start}-{end}/{len(data)}"}))
        _hold(server)

    with raw_server(script) as server:
        with patch_module_args({"path": f"{server.url}/m.gguf?sig={SECRET}", "timeout": 1}), \
                pytest.raises(SystemExit):
            gguf_info.main()
    out = json.loads(capsys.readouterr().out)
    assert out["failed"] is True
    assert "stalled" in out["msg"] and SECRET not in out["msg"]
    assert isinstance(GGUFFetchError("x"), SpecdecError)


def test_redact_text_cuts_the_query_of_a_bare_path() -> None:
    # http.client quotes only the path of a bad request target
    assert _http.redact_text("URL can't contain control characters. '/m.gguf?sig=abc\\n' (found at least ' ')") \
        == "URL can't contain control characters. '/m.gguf?***' (found at least ' ')"


@pytest.mark.parametrize("headers, words", [
    ({"Authorization": f"Bearer {SECRET}\r\nX-Evil: 1"}, "the value of Authorization contains a line break"),
    ({"Authorization": f"Bearer {SECRET}\u2019"}, "the value of Authorization has characters HTTP headers cannot"),
    ({"Bad Name": SECRET}, "'Bad Name' is not a valid HTTP header name"),
])
def test_a_header_http_cannot_carry_is_refused_without_its_value(headers: dict, words: str) -> None:
    with pytest.raises(GGUFFetchError) as err:
        read_header("http://127.0.0.1:9/m.gguf", headers=headers)
    assert words in str(err.value) and SECRET not in str(err.value)


def test_total_timeout_defaults_to_timeout_plus_grace() -> None:
    def script(req: Request, conn: socket.socket, server: RawServer) -> None:
        conn.sendall(response("404 Not Found"))

    with raw_server(script) as server:
        reply = _http.request("GET", server.url + "/x", timeout=7)
        reply.close()
    assert reply._watchdog.seconds == 7 + _http.TOTAL_GRACE == 307


def test_the_header_names_its_source_without_the_query(model: tuple[bytes, int]) -> None:
    data, _dummy = model
    with raw_server(_serve_ranges(data)) as server:
        hdr = read_header(f"{server.url}/m.gguf?X-Amz-Signature={SECRET}", check_data=False)
    assert server.requests[0].path == f"/m.gguf?X-Amz-Signature={SECRET}"  # the server still gets it
    assert hdr.source == f"{server.url}/m.gguf?***"


# --------------------------------------------------------------------------- https


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory):
    return self_signed_context(str(tmp_path_factory.mktemp("tls")))


def test_https_with_an_untrusted_certificate_names_the_fix(model: tuple[bytes, int], tls) -> None:
    data, _dummy = model
    with raw_server(_serve_ranges(data), tls=tls) as server:
        assert server.url.startswith("https://")
        with pytest.raises(GGUFFetchError, match=r"TLS failed .*CERTIFICATE_VERIFY_FAILED.*validate_certs=false"):
            read_header(f"{server.url}/m.gguf")
        hdr = read_header(f"{server.url}/m.gguf", validate_certs=False, check_data=False)
    assert hdr.get("tokenizer.ggml.tokens").count == 5000


def test_https_drip_is_cut_at_total_timeout(model: tuple[bytes, int], tls) -> None:
    data, _dummy = model

    def script(req: Request, conn: socket.socket, server: RawServer) -> None:
        start, end = _range(req, len(data))
        conn.sendall(response("206 Partial Content", b"", length=end - start + 1,
                              headers={"Content-Range": f"bytes {start}-{end}/{len(data)}"}))
        for byte in data[start:end + 1]:
            conn.sendall(bytes([byte]))
            if not server.sleep(0.05):
                return

    with raw_server(script, tls=tls) as server:
        with pytest.raises(GGUFFetchError, match=r"no complete answer within total_timeout \(1 s; \d+ bytes"):
            read_header(f"{server.url}/m.gguf", validate_certs=False, timeout=2, total_timeout=1, first_read=65536)


@pytest.mark.parametrize("url", ["http://127.0.0.1:port/m.gguf", "http://[::1/m.gguf?sig=" + SECRET])
def test_a_url_that_does_not_parse_is_named(url: str) -> None:
    with pytest.raises(GGUFFetchError, match=r"not a valid URL .*check the host and port") as err:
        read_header(url)
    assert SECRET not in str(err.value)


def test_the_environment_proxy_is_used_with_its_credentials(model: tuple[bytes, int],
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    # the proxy is a loopback server; the origin behind it is never contacted
    data, _dummy = model
    with raw_server(_serve_ranges(data)) as proxy:
        monkeypatch.setenv("http_proxy", proxy.url.replace("http://", "http://pu:pp@"))
        monkeypatch.delenv("no_proxy", raising=False)
        monkeypatch.delenv("NO_PROXY", raising=False)
        read_header("http://models.invalid/m.gguf?sig=1", check_data=False)
    first = proxy.requests[0]
    assert first.path == "http://models.invalid/m.gguf?sig=1"
    assert header_value(first, "Proxy-Authorization") == "Basic cHU6cHA="
    assert header_value(first, "Host") == "models.invalid"
