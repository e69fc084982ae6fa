"""gpusimd + nvidia-smi + gpu-sim as a node runs them: real outputs, real exit codes.

Each test starts its own daemon on a free localhost port with a temp config and state
dir. Expected formats are real nvidia-smi 580 samples (H200, serial and UUID replaced by
placeholders; docs/field-notes.md): the short ones are copied here, the long ones are in
tests/unit/data/nvidia-smi-h200.
"""

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from freeport import free_port

from sparkrack.rehearsal.nodefs import SIM_COMMANDS

REPO = Path(__file__).resolve().parents[3]
SIM_DIR = REPO / "sparkrack" / "rehearsal" / "sim"
GPUSIMD, GPU_SIM = SIM_DIR / "gpusim" / "gpusimd", SIM_DIR / "gpusim" / "gpu-sim"
SAMPLES = Path(__file__).parents[1] / "data" / "nvidia-smi-h200"
sys.path.insert(0, str(SIM_DIR))

from gpusim.client import DaemonError, GpuSimClient  # noqa: E402

# Real nvidia-smi output, driver 580.159.04 on an H200.
SAMPLE_L = "GPU 0: NVIDIA H200 (UUID: GPU-00000000-1111-2222-3333-444444444444)"
SAMPLE_HEADER = (
    "name, clocks.current.sm [MHz], clocks.max.sm [MHz], clocks.current.graphics [MHz], "
    "power.draw [W], power.limit [W], temperature.gpu, utilization.gpu [%], pstate, "
    "persistence_mode, memory.used [MiB], memory.total [MiB], clocks_event_reasons.active, "
    "clocks_event_reasons.sw_power_cap, clocks_event_reasons.hw_slowdown, "
    "clocks_event_reasons.sw_thermal_slowdown, clocks_event_reasons.gpu_idle, driver_version, "
    "serial, uuid")
SAMPLE_VALUES = (
    "NVIDIA H200, 1980 MHz, 1980 MHz, 1980 MHz, 125.39 W, 700.00 W, 36, 0 %, P0, Enabled, "
    "0 MiB, 143771 MiB, 0x0000000000000001, Not Active, Not Active, Not Active, Active, "
    "580.159.04, 1650000000000, GPU-00000000-1111-2222-3333-444444444444")
SAMPLE_NOUNITS = "NVIDIA H200, 1980, 1980, 125.38, 0, 0x0000000000000001"
SAMPLE_BAD_FIELD = 'Field "bogus.field" is not a valid field to query.\n\n'
FIELD_FACTS_QUERY = (
    "name,clocks.sm,clocks.max.sm,clocks.gr,power.draw,power.limit,temperature.gpu,"
    "utilization.gpu,pstate,persistence_mode,memory.used,memory.total,"
    "clocks_event_reasons.active,clocks_event_reasons.sw_power_cap,"
    "clocks_event_reasons.hw_slowdown,clocks_event_reasons.sw_thermal_slowdown,"
    "clocks_event_reasons.gpu_idle,driver_version,serial,uuid")
GB10_NOT_AVAILABLE = {"power.limit [W]", "memory.used [MiB]", "memory.total [MiB]"}


class Node:
    """One daemon plus the environment its clients need."""

    def __init__(self, tmp_path: Path, **daemon_env: str):
        self.state_dir = tmp_path / "run"
        self.latch = tmp_path / "latched"
        self.heat = tmp_path / "heat"
        self.kernel = tmp_path / "kernel.json"
        self.hang = self.state_dir / "collective-hang"
        self.roce_port = free_port(kind=socket.SOCK_DGRAM)
        config = tmp_path / "node.json"
        config.write_text(json.dumps({
            "node": "spark-01", "port": 0, "state_dir": str(self.state_dir),
            "latch_file": str(self.latch), "kernel_file": str(self.kernel),
            "heat_file": str(self.heat), "roce_port": self.roce_port}))
        self.log = tmp_path / "gpusimd.log"
        env = {**os.environ, "GPU_SIM_CONFIG": str(config), **daemon_env}
        with open(self.log, "w") as log:
            self.proc = subprocess.Popen([str(GPUSIMD)], stderr=log, env=env)
        self.port = self._wait_for_port()
        self.env = {**os.environ, "GPU_SIM_ADDR": f"127.0.0.1:{self.port}"}

    def _wait_for_port(self) -> int:
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            found = re.search(r"listening on 127\.0\.0\.1:(\d+)", self.log.read_text())
            if found:
                return int(found.group(1))
            assert self.proc.poll() is None, self.log.read_text()
            time.sleep(0.02)
        raise AssertionError("gpusimd did not start")

    def run(self, tool: str, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run([str(SIM_DIR / SIM_COMMANDS[tool]), *args], env=self.env,
                              capture_output=True, text=True, timeout=10)

    def smi(self, *args: str) -> subprocess.CompletedProcess:
        return self.run("nvidia-smi", *args)

    def query(self, fields: str) -> list[str]:
        out = self.smi(f"--query-gpu={fields}", "--format=csv,noheader,nounits")
        assert out.returncode == 0, out.stdout
        return [cell.strip() for cell in out.stdout.strip().split(",")]

    def client(self) -> GpuSimClient:
        return GpuSimClient(("127.0.0.1", self.port))

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=5)


@pytest.fixture
def node(tmp_path):
    running = Node(tmp_path)
    yield running
    running.stop()


def _shape(text: str) -> str:
    """A CSV cell reduced to its form: digits -> 9, hex digits after 0x -> f."""
    text = re.sub(r"0x[0-9A-F]+", lambda m: "0x" + "f" * (len(m.group()) - 2), text)
    return re.sub(r"\d+", "9", text)


def test_list_gpus_has_the_real_format(node):
    out = node.smi("-L")
    assert out.returncode == 0
    uuid = r"GPU-[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}"
    pattern = re.escape(SAMPLE_L).replace("H200", "GB10").replace(
        re.escape("GPU-00000000-1111-2222-3333-444444444444"), uuid)
    assert re.fullmatch(pattern + "\n", out.stdout)


def test_csv_header_and_units_match_the_real_sample_field_by_field(node):
    out = node.smi(f"--query-gpu={FIELD_FACTS_QUERY}", "--format=csv")
    assert out.returncode == 0
    header, values = out.stdout.splitlines()
    assert header == SAMPLE_HEADER
    for name, mine, real in zip(header.split(", "), values.split(", "), SAMPLE_VALUES.split(", "), strict=False):
        if name in GB10_NOT_AVAILABLE:
            assert mine == "[N/A]", name
        elif name not in ("name", "uuid"):
            assert _shape(mine) == _shape(real), (name, mine, real)
    assert values.startswith("NVIDIA GB10, ")


def test_noheader_nounits_prints_bare_values_like_the_sample(node):
    out = node.smi("--query-gpu=name,clocks.sm,clocks.max.sm,power.draw,utilization.gpu,"
                   "clocks_event_reasons.active", "--format=csv,noheader,nounits")
    assert out.returncode == 0
    assert _shape(out.stdout.strip()) == _shape(SAMPLE_NOUNITS).replace("H9", "GB9")


def test_bad_field_prints_the_real_error_and_exits_2(node):
    out = node.smi("--query-gpu=name,bogus.field", "--format=csv")
    assert (out.returncode, out.stdout) == (2, SAMPLE_BAD_FIELD)


def test_lock_caps_the_clock_under_load_at_the_2190_bin(node):
    out = node.smi("-lgc", "0,2200")
    assert out.stdout == ('GPU clocks set to "(gpuClkMin 0, gpuClkMax 2200)" '
                          "for GPU 0000000F:01:00.0\nAll done.\n")
    with node.client() as load:
        load.hold_load(100)
        samples = [node.query("clocks.sm,utilization.gpu,pstate") for _ in range(5)]
    assert all(2184 <= int(clock) <= 2190 and (util, pstate) == ("100", "P0")
               for clock, util, pstate in samples), samples


def test_without_lock_or_after_reset_the_clock_boosts_past_the_cap(node):
    assert node.smi("--lock-gpu-clocks=0,2200").returncode == 0
    reset = node.smi("-rgc")
    assert (reset.returncode, reset.stdout) == (0, "All done.\n")
    with node.client() as load:
        load.hold_load(100)
        assert int(node.query("clocks.sm")[0]) > 2200


def test_load_ends_with_the_client_connection(node):
    with node.client() as load:
        load.hold_load(100)
        assert node.query("utilization.gpu") == ["100"]
    assert node.query("utilization.gpu,pstate") == ["0", "P8"]


def test_burn_check_load_command_drives_the_clock_after_its_start_up(node):
    started = time.monotonic()
    # 5 s of load: the clock query after the busy one lands inside it on a busy machine
    burn = subprocess.Popen([str(GPU_SIM), "load", "--seconds", "5",
                             "--startup", "1"], env=node.env)
    try:
        while node.query("utilization.gpu") != ["100"]:
            assert time.monotonic() < started + 10, "gpu-sim load never showed"
        busy = time.monotonic() - started
        assert busy >= 1.0, f"the GPU was busy {busy:.2f} s after the load started"
        assert int(node.query("clocks.sm")[0]) > 2200
    finally:
        assert burn.wait(timeout=20) == 0


def test_the_load_start_up_is_the_real_loads_by_default():
    done = subprocess.run([str(GPU_SIM), "load", "-h"], capture_output=True,
                          text=True, check=True)
    assert "else 4.4, the real load's" in " ".join(done.stdout.split())


def test_a_node_sets_its_own_load_start_up_beside_its_config(node, tmp_path):
    (tmp_path / "load-startup").write_text("1.5\n")
    started = time.monotonic()
    burn = subprocess.Popen([str(GPU_SIM), "load", "--seconds", "5"],
                            env={**node.env, "GPU_SIM_CONFIG": str(tmp_path / "node.json")})
    try:
        while node.query("utilization.gpu") != ["100"]:
            assert time.monotonic() < started + 10, "gpu-sim load never showed"
        busy = time.monotonic() - started
        assert 1.5 <= busy < 4.4, f"the GPU was busy {busy:.2f} s after the load started"
    finally:
        assert burn.wait(timeout=20) == 0


def test_no_query_reveals_the_locked_range(node):
    node.smi("-lgc", "1000,2200")
    every_field = FIELD_FACTS_QUERY + ",clocks.applications.graphics,clocks.max.graphics"
    everything = node.smi("-q").stdout + node.smi(f"--query-gpu={every_field}",
                                                 "--format=csv").stdout
    assert "2200" not in everything and "2190" not in everything


def test_latched_node_runs_at_481_to_858_mhz_and_6_to_16_w_whatever_the_lock(node):
    node.latch.write_text("")
    node.smi("-lgc", "0,2200")
    with node.client() as load:
        load.hold_load(100)
        readings = [node.query("clocks.sm,power.draw") for _ in range(5)]
    assert all(481 <= int(clock) <= 858 and 5.8 <= float(power) <= 15.8
               for clock, power in readings), readings


def test_a_spinning_kernel_reads_busy_at_low_power_until_a_real_load_joins(node):
    """A kernel polling a flag: ~96 % at the public 16-27 W (vllm#42354), under the lock
    too; real work beside it draws real power."""
    for lock in ("3003", "0,2200"):
        node.smi("-lgc", lock)
        with node.client() as spin:
            spin.hold_load(96, spin=True)
            util, power = node.query("utilization.gpu,power.draw")
            assert util == "96" and 16.0 <= float(power) <= 27.0, (lock, util, power)
            with node.client() as load:
                load.hold_load(100)
                util, power = node.query("utilization.gpu,power.draw")
                assert util == "100" and float(power) > 35.0, (util, power)


def test_a_decoding_gpu_reads_busy_as_serving_does_its_power_swinging_about_45_w(node):
    """Healthy decode on a GB10: ~95 % busy, ~45 W on average, swinging up to ~90 W
    (spark-vllm-docker#260), never as low as a spin for long."""
    with node.client() as decode:
        decode.hold_load(100, kind="decode")
        readings = [node.client().state() for _ in range(60)]
    utils = [r["util"] for r in readings]
    powers = sorted(r["power_w"] for r in readings)
    assert all(90 <= util <= 99 for util in utils), utils
    assert 24.0 <= powers[0] and powers[-1] <= 87.0 and powers[-1] - powers[0] > 25, powers
    assert 36.0 <= sum(powers) / len(powers) <= 55.0, powers


HOLDER = """import sys, time
sys.path.insert(0, sys.argv[1])
from gpusim.client import GpuSimClient
client = GpuSimClient(("127.0.0.1", int(sys.argv[2])))
client.hold_load(int(sys.argv[3]), kind=sys.argv[4])
print("held", flush=True)
time.sleep(60)
"""


def holder(node, util: int, kind: str = "compute") -> subprocess.Popen:
    """Another process holding a load through its own connection, as a rank does."""
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(SIM_DIR), str(node.port),
                             str(util), kind],
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline() == "held\n"
    return proc


@pytest.mark.parametrize("kind", ["compute", "decode"])
def test_a_stopped_process_feeds_no_kernels_its_gpu_reads_idle_until_it_runs_again(node,
                                                                                   kind):
    """A rank's host frozen (SIGSTOP, a host-side deadlock): its compute drains, so its
    GPU reads 0 % from the first sample, yet it keeps its clock and draws well above idle
    (an H100 SIGSTOPped under matmuls: 0 %, 125 W against 72 W idle, for the 5 s
    measured); it computes again once the process continues. Read from the process's state
    (/proc/PID/stat), nothing the rank says."""
    node.smi("-lgc", "0,2200")
    rank = holder(node, 100, kind)
    try:
        assert int(node.query("utilization.gpu")[0]) >= 90
        os.kill(rank.pid, signal.SIGSTOP)
        for _ in range(3):
            util, power, clock = node.query("utilization.gpu,power.draw,clocks.sm")
            assert util == "0" and 16.0 <= float(power) <= 27.0, (util, power)
            assert 2184 <= int(clock) <= 2190, clock
        os.kill(rank.pid, signal.SIGCONT)
        assert int(node.query("utilization.gpu")[0]) >= 90
    finally:
        rank.kill()
        rank.wait()
    assert node.query("utilization.gpu,power.draw") == ["0", "3.90"]  # gone with it


def test_a_kernel_already_spinning_stays_resident_when_its_process_stops(node):
    rank = holder(node, 96, "spin")
    try:
        os.kill(rank.pid, signal.SIGSTOP)
        util, power = node.query("utilization.gpu,power.draw")
        assert util == "96" and float(power) < 27.0, (util, power)
    finally:
        rank.kill()
        rank.wait()
    assert node.query("utilization.gpu")[0] == "0"  # gone with its process


def test_a_host_that_launches_nothing_more_leaves_its_gpu_drained(node):
    """A rank whose host hangs or waits before launching (the stub says `drained`): 0 %
    at a spin's draw while its context lives; nothing once it is gone."""
    with node.client() as rank:
        rank.hold_load(0, kind="drained")
        util, power = node.query("utilization.gpu,power.draw")
        assert util == "0" and 16.0 <= float(power) <= 27.0, (util, power)
    assert node.query("utilization.gpu,power.draw") == ["0", "3.90"]


def test_an_unknown_load_kind_is_refused_and_the_daemon_keeps_serving(node):
    with node.client() as client:
        with pytest.raises(DaemonError, match="'kind' must be one of compute, decode"):
            client.request("load", util=100, kind="matmul")
        assert client.state()["util"] == 0


def test_the_nodes_hcas_answer_writes_to_a_rail_while_its_client_lives(node):
    """RDMA writes are acknowledged by the responder's HCA, not its process: a rail opened
    through a client is echoed by the daemon, whatever that client's process does, and
    stops answering when the client goes (its queue pairs destroyed)."""
    address = f"127.{os.getpid() % 200 + 20}.{node.roce_port % 250}.7"
    rank = subprocess.Popen([sys.executable, "-c", RAILS, str(SIM_DIR), str(node.port),
                             address], stdout=subprocess.PIPE, text=True)
    try:
        assert rank.stdout.readline() == f"answered {address}\n"
        assert write(address, node.roce_port)
        os.kill(rank.pid, signal.SIGSTOP)  # the process stopped: its HCA still answers
        assert write(address, node.roce_port)
    finally:
        rank.kill()
        rank.wait()
    assert eventually(lambda: not write(address, node.roce_port, timeout=0.3), 5)


def test_the_collective_hang_is_the_racks_file(node):
    with node.client() as client:
        assert client.collective_hangs() is False
        node.hang.write_text("")
        assert client.collective_hangs() is True
        assert client.state()["sim"]["collective_hang"] is True


RAILS = """import sys, time
sys.path.insert(0, sys.argv[1])
from gpusim.client import GpuSimClient
client = GpuSimClient(("127.0.0.1", int(sys.argv[2])))
print("answered", *client.open_rails([sys.argv[3], "192.0.2.9"]), flush=True)
time.sleep(60)
"""


def write(address: str, port: int, timeout: float = 2.0) -> bool:
    """Whether a datagram to (address, port) comes back within timeout."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.bind((address, 0))
        sock.settimeout(timeout)
        sock.sendto(b"rdma-write", (address, port))
        try:
            return sock.recvfrom(64)[0] == b"rdma-write"
        except TimeoutError:
            return False


def eventually(check, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def test_temperature_reads_as_driver_580_gives_it_on_gb10_and_follows_the_heat(node):
    """The thresholds are offsets from the T.Limit (a public GB10 capture, driver
    580.126.09: margin 57 C at 38 C, shutdown -5 C, slowdown -2 C); the margin is the
    query field temperature.gpu.tlimit; hot air heats the GPU under load."""
    temp, margin = (int(v) for v in node.query("temperature.gpu,temperature.gpu.tlimit"))
    assert temp + margin == 95
    report = node.smi("-q", "-d", "TEMPERATURE").stdout
    assert f"        GPU T.Limit Temp{' ' * 31}: {margin} C\n" in report
    assert "GPU Shutdown T.Limit Temp" + " " * 22 + ": -5 C" in report
    assert "GPU Slowdown T.Limit Temp" + " " * 22 + ": -2 C" in report
    assert "GPU Shutdown Temp " not in report  # the pre-R535 absolute labels
    node.smi("-lgc", "0,2200")
    node.heat.write_text("40\n")
    with node.client() as load:
        load.hold_load(100)
        temp, margin, clock, slow = node.query(
            "temperature.gpu,temperature.gpu.tlimit,clocks.sm,"
            "clocks_event_reasons.sw_thermal_slowdown")
    assert (temp, margin, slow) == ("95", "0", "Active") and int(clock) < 2184


def test_power_limit_is_refused_as_on_gb10(node):
    out = node.smi("-pl", "150")
    assert out.stdout == ("Changing power management limit is not supported in current scope "
                          "for GPU: 0000000F:01:00.0.\nTreating as warning and moving on.\n"
                          "All done.\n")
    assert out.returncode == 0  # a warning, as the real tool: only -eow makes it fail
    assert node.smi("-pl", "150", "-eow").returncode != 0
    assert node.query("power.limit") == ["[N/A]"]


def test_persistence_mode_messages_and_state(node):
    off = node.smi("-pm", "0")
    assert off.stdout == "Disabled persistence mode for GPU 0000000F:01:00.0.\nAll done.\n"
    assert node.query("persistence_mode") == ["Disabled"]
    warned = node.smi("-i", "0", "-lgc", "0,2200").stdout
    assert "Warning: persistence mode is disabled on device 0000000F:01:00.0." in warned
    assert node.smi("-pm", "1").stdout.startswith("Enabled persistence mode for GPU")
    assert node.smi("-pm", "1").stdout.startswith("Persistence mode is already Enabled")


def test_the_booted_kernel_shows_in_cmdline_and_the_cma_lines_and_follows_a_reload(node):
    """DGX OS's kernel: no CMA; 7.0.0-1019-nvidia with KHO's bug: CmaTotal 0 with CmaFree
    ~9.7 GiB until kho=off is on its command line (SIGHUP: the rack changed the kernel)."""
    import signal

    meminfo, cmdline = node.state_dir / "meminfo", node.state_dir / "cmdline"

    def shown() -> tuple[str, str, str]:
        cma = dict(re.findall(r"^(Cma\w+):\s+(\d+) kB$", meminfo.read_text(), re.M))
        return cma["CmaTotal"], cma["CmaFree"], cmdline.read_text()

    assert shown() == ("0", "0", "BOOT_IMAGE=/boot/vmlinuz-6.17.0-1008-nvidia "
                                 "root=/dev/nvme0n1p2 ro quiet splash\n")
    for extra, free in (("", "10171187"), ("kho=off", "0"), ("kho=off kho=on", "10171187")):
        inode = meminfo.stat().st_ino
        node.kernel.write_text(json.dumps({"release": "7.0.0-1019-nvidia", "kho_cma_bug": True,
                                           "cmdline_extra": extra}))
        node.proc.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 5
        while shown()[1] != free and time.monotonic() < deadline:
            time.sleep(0.02)
        total, now_free, line = shown()
        assert (total, now_free) == ("0", free) and meminfo.stat().st_ino == inode
        assert line.startswith("BOOT_IMAGE=/boot/vmlinuz-7.0.0-1019-nvidia ")
        assert line.rstrip("\n").endswith(f"splash {extra}".rstrip())


def test_gpu_ids_are_accepted_and_unknown_ones_exit_6(node):
    assert node.smi("--id=0", "-L").returncode == 0
    assert node.smi("-i", "000F:01:00.0", "-L").returncode == 0
    missing = node.smi("-i", "1", "-L")
    assert (missing.returncode, missing.stdout) == (6, "No devices were found\n")


def test_meminfo_is_rewritten_in_place_and_tracks_allocations(node):
    meminfo = node.state_dir / "meminfo"

    def available_kb() -> int:
        return int(re.search(r"^MemAvailable:\s+(\d+) kB$", meminfo.read_text(), re.M).group(1))

    inode, before = meminfo.stat().st_ino, available_kb()
    total = int(re.search(r"^MemTotal:\s+(\d+) kB$", meminfo.read_text(), re.M).group(1))
    assert total == 127612452  # spark-01's own: units differ (127,600,524-127,622,144 kB)
    with node.client() as holder:
        holder.allocate(8 * 2**30, name="python3")
        assert available_kb() == before - 8 * 2**20
        assert meminfo.stat().st_ino == inode
        assert "python3" in node.smi().stdout
    deadline = time.monotonic() + 2
    while available_kb() != before:
        assert time.monotonic() < deadline, "allocation not freed at disconnect"
        time.sleep(0.02)
    assert meminfo.stat().st_ino == inode


def test_allocation_beyond_the_pool_is_refused(node):
    with node.client() as holder, pytest.raises(Exception, match="out of memory"):
        holder.allocate(200 * 2**30)


def test_bad_json_gets_an_error_reply_and_the_daemon_keeps_serving(node):
    with socket.create_connection(("127.0.0.1", node.port), timeout=5) as raw:
        raw.sendall(b"this is not json\n{\"op\": []}\n")
        reader = raw.makefile()
        replies = reader.readline(), reader.readline()
    assert all(json.loads(reply)["ok"] is False for reply in replies)
    assert node.smi("-L").returncode == 0


def test_plain_table_has_the_real_layout_with_gb10_values(node):
    out = node.smi()
    assert out.returncode == 0
    lines = out.stdout.splitlines()
    assert "|   0  NVIDIA GB10                    On  |   0000000F:01:00.0 Off |" in out.stdout
    assert re.search(r"\| N/A   \d\dC    P8 +\d+W /  N/A  \| Not Supported          \|", out.stdout)
    sample = SAMPLES / "nvsmi-plain.txt"
    real = sample.read_text().splitlines()
    assert [len(line) for line in lines] == [len(line) for line in real]
    differing = [i for i, (mine, theirs) in enumerate(zip(lines, real, strict=False)) if mine != theirs]
    assert differing == [0, 2, 8, 9, 10]  # date, driver version, and the GPU's three rows


def test_query_clock_power_performance_keeps_the_real_labels(node):
    sample = SAMPLES / "nvsmi-q-clock-power-perf.txt"
    out = node.smi("-q", "-d", "CLOCK,POWER,PERFORMANCE")
    assert out.returncode == 0

    def labels(text: str) -> list[str]:
        return [line.split(":")[0] for line in text.splitlines() if not line.startswith("GPU ")]

    assert labels(out.stdout) == labels(sample.read_text())
    assert re.search(r"^    Max Clocks\n        Graphics +: 3003 MHz$", out.stdout, re.M)
    assert re.search(r"^        Current Power Limit +: N/A$", out.stdout, re.M)


def test_unreachable_daemon_prints_the_driver_error_and_exits_9(node):
    node.stop()
    out = node.smi("--query-gpu=clocks.sm", "--format=csv")
    assert out.returncode == 9
    assert out.stdout.startswith("NVIDIA-SMI has failed because it couldn't communicate with the "
                                 "NVIDIA driver. Make sure that the latest NVIDIA driver is "
                                 "installed and running.\n")


def test_unknown_option_is_an_invalid_argument(node):
    out = node.smi("--bogus")
    assert out.returncode == 2
    assert "Invalid combination of input arguments" in out.stdout


def test_help_is_the_real_help_with_this_driver_version(node):
    out = node.smi("-h")
    assert out.returncode == 0
    assert out.stdout.startswith("NVIDIA System Management Interface -- v580.126.09\n")
    assert "-lgc  --lock-gpu-clocks=" in out.stdout


def test_gpu_sim_state_dumps_json(node):
    node.smi("-lgc", "0,2200")
    state = json.loads(node.run("gpu-sim", "state").stdout)
    assert state["name"] == "NVIDIA GB10" and state["sim"]["lock"] == [0, 2200]


def test_daemon_reports_ready_to_systemd_once_serving(tmp_path):
    notify_path = str(tmp_path / "notify.sock")
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as notify:
        notify.bind(notify_path)
        notify.settimeout(5)
        ready = Node(tmp_path, NOTIFY_SOCKET=notify_path)
        try:
            assert notify.recv(64) == b"READY=1"
            assert ready.smi("-L").returncode == 0
        finally:
            ready.stop()


def test_second_daemon_on_a_taken_port_fails_with_one_line(node, tmp_path):
    config = tmp_path / "taken.json"
    config.write_text(json.dumps({"port": node.port, "state_dir": str(tmp_path / "run2")}))
    out = subprocess.run([str(GPUSIMD)], capture_output=True, text=True, timeout=10,
                         env={**os.environ, "GPU_SIM_CONFIG": str(config)})
    assert out.returncode == 1 and out.stderr.startswith("gpusimd: cannot serve on 127.0.0.1:")


@pytest.mark.parametrize("value", [
    {"ok": True, "state": {"clocks_sm": 2187, "power_w": 43.47, "name": "NVIDIA GB10",
                           "lock": None, "allocs": [[1, "python3", 1 << 40]], "note": "é\n\"x\""}},
    [], "", 0, -1.5e-7, False, {"nan": float("inf")},
])
def test_the_clients_json_reads_and_writes_what_the_json_module_does(value):
    from gpusim import client as gpusim_client

    assert gpusim_client.dumps(value) == json.dumps(value)
    assert gpusim_client.loads(json.dumps(value)) == value
    assert gpusim_client.loads(f" {json.dumps(value)}\n") == value


@pytest.mark.parametrize("text", ["", "{", '{"a": 1} x', "[1,]", "nul", '{"a": 1}{}'])
def test_the_clients_json_refuses_what_the_json_module_refuses(text):
    from gpusim import client as gpusim_client

    with pytest.raises(ValueError):
        json.loads(text)
    with pytest.raises(ValueError):
        gpusim_client.loads(text)


def test_nvidia_smi_starts_on_c_modules_alone(node):
    """The burn check runs it every half second on every node: no re, enum, socket, json."""
    smi = SIM_DIR / SIM_COMMANDS["nvidia-smi"]
    out = subprocess.run([sys.executable, "-IS", "-X", "importtime", str(smi),
                          "--query-gpu=clocks.sm,utilization.gpu", "--format=csv,noheader"],
                         env=node.env, capture_output=True, text=True, timeout=10)
    assert out.returncode == 0 and out.stdout.strip(), out.stdout + out.stderr
    loaded = {line.rsplit("|", 1)[-1].strip() for line in out.stderr.splitlines()
              if line.startswith("import time:")}
    assert {"gpusim.client", "nvsmi.fields"} <= loaded, loaded
    assert loaded.isdisjoint({"re", "enum", "socket", "json", "uuid", "selectors"}), loaded
