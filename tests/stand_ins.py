"""Stand-ins for services these machines cannot reach (Azure's managed-identity endpoint, Application Insights
ingestion): a loopback HTTP server answering JSON, started and stopped by the test that uses it."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

# (method, path with query, headers, body) -> (status, JSON answer)
Answer = Callable[[str, str, Any, bytes], tuple[int, Any]]


class JsonEndpoint:
    def __init__(self, answer: Answer) -> None:
        class Handler(BaseHTTPRequestHandler):
            def _handle(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0) or 0))
                status, value = answer(self.command, self.path, self.headers, body)
                payload = json.dumps(value).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            do_GET = do_POST = _handle

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
