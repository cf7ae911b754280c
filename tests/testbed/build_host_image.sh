#!/usr/bin/env bash
# Builds the podman image that Molecule boots as a real systemd host, cached outside the repo by a hash of this script.
# Prints the image name on its last line. A second run with the same script costs nothing:
#   1. the podman image localhost/llmfleet-specdec-host:<hash> exists  -> nothing to do;
#   2. the rootfs tarball $LLMFLEET_CACHE/host-image/<hash>.tar exists -> podman import (seconds);
#   3. otherwise debootstrap a Debian bookworm minbase (about a minute), save the tarball, import it.
# Needs root, podman, runc and debootstrap (`make molecule` installs them). The Debian mirror is the one
# apt on this machine already uses (override with LLMFLEET_DEBIAN_MIRROR).
set -euo pipefail

suite=bookworm
# llama-server (tests/testbed/build_llama_server.sh) is static against ggml/llama but needs the C++ runtime
# and OpenMP; sudo because playbooks become root as on a real host; iproute2 (ss), curl and procps are
# for people debugging a failed scenario.
packages=systemd,systemd-sysv,dbus,python3,sudo,iproute2,curl,procps,libstdc++6,libgomp1,ca-certificates

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cache="${LLMFLEET_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/llmfleet-specdec}"
hash="$(sha256sum "$here/$(basename "${BASH_SOURCE[0]}")" | cut -c1-12)"
image="localhost/llmfleet-specdec-host:$hash"
tarball="$cache/host-image/$hash.tar"
export CONTAINERS_CONF="${CONTAINERS_CONF:-$here/containers.conf}"

if podman image exists "$image"; then
  echo "$image"
  exit 0
fi

mirror_from_apt() {
  # deb822 sources first (Debian 12 default), then one-line sources; the first non-security archive wins.
  local uri
  uri="$(awk '/^URIs:/ {for (i = 2; i <= NF; i++) if ($i !~ /security/) {print $i; exit}}' \
           /etc/apt/sources.list.d/*.sources 2>/dev/null | head -1)"
  if [ -z "$uri" ]; then
    uri="$(awk '$1 == "deb" && $0 !~ /security/ {for (i = 2; i <= NF; i++) if ($i ~ /^(https?|file):/) {print $i; exit}}' \
             /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null | head -1)"
  fi
  echo "$uri"
}

if [ ! -f "$tarball" ]; then
  mirror="${LLMFLEET_DEBIAN_MIRROR:-$(mirror_from_apt)}"
  if [ -z "$mirror" ]; then
    echo "build_host_image: no Debian mirror found in /etc/apt; set LLMFLEET_DEBIAN_MIRROR" >&2
    exit 1
  fi
  work="$(mktemp -d "${TMPDIR:-/tmp}/llmfleet-host-image.XXXXXX")"
  trap 'rm -rf "$work"' EXIT
  rootfs="$work/rootfs"
  echo "build_host_image: debootstrap $suite from $mirror (about a minute)" >&2
  debootstrap --variant=minbase --include="$packages" "$suite" "$rootfs" "$mirror" >"$work/debootstrap.log" 2>&1 || {
    tail -30 "$work/debootstrap.log" >&2
    exit 1
  }
  # A container host: no apt caches, docs or locales; a machine-id written at first boot;
  # no getty on the console, no wait for a network that `--network none` never brings.
  rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/* \
         "$rootfs"/usr/share/doc/* "$rootfs"/usr/share/man/* "$rootfs"/usr/share/info/*
  find "$rootfs/usr/share/locale" -mindepth 1 -maxdepth 1 ! -name 'locale.alias' -exec rm -rf {} + 2>/dev/null || true
  : >"$rootfs/etc/machine-id"
  for unit in console-getty.service getty@tty1.service systemd-networkd-wait-online.service \
              systemd-timesyncd.service apt-daily.timer apt-daily-upgrade.timer; do
    ln -sfn /dev/null "$rootfs/etc/systemd/system/$unit"
  done
  echo "llmfleet-specdec-host" >"$rootfs/etc/hostname"
  mkdir -p "$(dirname "$tarball")"
  tar --numeric-owner -C "$rootfs" -cf "$tarball.tmp" .
  mv "$tarball.tmp" "$tarball"
fi

podman import --change 'CMD=["/sbin/init"]' "$tarball" "$image" >&2
# Older builds of this script are never used again: drop their images and tarballs.
for old in $(podman images --format '{{.Repository}}:{{.Tag}}' | grep '^localhost/llmfleet-specdec-host:' | grep -v ":$hash\$"); do
  podman rmi "$old" >/dev/null 2>&1 || true
done
find "$cache/host-image" -maxdepth 1 -name '*.tar' ! -name "$hash.tar" -delete
echo "$image"
