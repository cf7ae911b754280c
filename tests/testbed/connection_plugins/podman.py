# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# The test bed's transport into its Molecule containers: containers.podman's podman connection (what the
# molecule podman driver's inventory names, ``ansible_connection: podman``) with pipelining, as a fleet's SSH
# transport runs with this project's ansible.cfg. A module then travels over ``podman exec --interactive``'s stdin
# in one exec, where the plain plugin needs a temporary directory, a copy, a chmod, the run and a cleanup: four execs and a
# mount for every task. On the two-core test machine that was most of what a scenario's tasks cost. Files still go
# through the container's mounted root (copy, template, fetch), mounted only when a task moves a file.
#
# The Makefile puts this folder first in ANSIBLE_CONNECTION_PLUGINS for every Molecule scenario, so the short name
# ``podman`` finds this class before the builtin redirect to containers.podman.podman. Nothing here runs on a host.
from __future__ import annotations

import shlex

from ansible.module_utils.common.text.converters import to_native
from ansible.plugins.connection import ConnectionBase, ensure_connect

from ansible_collections.containers.podman.plugins.connection.podman import Connection as PodmanConnection

DOCUMENTATION = """
    name: podman
    short_description: containers.podman's podman connection, with pipelining (test bed only)
    description:
        - containers.podman.podman with pipelining; modules go over podman exec --interactive's stdin.
    options:
      remote_addr:
        description: The ID of the container you want to access.
        default: inventory_hostname
        vars:
          - name: ansible_host
          - name: inventory_hostname
          - name: ansible_podman_host
      remote_user:
        description: User inside the container.
        ini:
          - section: defaults
            key: remote_user
        env:
          - name: ANSIBLE_REMOTE_USER
        vars:
          - name: ansible_user
      podman_extra_args:
        description: Extra arguments to pass to the podman command line.
        default: ''
        vars:
          - name: ansible_podman_extra_args
        env:
          - name: ANSIBLE_PODMAN_EXTRA_ARGS
      podman_executable:
        description: Executable for podman command.
        default: podman
        vars:
          - name: ansible_podman_executable
        env:
          - name: ANSIBLE_PODMAN_EXECUTABLE
      # The options below are read only by the newer containers.podman (the `ansible` 13+ package; see the class).
      container_timeout:
        description: Timeout in seconds for container operations, 0 for none.
        default: 0
        type: int
        vars:
          - name: ansible_podman_timeout
        env:
          - name: ANSIBLE_PODMAN_TIMEOUT
      mount_detection:
        description: Mount the container's root for file transfers.
        default: true
        type: bool
        vars:
          - name: ansible_podman_mount_detection
      ignore_mount_errors:
        description: Copy with podman cp when mounting fails.
        default: true
        type: bool
        vars:
          - name: ansible_podman_ignore_mount_errors
      extra_env_vars:
        description: Additional environment variables set in the container.
        default: {}
        type: dict
        vars:
          - name: ansible_podman_extra_env
      privilege_escalation_method:
        description: Privilege escalation inside the container.
        default: auto
        choices: [auto, sudo, su, none]
        type: str
        vars:
          - name: ansible_podman_privilege_escalation
      working_directory:
        description: Working directory for commands run in the container.
        type: str
        vars:
          - name: ansible_podman_working_directory
      pipelining:
        description: Send modules over stdin instead of a temporary file.
        type: boolean
        default: false
        env:
          - name: ANSIBLE_PIPELINING
        ini:
          - section: defaults
            key: pipelining
        vars:
          - name: ansible_pipelining
"""


# containers.podman 1.17 and later (the `ansible` 13+ package, which ansible-core 2.20+ goes with) pipelines by itself
# (`podman exec -i`) and mounts only when a file moves: Connection is then that plugin as it is. The older one (the
# `ansible` 12 package, ansible-core 2.19) gets the methods of _Pipelined.
PARENT_PIPELINES = bool(getattr(PodmanConnection, "has_pipelining", False))


class _Pipelined(PodmanConnection):
    has_pipelining = True

    def _connect(self):
        # no `podman mount` per task: _mount() does it when a file moves
        ConnectionBase._connect(self)
        self._connected = True
        return self

    def _mount(self):
        if self._mount_point is None:
            PodmanConnection._connect(self)

    @ensure_connect
    def exec_command(self, cmd, in_data=None, sudoable=False):
        if in_data is None:
            return super().exec_command(cmd, in_data=None, sudoable=sudoable)
        ConnectionBase.exec_command(self, cmd, in_data=in_data, sudoable=sudoable)
        # podman exec hands its stdin to the command only with --interactive
        args = ["exec", "--interactive"] + (["--user", self.user] if self.user else [])
        return self._podman(args, shlex.split(to_native(cmd, errors="surrogate_or_strict")), in_data)

    def put_file(self, in_path, out_path):
        self._mount()
        return super().put_file(in_path, out_path)

    def fetch_file(self, in_path, out_path):
        self._mount()
        return super().fetch_file(in_path, out_path)


class Connection(PodmanConnection if PARENT_PIPELINES else _Pipelined):
    transport = "podman"
    has_pipelining = True
