# Copyright: (c) 2026, llmfleet.specdec contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# Private to the collection: the options every module that reads GGUF headers shares.
from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
options:
  max_header_bytes:
    description:
      - Refuse headers larger than this many bytes. Bounds memory against a hostile file.
      - A module that reads two files (M(llmfleet.specdec.spec_compat), M(llmfleet.specdec.spec_lint)) holds both
        headers at once, so they share it - the draft gets what the target's header leaves. Real headers are
        tens of MB.
      - At the default the module's peak memory stays under 512 MiB whatever the header holds (its own bytes,
        one bit per token and a 4-byte slot per distinct token text; see C(benchmarks/gguf_memory.py)).
    type: int
    default: 268435456
  first_read:
    description:
      - Bytes fetched by the first read (and by each further read). Remote headers of Qwen3.5-size
        vocabularies (about 10 MiB) then cost two requests.
    type: int
    default: 8388608
  allow_full_read:
    description:
      - When an HTTP server ignores Range requests, stream the response body anyway and stop
        reading as soon as the header's bytes have arrived. Without it such a server is an error.
    type: bool
    default: false
  validate_certs:
    description: Verify TLS certificates for https URLs.
    type: bool
    default: true
  timeout:
    description:
      - Seconds to wait for each read from the socket of an HTTP request (connecting, the status line,
        each piece of the body).
      - A server that keeps sending a byte now and then never trips it; O(total_timeout) bounds that.
    type: int
    default: 30
  total_timeout:
    description:
      - Seconds one HTTP request may take as a whole, redirects, headers and body included; past it the
        connection is shut and the read fails with an error naming the URL.
      - Bounds a server that stalls mid-body or drips its reply slowly. Raise it only for a very slow link
        (each request fetches at most O(first_read) bytes).
      - Unset, it is O(timeout) plus 300 seconds (330 with the default O(timeout)).
    type: int
  url_headers:
    description:
      - Extra HTTP request headers, for example an C(Authorization) header.
      - The values are secret (C(no_log)) and go only to the origin (scheme, host and port) of the URL;
        on a redirect to another origin they are dropped, as are C(Authorization), C(Cookie) and
        C(Proxy-Authorization).
      - Messages and results show the URL without its query string and user info (a pre-signed URL's
        query string is a credential).
    type: dict
    default: {}
"""
