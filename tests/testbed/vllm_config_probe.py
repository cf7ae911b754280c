# Asks real vLLM, in one process, whether it accepts each speculative config: the engine config it builds, or its error.
"""Run with the vLLM venv's python::

    python tests/testbed/vllm_config_probe.py cases.json verdicts.json

``cases.json``: a list of ``{"name", "model", "argv"}``; ``argv`` are ``vllm serve`` arguments after the model.
For each, vLLM's own argument parser reads them (so legacy flags and ``--speculative-config`` go through
the same code as ``vllm serve``) and ``EngineArgs.create_engine_config()`` builds the engine config: that
is where ``SpeculativeConfig`` validates (method, num_speculative_tokens, the draft's config, the
tokenizer). Writes a list of ``{"name", "outcome", "error", "method", "num_speculative_tokens"}`` where
outcome is ``accepts``, ``refuses`` (an exception while building the config) or ``parser-exits``
(the argument parser rejects the flags).

The same config can still fail later, when the model loads; the oracle tests start a real server for
the cases where that matters.
"""
from __future__ import annotations

import contextlib
import io
import json
import os
import sys


def probe(cases: list[dict]) -> list[dict]:
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    from vllm.engine.arg_utils import EngineArgs
    from vllm.entrypoints.launchers.cli_args import make_arg_parser
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = make_arg_parser(FlexibleArgumentParser())
    out = []
    for case in cases:
        row = {"name": case["name"], "outcome": None, "error": None, "method": None, "num_speculative_tokens": None}
        err = io.StringIO()
        print(f"vllm_config_probe: {case['name']}", file=sys.stderr, flush=True)
        try:
            with contextlib.redirect_stderr(err):
                args = parser.parse_args(["--model", case["model"], *case["argv"]])
        except SystemExit:
            row.update(outcome="parser-exits", error=err.getvalue().strip().splitlines()[-1:])
            out.append(row)
            continue
        try:
            engine_args = EngineArgs.from_cli_args(args)
            config = engine_args.create_engine_config()
        except Exception as exc:  # the oracle records whatever vLLM raises
            row.update(outcome="refuses", error=f"{type(exc).__name__}: {exc}"[:600])
            out.append(row)
            continue
        spec = config.speculative_config
        row.update(outcome="accepts", method=getattr(spec, "method", None) if spec else None,
                   num_speculative_tokens=getattr(spec, "num_speculative_tokens", None) if spec else None)
        out.append(row)
    return out


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: vllm_config_probe.py CASES.json VERDICTS.json")
    with open(sys.argv[1], encoding="utf-8") as fh:
        cases = json.load(fh)
    # vLLM logs to stdout, so the verdicts go to a file of their own
    result = probe(cases)
    with open(sys.argv[2], "w", encoding="utf-8") as fh:
        json.dump(result, fh, indent=1)
