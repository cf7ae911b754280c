"""llama-server's command line and LLAMA_ARG_* environment, read the way common/arg.cpp reads them."""
from __future__ import annotations

import shlex

import pytest

from ansible_collections.llmfleet.specdec.plugins.module_utils.common._errors import SpecdecError
from ansible_collections.llmfleet.specdec.plugins.module_utils.llamacpp import _flags


def codes(config: dict) -> list[str]:
    return [p["code"] for p in config["problems"]]


# ---------------------------------------------------------------- the table


@pytest.mark.parametrize("flag, env", [
    ("--spec-type", "LLAMA_ARG_SPEC_TYPE"),
    ("-md", "LLAMA_ARG_SPEC_DRAFT_MODEL"),
    ("--model-draft", "LLAMA_ARG_SPEC_DRAFT_MODEL"),
    ("--spec-draft-n-max", "LLAMA_ARG_SPEC_DRAFT_N_MAX"),
    ("-ngld", "LLAMA_ARG_N_GPU_LAYERS_DRAFT"),
    ("-ctkd", "LLAMA_ARG_SPEC_DRAFT_CACHE_TYPE_K"),
    ("-c", "LLAMA_ARG_CTX_SIZE"),
    ("-np", "LLAMA_ARG_N_PARALLEL"),
    ("-ts", "LLAMA_ARG_TENSOR_SPLIT"),
    ("--metrics", "LLAMA_ARG_ENDPOINT_METRICS"),
    ("--no-slots", "LLAMA_ARG_ENDPOINT_SLOTS"),
    ("--spec-synth-rates", "LLAMA_ARG_SPEC_SYNTH_RATES"),
    # flags arg.cpp gives no env name: they can only travel as flags
    ("--spec-draft-device", None),
    ("-devd", None),
    ("--spec-ngram-mod-n-max", None),
    ("-lcs", None),
])
def test_env_names_are_arg_cpp_set_env_names(flag: str, env: str | None) -> None:
    assert _flags.env_name(flag) == env


def test_table_has_no_duplicate_names_or_env_names() -> None:
    names = [n for o in _flags.OPTIONS for n in o.names + o.neg]
    envs = [o.env for o in _flags.OPTIONS if o.env]
    assert len(names) == len(set(names))
    assert len(envs) == len(set(envs))


def test_every_typed_key_is_a_canonical_server_flag() -> None:
    for flag in _flags.TYPED:
        assert _flags.option(flag).canonical == flag


def test_unknown_flag_lookup_is_an_error_naming_it() -> None:
    assert _flags.lookup("--no-such-flag") is None
    with pytest.raises(SpecdecError, match="--no-such-flag"):
        _flags.env_name("--no-such-flag")


# ---------------------------------------------------------------- parsing flags


def test_aliases_underscores_and_types() -> None:
    c = _flags.parse(["--model-draft", "d.gguf", "--spec_draft_n_max", "5", "-m", "t.gguf",
                      "--spec-draft-p-min", "0.25", "--spec-type", "draft-simple", "--no-slots", "--metrics"])
    assert c["draft_model"] == "d.gguf" and c["model"] == "t.gguf"
    assert c["draft_n_max"] == 5 and c["draft_p_min"] == 0.25
    assert c["spec_types"] == ["draft-simple"]
    assert c["slots"] is False and c["metrics"] is True
    assert c["problems"] == []


def test_first_token_naming_the_binary_is_argv0() -> None:
    c = _flags.parse(["/opt/llama/bin/llama-server", "-c", "1024"])
    assert c["ctx_size"] == 1024 and c["problems"] == []


def test_equals_form_is_not_llama_cpp_syntax() -> None:
    c = _flags.parse(["--ctx-size=4096"])
    assert codes(c) == ["unknown-flag"] and "ctx_size" not in c


def test_download_only_mtp_flag_is_invalid_for_the_server() -> None:
    assert codes(_flags.parse(["--mtp"])) == ["unknown-flag"]


def test_stoi_reads_leading_digits_and_refuses_none() -> None:
    assert _flags.parse(["-c", "12abc"])["ctx_size"] == 12
    c = _flags.parse(["-c", "abc"])
    assert codes(c) == ["invalid-value"] and "ctx_size" not in c


def test_missing_value_at_the_end() -> None:
    c = _flags.parse(["--spec-type"])
    assert codes(c) == ["missing-value"]


@pytest.mark.parametrize("args", [
    ["--spec-draft-n-max", "-1"],
    ["--spec-ngram-mod-n-max", "2000"],
    ["--spec-ngram-mod-n-match", "0"],
    ["--spec-ngram-simple-size-m", "0"],
    ["--spec-ngram-map-k-min-hits", "0"],
    ["-np", "0"],
    ["--spec-synth-len", "two"],
    ["--spec-synth-len", "-1"],
    ["--spec-synth-rates", "0.5,x"],
    ["--spec-draft-p-min", "high"],
])
def test_handler_validation_of_arg_cpp(args: list[str]) -> None:
    assert codes(_flags.parse(args)) == ["invalid-value"]


@pytest.mark.parametrize("args, advice", [
    (["--draft-max", "4"], "--spec-draft-n-max"),
    (["--draft", "4"], "--spec-draft-n-max"),
    (["--draft-n-min", "1"], "--spec-draft-n-min"),
    (["--spec-ngram-size-n", "8"], "--spec-ngram-*-size-n"),
])
def test_removed_flags_carry_arg_removed_advice_and_consume_their_value(args: list[str], advice: str) -> None:
    c = _flags.parse([*args, "-c", "512"])
    assert codes(c) == ["removed-flag"]
    assert advice in c["problems"][0]["message"]
    assert c["ctx_size"] == 512  # the removed flag's value was not read as a flag


# ---------------------------------------------------------------- env


def test_env_is_read_first_and_cli_overrides_it() -> None:
    c = _flags.parse(["-c", "2048"], {"LLAMA_ARG_CTX_SIZE": "4096", "LLAMA_ARG_N_PARALLEL": "2"})
    assert c["ctx_size"] == 2048 and c["sources"]["--ctx-size"] == "cli"
    assert c["parallel"] == 2 and c["sources"]["--parallel"] == "env:LLAMA_ARG_N_PARALLEL"


def test_spec_type_env_and_cli_append_in_that_order() -> None:
    c = _flags.parse(["--spec-type", "draft-mtp", "--spec-type", "ngram-simple"], {"LLAMA_ARG_SPEC_TYPE": "ngram-mod"})
    assert c["spec_type_values"] == ["ngram-mod", "draft-mtp", "ngram-simple"]
    assert c["spec_types"] == ["ngram-mod", "draft-mtp", "ngram-simple"]


def test_bool_env_and_its_no_variant() -> None:
    assert _flags.parse([], {"LLAMA_ARG_NO_ENDPOINT_SLOTS": "1"})["slots"] is False
    assert _flags.parse([], {"LLAMA_ARG_ENDPOINT_SLOTS": "off"})["slots"] is False
    assert _flags.parse([], {"LLAMA_ARG_ENDPOINT_SLOTS": "enabled"})["slots"] is True
    assert codes(_flags.parse([], {"LLAMA_ARG_ENDPOINT_SLOTS": "maybe"})) == ["invalid-env"]


def test_valueless_env_applies_only_when_truthy() -> None:
    assert "metrics" not in _flags.parse([], {"LLAMA_ARG_ENDPOINT_METRICS": "0"})
    assert _flags.parse([], {"LLAMA_ARG_ENDPOINT_METRICS": "true"})["metrics"] is True


def test_env_value_validation_and_removed_env() -> None:
    assert codes(_flags.parse([], {"LLAMA_ARG_SPEC_DRAFT_N_MAX": "-2"})) == ["invalid-env"]
    assert codes(_flags.parse([], {"LLAMA_ARG_CTX_SIZE": "big"})) == ["invalid-env"]
    c = _flags.parse([], {"LLAMA_ARG_DRAFT_MAX": "4"})
    assert codes(c) == ["removed-flag"] and "--spec-draft-n-max" in c["problems"][0]["message"]


def test_unknown_llama_arg_env_is_reported_and_other_env_ignored() -> None:
    c = _flags.parse([], {"LLAMA_ARG_SPEC_NGRAM_MOD_N_MAX": "32", "CUDA_VISIBLE_DEVICES": "0", "HF_TOKEN": "x"})
    assert codes(c) == ["unknown-env"] and c["problems"][0]["flag"] == "LLAMA_ARG_SPEC_NGRAM_MOD_N_MAX"
    assert "ngram_mod_n_max" not in c


def test_extra_args_variable_is_read_as_flags() -> None:
    c = _flags.parse(["-c", "1024"], {"LLAMA_EXTRA_ARGS": "--spec-ngram-mod-n-max 32 -devd 'CUDA0'"})
    assert c["ngram_mod_n_max"] == 32 and c["draft_device"] == "CUDA0" and c["ctx_size"] == 1024
    assert c["sources"]["--spec-ngram-mod-n-max"] == "env:LLAMA_EXTRA_ARGS"
    with pytest.raises(SpecdecError, match="LLAMA_EXTRA_ARGS"):
        _flags.parse([], {"LLAMA_EXTRA_ARGS": "--spec-draft-device 'CUDA0"})


def test_bad_input_shapes_are_errors_naming_the_input() -> None:
    with pytest.raises(SpecdecError, match="flags must be a list"):
        _flags.parse("--spec-type draft-mtp")
    with pytest.raises(SpecdecError, match="env must be a mapping"):
        _flags.parse([], ["LLAMA_ARG_CTX_SIZE=1"])  # type: ignore[arg-type]


# ---------------------------------------------------------------- rendering


def test_to_env_puts_flags_without_env_names_in_extra_args() -> None:
    c = _flags.parse(["--spec-type", "draft-mtp,ngram-mod", "-md", "/srv/models/my draft.gguf",
                      "--spec-draft-n-max", "2", "--spec-ngram-mod-n-max", "24", "-devd", "Vulkan0",
                      "--metrics", "--no-slots"])
    env = _flags.to_env(c)
    assert env["LLAMA_ARG_SPEC_TYPE"] == "draft-mtp,ngram-mod"
    assert env["LLAMA_ARG_SPEC_DRAFT_MODEL"] == "/srv/models/my draft.gguf"
    assert env["LLAMA_ARG_SPEC_DRAFT_N_MAX"] == "2"
    assert env["LLAMA_ARG_ENDPOINT_METRICS"] == "1" and env["LLAMA_ARG_ENDPOINT_SLOTS"] == "0"
    assert shlex.split(env["LLAMA_EXTRA_ARGS"]) == ["--spec-ngram-mod-n-max", "24", "--spec-draft-device", "Vulkan0"]


def test_env_round_trip_and_args_round_trip() -> None:
    c = _flags.parse(["--spec-type", "draft-dflash,ngram-mod", "-md", "/m/d.gguf", "--spec-draft-n-max", "15",
                      "--spec-draft-p-min", "0.5", "-c", "8192", "--spec-ngram-mod-n-match", "20", "--no-slots"])
    keys = ("spec_types", "draft_model", "draft_n_max", "draft_p_min", "ctx_size", "ngram_mod_n_match", "slots")
    back = _flags.parse([], _flags.to_env(c))
    assert {k: back[k] for k in keys} == {k: c[k] for k in keys} and back["problems"] == []
    again = _flags.parse(_flags.to_args(c))
    assert {k: again[k] for k in keys} == {k: c[k] for k in keys}


def test_hand_built_typed_dict_renders() -> None:
    env = _flags.to_env({"spec_types": ["draft-mtp"], "draft_n_max": 2, "synth_rates": [0.5, 0.25]})
    assert env == {"LLAMA_ARG_SPEC_TYPE": "draft-mtp", "LLAMA_ARG_SPEC_DRAFT_N_MAX": "2",
                   "LLAMA_ARG_SPEC_SYNTH_RATES": "0.5,0.25"}
    assert _flags.to_args({"ctx_size": 4096, "kv_unified": False}) == ["--ctx-size", "4096", "--no-kv-unified"]


def test_rendering_refuses_removed_or_unknown_options() -> None:
    with pytest.raises(SpecdecError, match="removed"):
        _flags.to_env({"options": {"--draft-max": 4}})
    with pytest.raises(SpecdecError, match="--not-a-flag"):
        _flags.to_env({"options": {"--not-a-flag": 1}})
