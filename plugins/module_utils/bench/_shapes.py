# Copyright: (c) 2026, llmfleet.specdec contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# Private to the collection: the A/B protocol's four traffic shapes as deterministic prompts, with the checks that make them fair.
"""The traffic shapes of the field notes' A/B protocol, generated deterministically.

==========  =============================================================  =================================
shape       prompt                                                         who it can favour
==========  =============================================================  =================================
prose       about 1k tokens of filler + "reply with one sentence"          model-backed drafters only
echo        about 1.5k tokens of UNIQUE lines + "repeat verbatim"           n-gram (the output IS the prompt)
structured  repetitive output, a unique id on every line, no prompt overlap n-gram, if spans really repeat
identity    a short deterministic question                                 controls for lossless verification
==========  =============================================================  =================================

Sizes are in characters (about 4 per token: 4000 and 6000 characters for the notes' 1k and
1.5k tokens) and are configurable down for small test models. Same ``seed`` and sizes, same
prompts byte for byte, on every Python from 3.9 on: the words come from SHA-256 counters, not
from ``random``, whose algorithms may change between versions.

The echo passage is checked, not hoped: no span of ``ECHO_MAX_REPEAT_WORDS`` (8) words occurs
twice inside it, otherwise an n-gram drafter would be measured against the passage itself.
The structured prompt describes its lines in words, so the longest stretch of characters the
expected output shares with the prompt stays under ``STRUCTURED_MAX_OVERLAP_CHARS`` (16, about
four tokens, below every n-gram drafter's match length): whatever an n-gram drafter proposes
there comes from repetition inside the output.
"""
from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from typing import Any, Mapping

from ansible_collections.llmfleet.specdec.plugins.module_utils.common._errors import SpecdecError

SHAPES = ("prose", "echo", "structured", "identity")
CHARS_PER_TOKEN = 4
DEFAULT_SIZES: dict[str, dict[str, int | None]] = {
    "prose": {"chars": 4000, "n_predict": 48},
    # n_predict None: enough tokens to repeat the passage (chars / 4 tokens, plus 10 %)
    "echo": {"chars": 6000, "n_predict": None},
    # chars: the length of the expected output (sets the number of lines asked for)
    "structured": {"chars": 2000, "n_predict": 128},
    # chars: not used, the question is short by design
    "identity": {"chars": 0, "n_predict": 32},
}
ECHO_MAX_REPEAT_WORDS = 8
STRUCTURED_MAX_OVERLAP_CHARS = 16
MIN_CHARS = {"prose": 100, "echo": 200, "structured": 100, "identity": 0}

_WORDS = tuple("""
acorn amber anchor apple arch arrow aspen atlas autumn badge bamboo banner barley barrel basin
beacon beetle berry birch biscuit blanket blossom bottle boulder bramble branch breeze brick
bridge bronze brook bucket bundle butter cabin cactus camel candle canoe canyon carpet castle
cedar cellar chalk cherry chimney cinder circle clover cobalt comet copper coral cotton cradle
crater crystal cypress dagger daisy delta desert dial dolphin dove dragon drum dune eagle echo
ember engine falcon feather fern fiddle flame flint forest fossil fountain fox garnet garden
gate glacier glove goose granite gravel grove gull hammer harbor harp hazel hedge helmet heron
hill hollow honey horizon hornet husk iris island ivory jacket jade jasmine jewel kettle kite
ladder lagoon lantern larch lemon lily linen lizard locket lotus lumber magnet maple marble
meadow melon mesa meteor mirror mitten moss moth nectar needle nest nickel oak oasis olive
onyx orbit orchard otter owl paddle palm panther parcel pebble pepper pigeon pillar pine
planet plume pocket pond poppy prism pumpkin quarry quill quiver rabbit raft raven reed ribbon
ridge river robin rocket saddle saffron sail salmon sapling scarf shell shovel silver slate
sparrow spindle spruce squirrel stable stone straw stream summit swan tablet tassel thistle
thunder tiger timber tulip tundra turtle valley velvet violet walnut willow window wolf wren
yarrow yew zephyr zinc
""".split())
_ADJECTIVES = tuple("""
quiet bright narrow ancient gentle hollow distant golden silent crooked patient steady humble
rustic weathered polished restless tidy sturdy faded clever modest careful sleepy vivid
""".split())
_VERBS = tuple("""
crosses follows circles watches guards carries shelters borders outlasts mirrors answers
gathers reaches outlines frames measures remembers warms shades greets
""".split())
_TIMES = ("at dawn", "by noon", "after the rain", "in late autumn", "every spring", "before dusk",
          "during the long winter", "on quiet evenings", "when the tide turns", "through the night")
_FIELD_CHOICES = (
    ("zone", ("north", "south", "east", "west", "central")),
    ("state", ("pending", "queued", "active", "held", "closed")),
    ("owner", ("nobody", "ops", "infra", "audit", "billing")),
    ("tier", ("bronze", "silver", "gold", "plain", "spare")),
)
_QUESTIONS = (
    "What is {a} plus {b}? Reply with the number only.",
    "What is {a} times {b}? Reply with the number only.",
    "Which is larger, {a} or {b}? Reply with the number only.",
    "What is {c} minus {b}? Reply with the number only.",
)
_WORD_RE = re.compile(r"[a-z0-9]+")


class ShapeError(SpecdecError):
    """A shape name or size that cannot be used as given."""


@dataclass(frozen=True)
class Prompt:
    """One request of a shape: the chat ``user`` message, the raw ``prompt`` for /completion,
    its token budget, what a perfect model answers where the shape defines it, and its checks."""

    shape: str
    index: int
    user: str
    prompt: str
    n_predict: int
    expected: str | None = None
    checks: dict[str, Any] = field(default_factory=dict, compare=False)
    # An operator's chat request (see _traffic): its messages as given, sent as they are.
    chat: tuple[tuple[str, str], ...] | None = None

    def messages(self) -> list[dict[str, str]]:
        """The OpenAI-style chat form of the prompt."""
        if self.chat:
            return [{"role": role, "content": content} for role, content in self.chat]
        return [{"role": "user", "content": self.user}]

    @property
    def sha256(self) -> str:
        """Fingerprint of what is sent (both forms and the budget), to prove two runs sent the same."""
        blob = "\x00".join((self.shape, str(self.index), self.user, self.prompt, str(self.n_predict)))
        return hashlib.sha256(blob.encode("utf-8")).hexdigest()


# ---------------------------------------------------------------------------------------------
# deterministic choices


class _Stream:
    """Integers from SHA-256 over (seed, label, counter): the same on every platform and Python."""

    def __init__(self, seed: int, label: str) -> None:
        self._prefix = f"{seed}:{label}:".encode()
        self._counter = 0
        self._pool: list[int] = []

    def _refill(self) -> None:
        digest = hashlib.sha256(self._prefix + str(self._counter).encode()).digest()
        self._counter += 1
        self._pool = [int.from_bytes(digest[i:i + 4], "big") for i in range(0, 32, 4)]

    def below(self, n: int) -> int:
        if not self._pool:
            self._refill()
        return self._pool.pop() % n

    def choice(self, options: tuple[str, ...] | list[str]) -> str:
        return options[self.below(len(options))]

    def between(self, lo: int, hi: int) -> int:
        return lo + self.below(hi - lo + 1)


# ---------------------------------------------------------------------------------------------
# the checks


def words_of(text: str) -> list[str]:
    """Lower-cased words and numbers of ``text``, punctuation dropped: what "a span of words" counts."""
    return _WORD_RE.findall(text.lower())


def _has_repeat(seq: list[Any], n: int) -> bool:
    seen = set()
    for i in range(len(seq) - n + 1):
        gram = tuple(seq[i:i + n])
        if gram in seen:
            return True
        seen.add(gram)
    return False


def longest_repeated_span(text: str) -> int:
    """Length in words of the longest word sequence that occurs twice (or more) inside ``text``.

    0 when no word repeats. Binary search: if an n-word span repeats, so does its (n-1)-word prefix.
    """
    words = words_of(text)
    lo, hi = 0, max(len(words) - 1, 0)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if _has_repeat(words, mid):
            lo = mid
        else:
            hi = mid - 1
    return lo


def repeated_spans(text: str, n: int) -> list[str]:
    """Every distinct ``n``-word span occurring more than once inside ``text`` (for error messages)."""
    words = words_of(text)
    counts: dict[tuple[str, ...], int] = {}
    for i in range(len(words) - n + 1):
        gram = tuple(words[i:i + n])
        counts[gram] = counts.get(gram, 0) + 1
    return [" ".join(g) for g, c in counts.items() if c > 1]


def _substrings(text: str, n: int) -> set[str]:
    return {text[i:i + n] for i in range(len(text) - n + 1)}


def longest_common_substring(a: str, b: str) -> int:
    """Length in characters of the longest stretch of text that ``a`` and ``b`` share."""
    if len(a) > len(b):
        a, b = b, a
    lo, hi = 0, len(a)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        grams = _substrings(a, mid)
        if any(b[i:i + mid] in grams for i in range(len(b) - mid + 1)):
            lo = mid
        else:
            hi = mid - 1
    return lo


def longest_repeated_substring(text: str) -> int:
    """Length in characters of the longest stretch of text that occurs twice inside ``text``."""
    lo, hi = 0, max(len(text) - 1, 0)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        seen: set[str] = set()
        found = False
        for i in range(len(text) - mid + 1):
            piece = text[i:i + mid]
            if piece in seen:
                found = True
                break
            seen.add(piece)
        if found:
            lo = mid
        else:
            hi = mid - 1
    return lo


# ---------------------------------------------------------------------------------------------
# sizes


def resolve_sizes(sizes: Mapping[str, Any] | None = None) -> dict[str, dict[str, int]]:
    """The defaults with the operator's overrides: shape -> {"chars": int, "n_predict": int}."""
    sizes = sizes or {}
    if not isinstance(sizes, Mapping):
        raise ShapeError(f"sizes: expected a dict of shape -> {{chars, n_predict}}, got {sizes!r}")
    out: dict[str, dict[str, int]] = {}
    for shape, override in sizes.items():
        if shape not in SHAPES:
            raise ShapeError(f"sizes: unknown shape {shape!r}; expected one of {', '.join(SHAPES)}")
        if not isinstance(override, Mapping):
            raise ShapeError(f"sizes.{shape}: expected a dict with chars and/or n_predict, got {override!r}")
        unknown = set(override) - {"chars", "n_predict"}
        if unknown:
            raise ShapeError(f"sizes.{shape}: unknown key(s) {', '.join(sorted(unknown))}; "
                             "only chars and n_predict can be set")
    for shape in SHAPES:
        merged = dict(DEFAULT_SIZES[shape])
        merged.update(sizes.get(shape) or {})
        chars = _whole(f"sizes.{shape}.chars", merged["chars"], MIN_CHARS[shape])
        n_predict = merged["n_predict"]
        if n_predict is None:
            n_predict = -(-chars * 11 // (CHARS_PER_TOKEN * 10))  # chars / 4 tokens, plus 10 %, rounded up
        out[shape] = {"chars": chars, "n_predict": _whole(f"sizes.{shape}.n_predict", n_predict, 1)}
    return out


def _whole(name: str, value: Any, minimum: int) -> int:
    if isinstance(value, bool):
        raise ShapeError(f"{name}: expected a whole number >= {minimum}, got {value!r}")
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if not isinstance(value, int) or value < minimum:
        raise ShapeError(f"{name}: expected a whole number >= {minimum}, got {value!r}")
    return value


# ---------------------------------------------------------------------------------------------
# generators


def _raw(user: str) -> str:
    return user + "\n\nAnswer:\n"


def _sentence(rng: _Stream) -> str:
    return (f"The {rng.choice(_ADJECTIVES)} {rng.choice(_WORDS)} {rng.choice(_VERBS)} the "
            f"{rng.choice(_ADJECTIVES)} {rng.choice(_WORDS)} near the {rng.choice(_WORDS)} "
            f"{rng.choice(_TIMES)}.")


def prose_prompt(seed: int, index: int, chars: int, n_predict: int) -> Prompt:
    """Filler paragraphs of about ``chars`` characters, then "reply with one sentence"."""
    rng = _Stream(seed, f"prose:{index}")
    paragraphs: list[str] = []
    total = 0
    while total < chars:
        paragraph = " ".join(_sentence(rng) for _dummy in range(5))
        paragraphs.append(paragraph)
        total += len(paragraph) + 2
    filler = "\n\n".join(paragraphs)[:max(chars, 1)].rsplit(" ", 1)[0].rstrip(".") + "."
    user = filler + "\n\nReply with one sentence that says what the passage above is about."
    return Prompt("prose", index, user, _raw(user), n_predict,
                  checks={"filler_chars": len(filler)})


def echo_passage(seed: int, index: int, chars: int, max_repeat_words: int = ECHO_MAX_REPEAT_WORDS) -> str:
    """Numbered lines of distinct word combinations, about ``chars`` long, in which no span of
    ``max_repeat_words`` words occurs twice. A line that would repeat a span is drawn again."""
    rng = _Stream(seed, f"echo:{index}")
    seen: set[tuple[str, ...]] = set()
    lines: list[str] = []
    words: list[str] = []
    total = -1  # the length of the lines joined by newlines
    number = 0
    while total < chars:
        number += 1
        for _attempt in range(100):
            body = [rng.choice(_WORDS) for _dummy in range(rng.between(6, 10))]
            line = f"{number:03d}. " + " ".join(body)
            candidate = words + words_of(line)
            new = [tuple(candidate[i:i + max_repeat_words])
                   for i in range(max(len(words) - max_repeat_words + 1, 0), len(candidate) - max_repeat_words + 1)]
            if len(set(new)) == len(new) and not seen.intersection(new):
                break
        else:  # pragma: no cover - 100 collisions in a row cannot happen with this vocabulary
            raise ShapeError(f"echo: could not draw line {number} without a repeated span; lower sizes.echo.chars")
        seen.update(new)
        words = candidate
        lines.append(line)
        total += len(line) + 1
    passage = "\n".join(lines)
    longest = longest_repeated_span(passage)
    if longest >= max_repeat_words:  # the generator's guarantee, asserted
        raise ShapeError(f"echo: the passage repeats a span of {longest} words "
                         f"({repeated_spans(passage, longest)[:1]}); this is a bug in the generator")
    return passage


def echo_prompt(seed: int, index: int, chars: int, n_predict: int) -> Prompt:
    """A passage of unique lines and "repeat it verbatim": the output is the prompt."""
    passage = echo_passage(seed, index, chars)
    user = (passage + "\n\nRepeat the passage above verbatim, line by line, "
            "with nothing before or after it.")
    checks = {
        "lines": passage.count("\n") + 1,
        "longest_repeated_words": longest_repeated_span(passage),
        "max_repeated_words_allowed": ECHO_MAX_REPEAT_WORDS - 1,
        "longest_repeated_chars": longest_repeated_substring(passage),
    }
    return Prompt("echo", index, user, _raw(user), n_predict, expected=passage, checks=checks)


def structured_prompt(seed: int, index: int, chars: int, n_predict: int) -> Prompt:
    """A request for N records, one per line, each with a unique id and the same fields.

    The prompt describes the line format in words; the expected output (``ID-0001: zone=north
    state=held ...``) shares no stretch of ``STRUCTURED_MAX_OVERLAP_CHARS`` characters with it.
    """
    rng = _Stream(seed, f"structured:{index}")
    fields = [(name, rng.choice(values)) for name, values in _FIELD_CHOICES]
    line_format = "ID-{:04d}: " + " ".join(f"{name}={value}" for name, value in fields)
    n_lines = max(2, chars // (len(line_format.format(0)) + 1))
    expected = "\n".join(line_format.format(i) for i in range(1, n_lines + 1))
    described = ", ".join(f"its {name} is {value}" for name, value in fields)
    user = (f"Write an inventory of {n_lines} records, one record per line and nothing else. "
            "Begin each line with the record's identifier: the capital letters I and D, a hyphen, "
            "and the record's number written with four digits, counting up from one; "
            "after the identifier put a colon and a space. "
            f"Every record has the same fields in this order: {described}. "
            "Write each field as its name, an equals sign and its value, "
            "with single spaces between the fields.")
    ids = [line.split(":", 1)[0] for line in expected.splitlines()]
    if len(set(ids)) != len(ids):  # pragma: no cover - numbered by construction
        raise ShapeError("structured: duplicate ids in the expected output; this is a bug in the generator")
    overlap = longest_common_substring(user, expected)
    if overlap >= STRUCTURED_MAX_OVERLAP_CHARS:
        raise ShapeError(f"structured: the prompt shares {overlap} characters with the expected output; "
                         "this is a bug in the generator")
    checks = {
        "lines": n_lines,
        "unique_ids": len(set(ids)),
        "prompt_overlap_chars": overlap,
        "max_overlap_chars_allowed": STRUCTURED_MAX_OVERLAP_CHARS - 1,
        "longest_repeated_words_in_expected": longest_repeated_span(expected),
    }
    return Prompt("structured", index, user, _raw(user), n_predict, expected=expected, checks=checks)


def identity_prompt(seed: int, index: int, chars: int, n_predict: int) -> Prompt:
    """A short arithmetic question with one right answer (``chars`` is not used)."""
    rng = _Stream(seed, f"identity:{index}")
    a, b = rng.between(2, 49), rng.between(2, 49)
    c = a + b + rng.between(1, 50)
    template = _QUESTIONS[index % len(_QUESTIONS)]
    user = template.format(a=a, b=b, c=c)
    answers = (a + b, a * b, max(a, b), c - b)
    expected = str(answers[index % len(_QUESTIONS)])
    return Prompt("identity", index, user, _raw(user), n_predict, expected=expected, checks={})


_GENERATORS = {
    "prose": prose_prompt,
    "echo": echo_prompt,
    "structured": structured_prompt,
    "identity": identity_prompt,
}


def check_shapes(shapes: Any, custom: Mapping[str, Any] | None = None) -> list[str]:
    """The shape names as a list, each known and listed once; the operator's ``custom`` shapes follow them."""
    if custom:
        return check_shapes(shapes) + list(custom)  # _traffic refuses a custom name equal to a built-in one
    if shapes is None:
        return list(SHAPES)
    if isinstance(shapes, str) or not isinstance(shapes, (list, tuple)):
        raise ShapeError(f"shapes: expected a list of shape names, got {shapes!r}")
    if not shapes:
        raise ShapeError(f"shapes: give at least one of {', '.join(SHAPES)}")
    out = []
    for name in shapes:
        if name not in SHAPES:
            raise ShapeError(f"shapes: unknown shape {name!r}; expected one of {', '.join(SHAPES)}")
        if name in out:
            raise ShapeError(f"shapes: {name!r} is listed twice")
        out.append(name)
    return out


def build_shapes(seed: int = 0, sizes: Mapping[str, Any] | None = None, prompts_per_shape: int = 1,
                 shapes: Any = None, custom: Mapping[str, Any] | None = None) -> dict[str, list[Prompt]]:
    """shape -> its prompts, in the order of ``shapes`` (default all four). Deterministic.

    ``custom``: the operator's shapes (name -> an object whose ``prompts(count)`` gives that many
    prompts, see ``_traffic.CustomShape``), measured after the built-in ones.
    """
    seed = _whole("seed", seed, 0)
    count = _whole("prompts_per_shape", prompts_per_shape, 1)
    resolved = resolve_sizes(sizes)
    out: dict[str, list[Prompt]] = {}
    for shape in check_shapes(shapes, custom):
        if custom and shape in custom:
            out[shape] = custom[shape].prompts(count)
            continue
        size = resolved[shape]
        out[shape] = [_GENERATORS[shape](seed, i, size["chars"], size["n_predict"]) for i in range(count)]
    return out


def summarize(prompts: list[Prompt]) -> dict[str, Any]:
    """The bench's ``shapes.<shape>`` entry: prompt size, budget, checks and fingerprints."""
    checks: dict[str, Any] = {}
    for p in prompts:
        for key, value in p.checks.items():
            if isinstance(value, int) and not isinstance(value, bool) and key.startswith(("longest", "prompt_overlap")):
                checks[key] = max(checks.get(key, value), value)
            else:
                checks.setdefault(key, value)
    checks["prompts"] = len(prompts)
    checks["prompts_sha256"] = [p.sha256 for p in prompts]
    return {
        "prompt_chars": max(len(p.user) for p in prompts),
        "n_predict": max(p.n_predict for p in prompts),
        "checks": checks,
    }
