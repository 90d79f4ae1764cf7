"""Maintained servers in front of the local host, measured against round four's probes (issue 83): the host alone,
behind HAProxy, and behind nginx (both from Debian, started here on loopback with the bounds each offers against
slow and greedy clients), each probed as `bench.hostile --round four` probes the host.

    .venv/bin/python -m bench.fronts [--fronts host,haproxy,nginx]

Prints, per front: the drip (500 sockets from one address sending a body byte every 0.8 s, reopened when closed,
and that address's pings), a slow head (500 sockets sending a head line every 0.8 s), the unread answers (16 clients
asking for a 19 MB page and reading nothing: the host's RSS, and the front's), and the open-proxy targets.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.hostile import Service, drip, open_proxy, rss_mb, unread
from bench.lifecycle import start_embedded, stop_all
from local_host.azurite import free_port

HAPROXY = """global
    maxconn 4000
defaults
    mode http
    timeout connect 5s
    timeout client 10s
    timeout server 240s
    timeout http-request 10s
    timeout http-keep-alive 10s
    option http-buffer-request
    option forwardfor
frontend queue
    bind 127.0.0.1:{port}
    stick-table type ip size 100k expire 60s store conn_cur
    tcp-request connection track-sc0 src
    tcp-request connection reject if {{ sc0_conn_cur gt 100 }}
    http-request set-header X-Forwarded-Proto http
    default_backend host
backend host
    server host 127.0.0.1:{upstream} maxconn 500
"""

NGINX = """worker_processes 1;
pid {dir}/nginx.pid;
error_log {dir}/error.log warn;
events {{ worker_connections 4000; }}
http {{
    access_log off;
    client_body_temp_path {dir}/body; proxy_temp_path {dir}/proxy;
    fastcgi_temp_path {dir}/fcgi; uwsgi_temp_path {dir}/uwsgi; scgi_temp_path {dir}/scgi;
    client_header_timeout 10s;
    client_body_timeout 10s;
    send_timeout 10s;
    keepalive_timeout 10s;
    client_max_body_size 5g;
    limit_conn_zone $binary_remote_addr zone=peers:10m;
    server {{
        listen 127.0.0.1:{port};
        limit_conn peers 100;
        location / {{
            proxy_pass http://127.0.0.1:{upstream};
            proxy_http_version 1.1;
            proxy_set_header Host $http_host;
            proxy_set_header X-Forwarded-For $remote_addr;
            proxy_set_header X-Forwarded-Proto http;
            proxy_read_timeout 240s;
        }}
    }}
}}
"""


def start_front(kind: str, upstream: int, stops: list[Any]) -> tuple[int, int]:
    """A front on a port of its own before the host's `upstream`: its port and pid."""
    port = free_port()
    folder = Path(tempfile.mkdtemp(prefix=f"bench-{kind}-"))
    folder.chmod(0o777)  # nginx's workers (nobody, when started as root) keep large request bodies there
    stops.append(lambda: shutil.rmtree(folder, ignore_errors=True))
    if kind == "haproxy":
        config = folder / "haproxy.cfg"
        config.write_text(HAPROXY.format(port=port, upstream=upstream))
        process = subprocess.Popen(["haproxy", "-f", str(config), "-db"], stdout=subprocess.DEVNULL)
    else:
        config = folder / "nginx.conf"
        config.write_text(NGINX.format(port=port, upstream=upstream, dir=folder))
        process = subprocess.Popen(["nginx", "-c", str(config), "-g", "daemon off;"], stdout=subprocess.DEVNULL)

    def stop() -> None:
        process.terminate()
        process.wait(10)

    stops.append(stop)
    time.sleep(1)
    return port, process.pid


def main() -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.fronts", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--fronts", default="host,haproxy,nginx")
    args = parser.parse_args()
    for kind in args.fronts.split(","):
        stops: list[Any] = []
        watched: dict[str, list[int]] = {}
        trap = Service()
        stops.append(trap.stop)
        os.environ["QUEUE_FORWARD_SERVICES"] = f"trap=http://127.0.0.1:{trap.port}"
        try:
            root_url, credentials, _ = start_embedded(stops, watched, in_memory=True)
            url = root_url
            if kind != "host":
                port, pid = start_front(kind, int(root_url.rsplit(":", 1)[1]), stops)
                url = f"http://127.0.0.1:{port}"
                print(f"== {kind} (pid {pid}) in front of the host", flush=True)
            else:
                print("== the host alone", flush=True)
            drip(url)
            drip(url, kind="head")
            unread(url, watched["host"][0], credentials["accessToken"])
            if kind != "host":
                print(f"   the front's RSS: {rss_mb(pid):.0f} MB", flush=True)
            open_proxy(url, trap)
        finally:
            stop_all(stops)
    return 0


if __name__ == "__main__":
    sys.exit(main())
