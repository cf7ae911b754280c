#!/usr/bin/env bash
# Builds the test bed's "regressed upgrade": the pinned llama-server with one documented source change that lowers
# speculative acceptance and nothing else, cached outside the repo beside the first build. Prints the path of the
# binary on its last line; a second run costs nothing.
#
# The change (common/sampling.cpp, common_sampler_sample_and_accept_n; made by regress_sampling.py beside this
# script, which molecule/build also runs on its host's tree): the verifier stops after two drafted tokens per round,
# as if they had been rejected from the third on. Every token it emits is still the target's own greedy token (the
# one at the cut is sampled from the target's logits at that position), so the text is unchanged, lossless as the
# real upgrades the field notes describe; only the accepted length per round is capped at 2, so a draft that the
# unchanged build accepts at ~0.9 of 3 tokens is accepted at most 2 of 3 here. It touches neither the server's flags
# nor its /health: a canary that checks /health alone passes it.
#
# The tree is a second copy of the pinned sdist under its own work dir, laid out as the first build's. llama.cpp's
# unity sources name every file by its absolute path, so a copy at another path misses ccache for all of src/ (minutes
# on two cores). As root, the build therefore runs in a private mount namespace (unshare -m) where the copy is
# bind-mounted over the first build's work dir: every path is the first build's, ccache serves every object but the
# changed file, and the link takes seconds once `make llama-server` filled the cache. Nobody else sees the mount, and
# the first build's tree is never written. Without unshare (not root) it builds at its own path, uncached.
set -euo pipefail

version="${LLAMA_CPP_PYTHON_VERSION:-$(python3 "$(dirname "$0")/pinned.py")}"
cache="${LLMFLEET_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/llmfleet-specdec}"
prefix="$cache/llama-server-$version-regressed"
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

work="$cache/llamacpp-build-regressed"
bsrc="$work/src/llama_cpp_python-$version"
if [ ! -f "$bsrc/.llmfleet-regressed" ]; then
  rm -rf "$bsrc.tmp" && mkdir -p "$bsrc.tmp"
  tar -C "$bsrc.tmp" --strip-components=1 -xzf "$sdist"
  python3 "$(dirname "$0")/regress_sampling.py" "$bsrc.tmp/vendor/llama.cpp" >&2
  touch "$bsrc.tmp/.llmfleet-regressed"
  rm -rf "$bsrc" && mkdir -p "$work/src" && mv "$bsrc.tmp" "$bsrc"
fi

jobs="${LLAMA_BUILD_JOBS:-$(nproc)}"
mkdir -p "$cache/ccache" "$work/build-sdist-$version-cpu"
# where the build sees its tree: the first build's work dir (under the bind mount), else its own
first="$cache/llamacpp-build"
compile() {  # $1: the work dir as the compiler sees it
  export CCACHE_DIR="$cache/ccache" CCACHE_BASEDIR="$1" LANG=C LC_ALL=C LC_CTYPE=C LC_MESSAGES=C
  cmake -S "$1/src/llama_cpp_python-$version/vendor/llama.cpp" -B "$1/build-sdist-$version-cpu" \
    -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF -DGGML_NATIVE=OFF -DGGML_CCACHE=ON \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_USE_PREBUILT_UI=OFF >&2
  cmake --build "$1/build-sdist-$version-cpu" --config Release --target llama-server -j "$jobs" >&2
}
if [ "$(id -u)" = 0 ] && mkdir -p "$first" && unshare -m --propagation private true 2>/dev/null; then
  export -f compile
  export cache version jobs
  # the single quotes are on purpose: $0 and $1 are the inner shell's arguments (the two paths after the script)
  # shellcheck disable=SC2016
  unshare -m --propagation private bash -euo pipefail -c 'mount --bind "$0" "$1" && compile "$1"' "$work" "$first"
else
  compile "$work"
fi
build="$work/build-sdist-$version-cpu"

mkdir -p "$prefix/bin.tmp"
cp "$build/bin/llama-server" "$prefix/bin.tmp/llama-server"
rm -rf "${prefix:?}/bin" && mv "$prefix/bin.tmp" "$prefix/bin"
"$bin" --version >&2
echo "$bin"
