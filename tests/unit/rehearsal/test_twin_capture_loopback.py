"""`invoke facts.capture` over real SSH (a loopback sshd): a node that does not answer is
recorded by what kept it, never the fleet's words for it (address, port, user, key path,
host key fingerprint); `--diff` shows what the capture files hold escaped."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

from loopback import Sshd, free_port, inventory, keygen, needs_sshd, write_inventory

from sparkrack.rehearsal.twin.capture import capture, dump, read, write

pytestmark = needs_sshd
REPO = Path(__file__).resolve().parents[3]


def fingerprint(public_key: Path) -> str:
    """The SHA256 fingerprint ssh-keygen prints for a public key file."""
    done = subprocess.run(["ssh-keygen", "-lf", str(public_key)], capture_output=True,
                          text=True, check=True)
    return done.stdout.split()[1].removeprefix("SHA256:")


def test_a_node_that_does_not_answer_is_recorded_by_category_alone(sshd: Sshd, tmp_path):
    """Issue 46 item 11: spark-02 has nothing listening on its port, spark-03 offers a key
    the node does not authorize, spark-04's host key is not recorded, spark-05's recorded
    key is another: each failing for real, and its record says which of these it is."""
    stranger = tmp_path / "stranger_ed25519"
    keygen(stranger)
    dead = free_port()
    rack = inventory(sshd, ("spark-01", "spark-02", "spark-03", "spark-04", "spark-05"))
    by_name = {node.name: node for node in rack.nodes}
    nodes = (by_name["spark-01"], dataclasses.replace(by_name["spark-02"], port=dead),
             dataclasses.replace(by_name["spark-03"], key_file=stranger),
             by_name["spark-04"], by_name["spark-05"])
    document = capture(dataclasses.replace(rack, nodes=nodes))
    assert {n["name"]: (n["reachable"], n.get("error")) for n in document["nodes"]} == {
        "spark-01": (True, None), "spark-02": (False, "unreachable"),
        "spark-03": (False, "authentication refused"), "spark-04": (False, "host key unknown"),
        "spark-05": (False, "host key changed")}
    write(document, tmp_path / "rack.yml")
    text = (tmp_path / "rack.yml").read_text()
    host_keys = [fingerprint(sshd.directory / f"{key}.pub")
                 for key in ("host_ed25519", "other_ed25519")]
    for leak in ("127.0.0", f":{sshd.port}", str(dead), "user root", str(sshd.directory),
                 str(stranger), "SHA256", "known_hosts", *host_keys):
        assert leak not in text, leak
    assert read(tmp_path / "rack.yml")["nodes"][4]["error"] == "host key changed"


def test_the_diff_shows_control_characters_escaped(sshd: Sshd, tmp_path):
    """Issue 46 item 12: an earlier capture (a file from elsewhere) whose kernel holds OSC
    52 (writes the operator's clipboard): `--diff` prints it as \\x1b...\\x07."""
    rack = write_inventory(sshd, tmp_path / "inv", ("spark-01",))
    earlier = capture(inventory(sshd, ("spark-01",)))
    earlier["nodes"][0]["kernel"] = "6.0\x1b]52;c;cHduZWQ=\x07"
    (tmp_path / "earlier.yml").write_text(dump(earlier))
    done = subprocess.run([sys.executable, "-m", "invoke", "facts.capture", "-i", str(rack),
                           "--diff", str(tmp_path / "earlier.yml")], cwd=REPO,
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "SPARKRACK_SANDBOX": "1",
                               "SPARKRACK_LOCK_DIR": str(tmp_path / "head")})
    assert done.returncode == 1, done.stderr
    assert "spark-01: kernel 6.0\\x1b]52;c;cHduZWQ=\\x07 -> " in done.stdout
    assert "\x1b" not in done.stdout + done.stderr
