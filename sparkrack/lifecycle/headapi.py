"""HTTP to the engines' endpoints on the nodes (health, models, one chat completion).

Every request goes to the address netguard vetted for the node, with a timeout.
"""

import json
import urllib.error
import urllib.request

from ..inventory import Node
from ..fleet.netguard import check_node


def url(node: Node, port: int, path: str) -> str:
    """The URL of an endpoint on a node, using the vetted address."""
    return f"http://{check_node(node)}:{port}{path}"


def get_status(node: Node, port: int, path: str, timeout: float = 2.0) -> int | None:
    """HTTP status of GET path on the node, or None when nothing answers."""
    try:
        with urllib.request.urlopen(url(node, port, path), timeout=timeout) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code
    except (urllib.error.URLError, OSError):
        return None


def chat_completion(node: Node, port: int, model: str, prompt: str, max_tokens: int = 16,
                    timeout: float = 60.0) -> dict:
    """One non-streamed OpenAI-compatible chat completion; returns the parsed JSON body."""
    body = json.dumps({"model": model, "max_tokens": max_tokens, "temperature": 0,
                       "messages": [{"role": "user", "content": prompt}]}).encode()
    request = urllib.request.Request(url(node, port, "/v1/chat/completions"), data=body,
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return json.loads(response.read())
