"""The burn check's pure parts: verdicts from samples, output parsing, the load command."""

import dataclasses
import subprocess
from pathlib import Path
from types import SimpleNamespace

from sparkrack.fleet import quote_argv
from sparkrack.inventory import load_inventory
from sparkrack.remote import text
from sparkrack.remote.capjudge import (
    BAD_CAP,
    LATCHED,
    NO_LOAD,
    OK,
    UNCAPPED,
    Sample,
    judge,
    max_clock,
    parse_output,
)
from sparkrack.safety.burn import BurnResult, burn, burn_argv, load_argv

REPO = Path(__file__).resolve().parents[3]


def samples(*points):
    return [Sample(float(i), sm, power, util) for i, (sm, power, util) in enumerate(points)]


def test_capped_clock_is_ok_idle_samples_ignored():
    verdict, reason, max_sm, max_power = judge(
        samples((208, 3.9, 0), (2190, 44.5, 100), (2190, 44.6, 100)), 2200)
    assert (verdict, max_sm, max_power) == (OK, 2190, 44.6)
    assert reason == "max 2190 MHz <= cap 2200 MHz under load, 45 W"


def test_above_the_cap_is_uncapped():
    verdict, reason, max_sm, _ = judge(samples((2450, 58.2, 100), (2190, 44, 100)), 2200)
    assert verdict == UNCAPPED and max_sm == 2450 and "above the 2200 MHz cap" in reason


def test_low_clock_under_load_is_latched():
    verdict, reason, max_sm, _ = judge(samples((715, 18.0, 100), (716, 18.2, 100)), 2200)
    assert verdict == LATCHED and max_sm == 716 and "full power removal" in reason


def test_a_cap_at_or_above_the_gpus_maximum_clock_is_refused_as_no_cap():
    """Issue 53: with clock_cap_mhz 9000 an uncapped GB10 (its clock under load far below
    its 3,003 MHz maximum) was judged "ok": a cap no clock can exceed is no cap at all."""
    uncapped = samples((2477, 86.0, 100), (2450, 85.1, 100))
    for cap in (9000, 3003):
        verdict, reason, max_sm, _ = judge(uncapped, cap, max_mhz=3003)
        assert (verdict, max_sm) == (BAD_CAP, 2477)
        assert reason.startswith(f"the {cap} MHz cap is at or above this GPU's maximum SM clock "
                                 "(3003 MHz, clocks.max.sm): no clock under load can exceed it, "
                                 "so a burn cannot tell the cap from no cap")
    assert judge(uncapped, 2200, max_mhz=3003)[0] == UNCAPPED  # a cap it can exceed: judged
    assert judge(samples((2190, 44.0, 100)), 2200, max_mhz=3003)[0] == OK


def test_a_cap_under_the_latch_floor_is_refused_not_called_latched():
    """A 500 MHz cap made every burn say LATCHED: a GPU held at such a cap cannot be told
    from a latched one."""
    verdict, reason, *_ = judge(samples((495, 9.0, 100), (489, 9.1, 100)), 500, max_mhz=3003)
    assert verdict == BAD_CAP
    assert reason.startswith("the 500 MHz cap is under 1100 MHz: a GPU held there under load "
                             "reads as latched")


def test_no_busy_sample_is_no_load_with_the_reason():
    verdict, reason, *_ = judge(samples((208, 3.9, 0)), 2200, 1, "gpu-sim: daemon down")
    assert verdict == NO_LOAD
    assert reason == "the GPU never went under load (load exited 1: gpu-sim: daemon down)"


def test_record_is_what_status_reads():
    result = BurnResult("spark-01", False, UNCAPPED, "long", 2200, 2450, 58.2, "boot", 1.0,
                        samples((2450, 58.2, 100)))
    record = result.record()
    assert record["ok"] is False and record["boot_id"] == "boot"
    assert record["reason"] == "UNCAPPED 2450 MHz > cap 2200"
    assert {"ok", "reason", "boot_id", "time", "max_sm_mhz", "max_power_w", "cap_mhz"} <= set(
        record)


def test_output_parses():
    text = ("b00t-id\nS 10.5 208, 3.90, 0\nS 11.0 2190, 44.50, 100\n"
            "S 11.5 [N/A], [N/A], [N/A]\nRC 0\nL some output\n")
    boot, got, rc, tail = parse_output(text)
    assert boot == "b00t-id" and rc == 0 and tail == "some output"
    assert got[1] == Sample(11.0, 2190, 44.5, 100) and got[2].sm_mhz is None


def test_load_command_per_rack():
    rehearsal = load_inventory(REPO / "inventory" / "rehearsal")
    assert load_argv(rehearsal.head, 5, "img") == ["gpu-sim", "load", "--seconds", "5"]
    real = load_inventory(REPO / "inventory" / "rack")
    argv = load_argv(real.head, 2.5, "lmsysorg/sglang:v0.5.22-cu130")
    assert argv[:8] == ["docker", "run", "--rm", "--gpus", "all", "--entrypoint", "python3",
                        "lmsysorg/sglang:v0.5.22-cu130"]
    assert argv[-1] == "2.5"
    compile(argv[-2], "<burn>", "exec")  # the GPU job is valid Python


def test_script_samples_while_the_load_runs(tmp_path):
    fake = tmp_path / "nvidia-smi"
    fake.write_text("#!/bin/sh\necho '2190, 44.50, 100'\n")
    fake.chmod(0o755)
    record = tmp_path / "rec" / "burn.json"
    argv = ["sh", "-c", text("burn"), "sh", "0.2", str(record), "clocks.sm", "2", "3", "50",
            "sleep", "0.7"]
    done = subprocess.run(["sh", "-c", quote_argv(argv)], capture_output=True, text=True, check=False,
                          env={"PATH": f"{tmp_path}:/usr/bin:/bin"}, timeout=20)
    _, got, rc, _ = parse_output(done.stdout)
    assert rc == 0 and len(got) >= 2 and got[0].sm_mhz == 2190
    assert record.parent.is_dir()


def test_script_reads_the_gpus_maximum_clock_before_its_load(tmp_path):
    fake = tmp_path / "nvidia-smi"
    fake.write_text('#!/bin/sh\ncase "$1" in *clocks.max.sm*) echo 3003 ;; '
                    "*) echo '2190, 44.50, 100' ;; esac\n")
    fake.chmod(0o755)
    argv = ["sh", "-c", text("burn"), "sh", "0.2", str(tmp_path / "burn.json"), "clocks.sm", "2",
            "3", "50", "sleep", "0.5"]
    done = subprocess.run(["sh", "-c", quote_argv(argv)], capture_output=True, text=True,
                          check=False, env={"PATH": f"{tmp_path}:/usr/bin:/bin"}, timeout=20)
    assert max_clock(done.stdout) == 3003
    assert parse_output(done.stdout)[1][0].sm_mhz == 2190
    assert max_clock("boot\nM [N/A]\nS 1 2190, 4, 100\n") is None


class _Fleet:
    """A fleet whose burn command printed output on every node (and puts nothing)."""

    def __init__(self, output: str):
        self.output = output
        self.put_files = {}

    def run(self, commands, timeout=None):
        return {node: SimpleNamespace(status="ok", stdout=self.output, error=None)
                for node in commands}

    def put(self, files):
        self.put_files.update(files)
        return {node: SimpleNamespace(ok=True, error=None) for node in files}


def test_burn_refuses_a_cap_the_gpu_cannot_exceed_and_records_it():
    rehearsal = load_inventory(REPO / "inventory" / "rehearsal")
    head = rehearsal.head
    node = dataclasses.replace(head, vars=dataclasses.replace(head.vars, clock_cap_mhz=9000))
    output = "boot-1\nM 3003\nS 1.0 2477, 86.00, 100\nS 1.5 2450, 85.10, 100\nRC 0\n"
    fleet = _Fleet(output)
    [result] = burn(rehearsal, [node], 1, fleet=fleet)
    assert (result.ok, result.verdict, result.max_sm_mhz) == (False, BAD_CAP, 2477)
    assert result.record()["reason"] == "BAD CAP 9000 MHz: no burn can prove it"
    assert list(fleet.put_files) == [head.name]


def test_a_load_that_ends_before_the_sampler_saw_it_busy_runs_again(tmp_path):
    """A sampler slowed by a busy host: each reading takes longer than the load lasts, so a
    single run would leave at most one busy sample; the script runs the load until two."""
    fake = tmp_path / "nvidia-smi"
    fake.write_text("#!/bin/sh\nsleep 0.3\necho '2190, 44.50, 100'\n")
    fake.chmod(0o755)
    runs = tmp_path / "runs"
    load = ["sh", "-c", 'echo x >> "$0"; sleep 0.1', str(runs)]
    argv = ["sh", "-c", text("burn"), "sh", "0.05", str(tmp_path / "burn.json"), "f", "2", "3",
            "50", *load]
    done = subprocess.run(["sh", "-c", quote_argv(argv)], capture_output=True, text=True,
                          check=False, env={"PATH": f"{tmp_path}:/usr/bin:/bin"}, timeout=20)
    _, got, rc, _ = parse_output(done.stdout)
    assert rc == 0 and len(got) == 2 and runs.read_text().count("x") == 2
    verdict, *_ = judge(got, 2200, rc)
    assert verdict == OK


def test_the_load_runs_at_most_load_runs_times_and_a_failed_load_stops_it(tmp_path):
    fake = tmp_path / "nvidia-smi"
    fake.write_text("#!/bin/sh\necho '600, 10.00, 0'\n")  # never busy
    fake.chmod(0o755)
    runs = tmp_path / "runs"
    for code, expected in (("0", 3), ("4", 1)):
        runs.write_text("")
        load = ["sh", "-c", f'echo x >> "$0"; sleep 0.1; exit {code}', str(runs)]
        argv = ["sh", "-c", text("burn"), "sh", "0.05", str(tmp_path / "b.json"), "f", "2", "3",
                "50", *load]
        done = subprocess.run(["sh", "-c", quote_argv(argv)], capture_output=True, text=True,
                              check=False, env={"PATH": f"{tmp_path}:/usr/bin:/bin"}, timeout=20)
        assert parse_output(done.stdout)[2] == int(code)
        assert runs.read_text().count("x") == expected


def test_burn_argv_keeps_inventory_values_as_arguments():
    rehearsal = load_inventory(REPO / "inventory" / "rehearsal")
    argv = burn_argv(rehearsal.head, 3, "x; reboot")
    assert argv[:3] == ["sh", "-c", text("burn")]
