# Copyright: (c) 2026, llmfleet.specdec contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# Molecule only: the controller dies (SIGKILL) when the task named in $SPECDEC_DIE_AT starts, with its workers.
"""A crash point for the Molecule scenarios: ``ANSIBLE_CALLBACK_PLUGINS=molecule/shared/callbacks
ANSIBLE_CALLBACKS_ENABLED=die_at SPECDEC_DIE_AT='<task name>' setsid ansible-playbook ...`` kills the whole
ansible-playbook process group (the controller, its forks and their connections) the moment that task starts:
what the host is left with is what a controller killed between the task before and that one leaves."""
from __future__ import annotations

import os
import signal

from ansible.plugins.callback import CallbackBase

DOCUMENTATION = """
name: die_at
type: aggregate
short_description: kill the controller when a named task starts (Molecule crash points)
description: Reads the task name from the environment variable SPECDEC_DIE_AT.
requirements: [enabled in ANSIBLE_CALLBACKS_ENABLED]
"""


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "die_at"
    CALLBACK_NEEDS_ENABLED = True

    def v2_playbook_on_task_start(self, task, is_conditional):
        if task.get_name() == os.environ.get("SPECDEC_DIE_AT"):
            self._display.display(f"die_at: the controller dies as '{task.get_name()}' starts")
            os.killpg(os.getpgid(0), signal.SIGKILL)
