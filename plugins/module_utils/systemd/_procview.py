# Copyright: (c) 2026, llmfleet.specdec contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# Private to the collection: /proc and cgroup readers (listening sockets, their owners, environments, systemctl show).
"""What the host's kernel and ``systemctl show`` say about a unit's processes, read and parsed here.

- ``parse_show``/``environment_files``: ``systemctl show`` output;
- ``cgroup_path``/``within_cgroup``: which unit a process belongs to (``/proc/<pid>/cgroup``);
- ``parse_proc_net_tcp``/``Listener``: the LISTEN sockets of ``/proc/net/tcp*``;
- ``ProcView``: socket inode to owning PIDs (``/proc/<pid>/fd``), a process's environment, a description
  of a process for an error message; rooted at a directory so that tests can give it a fake ``/proc``;
- ``endpoint_addresses``/``not_this_host``/``ProcView.answering_inodes``: which of the host's listeners a URL's
  connections reach - the address as well as the port (a server on 127.0.0.2:P is not the unit on 127.0.0.1:P).

Only reading: nothing here changes the host, runs systemctl or decides anything (whether an address is this host's
is asked by binding a socket to it for a moment, which the kernel allows only for its own addresses).
"""
from __future__ import annotations

import ipaddress
import os
import re
import socket
import struct
from typing import Dict, List, NamedTuple, Sequence, Tuple, Union
from urllib.parse import urlsplit

IPAddress = Union[ipaddress.IPv4Address, ipaddress.IPv6Address]


def parse_show(text: str) -> Dict[str, List[str]]:
    """``systemctl show`` output → property → values (EnvironmentFiles repeats one line per file)."""
    props: Dict[str, List[str]] = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            props.setdefault(key, []).append(value)
    return props


def environment_files(values: Sequence[str]) -> List[Tuple[str, bool]]:
    """``EnvironmentFiles=/etc/x.env (ignore_errors=no)`` values → (path, ignore_errors)."""
    files = []
    for value in values:
        match = re.match(r"(.*) \(ignore_errors=(yes|no)\)\Z", value)
        if match:
            files.append((match.group(1), match.group(2) == "yes"))
        elif value:
            files.append((value, False))
    return files


def cgroup_path(text: str) -> str | None:
    """The cgroup systemd tracks a process in, from ``/proc/<pid>/cgroup``; None when there is none.

    The ``name=systemd`` hierarchy when there is one (cgroup v1 and hybrid: there the unified ``0::``
    line may name another tree), else the unified hierarchy's ``0::`` line (cgroup v2).
    """
    unified = None
    for line in text.splitlines():
        _dummy, _dummy, rest = line.partition(":")
        controllers, sep, path = rest.partition(":")
        if not sep:
            continue
        if "name=systemd" in controllers.split(","):
            return path
        if not controllers and line.startswith("0:"):
            unified = path
    return unified


def within_cgroup(path: str | None, control_group: str) -> bool:
    """Whether ``path`` is the unit's ``control_group`` or below it (a shared prefix is not enough)."""
    top = control_group.rstrip("/")
    if not path or not top:  # no unit cgroup (inactive) or the root: nothing is the unit's
        return False
    return path == top or path.startswith(top + "/")


class Listener(NamedTuple):
    address: str
    port: int
    inode: int


def parse_proc_net_tcp(text: str) -> List[Listener]:
    """The LISTEN sockets of a ``/proc/net/tcp`` or ``tcp6`` table."""
    listeners = []
    for line in text.splitlines()[1:]:
        fields = line.split()
        if len(fields) < 10 or fields[3] != "0A":
            continue
        address, _dummy, port_hex = fields[1].rpartition(":")
        try:
            listeners.append(Listener(address, int(port_hex, 16), int(fields[9])))
        except ValueError:
            continue
    return listeners


def listener_address(text: str) -> IPAddress | None:
    """A ``/proc/net/tcp*`` local address (hex, each 32-bit word in the host's byte order) as an IP address."""
    try:
        words = [int(text[i:i + 8], 16) for i in range(0, len(text), 8)]
        return ipaddress.ip_address(b"".join(struct.pack("=I", word) for word in words))
    except (ValueError, struct.error):
        return None


def _plain(address: IPAddress) -> IPAddress:
    """An IPv4-mapped IPv6 address (``::ffff:127.0.0.1``, an IPv6 socket's view of IPv4) as its IPv4 address."""
    mapped = getattr(address, "ipv4_mapped", None)
    return mapped if mapped is not None else address


def endpoint_addresses(url: str) -> Tuple[List[IPAddress], str]:
    """The addresses a URL's client connects to (an IP literal, or what its host name resolves to), and '' - or
    no address and why."""
    try:
        parts = urlsplit(str(url))
        host, port = parts.hostname, parts.port
    except ValueError as exc:
        return [], f"it is not a URL ({exc})"
    if not host:
        return [], "it names no host"
    try:
        return [ipaddress.ip_address(host.split("%")[0])], ""
    except ValueError:
        pass
    try:
        found = socket.getaddrinfo(host, port or 80, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError) as exc:
        return [], f"its host {host!r} does not resolve ({exc})"
    out: List[IPAddress] = []
    for _family, _type, _proto, _name, sockaddr in found:
        address = _plain(ipaddress.ip_address(str(sockaddr[0]).split("%", maxsplit=1)[0]))
        if address not in out:
            out.append(address)
    return out, ""


def not_this_host(address: IPAddress) -> bool:
    """Whether ``address`` is neither loopback nor one of this host's own (the kernel binds only its own)."""
    address = _plain(address)
    if address.is_loopback:
        return False
    if address.is_unspecified or address.is_multicast:
        return True
    family = socket.AF_INET6 if address.version == 6 else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.bind((str(address), 0))
        return False
    except OSError:
        return True


# ------------------------------------------------------------------ the host


def read_text(path: str) -> str | None:
    # newline="": a carriage return inside a quoted env-file value is part of the value, not a line end
    try:
        with open(path, encoding="utf-8", errors="replace", newline="") as handle:
            return handle.read()
    except (FileNotFoundError, NotADirectoryError):
        return None


class ProcView:
    """Sockets, owners and environments from ``/proc`` (a root argument for the tests)."""

    def __init__(self, proc: str = "/proc") -> None:
        self.proc = proc
        self.unreadable = 0

    def listening_inodes(self, port: int) -> List[int]:
        inodes = []
        for table in ("net/tcp", "net/tcp6"):
            text = read_text(os.path.join(self.proc, table))
            if text:
                inodes += [entry.inode for entry in parse_proc_net_tcp(text) if entry.port == port]
        return inodes

    def listeners(self, port: int) -> List[Tuple[IPAddress, int]]:
        """(address, inode) of every socket listening on ``port`` (``/proc/net/tcp`` and ``tcp6``)."""
        out = []
        for table in ("net/tcp", "net/tcp6"):
            for entry in parse_proc_net_tcp(read_text(os.path.join(self.proc, table)) or ""):
                address = listener_address(entry.address) if entry.port == port else None
                if address is not None:
                    out.append((address, entry.inode))
        return out

    def answering_inodes(self, port: int, addresses: Sequence[IPAddress]) -> List[int]:
        """The listening sockets a connection to each of ``addresses`` on ``port`` reaches: the one bound to that
        address (the kernel prefers it), else one bound to the wildcard (``0.0.0.0``, or ``::`` for both)."""
        listening = self.listeners(port)
        inodes: List[int] = []
        for wanted in (_plain(a) for a in addresses):
            exact = [inode for address, inode in listening if _plain(address) == wanted]
            wildcard = [inode for address, inode in listening if address.is_unspecified
                        and (address.version == 6 or wanted.version == 4)]
            inodes += [inode for inode in exact or wildcard if inode not in inodes]
        return inodes

    def socket_owners(self, inodes: Sequence[int]) -> List[int]:
        """PIDs holding any of these socket inodes. ``self.unreadable`` counts processes whose fds were hidden."""
        wanted = {f"socket:[{inode}]" for inode in inodes}
        owners = []
        self.unreadable = 0
        for entry in os.listdir(self.proc):
            if not entry.isdigit():
                continue
            fd_dir = os.path.join(self.proc, entry, "fd")
            try:
                for fd in os.listdir(fd_dir):
                    try:
                        if os.readlink(os.path.join(fd_dir, fd)) in wanted:
                            owners.append(int(entry))
                            break
                    except FileNotFoundError:
                        continue
            except PermissionError:
                self.unreadable += 1
            except OSError:
                continue
        return sorted(owners)

    def owners_text(self, owners: Sequence[int]) -> str:
        if owners:
            return ", ".join(self.describe(pid) for pid in owners)
        if getattr(self, "unreadable", 0):
            return (f"a process whose file descriptors are hidden from this module ({self.unreadable} processes "
                    "unreadable: run it as root with CAP_SYS_PTRACE, which root has on a normal host)")
        return "no process found"

    def cgroup(self, pid: int) -> str | None:
        """The cgroup systemd tracks ``pid`` in (see ``cgroup_path``); None when it cannot be read."""
        return cgroup_path(read_text(os.path.join(self.proc, str(pid), "cgroup")) or "")

    def describe(self, pid: int) -> str:
        comm = (read_text(os.path.join(self.proc, str(pid), "comm")) or "?").strip()
        raw = read_text(os.path.join(self.proc, str(pid), "cmdline")) or ""
        cmdline = " ".join(part for part in raw.split("\x00") if part)
        units = [part for part in (self.cgroup(pid) or "").split("/") if part.endswith((".service", ".scope"))]
        where = f", unit {units[-1]}" if units else ""
        return f"pid {pid} ({comm}{where}: {cmdline[:200]})"

    def environ(self, pid: int) -> Dict[str, str]:
        try:
            with open(os.path.join(self.proc, str(pid), "environ"), "rb") as handle:
                raw = handle.read()
        except OSError:
            return {}
        env = {}
        for item in raw.split(b"\x00"):
            name, sep, value = item.decode("utf-8", "replace").partition("=")
            if sep:
                env[name] = value
        return env
