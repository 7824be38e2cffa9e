"""A small Kubernetes API server for tests: the real REST protocol over HTTP, so the official
`kubernetes` client runs unmodified against it.

Covers what Baton uses: pods (create, get, list with label selectors, delete, watch), deployments
(get) and coordination.k8s.io/v1 leases (get, create, replace with resourceVersion conflicts → 409).
Pods are created `Pending`; tests move them along with `set_phase`.
"""

from __future__ import annotations

import json
import re
import threading
import time
import uuid
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

from kubernetes import client

CORE = re.compile(r"^/api/v1/namespaces/(?P<ns>[^/]+)/(?P<kind>pods)(?:/(?P<name>[^/]+))?$")
GROUP = re.compile(
    r"^/apis/(?P<group>apps|coordination\.k8s\.io)/v1/namespaces/(?P<ns>[^/]+)/(?P<kind>deployments|leases)"
    r"(?:/(?P<name>[^/]+))?$"
)
KINDS = {"pods": ("v1", "Pod"), "deployments": ("apps/v1", "Deployment"), "leases": ("coordination.k8s.io/v1", "Lease")}


def status(code: int, reason: str, message: str) -> dict[str, Any]:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }


def matches(labels: dict[str, str], selector: str | None) -> bool:
    if not selector:
        return True
    for term in selector.split(","):
        key, _, value = term.partition("=")
        if labels.get(key.strip()) != value.strip():
            return False
    return True


class FakeKubernetes:
    def __init__(self) -> None:
        self.objects: dict[tuple[str, str, str], dict[str, Any]] = {}
        self.events: list[tuple[int, str, str, dict[str, Any]]] = []  # (rv, kind, type, object)
        self.version = 0
        self.changed = threading.Condition()
        self.requests: list[tuple[str, str]] = []
        handler = self._handler()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def api_client(self) -> client.ApiClient:
        configuration = client.Configuration()
        configuration.host = self.url
        return client.ApiClient(configuration)

    def start(self) -> FakeKubernetes:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    # -- state ------------------------------------------------------------------------------------
    def _record(self, kind: str, event: str, obj: dict[str, Any]) -> None:
        with self.changed:
            self.version += 1
            obj["metadata"]["resourceVersion"] = str(self.version)
            self.events.append((self.version, kind, event, json.loads(json.dumps(obj))))
            self.changed.notify_all()

    def create(self, kind: str, namespace: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        name = body.get("metadata", {}).get("name")
        if not name:
            return 422, status(422, "Invalid", "metadata.name: Required value")
        key = (kind, namespace, name)
        with self.changed:
            if key in self.objects:
                return 409, status(409, "AlreadyExists", f'{kind} "{name}" already exists')
            api_version, kind_name = KINDS[kind]
            obj = {**body, "apiVersion": api_version, "kind": kind_name}
            obj["metadata"] = {
                **body["metadata"],
                "namespace": namespace,
                "uid": str(uuid.uuid4()),
                "creationTimestamp": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            }
            if kind == "pods":
                obj["status"] = {"phase": "Pending"}
            self.objects[key] = obj
            self._record(kind, "ADDED", obj)
            return 201, obj

    def replace(self, kind: str, namespace: str, name: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        key = (kind, namespace, name)
        with self.changed:
            current = self.objects.get(key)
            if current is None:
                return 404, status(404, "NotFound", f'{kind} "{name}" not found')
            sent = body.get("metadata", {}).get("resourceVersion")
            if sent is not None and sent != current["metadata"]["resourceVersion"]:
                return 409, status(
                    409,
                    "Conflict",
                    f'Operation cannot be fulfilled on {kind} "{name}": the object '
                    "has been modified; please apply your changes to the latest version",
                )
            obj = {**body, "apiVersion": current["apiVersion"], "kind": current["kind"]}
            obj["metadata"] = {
                **body.get("metadata", {}),
                "namespace": namespace,
                "name": name,
                "uid": current["metadata"]["uid"],
                "creationTimestamp": current["metadata"]["creationTimestamp"],
            }
            self.objects[key] = obj
            self._record(kind, "MODIFIED", obj)
            return 200, obj

    def delete(self, kind: str, namespace: str, name: str) -> tuple[int, dict[str, Any]]:
        with self.changed:
            obj = self.objects.pop((kind, namespace, name), None)
            if obj is None:
                return 404, status(404, "NotFound", f'{kind} "{name}" not found')
            self._record(kind, "DELETED", obj)
            return 200, obj

    def listing(self, kind: str, namespace: str, selector: str | None) -> dict[str, Any]:
        api_version, kind_name = KINDS[kind]
        with self.changed:
            items = [
                json.loads(json.dumps(obj))
                for (k, ns, _), obj in sorted(self.objects.items())
                if k == kind and ns == namespace and matches(obj["metadata"].get("labels") or {}, selector)
            ]
            version = str(self.version)
        return {
            "apiVersion": api_version,
            "kind": f"{kind_name}List",
            "metadata": {"resourceVersion": version},
            "items": items,
        }

    # -- helpers for tests -------------------------------------------------------------------------
    def pods(self, namespace: str = "baton") -> list[dict[str, Any]]:
        with self.changed:
            return [obj for (kind, ns, _), obj in self.objects.items() if kind == "pods" and ns == namespace]

    def set_phase(self, name: str, phase: str, namespace: str = "baton") -> None:
        with self.changed:
            obj = self.objects[("pods", namespace, name)]
            obj["status"] = {"phase": phase}
            self._record("pods", "MODIFIED", obj)

    def add_deployment(self, name: str, namespace: str = "baton") -> dict[str, Any]:
        labels = {"app.kubernetes.io/name": "baton", "app.kubernetes.io/component": "director"}
        spec = {
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": {"containers": [{"name": "director", "image": "x"}]}},
        }
        return self.create("deployments", namespace, {"metadata": {"name": name}, "spec": spec})[1]

    # -- HTTP ----------------------------------------------------------------------------------------
    def _handler(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                return None

            def _send(self, code: int, body: dict[str, Any]) -> None:
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _route(self) -> tuple[str, str, str | None, dict[str, list[str]]] | None:
                parsed = urlparse(self.path)
                match = CORE.match(parsed.path) or GROUP.match(parsed.path)
                if match is None:
                    return None
                return match["kind"], match["ns"], match["name"], parse_qs(parsed.query)

            def _body(self) -> dict[str, Any]:
                length = int(self.headers.get("Content-Length") or 0)
                return json.loads(self.rfile.read(length) or b"{}") if length else {}

            def do_GET(self) -> None:
                route = self._route()
                fake.requests.append(("GET", self.path))
                if route is None:
                    return self._send(404, status(404, "NotFound", self.path))
                kind, namespace, name, query = route
                if name is not None:
                    obj = fake.objects.get((kind, namespace, name))
                    return self._send(200, obj) if obj else self._send(404, status(404, "NotFound", name))
                selector = query.get("labelSelector", [None])[0]
                if query.get("watch", ["false"])[0] in ("true", "1"):
                    return self._watch(kind, namespace, selector, query)
                return self._send(200, fake.listing(kind, namespace, selector))

            def _watch(self, kind: str, namespace: str, selector: str | None, query: dict[str, list[str]]) -> None:
                since = int(query.get("resourceVersion", ["0"])[0] or 0)
                deadline = time.monotonic() + float(query.get("timeoutSeconds", ["5"])[0])
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                while time.monotonic() < deadline:
                    with fake.changed:
                        pending = [e for e in fake.events if e[0] > since and e[1] == kind]
                        if not pending:
                            fake.changed.wait(max(0.0, min(0.2, deadline - time.monotonic())))
                            continue
                    for version, _, event_type, obj in pending:
                        since = version
                        if obj["metadata"].get("namespace") != namespace:
                            continue
                        if not matches(obj["metadata"].get("labels") or {}, selector):
                            continue
                        line = json.dumps({"type": event_type, "object": obj}).encode() + b"\n"
                        self.wfile.write(f"{len(line):x}\r\n".encode() + line + b"\r\n")
                        self.wfile.flush()
                self.wfile.write(b"0\r\n\r\n")
                self.close_connection = True

            def do_POST(self) -> None:
                route = self._route()
                fake.requests.append(("POST", self.path))
                if route is None or route[2] is not None:
                    return self._send(405, status(405, "MethodNotAllowed", self.path))
                self._send(*fake.create(route[0], route[1], self._body()))

            def do_PUT(self) -> None:
                route = self._route()
                fake.requests.append(("PUT", self.path))
                if route is None or route[2] is None:
                    return self._send(405, status(405, "MethodNotAllowed", self.path))
                self._send(*fake.replace(route[0], route[1], route[2], self._body()))

            def do_DELETE(self) -> None:
                route = self._route()
                fake.requests.append(("DELETE", self.path))
                if route is None or route[2] is None:
                    return self._send(405, status(405, "MethodNotAllowed", self.path))
                self._body()
                self._send(*fake.delete(route[0], route[1], route[2]))

        return Handler
