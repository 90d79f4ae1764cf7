"""What one authenticateHawk costs: the call every request of Taskcluster's other services (worker-manager, hooks,
secrets, ...) makes to this queue's Auth API. Per kind of caller: latency (p50 / p95, from `threads` callers at
once, as a busy service asks), the host's storage calls and CPU per call, with the caches warm (a client is trusted
for QUEUE_CLIENT_CACHE_SECONDS, roles and expansions are kept per process) and the first call of each kind cold.

    .venv/bin/python -m bench.authenticate [--calls 1000] [--threads 4]

Runs its own Azurite and local host (bench.lifecycle's `start_embedded`); the requests signed are for a service
behind the same rootUrl (`GET /api/secrets/v1/secret/<name>`), as the service would pass them on.
"""

from __future__ import annotations

import argparse
import datetime as dt
import threading
import time
import urllib.parse
from collections.abc import Callable
from typing import Any

import mohawk
import taskcluster

from bench.lifecycle import cpu_seconds, percentile, start_embedded, stop_all

SIGNED = "/api/secrets/v1/secret/project%2Fbench%2Ftoken"


def header(root_url: str, credentials: dict[str, Any], *, authorized: list[str] | None = None) -> dict[str, Any]:
    """An authenticateHawk request for a GET signed with `credentials` (a certificate and authorizedScopes in
    ext, as the official clients send them)."""
    parts = urllib.parse.urlsplit(root_url)
    options = {"rootUrl": root_url, "credentials": credentials}
    if authorized is not None:
        options["authorizedScopes"] = authorized
    ext = taskcluster.Secrets(options).makeHawkExt()  # what the official client puts in ext
    ext_text = taskcluster.utils.toStr(ext) if ext else None
    sender = mohawk.Sender(
        {"id": credentials["clientId"], "key": credentials["accessToken"], "algorithm": "sha256"},
        root_url + SIGNED,
        "GET",
        always_hash_content=False,
        ext=ext_text,
    )
    return {
        "method": "get",
        "resource": SIGNED,
        "host": parts.hostname,
        "port": parts.port or 80,
        "authorization": sender.request_header,
    }


def bewit_request(root_url: str, credentials: dict[str, Any]) -> dict[str, Any]:
    client = taskcluster.Secrets({"rootUrl": root_url, "credentials": credentials})
    url = client.buildSignedUrl("get", "project/bench/token", expiration=600)
    parts = urllib.parse.urlsplit(url)
    return {"method": "get", "resource": f"{parts.path}?{parts.query}", "host": parts.hostname, "port": parts.port}


def made_since(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    """Storage calls between two readings by operation, without the triggers' idle polling (receives) and the
    round-trip tally."""
    return {
        k: n - before.get(k, 0)
        for k, n in after.items()
        if n > before.get(k, 0) and k != "queue.receive" and not k.startswith("roundtrips")
    }


def measure(
    root_url: str, make: Callable[[], dict[str, Any]], calls: int, threads: int
) -> tuple[list[float], dict[str, int]]:
    """Latencies of `calls` authenticateHawk calls from `threads` callers, and the answers' statuses."""
    auth = taskcluster.Auth({"rootUrl": root_url, "maxRetries": 0})
    latencies: list[float] = []
    statuses: dict[str, int] = {}
    lock = threading.Lock()
    each = calls // threads

    def caller() -> None:
        for _ in range(each):
            request = make()
            started = time.perf_counter()
            answer = auth.authenticateHawk(request)
            elapsed = time.perf_counter() - started
            with lock:
                latencies.append(elapsed)
                statuses[answer["status"]] = statuses.get(answer["status"], 0) + 1

    workers = [threading.Thread(target=caller) for _ in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    return latencies, statuses


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=1000, help="authenticateHawk calls per kind of caller")
    parser.add_argument("--threads", type=int, default=4, help="callers at once")
    args = parser.parse_args()
    processes: list[Any] = []
    watched: dict[str, list[int]] = {}
    try:
        root_url, root, storage_calls = start_embedded(processes, watched)
        admin = taskcluster.Auth({"rootUrl": root_url, "credentials": root})
        expires = taskcluster.stringDate(taskcluster.fromNow("1 day"))
        admin.createRole("project:bench", {"description": "bench", "scopes": ["secrets:get:project/bench/*"]})
        made = admin.createClient(
            "bench/service-caller", {"expires": expires, "description": "bench", "scopes": ["assume:project:bench"]}
        )
        client = {"clientId": made["clientId"], "accessToken": made["accessToken"]}
        start = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=1)
        temporary = taskcluster.createTemporaryCredentials(
            client["clientId"],
            client["accessToken"],
            start,
            start + dt.timedelta(hours=2),
            ["secrets:get:project/bench/*"],
        )
        bad = {**client, "accessToken": "x" * 44}
        kinds: dict[str, Callable[[], dict[str, Any]]] = {
            "permanent client (a role)": lambda: header(root_url, client),
            "temporary credentials": lambda: header(root_url, temporary),
            "authorizedScopes": lambda: header(root_url, client, authorized=["secrets:get:project/bench/token"]),
            "bewit (signed URL)": lambda: bewit_request(root_url, client),
            "no credentials": lambda: {"method": "get", "resource": SIGNED, "host": "127.0.0.1", "port": 80},
            "bad mac": lambda: header(root_url, bad),
            "unknown client": lambda: header(root_url, {"clientId": "bench/nobody", "accessToken": "x" * 44}),
        }
        print(f"authenticateHawk, {args.calls} calls per kind from {args.threads} callers at once")
        for name, make in kinds.items():
            before_calls, before_cpu = storage_calls(), cpu_seconds(watched)["host"]
            cold, _ = measure(root_url, make, 1, 1)
            cold_calls = made_since(before_calls, storage_calls())
            before_calls, before_cpu = storage_calls(), cpu_seconds(watched)["host"]
            started = time.perf_counter()
            latencies, statuses = measure(root_url, make, args.calls, args.threads)
            wall = time.perf_counter() - started
            cpu = cpu_seconds(watched)["host"] - before_cpu
            warm_calls = made_since(before_calls, storage_calls())
            print(
                f"  {name}: {statuses}; p50 {percentile(latencies, 0.5) * 1000:.1f} ms, "
                f"p95 {percentile(latencies, 0.95) * 1000:.1f} ms ({len(latencies) / wall:.0f}/s); host CPU "
                f"{cpu / len(latencies) * 1000:.2f} ms a call; storage calls: {sum(warm_calls.values())} in "
                f"{len(latencies)} warm calls ({wall:.1f} s) {warm_calls or ''}, {sum(cold_calls.values())} on the "
                f"first ({cold[0] * 1000:.1f} ms)",
                flush=True,
            )
        return 0
    finally:
        stop_all(processes)


if __name__ == "__main__":
    raise SystemExit(main())
