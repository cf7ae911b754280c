#!/usr/bin/env python3
"""Many hosts at once: spec-ab.yml on 1 host, then on 3 hosts in one run, side by side.

Uses the three container hosts of Molecule scenario `fleet` (each boots systemd and serves the real llama-server
on the tiny models, one thread), runs the shipped spec-ab.yml with the scenario's configs (molecule/fleet/
fleet_vars.yml: baseline against one draft, 2 rounds, 2 shapes) alternately on one host and on all three
(specdec_ab_batch default: every host at once), and prints:

- wall time of the whole ansible-playbook process for 1 host and for 3, and their ratio against the goal
  "3 at once within 1.5x of one";
- how far the measured rates moved between the two: host a's baseline decode tok/s per shape, and the draft's
  speedup against the baseline, alone and with two neighbours.

The three containers share this machine's two cores, so three servers generating at once slow each other; on a
real fleet each host has its own GPU, and only the controller is shared.

Run: make benchmark-fleet   (it builds or reuses the host image, llama-server and the models, like make molecule)
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCENARIO = ROOT / "molecule" / "fleet"
HOSTS = ["specdec-molecule-fleet-a", "specdec-molecule-fleet-b", "specdec-molecule-fleet-c"]
GOAL = 1.5


def run(argv: list[str], **kw) -> subprocess.CompletedProcess:
    return subprocess.run(argv, check=True, text=True, capture_output=True, cwd=ROOT, **kw)


def one_run(hosts: list[str], work: Path, label: str) -> dict:
    results = work / label
    playbook = Path(sys.executable).parent / "ansible-playbook"
    env = dict(os.environ, ANSIBLE_PIPELINING="true")
    started = time.perf_counter()
    proc = subprocess.run([str(playbook), "-i", str(SCENARIO / "hosts.yml"), "-l", ",".join(hosts),
                           "-e", f"@{SCENARIO / 'fleet_vars.yml'}", "-e", f"spec_ab_results_dir={results}",
                           "-e", f"specdec_fleet_name={label}", "spec-ab.yml"],
                          cwd=ROOT, env=env, text=True, capture_output=True, check=False)
    wall = time.perf_counter() - started
    if proc.returncode != 0:
        sys.exit(f"spec-ab.yml on {', '.join(hosts)} failed (rc {proc.returncode}):\n{proc.stdout[-4000:]}")
    reports = {}
    for host in hosts:
        (report,) = sorted((results / host).glob("*/report.json"))
        reports[host] = json.loads(report.read_text())
    return {"hosts": len(hosts), "wall": wall, "reports": reports}


def rates(report: dict) -> dict[str, tuple[float, float | None]]:
    """Per shape: (the baseline's median decode tok/s, the draft's speedup)."""
    configs = report["judged"]["configs"]
    return {s: (configs["baseline"]["shapes"][s]["median_tok_s"], configs["draft"]["shapes"][s]["speedup"])
            for s in report["judged"]["shapes"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", type=int, default=2, help="how many (1 host, 3 hosts) pairs to run")
    parser.add_argument("--keep", action="store_true", help="leave the containers running afterwards")
    args = parser.parse_args()
    molecule = str(Path(sys.executable).parent / "molecule")
    rows: list[dict] = []
    try:
        run([molecule, "destroy", "-s", "fleet"])
        run([molecule, "create", "-s", "fleet"])
        run([molecule, "converge", "-s", "fleet"])
        with tempfile.TemporaryDirectory(prefix="fleet-scaling-") as tmp:
            for i in range(args.pairs):
                for hosts in (HOSTS[:1], HOSTS):
                    rows.append(one_run(hosts, Path(tmp), f"{len(hosts)}-hosts-{i}"))
                    print(f"{len(hosts)} host(s), pair {i}: {rows[-1]['wall']:.1f} s", file=sys.stderr)
    finally:
        if not args.keep:
            run([molecule, "destroy", "-s", "fleet"])
    one = [r for r in rows if r["hosts"] == 1]
    three = [r for r in rows if r["hosts"] == 3]
    wall1 = statistics.median(r["wall"] for r in one)
    wall3 = statistics.median(r["wall"] for r in three)
    print("| hosts in the run | runs | wall s (each) | median wall s | ratio to 1 host | goal |")
    print("|---|---|---|---|---|---|")
    walls1 = ", ".join(f"{r['wall']:.1f}" for r in one)
    walls3 = ", ".join(f"{r['wall']:.1f}" for r in three)
    print(f"| 1 | {len(one)} | {walls1} | {wall1:.1f} | 1.00 | |")
    ratio = wall3 / wall1
    print(f"| 3 at once | {len(three)} | {walls3} | {wall3:.1f} "
          f"| {ratio:.2f} | within {GOAL}x: {'yes' if ratio <= GOAL else 'NO'} |")
    print()
    host = HOSTS[0]
    alone = [rates(r["reports"][host]) for r in one]
    crowded = [rates(r["reports"][host]) for r in three]
    print(f"How far {host}'s measured rates moved with two neighbours on the same two cores "
          "(medians over the runs):")
    print("| shape | baseline tok/s alone | with 2 neighbours | moved | draft speedup alone | with 2 neighbours |")
    print("|---|---|---|---|---|---|")
    for shape in alone[0]:
        b1 = statistics.median(a[shape][0] for a in alone)
        b3 = statistics.median(c[shape][0] for c in crowded)
        s1 = statistics.median(a[shape][1] for a in alone)
        s3 = statistics.median(c[shape][1] for c in crowded)
        print(f"| {shape} | {b1:.0f} | {b3:.0f} | {100 * (b3 / b1 - 1):+.0f} % | {s1:.2f}x | {s3:.2f}x |")
    others = {h: [statistics.median(v[0] for v in rates(r["reports"][h]).values()) for r in three] for h in HOSTS}
    print()
    print("Baseline tok/s per host in the 3-host runs (median over shapes): " + "; ".join(
        f"{h}: {', '.join(f'{x:.0f}' for x in xs)}" for h, xs in others.items()))


if __name__ == "__main__":
    main()
