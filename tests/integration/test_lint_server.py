"""spec_lint against the real llama-server: the server is the oracle.

Each case lints a config with spec_lint (reading the standard models' headers, as the module does),
then starts llama-server with exactly that config and watches what it does: exit 1 (refuses), a
signal (aborts), or /health ok with each slot's ``speculative`` flag (serves with or without
speculation). The prediction must match, case by case. The flag table of _flags is regenerated
from the pinned tree's common/arg.cpp and its env names checked against the binary's --help.
"""
from __future__ import annotations

import os
import re
import subprocess
import time
from pathlib import Path

import pytest

from ansible_collections.llmfleet.specdec.plugins.module_utils.lint._lint import run_spec_lint
from ansible_collections.llmfleet.specdec.plugins.module_utils.llamacpp import _flags
from testbed.flags_table import TABLE, render_table, server_option_rows, server_options_from_arg_cpp
from testbed.server import LLAMA_CPP_PYTHON_VERSION, LlamaServer, LlamaServerError

pytestmark = pytest.mark.integration

SYNTH_LOG = "synthetic speculative acceptance is enabled for benchmarking; generated output is not valid"

# name: (target, draft, llama-server args, env, predicted outcome, finding code that must explain it)
CASES: dict[str, tuple[str, str | None, list[str], dict[str, str], str, str | None]] = {
    "unknown-spec-type": ("target.gguf", None, ["--spec-type", "draft-bogus"], {}, "refuses", "spec-type-unknown"),
    "old-mtp-name-cli": ("target.gguf", None, ["--spec-type", "mtp"], {}, "refuses", "spec-type-renamed"),
    "old-mtp-name-env": ("target.gguf", None, [], {"LLAMA_ARG_SPEC_TYPE": "mtp"}, "refuses", "spec-type-renamed"),
    "removed-draft-flag": ("target.gguf", None, ["--spec-type", "ngram-mod", "--draft-max", "4"], {}, "refuses",
                           "removed-flag"),
    "mtp-without-nextn": ("target.gguf", None, ["--spec-type", "draft-mtp"], {}, "refuses",
                          "mtp-context-without-nextn"),
    "mtp-meets-the-drafters-file": ("target.gguf", "draft.gguf", ["--spec-type", "draft-mtp,draft-simple"], {},
                                    "refuses", "mtp-context-without-nextn"),
    "mtp-on-unwired-architecture": ("target-mtp.gguf", None, ["--spec-type", "draft-mtp"], {}, "refuses",
                                    "mtp-arch-without-mtp-graph"),
    "dflash-on-a-plain-draft": ("target.gguf", "draft.gguf", ["--spec-type", "draft-dflash"], {}, "aborts",
                                "dflash-needs-dflash-draft"),
    "two-context-backed-types": ("target.gguf", "draft.gguf", ["--spec-type", "draft-simple,draft-dflash"], {},
                                 "aborts", "dflash-needs-dflash-draft"),
    "ngram-types-without-draft": ("target.gguf", None, ["--spec-type", "ngram-mod,ngram-simple"], {},
                                  "serves-with-speculation", None),
    "drafter-dropped-ngram-kept": ("target.gguf", None, ["--spec-type", "draft-dflash,ngram-mod"], {},
                                   "serves-with-speculation", "needs-draft-context"),
    "drafter-without-draft": ("target.gguf", None, ["--spec-type", "draft-dflash"], {},
                              "serves-without-speculation", "needs-draft-context"),
    "draft-simple-without-draft-drops-all": ("target.gguf", None, ["--spec-type", "ngram-mod,draft-simple"], {},
                                             "serves-without-speculation", "draft-simple-without-draft"),
    "vocab-mismatched-draft": ("target.gguf", "draft-othertok.gguf", ["--spec-type", "draft-simple"], {},
                               "serves-without-speculation", "draft-vocab-incompatible"),
    "matched-draft": ("target.gguf", "draft.gguf", ["--spec-type", "draft-simple"], {},
                      "serves-with-speculation", None),
    "draft-without-spec-type": ("target.gguf", "draft.gguf", [], {}, "serves-without-speculation",
                                "draft-without-type"),
    "eagle3-on-a-plain-draft": ("target.gguf", "draft.gguf", ["--spec-type", "draft-eagle3,ngram-mod"], {},
                                "serves-without-speculation", "eagle3-needs-eagle3-draft"),
    "none-inside-the-list": ("target.gguf", None, ["--spec-type", "ngram-mod,none"], {},
                             "serves-without-speculation", "spec-type-none-in-list"),
    "names-after-none-are-never-read": ("target.gguf", None, ["--spec-type", "none,draft-bogus"], {},
                                        "serves-without-speculation", "spec-type-none-in-list"),
    "env-and-cli-spec-types-append": ("target.gguf", "draft.gguf", ["--spec-type", "ngram-mod"],
                                      {"LLAMA_ARG_SPEC_TYPE": "draft-simple"}, "serves-with-speculation", None),
    "synthetic-acceptance": ("target.gguf", None, ["--spec-type", "ngram-mod", "--spec-synth-len", "2"], {},
                             "serves-with-speculation", None),
    "synthetic-without-speculation": ("target.gguf", None, ["--spec-type", "draft-dflash", "--spec-synth-len", "2"],
                                      {}, "refuses", "synthetic-without-speculation"),
    "synthetic-rates-for-another-n-max": ("target.gguf", None,
                                          ["--spec-type", "ngram-mod", "--spec-synth-rates", "0.5,0.4"], {},
                                          "refuses", "synthetic-invalid"),
    "synthetic-makes-a-throw-fatal": ("target.gguf", "draft.gguf",
                                      ["--spec-type", "draft-eagle3", "--spec-synth-len", "2"], {}, "refuses",
                                      "eagle3-needs-eagle3-draft"),
    # the field-notes seam: target-mtp.gguf HAS a nextn head, yet draft-mtp,draft-dflash dies at load, because
    # MTP builds its context from the one draft context's file — the DFlash drafter's
    "mtp-meets-the-dflash-drafter": ("target-mtp.gguf", "draft-dflash.gguf", ["--spec-type", "draft-mtp,draft-dflash"],
                                     {}, "refuses", "mtp-context-without-nextn"),
    "dflash-drafter-with-ngram-layered": ("target.gguf", "draft-dflash.gguf", ["--spec-type", "draft-dflash,ngram-mod"],
                                          {}, "serves-with-speculation", None),
    "dflash-type-inferred-from-header": ("target.gguf", "draft-dflash.gguf", [], {}, "serves-with-speculation", None),
    "dspark-drafter": ("target.gguf", "draft-dspark.gguf", ["--spec-type", "draft-dspark"], {},
                       "serves-with-speculation", None),
    "eagle3-on-a-dflash-draft": ("target.gguf", "draft-dflash.gguf", ["--spec-type", "draft-eagle3"], {},
                                 "serves-without-speculation", "eagle3-needs-eagle3-draft"),
    "dflash-draft-without-mask-token": ("target.gguf", "draft-dflash-nomask.gguf", ["--spec-type", "draft-dflash"],
                                        {}, "aborts", "dflash-draft-without-mask-token"),
}
MASK_KEY = b"tokenizer.ggml.mask_token_id"


@pytest.fixture(scope="module")
def models(standard_models: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The standard set plus a dflash draft whose mask-token key is renamed away (same length, same layout)."""
    nomask = tmp_path_factory.mktemp("lint-models") / "draft-dflash-nomask.gguf"
    data = standard_models["draft-dflash.gguf"].read_bytes()
    assert data.count(MASK_KEY) == 1, "the standard dflash draft is expected to carry a mask token"
    nomask.write_bytes(data.replace(MASK_KEY, b"tokenizer.ggml.mask_token_xx"))
    return {**standard_models, nomask.name: nomask}


def observe(server: LlamaServer, timeout: float = 20.0) -> str:
    """What llama-server did with the config: refuses / aborts / serves-(with|without)-speculation."""
    server.start(wait=False)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        rc = server.returncode
        if rc is not None:
            return "refuses" if rc == 1 else ("aborts" if rc < 0 or rc == 134 else f"exit {rc}")
        try:
            status, _dummy = server.request("GET", "/health", timeout=2.0)
        except OSError:
            status = 0
        if status == 200:
            if not all(slot.get("speculative") for slot in server.slots()):
                return "serves-without-speculation"
            # one drafted request: some drafters only fail when first asked for a draft
            try:
                server.completion("Lighthouse keepers trimmed wicks and watched storms", n_predict=12, temperature=0)
                return "serves-with-speculation"
            except (OSError, LlamaServerError):
                pass
            for _dummy in range(40):  # the request failed: give a dying process its moment
                if server.returncode is not None:
                    break
                time.sleep(0.05)
            rc = server.returncode
            if rc is not None:
                return "aborts" if rc < 0 or rc == 134 else f"exit {rc} after serving"
            return "a drafted request failed while the server stayed up"
        time.sleep(0.05)
    return "no answer"


@pytest.mark.parametrize("case", list(CASES))
def test_spec_lint_predicts_llama_server(case: str, models: dict[str, Path], llama_server_bin: str,
                                         tmp_path: Path) -> None:
    target, draft, args, env, expected, code = CASES[case]
    target_path = models[target]
    draft_path = models[draft] if draft else None
    flags = ["-m", str(target_path)] + (["-md", str(draft_path)] if draft_path else []) + args
    predicted = run_spec_lint({"engine": "llamacpp", "flags": flags, "env": env})

    server = LlamaServer(target_path, draft=draft_path, args=args, env=env, binary=llama_server_bin,
                         log_dir=tmp_path, ctx_size=512)
    try:
        observed = observe(server)
    finally:
        server.stop()
    log = server.log_text()

    assert predicted["outcome"] == expected, predicted
    assert observed == predicted["outcome"], (
        f"{case}: spec_lint said {predicted['outcome']}, llama-server {observed}\n{log[-3000:]}")
    assert predicted["ok"] is (expected not in ("refuses", "aborts"))
    if code is not None:
        kind = "errors" if expected in ("refuses", "aborts") else "silent_off"
        assert code in [f["code"] for f in predicted[kind]], predicted
    else:
        assert predicted["errors"] == [] and predicted["silent_off"] == []
    # the synthetic-acceptance warning is given exactly when llama-server logs that its output is invalid
    warned = "synthetic-acceptance" in [f["code"] for f in predicted["warnings"]]
    assert warned is (SYNTH_LOG in log)


def test_effective_chain_is_llama_cpps_order_not_the_cli_order(standard_models: dict[str, Path]) -> None:
    target = str(standard_models["target.gguf"])
    chains = [run_spec_lint({"engine": "llamacpp", "flags": ["-m", target, "--spec-type", order]})["effective_chain"]
              for order in ("ngram-mod,ngram-simple,ngram-map-k", "ngram-map-k,ngram-simple,ngram-mod")]
    assert chains[0] == chains[1] == ["ngram-simple", "ngram-map-k", "ngram-mod"]


def test_draft_type_inference_with_no_spec_type_reads_the_mtp_header(standard_models: dict[str, Path]) -> None:
    # target-mtp.gguf carries blk.3.nextn.eh_proj.weight: as a draft, llama.cpp infers draft-mtp from it
    r = run_spec_lint({"engine": "llamacpp", "flags": ["-m", str(standard_models["target.gguf"]),
                                                       "-md", str(standard_models["target-mtp.gguf"])]})
    assert r["config"]["spec_types"] == [] and r["outcome"] == "refuses"
    assert [f["code"] for f in r["errors"]] == ["mtp-arch-without-mtp-graph"]


# ---------------------------------------------------------------- the flag table, regenerated from arg.cpp


def _arg_cpp(llama_server_bin: str) -> Path:
    cache = Path(os.environ.get("LLMFLEET_CACHE") or Path.home() / ".cache" / "llmfleet-specdec")
    for root in (Path(llama_server_bin).resolve().parents[2], cache):
        path = root / f"src-{LLAMA_CPP_PYTHON_VERSION}" / "vendor" / "llama.cpp" / "common" / "arg.cpp"
        if path.is_file():
            return path
    pytest.fail(f"no common/arg.cpp of llama-cpp-python {LLAMA_CPP_PYTHON_VERSION} next to {llama_server_bin} or "
                f"under {cache}; run `make llama-server`, which unpacks the tree it builds from")


def test_flag_table_is_the_pinned_arg_cpp(llama_server_bin: str) -> None:
    rows, removed = server_options_from_arg_cpp(_arg_cpp(llama_server_bin).read_text())
    assert set(_flags._OPTIONS) == rows
    assert _flags.REMOVED == removed
    # _flags_table.py is exactly what tests/testbed/flags_table.py writes: arg.cpp's order too (env is applied in it)
    current = TABLE.read_text()
    assert render_table(*server_option_rows(_arg_cpp(llama_server_bin).read_text()), current) == current
    # a few entries by hand, as arg.cpp spells them
    assert ("--spec-type", "", "value", "LLAMA_ARG_SPEC_TYPE") in rows
    assert ("--spec-draft-model,-md,--model-draft", "", "value", "LLAMA_ARG_SPEC_DRAFT_MODEL") in rows
    assert ("--spec-draft-device,-devd,--device-draft", "", "value", None) in rows


def test_flag_table_env_names_are_the_binarys(llama_server_bin: str) -> None:
    out = subprocess.run([llama_server_bin, "--help"], capture_output=True, text=True, timeout=30, check=False)
    helped = set(re.findall(r"\(env: ([A-Z0-9_]+)\)", out.stdout + out.stderr))
    assert helped == {o.env for o in _flags.OPTIONS if o.env}
    assert "LLAMA_ARG_SPEC_TYPE" in helped and "LLAMA_ARG_SPEC_DRAFT_DEVICE" not in helped


def test_extra_args_round_trip_starts_the_same_server(standard_models: dict[str, Path], llama_server_bin: str,
                                                      tmp_path: Path) -> None:
    """A config rendered to env (LLAMA_ARG_* + LLAMA_EXTRA_ARGS) starts llama-server the way its flags do."""
    config = _flags.parse(["--spec-type", "ngram-mod", "--spec-ngram-mod-n-max", "16", "--spec-ngram-mod-n-match", "20"])
    env = _flags.to_env(config)
    extra = env.pop("LLAMA_EXTRA_ARGS").split()
    assert env == {"LLAMA_ARG_SPEC_TYPE": "ngram-mod"}
    server = LlamaServer(standard_models["target.gguf"], args=extra, env=env, binary=llama_server_bin,
                         log_dir=tmp_path, ctx_size=512)
    try:
        assert observe(server) == "serves-with-speculation"
    finally:
        server.stop()
    back = _flags.parse(extra, env)
    assert {k: back[k] for k in ("spec_types", "ngram_mod_n_max", "ngram_mod_n_match")} == {
        "spec_types": ["ngram-mod"], "ngram_mod_n_max": 16, "ngram_mod_n_match": 20}
