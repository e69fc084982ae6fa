"""What a text value of the inventory may be, by kind: each kind's check says what is
wrong with a value, worded to follow it ("is not an absolute path"). Why each rule holds:
schema.py's docstring.
"""

from __future__ import annotations

import ipaddress
import posixpath
import re
import unicodedata
from collections.abc import Callable
from typing import Any

# Kinds of text value (Spec.kind), each checked by KIND_CHECKS.
RACK_NAME = "rack name"
ABS_PATH = "absolute path"
LOCAL_PATH = "local path"
IMAGE_REF = "image reference"
IFNAME = "interface name"
HCA_NAME = "HCA name"
MODEL_NAME = "model name"
USER_NAME = "user name"
ARGV_WORD = "argv word"


def has_control(text: str) -> bool:
    """Whether text holds a control character (newline, tab, NUL, ESC, ...) or a Unicode
    line or paragraph separator: what no name, path or argv word of the rack may carry."""
    return any(unicodedata.category(char) in ("Cc", "Zl", "Zp") for char in text)



_LABEL = re.compile(r"(?!-)[A-Za-z0-9-]{1,63}(?<!-)")


def is_address(value: Any) -> bool:
    """Whether value is an IPv4/IPv6 address (no zone index) or a valid DNS host name."""
    return address_problem(value) is None


def address_problem(value: Any) -> str | None:
    """None for an IPv4/IPv6 address or a DNS host name, else what is wrong, worded to
    follow the value: "has a zone index ...". A zone index (fe80::1%eth0) is refused."""
    if not isinstance(value, str):
        return "is not text"
    if "%" in value:
        return ("has a zone index (%...): link-local addresses are refused, use a global or "
                "unique-local one")
    try:
        ipaddress.ip_address(value)
        return None
    except ValueError:
        pass
    if re.fullmatch(r"[0-9.]+", value):
        return "is not a valid IPv4 address"  # a malformed IPv4 address, not a name
    if len(value) <= 253 and all(_LABEL.fullmatch(label) for label in value.split(".")):
        return None
    return "is not an IP address or host name (DNS labels: letters, digits and '-')"


# docker's reference grammar (github.com/distribution/reference, regexp.go)
_ALNUM = r"[a-z0-9]+"
_PATH_COMPONENT = rf"{_ALNUM}(?:(?:[._]|__|-+){_ALNUM})*"
_DOMAIN_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_DOMAIN = (rf"(?:{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})*|\[[a-fA-F0-9:]+\])"
           r"(?::[0-9]+)?")
_REFERENCE = re.compile(
    rf"(?P<name>(?:{_DOMAIN}/)?{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*)"
    r"(?::[\w][\w.-]{0,127})?(?:@sha256:[0-9a-f]{64})?", re.ASCII)
_RACK_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
_IFNAME_CHARS = re.compile(r"[A-Za-z0-9_.-]+")
_MODEL_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:/@+-]{0,255}")
_USER_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9._-]{0,31}")
# a node's name names files (host_vars/NAME.yml), units and containers: at most one DNS
# label's 63 characters (RFC 1035 2.3.4), which is also what a Linux host name holds
MAX_NODE_NAME = 63
_NODE_NAME = re.compile(rf"[A-Za-z0-9][A-Za-z0-9._-]{{0,{MAX_NODE_NAME - 1}}}")
PATH_MAX = 4095


def is_node_name(value: Any) -> bool:
    """Whether value is a usable host or group name: at most MAX_NODE_NAME letters, digits,
    '.', '_' and '-', starting with a letter or digit (so never a path, '.' or '..'), and
    not 'all'."""
    return isinstance(value, str) and bool(_NODE_NAME.fullmatch(value)) and value != "all"


def fabric_address_problem(value: str) -> str | None:
    """None for an IPv4 address, else what a fabric address (roce_addr, roce_twin_addr:
    role fabric's netplan drop-in, NCCL's IPv4-mapped GID) cannot be: worded to follow it."""
    try:
        address = ipaddress.ip_address(value)
    except ValueError:
        return "is a DNS name"
    return "is an IPv6 address" if address.version == 6 else None


def _image_ref_problem(value: str) -> str | None:
    match = _REFERENCE.fullmatch(value) if len(value) <= 512 else None
    if match and len(match["name"]) <= 255:
        return None
    return ("is not a docker image reference ([REGISTRY[:PORT]/]NAME[:TAG][@sha256:DIGEST], "
            "the name lower-case)")


def _netdev_problem(value: str, limit: int) -> str | None:
    """The kernel's rules for a device name (dev_valid_name), within limit bytes, and only
    the characters device names are made of: NCCL reads lists of them split at ','."""
    size = len(value.encode())
    if not 1 <= size <= limit:
        return f"is not 1-{limit} bytes long (the kernel's limit)"
    if value in (".", ".."):
        return "is '.' or '..', which the kernel refuses"
    if any(char.isspace() for char in value) or has_control(value):
        return "holds whitespace or a control character"
    if "/" in value or ":" in value:
        return "holds '/' or ':', which the kernel refuses in a device name"
    if not _IFNAME_CHARS.fullmatch(value):
        return "holds a character other than letters, digits, '_', '.' and '-'"
    return None


def abs_path_problem(value: str) -> str | None:
    if not value.startswith("/"):
        return "is not an absolute path"
    if any(char.isspace() for char in value) or has_control(value):
        return "holds whitespace or a control character"
    if ":" in value or "," in value:
        return "holds ':' or ',', which docker reads as field separators of a mount"
    plain = value.rstrip("/") or "/"
    if plain == "/" or posixpath.normpath(plain) != plain:
        return "is not a plain directory path (no '.', '..' or '//' parts; not / itself)"
    if len(value.encode()) > PATH_MAX:
        return f"is longer than {PATH_MAX} bytes"
    return None


def _local_path_problem(value: str) -> str | None:
    if has_control(value):
        return "holds a control character (a newline, tab, ...)"
    if len(value.encode()) > PATH_MAX:
        return f"is longer than {PATH_MAX} bytes"
    return None


def _pattern_problem(pattern: re.Pattern, what: str) -> Callable[[str], str | None]:
    return lambda value: None if pattern.fullmatch(value) else f"is not {what}"


# the kinds whose whole rule is one regular expression, and the host and group names': what
# the inventory's JSON Schema gives an editor (jsonschema.py)
KIND_PATTERNS: dict[str, re.Pattern] = {RACK_NAME: _RACK_NAME, MODEL_NAME: _MODEL_NAME,
                                        USER_NAME: _USER_NAME}
NODE_NAME_PATTERN = _NODE_NAME

KIND_CHECKS: dict[str, Callable[[str], str | None]] = {
    RACK_NAME: _pattern_problem(
        _RACK_NAME, "a rack name usable as a file name (1-64 letters, digits, '.', '_' or "
        "'-', starting with a letter or digit)"),
    ABS_PATH: abs_path_problem,
    LOCAL_PATH: _local_path_problem,
    IMAGE_REF: _image_ref_problem,
    IFNAME: lambda value: _netdev_problem(value, 15),
    HCA_NAME: lambda value: _netdev_problem(value, 63),
    MODEL_NAME: _pattern_problem(
        _MODEL_NAME, "a model name (letters, digits and '._:/@+-', starting with a letter "
        "or digit, at most 256)"),
    USER_NAME: _pattern_problem(
        _USER_NAME, "a user name (letters, digits, '.', '_' and '-', not starting with a "
        "digit, '.' or '-'; at most 32)"),
    ARGV_WORD: _local_path_problem,
}
