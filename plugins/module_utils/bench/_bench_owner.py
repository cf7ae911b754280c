# Copyright: (c) 2026, llmfleet.specdec contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# Private to the collection: whose server answers a bench's endpoint (the unit's own, or refused naming the other).
"""Before ``spec_bench`` measures, and again after, the process listening on the endpoint's port must be the unit's
own server: its ``MainPID`` or a process in its control group (``/proc/net/tcp*`` inode -> ``/proc/<pid>/fd``,
``/proc/<pid>/cgroup`` against the unit's ``ControlGroup``), the same test ``unit_override``'s health gate makes.
The endpoint's address counts as well as its port: it must be loopback or one of this host's own addresses (a
neighbour's address with the same port is another machine's server), and the listener checked is the one a
connection to that address reaches (the socket bound to it, else a wildcard one: a server on 127.0.0.2:P is not
the unit on 127.0.0.1:P). Anything else (an address not on this host, no listener there, a listener outside the
unit, fds this module cannot read, a unit that is not active) is refused naming the reason or what holds the port,
so that another server's numbers are never recorded as the unit's. Between the two checks the unit must not have
been restarted (same ``MainPID``).

Only reading: ``systemctl show`` through the injected runner and ``/proc`` through ``ProcView``.
"""
from __future__ import annotations

from typing import Any, Dict
from urllib.parse import urlsplit

from ansible_collections.llmfleet.specdec.plugins.module_utils.common._errors import SpecdecError
from ansible_collections.llmfleet.specdec.plugins.module_utils.systemd._procview import (
    ProcView,
    endpoint_addresses,
    not_this_host,
    within_cgroup,
)
from ansible_collections.llmfleet.specdec.plugins.module_utils.systemd._systemd import Runner, Systemctl

DEFAULT_PORTS = {"http": 80, "https": 443}


class BenchOwnerError(SpecdecError):
    """The endpoint's port is not served by the unit's own server; nothing was measured (or kept)."""


def endpoint_port(endpoint: str) -> int:
    """The TCP port a bench endpoint URL reaches (the scheme's default when the URL names none)."""
    try:
        parts = urlsplit(str(endpoint))
        port = parts.port
    except ValueError as exc:
        raise BenchOwnerError(f"endpoint {endpoint!r} is not a URL ({exc}); give http://HOST:PORT") from None
    if parts.scheme not in DEFAULT_PORTS or not parts.hostname:
        raise BenchOwnerError(f"endpoint {endpoint!r} is not an http(s) URL with a host; give http://HOST:PORT")
    return port if port is not None else DEFAULT_PORTS[parts.scheme]


def check_owner(unit: str, endpoint: str, run: Runner, view: ProcView | None = None) -> Dict[str, Any]:
    """Who serves ``endpoint``'s port on this host: {unit, port, main_pid, owners} when the unit's own server
    (and nothing else) listens there; BenchOwnerError naming the holder otherwise."""
    view = view or ProcView()
    port = endpoint_port(endpoint)
    addresses, why = endpoint_addresses(endpoint)
    elsewhere = [str(a) for a in addresses if not_this_host(a)]
    if why or elsewhere:
        why = why or (f"{', '.join(elsewhere)} is neither loopback nor an address of this host, so another machine "
                      "answers it")
        raise BenchOwnerError(f"endpoint {endpoint}: {why}; {unit}'s server is measured on its own host, and nothing "
                              f"was measured. Point the endpoint at the address and port {unit} listens on here "
                              "(127.0.0.1, or this host's own address; spec_ab_endpoint)")
    try:
        info = Systemctl(run).show(unit, ["ActiveState", "SubState", "MainPID", "ControlGroup"])
    except SpecdecError as exc:
        raise BenchOwnerError(f"{unit}: systemd cannot show it ({exc}); give spec_bench the unit that serves "
                              f"{endpoint}") from None
    pid = int(info.get("MainPID") or 0)
    group = info.get("ControlGroup", "")
    at = " or ".join(str(a) for a in addresses)
    what = f"{endpoint} (address {at}, port {port})"
    if info.get("ActiveState") != "active" or not pid:
        raise BenchOwnerError(f"{unit} is {info.get('ActiveState') or '?'}/{info.get('SubState') or '?'} (MainPID "
                              f"{pid}), so whatever answers {what} is not its server; nothing was measured. Start "
                              f"{unit} (or let the A/B restore it) and run again")
    inodes = view.answering_inodes(port, addresses)
    owners = view.socket_owners(inodes) if inodes else []
    others = [owner for owner in owners if owner != pid and not within_cgroup(view.cgroup(owner), group)]
    if not inodes:
        raise BenchOwnerError(f"no process on this host listens on port {port} at {at}, so {what} is not served by {unit} "
                              f"(pid {pid}) here; nothing was measured. Point the endpoint at {unit}'s own host and "
                              "port (spec_ab_endpoint)")
    if others or not owners:
        held_by = view.owners_text(others) if others else view.owners_text([])
        raise BenchOwnerError(f"port {port} of {what} is held by {held_by}, not by {unit}'s server (pid {pid}"
                              f"{' or its control group ' + group if group else ''}); nothing from it is recorded as "
                              f"{unit}'s. Stop that process or move it off port {port}, or point the endpoint at the "
                              f"address {unit} listens on, and run again")
    return {"unit": unit, "port": port, "main_pid": pid, "owners": owners}


def check_same_owner(before: Dict[str, Any], unit: str, endpoint: str, run: Runner,
                     view: ProcView | None = None) -> Dict[str, Any]:
    """After measuring: still the unit's server, and the same process (no restart in between)."""
    after = check_owner(unit, endpoint, run, view)
    if after["main_pid"] != before["main_pid"]:
        raise BenchOwnerError(f"{unit}'s server changed while it was measured (MainPID {before['main_pid']} -> "
                              f"{after['main_pid']}): the numbers mix two processes and are not kept as one config's. "
                              "Find what restarted it (journalctl -u " + unit + ") and run again")
    return after
