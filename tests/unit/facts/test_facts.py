"""Node facts, the one section parser and the deployment records: parsers on recorded
output, and the node script run here."""

import base64
import json
import os
import subprocess

from sparkrack.deployments.record import records_of
from sparkrack.facts import node, records
from sparkrack.facts.node import (
    GPU_FIELDS,
    NodeFacts,
    burn_this_boot,
    facts_argv,
    parse_facts,
    parse_gpu,
)
from sparkrack.facts.queries import PYTHON, answer, argv
from sparkrack.facts.sections import split
from sparkrack.facts.systemd import UNIT_PROPERTIES
from sparkrack.status.rows import cap_state

BOOT = "093d830e-9634-4f95-b9b8-ba9aa4b10d41"
BURN = json.dumps({"ok": True, "boot_id": BOOT, "time": 0, "max_sm_mhz": 2190}).encode()
# A rehearsal node's (spark-03) answers, as the node script prints them.
SAMPLE = f"""@@base
{BOOT}
1796036605.596217102

@@0 s
hostname spark-03
kernel 6.18.44-fc-v782
os Debian GNU/Linux 12 (bookworm)
gpu 0 NVIDIA GB10, 208, 3003, 3.90, 38, 0, P8, Enabled, 580.126.09, 12.1
MemAvailable 118566368
MemTotal 127600748
CmaFree 10171187
CmaTotal 0
cmdline BOOT_IMAGE=/boot/vmlinuz-7.0.0-1019-nvidia ro quiet splash

@@1 u
Result=success
ExecMainStatus=0
LoadState=loaded
ActiveState=active
SubState=exited
FragmentPath=/etc/systemd/system/sparkrack-clock-cap.service
UnitFileState=enabled
NeedDaemonReload=no
ActiveEnterTimestampMonotonic=1234

@@2 f
stat regular file|644|root|root|{len(BURN)}|1796036577.896018416
content {base64.b64encode(BURN).decode()}
"""


def test_parse_sample():
    f = parse_facts(SAMPLE)
    assert (f.hostname, f.kernel, f.boot_id[:8]) == ("spark-03", "6.18.44-fc-v782", "093d830e")
    assert f.os == "Debian GNU/Linux 12 (bookworm)"
    assert (f.gpu.name, f.gpu.sm_mhz, f.gpu.max_sm_mhz, f.gpu.power_w) == ("NVIDIA GB10", 208, 3003, 3.9)
    assert f.gpu.driver == "580.126.09" and f.gpu.compute_cap == "12.1"
    assert (f.mem_total_kb, f.mem_available_kb) == (127600748, 118566368)
    assert (f.cma_total_kb, f.cma_free_kb) == (0, 10171187)
    assert f.cmdline == "BOOT_IMAGE=/boot/vmlinuz-7.0.0-1019-nvidia ro quiet splash"
    assert f.kernel_facts().problem().startswith("CmaFree 10171187 kB above its CmaTotal 0 kB")
    assert (f.clock_cap.active, f.clock_cap.result, f.clock_cap.enabled) == ("active", "success", "enabled")
    assert f.clock_cap.active_since_monotonic_us == 1234
    assert f.burn["max_sm_mhz"] == 2190
    assert cap_state(f).startswith("unit ok, verified ")


def test_nvidia_smi_failure_is_kept_as_an_error():
    text = "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure"
    gpu = parse_gpu(9, text)
    assert gpu.name is None and gpu.error.startswith("NVIDIA-SMI has failed")
    f = parse_facts(SAMPLE.replace("gpu 0 NVIDIA GB10, 208, 3003, 3.90, 38, 0, P8, Enabled, "
                                   "580.126.09, 12.1", f"gpu 9 {text}"))
    assert f.gpu.name is None and f.gpu.error == text


def test_not_available_values_become_none():
    gpu = parse_gpu(0, "NVIDIA GB10, 208, 3003, [N/A], 38, 0, P8, Enabled, 580.126.09, [N/A]")
    assert gpu.power_w is None and gpu.sm_mhz == 208 and gpu.compute_cap is None


def test_burn_from_an_earlier_boot_is_not_a_verification():
    other = SAMPLE.replace(BOOT, "ffffffff-9634-4f95-b9b8-ba9aa4b10d41", 1)
    f = parse_facts(other)
    assert f.burn is not None and burn_this_boot(f) is None
    assert cap_state(f) == "unit ok, burn before reboot"
    assert burn_this_boot(parse_facts(SAMPLE))["ok"] is True
    assert burn_this_boot(None) is None and burn_this_boot(NodeFacts(burn={"boot_id": ""})) is None


def test_missing_unit_and_no_burn():
    f = parse_facts(SAMPLE.replace("LoadState=loaded", "LoadState=not-found").split("@@2 f")[0])
    assert cap_state(f) == "no unit, never burned"


def test_script_takes_values_as_arguments_only():
    command = facts_argv()
    assert tuple(command[:len(PYTHON)]) == PYTHON
    names, values = command[len(PYTHON) + 1::2], command[len(PYTHON) + 2::2]
    assert names == ["node_section", "unit_section", "file_section"]
    assert [json.loads(v) for v in values] == [
        [",".join(GPU_FIELDS)], [node.CLOCK_CAP_UNIT, ",".join(UNIT_PROPERTIES), "systemctl"],
        [node.BURN_RECORD, 65536]]
    assert node.CLOCK_CAP_UNIT not in command[len(PYTHON)]  # the unit name is an argument


def test_sections_without_trailing_newline_and_forged_headers():
    found = split("junk\n@@base\nboot\n@@0 s\nx\n@@ 1 s\n@@name f\n@@1 f")
    assert found.boot_id == "boot" and found.now == ""
    assert found.answers == {0: ["x", "@@ 1 s", "@@name f"], 1: []}


def test_node_script_runs_here():
    done = subprocess.run(facts_argv(), capture_output=True, text=True, check=False, timeout=30)
    f = parse_facts(done.stdout)
    assert f.hostname and f.kernel and f.boot_id and f.mem_total_kb > 0
    assert f.mem_available_kb is not None
    assert f.gpu.name is not None or f.gpu.error  # no GPU here: nvidia-smi's failure, said
    with open("/proc/cmdline") as cmdline:
        assert f.cmdline == " ".join(cmdline.read().split())
    assert f.cma_total_kb is not None or "CmaTotal" not in open("/proc/meminfo").read()


def test_the_memory_query_alone_runs_here_and_parses():
    done = subprocess.run(argv([node.MEMORY]), capture_output=True, text=True, timeout=30)
    total, available = node.memory_of(answer(done.stdout, [node.MEMORY]))
    with open("/proc/meminfo") as meminfo:
        assert meminfo.readline().split() == ["MemTotal:", str(total), "kB"]
    assert 0 < available <= total
    assert node.memory_of(answer("@@base\nb\n1.0\n\n@@0 m\nMemTotal 5\n",
                                 [node.MEMORY])) is None  # MemAvailable missing: said, not 0


def test_the_kernel_is_the_one_uname_on_path_reports(tmp_path, monkeypatch):
    """As `uname -r` says it (the rehearsal rack simulates a node's kernel there)."""
    fake = tmp_path / "uname"
    fake.write_text("#!/bin/sh\necho 7.0.0-1019-nvidia\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    done = subprocess.run(facts_argv(), capture_output=True, text=True, check=False, timeout=30)
    assert parse_facts(done.stdout).kernel == "7.0.0-1019-nvidia"


def test_os_release_is_read_as_the_shell_reads_it(tmp_path):
    from sparkrack.remote.node import os_name

    release = tmp_path / "os-release"
    release.write_text('NAME="Ubuntu"\nPRETTY_NAME="Ubuntu 24.04.3 LTS"\n')
    assert os_name(str(release)) == "Ubuntu 24.04.3 LTS"
    release.write_text("PRETTY_NAME='DGX OS 7'\n")
    assert os_name(str(release)) == "DGX OS 7"
    assert os_name(str(tmp_path / "none")) == ""


def test_deployment_records_parse(tmp_path):
    record = json.dumps({"engine": "sglang", "profile": "512k", "deployment_id": "d1",
                         "spec_hash": "s", "image": "i", "image_id": "sha256:x"}).encode()
    old = json.dumps({"engine": "vllm", "no_such_field": 1}).encode()

    def section(index, data):
        return (f"@@{index} f\nstat regular file|644|root|root|{len(data)}|1.0\n"
                f"content {base64.b64encode(data).decode()}\n")

    text = "@@base\nb\n1.0\n" + section(0, record) + section(1, old) + "@@2 f\nmissing\n"
    found = records_of(answer(text, records.queries()))
    assert found["current"].deployment_id == "d1" and found["current"].status == "starting"
    assert found["last-good"] is None and found["failed"] is None


def test_records_read_here(tmp_path, monkeypatch):
    monkeypatch.setattr(records, "RECORD_DIR", str(tmp_path))
    (tmp_path / "failed.json").write_text(json.dumps({"engine": "vllm"}))
    done = subprocess.run(argv(records.queries()), capture_output=True, text=True, timeout=30)
    found = records.records_of(answer(done.stdout, records.queries()))
    assert found == {"current": None, "last-good": None, "failed": {"engine": "vllm"}}
