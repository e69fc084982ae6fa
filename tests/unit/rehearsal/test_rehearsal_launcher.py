"""The rehearsal node launcher script: paths quoted, reboot loop, cgroup join."""

import shlex
import subprocess

from sparkrack.rehearsal.layout import NodeLayout
from sparkrack.rehearsal.nodeproc import launcher_script


def test_launcher_quotes_and_loops_on_reboot():
    node = NodeLayout("spark-01", "10.77.1.11")
    script = launcher_script(node)
    assert subprocess.run(["sh", "-n", "-c", script]).returncode == 0
    inner = shlex.split(script[script.index("exec unshare"):])[-1]
    assert subprocess.run(["sh", "-n", "-c", inner]).returncode == 0
    assert "[ $rc -eq 133 ] || exit $rc" in inner
    assert "--network-namespace-path=/run/netns/sr-spark-01" in inner
    assert "lowerdir=/,upperdir=/var/lib/sparkrack/rehearsal/nodes/spark-01/upper" in inner
    assert "/sys/fs/cgroup/systemd/sparkrack-rehearsal/spark-01" in script


def test_node_names_derive_from_the_address():
    node = NodeLayout("spark-08", "10.77.1.18")
    assert (node.netns, node.host_veth, node.roce_addr, node.twin_addr) == (
        "sr-spark-08", "srv18", "10.77.3.18", "10.77.4.18")
    assert node.fabric_veth(1, "b") == "srf18-1b"
    moved = NodeLayout("spark-08", "10.77.1.18", "10.77.3.40")
    assert (moved.roce_addr, moved.twin_addr) == ("10.77.3.40", "10.77.4.40")
