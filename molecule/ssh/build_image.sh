#!/usr/bin/env bash
# Derives the SSH fleet host from the cached systemd host image: the same Debian 12 plus openssh-server, and a
# non-root user `fleet` whose sudo asks for a password (set at test time by prepare.yml, like its SSH keys).
# Prints the image name on its last line; a second run with the same base image and script costs nothing.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
export CONTAINERS_CONF="${CONTAINERS_CONF:-$root/tests/testbed/containers.conf}"

base="$("$root/tests/testbed/build_host_image.sh" | tail -1)"
base_id="$(podman image inspect --format '{{.Id}}' "$base")"
hash="$( (cat "$here/$(basename "${BASH_SOURCE[0]}")"; echo "$base_id") | sha256sum | cut -c1-12)"
image="localhost/llmfleet-specdec-ssh:$hash"

if podman image exists "$image"; then
  echo "$image"
  exit 0
fi

work="llmfleet-specdec-ssh-build-$$"
trap 'podman rm -f "$work" >/dev/null 2>&1 || true' EXIT
echo "build_image: installing openssh-server into $base (about a minute)" >&2
podman run --name "$work" --network host "$base" /bin/bash -c '
  set -e
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends openssh-server >/dev/null
  rm -rf /var/lib/apt/lists/* /var/cache/apt/archives/*.deb
  # Host keys come from the test (prepare.yml), so the controller can pin them in its known_hosts.
  rm -f /etc/ssh/ssh_host_*
  systemctl disable ssh.socket >/dev/null 2>&1 || true
  systemctl enable ssh.service >/dev/null 2>&1
  # The fleet user: key login only, root through sudo with its password (no NOPASSWD).
  useradd --create-home --shell /bin/bash fleet
  passwd --lock fleet >/dev/null
  echo "fleet ALL=(ALL:ALL) ALL" > /etc/sudoers.d/fleet
  chmod 0440 /etc/sudoers.d/fleet
  visudo -cf /etc/sudoers.d/fleet >/dev/null
  cat > /etc/ssh/sshd_config.d/llmfleet-specdec.conf <<CONF
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin no
HostKey /etc/ssh/ssh_host_ed25519_key
CONF
  sshd -V 2>&1 | head -1 || true' >&2
podman commit --quiet --change 'CMD=["/sbin/init"]' "$work" "$image" >/dev/null
for old in $(podman images --format '{{.Repository}}:{{.Tag}}' | grep '^localhost/llmfleet-specdec-ssh:' | grep -v ":$hash\$"); do
  podman rmi "$old" >/dev/null 2>&1 || true
done
echo "$image"
