"""sparkrack installed as a user installs tools: a wheel in a fresh venv, run from a
directory outside the repository against an inventory of its own.

The wheel is built from a copy of the sources (pip wheel, isolated build: pip fetches
setuptools) and installed with --no-deps into a fresh venv that sees the dependencies
where the interpreter running the tests has them (its own venv, the system Python, or
both): their site-packages directories are appended to the new venv's path by a .pth file,
after the venv's own, so the wheel's sparkrack is the one imported and an editable
checkout there (whose finder a plain path entry does not run) never stands in for it.
`sparkrack plan --offline` and `sparkrack check` then run against the operator's directory: the shipped roles, profiles,
model data and rules come from the wheel, the operator's profile from the inventory.
Neither contacts a node. The roles live at the checkout's top (roles/) and ship in the wheel
as sparkrack/roles/ (pyproject's package-dir).
"""

import os
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
SOURCES = ("pyproject.toml", "README.md", "LICENSE", "sparkrack", "roles", "deploy")


def run(argv, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    done = subprocess.run([str(a) for a in argv], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env=env)
    assert done.returncode == 0, f"{argv}: {done.stdout}\n{done.stderr}"
    return done


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The wheel built from a copy of this checkout's sources."""
    root = tmp_path_factory.mktemp("wheel")
    source = root / "src"
    for name in SOURCES:
        if (REPO / name).is_dir():
            shutil.copytree(REPO / name, source / name,
                            ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
        else:
            source.mkdir(exist_ok=True)
            shutil.copy(REPO / name, source / name)
    run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", root / "dist", source],
        cwd=root)
    wheel, = (root / "dist").glob("sparkrack-*.whl")
    return wheel


@pytest.fixture(scope="module")
def venv(wheel) -> Path:
    """A fresh venv with the wheel installed in it."""
    root = wheel.parent.parent
    run([sys.executable, "-m", "venv", root / "venv"], cwd=root)
    purelib = run([root / "venv/bin/python", "-c", "import sysconfig; "
                   "print(sysconfig.get_paths()['purelib'])"], cwd=root).stdout.strip()
    Path(purelib, "sparkrack-test-dependencies.pth").write_text(
        "".join(f"{path}\n" for path in dependency_dirs()))
    run([root / "venv/bin/python", "-m", "pip", "install", "-q", "--no-deps", "--no-index",
         wheel], cwd=root)
    return root / "venv"


def dependency_dirs() -> list[str]:
    """The site-packages directories this interpreter imports from, in its order."""
    return [path for path in sys.path if Path(path).name in ("site-packages", "dist-packages")
            and Path(path).is_dir()]  # a venv inside the checkout (./venv) included


@pytest.fixture
def site(tmp_path) -> Path:
    """An operator's directory: the rehearsal inventory with a profile of its own."""
    inventory = tmp_path / "site" / "inventory"
    shutil.copytree(REPO / "inventory" / "rehearsal", inventory)
    data = yaml.safe_load((REPO / "sparkrack/data/engines/sglang.yml").read_text())
    data["profiles"]["site-64k"] = {"description": "this site's short lane", "extends": "512k",
                                    "flags": {"--context-length": 65536}}
    own = inventory / ".sparkrack" / "engines" / "sglang.yml"
    own.parent.mkdir(parents=True)
    own.write_text(yaml.safe_dump(data, sort_keys=False))
    return tmp_path / "site"


def test_the_wheel_ships_the_top_level_roles_as_sparkrack_roles(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    roles = sorted(p.relative_to(REPO).as_posix() for p in (REPO / "roles").rglob("*")
                   if p.is_file() and "__pycache__" not in p.parts)
    assert "roles/site.yml" in roles and "roles/engine_env/templates/sglang.env.j2" in roles
    missing = [path for path in roles if f"sparkrack/{path}" not in names]
    assert not missing, f"the wheel lacks {missing}"
    assert not any(name.startswith("roles/") for name in names)  # not a top-level package


def test_the_wheel_ships_the_monitoring_files_as_sparkrack_deploy(wheel):
    """deploy/ (the dashboard, the alert rules) ships as sparkrack/deploy/, for
    `monitoring.render` to write out from an installed wheel."""
    names = set(zipfile.ZipFile(wheel).namelist())
    files = sorted(p.relative_to(REPO).as_posix() for p in (REPO / "deploy").rglob("*")
                   if p.is_file() and "__pycache__" not in p.parts)
    assert "deploy/grafana/sparkrack.json" in files
    assert "deploy/prometheus/sparkrack-alerts.yml" in files
    missing = [path for path in files if f"sparkrack/{path}" not in names]
    assert not missing, f"the wheel lacks {missing}"
    assert not any(name.startswith("deploy/") for name in names)  # not a top-level package


def test_the_wheel_says_its_license_and_what_it_is(wheel):
    """Apache-2.0 as an SPDX expression with the license text in the wheel; classifiers; where
    its documentation is (no public repository yet: the README, shipped in the sdist)."""
    archive = zipfile.ZipFile(wheel)
    info = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
    metadata = archive.read(info).decode().split("\n\n")[0].splitlines()
    assert "License-Expression: Apache-2.0" in metadata
    assert "License-File: LICENSE" in metadata
    license_text = archive.read(info.replace("METADATA", "licenses/LICENSE")).decode()
    assert "Apache License" in license_text and "Version 2.0, January 2004" in license_text
    assert license_text == (REPO / "LICENSE").read_text()
    classifiers = {line.split(": ", 1)[1] for line in metadata if line.startswith("Classifier")}
    assert {"Programming Language :: Python :: 3.11", "Operating System :: POSIX :: Linux",
            "Intended Audience :: System Administrators",
            "Topic :: System :: Systems Administration"} <= classifiers
    assert not any(c.startswith("License ::") for c in classifiers)  # the expression says it
    urls = dict(line.split(": ", 1)[1].split(", ", 1) for line in metadata
                if line.startswith("Project-URL"))
    assert set(urls) == {"Documentation", "Source"}
    for url in urls.values():  # each names a file of the sources, never an invented host
        assert (REPO / url.split("#")[0]).is_file(), url


def test_pyproject_lists_every_package():
    """pyproject.toml lists the packages (find cannot map roles/): each folder of sparkrack/
    with an __init__.py is one, and roles/ ships as sparkrack.roles. The simulators' packages
    (rehearsal/sim/) run in the nodes as top-level ones: they ship as package data."""
    tool = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    sim = REPO / "sparkrack" / "rehearsal" / "sim"
    found = {".".join(p.parent.relative_to(REPO).parts)
             for p in (REPO / "sparkrack").rglob("__init__.py") if not p.is_relative_to(sim)}
    assert set(tool["packages"]) == found | {"sparkrack.roles", "sparkrack.deploy"}, \
        "add the package to [tool.setuptools] packages in pyproject.toml"
    assert tool["package-dir"] == {"sparkrack.roles": "roles", "sparkrack.deploy": "deploy"}
    assert (REPO / "roles" / "__init__.py").is_file()
    assert (REPO / "deploy" / "__init__.py").is_file()


def test_the_wheel_holds_the_data_and_runs_from_its_venv(venv, site):
    probe = ("import sparkrack, sparkrack.data as d; print(sparkrack.__file__); "
             "print(*(d.shipped(k) for k in ('roles', 'engines', 'models', 'rules.yml', "
             "'deploy')))")
    lines = run([venv / "bin/python", "-c", probe], cwd=site).stdout.split()
    for path in map(Path, lines):
        assert path.is_relative_to(venv) and path.exists(), path
    assert not Path(lines[0]).is_relative_to(REPO)


def test_plan_and_check_run_against_the_operators_inventory(venv, site):
    plan = run([venv / "bin/sparkrack", "plan", "--engine", "sglang", "--profile", "site-64k",
                "--offline", "-i", "inventory"], cwd=site, timeout=60)
    assert plan.stdout.count("docker run ") == 8 and "--context-length 65536" in plan.stdout
    assert "NCCL_IB_HCA=rocep1s0f0,roceP2p1s0f0" in plan.stdout  # rendered by the roles
    check = run([venv / "bin/sparkrack", "check", "--engine", "sglang", "--profile",
                 "site-64k", "-i", "inventory"], cwd=site, timeout=60)
    assert "sglang site-64k: may start" in check.stderr
    shipped = run([venv / "bin/sparkrack", "check", "--engine", "vllm", "-i", "inventory"],
                  cwd=site, timeout=60)  # no override for vllm: the wheel's profile
    assert "vllm 512k: may start" in shipped.stderr
    listed = run([venv / "bin/sparkrack", "--list"], cwd=site, timeout=60).stdout
    assert "  plan " in listed and "  watch.install " in listed
    module = run([venv / "bin/python", "-m", "sparkrack", "--list"], cwd=site, timeout=60)
    assert module.stdout.replace("`python -m sparkrack ", "`sparkrack ") == listed


def test_the_wheel_ships_every_node_script(venv, site):
    """sparkrack/remote's files (NAME.py and NAME.sh) load from the wheel, as in the checkout."""
    names = sorted(p.name for p in (REPO / "sparkrack" / "remote").iterdir()
                   if p.suffix in (".py", ".sh") and p.name != "__init__.py")
    probe = ("import sys, sparkrack.remote as r; "
             "[print(n, len(r.script(n[:-3]) if n.endswith('.py') else r.text(n[:-3]))) "
             "for n in sys.argv[1:]]; print(r.__file__)")
    lines = run([venv / "bin/python", "-c", probe, *names], cwd=site).stdout.splitlines()
    assert Path(lines[-1]).is_relative_to(venv)
    for line, name in zip(lines, names, strict=False):
        assert line.split()[0] == name and int(line.split()[1]) > 0
    assert len(lines) == len(names) + 1


def test_monitoring_render_writes_the_shipped_files_from_the_wheel(venv, site):
    """`sparkrack monitoring.render` from the wheel: the rules and the dashboard come from
    the wheel's sparkrack/deploy/, the targets from the operator's inventory."""
    run([venv / "bin/sparkrack", "monitoring.render", "--out", "monitoring", "-i", "inventory"],
        cwd=site, timeout=60)
    out = site / "monitoring"
    assert (out / "prometheus/sparkrack-alerts.yml").read_text() == \
        (REPO / "deploy/prometheus/sparkrack-alerts.yml").read_text()
    assert "10.77.1.11:9478" in (out / "prometheus/targets/sparkrack-watchdog.json").read_text()
    assert (out / "grafana/dashboards/sparkrack.json").is_file()
