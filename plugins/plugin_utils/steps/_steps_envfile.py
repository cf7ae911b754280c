# Copyright: (c) 2026, llmfleet.specdec contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# Steps exposing the env-file rules (_envfile.py) to the serving roles' templates and checks.
# Not filters of their own: roles and playbooks call them through filter llmfleet.specdec.internal.
"""Env files for templates: the same code ``unit_override`` writes and reads them with.

- ``env | llmfleet.specdec.env_file_lines``: one ``NAME=value`` assignment per set variable, each
  value quoted so that systemd hands the process exactly that value (None = left out).
- ``env | llmfleet.specdec.internal('env_file_problems', where)``: why variables cannot be written, one message
  each naming the variable (an empty list when all of them can).
- ``text | llmfleet.specdec.env_file_values``: what systemd passes on for an env file's text.
"""
from __future__ import annotations

from typing import Any

from ansible.errors import AnsibleFilterError

from ansible_collections.llmfleet.specdec.plugins.module_utils.systemd import _envfile as envfile


def env_file_lines(env: dict[str, Any], where: str = "env") -> list[str]:
    try:
        return envfile.render_lines(dict(env or {}), where)
    except envfile.EnvFileError as exc:
        raise AnsibleFilterError(str(exc)) from None


def env_file_problems(env: dict[str, Any], where: str = "env") -> list[str]:
    return envfile.problems(dict(env or {}), where)


def env_file_values(text: str) -> dict[str, str]:
    return envfile.read_env_values(str(text or ""))


def env_file_changes(new_text: str, old_text: str) -> dict[str, Any]:
    """What a unit's process gets differently when ``old_text`` is replaced by ``new_text``: each changed or added
    variable with its new value, each removed one as None (unset), in the form unit_override's ``env`` takes."""
    new = envfile.read_env_values(str(new_text or ""))
    old = envfile.read_env_values(str(old_text or ""))
    changes: dict[str, Any] = {key: value for key, value in new.items() if old.get(key) != value}
    changes.update({key: None for key in old if key not in new})
    return dict(sorted(changes.items()))
