"""The one node script: every question of a round trip answered in one process, what to look
at as positional arguments, the answers as `@@<index> <kind>` sections after `@@base`
(the queries and the output: docs/internals.md#the-facts-script).
"""

import _json
import binascii
import grp
import os
import pwd
import stat
import sys
import time

from .dockerd import daemon_section, images_section
from .links import links_section
from .node import (
    cuda_section,
    memory_section,
    node_section,
    sample_section,
    thermal_section,
)
from .spawn import run
from .watchdog import watchdog_section

INFINIBAND = "/sys/class/infiniband"
EMPTY_GID = "0000:0000:0000:0000:0000:0000:0000:0000"
_SAFE = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789@%+=:,./-_")


def kind_of(mode, size):
    """The file type as GNU stat's %F prints it."""
    if stat.S_ISREG(mode):
        return "regular file" if size else "regular empty file"
    for test, name in ((stat.S_ISDIR, "directory"), (stat.S_ISLNK, "symbolic link"),
                       (stat.S_ISFIFO, "fifo"), (stat.S_ISSOCK, "socket"),
                       (stat.S_ISCHR, "character special file"),
                       (stat.S_ISBLK, "block special file")):
        if test(mode):
            return name
    return "weird file"


def name_of(lookup, number):
    try:
        return lookup(number)[0]
    except KeyError:
        return "UNKNOWN"


def quoted(name):
    """One line naming an entry: as is when plain, else $'...' with escapes (never a
    newline, whatever the name holds)."""
    if name and all(c in _SAFE for c in name):
        return name
    out = []
    for byte in os.fsencode(name):
        char = chr(byte)
        if char in "\\'":
            out.append("\\" + char)
        elif 32 <= byte < 127:
            out.append(char)
        else:
            out.append(f"\\x{byte:02x}")
    return "$'" + "".join(out) + "'"


def file_section(path, limit):
    try:
        st = os.lstat(path)
    except OSError:
        return ["missing"]
    mtime = "%d.%09d" % divmod(st.st_mtime_ns, 10**9)
    lines = ["stat %s|%o|%s|%s|%d|%s" % (
        kind_of(st.st_mode, st.st_size), stat.S_IMODE(st.st_mode),
        name_of(pwd.getpwuid, st.st_uid), name_of(grp.getgrgid, st.st_gid), st.st_size, mtime)]
    try:
        if stat.S_ISREG(st.st_mode):
            with open(path, "rb") as handle:
                if st.st_size <= limit:
                    lines.append("content " + b64(handle.read()))
                else:
                    import hashlib  # here: most round trips never need it

                    digest = hashlib.sha256()
                    for block in iter(lambda: handle.read(1 << 20), b""):
                        digest.update(block)
                    lines.append("sha256 " + digest.hexdigest())
        elif stat.S_ISDIR(st.st_mode):
            lines += ["entry " + quoted(entry) for entry in sorted(os.listdir(path))]
    except OSError:
        pass  # unreadable: the stat line alone, as the shell version gave
    return lines


class _Decoding:
    """What the standard library's JSON scanner (_json, json's own C parser) reads from a
    json.JSONDecoder: the arguments parsed as json.loads would, without importing json,
    whose decoder imports re (a quarter of a round trip's CPU on the node)."""

    strict = True
    object_hook = object_pairs_hook = None
    parse_float, parse_int = float, int

    @staticmethod
    def parse_constant(name):
        raise ValueError("not JSON: " + name)


def json_value(text):
    """The value of JSON text (json.dumps's, from the controller); ValueError if it is not."""
    try:
        value, end = _json.make_scanner(_Decoding())(text, 0)
    except StopIteration as stop:
        raise ValueError("not JSON at character %d" % stop.value) from None
    if end != len(text):
        raise ValueError("not JSON at character %d" % end)
    return value


def b64(data):
    """data in base64 as base64.b64encode gives it (binascii: no import of base64's re)."""
    return binascii.b2a_base64(data, newline=False).decode()


def first_line(path):
    try:
        with open(path, errors="replace") as handle:
            return handle.readline().rstrip("\n")
    except OSError:
        return None


def entries(folder):
    """The sorted names in folder ([] when it cannot be listed)."""
    try:
        return sorted(os.listdir(folder))
    except OSError:
        return []


def table(folder, keep):
    """`name:line` for each readable entry of a sysfs table whose line passes keep."""
    rows = []
    for name in entries(folder):
        line = first_line(os.path.join(folder, name))
        if line and keep(line):
            rows.append(f"{name}:{line}")
    return rows


def functions_section():
    """Every RDMA device of the node, one line each: `NAME<TAB>NETDEVS<TAB>PORT STATE`
    (how it is cabled: which functions are up)."""
    lines = []
    for name in entries(INFINIBAND):
        device = os.path.join(INFINIBAND, name)
        netdevs = entries(os.path.join(device, "device/net"))
        state = first_line(os.path.join(device, "ports/1/state")) or ""
        lines.append("{}\t{}\t{}".format(name, ",".join(netdevs), state))
    return lines


def hca_section(name):
    device = os.path.join(INFINIBAND, name)
    if not os.path.isdir(device):
        return []
    lines = ["present"]
    state = first_line(os.path.join(device, "ports/1/state"))
    if state is not None:
        lines.append("state " + state)
    rate = first_line(os.path.join(device, "ports/1/rate"))
    if rate is not None:
        lines.append("rate " + rate)
    lines += ["netdev " + n for n in entries(os.path.join(device, "device/net"))]
    lines.append("types")
    lines += table(os.path.join(device, "ports/1/gid_attrs/types"), lambda line: True)
    lines.append("gids")
    lines += table(os.path.join(device, "ports/1/gids"), lambda line: line != EMPTY_GID)
    return lines


def unit_section(unit, properties, systemctl):
    """`systemctl show` of the unit (nothing when there is no systemctl: not found)."""
    try:
        output = run([systemctl, "show", "-p", properties, "--", unit])[1]
    except OSError:
        return []
    return output.decode(errors="replace").splitlines()


def guard_section(argv):
    """["rc N"] and, when the guard said why it does not hold, ["why TEXT"]: the last line
    of its output, printable, at most 300 characters."""
    try:
        code, output = run(argv, stderr=False)
    except FileNotFoundError:
        return ["rc 127"]
    except OSError:
        return ["rc 126"]
    lines = output.decode(errors="replace").strip().splitlines()
    why = "".join(c for c in (lines[-1] if lines else "") if c.isprintable())[:300]
    return ["rc %d" % code] + (["why " + why] if why and code else [])


NETPLAN_DIRS = ("/lib/netplan", "/etc/netplan", "/run/netplan")  # a later one shadows


def netplan_section():
    """The YAML files netplan reads, in its order (by name; /run shadows /etc shadows
    /lib): `file PATH`, then `content BASE64` when readable."""
    chosen = {}
    for folder in NETPLAN_DIRS:
        for name in entries(folder):
            if name.endswith(".yaml"):
                chosen[name] = os.path.join(folder, name)
    lines = []
    for name in sorted(chosen):
        lines.append("file " + quoted(chosen[name]))
        try:
            with open(chosen[name], "rb") as handle:
                lines.append("content " + b64(handle.read()))
        except OSError:
            pass
    return lines


def net_section():
    with open("/proc/net/dev") as handle:
        return handle.read().splitlines()


SECTIONS = {function.__name__: function for function in (
    file_section, unit_section, hca_section, functions_section, guard_section, images_section,
    net_section, netplan_section, node_section, memory_section, sample_section, thermal_section,
    cuda_section, daemon_section, links_section, watchdog_section)}


def sections(args):
    """(name, lines) per query of args (`NAME ARGS_JSON` pairs: the node-side function of
    the query's kind and its arguments), in order; a name not in SECTIONS answers nothing."""
    args = list(args)
    for name, values in zip(args[::2], args[1::2]):
        section = SECTIONS.get(name)
        if section is None:
            yield "?", []
        else:
            yield name, section(*json_value(values))


def main(args):
    out = ["@@base", (first_line("/proc/sys/kernel/random/boot_id") or ""),
           "%d.%09d" % divmod(time.time_ns(), 10**9)]
    for index, (kind, lines) in enumerate(sections(args)):
        out += ["", "@@%d %s" % (index, kind), *lines]
    sys.stdout.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main(sys.argv[1:])
