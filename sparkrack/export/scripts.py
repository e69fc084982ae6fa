"""The scripts an engine pod's helper containers run, as one ConfigMap mounted read-only
into them: the gate (remote/capgate.py, every pod's first init container) and a worker's
wait for its leader (remote/leader.py). One copy in the cluster, however many pods run it,
instead of the text inlined into each container's command (docs/kubernetes.md).
"""

from __future__ import annotations

from typing import Any

from sparkrack.export.access import labels
from sparkrack.export.cluster import ClusterOptions
from sparkrack.remote import script

NAME = "sparkrack-engine-scripts"
VOLUME = "sparkrack-scripts"
MOUNT = "/opt/sparkrack-scripts"
FILES = ("capgate", "leader")  # remote/NAME.py, each with the parts it imports


def scripts_config_map(cluster: ClusterOptions) -> dict[str, Any]:
    """The ConfigMap holding every file of FILES."""
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": NAME, **cluster.metadata(), "labels": labels(NAME)},
            "data": {f"{name}.py": script(name) for name in FILES}}


def scripts_volume() -> dict[str, Any]:
    """The pod's volume of the ConfigMap (files readable, none executable: run by python3)."""
    return {"name": VOLUME, "configMap": {"name": NAME, "defaultMode": 0o444}}


def scripts_mount() -> dict[str, Any]:
    """A helper container's read-only mount of the scripts."""
    return {"name": VOLUME, "mountPath": MOUNT, "readOnly": True}


def run_script(name: str) -> list[str]:
    """The command that runs remote/NAME.py from the mounted ConfigMap."""
    if name not in FILES:
        raise ValueError(f"{name} is not one of the ConfigMap's scripts")
    return ["python3", f"{MOUNT}/{name}.py"]
