#!/usr/bin/python
# Copyright: (c) 2026, llmfleet.specdec contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# Read a serving unit as systemd will run it (ExecStart, Environment, EnvironmentFiles) and say which server form it is.
from __future__ import annotations

DOCUMENTATION = r"""
---
module: serving_unit_info
short_description: Read a llama-server or vLLM systemd unit as systemd will run it, and the form candidates take
version_added: 0.2.0
description:
  - Reads the unit's fragment and its drop-ins in the order systemd applies them (C(systemctl show)'s
    C(FragmentPath) and C(DropInPaths)) with systemd's own syntax - comments, line continuations, an empty
    C(ExecStart=) that resets the list, quotes, C escapes, C(%) specifiers - and its environment
    (C(Environment=), C(EnvironmentFile=) with C(-) optional files, C(UnsetEnvironment=)). C(ExecStart=)'s C($VAR)
    and C(${VAR}) are expanded from that environment as systemd does when it starts the process. The A/B
    candidate's transient drop-in of M(llmfleet.specdec.unit_override) is left out; a promotion's drop-in is read.
  - Checks the result against systemd's own parse (C(systemctl show -p ExecStart)) and says which server the
    command line runs and how candidates are written for it (RV(serving_unit.form)) - V(env) for units of roles
    C(llmfleet.specdec.llamacpp_serve) and C(llmfleet.specdec.vllm_serve) (their launchers read the env file),
    V(exec) for a hand-written unit that runs llama-server, C(vllm serve) or
    C(python -m vllm.entrypoints.openai.api_server), directly or with C(podman run) and the server's arguments
    after the image (C(docker run) is refused; its container runs outside the unit's cgroup).
  - A wrapper (a C(#!) script that ends in C(exec llama-server ...) or C(exec vllm serve ...), or C(sh -c '...'))
    is read where its server runs - C(/proc/<MainPID>), or the one server process in the unit's control group -
    and takes candidates in form V(env) (RV(serving_unit.kind=wrapper), RV(serving_unit.wrapper)). A wrapper unit
    that is not running, or whose processes hold no server or two, fails naming it.
  - Anything else (a program it does not know, a C($VAR) the unit does not set, a
    drop-in that sorts after the A/B drop-in and sets C(ExecStart=), quoting it cannot read exactly as systemd
    does) fails, naming the unit and what to change. Nothing on the host is changed, in or out of check mode.
extends_documentation_fragment:
  - llmfleet.specdec.attributes
  - llmfleet.specdec.attributes.read_only
options:
  unit:
    description: The serving unit, with or without C(.service).
    type: str
    default: llama-server
  engine:
    description:
      - The engine, for a container whose image's entrypoint is the server (the arguments after the image are
        then its arguments); the program names the engine otherwise.
      - Also accepted as C(backend), its name before 0.2.0 (deprecated, removed in 1.0.0).
    type: str
    choices: [llamacpp, vllm]
    aliases: [backend]
  required:
    description:
      - Fail when systemd has no such unit (or the host runs no systemd). V(false) returns
        RV(serving_unit.installed=false) instead, for a preflight before the unit is deployed.
    type: bool
    default: true
  start_from_running:
    description:
      - Compare the running process with what a restart of the unit would start (RV(serving_unit.pending)), that is its
        command line, its environment, the server's binary (a build switched or replaced on disk) and unit files
        systemd has not loaded yet (C(NeedDaemonReload)). A difference fails, naming it and the fix, before a play
        changes the unit; its restarts would otherwise apply a change nobody verified, and its way back would be
        the files on disk, not the production that ran.
      - A unit that is not installed or not running, or whose running process is an A/B candidate (an override of
        M(llmfleet.specdec.unit_override) is live), has nothing to compare and passes.
      - Fails in check mode too, so that a dry run shows the refusal.
    type: bool
    default: false
  force:
    description:
      - With O(start_from_running=true), report a difference (RV(pending_change)) instead of failing, to go ahead
        with the pending change knowingly.
    type: bool
    default: false
  endpoint:
    description:
      - The URL the play reaches production at (C(specdec_endpoint)). Its address must be loopback or one of this
        host's own addresses (a host name must resolve to such); another machine's address fails, naming it, in check
        mode too. When the unit runs directly on the host, the local process a connection to that address and port
        reaches (the socket bound to the address, else one bound to the wildcard) must be the unit's (its main
        process or one in its control group); another process there fails, naming it and the fix - every
        measurement would otherwise reach that process, not the unit (a server on C(127.0.0.2:P) is not the unit on
        C(127.0.0.1:P)).
      - A port nothing on the host listens on at that address and a container unit's port are not checked here; the
        health check that follows decides. A proxy in front of the unit is not given here (role
        C(llmfleet.specdec.spec_ab) leaves it out with C(specdec_endpoint_proxy=true)).
    type: str
notes:
  - Run it as root (C(become=true)) so that every unit file and env file can be read.
  - Tested on real systemd (Debian 12, systemd 252) in podman containers; see C(molecule/units).
seealso:
  - module: llmfleet.specdec.unit_override
author:
  - llmfleet maintainers (@llmfleet)
"""

EXAMPLES = r"""
- name: Read production's unit as systemd will run it
  llmfleet.specdec.serving_unit_info:
    unit: llama-server
  become: true
  register: production

- name: Show how candidates will be written for it
  ansible.builtin.debug:
    msg: "{{ production.serving_unit.form }}: {{ production.serving_unit.argv | join(' ') }}"
"""

RETURN = r"""
serving_unit:
  description: The unit as systemd will run it.
  returned: always
  type: dict
  contains:
    unit:
      description: The full unit name.
      type: str
    installed:
      description: Whether systemd has the unit (false only with O(required=false)).
      type: bool
    why:
      description: Why the unit was not read, when RV(serving_unit.installed) is false.
      type: str
    form:
      description: V(env) (the collection's launcher units) or V(exec) (a hand-written unit).
      type: str
    kind:
      description: >-
        V(launcher), V(direct), V(prefixed) (the server exec'd by C(env VAR=value), C(nice), C(taskset) or
        C(numactl) prefixes, whose variables are in RV(serving_unit.server_env)), V(container) or V(wrapper) (a
        script or C(sh -c) that starts the server; its arguments and environment are read from the running server).
      type: str
    wrapper:
      description:
        - For a wrapper unit - V(shape) (V(script) or V(shell)), V(pid) (the server's process), V(exec) (whether
          the server is the unit's MainPID), V(server_argv) (its real command line) and V(set_by_wrapper) (the
          server variables it sees with another value than the unit's environment gives, null for one it lacks).
      type: dict
      returned: when RV(serving_unit.kind) is V(wrapper)
    engine:
      description: V(llamacpp) or V(vllm).
      type: str
    argv:
      description: The command line the process gets (specifiers resolved, variables expanded), program first.
      type: list
      elements: str
    server_at:
      description: The index in RV(serving_unit.argv) where the server's own arguments start.
      type: int
    server_args:
      description: The server's arguments (after the image for a container).
      type: list
      elements: str
    exec_prefix:
      description: The C(ExecStart=) prefixes kept for a candidate's command line (C(-), C(+), C(!), C(!!)).
      type: str
    exec_start_source:
      description: The file and line of the C(ExecStart=) in force.
      type: str
    env:
      description:
        - The unit's environment from C(Environment=), C(EnvironmentFile=) and C(UnsetEnvironment=).
        - The value of a variable whose name looks secret (a word C(TOKEN), C(KEY), C(SECRET), C(PASSWORD), C(AUTH) or
          C(CREDENTIALS), as in C(HF_TOKEN) or C(LLAMA_API_KEY)) is masked as C(********), here and in
          RV(serving_unit.server_env), a container's C(env) and RV(serving_unit.wrapper); Ansible also hides such a
          value (8 characters or more) wherever else it would appear in the result, except in the command line.
      type: dict
    server_env:
      description:
        - The environment the server reads (a container's C(-e), C(--env-file), C(--env-host); with an C(env VAR=value)
          prefix, RV(serving_unit.env) and the prefix's variables).
        - For a wrapper, the server's own settings read from its C(/proc/<pid>/environ) - the engine's variables
          (C(LLAMA_*), C(VLLM_*), C(GGML_*), C(CUDA_*), C(HIP_*), C(SPECDEC_*), C(OMP_*), C(ROCR_*), C(HSA_*)) and
          those the unit's environment sets - never the wrapper's whole environment (C(PATH), C(INVOCATION_ID), a
          token it exports). Secret-looking values masked as in RV(serving_unit.env).
      type: dict
    container:
      description: For a container, the runtime, the image, its index, the runtime's options, env and published ports.
      type: dict
    environment_files:
      description: Each env file (C(path), C(optional), C(exists)).
      type: list
      elements: dict
    endpoint:
      description: Where the server answers on the host (C(host), C(port), C(url)).
      type: dict
    override_active:
      description: Whether an A/B candidate's transient drop-in is in place (it was left out of the reading).
      type: bool
    promoted_dropin:
      description: The promotion's drop-in (C(40-llmfleet-specdec-promoted.conf), or C(zx-llmfleet-specdec-promoted.conf)
        on a unit with an operator drop-in sorting after the usual name), when a winner was promoted as a drop-in
        (a hand-written unit's command line, a wrapper unit's variables); null otherwise.
      type: str
    running:
      description: The unit's main process now - C(pid), C(argv) (its C(/proc/<pid>/cmdline)) and whether it
        C(matches) RV(serving_unit.argv) (a unit changed since it started does not).
      type: dict
    warnings:
      description: What systemd also warns about (unknown escapes kept with their backslash).
      type: list
      elements: str
    pending:
      description:
        - What a restart would start that the running process does not run - C(compared) (false, with C(why),
          when there is nothing to compare) and C(differences), each a C(what) (V(unit files), V(command line),
          V(environment), V(build)) and a C(detail). Values of variables whose names look secret are hidden.
      type: dict
  sample:
    unit: llama-server.service
    installed: true
    form: exec
    kind: direct
    engine: llamacpp
    argv: [/opt/llama/bin/llama-server, -m, /srv/models/target.gguf, --spec-draft-n-max, "3", --port, "8080"]
    server_at: 1
    exec_prefix: ""
    endpoint: {host: 127.0.0.1, port: 8080, url: "http://127.0.0.1:8080"}
pending_change:
  description: The differences of RV(serving_unit.pending) in one line (empty when there are none), for a run's record.
  returned: always
  type: str
  sample: "environment: LLAMA_ARG_CTX_SIZE: running '4096', next start '8192'"
"""

import re
import traceback
from urllib.parse import urlsplit

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llmfleet.specdec.plugins.module_utils.common._errors import SpecdecError
from ansible_collections.llmfleet.specdec.plugins.module_utils.common._secrets import masked, secret_values
from ansible_collections.llmfleet.specdec.plugins.module_utils.systemd._procview import (
    ProcView,
    endpoint_addresses,
    not_this_host,
    within_cgroup,
)
from ansible_collections.llmfleet.specdec.plugins.module_utils.systemd._serving_unit import (
    not_installed,
    pending_changes,
    pending_text,
    read_unit,
    refuse_pending,
)

ARGUMENT_SPEC = dict(
    unit=dict(type="str", default="llama-server"),
    engine=dict(type="str", choices=["llamacpp", "vllm"], aliases=["backend"],
                deprecated_aliases=[dict(name="backend", version="1.0.0", collection_name="llmfleet.specdec")]),
    required=dict(type="bool", default=True),
    start_from_running=dict(type="bool", default=False),
    force=dict(type="bool", default=False),
    endpoint=dict(type="str"),
)


# What systemctl says on a host whose PID 1 is not systemd (a container, WSL without systemd).
NO_SYSTEMD = re.compile(r"not been booted with systemd|Failed to connect to bus|systemd as init system")


def endpoint_problem(unit: dict, endpoint: str | None, run, proc: str = "/proc") -> str:
    """Why ``endpoint`` is not the unit's server ('' when it is, or when this host cannot tell)."""
    running = unit.get("running") or {}
    pid = int(running.get("pid") or 0)
    if not endpoint:
        return ""
    own = (unit.get("endpoint") or {}).get("url")
    where = f" ({own}, from its command line)" if own else ""
    addresses, why = endpoint_addresses(endpoint)
    elsewhere = [str(a) for a in addresses if not_this_host(a)]
    if why or elsewhere:
        why = why or f"{', '.join(elsewhere)} is neither loopback nor an address of this host"
        return (f"specdec_endpoint {endpoint} is not {unit['unit']}'s server: {why}, so every measurement would reach "
                f"another machine; set specdec_endpoint to the address {unit['unit']} listens on{where}, or declare a "
                "proxy in front of it (specdec_endpoint_proxy=true)")
    if unit.get("kind") == "container" or not pid:
        return ""
    try:
        parts = urlsplit(endpoint)
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        return ""
    view = ProcView(proc)
    inodes = view.answering_inodes(port, addresses)
    owners = view.socket_owners(inodes) if inodes else []
    if not owners:
        return ""
    rc, out, _err = run(["systemctl", "show", unit["unit"], "-p", "ControlGroup", "--value"])
    group = out.strip() if rc == 0 else ""
    if all(owner == pid or within_cgroup(view.cgroup(owner), group) for owner in owners):
        return ""
    others = [owner for owner in owners if owner != pid and not within_cgroup(view.cgroup(owner), group)]
    return (f"specdec_endpoint {endpoint} is not {unit['unit']}'s server: port {port} at "
            f"{' or '.join(str(a) for a in addresses)} is held by "
            f"{view.owners_text(others)}, not by the unit's process (pid {pid}); set specdec_endpoint to the address "
            f"{unit['unit']} listens on{where}, or stop the other process")


def shown_unit(unit: dict) -> dict:
    """The unit as returned: each variable whose name looks secret masked in its environments (``env``,
    ``server_env``, a container's and a wrapper's); what runs is read unmasked on the host, never returned."""
    shown = dict(unit, **{key: masked(unit[key]) for key in ("env", "server_env") if isinstance(unit.get(key), dict)})
    if isinstance(unit.get("container"), dict):
        shown["container"] = dict(unit["container"], env=masked(unit["container"].get("env")))
    if isinstance(unit.get("wrapper"), dict):
        shown["wrapper"] = dict(unit["wrapper"], set_by_wrapper=masked(unit["wrapper"].get("set_by_wrapper")))
    return shown


def hide_secrets(module: AnsibleModule, unit: dict) -> None:
    """``no_log`` for the secret values the unit's environments hold (8 characters or more, and not a word of its
    command line, which a candidate's command line is built from): Ansible hides them from anything returned."""
    words = set((unit.get("argv") or []) + ((unit.get("running") or {}).get("argv") or []))
    values = secret_values(unit.get("env"), unit.get("server_env"), (unit.get("container") or {}).get("env"))
    module.no_log_values.update(v for v in values if len(v) >= 8 and not any(v in word for word in words))


def main() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    p = module.params
    if module.get_bin_path("systemctl") is None:
        if p["required"]:
            module.fail_json(msg=f"{p['unit']} (specdec_unit): this host has no systemctl, and serving units are "
                                 "systemd services; run the play on a host where production runs under systemd "
                                 "(limit it with -l), or deploy the unit there (playbooks/deploy.yml)")
        module.exit_json(changed=False, serving_unit=not_installed(p["unit"], "this host has no systemctl"),
                         pending_change="")
    try:
        unit = read_unit(p["unit"], lambda argv: module.run_command(list(argv)), backend=p["engine"])
    except SpecdecError as exc:
        module.fail_json(msg=str(exc), exception=traceback.format_exc())
    hide_secrets(module, unit)
    if not unit["installed"] and NO_SYSTEMD.search(unit.get("why") or ""):
        unit["why"] = "this host does not run systemd (PID 1 is another init)"
        if p["required"]:
            module.fail_json(msg=f"{unit['unit']} (specdec_unit): this host does not run systemd, and serving units "
                                 "are systemd services; run the play on a host where production runs under systemd "
                                 "(limit it with -l)", serving_unit=shown_unit(unit))
    if not unit["installed"] and p["required"]:
        why = " ".join((unit["why"] or "").split())
        module.fail_json(msg=f"{unit['unit']} (specdec_unit): {why}; deploy the unit (role "
                             "llmfleet.specdec.llamacpp_serve, or your own unit file) or name the right one in "
                             "specdec_unit", serving_unit=shown_unit(unit))
    problem = endpoint_problem(unit, p["endpoint"], lambda argv: module.run_command(list(argv)))
    if problem:
        module.fail_json(msg=problem, serving_unit=shown_unit(unit))
    unit["pending"] = pending_changes(unit)
    pending_change = pending_text(unit["pending"])
    if p["start_from_running"] and pending_change and not p["force"]:
        module.fail_json(msg=refuse_pending(unit["unit"], unit["pending"]), serving_unit=shown_unit(unit),
                         pending_change=pending_change)
    module.exit_json(changed=False, serving_unit=shown_unit(unit), pending_change=pending_change)


if __name__ == "__main__":
    main()
