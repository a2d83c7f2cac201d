"""A moto S3 server on loopback that records every request it answers, for tests that count requests.

Run as a script (``python tests/s3_requests.py PORT``): moto's own WSGI application behind a recorder that keeps
one line per request — S3 operation kind, object key, bytes sent — and serves them at ``/_requests`` (a
``DELETE`` there clears them). Counted at the server, requests from every process of a job (the driver, local
worker processes, dask workers) are seen alike, and nothing in zephyr is patched.

Kinds, as S3 bills them: ``GET`` (a whole or ranged object read), ``HEAD``, ``LIST``, ``PUT`` (an object or a
multipart part), ``COPY``, ``POST`` (multipart create or complete), ``DELETE``.
"""

from __future__ import annotations

import json
import sys
import threading
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import parse_qs, unquote


@dataclass(frozen=True)
class Request:
    kind: str
    key: str
    """``bucket/key``; for a LIST ``bucket/prefix``."""
    bytes_out: int
    """Body bytes the server sent (a GET's payload)."""
    bytes_in: int
    """Body bytes the client sent (a PUT's payload)."""


def kind_of(method: str, path: str, query: str, headers: dict[str, str]) -> str:
    """The S3 operation of a request, from its method, path and query."""
    has_key = "/" in path.strip("/")
    if method == "GET":
        return "GET" if has_key and "uploadId" not in query else "LIST"
    if method == "PUT" and "x-amz-copy-source" in headers:
        return "COPY"
    if method == "POST" and not has_key and "delete" in query:
        return "DELETE"  # DeleteObjects: several keys in one request
    return method


def count(requests: Iterable[Request], where=lambda key: True) -> Counter:
    """Requests by kind, of the keys ``where`` accepts."""
    return Counter(r.kind for r in requests if where(r.key))


def _serve(port: int) -> None:
    from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app
    from werkzeug.serving import run_simple

    moto = DomainDispatcherApplication(create_backend_app)
    seen: list[dict] = []
    lock = threading.Lock()

    def app(environ, start_response):
        path = unquote(environ.get("PATH_INFO", ""))
        if path == "/_requests":
            with lock:
                body = json.dumps(seen).encode()
                if environ["REQUEST_METHOD"] == "DELETE":
                    seen.clear()
            start_response("200 OK", [("Content-Type", "application/json")])
            return [body]
        headers = {k[5:].lower().replace("_", "-"): v for k, v in environ.items() if k.startswith("HTTP_")}
        kind = kind_of(environ["REQUEST_METHOD"], path, environ.get("QUERY_STRING", ""), headers)
        key = path.strip("/")
        if kind == "LIST":  # the prefix listed (moto's application rewrites the environment: read it first)
            key += "/" + parse_qs(environ.get("QUERY_STRING", "")).get("prefix", [""])[0]
        received = int(environ.get("HTTP_X_AMZ_DECODED_CONTENT_LENGTH") or environ.get("CONTENT_LENGTH") or 0)
        sent = 0
        chunks = []
        for chunk in moto(environ, start_response):
            sent += len(chunk)
            chunks.append(chunk)
        record = {
            "kind": kind,
            "key": key,
            "bytes_out": sent if environ["REQUEST_METHOD"] != "HEAD" else 0,
            "bytes_in": received,
        }
        if not path.startswith("/moto-api"):
            with lock:
                seen.append(record)
        return chunks

    run_simple("127.0.0.1", port, app, threaded=True, use_reloader=False)


def fetch(endpoint: str, *, clear: bool = False) -> list[Request]:
    """The requests the server at ``endpoint`` recorded (and, with ``clear``, forget them)."""
    import urllib.request

    request = urllib.request.Request(f"{endpoint}/_requests", method="DELETE" if clear else "GET")
    with urllib.request.urlopen(request, timeout=60) as response:
        return [Request(**r) for r in json.loads(response.read())]


if __name__ == "__main__":
    _serve(int(sys.argv[1]))
