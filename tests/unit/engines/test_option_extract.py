"""The one extractor of the option tables: from a wheel (tools/engine_options.py) and from
an installed package (what `invoke engines.learn` runs inside an image) it reads the same
rows; the rehearsal's stub versions carry parser sources it reads back exactly."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from sparkrack.learn.options import extractor_argv, extractor_files
from sparkrack.rehearsal.stubversions import (
    VERSIONS,
    parser_sources,
    write_parser_sources,
)

REPO = Path(__file__).resolve().parents[3]


def rows(text: str) -> list[str]:
    """The option rows and the `#:` header lines of a table."""
    return [line for line in text.splitlines() if line and not line.startswith("# ")]


def installed(root: Path, engine: str) -> subprocess.CompletedProcess:
    """The extractor run as engines.learn runs it: `--installed ENGINE` by a Python whose
    site-packages is root (isolated: nothing of this checkout on its path)."""
    for path, content in extractor_files(str(root)).items():  # beside the engine's package
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_bytes(content)
    argv = extractor_argv(str(root), "--installed", engine, python=sys.executable)
    return subprocess.run([argv[0], "-I", *argv[1:]], capture_output=True, text=True,
                          timeout=60, cwd=root)


@pytest.mark.parametrize("key", sorted(VERSIONS))
def test_each_stub_version_reads_back_as_its_table(tmp_path, key):
    stub = VERSIONS[key]
    write_parser_sources(stub, tmp_path)
    done = installed(tmp_path, stub.engine)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    assert rows(done.stdout) == rows(stub.table())
    assert f"from the package installed at {tmp_path / stub.engine}" in done.stdout


def test_a_wheel_and_the_installed_package_give_the_same_table(tmp_path):
    stub = VERSIONS[("vllm", "0.34.0")]
    wheel = tmp_path / "vllm-0.34.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for path, text in sorted(parser_sources(stub).items()):
            archive.writestr(path, text)
    from_wheel = subprocess.run([sys.executable, str(REPO / "tools" / "engine_options.py"),
                                 str(wheel)], capture_output=True, text=True, timeout=60)
    assert from_wheel.returncode == 0, from_wheel.stderr
    write_parser_sources(stub, tmp_path / "site")
    assert rows(from_wheel.stdout) == rows(installed(tmp_path / "site", "vllm").stdout)
    assert f"from {wheel.name}\n# (sha256 " in from_wheel.stdout


def test_the_renamed_and_removed_options_of_the_next_stub_versions():
    sglang = rows(VERSIONS[("sglang", "0.5.23")].table())
    assert "#: version 0.5.23" in sglang and "--cuda-graph-max-bs-decode value" not in sglang
    assert "--schedule-conservative-factor value" in sglang
    assert "--schedule-conservativeness value" not in sglang
    vllm = rows(VERSIONS[("vllm", "0.34.0")].table())
    assert "--kv-block-size value" in vllm and "--disable-log-stats none" not in vllm


def test_an_image_without_the_package_or_its_metadata_is_one_line(tmp_path):
    done = installed(tmp_path, "sglang")
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.strip().startswith("option_extract: no sglang package is installed for ")
    write_parser_sources(VERSIONS[("sglang", "0.5.22")], tmp_path)
    for info in tmp_path.glob("*.dist-info"):
        for file in info.iterdir():
            file.unlink()
        info.rmdir()
    done = installed(tmp_path, "sglang")
    assert done.returncode == 1 and done.stderr.strip() == (
        f"option_extract: sglang at {tmp_path / 'sglang'} has no installed metadata (no "
        "version to name the table by)")


def test_the_extractor_wants_a_wheel_or_an_installed_engine():
    done = subprocess.run([sys.executable, "-m", "sparkrack.engines.option_extract"],
                          capture_output=True, text=True, timeout=60, cwd=REPO)
    assert done.returncode == 2 and "give a WHEEL or --installed ENGINE" in done.stderr
