"""The kernel limits a rehearsal rack sizes on this machine (a file stands for procfs), and
the packages it installs: CI's install from scratch names each of them."""

from pathlib import Path

import pytest

from sparkrack.rehearsal import hostprep

FLOOR = hostprep.INOTIFY_INSTANCES_FLOOR


@pytest.mark.parametrize("have, kept", [(128, False), (FLOOR, True), (65536, True)])
def test_the_inotify_limit_is_raised_to_the_floor_said_and_never_lowered(
        tmp_path, monkeypatch, have, kept):
    limit = tmp_path / "max_user_instances"
    limit.write_text(f"{have}\n")
    monkeypatch.setattr(hostprep, "INOTIFY_INSTANCES", limit)
    said = []
    hostprep.raise_kernel_limits(said.append)
    assert limit.read_text() == f"{have if kept else FLOOR}\n"
    assert said == ([] if kept else [f"fs.inotify.max_user_instances raised from {have} to "
                                     f"{FLOOR} (the rehearsal nodes share this machine's kernel)"])


def test_ci_installs_every_package_the_rack_and_the_suite_need():
    text = (Path(__file__).resolve().parents[3] / ".ci" / "run").read_text()
    lines = text.replace("\\\n", " ").splitlines()  # continuation lines joined
    listed = {word for line in lines if "apt-get install" in line for word in line.split()}
    wanted = {*hostprep.REQUIRED_COMMANDS.values(), *hostprep.SUITE_COMMANDS.values()}
    assert wanted - listed == set()
