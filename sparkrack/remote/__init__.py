"""Scripts that run on the nodes, as real files shipped with the package (stdlib only;
keygen.py runs with the watchdog's lib/, where cryptography is).

A node has no sparkrack: a script goes to it as `python3 -c TEXT`, a shell one
(`text(name)`: NAME.sh as it is) as `sh -c TEXT NAME args...` or `bash -c ...`, values
only as arguments or stdin, never formatted into the text. `script(name)` is the text of
`NAME.py` with the parts it imports (`from .PART import ...`) put before it, each once,
and those import lines dropped; importing the same files here (`sparkrack.remote.X`)
is how the unit tests run them locally. Nothing secret ever goes in argv: a transfer's
token is the first line of the script's stdin.

- handshake.py  the one token handshake of every node-to-node connection: streams
                (listen / connect) and probes (greet / greeted)
- stagefiles.py the model directory on a node: partial files, the hash cache, the lock
- relay.py      one hop of the pipelined chain: read a stream (docker save, model files,
                a listening socket or stdin), load or write it here, forward it to the next
- stager.py     questions about a model directory: sizes, check against a manifest, make a
                manifest, list and remove staged models
- gather.py     the one facts script: every query of a round trip (sparkrack/facts) in one
                process; files, units, HCAs, guards and netdevs are its own
- node.py       its node facts: hostname, kernel, OS, GPU (nvidia-smi), memory
- dockerd.py    its docker questions, over dockerd's socket: images, version, runtimes, hook
- links.py      its links: MTU, operstate, IPv4 of netdevs and of HCAs' netdevs
- watchdog.py   its watchdog node: the service's Python, install directory, key, unit, state
- probe.py      onboarding's port probe: listen (greeting with the token) / connect
- knock.py      one TCP connect to each ADDR:PORT: accepted, refused or silent (break-glass
                asks the workers whether they still reach the head)
- rails.py      the fabric check's jumbo frame and burst per rail: serve / send
- keygen.py     the watchdog's key on its node (run with its lib/, where cryptography is)
- metrics.py    waits for the watchdog's first poll on its metrics endpoint
- burn.sh       the burn gate's load and nvidia-smi sampler (sparkrack/safety/burn.py; sh)
- capjudge.py   the burn's verdict from the sampler's output (safety/burn.py, capagent.py)
- capnode.py    a Kubernetes Node's clock-cap record: label, taint, verdict of which boot
- kubeapi.py    the Kubernetes API with a pod's service account (capagent.py, capgate.py)
- capagent.py   a Kubernetes node's clock-cap agent: lock, burn or watch, judge, record
                (export/agent.py ships it)
- capgate.py    an exported engine pod's gate: an ok of this boot, recent, or no start
- leader.py     an exported worker pod's wait for its leader's address
- lock.sh       the rack lock's node side (sparkrack/oplock/remote.py; sh)
- dockerlimits.sh  what a rehearsal node's dockerd can give (lifecycle/nodelimits.py; sh)
- sequence.sh   a node's commands in order, the failed one as an @@<position> failed
                section (provision/apply.py; bash)
- settle.sh     waits until a command's guard holds (provision's command `settle`; sh)
- ship.sh       unpacks the watchdog's lib/ from stdin (watchdog/ship.py; bash)
- remove.sh     removes the watchdog's directories (watchdog/uninstall.py; sh)
"""

from __future__ import annotations

import re
from functools import cache
from importlib import resources

_PART = re.compile(r"^from \.(\w+) import (?:\([^)]*\)|.*)$", re.MULTILINE)


@cache
def script(name: str) -> str:
    """The text of remote/NAME.py, self-contained: its parts first, once each."""
    done: list[str] = []
    texts: list[str] = []

    def add(part: str) -> None:
        if part in done:
            return
        text = resources.files(__package__).joinpath(f"{part}.py").read_text()
        for needed in _PART.findall(text):
            add(needed)
        done.append(part)
        texts.append(_PART.sub("", text))

    add(name)
    return "\n".join(texts)


def argv(python: str, name: str, *args: str) -> list[str]:
    """The argv that runs remote/NAME.py with args by the node's python."""
    return [python, "-c", script(name), *args]


@cache
def text(name: str) -> str:
    """The text of remote/NAME.sh as it is (a shell script: `sh -c TEXT NAME args...`)."""
    return resources.files(__package__).joinpath(f"{name}.sh").read_text()
