"""The kernel limits a rehearsal rack sizes on this machine (a file stands for procfs)."""

from sparkrack.rehearsal import hostprep


def test_the_inotify_limit_is_raised_to_the_floor_and_said(tmp_path, monkeypatch):
    limit = tmp_path / "max_user_instances"
    limit.write_text("128\n")
    monkeypatch.setattr(hostprep, "INOTIFY_INSTANCES", limit)
    said = []
    hostprep.raise_kernel_limits(said.append)
    assert limit.read_text() == f"{hostprep.INOTIFY_INSTANCES_FLOOR}\n"
    assert said == [f"fs.inotify.max_user_instances raised from 128 to "
                    f"{hostprep.INOTIFY_INSTANCES_FLOOR} (the rehearsal nodes share this "
                    "machine's kernel)"]


def test_a_higher_inotify_limit_is_kept(tmp_path, monkeypatch):
    limit = tmp_path / "max_user_instances"
    limit.write_text("65536\n")
    monkeypatch.setattr(hostprep, "INOTIFY_INSTANCES", limit)
    said = []
    hostprep.raise_kernel_limits(said.append)
    assert limit.read_text() == "65536\n" and said == []
