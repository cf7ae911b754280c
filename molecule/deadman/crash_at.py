"""Runs unit_override's own code on the host and kills itself with SIGKILL before a chosen systemd call.

    crash_at.py absent  '<text of the call to die before>'
    crash_at.py present '<text of the call to die before>' '<candidate env as JSON>' <rollback_after>

The module_utils are copied next to this file (what an AnsiballZ zip carries); the calls are the real ones,
to the real systemd. The crash matrix (tests/unit/test_crash_matrix.py) does this at every step on a model of
systemd; this repeats the decisive points on the real one.
"""
import json
import os
import signal
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from ansible_collections.llmfleet.specdec.plugins.module_utils.systemd import _unit_override as uo
from ansible_collections.llmfleet.specdec.plugins.module_utils.systemd._envfile import env_config_from_mapping

OP, MARK = sys.argv[1], sys.argv[2]


def run(argv):
    if MARK in " ".join(argv):
        print("killed before: " + " ".join(argv), flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    proc = subprocess.run(list(argv), capture_output=True, text=True, check=False)
    return proc.returncode, proc.stdout, proc.stderr


manager = uo.UnitOverride(run=run, python="/usr/bin/python3", health_timeout=60, port_timeout=5)
if OP == "absent":
    manager.absent("llama-server.service")
else:
    manager.present("llama-server.service", env_config_from_mapping(json.loads(sys.argv[3])), int(sys.argv[4]))
print("the marked call never came", flush=True)
sys.exit(3)
