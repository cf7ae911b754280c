#!/usr/bin/env bash
# Runs an ansible command the way an operator's shell does: from the repository root (its ansible.cfg: host key
# checking on, pipelining on), with the operator's inventory and vault password file, and nothing of the test
# harness's environment (Molecule's ANSIBLE_* settings stay out).
#   field.sh WORK BINDIR ansible-playbook ARGS...
set -euo pipefail
work="$1" bindir="$2"; shift 2
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
tool="$1"; shift
exec env -i PATH="$bindir:/usr/bin:/bin" HOME="$work/home" LANG=C.UTF-8 ANSIBLE_NOCOLOR=1 \
  ANSIBLE_LOCAL_TEMP="$work/home/.ansible/tmp" \
  "$bindir/$tool" -i "$work/inventory/hosts.yml" --vault-password-file "$work/vault-pass" "$@"
