#!/usr/bin/env bash
# Runs ansible-core's own `ansible-test sanity` on this collection, offline, and exits with its status.
# ansible-test needs the collection at .../ansible_collections/llmfleet/specdec and resolves symbolic links,
# so the files git would ship (tracked and untracked, not ignored) are copied to such a path in a temporary
# folder outside any git checkout (inside one, ansible-test would list the files of the outer checkout), and its
# tests/output/ comes back to this checkout's tests/output/ (ignored by git).
# Each sanity test gets a virtual environment of its own (cached by ansible-test under ~/.ansible/test/venv);
# their pip bootstrap comes from tests/sanity/get_pip.py instead of a download (see that file).
# Usage: ansible_test.sh TOOLS_PYTHON [ansible-test sanity options...]
set -euo pipefail
tools_python=${1:?usage: ansible_test.sh TOOLS_PYTHON [ansible-test sanity options]}
shift
root=$(cd "$(dirname "$0")/../.." && pwd)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/specdec-sanity.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
copy=$tmp/ansible_collections/llmfleet/specdec

# The bootstrap script goes where ansible-test caches its download, named by the pip version it pins.
pip_version=$("$tools_python" -c '
import types
from ansible_test._internal.python_requirements import get_venv_packages
print(get_venv_packages(types.SimpleNamespace(version="3"))["pip"])')
cache=$HOME/.ansible/test/cache/get_pip_${pip_version//./_}.py
mkdir -p "$(dirname "$cache")"
cp "$root/tests/sanity/get_pip.py" "$cache"

mkdir -p "$copy"
(cd "$root" && git ls-files -z --cached --others --exclude-standard |
  while IFS= read -r -d '' path; do [ -e "$path" ] || [ -L "$path" ] && printf '%s\0' "$path"; done |
  tar --null -T - -cf - | tar -C "$copy" -xf -)

cd "$copy"
# A newer ansible-core's own findings (tests/sanity/findings-X.Y.txt, each with its reason) join 2.19's ignore file
# there, in the copy only: the collection ships ignore files with the entries ansible-lint's production profile
# permits, and those findings (in plugins/) are not among them.
core=$("$tools_python" -c 'import ansible.release as r; print(".".join(r.__version__.split(".")[:2]))')
if [ -f "tests/sanity/findings-$core.txt" ] && [ ! -f "tests/sanity/ignore-$core.txt" ]; then
  cat tests/sanity/ignore-2.19.txt "tests/sanity/findings-$core.txt" > "tests/sanity/ignore-$core.txt"
fi
rc=0
"$(dirname "$tools_python")/ansible-test" sanity --python "$("$tools_python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')" \
  --color no "$@" || rc=$?
rm -rf "$root/tests/output"
if [ -d tests/output ]; then cp -r tests/output "$root/tests/output"; fi
exit $rc
