"""Every file in sparkrack/remote/: listed in docs/internals.md, loads, and (where it is
safe on this machine) runs locally: shell scripts are syntax-checked by the shell that runs
them on the nodes, the lock, ship and remove scripts run against a tmp directory, the
dockerd limits probe against a process of ours, keygen and metrics by this Python."""

import io
import json
import os
import subprocess
import sys
import tarfile
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from importlib import resources
from pathlib import Path

import pytest

import sparkrack.remote as remote
from sparkrack.lifecycle.nodelimits import parse_probe
from sparkrack.oplock.remote import holder_json, lock_argv
from sparkrack.remote import script, text

NODE_SCRIPTS = (Path(__file__).resolve().parents[3] / "docs" / "internals.md").read_text()
FILES = sorted(p.name for p in resources.files("sparkrack.remote").iterdir()
               if p.is_file() and p.name != "__init__.py" and p.name.endswith((".py", ".sh")))
SHELL = [name for name in FILES if name.endswith(".sh")]
# run as `sh -c` on the nodes (dash here, as on Ubuntu): must parse as POSIX sh too
RUN_BY_SH = {"burn.sh", "lock.sh", "dockerlimits.sh", "remove.sh"}


def test_the_remote_directory_holds_the_moved_scripts():
    for name in ("burn.sh", "lock.sh", "dockerlimits.sh", "sequence.sh", "ship.sh",
                 "remove.sh", "keygen.py", "metrics.py"):
        assert name in FILES
    assert RUN_BY_SH <= set(SHELL)


@pytest.mark.parametrize("name", FILES)
def test_every_file_is_listed_in_the_docs_and_loads(name):
    assert f"\n| `{name}` |" in NODE_SCRIPTS, f"{name} is not in docs/internals.md's node scripts"
    stem, kind = name.rsplit(".", 1)
    body = script(stem) if kind == "py" else text(stem)
    assert body.strip()
    if kind == "py":
        compile(body, name, "exec")
        assert "from ." not in body  # its parts inlined


@pytest.mark.parametrize("name", SHELL)
def test_shell_scripts_parse(name):
    body = text(name.removesuffix(".sh"))
    shells = ["bash", "sh"] if name in RUN_BY_SH else ["bash"]
    for shell in shells:
        done = subprocess.run([shell, "-n", "-c", body], capture_output=True, text=True)
        assert done.returncode == 0, f"{shell} -n {name}: {done.stderr}"


def test_text_is_cached_and_read_as_shipped():
    assert text("lock") is text("lock")
    assert text("lock") == (Path(remote.__file__).parent / "lock.sh").read_text()


def lock(tmp_path, op, *args, stdin=()):
    done = subprocess.run(lock_argv(op, *args, directory=str(tmp_path / "lock")),
                          input="".join(line + "\n" for line in stdin), capture_output=True,
                          text=True, timeout=30)
    return done.returncode, done.stdout.splitlines()


def test_the_lock_script_runs_against_a_directory(tmp_path):
    holder = holder_json({"token": "t1", "operator": "ann", "pid": 1})
    rc, out = lock(tmp_path, "take", "t1", "60", stdin=[holder, '{"event":"take"}'])
    assert rc == 0 and out[0].startswith("NOW ") and out[-1] == "TAKEN"
    written = json.loads((tmp_path / "lock" / "lock.json").read_text())
    assert written["token"] == "t1" and written["operator"] == "ann" and "since" in written
    rc, out = lock(tmp_path, "take", "t2", "60", stdin=[holder_json({"token": "t2"})])
    assert out[-1] == "HELD" and out[1].startswith("HOLDER ")
    assert lock(tmp_path, "refresh", "t1", "5")[1][-1] == "OK"
    assert lock(tmp_path, "refresh", "t2", "5")[1][-1] == "LOST"
    assert lock(tmp_path, "show")[1][-1] == "HELD"
    assert lock(tmp_path, "release", "t2")[1][-1] == "NOTOURS"
    assert lock(tmp_path, "release", "t1", stdin=['{"event":"release"}'])[1][-1] == "RELEASED"
    assert lock(tmp_path, "show")[1][-1] == "FREE"
    assert lock(tmp_path, "break", "")[1][-1] == "FREE"
    assert lock(tmp_path, "append", stdin=['{"event":"x"}', '{"event":"y"}'])[1][-1] == "APPENDED"
    rc, out = lock(tmp_path, "log")
    logged = out[out.index("AUDIT") + 1:]
    assert [{k: v for k, v in json.loads(line).items() if k != "prev"} for line in logged] == [
        {"event": "take"}, {"event": "release"}, {"event": "x"}, {"event": "y"}]
    assert lock(tmp_path, "append", stdin=["not json"])[1][-1].startswith("ERROR not an audit")
    rc, out = lock(tmp_path, "nonsense")
    assert rc == 5 and out[-1].startswith("ERROR unknown operation")


def test_a_value_is_never_run_by_the_lock_script(tmp_path):
    token = "$(touch pwned)"
    rc, out = lock(tmp_path, "take", token, "60", stdin=[holder_json({"token": token}),
                                                         '{"x":"$(touch pwned2)"}'])
    assert out[-1] == "TAKEN" and not (tmp_path / "pwned").exists()
    assert not Path("pwned").exists() and not Path("pwned2").exists()


def test_the_lock_scripts_files_are_the_heads_alone_and_its_log_is_chained(tmp_path):
    """Issue 23 items 3 and 11: lock.json and audit.jsonl 0600 in a 0700 directory, even
    under umask 022 and where an older version left them 0644; each line chained to the
    one before (the hash this package checks), from an older unchained log on."""
    from sparkrack.oplock.audit import verify_chain

    d = tmp_path / "lock"
    d.mkdir(mode=0o755)
    (d / "audit.jsonl").write_text('{"id":"old","phase":"end"}\n')  # before the chain
    (d / "audit.jsonl").chmod(0o644)
    old = os.umask(0o022)
    try:
        lock(tmp_path, "take", "t1", "60", stdin=[holder_json({"token": "t1"}), '{"id":"a"}'])
        lock(tmp_path, "append", stdin=['{"id":"b"}', '{"id":"c"}'])
    finally:
        os.umask(old)
    assert d.stat().st_mode & 0o777 == 0o700
    for name in ("lock.json", "audit.jsonl", "lock.guard"):
        assert (d / name).stat().st_mode & 0o777 == 0o600, name
    text = (d / "audit.jsonl").read_text()
    checked = verify_chain(text)
    assert (checked.ok, checked.lines, checked.unchained, checked.broken) == (True, 4, 1, None)
    lines = text.splitlines()
    lines[2] = lines[2].replace('"id":"b"', '"id":"B"')  # edited by hand
    assert verify_chain("\n".join(lines) + "\n").broken == 4


def test_the_remove_script_removes_each_directory(tmp_path):
    """argv MARKER INSTALL_DIR STATE_DIR...: odd names stay one argument each (the install
    directory's check itself: test_watchdog_install.py)."""
    from sparkrack.inventory.watchdog_dir import MARKER_FILE

    keep, a, b = tmp_path / "keep", tmp_path / "a b", tmp_path / "-b"
    for d in (keep, a / "x", b):
        d.mkdir(parents=True)
    (b / MARKER_FILE).write_text("")
    done = subprocess.run(["sh", "-c", text("remove"), "sh", MARKER_FILE, str(b), str(a),
                           str(tmp_path / "absent")], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert keep.is_dir() and not a.exists() and not b.exists()


def test_the_ship_script_unpacks_lib_from_stdin(tmp_path):
    d = tmp_path / "install"
    (d / "lib").mkdir(parents=True)
    (d / "lib" / "old.py").write_text("x = 0\n")
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        data = b"x = 1\n"
        info = tarfile.TarInfo("pkg/mod.py")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    done = subprocess.run(["bash", "-c", text("ship"), "sparkrack-ship", str(d), sys.executable],
                          input=buffer.getvalue(), capture_output=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert (d / "lib" / "pkg" / "mod.py").read_text() == "x = 1\n"
    assert not (d / "lib" / "old.py").exists()
    assert not (d / "lib.new").exists() and not (d / "lib.old").exists()


def test_the_dockerd_limits_probe_reads_the_process_pidof_names(tmp_path):
    """A fake pidof names a sleep of ours; on its PATH, a hook: the probe sees its limits."""
    hooks = tmp_path / "hooks"
    hooks.mkdir()
    (hooks / "nvidia-container-runtime-hook").write_text("#!/bin/sh\n")
    (hooks / "nvidia-container-runtime-hook").chmod(0o755)
    dockerd = subprocess.Popen(["sleep", "30"], env={"PATH": f"/usr/bin:/bin:{hooks}"})
    try:
        bin_dir = tmp_path / "bin"
        bin_dir.mkdir()
        (bin_dir / "pidof").write_text(f"#!/bin/sh\necho {dockerd.pid}\n")
        (bin_dir / "pidof").chmod(0o755)
        done = subprocess.run(["sh", "-c", text("dockerlimits")], capture_output=True, text=True,
                              env={**os.environ, "PATH": f"{bin_dir}:/usr/bin:/bin"}, timeout=20)
    finally:
        dockerd.kill()
        dockerd.wait()
    assert done.returncode == 0, done.stderr
    limits = parse_probe(done.stdout)
    assert set(limits.hard_limits) == {"memlock", "nofile"} and limits.gpu_driver


def test_the_keygen_script_makes_a_key_and_keeps_it(tmp_path):
    pytest.importorskip("cryptography")
    path = tmp_path / "keys" / "id_ed25519"

    def keygen():
        done = subprocess.run([sys.executable, "-c", script("keygen"), str(path), "me@n1"],
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()

    first = keygen()
    assert first.startswith("ssh-ed25519 ")
    assert path.stat().st_mode & 0o777 == 0o600 and path.parent.stat().st_mode & 0o777 == 0o700
    assert (tmp_path / "keys" / "id_ed25519.pub").read_text() == first + " me@n1\n"
    assert keygen() == first


def test_the_metrics_script_waits_for_a_poll():
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            body = b"sparkrack_watchdog_last_poll_timestamp_seconds 1.0\n"
            self.send_response(200)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_port}/metrics"
        done = subprocess.run([sys.executable, "-c", script("metrics"), url, "10"],
                              capture_output=True, text=True, timeout=30)
    finally:
        server.shutdown()
        server.server_close()
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr
    done = subprocess.run([sys.executable, "-c", script("metrics"), url, "0.5"],
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 1 and done.stdout.startswith("no poll seen at " + url)
