"""Extra nodes of the rehearsal rack: bare Sparks outside the inventory (a new or replacement
node to onboard), added, wiped and removed (docs/rehearsal.md#faults; their record:
extras.py). A mixin of RehearsalRack (rack.py): it uses the rack's nodes, switch,
poweron(), wait_booted(), _write_files() and _write_state().
"""

from __future__ import annotations

import shutil

from sparkrack.core.errors import UsageError
from sparkrack.fleet.netguard import REHEARSAL_STATE_FILE
from sparkrack.rehearsal import hostnet, hostprep, nodefs, nodeproc
from sparkrack.rehearsal.cabling import read_cabling
from sparkrack.rehearsal.extras import ExtraNode, check_extra, read_extras, write_extras
from sparkrack.rehearsal.layout import NodeLayout


class ExtraNodes:
    """Bare nodes outside the inventory, booted, shown and shut down with rack 1."""

    def add_node(self, name: str, address: str, *, driver_version: str | None = None,
                 missing_hcas: tuple[str, ...] | list[str] = (), kernel: str | None = None
                 ) -> NodeLayout:
        """Add a bare node outside the inventory, boot it and wait for its sshd.

        Adding the same node again with the same settings is a no-op (booting it if it is
        down); other settings for a known name are refused."""
        if not self.first:
            raise UsageError(f"extra nodes join rehearsal rack 1, not rack {self.layout.number}",
                             fix="pass -i inventory/rehearsal")
        if REHEARSAL_STATE_FILE.exists() is False:
            raise UsageError("the rehearsal rack is down", fix="run `invoke rehearsal.up` first")
        extra = ExtraNode(name, address, driver_version, tuple(sorted(set(missing_hcas))), kernel)
        known = self.extras.get(name)
        if known is not None:
            if known != extra:
                raise UsageError(f"extra node {name} exists with other settings "
                                 f"({known.describe()})",
                                 fix=f"`invoke rehearsal.remove-node {name}` first")
            if nodeproc.init_pid(known.layout) is None:
                self.poweron(name)
            return known.layout
        check_extra(extra, {n.name for n in self.all_nodes},
                    {n.address for n in self.all_nodes})
        self.extras[name] = extra
        write_extras({**read_extras(), name: extra})
        node = extra.layout
        if nodeproc.is_running(node):  # a leftover of the same name: cut it first
            nodeproc.power_cut(node)
        nodefs.wipe(node)
        self._boot_bare(extra)
        self.say(f"{name}: bare node up at {address} ({extra.describe()}); its host key is "
                 "in no known_hosts")
        return node

    def wipe(self, name: str) -> None:
        """Power an extra node off, delete its disk and boot it bare (a new host key)."""
        extra = self._extra(name, "wipe")
        node = extra.layout
        nodeproc.power_cut(node)
        nodefs.wipe(node)
        self._boot_bare(extra)

    def remove_node(self, name: str) -> None:
        """Power an extra node off, delete its disk and network, forget it."""
        extra = self._extra(name, "remove")
        node = extra.layout
        nodeproc.shutdown(node, timeout=10)
        hostnet.remove_node_net(node)
        nodefs.wipe(node)
        for root in node.cgroups():
            nodeproc.remove_cgroup_tree(root)
        shutil.rmtree(node.run, ignore_errors=True)
        del self.extras[name]
        remaining = read_extras()
        remaining.pop(name, None)
        write_extras(remaining)
        if REHEARSAL_STATE_FILE.exists():
            self._write_state()

    def _extra(self, name: str, verb: str) -> ExtraNode:
        """The extra node called name; UsageError for an inventory node or an unknown one."""
        if name in {n.name for n in self.nodes}:
            raise UsageError(f"{name} is a node of the inventory {self.inventory.path}: only "
                             f"extra nodes can be {verb}d here",
                             fix="add one with `invoke rehearsal.add-node NAME --address ADDR`")
        if name not in self.extras:
            known = ", ".join(sorted(self.extras)) or "none"
            raise UsageError(f"no extra node {name!r} (extra nodes: {known})",
                             fix="add one with `invoke rehearsal.add-node NAME --address ADDR`")
        return self.extras[name]

    def _boot_bare(self, extra: ExtraNode) -> None:
        """Lay down a bare node's files (fresh host key), plug it in, boot it, wait."""
        node = extra.layout
        self._write_files(node, hostprep.client_key())
        hostnet.ensure_node_net(node, read_cabling(node), self.switch)
        self._write_state()
        nodeproc.launch(node)
        self.wait_booted([node])
