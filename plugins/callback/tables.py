# Copyright: (c) 2026, llmfleet.specdec contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import annotations

DOCUMENTATION = r"""
name: tables
type: stdout
short_description: Ansible's default output, with the collection's tables printed as tables
version_added: 0.2.0
author: llmfleet maintainers (@llmfleet)
description:
  - Ansible's default stdout callback, except for one kind of result. A C(debug) task whose result is only a
    message (a line, or a list of lines such as the preflight table, the dry run's plan or the verdicts) prints
    that message as plain lines under the host, one list item a line, never wrapped, quoted or escaped.
  - A C(fail) or C(assert) task that fails with only a message (how the collection's plays stop, naming the input
    and the fix) prints that message once, on the C(fatal) line, without the error summary Ansible prints above it.
  - A task that fails because one of this collection's filters or lookups refused its input (a C(set_fact) whose
    value runs the filter, say) prints the filter's own message once, on the C(fatal) line, without Ansible's
    wrapping in front of it (C(Task failed - Finalization of task args for ... The filter plugin ... failed)) and
    without the error summary above it. Other plugins' failures keep Ansible's output.
  - Every other result prints as the default callback prints it (with its C(result_format)).
  - The repository's C(ansible.cfg) sets it with C(stdout_callback = llmfleet.specdec.tables); set
    C(ANSIBLE_STDOUT_CALLBACK=ansible.builtin.default) for Ansible's own output.
extends_documentation_fragment:
  - ansible.builtin.default_callback
  - ansible.builtin.result_format_callback
requirements:
  - set as stdout in configuration
"""

import re

from ansible import constants
from ansible.plugins.callback.default import CallbackModule as DefaultCallback

_DEBUG = frozenset(("debug", "ansible.builtin.debug", "ansible.legacy.debug"))
_STOPS = frozenset(("fail", "ansible.builtin.fail", "ansible.legacy.fail",
                    "assert", "ansible.builtin.assert", "ansible.legacy.assert"))


# Ansible's wrapping (2.19 and later) in front of the message of this collection's own filter or lookup.
_WRAPPED = re.compile(
    r"^(?:Task failed: )?(?:Finalization of task args for '[^']*' failed: )?(?:Error while resolving value for "
    r"'[^']*': )?The (?:filter|lookup|test) plugin 'llmfleet\.specdec\.[^']*' failed: (?P<message>.+)$", re.DOTALL)


def unwrapped(result):
    """The message of this collection's filter or lookup that failed a task, without Ansible's wrapping; else None."""
    shown = {k for k in result if not k.startswith("_ansible")} - {"changed", "failed", "exception"}
    msg = result.get("msg")
    if shown != {"msg"} or not isinstance(msg, str):
        return None
    match = _WRAPPED.match(msg.strip())
    return match.group("message").strip() if match else None


def message_lines(result, failed=False):
    """The lines of a debug result (or, ``failed``, a fail/assert result) that carries only its message, else None
    (the default output then)."""
    skip = ("changed", "failed", "exception", "assertion", "evaluated_to") if failed else ("changed", "failed")
    shown = {k: v for k, v in result.items() if not k.startswith("_ansible") and k not in skip}
    if set(shown) != {"msg"} or result.get("changed") or (result.get("failed") and not failed):
        return None
    msg = shown["msg"]
    if isinstance(msg, str):
        return msg.splitlines() or [""]
    if isinstance(msg, (list, tuple)) and all(isinstance(line, (str, int, float)) for line in msg):
        return [str(line) for line in msg]
    return None


class CallbackModule(DefaultCallback):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "stdout"
    CALLBACK_NAME = "llmfleet.specdec.tables"

    def v2_runner_on_ok(self, result):
        task = getattr(result, "task", None) or result._task
        data = getattr(result, "result", None)
        data = data if isinstance(data, dict) else result._result
        lines = message_lines(data) if task.action in _DEBUG and not task.loop else None
        if lines is None or not self.get_option("display_ok_hosts"):
            super().v2_runner_on_ok(result)
            return
        if self._last_task_banner != task._uuid:
            self._print_task_banner(task)
        host = self.host_label(result)
        if len(lines) == 1:
            self._display.display(f"ok: [{host}] => {lines[0]}")
            return
        self._display.display(f"ok: [{host}] =>")
        for line in lines:
            self._display.display(f"    {line}")

    def v2_runner_on_failed(self, result, ignore_errors=False):
        task = getattr(result, "task", None) or result._task
        data = getattr(result, "result", None)
        data = data if isinstance(data, dict) else result._result
        lines = message_lines(data, failed=True) if task.action in _STOPS and not task.loop else None
        if lines is None and not task.loop:
            inner = unwrapped(data)
            lines = inner.splitlines() if inner else None
        if lines is None:
            super().v2_runner_on_failed(result, ignore_errors=ignore_errors)
            return
        if self._last_task_banner != task._uuid:
            self._print_task_banner(task)
        self._handle_warnings(data)
        self._display.display(f"fatal: [{self.host_label(result)}]: FAILED! => {' '.join(lines)}",
                              color=constants.COLOR_ERROR, stderr=self.get_option("display_failed_stderr"))
        if ignore_errors:
            self._display.display("...ignoring", color=constants.COLOR_SKIP)
