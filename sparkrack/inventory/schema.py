"""The inventory schema: every key an inventory may set, its type, default and meaning.
`RackVars` is the table of rack vars (group_vars), `HOST_SPECS` the keys of one host,
`SPECS` both by name with the scope where each may be set; every text value has a kind,
checked at load (docs/inventory.md#values).
"""

from __future__ import annotations

import typing
from collections.abc import Iterator, Mapping
from dataclasses import MISSING, dataclass, field, fields
from typing import Any

from sparkrack.inventory.pdu import EXAMPLE as PDU_EXAMPLE
from sparkrack.inventory.pdu import PduConfig, parse_pdu
from sparkrack.inventory.ranges import RANGES, Range
from sparkrack.inventory.values import (
    ABS_PATH,
    ARGV_WORD,
    HCA_NAME,
    IFNAME,
    IMAGE_REF,
    KIND_CHECKS,
    LOCAL_PATH,
    MODEL_NAME,
    RACK_NAME,
    USER_NAME,
    address_problem,
    is_address,
)

ENGINES = ("sglang", "vllm")
ADDRESS = "address"  # type of keys holding an IP address or a DNS host name
# roce_addr, roce_twin_addr: read as an address, refused unless IPv4 (or ansible_host's,
# the management address) once the host is whole (loader._check_fabric)
FABRIC_ADDRESS = "fabric address"
PDU = "pdu"  # type of the `pdu:` section (inventory/pdu.py)
EngineFiles = typing.NewType("EngineFiles", Mapping[str, str])  # engine -> local file; may be {}
SOURCES = EngineFiles

RACK = "rack"  # rack-wide: group vars only
NODE = "node"  # rack var that a host may override
CONNECTION = "connection"  # SSH connection key: group or host vars
HOST = "host"  # one host's own key: host vars only


class FrozenMapping(Mapping[str, Any]):
    """A read-only, hashable mapping, so that frozen dataclasses holding it stay hashable."""

    def __init__(self, items: Mapping[str, Any]):
        self._items = dict(items)

    def __getitem__(self, key: str) -> Any:
        return self._items[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __hash__(self) -> int:
        return hash(frozenset(self._items.items()))

    def __repr__(self) -> str:
        return f"FrozenMapping({self._items!r})"



def plain(value: Any) -> Any:
    """Inventory values as plain YAML-like data: mappings as dicts, tuples as lists."""
    if isinstance(value, Mapping):
        return {key: plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(item) for item in value]
    return value


def _var(default: Any, meaning: str, *, scope: str = RACK, kind: str | None = None,
         choices: tuple[str, ...] | None = None) -> Any:
    """A RackVars field: its default, one-line meaning, scope, choices, and the kind of its
    text (each item's, for lists and mappings). A number's range is in ranges.py."""
    metadata = {"meaning": meaning, "scope": scope, "kind": kind, "choices": choices}
    if isinstance(default, Mapping):
        frozen = FrozenMapping(default)
        return field(default_factory=lambda: frozen, metadata=metadata)
    return field(default=default, metadata=metadata)


# The burn's load: a bf16 matmul on the GPU for argv[1] seconds (burn_command; the
# Kubernetes node agent runs it in its pod)
TORCH_LOAD = ("import collections,sys,time,torch; a=torch.ones(8192,8192,device='cuda',"
              "dtype=torch.bfloat16); e=time.time()+float(sys.argv[1]); collections.deque(("
              "a@a for _ in iter(lambda: time.time()<e, False)),0); torch.cuda.synchronize()")


@dataclass(frozen=True)
class RackVars:
    """Rack vars after merging the inventory's files; each field is one row of the schema."""

    rack_name: str = _var("sparkrack", "name of the rack, shown in status output and logs",
                          kind=RACK_NAME)
    tp_size: int = _var(8, "tensor-parallel size; must equal the number of nodes")
    clock_cap_mhz: int = _var(
        2200, "GPU clock cap (nvidia-smi -lgc 0,N), the only power lever on GB10")
    power_strip_watts: int = _var(1440, "rating of the one power strip feeding the rack")
    power_margin_watts: int = _var(100, "headroom kept below the strip rating")
    node_watts_capped: int = _var(
        178, "one node's sustained draw with the clock cap (field: rack 1,350-1,425 W)")
    node_watts_uncapped: int = _var(
        217, "one node's sustained draw uncapped, long prefill (field: rack 1,735 W)")
    restart_batch_size: int = _var(2, "nodes restarted at once in a rolling restart")
    nccl_ib_hca: tuple[str, ...] = _var(
        ("rocep1s0f0", "roceP2p1s0f0"),
        "NCCL_IB_HCA: both twin HCAs of the QSFP port (one alone caps at ~100G)", scope=NODE,
        kind=HCA_NAME)
    nccl_ib_gid_index: int = _var(
        3, "NCCL_IB_GID_INDEX when no RoCE v2 IPv4 GID is probed, or set per node",
        scope=NODE)
    nccl_socket_ifname: str = _var(
        "enp1s0f0np0", "NCCL/GLOO/TP_SOCKET_IFNAME: the node's CX7 netdev", scope=NODE,
        kind=IFNAME)
    fabric_prefix: int = _var(
        24, "prefix length of the fabric subnets (role fabric: roce_addr/N on "
        "nccl_socket_ifname, roce_twin_addr/N on its twin)")
    fabric_mtu: int = _var(9000, "MTU of the cabled ConnectX-7 netdevs (the fabric switch's "
                           "jumbo frames)")
    fabric_link_gbit: int = _var(
        200, "the rate every fabric link should negotiate (ports/1/rate, `invoke "
        "fabric.check`): 200 on a 200G switch port, 100 on a 400G->4x100G breakout")
    images: Mapping[str, str] = _var(
        {"sglang": "lmsysorg/sglang:v0.5.22-cu130", "vllm": "vllm/vllm-openai:v0.33.0"},
        "container image ref per engine (sglang, vllm)", kind=IMAGE_REF)
    model_path: str = _var("/models/GLM-5.3-NVFP4", "model directory on every node",
                           kind=ABS_PATH)
    model_name: str = _var("GLM-5.3", "model name served by the OpenAI-compatible API",
                           kind=MODEL_NAME)
    hf_token_required: bool = _var(
        False, "the model needs a Hugging Face token (HF_TOKEN): an exported lane's pods do "
        "not start without the Secret holding it (false: the token is used when given)")
    ssh_connect_timeout: float = _var(5.0, "seconds to wait for an SSH connection")
    ssh_command_timeout: float = _var(60.0, "seconds a remote command may run by default")
    transfer_stall_timeout: float = _var(
        30.0, "seconds a hop of an image or weights copy waits on a silent neighbour (a cut "
        "link) before giving it up; the nodes after it get a new chain")
    known_hosts_file: str = _var(
        "known_hosts", "SSH known_hosts file; relative paths resolve against the inventory",
        kind=LOCAL_PATH)
    ssh_authorized_keys_file: str = _var(
        ".ssh/authorized_keys", "the file the node's sshd reads the SSH user's authorized "
        "keys from (its AuthorizedKeysFile): absolute, or relative to the user's home; "
        "role watchdog_key adds the watchdog's key there", scope=NODE, kind=LOCAL_PATH)
    indexer_mem_fraction: float = _var(
        0.01, "SGLANG_DSA_MQA_LOGITS_FREE_MEM_FRACTION (bounds the DSA indexer scratch)")
    rehearsal: bool = _var(False, "true for the local rehearsal rack")
    nccl_ib_gid_probe: bool = _var(
        True, "probe NCCL_IB_GID_INDEX per node (RoCE v2, IPv4-mapped GID); false: use "
        "nccl_ib_gid_index (a node's own nccl_ib_gid_index always wins)")
    image_sources: EngineFiles = _var(
        {}, "docker-save tar per engine on this machine, the source of that engine's image "
        "for every node (engines not listed: the head node's image)", kind=LOCAL_PATH)
    rehearsal_image_sources: EngineFiles = _var(
        {"sglang": "/var/lib/sparkrack/rehearsal/images/sglang.tar",
         "vllm": "/var/lib/sparkrack/rehearsal/images/vllm.tar"},
        "image_sources used instead when rehearsal is true (the stub engine images)",
        kind=LOCAL_PATH)
    rehearsal_switch_mtu: int = _var(
        1500, "the rehearsal switch's port MTU as the operator set it up (1500: as a switch "
        "ships; `invoke rehearsal.switch` changes it)")
    burn_command: tuple[str, ...] = _var(
        ("docker", "run", "--rm", "--gpus", "all", "--entrypoint", "python3", "{image}", "-c",
         TORCH_LOAD, "{seconds}"),
        "load put on each GPU by `invoke burn` ({seconds}: duration, {image}: the first "
        "engine image)", kind=ARGV_WORD)
    rehearsal_burn_command: tuple[str, ...] = _var(
        ("gpu-sim", "load", "--seconds", "{seconds}"),
        "burn_command used instead when rehearsal is true (the simulated GPU)",
        kind=ARGV_WORD)
    rehearsal_rack: int = _var(
        1, "which rehearsal rack of this machine a rehearsal inventory describes: 1, or 2 for "
        "a second rack beside it (its own addresses, bridges and state; a fleet's "
        "rehearsal)")
    api_port: int = _var(
        0, "TCP port rank 0 serves the OpenAI-compatible API on, whichever engine runs, so "
        "that a roll between lanes keeps the rack's address for its clients (0: each engine "
        "file's own http port: SGLang 30000, vLLM 8000)")
    drain_budget_s: int = _var(
        120, "seconds `down`, `roll` and `restart-rack` let rank 0 finish its in-flight "
        "requests after SIGTERM before it is stopped (vLLM's --shutdown-timeout; 0: abort "
        "them at once, vLLM's own default)")
    watchdog_action: str = _var(
        "stop", "what the watchdog service does with a broken TP group: stop it, or restart "
        "it in order within the restart budget", choices=("stop", "restart"))
    watchdog_restart_budget: int = _var(
        3, "restarts the watchdog may make within watchdog_restart_window_minutes; past it "
        "the group is stopped and the watchdog says why (0: never restart)")
    watchdog_restart_window_minutes: float = _var(
        30.0, "the sliding window of the restart budget, in minutes")
    watchdog_stall_budget_s: int = _var(
        0, "seconds a TP group may have work pending without progress (tokens, finished "
        "requests, its KV cache filling) before the watchdog stops it as stalled (0: each "
        "engine profile's stall_budget_s)")
    watchdog_slow_percent: int = _var(
        25, "percent slower than its own baseline (decode time per step longer, or prefill "
        "rate lower, from rank 0's metrics) a group may serve for watchdog_slow_for_s before "
        "the watchdog says the rack serves slower and names the node whose GPU differs (0: "
        "never)")
    watchdog_slow_for_s: int = _var(
        300, "seconds a group must serve watchdog_slow_percent slower, without a break, "
        "before the watchdog says so")
    watchdog_power_cycle_samples: int = _var(
        5, "consecutive polls (one a second) a GPU must read latched, with no thermal "
        "slowdown explaining it, before the watchdog power-cycles its node")
    watchdog_power_cycle_window_minutes: float = _var(
        1440.0, "at most one power cycle of a node by the watchdog within this many minutes; "
        "a cause back inside it is held back and said")
    watchdog_metrics_port: int = _var(
        9478, "TCP port of the watchdog's Prometheus metrics (/metrics)")
    pdu: PduConfig | None = _var(
        None, "the switched, metered PDU feeding the rack: name, address, outlets per node, "
        "the environment variables of its SNMPv3 credentials (inventory/pdu.py); none: the "
        "strip is only projected")
    k8s_cpu: int = _var(
        16, "CPU cores each pod of an exported lane requests and is limited to (invoke "
        "export: Guaranteed QoS; a GB10 has 20)")
    k8s_memory_gib: int = _var(
        100, "GiB of memory each pod of an exported lane requests and is limited to, its "
        "/dev/shm included (a GB10's pool is 121.7 GiB; CUDA allocations are not counted "
        "against a cgroup there)")


@dataclass(frozen=True)
class Spec:
    """One inventory key: its type, default (None: none), meaning, scope and choices; a
    number's range is RANGES[name] (ranges.py)."""

    name: str
    type: Any
    default: Any
    meaning: str
    scope: str
    choices: tuple[str, ...] | None = None
    sample: Any = None
    kind: str | None = None  # of the text (each item's): a key of KIND_CHECKS

    def check(self, value: Any) -> Any:
        """Return the value in this key's type; raise ValueError naming what was expected,
        or what makes a text value unsafe for its kind."""
        if self.type in (ADDRESS, FABRIC_ADDRESS) and isinstance(value, str) and "%" in value:
            raise ValueError(f"{self.name}: {describe(value)} {address_problem(value)}")
        if self.type == PDU:
            return None if value is None else parse_pdu(value)
        converted = _convert(self.type, value)
        if converted is None or (self.choices is not None and converted not in self.choices):
            raise ValueError(f"{self.name}: expected {self.expected()}, got {describe(value)}")
        problem = self.range.problem(converted) if self.range is not None else None
        if problem:
            raise ValueError(f"{self.name}: {problem}")
        if self.kind is not None:
            items = (converted.items() if isinstance(converted, Mapping)
                     else ((None, item) for item in converted) if isinstance(converted, tuple)
                     else ((None, converted),))
            for key, item in items:
                problem = KIND_CHECKS[self.kind](item)
                if problem:
                    where = f"{self.name}: {key}" if key is not None else self.name
                    raise ValueError(f"{where}: {describe(item)} {problem}")
        return converted

    @property
    def range(self) -> Range | None:
        """The range of a number (ranges.py), None for other keys."""
        return RANGES.get(self.name) if self.type in (int, float) else None

    def expected(self) -> str:
        """What a valid value looks like, e.g. 'an integer in 1..8' or 'one of: stop,
        restart'."""
        if self.choices is not None:
            return "one of: " + ", ".join(self.choices)
        within = f" in {self.range.text()}" if self.range is not None else ""
        return _EXPECTED[self.type] + within

    def warning(self, value: Any) -> str | None:
        """One line on a legal but unusual value (ranges.py's usual band), or None."""
        said = self.range.warning(value) if self.range is not None else None
        return f"{self.name}: {said}" if said else None

    def example(self) -> str:
        """A line that would be valid for this key, for error fixes."""
        if self.type == PDU:
            return PDU_EXAMPLE
        value = self.default if self.sample is None else self.sample
        text = yaml_text(value)
        if len(text) > EXAMPLE_UP_TO:  # a long default (burn_command's load) is the docs'
            return f"its form and default: {self.name} in docs/inventory.md#values"
        return f"e.g. {self.name}: {text}"


EXAMPLE_UP_TO = 70  # characters of an example value a fix spells out

_EXPECTED = {
    str: "a non-empty string",
    ADDRESS: "an IP address or hostname",
    FABRIC_ADDRESS: "an IPv4 address",
    int: "an integer",
    float: "a number",
    bool: "true or false",
    tuple[str, ...]: "a non-empty list of names",
    Mapping[str, str]: f"a mapping of engine ({', '.join(ENGINES)}) to image ref",
    SOURCES: f"a mapping of engine ({', '.join(ENGINES)}) to a file path on this machine",
}


def _convert(type_: Any, value: Any) -> Any:
    """The value as type_, or None when it does not have that type."""
    if type_ is bool:
        return value if isinstance(value, bool) else None
    if type_ is int:
        return value if isinstance(value, int) and not isinstance(value, bool) else None
    if type_ is float:
        return float(value) if isinstance(value, (int, float)) and not isinstance(
            value, bool) else None
    if type_ is str:
        return value if _is_name(value) else None
    if type_ in (ADDRESS, FABRIC_ADDRESS):
        return value if is_address(value) else None
    if type_ == tuple[str, ...]:
        ok = isinstance(value, (list, tuple)) and value and all(_is_name(item) for item in value)
        return tuple(value) if ok else None
    if type_ == SOURCES:
        ok = (isinstance(value, Mapping) and set(value) <= set(ENGINES)
              and all(_is_name(path) for path in value.values()))
        return FrozenMapping(value) if ok else None
    ok = (isinstance(value, Mapping) and value and set(value) <= set(ENGINES)
          and all(_is_name(ref) for ref in value.values()))
    return FrozenMapping(value) if ok else None


def _is_name(value: Any) -> bool:
    """Whether value is a non-blank string."""
    return isinstance(value, str) and bool(value.strip())




def describe(value: Any) -> str:
    """A YAML value as shown after 'got' in messages: 'fast', 42, null, [a, b]."""
    text = repr(value) if isinstance(value, str) else yaml_text(value)
    return text if len(text) <= 40 else text[:37] + "..."


def yaml_text(value: Any) -> str:
    """A value written the way YAML flow style would write it."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(yaml_text(item) for item in value) + "]"
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{key}: {yaml_text(item)}" for key, item in value.items()) + "}"
    return str(value)


def _rack_specs() -> tuple[Spec, ...]:
    """The RackVars fields as specs."""
    hints = {**typing.get_type_hints(RackVars), "pdu": PDU}
    return tuple(
        Spec(f.name, hints[f.name], f.default if f.default is not MISSING else f.default_factory(),
             **f.metadata)
        for f in fields(RackVars))


HOST_SPECS = (
    Spec("ansible_host", ADDRESS, None, "management address for SSH; default: the host name",
         HOST, sample="192.0.2.11"),
    Spec("ansible_port", int, 22, "SSH port", CONNECTION),
    Spec("ansible_user", str, "root", "SSH user", CONNECTION, kind=USER_NAME),
    Spec("ansible_ssh_private_key_file", str, None,
         "SSH private key; ~ expands, relative paths resolve against the inventory",
         CONNECTION, sample="~/.ssh/sparkrack", kind=LOCAL_PATH),
    Spec("rank", int, None, "tensor-parallel rank; 0 is the head (HTTP, dist-init)", HOST,
         sample=0),
    Spec("roce_addr", FABRIC_ADDRESS, None, "IPv4 address on the RoCE fabric; default: "
         "ansible_host (the management address: no fabric address)", HOST,
         sample="198.51.100.11"),
    Spec("roce_twin_addr", FABRIC_ADDRESS, None, "IPv4 address on the second PCIe path's "
         "netdev of the cabled port (the twin of nccl_socket_ifname); default: none (MTU "
         "only)", HOST,
         sample="198.51.101.11"),
    Spec("spare", bool, False, "a staged node outside the TP group (no rank); `invoke "
         "onboard NAME --replace OLD` makes it a member", HOST, sample=True),
)

RACK_SPECS = _rack_specs()

SPECS: Mapping[str, Spec] = FrozenMapping({spec.name: spec for spec in RACK_SPECS + HOST_SPECS})
