"""The router's wheels (racks/install.py, racks/repack.py): this machine's installed smg and
setproctitle packed back when they fit the router's host, a download only when they do not."""

from __future__ import annotations

import csv
import io
import platform
import subprocess
import sys
import zipfile
from importlib import metadata
from pathlib import Path

import pytest

from sparkrack.core.errors import SparkrackError
from sparkrack.racks import install
from sparkrack.racks.install import _host, wheels_for
from sparkrack.racks.repack import Host, RepackError, fits, record, repack, tags

HERE = Host(platform.machine(), sys.version_info[:2], (2, 36))


def rows(text: str) -> list[list[str]]:
    return [row for row in csv.reader(io.StringIO(text)) if row]


def test_a_repacked_wheel_holds_the_installed_files_and_their_record(tmp_path):
    dist = metadata.distribution("setproctitle")
    wheel = repack(dist, tmp_path)
    assert wheel.name.startswith(f"setproctitle-{dist.version}-cp{sys.version_info[0]}")
    assert wheel.name == f"setproctitle-{dist.version}-" + "-".join(
        ".".join(dict.fromkeys(t.split("-")[i] for t in tags(dist))) for i in range(3)) + ".whl"
    installed = {row[0]: row for row in rows(dist.read_text("RECORD"))}
    own = {path for path in installed if not path.startswith("..") and "__pycache__" not in
           path and not path.endswith(("/INSTALLER", "/REQUESTED", "/direct_url.json"))}
    with zipfile.ZipFile(wheel) as packed:
        assert set(packed.namelist()) == own
        for path in own - {f"setproctitle-{dist.version}.dist-info/RECORD"}:
            assert packed.read(path) == Path(dist.locate_file(path)).read_bytes(), path
        written = rows(packed.read(f"setproctitle-{dist.version}.dist-info/RECORD").decode())
    assert sorted(map(tuple, written)) == sorted(tuple(installed[p]) for p in own)
    # and pip installs it as the router's host does: the same files come out
    target = tmp_path / "target"
    done = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-index",
                           "--no-deps", "--target", str(target), str(wheel)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    so = next(p for p in own if p.endswith(".so"))
    assert (target / so).read_bytes() == Path(dist.locate_file(so)).read_bytes()


def fake_dist(root: Path, body: bytes = b"x = 1\n") -> metadata.Distribution:
    """foo 1.0 installed under root, as pip leaves it (RECORD, INSTALLER, bytecode)."""
    info = root / "foo-1.0.dist-info"
    (root / "foo" / "__pycache__").mkdir(parents=True)
    info.mkdir()
    (root / "foo" / "__init__.py").write_bytes(b"x = 1\n")
    (root / "foo" / "__pycache__" / "__init__.cpython-311.pyc").write_bytes(b"\0")
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: foo\nVersion: 1.0\n")
    (info / "WHEEL").write_text("Wheel-Version: 1.0\nTag: py3-none-any\n")
    (info / "INSTALLER").write_text("pip\n")
    import base64
    import hashlib
    digest = base64.urlsafe_b64encode(hashlib.sha256(body).digest()).rstrip(b"=").decode()
    (info / "RECORD").write_text(
        f"foo/__init__.py,sha256={digest},{len(body)}\nfoo/__pycache__/__init__.cpython-311.pyc,,"
        "\nfoo-1.0.dist-info/INSTALLER,,\nfoo-1.0.dist-info/METADATA,,\n"
        "foo-1.0.dist-info/WHEEL,,\nfoo-1.0.dist-info/RECORD,,\n../../bin/foo,,\n")
    return metadata.PathDistribution(info)


def test_record_keeps_the_wheels_own_files_only(tmp_path):
    assert [row[0] for row in record(fake_dist(tmp_path))] == [
        "foo/__init__.py", "foo-1.0.dist-info/METADATA", "foo-1.0.dist-info/WHEEL",
        "foo-1.0.dist-info/RECORD"]
    assert repack(fake_dist(tmp_path / "again"), tmp_path).name == "foo-1.0-py3-none-any.whl"


def test_a_file_changed_since_its_install_is_not_packed(tmp_path):
    dist = fake_dist(tmp_path, body=b"x = 2\n")  # RECORD says another content
    with pytest.raises(RepackError, match=r"foo/__init__.py differs from its RECORD"):
        repack(dist, tmp_path)
    assert list(tmp_path.glob("*.whl*")) == []


@pytest.mark.parametrize(("tag", "host", "ok"), [
    ("cp38-abi3-manylinux_2_17_x86_64", Host("x86_64", (3, 11), (2, 36)), True),
    ("cp38-abi3-manylinux2014_x86_64", Host("x86_64", (3, 8), (2, 17)), True),
    ("cp38-abi3-manylinux_2_17_x86_64", Host("aarch64", (3, 11), (2, 36)), False),
    ("cp38-abi3-manylinux_2_17_x86_64", Host("x86_64", (3, 7), (2, 36)), False),
    ("cp38-abi3-manylinux_2_17_x86_64", Host("x86_64", (3, 11), (2, 12)), False),
    ("cp38-abi3-manylinux_2_17_x86_64", Host("x86_64", (3, 11), None), False),
    ("cp311-cp311-manylinux_2_28_x86_64", Host("x86_64", (3, 11), (2, 28)), True),
    ("cp311-cp311-manylinux1_x86_64", Host("x86_64", (3, 12), (2, 36)), False),
    ("cp311-cp311-linux_aarch64", Host("aarch64", (3, 11), (2, 36)), True),
    ("py3-none-any", Host("aarch64", (3, 12), None), True),
    ("cp311-cp311-macosx_11_0_arm64", Host("aarch64", (3, 11), (2, 36)), False),
])
def test_a_wheel_tag_fits_a_host_as_pip_decides(tag, host, ok):
    assert fits(tag, host) is ok


def test_the_hosts_probe_is_read():
    assert _host("aarch64 3.12 2.39\n") == Host("aarch64", (3, 12), (2, 39))
    assert _host("x86_64 3.11 -") == Host("x86_64", (3, 11), None)


def no_download(*args, **kwargs):
    raise AssertionError(f"asked the index: {args}")


def test_a_host_like_this_machine_gets_its_installed_wheels_without_a_download(
        tmp_path, monkeypatch):
    monkeypatch.setattr(install.subprocess, "run", no_download)
    packed = []  # the real repack is the test above's (smg's own is 40 MB: 1.5 CPU-s)

    def repack(dist, folder):
        packed.append(dist)
        return folder / f"{dist.metadata['Name']}-{dist.version}-x.whl"

    monkeypatch.setattr(install, "repack", repack)
    version = metadata.version("smg")
    wheels, source = wheels_for(version, HERE, tmp_path / "kept")
    assert [d._path for d in packed] == [metadata.distribution(n)._path
                                         for n in ("smg", "setproctitle")]
    assert [w.name.split("-")[:2] for w in wheels] == [
        ["smg", version], ["setproctitle", metadata.version("setproctitle")]]
    assert source == (f"this machine's installed smg {version}, setproctitle "
                      f"{metadata.version('setproctitle')}, packed back")
    assert all(w.parent == tmp_path / "kept-installed" for w in wheels)


def test_another_machine_is_sent_a_download_for_its_own_machine_and_python(
        tmp_path, monkeypatch):
    asked = []

    def download(argv, **kwargs):
        asked.append(argv)
        dest = Path(argv[argv.index("--dest") + 1])
        for name in ("smg-1.13.0-cp38-abi3-manylinux2014_aarch64.whl",
                     "setproctitle-1.3.8-cp312-cp312-manylinux2014_aarch64.whl"):
            (dest / name).write_bytes(b"")
        return subprocess.CompletedProcess(argv, 0, "", "")

    monkeypatch.setattr(install.subprocess, "run", download)
    other = Host("aarch64", (3, 12), (2, 39))
    wheels, source = wheels_for("1.13.0", other, tmp_path / "kept")
    assert source == "downloaded" and len(asked) == 1
    argv = asked[0]
    assert argv[argv.index("--platform") + 1] == "manylinux2014_aarch64"
    assert argv[argv.index("--python-version") + 1] == "3.12"
    assert "smg==1.13.0" in argv and "--only-binary" in argv
    assert [w.name.split("-")[0] for w in wheels] == ["setproctitle", "smg"]
    # the next install of that host takes the kept ones and asks nothing
    monkeypatch.setattr(install.subprocess, "run", no_download)
    assert wheels_for("1.13.0", other, tmp_path / "kept") == (wheels,
                                                              f"kept in {tmp_path / 'kept'}")


def test_another_version_than_the_installed_one_is_downloaded(tmp_path, monkeypatch):
    monkeypatch.setattr(install.subprocess, "run", lambda argv, **kw: subprocess.
                        CompletedProcess(argv, 1, "", "ERROR: No matching distribution"))
    with pytest.raises(SparkrackError, match="could not download smg 0.0.1 for x86_64"):
        wheels_for("0.0.1", Host("x86_64", HERE.python, (2, 36)), tmp_path / "kept")
