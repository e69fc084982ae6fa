"""The watchdog's node as facts: the node side (sparkrack/remote/watchdog.py through
gather.py) run here against an install directory in tmp_path, and its parser."""

from __future__ import annotations

import base64
import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from sparkrack.core.errors import SparkrackError
from sparkrack.facts.queries import argv
from sparkrack.facts.watchdog import UNIT_PROPERTIES, parse_probe, probe_query

FAKE_SYSTEMCTL = """#!/bin/sh
echo "$*" > "$(dirname "$0")/asked"
printf 'LoadState=loaded\\nActiveState=active\\nSubState=running\\nUnitFileState=enabled\\n'
echo '@@0 f'
"""


def query(tmp_path: Path, python: str = sys.executable, peers=(("127.0.0.1", 22),)):
    d = tmp_path / "opt"
    return probe_query(python=python, install_dir=str(d), key_path=f"{d}/ssh/id_ed25519",
                       unit_path=str(tmp_path / "unit"), state_dir=str(tmp_path / "state"),
                       state_file=str(tmp_path / "state" / "state.json"),
                       systemctl=str(tmp_path / "systemctl"), unit="sparkrack-watchdog.service",
                       peers=peers)


def run(tmp_path: Path, **options):
    asked = query(tmp_path, **options)
    done = subprocess.run(argv([asked]), capture_output=True, text=True, timeout=60, check=True)
    return parse_probe(done.stdout, asked), done.stdout


def installed(tmp_path: Path) -> Path:
    """An install directory as watch.install leaves it, a fake systemctl beside it."""
    d = tmp_path / "opt"
    (d / "lib" / "pkg").mkdir(parents=True)
    (d / "lib" / "pkg" / "a.py").write_text("A = 1\n")
    (d / "lib" / "b.txt").write_text("b\n")
    manifest = "".join(f"{hashlib.sha256((d / 'lib' / p).read_bytes()).hexdigest()}  {p}\n"
                       for p in ("b.txt", "pkg/a.py"))
    (d / "lib" / ".sparkrack-manifest").write_text(manifest)
    (d / "inventory" / ".sparkrack" / "engines").mkdir(parents=True)
    (d / "inventory" / "hosts.yml").write_text("all: {}\n")
    (d / "inventory" / ".sparkrack" / "engines" / "sglang.yml").write_text("x: 1\n")
    (d / "inventory" / "linked.yml").symlink_to(d / "inventory" / "hosts.yml")
    (d / "README.md").write_text("readme\n")
    (d / "ssh").mkdir()
    (d / "ssh" / "id_ed25519").write_text("private\n")
    (d / "ssh" / "id_ed25519.pub").write_text("ssh-ed25519 AAAA sparkrack-watchdog@x\n")
    (tmp_path / "unit").write_text("[Unit]\n")
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / "state.json").write_text('{"verdicts": []}')
    fake = tmp_path / "systemctl"
    fake.write_text(FAKE_SYSTEMCTL)
    fake.chmod(0o755)
    return d


def test_the_node_side_reports_an_installed_watchdog(tmp_path):
    d = installed(tmp_path)
    state, text = run(tmp_path)
    assert state.platform.version == tuple(sys.version_info[:3]) and not state.platform_error
    assert state.sources == {"127.0.0.1": "127.0.0.1"}
    assert state.install_dir and state.lib and state.state_dir and state.lib_checks
    assert state.manifest_sha256 == hashlib.sha256(
        (d / "lib" / ".sparkrack-manifest").read_bytes()).hexdigest()
    sha = lambda path: hashlib.sha256((d / path).read_bytes()).hexdigest()  # noqa: E731
    assert state.files == {p: sha(p) for p in ("inventory/hosts.yml", "README.md",
                                               "inventory/.sparkrack/engines/sglang.yml")}
    assert state.private_key and state.public_key == "ssh-ed25519 AAAA sparkrack-watchdog@x"
    assert state.unit_file == b"[Unit]\n" and state.state == b'{"verdicts": []}'
    assert state.active and state.enabled and state.installed
    assert (tmp_path / "asked").read_text().split() == [
        "show", "-p", ",".join(UNIT_PROPERTIES), "--", "sparkrack-watchdog.service"]
    assert "\n@@0 f\n" not in text  # what systemctl prints cannot forge a section
    assert str(d) not in text  # no path given is echoed back


def test_a_changed_library_file_fails_the_manifest_check(tmp_path):
    d = installed(tmp_path)
    (d / "lib" / "pkg" / "a.py").write_text("A = 2\n")
    assert not run(tmp_path)[0].lib_checks
    (d / "lib" / "pkg" / "a.py").unlink()
    assert not run(tmp_path)[0].lib_checks
    (d / "lib" / ".sparkrack-manifest").write_text("")
    state = run(tmp_path)[0]
    assert not state.lib_checks and state.manifest_sha256 == hashlib.sha256(b"").hexdigest()


def test_a_fresh_node_and_an_interpreter_that_does_not_run(tmp_path):
    state, _ = run(tmp_path, python=str(tmp_path / "python9"), peers=())
    assert state.platform is None and state.platform_error == (
        f"{tmp_path}/python9 did not run (exit 127): {tmp_path}/python9: No such file or "
        "directory")
    assert not state.installed and state.sources == {} and state.unit == {}
    assert state.manifest_sha256 == "" and state.files == {} and state.public_key == ""
    script = tmp_path / "python8"
    script.write_text("#!/bin/sh\necho 'not a python'\n")
    script.chmod(0o755)
    state, _ = run(tmp_path, python=str(script))
    assert state.platform_error == f"{script} printed 'not a python'"


def test_recorded_output_is_parsed_and_a_cut_one_refused(tmp_path):
    asked = query(tmp_path)
    key = base64.b64encode(b"ssh-ed25519 AAAA x\n").decode()
    text = "\n".join([
        "@@base", "boot", "1.0", "@@0 w",
        "platform Traceback (most recent call last):", "platform ImportError: no json",
        "platform-rc 1", 'sources {"127.0.0.1": "error: unreachable"}', "exists state-dir",
        'file 00 "inventory/@@1 w"', f"public-key {key}", "unit-file ", "unit Result=",
        "unit not a property", "end"])
    state = parse_probe(text, asked)
    assert state.platform is None
    assert state.platform_error == f"{sys.executable} did not run (exit 1): ImportError: no json"
    assert state.sources == {"127.0.0.1": "error: unreachable"}
    assert state.state_dir and not state.install_dir and state.files == {"inventory/@@1 w": "00"}
    assert not state.private_key and state.public_key == "ssh-ed25519 AAAA x"
    assert state.unit_file is None and state.unit == {"Result": ""}
    with pytest.raises(SparkrackError, match="cut short"):
        parse_probe(text.rsplit("\n", 1)[0], asked)
    with pytest.raises(SparkrackError, match="cut short"):
        parse_probe("@@base\nboot\n1.0\n", asked)


def test_the_query_carries_its_values_as_arguments(tmp_path):
    asked = query(tmp_path, peers=(("10.77.1.11", 22), ("10.77.1.12", 2222)))
    command = argv([asked])
    assert command[-2] == "watchdog_section"
    assert json.loads(command[-1])[-1] == [["10.77.1.11", "22"], ["10.77.1.12", "2222"]]
    assert asked == query(tmp_path, peers=(("10.77.1.11", 22), ("10.77.1.12", 2222)))
    assert asked != query(tmp_path, peers=(("10.77.1.11", 22),))
    assert str(tmp_path) not in command[4]  # the script's text holds no value
