"""Network faults of the rehearsal rack: cables cut, a partition from the operator, a
reinstalled host key, a netdev's MTU, the network daemon netplan renders with
(docs/rehearsal.md#faults). A mixin of RehearsalRack (rack.py): it uses the rack's node(),
switch and _fabric_settled()."""

from __future__ import annotations

from sparkrack.core.errors import SparkrackError, UsageError
from sparkrack.rehearsal import hostnet, nodefs, nodeproc
from sparkrack.rehearsal.cabling import read_cabling

# In the node: a new host key at $1 (ed25519, comment $3), the recorded one kept at $2 (once:
# a second rekey keeps the first one), sshd restarted; RESTORE_KEY puts $2 back.
NEW_KEY = r"""
[ -e "$2" ] || { cp -p "$1" "$2" && cp -p "$1.pub" "$2.pub"; } || exit 1
rm -f "$1" "$1.pub" && ssh-keygen -q -t ed25519 -N "" -C "$3" -f "$1" && systemctl restart ssh
"""
RESTORE_KEY = r"""
[ -e "$2" ] || exit 0
mv -f "$2" "$1" && mv -f "$2.pub" "$1.pub" && systemctl restart ssh
"""

# In the node: make each path ($1, $3, ...) a link to its target ($2, $4, ...), or no link
# when the target is empty (rehearsal.renderer on a running node; read at its next boot).
LINKS_SCRIPT = r"""
while [ $# -ge 2 ]; do
  if [ -n "$2" ]; then mkdir -p "$(dirname "/$1")" && ln -sfn "$2" "/$1" || exit 1
  elif [ -L "/$1" ]; then rm -f "/$1" || exit 1; fi
  shift 2
done
"""


class NetworkFaults:
    """The node as the network sees it: its cables, its partition, its host key, its netdevs."""

    def cut(self, name: str) -> None:
        """Pull every cable of the node (management and fabric): it answers nothing."""
        hostnet.unplug(self.node(name))

    def heal(self, name: str) -> None:
        """Plug the node's cables back in, as it is cabled (and end an isolation)."""
        node = self.node(name)
        hostnet.isolate(node, False)
        powered = nodeproc.init_pid(node) is not None
        hostnet.ensure_node_net(node, read_cabling(node), self.switch, powered=powered)
        if powered and (settled := self._fabric_settled(node, 15)):
            raise SparkrackError(settled)

    def isolate(self, name: str, on: bool = True) -> None:
        """The node falls silent to this machine (the operator's) while its peers still
        reach it, as a partition between the operator and the rack does; on=False ends it."""
        hostnet.isolate(self.node(name), on)

    def rekey(self, name: str, restore: bool = False) -> None:
        """Give the running node a new SSH host key, as a reinstall does (sshd restarted),
        the recorded one kept aside on its disk; restore puts that one back."""
        node = self.node(name)
        done = nodeproc.in_node(node, ["sh", "-c", RESTORE_KEY if restore else NEW_KEY, "sh",
                                       f"/{nodefs.HOST_KEY}", f"/{nodefs.KEPT_KEY}", name])
        if done.returncode != 0:
            raise SparkrackError(f"{name}: the host key was not "
                                 f"{'put back' if restore else 'changed'}: "
                                 f"{done.stderr.strip() or done.stdout.strip()}")

    def netdev_mtu(self, name: str, netdev: str, mtu: int) -> None:
        """Set one of the node's netdevs' MTU, as `ip link set` on the node would (kept while
        the node's network is: across reboots, not a new disk)."""
        done = nodeproc.in_node(self.node(name), ["ip", "link", "set", "dev", netdev, "mtu",
                                                  str(mtu)])
        if done.returncode != 0:
            raise SparkrackError(f"{name}: could not set {netdev}'s MTU to {mtu}: "
                                 f"{done.stderr.strip()}")

    def renderer(self, name: str, daemon: str) -> None:
        """The network daemon the node's netplan renders with from its next boot on
        (networkd or NetworkManager; the other one's units out). Kept on its disk."""
        node = self.node(name)
        if daemon not in nodefs.DAEMON_UNITS:
            raise UsageError(f"--daemon {daemon}: not a network daemon netplan renders with",
                             fix=f"choose one of {', '.join(nodefs.DAEMON_UNITS)}")
        if daemon == nodefs.NETWORK_MANAGER and not nodefs.has_network_manager():
            raise UsageError("NetworkManager is not installed on this machine (the nodes run "
                             "its programs)", fix="invoke rehearsal.up installs it (its daemon "
                             "kept off this machine)")
        if nodeproc.init_pid(node) is None:
            nodefs.write_network_daemon(node, daemon)
            return
        args = [item or "" for link in nodefs.daemon_links(daemon) for item in link]
        done = nodeproc.in_node(node, ["sh", "-c", LINKS_SCRIPT, "sh", *args])
        if done.returncode != 0:
            raise SparkrackError(f"{name}: could not set the network daemon: "
                                 f"{done.stderr.strip()}")
