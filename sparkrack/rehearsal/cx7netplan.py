"""NVIDIA's own netplan file on a rehearsal node, in each of its public forms (docs/rehearsal.md).

Nodes set up with NVIDIA's DGX Spark playbooks carry /etc/netplan/40-cx7.yaml (mode 600):
the playbook asset puts link-local IPv4 on both ports' first path, the switch playbook
static addresses on the first port's two paths. netplan merges it with sparkrack's
drop-in, so a netdev named in both carries both files' addresses (and a GID pair for
each); role fabric takes such netdevs over. The static form's addresses are stand-ins
inside the rehearsal's own subnet (10.77.5.N, 10.77.6.N), never a real network's.
"""

from __future__ import annotations

from sparkrack.rehearsal.layout import NodeLayout

PATH = "etc/netplan/40-cx7.yaml"
FORMS = ("link-local", "static", "none")
HEADER = "# NVIDIA DGX Spark playbook: ConnectX-7 (rehearsal rack stand-in)\n"


def text(form: str, node: NodeLayout) -> str | None:
    """The file of a form for node (None for `none`: no file). ValueError for another."""
    host = node.address.rsplit(".", 1)[1]
    if form == "link-local":
        return HEADER + ("network:\n  version: 2\n  ethernets:\n"
                         "    enp1s0f0np0:\n      link-local: [ ipv4 ]\n"
                         "    enp1s0f1np1:\n      link-local: [ ipv4 ]\n")
    if form == "static":
        return HEADER + ("network:\n  version: 2\n  ethernets:\n"
                         f"    enp1s0f0np0:\n      addresses: [10.77.5.{host}/24]\n"
                         f"    enP2p1s0f0np0:\n      addresses: [10.77.6.{host}/24]\n")
    if form == "none":
        return None
    raise ValueError(f"{form!r} is not one of NVIDIA's forms ({', '.join(FORMS)})")


def install_argv(form: str, node: NodeLayout) -> list[str]:
    """An argv run in the node that puts the form's file in place (0600), or removes it."""
    content = text(form, node)
    target = f"/{PATH}"
    if content is None:
        return ["rm", "-f", target]
    return ["sh", "-c", 'umask 077 && printf "%s" "$1" > "$2.new" && mv "$2.new" "$2"',
            "sh", content, target]
