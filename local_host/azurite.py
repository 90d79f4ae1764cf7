"""An embedded Azurite (the Azure Storage emulator, from npm), started on free loopback ports and stopped by PID."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

PROJECT = Path(__file__).resolve().parent.parent
DEFAULT_BINARY = PROJECT / ".tools" / "node_modules" / ".bin" / "azurite"
ACCOUNT = "devstoreaccount1"
# Azurite's well-known development key (public; documented by Microsoft).
KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def connection_string(blob: int, queue: int, table: int) -> str:
    base = "http://127.0.0.1"
    return (f"DefaultEndpointsProtocol=http;AccountName={ACCOUNT};AccountKey={KEY};"
            f"BlobEndpoint={base}:{blob}/{ACCOUNT};QueueEndpoint={base}:{queue}/{ACCOUNT};"
            f"TableEndpoint={base}:{table}/{ACCOUNT};")


def _listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.2)
        return s.connect_ex(("127.0.0.1", port)) == 0


@dataclass
class Azurite:
    process: subprocess.Popen[bytes]
    blob_port: int
    queue_port: int
    table_port: int
    log_path: Path | None

    @property
    def connection_string(self) -> str:
        return connection_string(self.blob_port, self.queue_port, self.table_port)

    @property
    def pid(self) -> int:
        return self.process.pid

    def stop(self, timeout: float = 10) -> None:
        """Stop Azurite (and only it: signalled by its own PID, or its process group when it leads one)."""
        if self.process.poll() is not None:
            return
        try:
            os.killpg(self.process.pid, signal.SIGTERM)
        except (ProcessLookupError, PermissionError):
            self.process.terminate()
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout)


def find_binary() -> str:
    configured = os.environ.get("QUEUE_AZURITE_BIN")
    if configured:
        return configured
    if DEFAULT_BINARY.exists():
        return str(DEFAULT_BINARY)
    found = shutil.which("azurite")
    if found:
        return found
    raise FileNotFoundError(
        f"Azurite not found at {DEFAULT_BINARY}: run `make setup` (it installs azurite@3.35.0 from npm)")


def start(data_dir: Path | None, *, in_memory: bool = False, attempts: int = 5,
          startup_timeout: float = 30) -> Azurite:
    """Start Azurite on free loopback ports; data in `data_dir` (or in memory). Retries if a port was taken."""
    binary = find_binary()
    last_error = ""
    for _ in range(attempts):
        ports = free_port(), free_port(), free_port()
        if len(set(ports)) < 3:
            continue
        args = [binary, "--skipApiVersionCheck", "--loose", "--disableTelemetry",
                "--blobHost", "127.0.0.1", "--blobPort", str(ports[0]),
                "--queueHost", "127.0.0.1", "--queuePort", str(ports[1]),
                "--tableHost", "127.0.0.1", "--tablePort", str(ports[2])]
        log_path = None
        if in_memory:
            args.append("--inMemoryPersistence")
        if data_dir is not None:
            data_dir.mkdir(parents=True, exist_ok=True)
            log_path = data_dir / "azurite.log"
            if not in_memory:
                args += ["--location", str(data_dir)]
        out = open(log_path, "ab") if log_path else subprocess.DEVNULL  # noqa: SIM115 - owned by the child
        process = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                   start_new_session=True)
        azurite = Azurite(process, *ports, log_path)
        give_up = time.monotonic() + startup_timeout
        while time.monotonic() < give_up:
            if process.poll() is not None:
                last_error = f"Azurite exited with code {process.returncode}"
                break
            if all(_listening(p) for p in ports):
                return azurite
            time.sleep(0.1)
        else:
            last_error = f"Azurite did not listen within {startup_timeout} s"
        azurite.stop()
    raise RuntimeError(f"could not start Azurite: {last_error}"
                       + (f" (see {data_dir / 'azurite.log'})" if data_dir else ""))
