#!/usr/bin/env bash
# Kill a controller with SIGKILL, all its processes at once, as a dying machine would: ansible-playbook's
# workers start their own sessions, so its process group is not all of it. Collect every descendant of
# the given PIDs first, then kill them together; exit 0 once none of them runs any more.
pids="$*"; frontier=$pids
while [[ -n "$frontier" ]]; do
  next=""
  for p in $frontier; do next="$next $(ps -o pid= --ppid "$p" || true)"; done
  # unquoted on purpose: word splitting turns ps's padded, newline-separated PIDs into one spaced list
  # shellcheck disable=SC2086,SC2116
  frontier=$(echo $next); pids="$pids $frontier"
done
# shellcheck disable=SC2086  # one argument per PID
kill -KILL $pids 2>/dev/null || true
# gone, or a zombie nobody reaped yet: either way none of them runs any more
for _ in $(seq 1 50); do
  alive=0
  for p in $pids; do
    state=$(ps -o stat= -p "$p" || true)
    [[ -z "$state" || "$state" == Z* ]] || alive=1
  done
  [[ $alive == 0 ]] && { echo "killed: $pids"; exit 0; }
  sleep 0.1
done
echo "still running after SIGKILL: $pids" >&2
exit 1
