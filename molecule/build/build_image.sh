#!/usr/bin/env bash
# Derives the Molecule build host from the cached systemd host image: the same Debian 12 plus cmake, g++, make and ccache.
# Prints the image name on its last line; a second run with the same base image and script costs nothing.
# The packages come from the Debian mirror the base image's apt already names (host network, build time only;
# the scenario's container itself runs with --network none).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
export CONTAINERS_CONF="${CONTAINERS_CONF:-$root/tests/testbed/containers.conf}"
packages="cmake g++ make ccache"

base="$("$root/tests/testbed/build_host_image.sh" | tail -1)"
base_id="$(podman image inspect --format '{{.Id}}' "$base")"
hash="$( (cat "$here/$(basename "${BASH_SOURCE[0]}")"; echo "$base_id") | sha256sum | cut -c1-12)"
image="localhost/llmfleet-specdec-builder:$hash"

if podman image exists "$image"; then
  echo "$image"
  exit 0
fi

work="llmfleet-specdec-builder-$$"
trap 'podman rm -f "$work" >/dev/null 2>&1 || true' EXIT
echo "build_image: installing $packages into $base (about a minute)" >&2
podman run --name "$work" --network host "$base" /bin/bash -c "
  set -e
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends $packages >/dev/null
  rm -rf /var/lib/apt/lists/* /var/cache/apt/archives/*.deb
  cmake --version | head -1; g++ --version | head -1; ccache --version | head -1" >&2
podman commit --quiet --change 'CMD=["/sbin/init"]' "$work" "$image" >/dev/null
# Older builds of this image are never used again.
for old in $(podman images --format '{{.Repository}}:{{.Tag}}' | grep '^localhost/llmfleet-specdec-builder:' | grep -v ":$hash\$"); do
  podman rmi "$old" >/dev/null 2>&1 || true
done
echo "$image"
