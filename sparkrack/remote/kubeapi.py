"""The Kubernetes API as the node scripts of an exported lane use it (capagent.py and
capgate.py, composed before them): GET and merge-PATCH with the pod's service account, over
HTTPS to KUBERNETES_SERVICE_HOST with the account's token and CA; a plain http:// URL (the
unit tests' local server) needs no CA. The token is read again for every request: the
kubelet rotates it. Stdlib only, Python 3.7 or later.
"""

import json
import os
import ssl
import urllib.parse
import urllib.request

ACCOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"
CONFLICT = 409  # a merge patch's metadata.resourceVersion no longer the Node's


class Api:
    """Nodes and pods of the API server at url (empty: the in-cluster one)."""

    def __init__(self, url, account):
        url = url or "https://{}:{}".format(os.environ.get("KUBERNETES_SERVICE_HOST", ""),
                                        os.environ.get("KUBERNETES_SERVICE_PORT", "443"))
        self.url = url.rstrip("/")
        self.token_file = os.path.join(account, "token")
        self.context = (ssl.create_default_context(cafile=os.path.join(account, "ca.crt"))
                        if self.url.startswith("https:") else None)

    def call(self, method, path, query=None, body=None):
        """The answer's JSON; urllib's HTTPError (with .code) for a refusal."""
        with open(self.token_file) as handle:
            token = handle.read().strip()
        headers = {"Authorization": "Bearer " + token, "Accept": "application/json"}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/merge-patch+json"
        url = self.url + path + ("?" + urllib.parse.urlencode(query) if query else "")
        request = urllib.request.Request(url, data=data, method=method, headers=headers)
        with urllib.request.urlopen(request, timeout=30, context=self.context) as answer:
            return json.loads(answer.read() or b"{}")

    @staticmethod
    def said(error):
        """An exception as one line, with the API server's own message for a refusal (an
        admission policy's, RBAC's)."""
        try:
            message = json.loads(error.read() or b"{}").get("message", "")
        except Exception:  # not an HTTPError, or no JSON Status in its body
            message = ""
        return "{}{}".format(error, ": " + message if message else "")

    def node(self, name):
        return self.call("GET", "/api/v1/nodes/" + urllib.parse.quote(name))

    def patch_node(self, name, body):
        """A JSON merge patch (None removes a key; a list is replaced whole, RFC 7386)."""
        return self.call("PATCH", "/api/v1/nodes/" + urllib.parse.quote(name), body=body)

    def pods(self, namespace, node, selector):
        """The pods of namespace bound to node that match the label selector."""
        return self.call("GET", f"/api/v1/namespaces/{urllib.parse.quote(namespace)}/pods",
                         query={"fieldSelector": "spec.nodeName=" + node,
                                "labelSelector": selector}).get("items") or []
