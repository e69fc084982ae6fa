"""One node's engine environment, computed: the variables of nccl.env (NCCL, Gloo,
TensorPipe) and <engine>.env, each with its source; roles nccl_env and engine_env print
them (docs/engines.md#where-each-variable-comes-from).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sparkrack.engineenv import checks
from sparkrack.engineenv.gid import GidIndex, gid_index
from sparkrack.engineenv.nodeenv import VIEW_INVENTORY, EnvVar, NodeEnv
from sparkrack.facts.roce import RoceFacts, socket_address
from sparkrack.inventory import Inventory, Node
from sparkrack.inventory.schema import FrozenMapping

if TYPE_CHECKING:
    from sparkrack.facts.provision import ProvisionFacts

ETC_DIR = "/etc/sparkrack"
NCCL_FILE = f"{ETC_DIR}/nccl.env"
# The Hugging Face token's folder (0700) and file (0600), written by role engine_env, never
# a rank's environment (`docker inspect` shows that): every rank gets HF_TOKEN_PATH naming
# the file and the folder bound read-only at the same path; huggingface_hub (>= 0.23)
# reads the token there.
TOKEN_DIR = f"{ETC_DIR}/hf"
TOKEN_FILE = f"{TOKEN_DIR}/token"
TOKEN_SOURCE = ("role engine_env (the Hugging Face token's file, 0600, written from the "
                "provisioning operator's HF_TOKEN; bound read-only into every rank)")
# What the transport needs fixed on GB10 over RoCE, and why.
FIXED = (("NCCL_IB_DISABLE", "0", "RoCE, not sockets"),
         ("NCCL_CROSS_NIC", "1", "the twins sit on different subnets"),
         ("NCCL_NVLS_ENABLE", "0", "no NVLink SHARP on GB10"),
         ("NCCL_CUMEM_ENABLE", "0", "unified memory"),
         # what NCCL uses says itself only at INFO: sparkrack reads these lines of each
         # rank at every start (logs/nccluse.py), `invoke logs` leaves them out
         ("NCCL_DEBUG", "INFO", "the transport and HCAs each rank uses, read at start"),
         ("NCCL_DEBUG_SUBSYS", "INIT,NET", "only the init and network lines"))
# An engine's own variables by its image key, before HF_TOKEN_PATH: (name, its value on a
# node, source). SGLang's indexer budget bounds the DSA indexer's scratch, which
# --mem-fraction-static does not count (SGLang's default 0.2 ratchets unified memory down on
# prompts above ~100K); its allocator setting is the field report's 512K lane's.
OWN = {"sglang": (("SGLANG_DSA_MQA_LOGITS_FREE_MEM_FRACTION",
                   lambda node: str(node.vars.indexer_mem_fraction),
                   "inventory indexer_mem_fraction"),
                  ("PYTORCH_CUDA_ALLOC_CONF", lambda node: "expandable_segments:False",
                   "role engine_env (the field report's 512K lane)"))}


def engine_env_file(key: str) -> str:
    """The env file of the engine whose image key is key."""
    return f"{ETC_DIR}/{key}.env"


class EngineEnv:
    """A node's engine environment: its files, and their variables with their sources; the
    GID index is chosen once per GID table read (the role's check, its template and `up`'s
    judgement ask the same choice)."""

    etc_dir = ETC_DIR
    nccl_file = NCCL_FILE
    token_dir = TOKEN_DIR
    token_file = TOKEN_FILE
    file = staticmethod(engine_env_file)

    def __init__(self, inventory: Inventory, node: Node):
        self.node = node
        self.rack_gid_index = inventory.vars.nccl_ib_gid_index
        self._gid: tuple[RoceFacts | None, GidIndex] | None = None  # (the table, its choice)

    def gid(self, roce: RoceFacts | None = None) -> GidIndex:
        """The node's NCCL GID index and why (gid.py); roce None: not read from the node.
        Chosen once per table: asked again with the same roce, the same choice."""
        if self._gid is None or self._gid[0] is not roce:
            self._gid = roce, gid_index(self.node, self.rack_gid_index, roce)
        return self._gid[1]

    def files(self, key: str) -> list[str]:
        """The env files the engine of image key key reads, in the order they merge."""
        return [NCCL_FILE, engine_env_file(key)]

    def check(self, name: str, facts: ProvisionFacts) -> str:
        """Why check name of checks.py fails on the node ('' when it holds): role nccl_env
        asserts each."""
        return checks.check(name, self.node, self.gid(facts.roce), facts)

    def failing(self, facts: ProvisionFacts) -> list[str]:
        """Why each check of checks.py that fails on the node fails, in the role's order."""
        return checks.failing(self.node, self.gid(facts.roce), facts)

    def nccl(self, roce: RoceFacts | None = None) -> dict[str, EnvVar]:
        """nccl.env's variables, in file order, the GID index from roce (None: the
        inventory's)."""
        node, gid = self.node.vars, self.gid(roce)
        address = socket_address(self.node)
        advertised = ("inventory roce_addr (this node's fabric address)"
                      if address == self.node.roce_addr else "inventory ansible_host (the "
                      "address on nccl_socket_ifname, the management port)")
        ifname = "inventory nccl_socket_ifname"
        found = [("NCCL_IB_HCA", ",".join(node.nccl_ib_hca),
                  "inventory nccl_ib_hca (both twin HCAs; one alone caps at ~100G)"),
                 ("NCCL_IB_GID_INDEX", str(gid.index), gid.source),
                 ("NCCL_SOCKET_IFNAME", node.nccl_socket_ifname, ifname),
                 ("GLOO_SOCKET_IFNAME", node.nccl_socket_ifname, ifname),
                 ("TP_SOCKET_IFNAME", node.nccl_socket_ifname, ifname),
                 # the address a rank advertises to its peers; unset, an engine takes the
                 # default route's, the management network's, and the group hangs after
                 # NCCL init
                 ("SGLANG_HOST_IP", address, advertised),
                 ("VLLM_HOST_IP", address, advertised),
                 *((name, value, f"role nccl_env ({why})") for name, value, why in FIXED)]
        return {name: EnvVar(value, source, NCCL_FILE) for name, value, source in found}

    def engine(self, key: str) -> dict[str, EnvVar]:
        """The variables of the env file of the engine whose image key is key."""
        file = engine_env_file(key)
        found = {name: EnvVar(value(self.node), source, file)
                 for name, value, source in OWN.get(key, ())}
        return {**found, "HF_TOKEN_PATH": EnvVar(TOKEN_FILE, TOKEN_SOURCE, file)}

    def variables(self, key: str, roce: RoceFacts | None = None) -> dict[str, EnvVar]:
        """Every variable of the node's env files for the engine of image key key, in the
        order the files merge (nccl.env first)."""
        return {**self.nccl(roce), **self.engine(key)}


def inventory_views(inventory: Inventory, key: str) -> dict[str, NodeEnv]:
    """Every node's environment for the engine of image key key as the inventory says it
    (no node read: the GID index is the inventory's)."""
    return {node.name: NodeEnv(node.name, VIEW_INVENTORY,
                               FrozenMapping(EngineEnv(inventory, node).variables(key)))
            for node in inventory.nodes}
