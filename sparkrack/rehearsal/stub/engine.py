"""The entry point of one stub SGLang or vLLM rank (`main`; stdlib only, runs inside the
stub image): record, parse, check the model and settings, find the GPU and the transport,
then run as rank 0 (head.py) or a worker (worker.py). The life of a rank:
docs/rehearsal.md#the-stub-engines."""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
import time

from . import cli, fabric, faults, hubtoken, leak, transport
from . import config as stubconfig
from .gpu import Gpu, NoDevice
from .head import Head
from .log import Log, die
from .nccl import Communicator
from .record import VERSIONS, record_start
from .worker import Worker


def _management_address() -> str:
    """What an engine without *_HOST_IP advertises on a Spark: the default route's address,
    the management network's (the node's name resolves to it; '' if it does not)."""
    try:
        return socket.gethostbyname(socket.gethostname())
    except OSError:
        return ""


def _model_info(model_path: str, log: Log) -> dict:
    """The model directory's config.json; exit 1 as the engines do when there is none."""
    if not os.path.isdir(model_path):
        die(1, f"OSError: {model_path} is not a local folder and the model hub cannot be "
               "reached (no network on the rack): cannot load the model", log)
    path = os.path.join(model_path, "config.json")
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except (OSError, json.JSONDecodeError) as error:
        die(1, f"OSError: {model_path} does not appear to have a valid file named "
               f"config.json ({error})", log)
    return data if isinstance(data, dict) else {}


def _hub_login(repo: str, log: Log) -> None:
    """The lane fetches from gated repo: its Hugging Face token, read as huggingface_hub
    reads it, or exit 1 as the engine does (an unreadable file raises there too). The rack
    cannot reach the Hub, so a token found is taken as one the Hub accepts."""
    try:
        token = hubtoken.hub_token(os.environ)
    except OSError as error:
        die(1, f"{type(error).__name__}: {error}", log)
    if token is None:
        die(1, hubtoken.gated_error(repo), log)
    where = next((f"${name}" for name in hubtoken.ENV if os.environ.get(name, "").strip()),
                 hubtoken.token_path(os.environ))
    log(f"Hugging Face token for {repo} read from {where}")


def main(engine: str, argv: list[str] | None = None) -> None:
    """Run one rank of engine with argv (default: sys.argv[1:]); never returns."""
    started = time.monotonic()
    argv = list(sys.argv[1:] if argv is None else argv)
    record_start(engine, argv)
    try:
        args = cli.parse(engine, argv)
    except cli.ConfigError as error:
        die(1, f"ValueError: {error}")
    log = Log(engine, args.rank)
    model_info = _model_info(args.model_path, log)
    try:
        data = stubconfig.load(args.model_path)
        settings = stubconfig.resolve(data, engine, args.rank, argv, args.speculative_steps,
                                      VERSIONS[engine])
    except stubconfig.StubConfigError as error:
        die(1, f"sparkrack stub: bad {stubconfig.CONFIG_NAME}: {error}", log)
    faults.exit_at_start(settings, args.rank, log)
    if settings.gated_repo:
        _hub_login(settings.gated_repo, log)
    fraction = None
    if engine == "sglang":
        try:
            fraction = leak.budget_fraction(os.environ.get(leak.ENV))
        except ValueError as error:
            die(1, f"ValueError: {error}", log)
    name = f"sglang::scheduler_TP{args.rank}" if engine == "sglang" \
        else f"VLLM::Worker_TP{args.rank}"
    try:
        gpu = Gpu(name)
        total = gpu.total_bytes()
    except NoDevice as error:
        die(1, f"RuntimeError: No CUDA GPUs are available (gpusimd: {error})", log)
    scratch = None
    if fraction is not None:
        scratch = leak.IndexerScratch(
            fraction=fraction, chunk=args.chunked_prefill_size,
            cap=leak.budget_bytes(fraction, args.mem_fraction, total),
            scale=settings.indexer_scale)
        log(f"DSA indexer scratch budget {leak.ENV}={fraction:g}: "
            f"{'kept between requests (ratchets)' if scratch.ratchets else 'bounded'}, "
            f"block cap {scratch.cap / (1 << 20):.0f} MiB")
    try:
        interfaces, ipv6 = transport.local_interfaces(), transport.local_ipv6()
        rdma = gpu.rdma()
        reach = transport.endpoints(os.environ, rdma, interfaces, ipv6)
        reach["socket"] = fabric.socket_ifname(os.environ, interfaces)  # NET/Socket's
        fault = transport.check(os.environ, rdma, interfaces, args.head_host, ipv6) or \
            (transport.advertised_fault(engine, os.environ, interfaces, _management_address())
             if args.nnodes > 1 else None)
    except NoDevice as error:
        die(1, f"RuntimeError: cannot read the node's RDMA devices (gpusimd: {error})", log)
    if fault is not None and fault.library == "gloo":  # init_process_group creates Gloo first
        log("Init torch distributed begin.")
        die(1, f"[rank{args.rank}]: {fault.error}", log)
    nccl = Communicator(args.rank, args.nnodes, log, reach, fault,
                        transport.info_lines(os.environ, rdma, interfaces), gpu.ports)
    if args.is_head:
        rank = Head(args, settings, gpu, scratch, nccl, log, model_info=model_info)
    else:
        rank = Worker(args, settings, gpu, scratch, nccl, log)
    if args.nnodes > 1 and (fault is None or fault.library == "advertise"):
        try:  # the queue pairs on its rails: the node's HCAs answer the peers' writes
            gpu.open_rails([address for _, address in transport.rails(reach)])
        except NoDevice as error:
            die(1, f"RuntimeError: cannot open the RDMA queue pairs (gpusimd: {error})", log)
    reach["mtus"] = {address: transport.ib_mtu(transport.netdev_mtu(address, interfaces) or 1500)
                     for _, address in transport.rails(reach)}  # each rail's active MTU
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda number, frame: rank.on_signal(number))
    faults.arm_die_after(settings, started, log)
    rank.run()
    die(0)
