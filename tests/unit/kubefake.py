"""A local Kubernetes API server for the node scripts of an exported lane (remote/capagent.py,
remote/capgate.py): Nodes it keeps, read with GET and changed with a JSON merge patch as the
API server applies one (RFC 7386: null removes a key, a list is replaced whole; a patch's
metadata.resourceVersion is a precondition, 409 when it is not the Node's), and the pods
of a namespace listed by node and label key. Every request is recorded; `races` makes as
many conditional patches meet another writer first (409), `deny` a message every patch is
refused with (403, as an admission policy refuses); pods None: listing them is refused
(403, as RBAC refuses). 127.0.0.1 only."""

from __future__ import annotations

import copy
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit


def merge(target, patch):
    """RFC 7386's merge of patch into target (a new value)."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge(result.get(key), value)
    return result


class FakeApi(ThreadingHTTPServer):
    """nodes: name -> Node object; pods: namespace -> Pod objects; patches: (path, headers,
    body) of each PATCH; requests: (method, path) of each."""

    def __init__(self, nodes=("gb10-3",)):
        self.nodes = {name: {"metadata": {"name": name, "resourceVersion": "1"}}
                      for name in nodes}
        self.pods: dict[str, list[dict]] | None = {}
        self.patches: list[tuple[str, dict, dict]] = []
        self.requests: list[tuple[str, str]] = []
        self.races = 0
        self.deny = ""
        self.lock = threading.Lock()
        api = self

        class Handler(BaseHTTPRequestHandler):
            def answer(handler, status, body):
                data = json.dumps(body).encode()
                handler.send_response(status)
                handler.send_header("Content-Type", "application/json")
                handler.send_header("Content-Length", str(len(data)))
                handler.end_headers()
                handler.wfile.write(data)

            def do_GET(handler):  # noqa: N802 (http.server's name)
                url = urlsplit(handler.path)
                parts = url.path.strip("/").split("/")
                with api.lock:
                    api.requests.append(("GET", handler.path))
                    if parts[:3] == ["api", "v1", "nodes"] and len(parts) == 4:
                        node = api.nodes.get(parts[3])
                        return handler.answer(200 if node else 404, node or {"code": 404})
                    if parts[:3] == ["api", "v1", "namespaces"] and parts[4:] == ["pods"]:
                        if api.pods is None:
                            return handler.answer(403, {"code": 403, "message": "forbidden"})
                        query = parse_qs(url.query)
                        node = query["fieldSelector"][0].removeprefix("spec.nodeName=")
                        key = query["labelSelector"][0]
                        items = [p for p in api.pods.get(parts[3], [])
                                 if p["spec"]["nodeName"] == node
                                 and key in p["metadata"].get("labels", {})]
                        return handler.answer(200, {"kind": "PodList", "items": items})
                handler.answer(404, {"code": 404})

            def do_PATCH(handler):  # noqa: N802
                body = json.loads(handler.rfile.read(int(handler.headers["Content-Length"])))
                name = handler.path.rsplit("/", 1)[-1]
                with api.lock:
                    api.requests.append(("PATCH", handler.path))
                    api.patches.append((handler.path, dict(handler.headers), body))
                    node = api.nodes.get(name)
                    if node is None:
                        return handler.answer(404, {"code": 404})
                    if api.deny:
                        return handler.answer(403, {"kind": "Status", "code": 403,
                                                    "message": api.deny})
                    wanted = body.get("metadata", {}).get("resourceVersion")
                    if wanted is not None and api.races:  # another writer got there first
                        api.races -= 1
                        meta = node["metadata"]
                        meta["resourceVersion"] = str(int(meta["resourceVersion"]) + 1)
                    if wanted is not None and wanted != node["metadata"]["resourceVersion"]:
                        return handler.answer(409, {"code": 409, "reason": "Conflict"})
                    version = str(int(node["metadata"]["resourceVersion"]) + 1)
                    node = merge(node, body)
                    node["metadata"]["resourceVersion"] = version
                    api.nodes[name] = node
                handler.answer(200, node)

            def log_message(handler, *args):
                pass

        super().__init__(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def node(self, name="gb10-3") -> dict:
        with self.lock:
            return copy.deepcopy(self.nodes[name])

    def labels(self, name="gb10-3") -> dict:
        return self.node(name)["metadata"].get("labels", {})

    def annotations(self, name="gb10-3") -> dict:
        return self.node(name)["metadata"].get("annotations", {})

    def taints(self, name="gb10-3") -> list:
        return self.node(name).get("spec", {}).get("taints", [])

    def edit(self, name, change) -> None:
        """change(node) in place, as another writer of the Node (a new resourceVersion)."""
        with self.lock:
            change(self.nodes[name])
            meta = self.nodes[name]["metadata"]
            meta["resourceVersion"] = str(int(meta["resourceVersion"]) + 1)


def engine_pod(node="gb10-3", phase="running", namespace="sparkrack") -> dict:
    """An engine pod on node: its engine container running, or waiting at its gate."""
    status = ({"containerStatuses": [{"name": "sglang", "state": {"running": {}}}]}
              if phase == "running" else
              {"initContainerStatuses": [{"name": "cap-gate", "state": {"running": {}}}],
               "containerStatuses": [{"name": "sglang", "state": {"waiting": {}}}]})
    return {"metadata": {"name": f"lane-0-{phase}", "namespace": namespace,
                         "labels": {"sparkrack.engine": "sglang"}},
            "spec": {"nodeName": node}, "status": status}
