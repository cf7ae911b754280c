#!/usr/bin/env bash
# Builds a real llama-server from the llama-cpp-python sdist, cached outside the repo by version.
# Prints the path of the binary on its last line. A second run with the same version costs nothing.
set -euo pipefail

# The pinned version's one home is plugins/module_utils/_llamacpp.py (PINNED), read with the system python3.
version="${LLAMA_CPP_PYTHON_VERSION:-$(python3 "$(dirname "$0")/pinned.py")}"
cache="${LLMFLEET_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/llmfleet-specdec}"
prefix="$cache/llama-server-$version"
bin="$prefix/bin/llama-server"

if [ -x "$bin" ] && "$bin" --version >/dev/null 2>&1; then
  echo "$bin"
  exit 0
fi

mkdir -p "$cache"
sdist="$cache/llama_cpp_python-$version.tar.gz"
if [ ! -f "$sdist" ]; then
  pip_cmd="${PIP:-python3 -m pip}"
  $pip_cmd download --quiet --no-deps --no-binary :all: "llama-cpp-python==$version" -d "$cache" >&2
fi

src="$cache/src-$version"
if [ ! -d "$src/vendor/llama.cpp" ]; then
  rm -rf "$src.tmp" && mkdir -p "$src.tmp"
  tar -C "$src.tmp" --strip-components=1 -xzf "$sdist"
  rm -rf "$src" && mv "$src.tmp" "$src"
fi

jobs="${LLAMA_BUILD_JOBS:-$(nproc)}"
build="$src/build-server"
cmake -S "$src/vendor/llama.cpp" -B "$build" -DCMAKE_BUILD_TYPE=Release \
  -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
  -DBUILD_SHARED_LIBS=OFF -DGGML_NATIVE=OFF >&2
cmake --build "$build" --target llama-server -j "$jobs" >&2

mkdir -p "$prefix/bin.tmp"
cp "$build/bin/llama-server" "$prefix/bin.tmp/llama-server"
rm -rf "${prefix:?}/bin" && mv "$prefix/bin.tmp" "$prefix/bin"
"$bin" --version >&2
echo "$bin"
