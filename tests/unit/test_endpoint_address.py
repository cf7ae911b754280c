"""The endpoint's address counts, not only its port (issue 48, finding 3): the bench's owner check (``check_owner``)
and serving_unit_info's endpoint check, with real sockets on this host's real /proc - the unit's server on
127.0.0.1:P (this test's own process) and another server on 127.0.0.2:P (a child process) - and a neighbour's
address with the same port.
"""
from __future__ import annotations

import ipaddress
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Iterator, Sequence, Tuple

import pytest

from ansible_collections.llmfleet.specdec.plugins.module_utils.bench import _bench_owner as bo
from ansible_collections.llmfleet.specdec.plugins.module_utils.systemd import _procview as pv
from ansible_collections.llmfleet.specdec.plugins.modules.serving_unit_info import endpoint_problem

UNIT = "llama-server.service"
GROUP = "/system.slice/llama-server.service"  # neither this test nor its child runs in it: only MainPID counts
NEIGHBOUR = "192.0.2.7"  # TEST-NET-1: never an address of this host
CHILD = ("import socket, sys, time\n"
         "s = socket.socket()\n"
         "s.bind(('127.0.0.2', int(sys.argv[1])))\n"
         "s.listen()\n"
         "print('ready', flush=True)\n"
         "time.sleep(120)\n")


def systemctl(argv: Sequence[str]) -> Tuple[int, str, str]:
    """``systemctl show`` of a unit whose MainPID is this test's process (the unit's server on 127.0.0.1:P)."""
    assert list(argv[:2]) == ["systemctl", "show"]
    values = {"ActiveState": "active", "SubState": "running", "MainPID": str(os.getpid()), "ControlGroup": GROUP}
    wanted = [argv[i + 1] for i, word in enumerate(argv) if word == "-p"]
    if "--value" in argv:
        return 0, "".join(values[name] + "\n" for name in wanted), ""
    return 0, "".join(f"{name}={values[name]}\n" for name in wanted), ""


@pytest.fixture()
def two_loopbacks() -> Iterator[Tuple[int, int]]:
    """(port, the other server's pid): this process listens on 127.0.0.1:port, a child on 127.0.0.2:port."""
    unit = socket.socket()
    unit.bind(("127.0.0.1", 0))
    unit.listen()
    port = unit.getsockname()[1]
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(port)], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
        yield port, child.pid
    finally:
        child.kill()
        child.wait()
        unit.close()


def test_the_units_own_address_passes_though_another_server_holds_the_port_elsewhere(two_loopbacks: Tuple[int, int]) -> None:
    port, _other = two_loopbacks
    owner = bo.check_owner(UNIT, f"http://127.0.0.1:{port}", systemctl)
    assert owner == {"unit": UNIT, "port": port, "main_pid": os.getpid(), "owners": [os.getpid()]}
    unit = {"unit": UNIT, "kind": "direct", "running": {"pid": os.getpid()}, "endpoint": {"url": f"http://127.0.0.1:{port}"}}
    assert endpoint_problem(unit, f"http://127.0.0.1:{port}", systemctl) == ""


def test_the_other_loopback_address_is_refused_naming_its_server(two_loopbacks: Tuple[int, int]) -> None:
    port, other = two_loopbacks
    with pytest.raises(bo.BenchOwnerError) as info:
        bo.check_owner(UNIT, f"http://127.0.0.2:{port}", systemctl)
    message = str(info.value)
    assert f"port {port} of http://127.0.0.2:{port} (address 127.0.0.2, port {port}) is held by pid {other} " in message
    assert str(os.getpid()) not in message.split("not by", maxsplit=1)[0]  # the unit is not among the holders named
    unit = {"unit": UNIT, "kind": "direct", "running": {"pid": os.getpid()}, "endpoint": {"url": f"http://127.0.0.1:{port}"}}
    problem = endpoint_problem(unit, f"http://127.0.0.2:{port}", systemctl)
    assert problem.startswith(f"specdec_endpoint http://127.0.0.2:{port} is not {UNIT}'s server: port {port} at "
                              f"127.0.0.2 is held by pid {other} ")
    assert f"listens on (http://127.0.0.1:{port}, from its command line)" in problem


def test_a_neighbours_address_with_the_same_port_is_refused_with_the_reason(two_loopbacks: Tuple[int, int]) -> None:
    port, _other = two_loopbacks
    with pytest.raises(bo.BenchOwnerError, match=rf"endpoint http://{NEIGHBOUR}:{port}: {NEIGHBOUR} is neither loopback "
                       r"nor an address of this host, so another machine answers it; .*nothing was measured"):
        bo.check_owner(UNIT, f"http://{NEIGHBOUR}:{port}", systemctl)
    unit = {"unit": UNIT, "kind": "direct", "running": {"pid": os.getpid()}, "endpoint": {"url": f"http://127.0.0.1:{port}"}}
    problem = endpoint_problem(unit, f"http://{NEIGHBOUR}:{port}", systemctl)
    assert f"{NEIGHBOUR} is neither loopback nor an address of this host, so every measurement would reach another " \
           "machine" in problem
    assert endpoint_problem(dict(unit, kind="container"), f"http://{NEIGHBOUR}:{port}", systemctl) == problem


def test_a_name_that_does_not_resolve_is_refused_naming_it() -> None:
    with pytest.raises(bo.BenchOwnerError, match=r"its host 'no-such-host\.invalid' does not resolve"):
        bo.check_owner(UNIT, "http://no-such-host.invalid:8080", systemctl)


def test_this_hosts_own_addresses_and_loopback_are_here_others_are_not() -> None:
    assert not pv.not_this_host(ipaddress.ip_address("127.0.0.2")) and not pv.not_this_host(ipaddress.ip_address("::1"))
    assert pv.not_this_host(ipaddress.ip_address(NEIGHBOUR)) and pv.not_this_host(ipaddress.ip_address("0.0.0.0"))
    assert not pv.not_this_host(ipaddress.ip_address("::ffff:127.0.0.1"))  # IPv4-mapped loopback


TCP = """\
  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 11
   1: 0200007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 12
   2: 0100007F:1F91 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 13
"""
TCP6 = ("  sl  local_address                         remote_address                        st tx_queue rx_queue\n"
        "   0: 00000000000000000000000000000000:1F92 00000000000000000000000000000000:0000 0A 00000000:00000000"
        " 00:00000000 00000000     0        0 14\n")


def test_a_connection_reaches_the_socket_bound_to_its_address_else_the_wildcard(tmp_path: Path) -> None:

    (tmp_path / "net").mkdir()
    (tmp_path / "net" / "tcp").write_text(TCP)
    (tmp_path / "net" / "tcp6").write_text(TCP6)
    view = pv.ProcView(str(tmp_path))
    ip = ipaddress.ip_address
    assert view.answering_inodes(8080, [ip("127.0.0.2")]) == [12]  # bound to it: the wildcard is not asked
    assert view.answering_inodes(8080, [ip("127.0.0.1")]) == [11]  # nothing bound to it: 0.0.0.0
    assert view.answering_inodes(8081, [ip("127.0.0.2")]) == []  # 127.0.0.1:8081 is not 127.0.0.2:8081
    assert view.answering_inodes(8082, [ip("127.0.0.1"), ip("::1")]) == [14]  # :: takes IPv4 and IPv6
    assert view.answering_inodes(8080, [ip("::1")]) == []  # 0.0.0.0 takes no IPv6
