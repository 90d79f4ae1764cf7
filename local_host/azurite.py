"""An embedded Azurite (the Azure Storage emulator, from npm), started on free loopback ports and stopped by PID."""

from __future__ import annotations

import base64
import contextlib
import os
import secrets
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from azure.storage.blob import BlobServiceClient, CorsRule

PROJECT = Path(__file__).resolve().parent.parent
DEFAULT_BIN_DIR = PROJECT / ".tools" / "node_modules" / ".bin"
ACCOUNT = "devstoreaccount1"
# Azurite's well-known development key (public; documented by Microsoft): anyone on the machine could use it to
# write the queue's tables (its Clients included), so the embedded Azurite is started with a key of its own
# (AZURITE_ACCOUNTS) unless a caller asks for this one.
DEVELOPMENT_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="


def generate_key() -> str:
    """A new account key, as Azure's are: 64 random bytes, base64."""
    return base64.b64encode(secrets.token_bytes(64)).decode()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def connection_string(blob: int, queue: int, table: int, key: str, scheme: str = "http", account: str = ACCOUNT) -> str:
    base = f"{scheme}://127.0.0.1"
    return (
        f"DefaultEndpointsProtocol={scheme};AccountName={account};AccountKey={key};"
        f"BlobEndpoint={base}:{blob}/{account};QueueEndpoint={base}:{queue}/{account};"
        f"TableEndpoint={base}:{table}/{account};"
    )


def _listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.2)
        return s.connect_ex(("127.0.0.1", port)) == 0


SERVICES = ("blob", "queue", "table")


@dataclass
class Azurite:
    """Azurite as one process per service (azurite-blob, -queue, -table): each is a single-threaded node
    process, so apart they use more than one core."""

    processes: dict[str, subprocess.Popen[bytes]]
    ports: dict[str, int]
    log_path: Path | None
    key: str
    scheme: str = "http"
    accounts: int = 1  # storage accounts it serves: devstoreaccount1, then shard1 ... (same key)

    @property
    def blob_port(self) -> int:
        return self.ports["blob"]

    @property
    def queue_port(self) -> int:
        return self.ports["queue"]

    @property
    def table_port(self) -> int:
        return self.ports["table"]

    @property
    def connection_string(self) -> str:
        return connection_string(self.blob_port, self.queue_port, self.table_port, self.key, self.scheme)

    def account_connection_string(self, account: int) -> str:
        """The connection string of one of its accounts: 0 is devstoreaccount1, n is `shard<n>` (a sharded
        queue's further accounts, QUEUE_STORAGE_<n>, in one Azurite for tests)."""
        if not 0 <= account < self.accounts:
            raise ValueError(f"this Azurite serves {self.accounts} accounts")
        return connection_string(
            self.blob_port,
            self.queue_port,
            self.table_port,
            self.key,
            self.scheme,
            ACCOUNT if account == 0 else f"shard{account}",
        )

    def endpoint(self, service: str) -> str:
        """The service's endpoint, path-style: `<scheme>://127.0.0.1:<port>/devstoreaccount1`."""
        return f"{self.scheme}://127.0.0.1:{self.ports[service]}/{ACCOUNT}"

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.processes.values()]

    def stop(self, timeout: float = 10) -> None:
        """Stop every Azurite process, each by its own PID (it leads its own process group). SIGINT first:
        azurite-table saves its data on SIGINT only (it has no SIGTERM handler)."""
        for process in self.processes.values():
            if process.poll() is None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(process.pid, signal.SIGINT)
        for process in self.processes.values():
            try:
                process.wait(timeout)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout)


def find_binary(name: str) -> str:
    configured = os.environ.get("QUEUE_AZURITE_BIN_DIR")
    if configured:
        return str(Path(configured) / name)
    local = DEFAULT_BIN_DIR / name
    if local.exists():
        return str(local)
    found = shutil.which(name)
    if found:
        return found
    raise FileNotFoundError(
        f"{name} not found in {DEFAULT_BIN_DIR}: run `make setup` (it installs azurite@3.37.0 from npm)"
    )


def allow_browser_reads(azurite: Azurite) -> None:
    """The blob service's CORS rule, as infra/app/storage.bicep sets it in Azure: a page of any origin may GET
    the signed URLs the queue redirects artifact downloads to (the Taskcluster UI, the task inspector)."""
    client = BlobServiceClient.from_connection_string(azurite.connection_string)
    with client:
        client.set_service_properties(
            cors=[
                CorsRule(["*"], ["GET", "HEAD"], allowed_headers=["*"], exposed_headers=["*"], max_age_in_seconds=3600)
            ]
        )


@dataclass(frozen=True)
class _Launch:
    """How Azurite's processes are started: one per service (`split`) or one for all."""

    data_dir: Path | None
    in_memory: bool
    tls: tuple[Path, Path] | None
    oauth: bool
    split: bool
    access_log: bool
    environment: dict[str, str]

    def args(self, services: list[str], ports: dict[str, int]) -> list[str]:
        binary = find_binary(f"azurite-{services[0]}" if self.split else "azurite")
        args = [binary, "--skipApiVersionCheck", "--loose", "--disableTelemetry"]
        if not self.access_log:
            args.append("--silent")
        for service in services:
            args += [f"--{service}Host", "127.0.0.1", f"--{service}Port", str(ports[service])]
        if self.tls is not None:
            args += ["--cert", str(self.tls[0]), "--key", str(self.tls[1])]
        if self.oauth:
            args += ["--oauth", "basic"]
        if self.in_memory:
            args.append("--inMemoryPersistence")
        elif self.data_dir is not None:
            args += ["--location", str(self.data_dir)]
        return args

    def spawn(self, ports: dict[str, int]) -> tuple[dict[str, subprocess.Popen[bytes]], Path | None]:
        """The processes, started on `ports`, and the log they append to (with a data folder)."""
        log_path = None
        if self.data_dir is not None:
            self.data_dir.mkdir(parents=True, exist_ok=True)
            self.data_dir.chmod(0o700)  # private artifacts and the Clients table are in there
            log_path = self.data_dir / "azurite.log"
        processes: dict[str, subprocess.Popen[bytes]] = {}
        for services in [[s] for s in SERVICES] if self.split else [list(SERVICES)]:
            out = open(log_path, "ab") if log_path else subprocess.DEVNULL  # noqa: SIM115 - closed once handed over
            if log_path:
                log_path.chmod(0o600)
            processes["+".join(services)] = subprocess.Popen(
                self.args(services, ports),
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                env=self.environment,
                umask=0o077,
            )  # what it writes is readable by its owner only
            if not isinstance(out, int):
                out.close()  # the child has its own copy of the file
        return processes, log_path


def _wait_listening(processes: dict[str, subprocess.Popen[bytes]], ports: dict[str, int], timeout: float) -> str:
    """Wait until every port listens: "" then, else why not (a process exited, or the time ran out)."""
    give_up = time.monotonic() + timeout
    while time.monotonic() < give_up:
        exited = [s for s, p in processes.items() if p.poll() is not None]
        if exited:
            return f"azurite ({exited[0]}) exited with code {processes[exited[0]].returncode}"
        if all(_listening(p) for p in ports.values()):
            return ""
        time.sleep(0.1)
    return f"Azurite did not listen within {timeout} s"


def start(
    data_dir: Path | None,
    *,
    in_memory: bool = False,
    attempts: int = 5,
    startup_timeout: float = 30,
    ports: dict[str, int] | None = None,
    tls: tuple[Path, Path] | None = None,
    oauth: bool = False,
    key: str | None = None,
    avoid: frozenset[int] = frozenset(),
    accounts: int = 1,
) -> Azurite:
    """Start Azurite's services on free loopback ports (or on `ports`, to restart one on its data); data in
    `data_dir` (or in memory), which only its owner may read. Retries if a port was taken meanwhile. `key`: the
    account key (default: a new one; DEVELOPMENT_KEY only where a caller asks for it). `tls` (certificate, key:
    PEM files) serves HTTPS; `oauth` also accepts Entra ID bearer tokens (Azurite checks their claims, not their
    signature), as Azure does for a managed identity; it requires `tls`. `accounts`: serve that many storage
    accounts (account_connection_string)."""
    if oauth and tls is None:
        raise ValueError("Azurite accepts OAuth over HTTPS only: give tls=(certificate, key)")
    key = key or generate_key()
    names = [ACCOUNT, *(f"shard{n}" for n in range(1, accounts))]
    environment = {**os.environ, "AZURITE_ACCOUNTS": ";".join(f"{name}:{key}" for name in names)}
    last_error = ""
    launch = _Launch(
        data_dir,
        in_memory,
        tls,
        oauth,
        # One process per service by default: each is single-threaded, and with the lean storage client the host
        # no longer needs the second core (docs/performance.md: lifecycle 23-25 tasks/s split, 12-16 in one).
        split=os.environ.get("QUEUE_AZURITE_SPLIT", "1") == "1",
        access_log=os.environ.get("QUEUE_AZURITE_ACCESS_LOG", "0") == "1",
        environment=environment,
    )
    for _ in range(attempts):
        # Given ports are tried again each time (a restart on its data); free ones are chosen afresh.
        chosen = dict(ports) if ports else {service: free_port() for service in SERVICES}
        # `avoid`: ports someone means to bind next (the host's), free now, so free_port may offer them.
        if len(set(chosen.values())) < len(SERVICES) or set(chosen.values()) & avoid:
            last_error = f"ports {sorted(chosen.values())} repeat, or take one of {sorted(avoid)}"
            continue
        processes, log_path = launch.spawn(chosen)
        azurite = Azurite(processes, chosen, log_path, key, "https" if tls else "http", accounts)
        last_error = _wait_listening(processes, chosen, startup_timeout)
        if not last_error:
            if tls is None:
                allow_browser_reads(azurite)
            return azurite
        azurite.stop()
    raise RuntimeError(
        f"could not start Azurite: {last_error}" + (f" (see {data_dir / 'azurite.log'})" if data_dir else "")
    )
