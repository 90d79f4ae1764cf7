"""The scale benchmark: the soak's task graph on the scale model of Azure's storage targets, unsharded and sharded,
one after the other in one run, with the same hosts and workers; it prints each configuration's rate, the
instance-seconds Azure's target scaler would have voted its queue triggers on Flex (local_host/scaler.py, as the
soak samples them) and the ratio between the rates.

    .venv/bin/python -m bench.scale                      # 800 tasks, factor 100, one round (~6 minutes)
    .venv/bin/python -m bench.scale --rounds 2 --events  # alternated twice, the hosts publishing their events

Each configuration is a `bench.soak` run (nothing killed, no claim abandoned): its Azurites (one per storage
account), a scale-model proxy in front of each (local_host/limits.py: Azure's per-account, per-queue and
per-partition targets divided by `--factor`, 503 ServerBusy beyond), `--hosts` local hosts (as Functions
instances) and `--workers` claimWork workers; its audit must show nothing lost and nothing doubled, and its clients
no 5xx (throttling is backpressure inside the storage layer, not an error). The soak prints, per configuration,
what each scope refused and the ceiling each of the busiest scopes sets (what it admitted per task against its
target): the lowest is the rate the model predicts. Not part of the test run.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

PROJECT = Path(__file__).resolve().parent.parent

CONFIGURATIONS = {
    "unsharded": [],
    "sharded": ["--accounts", "4", "--check-shards", "8", "--pending-shards", "4"],
}
SUMMARY = re.compile(
    r"^soak: tasks (?P<tasks>\d+).*\(5xx answers (?P<server_errors>\d+)\), lost (?P<lost>\d+), "
    r"doubled claims (?P<doubled>\d+), time (?P<seconds>\d+) s, (?P<rate>[\d.]+) tasks/s"
)
REFUSED = re.compile(r"over the model's targets \(factor [\d.]+\): (?P<refused>\d+) refused of (?P<requests>\d+)")
VOTES = re.compile(r"^scale votes .*: instance-seconds (?P<instance_seconds>\d+) over \d+ s .*; peak (?P<peak>\d+)")
CEILING = re.compile(
    r"^  (?P<scope>.+): (?P<per_task>[\d.]+) per task against [\d.]+/s -> (?P<ceiling>[\d.]+) "
    r"tasks/s"
)


@dataclass
class Result:
    name: str
    exit: int
    rate: float = 0.0
    seconds: float = 0.0
    server_errors: int = 0
    lost: int = 0
    doubled: int = 0
    requests: int = 0
    refused: int = 0
    instance_seconds: int = 0  # what Azure's scaler would have voted the queue triggers (local_host/scaler.py)
    peak_instances: int = 0
    ceilings: list[tuple[float, str]] = field(default_factory=list)

    @property
    def clean(self) -> bool:
        return not (self.exit or self.server_errors or self.lost or self.doubled)


def run(name: str, args: argparse.Namespace) -> Result:
    command = [
        sys.executable,
        "-m",
        "bench.soak",
        "--tasks",
        str(args.tasks),
        "--hosts",
        str(args.hosts),
        "--workers",
        str(args.workers),
        "--factor",
        str(args.factor),
        "--kill-every",
        "0",
        "--azurite-every",
        "0",
        "--abandon",
        "0",
        *(["--events"] if args.events else []),
        *CONFIGURATIONS[name],
    ]
    print(f"scale: {name}: {' '.join(command[2:])}", flush=True)
    done = subprocess.run(command, cwd=PROJECT, capture_output=True, text=True, timeout=args.timeout)
    result, finished = Result(name, done.returncode), False
    for line in [*done.stdout.splitlines(), *done.stderr.splitlines()]:
        if (summary := SUMMARY.match(line)) is not None:
            finished = True
            result.rate, result.seconds = float(summary["rate"]), float(summary["seconds"])
            result.server_errors, result.lost = int(summary["server_errors"]), int(summary["lost"])
            result.doubled = int(summary["doubled"])
            print(f"  {line}", flush=True)
        elif (refused := REFUSED.search(line)) is not None:
            result.refused += int(refused["refused"])
            result.requests += int(refused["requests"])
        elif (votes := VOTES.match(line)) is not None:
            result.instance_seconds, result.peak_instances = int(votes["instance_seconds"]), int(votes["peak"])
        elif (ceiling := CEILING.match(line)) is not None:
            result.ceilings.append((float(ceiling["ceiling"]), ceiling["scope"]))
    if not finished:
        print(done.stdout[-3000:], done.stderr[-3000:], sep="\n", file=sys.stderr)
        raise SystemExit(f"scale: the {name} soak did not finish (exit {done.returncode})")
    lowest = sorted(result.ceilings)[:3]
    print(
        f"  storage requests {result.requests}, refused (503 ServerBusy) {result.refused}; the model's lowest "
        "ceilings: " + ", ".join(f"{scope} {c:.1f} tasks/s" for c, scope in lowest),
        flush=True,
    )
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", type=int, default=800)
    parser.add_argument("--hosts", type=int, default=2)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--factor", type=float, default=100)
    parser.add_argument("--rounds", type=int, default=1, help="times to run the two, alternating")
    parser.add_argument("--events", action="store_true", help="the hosts publish to the local RabbitMQ")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds a configuration may take")
    args = parser.parse_args()
    results: dict[str, list[Result]] = {name: [] for name in CONFIGURATIONS}
    for _ in range(args.rounds):
        for name in CONFIGURATIONS:
            results[name].append(run(name, args))
    print(
        "scale: configuration, tasks/s per round, the queue triggers' instance-seconds (peak) per round on Flex, "
        "clients' 5xx, lost, doubled",
        flush=True,
    )
    for name, runs in results.items():
        print(
            f"  {name}: {', '.join(f'{r.rate:.1f}' for r in runs)}; "
            f"instance-seconds {', '.join(f'{r.instance_seconds} ({r.peak_instances})' for r in runs)}; "
            f"5xx {sum(r.server_errors for r in runs)}, lost {sum(r.lost for r in runs)}, "
            f"doubled {sum(r.doubled for r in runs)}",
            flush=True,
        )
    base = sum(r.rate for r in results["unsharded"]) / args.rounds
    sharded = sum(r.rate for r in results["sharded"]) / args.rounds
    print(f"scale: sharded / unsharded = {sharded / base:.1f}x ({sharded:.1f} against {base:.1f} tasks/s)", flush=True)
    failed = not all(r.clean for runs in results.values() for r in runs)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
