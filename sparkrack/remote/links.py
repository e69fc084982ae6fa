"""Network links, for onboarding's baseline (`links_section`, run by gather.py): MTU,
operstate and IPv4 address of the given netdevs and of the given HCAs' netdevs, one line
each:

    netdev DEV mtu=9000 state=up ipv4=10.77.1.19/24      (`-` for what is unknown)

sysfs first; `ip` where sysfs does not say.
"""

import os

from .spawn import run

INFINIBAND = "/sys/class/infiniband"
NET = "/sys/class/net"


def ip_lines(*args):
    try:
        output = run(["ip", "-o", *args], stderr=False)[1]
    except OSError:
        return []
    return output.decode(errors="replace").splitlines()


def read_word(path):
    try:
        with open(path) as handle:
            return handle.read().strip()
    except OSError:
        return ""


def link_word(dev, key):
    """The word after key in `ip -o link show dev DEV` ("" when there is none)."""
    for line in ip_lines("link", "show", "dev", dev):
        words = line.split()
        if key in words[:-1]:
            return words[words.index(key) + 1]
    return ""


def hca_netdevs(hca):
    try:
        return os.listdir(os.path.join(INFINIBAND, hca, "device", "net"))
    except OSError:
        return []


def links_section(hcas, devs):
    devices = set(devs)
    for hca in hcas:
        devices.update(hca_netdevs(hca))
    ipv4 = {}
    for line in ip_lines("-4", "addr", "show"):
        words = line.split()
        if len(words) > 3 and words[2] == "inet":
            ipv4.setdefault(words[1], words[3])
    lines = []
    for dev in sorted(devices):
        mtu = read_word(os.path.join(NET, dev, "mtu")) or link_word(dev, "mtu")
        state = read_word(os.path.join(NET, dev, "operstate")) or link_word(dev, "state").lower()
        lines.append("netdev {} mtu={} state={} ipv4={}".format(
            dev, mtu or "-", state or "-", ipv4.get(dev, "-")))
    return lines
