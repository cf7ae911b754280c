#!/usr/bin/env bash
# Builds a real llama-server from the llama-cpp-python sdist, cached outside the repo by version.
# Prints the path of the binary on its last line. A second run with the same version costs nothing.
set -euo pipefail

# The pinned version's one home is plugins/module_utils/llamacpp/_llamacpp.py (PINNED), read with the system python3.
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

# Unpacks the sdist into $1 once (through $1.tmp, so an interrupted unpack is never taken for a whole one).
unpack() {
  [ -d "$1/vendor/llama.cpp" ] && return 0
  rm -rf "$1.tmp" && mkdir -p "$1.tmp"
  tar -C "$1.tmp" --strip-components=1 -xzf "$sdist"
  rm -rf "$1" && mv "$1.tmp" "$1"
}

# The pinned llama.cpp tree the project reads as the authority on llama.cpp's behaviour.
unpack "$cache/src-$version"

jobs="${LLAMA_BUILD_JOBS:-$(nproc)}"
# The compile mirrors what role llamacpp_build does on a host for molecule/build (plugins/module_utils/build/_build.py:
# the same -D list, source at <work>/src/llama_cpp_python-<version>/vendor/llama.cpp, build at
# <work>/build-sdist-<version>-cpu, CCACHE_BASEDIR=<work>, the locale ccache hashes) into the compiler cache that molecule/build mounts. The
# container's Debian 12 compiler is this machine's, so its build finds the objects in the cache instead of
# compiling llama.cpp a second time (about six minutes on two cores). tests/unit/test_testbed_build.py keeps the
# two in step. Without ccache on this machine the build is the same, only uncached.
work="$cache/llamacpp-build"
bsrc="$work/src/llama_cpp_python-$version"
unpack "$bsrc"
build="$work/build-sdist-$version-cpu"
mkdir -p "$cache/ccache"
export CCACHE_DIR="$cache/ccache" CCACHE_BASEDIR="$work" LANG=C LC_ALL=C LC_CTYPE=C LC_MESSAGES=C
cmake -S "$bsrc/vendor/llama.cpp" -B "$build" \
  -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF -DGGML_NATIVE=OFF -DGGML_CCACHE=ON \
  -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_USE_PREBUILT_UI=OFF >&2
cmake --build "$build" --config Release --target llama-server -j "$jobs" >&2

mkdir -p "$prefix/bin.tmp"
cp "$build/bin/llama-server" "$prefix/bin.tmp/llama-server"
rm -rf "${prefix:?}/bin" && mv "$prefix/bin.tmp" "$prefix/bin"
"$bin" --version >&2
echo "$bin"
