#!/usr/bin/env bash
# Builds the execution environment (execution-environment/execution-environment.yml) with ansible-builder and
# podman where no container registry is reachable. Prints the image name on its last line; cached by a hash of its inputs:
#   1. a site base image: the test bed's debootstrapped Debian 12 (tests/testbed/build_host_image.sh) given
#      this machine's CA certificates and package index settings (pip config, PIP_* variables), as a site's own
#      base image carries them;
#   2. ansible-builder build with --build-arg EE_BASE_IMAGE=<that base>; packages come from the Debian mirror
#      the base's apt names and from the package index pip on this machine uses (host network, build time only).
# The image localhost/llmfleet-specdec-ee:<hash> exists -> nothing to do.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
export CONTAINERS_CONF="${CONTAINERS_CONF:-$root/tests/testbed/containers.conf}"
python="${PYTHON:-python3}"
builder="${ANSIBLE_BUILDER:-$(command -v ansible-builder || true)}"
[ -n "$builder" ] || { echo "build_ee: ansible-builder not found (pip install -r requirements-test.txt)" >&2; exit 1; }

work="$(mktemp -d "${TMPDIR:-/tmp}/llmfleet-ee.XXXXXX")"
trap 'rm -rf "$work"; podman rm -f "llmfleet-specdec-ee-base-$$" >/dev/null 2>&1 || true' EXIT

# What pip on this machine uses to reach its package index, written as the base image's /etc/pip.conf. Local
# (file://) indexes and find-links are not visible inside a container and are left out.
"$python" - "$work/pip.conf" <<'PY'
import os, subprocess, sys
out = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True).stdout
conf = {}
for line in out.splitlines():
    key, _, value = line.partition("=")
    section, _, name = key.partition(".")
    if section in ("global", "install", ":env:") and name in ("index-url", "extra-index-url", "trusted-host", "timeout", "default-timeout"):
        conf[name] = value.strip().strip("'\"")
for name in ("index-url", "extra-index-url", "trusted-host"):
    env = os.environ.get("PIP_" + name.upper().replace("-", "_"))
    if env:
        conf[name] = env
if "extra-index-url" in conf:
    conf["extra-index-url"] = " ".join(u for u in conf["extra-index-url"].split() if not u.startswith("file:"))
with open(sys.argv[1], "w") as f:
    f.write("[global]\ncert = /etc/ssl/certs/ca-certificates.crt\n")
    for name, value in sorted(conf.items()):
        if value:
            f.write(f"{name} = {value}\n")
PY
mkdir -p "$work/ca"
for crt in /usr/local/share/ca-certificates/*.crt; do
  [ -e "$crt" ] && cp "$crt" "$work/ca/"
done

host="$("$root/tests/testbed/build_host_image.sh" | tail -1)"
host_id="$(podman image inspect --format '{{.Id}}' "$host")"
hash="$( (cat "$here/$(basename "${BASH_SOURCE[0]}")" "$root/execution-environment/execution-environment.yml" "$root/requirements.txt" \
           "$work/pip.conf" "$work"/ca/* 2>/dev/null; echo "$host_id") | sha256sum | cut -c1-12)"
image="localhost/llmfleet-specdec-ee:$hash"
base="localhost/llmfleet-specdec-ee-base:$hash"

if podman image exists "$image"; then
  echo "$image"
  exit 0
fi

start=$SECONDS
if ! podman image exists "$base"; then
  echo "build_ee: site base image $base from $host" >&2
  podman run --name "llmfleet-specdec-ee-base-$$" --network host \
    -v "$work:/site:ro" "$host" /bin/bash -c '
      set -e
      cp /site/pip.conf /etc/pip.conf
      cp /site/ca/*.crt /usr/local/share/ca-certificates/ 2>/dev/null || true
      update-ca-certificates >/dev/null 2>&1' >&2
  podman commit --quiet --change 'CMD=["/bin/bash"]' "llmfleet-specdec-ee-base-$$" "$base" >/dev/null
fi

echo "build_ee: ansible-builder build $image (a few minutes the first time)" >&2
"$builder" build --file "$root/execution-environment/execution-environment.yml" --context "$work/context" \
  --container-runtime podman --tag "$image" --build-arg EE_BASE_IMAGE="$base" \
  --extra-build-cli-args "--network host" --verbosity 2 >&2
echo "build_ee: built in $((SECONDS - start)) s" >&2
podman run --rm "$image" ansible-playbook --version | head -1 >&2
# Older builds are never used again.
for old in $(podman images --format '{{.Repository}}:{{.Tag}}' | grep -E '^localhost/llmfleet-specdec-ee(-base)?:' | grep -v ":$hash\$"); do
  podman rmi "$old" >/dev/null 2>&1 || true
done
echo "$image"
