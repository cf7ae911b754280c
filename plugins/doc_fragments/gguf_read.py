# Private to the collection: the options every module that reads GGUF headers shares.
from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
options:
  max_header_bytes:
    description:
      - Refuse headers larger than this many bytes. Bounds memory against a hostile file.
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
        reading once the header is parsed. Without it such a server is an error.
    type: bool
    default: false
  validate_certs:
    description: Verify TLS certificates for https URLs.
    type: bool
    default: true
  timeout:
    description: Seconds to wait for each HTTP request.
    type: int
    default: 30
  url_headers:
    description: Extra HTTP request headers, for example an C(Authorization) header.
    type: dict
    default: {}
"""
