"""The Kubernetes node agent's script, run here as its pod runs it (the composed text of
remote/capagent.py, burn.sh beside it) against a fake nvidia-smi and a local API server:
the label it keeps for an ok, an uncapped and a latched GPU, the clock it locks, and its
judge, which is `invoke burn`'s."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from sparkrack.remote import capjudge, script, text

LABEL = "sparkrack.io/clock-cap-verified"
FAKE_SMI = r"""#!/bin/sh
# nvidia-smi for the agent: -lgc is logged; a query prints the GPU's reading (file gpu)
here=$(dirname "$0")
case "$1" in
  -lgc) echo "lgc $2" >> "$here/smi.log"; echo "GPU clocks set to \"(gpcclk $2)\""; exit 0 ;;
  --query-gpu=*) cat "$here/gpu"; exit 0 ;;
esac
exit 2
"""


class FakeApi(ThreadingHTTPServer):
    """An API server that records each PATCH of a Node (path, headers, body)."""

    def __init__(self):
        self.patches: list[tuple[str, dict, dict]] = []

        class Handler(BaseHTTPRequestHandler):
            def do_PATCH(handler):  # noqa: N802 (http.server's name)
                body = json.loads(handler.rfile.read(int(handler.headers["Content-Length"])))
                self.patches.append((handler.path, dict(handler.headers), body))
                handler.send_response(200)
                handler.send_header("Content-Type", "application/json")
                handler.end_headers()
                handler.wfile.write(b"{}")

            def log_message(handler, *args):
                pass

        super().__init__(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


@pytest.fixture
def pod(tmp_path):
    """The agent's files as the ConfigMap mounts them, a fake nvidia-smi on PATH, the
    service account's token, and the API server."""
    (tmp_path / "capagent.py").write_text(script("capagent"))
    (tmp_path / "burn.sh").write_text(text("burn"))
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "nvidia-smi").write_text(FAKE_SMI)
    (bin_dir / "nvidia-smi").chmod(0o755)
    account = tmp_path / "account"
    account.mkdir()
    (account / "token").write_text("the-token\n")
    api = FakeApi()
    yield tmp_path, api
    api.shutdown()


def run_agent(pod_dir: Path, api: FakeApi, reading: str) -> subprocess.CompletedProcess:
    (pod_dir / "bin" / "gpu").write_text(reading + "\n")
    env = {**os.environ, "PATH": f"{pod_dir / 'bin'}:{os.environ['PATH']}"}
    return subprocess.run(
        [sys.executable, str(pod_dir / "capagent.py"), "--node", "gb10-3", "--cap", "2200",
         "--label", LABEL, "--burn", str(pod_dir / "burn.sh"), "--once", "--api", api.url,
         "--account", str(pod_dir / "account"), "--", "sleep", "1.6"],
        capture_output=True, text=True, timeout=120, env=env)


@pytest.mark.parametrize("reading, verdict, label", [
    ("2150, 92.5, 100", "ok", "true"),
    ("2460, 118.0, 100", "UNCAPPED", None),
    ("720, 21.0, 100", "LATCHED", None),
    ("2100, 8.0, 3", "NO LOAD", None),  # the GPU never got busy: nothing proven
])
def test_the_label_follows_the_verdict(pod, reading, verdict, label):
    pod_dir, api = pod
    done = run_agent(pod_dir, api, reading)
    assert done.returncode == (0 if verdict == "ok" else 1), done.stdout + done.stderr
    first, last = api.patches[0], api.patches[-1]
    assert first[2]["metadata"]["labels"] == {LABEL: None}  # off first: nothing verified
    assert last[0] == "/api/v1/nodes/gb10-3"
    assert last[1]["Authorization"] == "Bearer the-token"
    assert last[1]["Content-Type"] == "application/merge-patch+json"
    assert last[2]["metadata"]["labels"] == {LABEL: label}
    said = last[2]["metadata"]["annotations"]["sparkrack.io/clock-cap-verdict"]
    assert said.startswith(f"{verdict}: ")
    assert (pod_dir / "bin" / "smi.log").read_text() == "lgc 0,2200\n"  # as the unit does
    assert f"gb10-3: {verdict}: " in done.stdout
    assert f"label {LABEL} {'set' if label else 'removed'}" in done.stdout
    assert ("delete this node's agent pod" in done.stdout) == (verdict == "UNCAPPED")


def test_an_api_server_out_of_reach_is_said_and_the_verdict_stands(pod):
    pod_dir, api = pod
    api.shutdown()
    api.server_close()
    done = run_agent(pod_dir, api, "2150, 92.5, 100")
    assert done.returncode == 0
    assert "the label could not be set" in done.stdout


@pytest.mark.parametrize("readings, verdict", [
    ([(2150, 92.5, 100), (2190, 95.0, 100)], capjudge.OK),
    ([(2150, 92.5, 100), (2410, 110.0, 100)], capjudge.UNCAPPED),
    ([(640, 20.0, 100), (700, 22.0, 100)], capjudge.LATCHED),
    ([(2150, 5.0, 2)], capjudge.NO_LOAD),
])
def test_the_agents_judge_is_invoke_burns(readings, verdict):
    """The composed script's judge and safety/burn.py's are one function's text."""
    from sparkrack.safety import burn

    space: dict = {}
    exec(compile(script("capagent").replace('if __name__ == "__main__":', "if False:"),
                 "capagent", "exec"), space)
    samples = [capjudge.Sample(float(i), *r) for i, r in enumerate(readings)]
    mine = space["judge"]([space["Sample"](float(i), *r) for i, r in enumerate(readings)],
                          2200)
    assert mine == burn.judge(samples, 2200) and mine[0] == verdict
