# Copyright: (c) 2026, llmfleet.specdec contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# Private to the collection: the operator's own traffic (JSONL files of requests) as extra named shapes of the A/B.
"""The operator's own prompts as shapes beside the four built-in ones.

A traffic file is JSON Lines, one request per line, in any of three forms:

- an OpenAI-style chat request: ``{"messages": [{"role": "user", "content": "..."}, ...]}`` (a
  ``content`` may also be a list of ``{"type": "text", "text": "..."}`` parts);
- an OpenAI-style or llama.cpp completion request: ``{"prompt": "..."}``;
- a plain prompt: a JSON string, ``"..."``.

Blank lines are skipped. Other fields of a request (``temperature``, ``max_tokens``, ``stream``...)
are ignored: the bench always sends greedy requests with the shape's own ``n_predict`` so that texts
can be compared between configs. A chat request needs the OpenAI API (``api: openai``); llama-server's
native ``/completion`` takes a raw prompt, and this module does not guess a chat template.

Prompt text is data the operator may not want in logs: no error here quotes it. Errors name the file
(``source``, the path on the controller) and the line.

The shape's prompts are the file's requests in file order; a bench that needs more prompts than the
file holds starts again at the first line, and says so (``checks.reused``), because an n-gram drafter
that keeps its table between requests drafts a repeated prompt from its own earlier answer.
"""
from __future__ import annotations

import json
import re
from typing import Any, Mapping

from ansible_collections.llmfleet.specdec.plugins.module_utils.bench._shapes import (
    SHAPES,
    STRUCTURED_MAX_OVERLAP_CHARS,
    Prompt,
    longest_common_substring,
    longest_repeated_substring,
)
from ansible_collections.llmfleet.specdec.plugins.module_utils.common._errors import SpecdecError

_NAME = re.compile(r"^[a-z][a-z0-9_-]{0,39}$")
ROLES = ("system", "developer", "user", "assistant", "tool")
# Beyond this an n-gram drafter (match length >= 4 tokens, about 16 characters) finds spans to copy.
NGRAM_OVERLAP_CHARS = STRUCTURED_MAX_OVERLAP_CHARS
# Bounds that keep a file a traffic sample, not a data set the host must hold in memory.
MAX_PROMPTS = 10_000
MAX_LINE_CHARS = 4_000_000


class TrafficError(SpecdecError):
    """A traffic shape or file that cannot be used; the message names the shape, the file and the line."""


class CustomShape:
    """One operator shape: its name, where its requests came from, their parsed form and its n_predict."""

    def __init__(self, name: str, source: str, requests: list[dict[str, Any]], n_predict: int) -> None:
        self.name = name
        self.source = source
        self.requests = requests
        self.n_predict = n_predict

    def prompts(self, count: int) -> list[Prompt]:
        """``count`` prompts in file order, starting again at the first line when the file is shorter."""
        out = []
        for i in range(count):
            req = self.requests[i % len(self.requests)]
            checks = {"source": self.source, "file_prompts": len(self.requests), "reused": count > len(self.requests)}
            chat = req.get("chat")
            out.append(Prompt(self.name, i, req["user"], req["raw"], self.n_predict,
                              checks=checks, chat=tuple(chat) if chat else None))
        return out


def _where(name: str, source: str, line: int | None = None) -> str:
    return f"traffic {name!r} ({source}" + (f", line {line})" if line is not None else ")")


def _text_of_content(content: Any, where: str) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for i, part in enumerate(content):
            if not (isinstance(part, Mapping) and part.get("type") == "text" and isinstance(part.get("text"), str)):
                raise TrafficError(f"{where}: content part {i} is not a {{\"type\": \"text\", \"text\": ...}} part; "
                                   "only text can be benchmarked, remove images and other parts")
            parts.append(part["text"])
        return "".join(parts)
    raise TrafficError(f"{where}: a message's content must be a string or a list of text parts, "
                       f"got {type(content).__name__}")


def parse_request(obj: Any, where: str) -> dict[str, Any]:
    """One line's request as {"user": text for the overlap check, "raw": raw prompt, "chat": [(role, content)] | None}."""
    if isinstance(obj, str):
        if not obj.strip():
            raise TrafficError(f"{where}: the prompt is empty; remove the line or give it text")
        return {"user": obj, "raw": obj, "chat": None}
    if not isinstance(obj, Mapping):
        raise TrafficError(f"{where}: expected a JSON object with messages or prompt, or a JSON string, "
                           f"got a JSON {type(obj).__name__}")
    if "messages" in obj and "prompt" in obj:
        raise TrafficError(f"{where}: give either messages (chat) or prompt (completion), not both")
    if "prompt" in obj:
        prompt = obj["prompt"]
        if isinstance(prompt, list) and len(prompt) == 1:
            prompt = prompt[0]
        if not isinstance(prompt, str) or not prompt.strip():
            raise TrafficError(f"{where}: prompt must be a non-empty string (token-id prompts cannot be "
                               "compared between engines)")
        return {"user": prompt, "raw": prompt, "chat": None}
    messages = obj.get("messages")
    if not isinstance(messages, list) or not messages:
        raise TrafficError(f"{where}: expected messages (a non-empty list of {{role, content}}) or prompt")
    chat = []
    for i, msg in enumerate(messages):
        if not isinstance(msg, Mapping) or msg.get("role") not in ROLES or "content" not in msg:
            raise TrafficError(f"{where}: messages[{i}] must be {{\"role\": one of {', '.join(ROLES)}, "
                               "\"content\": ...}")
        chat.append((msg["role"], _text_of_content(msg["content"], f"{where}: messages[{i}]")))
    if not any(content.strip() for _dummy, content in chat):
        raise TrafficError(f"{where}: every message is empty; give the request some text")
    user = "\n".join(content for _dummy, content in chat)
    return {"user": user, "raw": user, "chat": chat}


def parse_jsonl(text: str, name: str, source: str) -> list[dict[str, Any]]:
    """Every request of a traffic file, each with its 1-based ``line``; errors name the file and line, not the text."""
    if not isinstance(text, str):
        raise TrafficError(f"{_where(name, source)}: expected the file's text, got {type(text).__name__}")
    out = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        where = _where(name, source, number)
        if len(line) > MAX_LINE_CHARS:
            raise TrafficError(f"{where}: the line is longer than {MAX_LINE_CHARS} characters; shorten the request")
        try:
            obj = json.loads(line)
        except ValueError as exc:
            # json's message gives a column and a character offset, never the text itself
            raise TrafficError(f"{where}: not valid JSON ({exc}); write one JSON request (or a JSON string) "
                               "per line") from None
        req = parse_request(obj, where)
        req["line"] = number
        out.append(req)
        if len(out) > MAX_PROMPTS:
            raise TrafficError(f"{where}: more than {MAX_PROMPTS} requests; a sample of the traffic is enough, "
                               "keep at most that many lines")
    if not out:
        raise TrafficError(f"{_where(name, source)}: the file holds no request; give one JSON request per line")
    return out


def _whole(where: str, value: Any, minimum: int) -> int:
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise TrafficError(f"{where}: expected a whole number >= {minimum}, got {value!r}")
    return value


def load_traffic(traffic: Any, api: str = "llamacpp") -> dict[str, CustomShape]:
    """name -> CustomShape for the bench's ``traffic`` option: [{name, content, source?, n_predict}]."""
    if not traffic:
        return {}
    if not isinstance(traffic, list):
        raise TrafficError(f"traffic: expected a list of {{name, content, n_predict}}, got {type(traffic).__name__}")
    out: dict[str, CustomShape] = {}
    for i, item in enumerate(traffic):
        if not isinstance(item, Mapping):
            raise TrafficError(f"traffic[{i}]: expected a mapping with name, content and n_predict")
        name = item.get("name")
        if not isinstance(name, str) or not _NAME.match(name):
            raise TrafficError(f"traffic[{i}].name: {name!r} cannot name a shape; use lower-case letters, digits, "
                               "- and _ (at most 40, starting with a letter)")
        if name in SHAPES:
            raise TrafficError(f"traffic[{i}].name: {name!r} is a built-in shape; give your traffic another name")
        if name in out:
            raise TrafficError(f"traffic[{i}].name: {name!r} is listed twice")
        source = str(item.get("source") or f"traffic[{i}]")
        unknown = set(item) - {"name", "content", "source", "n_predict", "weight", "file"}
        if unknown:
            raise TrafficError(f"{_where(name, source)}: unknown key(s) {', '.join(sorted(unknown))}; "
                               "expected name, content, source and n_predict")
        n_predict = _whole(f"{_where(name, source)}: n_predict", item.get("n_predict"), 1)
        requests = parse_jsonl(item.get("content"), name, source)
        if api == "llamacpp":
            chat = next((r for r in requests if r["chat"]), None)
            if chat is not None:
                raise TrafficError(f"{_where(name, source, chat['line'])}: a chat request (messages) needs the "
                                   "OpenAI API; set api: openai (spec_ab_api), or give the line as "
                                   "{\"prompt\": ...} for llama-server's native /completion")
        out[name] = CustomShape(name, source, requests, n_predict)
    return out


def overlap_checks(prompts: list[Prompt], texts: Mapping[str, str]) -> dict[str, Any]:
    """Can an n-gram drafter help this shape? From the prompts and the answers measured for them.

    ``texts``: prompt sha256 -> the answer. ``prompt_output_overlap_chars`` is the longest stretch an
    answer shares with its prompt (what prompt-lookup drafters copy), ``output_repeated_chars`` the
    longest stretch an answer repeats inside itself (what ngram-mod / ngram-cache copy); either at
    ``NGRAM_OVERLAP_CHARS`` or more means n-gram drafting has spans to propose.
    """
    overlap = repeated = 0
    answered = 0
    for p in prompts:
        text = texts.get(p.sha256)
        if not text:
            continue
        answered += 1
        overlap = max(overlap, longest_common_substring(p.user, text))
        repeated = max(repeated, longest_repeated_substring(text))
    return {
        "answers_checked": answered,
        "prompt_output_overlap_chars": overlap if answered else None,
        "output_repeated_chars": repeated if answered else None,
        "ngram_threshold_chars": NGRAM_OVERLAP_CHARS,
        "ngram_can_help": (overlap >= NGRAM_OVERLAP_CHARS or repeated >= NGRAM_OVERLAP_CHARS) if answered else None,
    }


def add_ngram_checks(bench: dict[str, Any], measured: Mapping[str, list[Prompt]]) -> None:
    """Adds ``shapes.<shape>.ngram`` (:func:`overlap_checks`) to a finished bench, built-in and custom shapes alike."""
    texts = {r.get("prompt_sha256"): r.get("text") for r in bench.get("requests") or [] if isinstance(r.get("text"), str)}
    for shape, prompts in measured.items():
        if shape in bench.get("shapes", {}):
            bench["shapes"][shape]["ngram"] = overlap_checks(prompts, texts)


def ngram_rows(entries: list[Mapping[str, Any]], baseline: str) -> list[dict[str, Any]]:
    """Per shape, from the baseline's first bench that has them: can n-gram drafting help (the report's table)."""
    for e in entries:
        bench = e.get("bench") if isinstance(e.get("bench"), Mapping) else None
        if e.get("config") != baseline or not bench:
            continue
        rows = []
        for shape, summary in (bench.get("shapes") or {}).items():
            checks = summary.get("ngram") if isinstance(summary, Mapping) else None
            if isinstance(checks, Mapping):
                source = (summary.get("checks") or {}).get("source") if shape not in SHAPES else "built-in"
                rows.append(dict(checks, shape=shape, source=source or "operator's file"))
        if rows:
            return rows
    return []
