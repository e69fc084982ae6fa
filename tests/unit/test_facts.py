"""Facts script output -> NodeFacts, against output captured from a rehearsal node."""

from sparkrack.facts import (FACTS_SCRIPT, GPU_FIELDS, facts_argv, parse_facts, parse_gpu,
                             split_sections)
from sparkrack.status import cap_state

SAMPLE = """
@@ hostname 0
spark-03

@@ kernel 0
6.18.44-fc-v782

@@ os 0
Debian GNU/Linux 12 (bookworm)

@@ boot_id 0
093d830e-9634-4f95-b9b8-ba9aa4b10d41

@@ gpu 0
NVIDIA GB10, 208, 3003, 3.90, 38, 0, P8, Enabled, 580.126.09

@@ meminfo 0
MemTotal:       127600748 kB
MemAvailable:   118566368 kB

@@ clock_cap 0
Result=success
ExecMainStatus=0
LoadState=loaded
ActiveState=active
SubState=exited
UnitFileState=enabled
ActiveEnterTimestampMonotonic=1234

@@ burn 0
{"ok": true, "boot_id": "093d830e-9634-4f95-b9b8-ba9aa4b10d41", "time": 0, "max_sm_mhz": 2190}
"""


def test_parse_sample():
    f = parse_facts(SAMPLE)
    assert (f.hostname, f.kernel, f.boot_id[:8]) == ("spark-03", "6.18.44-fc-v782", "093d830e")
    assert (f.gpu.name, f.gpu.sm_mhz, f.gpu.max_sm_mhz, f.gpu.power_w) == ("NVIDIA GB10", 208, 3003, 3.9)
    assert (f.mem_total_kb, f.mem_available_kb) == (127600748, 118566368)
    assert (f.clock_cap.active, f.clock_cap.result, f.clock_cap.enabled) == ("active", "success", "enabled")
    assert f.burn["max_sm_mhz"] == 2190
    assert cap_state(f).startswith("unit ok, verified ")


def test_nvidia_smi_failure_is_kept_as_an_error():
    text = "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure"
    gpu = parse_gpu(9, text)
    assert gpu.name is None and gpu.error.startswith("NVIDIA-SMI has failed")


def test_not_available_values_become_none():
    gpu = parse_gpu(0, "NVIDIA GB10, 208, 3003, [N/A], 38, 0, P8, Enabled, 580.126.09")
    assert gpu.power_w is None and gpu.sm_mhz == 208


def test_burn_from_an_earlier_boot_is_not_a_verification():
    f = parse_facts(SAMPLE.replace('"boot_id": "093d830e', '"boot_id": "ffffffff'))
    assert cap_state(f) == "unit ok, burn before reboot"


def test_missing_unit_and_no_burn():
    f = parse_facts(SAMPLE.replace("LoadState=loaded", "LoadState=not-found").split("@@ burn")[0])
    assert cap_state(f) == "no unit, never burned"


def test_script_takes_values_as_arguments_only():
    argv = facts_argv()
    assert argv[:2] == ["sh", "-c"] and argv[2] == FACTS_SCRIPT
    assert argv[4] == ",".join(GPU_FIELDS)
    assert "sparkrack-clock-cap" not in FACTS_SCRIPT  # the unit name is $2, not baked in


def test_sections_without_trailing_newline():
    assert split_sections("@@ a 0\nx\n@@ b 3") == {"a": (0, "x"), "b": (3, "")}
