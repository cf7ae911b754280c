# Tests for the A/B traffic shapes: deterministic prompts, and the checks that keep each shape honest.
from __future__ import annotations

import hashlib
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ansible_collections.llmfleet.specdec.plugins.module_utils.bench import _shapes as shapes
from ansible_collections.llmfleet.specdec.plugins.module_utils.common._errors import SpecdecError

SMALL = {"prose": {"chars": 400, "n_predict": 24}, "echo": {"chars": 600, "n_predict": 96},
         "structured": {"chars": 300, "n_predict": 48}, "identity": {"n_predict": 16}}


def fingerprint(built: dict[str, list[shapes.Prompt]]) -> str:
    blob = json.dumps({k: [[p.user, p.prompt, p.n_predict, p.expected] for p in v] for k, v in built.items()})
    return hashlib.sha256(blob.encode()).hexdigest()


# --------------------------------------------------------------------------- determinism


def test_same_seed_gives_the_same_prompts_byte_for_byte():
    a = shapes.build_shapes(seed=7, prompts_per_shape=2)
    b = shapes.build_shapes(seed=7, prompts_per_shape=2)
    assert fingerprint(a) == fingerprint(b)
    assert [p.sha256 for p in a["echo"]] == [p.sha256 for p in b["echo"]]


def test_the_default_prompts_are_pinned():
    # The words come from SHA-256 counters, not from `random`: the same bytes on every Python.
    # A change here changes every prompt the fleet has measured with; bump the bench schema then.
    built = shapes.build_shapes(seed=0)
    assert fingerprint(built) == "9c0176eab2827e9897e3381de3f33ac20b36efaee73e217962b811f3d3036c29"
    assert built["identity"][0].user == "What is 8 plus 48? Reply with the number only."
    assert built["echo"][0].expected.splitlines()[0] == "001. fossil tiger garden river lizard blossom rocket"
    assert built["structured"][0].expected.splitlines()[0] == "ID-0001: zone=north state=closed owner=audit tier=silver"


def test_other_seeds_and_indices_give_other_prompts():
    a = shapes.build_shapes(seed=0, prompts_per_shape=2)
    b = shapes.build_shapes(seed=1, prompts_per_shape=2)
    for shape in shapes.SHAPES:
        assert a[shape][0].user != b[shape][0].user
        assert a[shape][0].user != a[shape][1].user


def test_a_prompt_does_not_depend_on_how_many_are_built():
    # spec_bench builds extra prompts for the warm-up and fresh repeats: the measured ones must not move
    few = shapes.build_shapes(seed=3, sizes=SMALL, prompts_per_shape=1)
    many = shapes.build_shapes(seed=3, sizes=SMALL, prompts_per_shape=5)
    for shape in shapes.SHAPES:
        assert few[shape][0] == many[shape][0]
        assert few[shape][0].sha256 == many[shape][0].sha256


def test_shapes_come_in_the_order_asked():
    built = shapes.build_shapes(shapes=["identity", "echo"], sizes=SMALL)
    assert list(built) == ["identity", "echo"]
    assert list(shapes.build_shapes(sizes=SMALL)) == list(shapes.SHAPES)


# --------------------------------------------------------------------------- sizes


def test_default_sizes_are_about_1k_and_1_5k_tokens():
    built = shapes.build_shapes()
    prose, echo = built["prose"][0], built["echo"][0]
    assert 3900 <= len(prose.user) <= 4200   # ~1k tokens at ~4 chars/token, plus the instruction
    assert 5900 <= len(echo.user) <= 6400    # ~1.5k tokens
    assert prose.n_predict == 48
    assert built["structured"][0].n_predict == 128
    assert built["identity"][0].n_predict == 32
    # echo's budget is enough to repeat the passage: chars / 4 tokens plus 10 %
    assert echo.n_predict == 1650
    assert len(built["identity"][0].user) < 120


def test_sizes_override_chars_and_n_predict():
    built = shapes.build_shapes(sizes={"echo": {"chars": 800}, "prose": {"n_predict": 7}})
    assert 800 <= len(built["echo"][0].expected) <= 900
    assert built["echo"][0].n_predict == 220           # derived from the new chars
    assert built["prose"][0].n_predict == 7
    assert 3900 <= len(built["prose"][0].user) <= 4200  # prose chars kept their default


@pytest.mark.parametrize("sizes, words", [
    ({"poetry": {"chars": 10}}, "sizes: unknown shape 'poetry'"),
    ({"echo": {"tokens": 10}}, "sizes.echo: unknown key(s) tokens"),
    ({"echo": 800}, "sizes.echo: expected a dict"),
    ({"echo": {"chars": 50}}, "sizes.echo.chars: expected a whole number >= 200"),
    ({"prose": {"n_predict": 0}}, "sizes.prose.n_predict: expected a whole number >= 1"),
    ({"prose": {"n_predict": True}}, "sizes.prose.n_predict"),
    ([1, 2], "sizes: expected a dict"),
])
def test_bad_sizes_name_the_input(sizes, words):
    with pytest.raises(shapes.ShapeError) as err:
        shapes.resolve_sizes(sizes)
    assert words in str(err.value)
    assert isinstance(err.value, SpecdecError)


def test_sizes_from_templated_strings_are_read_as_numbers():
    assert shapes.resolve_sizes({"prose": {"chars": "500", "n_predict": "12"}})["prose"] == {"chars": 500, "n_predict": 12}


@pytest.mark.parametrize("value, words", [
    ("echo", "shapes: expected a list"),
    ([], "shapes: give at least one"),
    (["echo", "echo"], "'echo' is listed twice"),
    (["chat"], "unknown shape 'chat'"),
])
def test_bad_shape_lists_name_the_input(value, words):
    with pytest.raises(shapes.ShapeError) as err:
        shapes.check_shapes(value)
    assert words in str(err.value)


def test_bad_counts_are_refused():
    with pytest.raises(shapes.ShapeError, match="prompts_per_shape"):
        shapes.build_shapes(prompts_per_shape=0)
    with pytest.raises(shapes.ShapeError, match="seed"):
        shapes.build_shapes(seed=-1)


# --------------------------------------------------------------------------- the checks themselves


def test_longest_repeated_span_counts_words():
    assert shapes.longest_repeated_span("a b c d") == 0
    assert shapes.longest_repeated_span("a b c x a b c y") == 3
    assert shapes.longest_repeated_span("The cat, the CAT.") == 2   # case and punctuation do not hide a repeat
    assert shapes.longest_repeated_span("") == 0
    assert shapes.repeated_spans("a b c x a b c y", 3) == ["a b c"]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from("abcd"), max_size=30))
def test_longest_repeated_span_agrees_with_brute_force(letters):
    text = " ".join(letters)
    words = list(letters)
    brute = 0
    for n in range(1, len(words)):
        grams = [tuple(words[i:i + n]) for i in range(len(words) - n + 1)]
        if len(set(grams)) < len(grams):
            brute = n
    assert shapes.longest_repeated_span(text) == brute


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet="ab c", max_size=25), st.text(alphabet="ab c", max_size=25))
def test_longest_common_substring_agrees_with_brute_force(a, b):
    brute = max((j - i for i in range(len(a)) for j in range(i + 1, len(a) + 1) if a[i:j] in b), default=0)
    assert shapes.longest_common_substring(a, b) == brute
    repeated = max((j - i for i in range(len(a)) for j in range(i + 1, len(a) + 1)
                    if a.find(a[i:j], i + 1) >= 0), default=0)
    assert shapes.longest_repeated_substring(a) == repeated


# --------------------------------------------------------------------------- echo


@pytest.mark.parametrize("seed", range(6))
def test_echo_passage_really_has_no_internal_repeated_span(seed):
    passage = shapes.build_shapes(seed=seed, prompts_per_shape=2)["echo"][1].expected
    # the property itself, checked here independently of the generator's own assertion
    words = shapes.words_of(passage)
    grams = [tuple(words[i:i + 8]) for i in range(len(words) - 7)]
    assert len(grams) > 800
    assert len(set(grams)) == len(grams)
    assert shapes.longest_repeated_span(passage) < shapes.ECHO_MAX_REPEAT_WORDS


@settings(max_examples=25, deadline=None)
@given(st.integers(min_value=0, max_value=10**9), st.integers(min_value=200, max_value=3000))
def test_echo_has_no_repeated_span_for_any_seed_and_size(seed, chars):
    passage = shapes.echo_passage(seed, 0, chars)
    assert shapes.longest_repeated_span(passage) < shapes.ECHO_MAX_REPEAT_WORDS
    assert len(passage) >= chars


def test_echo_check_is_not_vacuous():
    passage = shapes.echo_passage(0, 0, 600)
    lines = passage.splitlines()
    # copy the words of line 2 into line 5: now an 8-word span repeats and the check sees it
    lines[4] = lines[4].split(" ", 1)[0] + " " + lines[1].split(" ", 1)[1]
    doctored = "\n".join(lines)
    assert shapes.longest_repeated_span(doctored) >= 6
    assert shapes.longest_repeated_span(passage + "\n" + passage) >= 8


def test_echo_lines_are_unique_and_the_prompt_asks_for_them_verbatim():
    p = shapes.build_shapes(sizes=SMALL)["echo"][0]
    lines = p.expected.splitlines()
    assert len(lines) == p.checks["lines"]
    assert len(set(lines)) == len(lines)
    assert len({line.split(" ", 1)[1] for line in lines}) == len(lines)   # unique without the number, too
    assert p.expected in p.user and p.expected in p.prompt
    assert "verbatim" in p.user
    assert p.checks["longest_repeated_words"] < 8


# --------------------------------------------------------------------------- structured


def test_structured_ids_are_unique_and_the_output_repeats_in_form():
    p = shapes.build_shapes(prompts_per_shape=3)["structured"][2]
    lines = p.expected.splitlines()
    ids = [line.split(":")[0] for line in lines]
    assert len(ids) == len(set(ids)) == p.checks["lines"] == p.checks["unique_ids"]
    assert ids[:2] == ["ID-0001", "ID-0002"]
    assert {line.split(": ", 1)[1] for line in lines} == {lines[0].split(": ", 1)[1]}  # same fields every line
    # repetitive: the expected output repeats long spans inside itself (what an n-gram drafter can use)
    assert shapes.longest_repeated_span(p.expected) >= 8


def test_structured_prompt_shares_no_long_stretch_with_its_output():
    # checked as the longest common substring of characters between prompt and expected output
    for seed in range(5):
        p = shapes.build_shapes(seed=seed)["structured"][0]
        overlap = shapes.longest_common_substring(p.user, p.expected)
        assert overlap == p.checks["prompt_overlap_chars"]
        assert overlap < shapes.STRUCTURED_MAX_OVERLAP_CHARS
        assert p.expected.splitlines()[0] not in p.user


def test_structured_overlap_check_is_not_vacuous():
    p = shapes.build_shapes()["structured"][0]
    line = p.expected.splitlines()[3]
    assert shapes.longest_common_substring(p.user + " For example: " + line, p.expected) >= len(line)


# --------------------------------------------------------------------------- prose and identity


def test_prose_is_filler_plus_one_sentence_request():
    p = shapes.build_shapes(sizes=SMALL)["prose"][0]
    assert p.user.endswith("Reply with one sentence that says what the passage above is about.")
    assert p.expected is None
    assert 350 <= p.checks["filler_chars"] <= 400


@pytest.mark.parametrize("index", range(4))
def test_identity_is_a_short_question_with_its_right_answer(index):
    p = shapes.build_shapes(prompts_per_shape=4)["identity"][index]
    a, b = (int(w) for w in p.user.replace("?", "").replace(",", "").split() if w.isdigit())
    expected = {0: a + b, 1: a * b, 2: max(a, b), 3: a - b}[index]
    assert p.expected == str(expected)
    assert p.n_predict == 32


def test_every_prompt_has_chat_and_raw_forms():
    for plist in shapes.build_shapes(sizes=SMALL).values():
        p = plist[0]
        assert p.messages() == [{"role": "user", "content": p.user}]
        assert p.prompt.startswith(p.user) and p.prompt != p.user


def test_summary_carries_sizes_checks_and_fingerprints():
    built = shapes.build_shapes(prompts_per_shape=2)
    summary = shapes.summarize(built["echo"])
    assert summary["prompt_chars"] == max(len(p.user) for p in built["echo"])
    assert summary["n_predict"] == 1650
    assert summary["checks"]["prompts"] == 2
    assert summary["checks"]["prompts_sha256"] == [p.sha256 for p in built["echo"]]
    assert summary["checks"]["longest_repeated_words"] < 8
    assert shapes.summarize(built["structured"])["checks"]["prompt_overlap_chars"] < 16
