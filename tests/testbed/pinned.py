# The llama-cpp-python version the project pins, read from module_utils/llamacpp/_llamacpp.py for the Makefile and test bed.
"""Print (or return) ``_llamacpp.PINNED["llama_cpp_python"]`` without importing the collection.

``plugins/module_utils/llamacpp/_llamacpp.py`` is the one home of the pinned llama.cpp tree. The Makefile and
``build_llama_server.sh`` run before any venv exists, with the system python3 and no
``ansible_collections`` on the path, so this reads the ``PINNED = {...}`` literal with ``ast``
instead of importing the module. Usage: ``python3 tests/testbed/pinned.py [key]`` (default
``llama_cpp_python``).
"""
from __future__ import annotations

import ast
import sys
from pathlib import Path

LLAMACPP_PY = Path(__file__).resolve().parents[2] / "plugins" / "module_utils" / "llamacpp" / "_llamacpp.py"


def pinned(path: Path = LLAMACPP_PY) -> dict:
    """The ``PINNED`` dict of ``_llamacpp.py``, as written there."""
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "PINNED" for t in node.targets):
            return ast.literal_eval(node.value)
    raise SystemExit(f"{path}: no literal PINNED = {{...}} assignment; keep PINNED a plain dict literal there")


LLAMA_CPP_PYTHON_VERSION = pinned()["llama_cpp_python"]

if __name__ == "__main__":
    print(pinned()[sys.argv[1] if len(sys.argv) > 1 else "llama_cpp_python"])
