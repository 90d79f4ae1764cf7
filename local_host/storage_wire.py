"""Azure Storage requests as the fault proxy (local_host/fault_proxy.py) reads and answers them on the wire: a request
read off a connection, the kind of operation it is (named as the storage adapters name theirs), Azure's error
body, and the connection reset that a dropped connection looks like to its client."""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import json
import socket
import struct
import urllib.parse
import uuid

HOP_BY_HOP = {
    "connection",
    "keep-alive",
    "transfer-encoding",
    "te",
    "trailer",
    "upgrade",
    "proxy-connection",
    "content-length",
    "host",
}
MAX_HEAD = 64 * 1024


def operation(service: str, method: str, path: str, query: dict[str, str], headers: dict[str, str]) -> str:
    """The kind of a storage request, as the adapters name theirs (shared/storage/retry.py's `operation`)."""
    parts = [p for p in urllib.parse.unquote(path).split("/") if p][1:]  # after the account
    if service == "table":
        if not parts or parts[0] == "Tables":
            return "table.create"
        if parts[0] == "$batch":
            return "table.batch"
        entity = "(" in parts[0] and not parts[0].endswith("()")
        if method == "GET":
            return "table.get" if entity else "table.query"
        if method == "POST":
            return "table.insert"
        if method == "PUT":
            return "table.replace" if "if-match" in headers else "table.upsert"
        return {"MERGE": "table.merge", "DELETE": "table.delete"}.get(method, f"table.{method.lower()}")
    if len(parts) == 1:
        return "queue.count" if query.get("comp") == "metadata" else "queue.create"
    if len(parts) == 2:
        return {"POST": "queue.put", "GET": "queue.receive", "DELETE": "queue.clear"}.get(method, "queue.other")
    return {"DELETE": "queue.delete", "PUT": "queue.update"}.get(method, "queue.other")


def error_body(service: str, code: str, message: str) -> tuple[bytes, str]:
    """Azure's error body for `code`: OData JSON from the table service, XML from the others."""
    detail = f"{message}\nRequestId:{uuid.uuid4()}\nTime:{dt.datetime.now(dt.UTC).isoformat()}"
    if service == "table":
        body = json.dumps({"odata.error": {"code": code, "message": {"lang": "en-US", "value": detail}}})
        return body.encode(), "application/json;odata=minimalmetadata;streaming=true;charset=utf-8"
    return (
        f'<?xml version="1.0" encoding="utf-8"?><Error><Code>{code}</Code><Message>{detail}</Message></Error>'
    ).encode(), "application/xml"


class Request:
    def __init__(self, method: str, target: str, headers: list[tuple[str, str]], body: bytes) -> None:
        self.method, self.target, self.headers, self.body = method, target, headers, body
        self.lower = {k.lower(): v for k, v in headers}
        split = urllib.parse.urlsplit(target)
        self.path = split.path
        self.query = dict(urllib.parse.parse_qsl(split.query, keep_blank_values=True))


async def read_request(reader: asyncio.StreamReader) -> Request | None:
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
        return None
    lines = head.decode("latin-1").split("\r\n")
    method, target, _ = lines[0].split(" ", 2)
    headers = [(k.strip(), v.strip()) for k, v in (line.split(":", 1) for line in lines[1:] if ":" in line)]
    lower = {k.lower(): v for k, v in headers}
    if lower.get("transfer-encoding", "").lower() == "chunked":
        body = b""
        while True:
            size = int((await reader.readline()).split(b";")[0].strip() or b"0", 16)
            if size == 0:
                await reader.readline()
                break
            body += await reader.readexactly(size)
            await reader.readline()
    else:
        body = await reader.readexactly(int(lower.get("content-length", "0") or 0))
    return Request(method, target, headers, body)


def reset(writer: asyncio.StreamWriter) -> None:
    """Close with a TCP reset (SO_LINGER 0), as a dropped connection looks to the client."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()
