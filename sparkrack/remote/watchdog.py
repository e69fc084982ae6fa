"""The watchdog service's node, for `invoke watch.install / uninstall / status` (`watchdog_section`,
run by gather.py); its answer, line by line: docs/internals.md#the-watchdogs-node.

Every round trip carries this part, so its heavier modules (subprocess, socket, hashlib,
json)
are imported in the functions that need them, which few round trips call.
"""

import binascii
import os
import stat

# What the service's interpreter reports, one JSON line (run by that interpreter).
PLATFORM_SCRIPT = ("import json,platform,sys,sysconfig;print(json.dumps({'version':list("
                   "sys.version_info[:3]),'machine':platform.machine(),'soabi':"
                   "sysconfig.get_config_var('SOABI'),'libc':list(platform.libc_ver()),"
                   "'executable':sys.executable}))")
LIB_MANIFEST = ".sparkrack-manifest"  # in lib/: `sha256  path` lines (watchdog/payload.py MANIFEST)
MARKER = ".sparkrack-watchdog"  # watch.install's mark on its directory (inventory/watchdog_dir.py)


def output_of(argv):
    """(exit code, output lines, stderr included) of argv run from / (127: not found)."""
    import subprocess

    try:
        done = subprocess.run(argv, cwd="/", stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, check=False)
    except OSError as error:
        return 127 if isinstance(error, FileNotFoundError) else 126, [
            f"{argv[0]}: {error.strerror or error}"]
    return done.returncode, done.stdout.decode(errors="replace").splitlines()


def source_addresses(pairs):
    """{address: the source address this node reaches it from} (a UDP socket's after
    connect(): nothing is sent)."""
    import socket

    found = {}
    for address, port in pairs:
        try:
            family, kind, proto, _, target = socket.getaddrinfo(
                address, int(port), type=socket.SOCK_DGRAM)[0]
            with socket.socket(family, kind, proto) as probe:
                probe.connect(target)
                found[address] = probe.getsockname()[0]
        except (OSError, ValueError) as error:
            found[address] = "error: " + str(error)
    return found


def sha256_of(path):
    import hashlib

    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def is_regular(path):
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False


CODE_SUFFIXES = (".py", ".so", ".pyd")
SHOWN = 10  # names reported per kind


def is_code(name):
    """Whether Python runs the file: the sparkrack package whole (its data included: the
    roles and profiles the restart renders), and every other module or extension. The rest
    (CA bundles, type stubs, dist-info) is data no code hashes at import."""
    return name.startswith("sparkrack/") or name.endswith(CODE_SUFFIXES)


def manifest_problems(lib, text):
    """(differs, edited) of the manifest's `sha256  path` lines against lib: files Python
    runs that differ or are missing, and any missing file; data files edited in place.
    None when the manifest is empty or malformed."""
    lines = text.splitlines()
    differs, edited = [], []
    for line in lines:
        digest, sep, name = line.partition("  ")
        if not sep:
            return None
        try:
            same = sha256_of(os.path.join(lib, name)) == digest.lower()
        except OSError:
            differs.append(name)
            continue
        if not same:
            (differs if is_code(name) else edited).append(name)
    return (differs, edited) if lines else None


def manifest_lines(lib):
    try:
        with open(os.path.join(lib, LIB_MANIFEST), "rb") as handle:
            data = handle.read()
    except OSError:
        return []
    import hashlib
    import json

    found = manifest_problems(lib, data.decode(errors="surrogateescape"))
    differs, edited = found if found is not None else (["(the manifest itself)"], [])
    return ["manifest " + hashlib.sha256(data).hexdigest(),
            "manifest-check %d" % (1 if differs else 0),
            "manifest-differs " + json.dumps(differs[:SHOWN]),
            "manifest-edited " + json.dumps(edited[:SHOWN])]


def install_dir_kind(path):
    """What the install directory is: absent, empty, marked, legacy, link, file or foreign
    (a directory holding anything else: never the watchdog's to write into or remove)."""
    if os.path.islink(path):
        return "link"
    if not os.path.lexists(path):
        return "absent"
    if not os.path.isdir(path):
        return "file"
    if is_regular(os.path.join(path, MARKER)):
        return "marked"
    if is_regular(os.path.join(path, "lib", LIB_MANIFEST)):
        return "legacy"
    try:
        return "foreign" if os.listdir(path) else "empty"
    except OSError:
        return "foreign"


def copied_files(install_dir):
    """The regular files of inventory/ (not through a link) and README.md, sorted."""
    import json

    found = []
    top = os.path.join(install_dir, "inventory")
    if not os.path.islink(top):
        for folder, folders, names in os.walk(top):
            folders.sort()
            found += [os.path.join(folder, name) for name in sorted(names)]
    found.append(os.path.join(install_dir, "README.md"))
    lines = []
    for path in found:
        try:
            if is_regular(path):
                lines.append(f"file {sha256_of(path)} {json.dumps(os.path.relpath(path, install_dir))}")
        except OSError:
            pass  # unreadable: left out
    return lines


def encoded(key, path):
    """`KEY BASE64` of a regular file (links followed), nothing when there is none."""
    try:
        if os.path.isfile(path):
            with open(path, "rb") as handle:
                return [f"{key} {binascii.b2a_base64(handle.read(), newline=False).decode()}"]
    except OSError:
        pass
    return []


def watchdog_section(python, install_dir, key_path, unit_path, state_dir, state_file,
                     systemctl, unit, properties, pairs):
    import json

    rc, printed = output_of([python, "-c", PLATFORM_SCRIPT])
    lines = ["platform " + line for line in printed] + ["platform-rc %d" % rc]
    lines.append("sources " + json.dumps(source_addresses(pairs)))
    lib = os.path.join(install_dir, "lib")
    lines += ["exists " + what for what, path in (("install-dir", install_dir), ("lib", lib),
                                                  ("state-dir", state_dir))
              if os.path.exists(path)]
    lines.append("install-dir-kind " + install_dir_kind(install_dir))
    lines += manifest_lines(lib) + copied_files(install_dir)
    try:
        if os.stat(key_path).st_size > 0:
            lines.append("private-key")
    except OSError:
        pass
    lines += encoded("public-key", key_path + ".pub") + encoded("unit-file", unit_path)
    lines += encoded("state", state_file)
    _, shown = output_of([systemctl, "show", "-p", properties, "--", unit])
    lines += ["unit " + line for line in shown] + ["end"]
    return lines
