#!/usr/bin/env bash
# Runs one stage of `make test` and adds its row to the stage table: its name, when it started (seconds after the
# suite's start), its seconds and its result. Usage: stage.sh NAME COMMAND [ARGS...]; exits with COMMAND's status.
# The table is the TSV file $SPECDEC_STAGES (without it the command just runs); $SPECDEC_STAGES_T0 is the suite's
# start (epoch seconds). A stage run inside another (a Molecule scenario inside its lane) is named PARENT/NAME:
# each stage passes its own name down in $SPECDEC_STAGE_PARENT. tests/suite/stage_table.py prints the table.
set -uo pipefail
name=${1:?usage: stage.sh NAME COMMAND [ARGS...]}
shift
[ $# -gt 0 ] || { echo "stage.sh: no command given for stage $name" >&2; exit 2; }
case $name in */*) echo "stage.sh: a stage's name may not contain '/' (it separates a stage from its parent): $name" >&2; exit 2;; esac
full=${SPECDEC_STAGE_PARENT:+$SPECDEC_STAGE_PARENT/}$name
start=$(date +%s)
rc=0
SPECDEC_STAGE_PARENT=$full "$@" || rc=$?
end=$(date +%s)
if [ -n "${SPECDEC_STAGES:-}" ]; then
  if [ $rc -eq 0 ]; then result=ok; else result="FAILED (exit $rc)"; fi
  # one short line per write: appends from stages running side by side do not interleave
  printf '%s\t%s\t%s\t%s\n' "$full" $((start - ${SPECDEC_STAGES_T0:-$start})) $((end - start)) "$result" \
    >> "$SPECDEC_STAGES"
fi
exit $rc
