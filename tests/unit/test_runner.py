"""The reference worker's stop signals: handled outside the signal handler, so a lock held by the main thread when
the signal arrives cannot hang the worker."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

PROJECT = Path(__file__).resolve().parents[2]

# The main thread holds the worker's output lock (as it does while printing "claimed") when SIGTERM arrives.
SCRIPT = textwrap.dedent("""
    import os, signal, time
    from pathlib import Path
    from worker.runner import Worker, install_signal_handlers
    from worker.task_run import Options

    worker = Worker(Options(root_url="http://127.0.0.1:9", credentials={}, task_queue_id="p/t",
                            worker_group="g", worker_id="w", work_dir=Path("unused")))
    install_signal_handlers(worker)
    with worker.out._lock:
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.3)
    print("stopping set:", worker.stopping.wait(10), flush=True)
""")


def test_a_stop_signal_while_the_main_thread_holds_the_output_lock_stops_the_worker() -> None:
    finished = subprocess.run([sys.executable, "-c", SCRIPT], cwd=PROJECT, capture_output=True, text=True, timeout=20)
    assert finished.returncode == 0, finished.stderr
    assert "stopping set: True" in finished.stdout
    assert "stopping: running tasks are stopped" in finished.stdout
