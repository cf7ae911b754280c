#!/usr/bin/env bash
# Galaxy's own import checks on the tarball users get: builds it with ansible-galaxy (honouring galaxy.yml's
# build_ignore), fails if a development file got in, then runs galaxy-importer on it the way Galaxy does
# (ansible-doc on every plugin, changelog, role metadata, tags), without its container-based ansible-test run
# and its own ansible-lint call (make conventions runs both itself, ansible-lint with the stricter production
# profile; galaxy-importer's call also times out on a loaded two-core machine). Exits non-zero on any problem.
# Usage: galaxy_import.sh TOOLS_PYTHON
set -euo pipefail
tools_python=${1:?usage: galaxy_import.sh TOOLS_PYTHON}
root=$(cd "$(dirname "$0")/../.." && pwd)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/specdec-galaxy.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

"$(dirname "$tools_python")/ansible-galaxy" collection build "$root" --output-path "$tmp" >/dev/null
tarball=$(ls "$tmp"/llmfleet-specdec-*.tar.gz)

# What build_ignore must keep out: the demo inventory, its ansible.cfg (host key checking off), the Makefile,
# CI, tool caches, results, benchmarks and the link back to the repository root.
leaked=$(tar -tzf "$tarball" | grep -E '^(inventory|ansible\.cfg|Makefile|\.ci|\.venv|\.build|\.ansible|\.gpu-proof|collections|results|benchmarks|tests/output)(/|$)' || true)
if [ -n "$leaked" ]; then
  echo "galaxy_import: the tarball ships development files (add them to build_ignore in galaxy.yml):" >&2
  printf '%s\n' "$leaked" >&2
  exit 1
fi

cat >"$tmp/galaxy-importer.cfg" <<'CFG'
[galaxy-importer]
run_ansible_test = False
run_ansible_lint = False
run_ansible_doc = True
check_changelog = True
check_required_tags = True
CFG
# galaxy-importer runs ansible-doc and ansible-lint from PATH: the tool venv's.
out=$(cd "$tmp" && PATH="$(dirname "$tools_python"):$PATH" GALAXY_IMPORTER_CONFIG="$tmp/galaxy-importer.cfg" \
  "$tools_python" -m galaxy_importer.main "$tarball" 2>&1) || {
  echo "$out" >&2; echo "galaxy_import: galaxy-importer failed" >&2; exit 1; }
# galaxy-importer reports problems as warnings and errors in its log and still exits 0 for most of them.
# Accepted, for its reason: the ignore file's statement count (tests/sanity/ignore-2.19.txt gives a reason on
# every line). The execution environment's standalone file lives in execution-environment/, not meta/: Galaxy and
# ansible-builder's collection introspection read meta/execution-environment.yml as the collection's own
# dependency metadata, with paths relative to the collection root.
accepted='Ignore files skip ansible-test sanity tests'
problems=$(echo "$out" | grep -E '^(WARNING|ERROR)' | grep -Ev "$accepted" || true)
if [ -n "$problems" ]; then
  echo "$problems" >&2
  echo "galaxy_import: galaxy-importer reported the problems above" >&2
  exit 1
fi
echo "galaxy_import: $(basename "$tarball") imports cleanly ($(tar -tzf "$tarball" | wc -l) files)"
