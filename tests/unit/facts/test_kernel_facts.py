"""The KHO judgement: the symptom (CMA counters, command line), never the release's name."""

import pytest

from sparkrack.facts.kernel import KernelFacts, kho_off

BROKEN = dict(cmdline="BOOT_IMAGE=/boot/vmlinuz ro quiet splash", cma_total_kb=0,
              cma_free_kb=10171187)  # ~9.7 GiB free against a total of 0 (NV-Kernels#590)
TAIL = ("and no kho=off on its command line (KHO's scratch pageblocks): ibv_reg_mr fails "
        "with ENOMEM once about 108 GiB is committed, after the weights load; boot it with "
        "kho=off")


def test_the_kho_symptom_is_a_problem_under_any_name():
    for release in ("7.0.0-1019-nvidia", "7.0.0-1031-nvidia", "6.17.0-1008-nvidia"):
        problem = KernelFacts(release, **BROKEN).problem()
        assert problem == f"CmaFree 10171187 kB above its CmaTotal 0 kB {TAIL}"


def test_both_public_forms_are_judged():
    """CmaTotal 0 (NV-Kernels#590/#591), or a 32 MiB area with ~9.5 GiB free (the second
    form; MiaAI-Lab/DeepSeek-v4-Flash-DSpark-2x-DGX-Spark#259); 919 MiB free counts too."""
    second = KernelFacts("7.0.0-1019-nvidia", "ro quiet cma=32M", 32768, 9961472).problem()
    assert second == f"CmaFree 9961472 kB above its CmaTotal 32768 kB {TAIL}"
    assert KernelFacts("7.0.0-1019-nvidia", "ro", 0, 940604).problem().startswith(
        "CmaFree 940604 kB above its CmaTotal 0 kB")
    assert KernelFacts("7.0.0-1019-nvidia", "ro cma=32M kho=off", 32768, 9961472).problem() \
        is None
    assert KernelFacts("6.17.0-1008-nvidia", "ro cma=32M", 32768, 32768).problem() is None


def test_a_fixed_kernel_or_kho_off_passes_whatever_its_name():
    assert KernelFacts("7.0.0-1019-nvidia", "ro quiet", 0, 0).problem() is None  # no CMA
    assert KernelFacts("7.0.0-1019-nvidia", "ro quiet", 65536, 60000).problem() is None
    assert KernelFacts("7.0.0-1019-nvidia", "ro quiet kho=off", 0, 10171187).problem() is None


@pytest.mark.parametrize("cmdline,off", [
    ("ro kho=off", True), ("kho=0 ro", True), ("kho=N", True), ("kho=on", False),
    ("ro", False), ("kho=off kho=on", False), ("nokho=off", False), ("kho=", False),
    ("kho=false", True)])
def test_kho_off_reads_the_command_line_as_the_kernel_does(cmdline, off):
    assert kho_off(cmdline) is off


def test_unknown_facts_are_not_judged():
    facts = KernelFacts("7.0.0-1019-nvidia", None, 0, 10171187)
    assert not facts.known and facts.problem() is None
    assert not KernelFacts("", **BROKEN).known
