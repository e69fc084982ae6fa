"""The node itself, for `invoke status`, the gates and onboarding (`node_section`, run by
gather.py), and its memory alone for `watch` (`memory_section`).

    hostname NAME / kernel RELEASE / os PRETTY_NAME
    gpu RC FIRST-LINE     nvidia-smi --query-gpu=FIELDS --format=csv,noheader,nounits
    MemTotal KB / MemAvailable KB          (`memory_section` prints these two lines only)
    CmaTotal KB / CmaFree KB / cmdline TEXT   the CMA counters and /proc/cmdline (node only)
    cuda VERSION          the CUDA version nvidia-smi -q reports (`cuda_section`)

The watchdog's poll asks `sample_section` (the GPU line and the memory lines, every second)
and, once per node, `thermal_section`: the Temperature block of `nvidia-smi -q -d
TEMPERATURE`, label and value per line (`GPU Slowdown T.Limit Temp: -2 C`).
"""

import os

from .spawn import run


def os_name(path="/etc/os-release"):
    """PRETTY_NAME of os-release, unquoted as the shell reads it ("" when absent)."""
    try:
        with open(path, errors="replace") as handle:
            for line in handle:
                if line.startswith("PRETTY_NAME="):
                    import shlex  # here: most round trips never need it

                    words = shlex.split(line[len("PRETTY_NAME="):], comments=True)
                    return words[0] if words else ""
    except (OSError, ValueError):
        pass
    return ""


def gpu_line(fields, optional=""):
    """(exit code, first line of output) of the nvidia-smi query (with optional's field
    last when this driver knows it: an older one refuses the whole query)."""
    if optional:
        rc, line = _gpu_line(fields + "," + optional)
        if not (rc == 2 and "is not a valid field" in line):
            return rc, line
    return _gpu_line(fields)


def _gpu_line(fields):
    """(exit code, first line of output) of one nvidia-smi query."""
    try:
        code, output = run(["nvidia-smi", "--query-gpu=" + fields,
                            "--format=csv,noheader,nounits"])
    except OSError as error:
        return 127, "nvidia-smi: %s" % (error.strerror or error)
    lines = output.decode(errors="replace").strip().splitlines()
    return code, lines[0] if lines else ""


def memory(path="/proc/meminfo", keys=("MemTotal", "MemAvailable")):
    """{key: kB} of keys as /proc/meminfo says."""
    found = {}
    try:
        with open(path) as handle:
            for line in handle:
                key, _, rest = line.partition(":")
                if key in keys and rest.split():
                    found[key] = rest.split()[0]
    except OSError:
        pass
    return found


def kernel_release():
    """`uname -r` as the node's PATH answers it (the rehearsal rack simulates a host kernel
    there, as a real node's differs); the uname syscall's if it cannot be run."""
    try:
        code, output = run(["uname", "-r"], stderr=False, timeout=10)
        release = output.decode(errors="replace").strip()
        if code == 0 and release:
            return release
    except OSError:  # TimeoutError is one
        pass
    return os.uname().release


def node_section(fields):
    rc, line = gpu_line(fields)
    lines = ["hostname " + os.uname().nodename, "kernel " + kernel_release(),
             "os " + os_name(), "gpu %d %s" % (rc, line)]
    cma = memory(keys=("CmaTotal", "CmaFree"))
    return lines + memory_section() + ["{} {}".format(*item) for item in sorted(cma.items())] + \
        cmdline_section()


def cmdline_section(path="/proc/cmdline"):
    """`cmdline TEXT`: the booted kernel's command line (nothing when unreadable)."""
    try:
        with open(path, errors="replace") as handle:
            return ["cmdline " + " ".join(handle.read().split())]
    except OSError:
        return []


def memory_section():
    return ["{} {}".format(*item) for item in sorted(memory().items())]


def sample_section(fields, optional):
    """`gpu RC LINE` (the watch's fields) and the memory lines: one poll of the node."""
    rc, line = gpu_line(fields, optional)
    return ["gpu %d %s" % (rc, line)] + memory_section()


def thermal_section():
    """The Temperature block of `nvidia-smi -q -d TEMPERATURE`: `LABEL: VALUE` lines."""
    try:
        output = run(["nvidia-smi", "-q", "-d", "TEMPERATURE"], stderr=False)[1]
    except OSError:
        return []
    lines, inside = [], False
    for line in output.decode(errors="replace").splitlines():
        if line.strip() == "Temperature":
            inside = True
            continue
        label, colon, value = line.partition(":")
        if inside and not colon:
            break
        if inside:
            lines.append(f"{label.strip()}: {value.strip()}")
    return lines


def cuda_section():
    """`cuda VERSION` as `nvidia-smi -q` reports it (nothing when it does not)."""
    try:
        output = run(["nvidia-smi", "-q"], stderr=False)[1]
    except OSError:
        return []
    for line in output.decode(errors="replace").splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "CUDA Version" and value.strip():
            return ["cuda " + value.strip()]
    return []
