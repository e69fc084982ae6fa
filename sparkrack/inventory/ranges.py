"""The range of every number an operator sets, why it holds and where the figures come from:
the inventory's vars (schema.py), the `pdu:` section, the engine profiles' settings. One
table, `RANGES`, read by the loaders (a value outside its range is refused at its line; one
inside it but outside what the field ran or measured is one line of warning) and by the
docs' table (docs/inventory.md#ranges, checked against it by a test).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from sparkrack.remote.capjudge import CAP_FLOOR_MHZ

GB10_MAX_SM_MHZ = 3003  # clocks.max.sm as nvidia-smi reports it on a GB10
FIELD_CAP_MHZ = 2200  # the cap the field report's rack runs (1,350-1,425 W of 1,440)
RACK_NODES = 8  # the field report's rack: eight DGX Sparks, TP8, one switch


@dataclass(frozen=True)
class Range:
    """The values one number may take. low/high: the bounds (None: none); low_open: low
    itself is refused (a timeout above 0). below/over: why a value under low / over high is
    refused, in a few words. usual: the band the field ran or measured; warn_below /
    warn_over: why a value outside it (still legal) is worth one line of warning."""

    low: float | None
    high: float | None
    unit: str
    source: str
    below: str = ""
    over: str = ""
    low_open: bool = False
    usual: tuple[float | None, float | None] = (None, None)
    warn_below: str = ""
    warn_over: str = ""

    def text(self) -> str:
        """The range as written in messages: '1100..3002 MHz', '0..60 s, 0 excluded'."""
        unit = f" {self.unit}" if self.unit else ""
        low, high = self.low, self.high
        if low is not None and high is not None:
            excluded = f", {number(low)} excluded" if self.low_open else ""
            return f"{number(low)}..{number(high)}{unit}{excluded}"
        if low is not None:
            return f"{'over' if self.low_open else 'at least'} {number(low)}{unit}"
        return f"at most {number(high)}{unit}" if high is not None else "any number"

    def problem(self, value: float) -> str | None:
        """Why value is refused ('9000 is outside 1100..3002 MHz: ...'), or None."""
        low, high = self.low, self.high
        if low is not None and (value <= low if self.low_open else value < low):
            why = self.below
        elif high is not None and value > high:
            why = self.over
        else:
            return None
        return f"{number(value)} is outside {self.text()}" + (f": {why}" if why else "")

    def warning(self, value: float) -> str | None:
        """Why a legal value is unusual, or None."""
        low, high = self.usual
        if low is not None and value < low and self.warn_below:
            return f"{number(value)} {self.unit} {self.warn_below}".replace("  ", " ")
        if high is not None and value > high and self.warn_over:
            return f"{number(value)} {self.unit} {self.warn_over}".replace("  ", " ")
        return None


def number(value: float) -> str:
    """A number as written in messages: 1, not 1.0."""
    return str(int(value)) if float(value).is_integer() else str(value)


_PORT = Range(1, 65535, "", "TCP and UDP port numbers are 16 bits, and 0 names no port "
              "(RFC 793, RFC 768)", below="0 is no port", over="a port number is 16 bits")
_BRICK = ("DGX Spark at the wall: 25-37 W idle, 60-100 W serving (public reviews); its "
          "USB-PD power brick is rated 240 W (NVIDIA's specifications)")
_STALL = ("the engines' own watchdogs end a hung group first: SGLang's --watchdog-timeout "
          "(300 s), NCCL's (600 s) (docs/field-notes.md)")

RANGES: Mapping[str, Range] = {
    # --- group_vars: the rack -----------------------------------------------------------
    "tp_size": Range(
        1, RACK_NODES, "", "the field report's rack: eight GB10s at TP8 on one CRS804 switch; "
        "a larger TP group over RoCE is unmeasured (the safe side: eight)",
        below="a TP group has at least one rank", over="a rack is eight DGX Sparks"),
    "clock_cap_mhz": Range(
        CAP_FLOOR_MHZ, GB10_MAX_SM_MHZ - 1, "MHz",
        "GB10's maximum SM clock, 3,003 MHz (clocks.max.sm); the latched state, 481-858 MHz "
        "under load (spark-gpu-throttle-check), which the burn calls latched under 1,000 MHz; "
        "the driver snaps a lock down to its clock step (2,200 -> 2,190); the field report's "
        "2,200 MHz: 1,350-1,425 W for the rack, decode speed unchanged; 2,000 MHz against "
        "overheating (a community report)",
        below="a GPU held there under load reads as latched (under 1,000 MHz; latched GB10s "
        "run 481-858)",
        over="at or above GB10's maximum SM clock (3,003 MHz) a burn cannot tell the cap from "
        "no cap",
        usual=(2000, FIELD_CAP_MHZ),
        warn_below="is below the 2,000-2,200 MHz the field ran: its decode speed is unmeasured",
        warn_over="is above the 2,200 MHz the field measured (1,350-1,425 W on the 1,440 W "
        "strip): the draw here is unmeasured, node_watts_capped is 2,200's, and over ~2,420 a "
        "burn cannot tell it from no cap"),
    "power_strip_watts": Range(
        240, 22000, "W", "a DGX Spark's 240 W power brick (NVIDIA); a 3-phase 32 A rack PDU at "
        "400 V carries 22 kW (IEC 60309, arithmetic); the field report's strip is 1,440 W",
        below="a strip that cannot feed one Spark's 240 W brick",
        over="more than a 3-phase 32 A rack PDU carries"),
    "power_margin_watts": Range(
        0, 22000, "W", "the field report's rack kept 100 W: it drew 1,350-1,425 W capped of its "
        "1,440 W strip; the margin must also stay below power_strip_watts (checked at load)",
        below="a margin is no negative draw", over="more than any rack PDU carries"),
    "node_watts_capped": Range(
        25, 240, "W", "178 W: the field report's rack under long prefill at the 2,200 MHz cap "
        "(1,350-1,425 W / 8); " + _BRICK,
        below="under a Spark's idle draw at the wall (25-37 W)",
        over="over the 240 W brick that feeds a Spark",
        usual=(178, None),
        warn_below="is below the 178 W per node the field measured at the 2,200 MHz cap under "
        "long prefill: the power budget would count less than the rack drew"),
    "node_watts_uncapped": Range(
        25, 240, "W", "217 W: the field report's rack under long prefill uncapped (~1,735 W / "
        "8, which tripped the strip); " + _BRICK,
        below="under a Spark's idle draw at the wall (25-37 W)",
        over="over the 240 W brick that feeds a Spark",
        usual=(217, None),
        warn_below="is below the 217 W per node the field measured uncapped under long "
        "prefill: the power budget would count less than the rack drew"),
    "restart_batch_size": Range(
        1, RACK_NODES, "", "a rack is eight nodes; the field report's operator restarted two "
        "at a time", below="a batch holds at least one node", over="a rack is eight nodes"),
    "nccl_ib_gid_index": Range(
        0, 255, "", "the verbs GID index is one byte (libibverbs' ibv_global_route.sgid_index, "
        "uint8_t); real units show 3-6 (docs/field-notes.md)",
        below="a GID index counts from 0", over="a GID index is one byte"),
    "fabric_prefix": Range(
        8, 28, "", "RFC 1918's largest private block is 10.0.0.0/8; a /28 holds 14 hosts, the "
        "smallest subnet for eight nodes (RFC 950 arithmetic)",
        below="a prefix shorter than /8 reaches past 10.0.0.0/8, the largest private block",
        over="a subnet smaller than /28 cannot hold eight nodes"),
    "fabric_mtu": Range(
        1500, 9978, "bytes", "Ethernet's 1500 (NVIDIA's playbooks keep it); the community's "
        "9000; 9978, the largest MTU an mlx5 netdev takes (`ip -d link`: maxmtu)",
        below="under Ethernet's 1500", over="over what a ConnectX-7 netdev takes"),
    "fabric_link_gbit": Range(
        1, 200, "Gbit/s", "a DGX Spark's ConnectX-7 port runs at most 200 Gb/s (NVIDIA's "
        "specifications); 100 on a 400G->4x100G breakout (a public eight-Spark build)",
        below="a link runs at 1 Gbit/s or more", over="over a Spark's 200G port"),
    "rehearsal_switch_mtu": Range(
        1500, 9216, "bytes", "a switch port ships at 1500 (MikroTik RouterOS); 9216 is the "
        "largest a CRS804 port takes that hosts may use",
        below="under Ethernet's 1500", over="over what the switch takes"),
    "rehearsal_rack": Range(
        1, 2, "", "this machine runs one or two rehearsal racks (sparkrack/rehearsal/layout.py: "
        "RACKS)", below="racks count from 1", over="this machine runs at most two"),
    "indexer_mem_fraction": Range(
        0, 1, "", "a fraction of free memory (SGLang's environ.py); the field report runs 0.01; "
        "SGLang's default 0.2 ratcheted free memory down to NV_ERR_NO_MEMORY on prompts over "
        "~100K tokens (SGLang #36941)",
        below="a fraction above 0", over="a fraction of at most 1", low_open=True,
        usual=(None, 0.01),
        warn_over="is above the 0.01 the field report runs: SGLang's 0.2 ratcheted free memory "
        "down to NV_ERR_NO_MEMORY on prompts over ~100K tokens"),
    "api_port": Range(
        0, 65535, "", "0: each engine file's own http port; else a TCP port (RFC 793)",
        below="0 means each engine's own port", over="a port number is 16 bits"),
    "drain_budget_s": Range(
        0, 1800, "s", "vLLM's --shutdown-timeout (0: in-flight requests aborted at once, vLLM's "
        "own default); 1,800 s: SMG's --request-timeout-secs default, past which a router "
        "gives a request up anyway", below="0 aborts in-flight requests at once",
        over="past 1,800 s a router (SMG) gives the request up anyway"),
    "k8s_cpu": Range(
        1, 20, "cores", "a GB10 has 20 CPU cores (10 Cortex-X925, 10 Cortex-A725; NVIDIA)",
        below="a pod requests a core", over="a GB10 has 20 cores"),
    "k8s_memory_gib": Range(
        1, 121, "GiB", "a GB10's one memory pool: MemTotal 127,600,524-127,622,144 kB, "
        "121.7 GiB (docs/field-notes.md)", below="a pod requests memory",
        over="a GB10's pool is 121.7 GiB"),
    # --- group_vars: timeouts (no public figure: sparkrack's bounds, on the safe side) --------
    "ssh_connect_timeout": Range(
        0, 60, "s", "no public figure (OpenSSH's ConnectTimeout is unbounded): a minute per "
        "connection is the most a dead node may hold a command; a live one answers in a second",
        below="a timeout is longer than 0", over="a dead node would hold every command a "
        "minute per connection", low_open=True),
    "ssh_command_timeout": Range(
        0, 3600, "s", "no public figure: an hour; the commands that run longer (image and "
        "weight copies, waits) carry their own timeouts",
        below="a timeout is longer than 0", over="longer commands carry their own timeouts",
        low_open=True),
    "transfer_stall_timeout": Range(
        0, 600, "s", "no public figure: ten minutes, as long as the NCCL watchdog of PyTorch "
        "waits on a silent peer (600 s)", below="a timeout is longer than 0",
        over="a cut link would hold a copy over ten minutes before the chain routes around it",
        low_open=True),
    # --- group_vars: the watchdog -------------------------------------------------------
    "watchdog_restart_budget": Range(
        0, 10, "restarts", "no public figure: past ten restarts in one window a failure only "
        "repeats (the safe side: stop the group and say why)",
        below="a count of restarts (0: never restart)",
        over="more restarts in one window only repeat a failure"),
    "watchdog_restart_window_minutes": Range(
        0, 1440, "minutes", "no public figure: at most a day",
        below="a window is longer than 0", over="at most a day", low_open=True),
    "watchdog_stall_budget_s": Range(
        0, 600, "s", "0: each profile's stall_budget_s; " + _STALL,
        below="0 means each profile's budget", over="NCCL's own watchdog ends a hung group "
        "after 600 s"),
    "watchdog_slow_percent": Range(
        0, 200, "%", "0: never said; owners report decode flipping between 63 and 94 "
        "ms/step (+49 %), nvidia-smi showing nothing (tonyd2wild/DeepSeek-V4.1-Flash-vLLM-"
        "DGX-Spark#1): 25 % says that at half its size; no public figure for how far a "
        "healthy lane's step time wanders with its batch's mix (the baseline is kept per "
        "batch size)", below="0 means never", over="a lane three times slower is a stall's "
        "business, or a failed one's", usual=(None, 100),
        warn_over="% leaves a lane serving at half its speed unsaid (the field's slowdown "
        "was +49 %)"),
    "watchdog_slow_for_s": Range(
        10, 3600, "s", "no public figure for how long the field's slow spells last: at least "
        "10 s (each measure spans the last 20 s of steps), at most an hour",
        below="a measure spans 20 s of steps", over="at most an hour"),
    "watchdog_power_cycle_samples": Range(
        2, 60, "polls", "one reading is a clock caught while the utilization it is judged busy "
        "by averages up to the last second (NVML's nvmlUtilization_t); a latch never clears by "
        "itself, so waiting past a minute (a poll a second) only leaves the group slow longer",
        below="one reading may be a clock caught while the utilization still averages the "
        "last second", over="a latch never clears by itself: past a minute the group only "
        "stays slow longer"),
    "watchdog_power_cycle_window_minutes": Range(
        30, 10080, "minutes", "longer than one cycle and the start after it: the PDU's longest "
        "60 s off (APC rPDU2 reboot duration, 5-60 s), 300 s for the boot and a 900 s engine "
        "load; up to a week", below="shorter than one cycle and the start after it",
        over="at most a week"),
    "watchdog_metrics_port": _PORT,
    # --- hosts.yml, host_vars -----------------------------------------------------------
    "ansible_port": _PORT,
    "rank": Range(0, RACK_NODES - 1, "", "ranks count from 0, the head; a rack is eight",
                  below="ranks count from 0", over="a rack is eight nodes"),
    # --- the pdu: section ---------------------------------------------------------------
    "pdu.port": Range(1, 65535, "", "SNMP listens on UDP 161 (RFC 3417); a port is 16 bits",
                      below="0 is no port", over="a port number is 16 bits"),
    "pdu.outlets": Range(
        1, 96, "", "outlets count from 1 (APC PowerNet-MIB's rPDU2 outlet index); the largest "
        "APC rack PDUs carry 48; room for two daisy-chained",
        below="outlets count from 1", over="two daisy-chained rack PDUs carry at most 96 outlets"),
    # --- engine profiles (.sparkrack/engines/<engine>.yml) -------------------------------
    "profile.ready_timeout_s": Range(
        1, 7200, "s", "a 744B TP8 load takes 7-9 minutes (the field report); vLLM's own ready "
        "timeout defaults to 600 s; two hours bounds a start that hangs",
        below="whole seconds, at least 1", over="a start that takes two hours is stuck"),
    "profile.stop_timeout_s": Range(
        1, 3600, "s", "rank 0 drains its requests on SIGTERM (SGLang, vLLM --shutdown-timeout); "
        "docker's default 10 s is too short; an hour bounds a drain",
        below="whole seconds, at least 1", over="an hour bounds a drain"),
    "profile.stall_budget_s": Range(
        1, 600, "s", _STALL, below="whole seconds, at least 1",
        over="NCCL's own watchdog ends a hung group after 600 s"),
    "profile.ports": Range(1, 65535, "", "TCP port numbers (RFC 793)",
                           below="0 is no port", over="a port number is 16 bits"),
    "serving.memory_fraction.default": Range(
        0, 1, "", "a share of the GPU pool (SGLang --mem-fraction-static, vLLM "
        "--gpu-memory-utilization)", below="a share above 0", over="a share of at most 1",
        low_open=True),
}


POWER_KEYS = ("node_watts_capped", "node_watts_uncapped", "power_margin_watts",
              "power_strip_watts")


def power_problem(values: Mapping[str, float]) -> tuple[str, str, str] | None:
    """(key, what is wrong, fix) when the power figures disagree: a node that draws more
    with the cap than without, a margin that leaves nothing of the strip; else None."""
    capped, uncapped = values["node_watts_capped"], values["node_watts_uncapped"]
    if capped > uncapped:
        return ("node_watts_capped", f"node_watts_capped ({number(capped)} W) is above "
                f"node_watts_uncapped ({number(uncapped)} W): the cap lowers a node's draw "
                "(the field: 178 W capped, 217 W uncapped)", "swap them, or measure both again")
    margin, strip = values["power_margin_watts"], values["power_strip_watts"]
    if margin >= strip:
        return ("power_margin_watts", f"power_margin_watts ({number(margin)} W) leaves nothing "
                f"of the {number(strip)} W strip (power_strip_watts)",
                "keep the margin below the strip's rating (the field: 100 W of 1,440 W)")
    return None
