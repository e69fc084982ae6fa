"""The command lines of the real engines, as argparse parsers (stdlib only): exactly the
option names of the version's table, prefix matching kept, an unknown flag exit 2
(docs/rehearsal.md#the-stub-engines). `parse(engine, argv)` returns an EngineArgs: what the
stub needs, engine independent.
"""

from __future__ import annotations

import argparse
import json
import os
import re
from dataclasses import dataclass, field

SGLANG_VERSION = "0.5.22"
VLLM_VERSION = "0.33.0"

# SGLang 0.5.22, sglang/srt/arg_groups/choices.py (docs/field-notes.md, SGLang flags).
SGLANG_KV_DTYPES = ("auto", "fp8_e5m2", "fp8_e4m3", "mxfp8", "bf16", "bfloat16", "nvfp4",
                    "fp4_mx_block16")
SGLANG_DSA_KV_DTYPES = ("auto", "bf16", "bfloat16", "fp8_e4m3")  # arg_groups/overrides.py
SGLANG_SPEC_ALGORITHMS = ("EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM")
# vLLM validates --kv-cache-dtype in vllm/config/cache.py, after argparse (so: exit 1).
VLLM_KV_DTYPES = ("auto", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2", "fp8_inc", "fp8_ds_mla",
                  "nvfp4_ds_mla")
VLLM_BACKENDS = ("ray", "mp", "uni", "external_launcher")
_HERE = os.path.dirname(os.path.abspath(__file__))
PINNED = {"sglang": SGLANG_VERSION, "vllm": VLLM_VERSION}
SHIPPED_OPTIONS = os.path.join(os.path.dirname(os.path.dirname(_HERE)), "engines", "options")
OPTIONS_DIRS = (os.path.join(_HERE, "options"), SHIPPED_OPTIONS)  # in the image; the checkout's


class ConfigError(Exception):
    """The command line parsed but the engine refuses it at start (exit 1, not 2)."""


@dataclass(frozen=True)
class EngineArgs:
    """One rank's command line, as the stub uses it."""

    engine: str  # sglang | vllm
    model_path: str
    served_model_name: str
    rank: int
    nnodes: int
    tp_size: int
    head_host: str  # where rank 0 listens for the group (dist-init / master address)
    group_port: int
    http_host: str
    http_port: int | None  # None: this rank serves no HTTP (vLLM headless)
    context_length: int | None
    mem_fraction: float  # of the unified pool this rank takes when loaded
    chunked_prefill_size: int
    max_running_requests: int
    speculative_steps: int  # 0 without speculative decoding
    dist_timeout_s: float
    watchdog_timeout_s: float
    shutdown_timeout_s: float | None  # vLLM --shutdown-timeout (0: abort); None: SGLang
    headless: bool
    namespace: dict = field(default_factory=dict)  # every parsed option, for /server_info

    @property
    def is_head(self) -> bool:
        return self.rank == 0


# --- SGLang ---------------------------------------------------------------------------------

def installed_version(engine: str) -> str:
    """The engine version this image carries (its package's installed metadata, as the
    real images have), else the pinned one (the stub run from a checkout)."""
    import importlib.metadata

    try:
        return importlib.metadata.version(engine)
    except importlib.metadata.PackageNotFoundError:
        return PINNED[engine]


def _declarer(parser: argparse.ArgumentParser, engine: str, version: str):
    """parser.add_argument for the options this version has: an option the version's list
    does not have is not declared (the engine refuses it, exit 2), its dest keeps its
    default so that the stub reads the same namespace."""
    listed = {option for option, _, _ in option_list(engine, version)}

    def add(*names: str, **kwargs):
        if not names[0].startswith("-"):
            return parser.add_argument(*names, **kwargs)
        kept = [name for name in names if name in listed]
        if not kept:
            dest = kwargs.get("dest") or names[0].lstrip("-").replace("-", "_")
            action = kwargs.get("action")
            parser.set_defaults(**{dest: kwargs.get("default", False if action == "store_true"
                                                    else None)})
            return None
        return parser.add_argument(*kept, **kwargs)
    return add


def sglang_parser(version: str | None = None) -> argparse.ArgumentParser:
    """`python3 -m sglang.launch_server`'s parser (the flags the stub knows) for version
    (default: the installed one)."""
    version = version or installed_version("sglang")
    p = argparse.ArgumentParser(prog="launch_server.py")
    add = _declarer(p, "sglang", version)
    # Model and tokenizer
    add("--model-path", "--model", type=str, required=True,
        help="The path of the model weights (a local folder or a Hugging Face repo ID).")
    add("--tokenizer-path", type=str)
    add("--served-model-name", type=str)
    add("--trust-remote-code", action="store_true")
    add("--context-length", type=int)
    add("--quantization", type=str)
    add("--load-format", type=str, default="auto")
    add("--revision", type=str)
    # HTTP
    add("--host", type=str, default="127.0.0.1")
    add("--port", type=int, default=30000)
    add("--api-key", type=str)
    add("--enable-metrics", action="store_true")
    add("--log-level", type=str, default="info")
    add("--log-requests", action="store_true")
    # Memory and scheduling
    add("--mem-fraction-static", type=float)
    add("--max-running-requests", type=int)
    add("--max-total-tokens", type=int)
    add("--chunked-prefill-size", type=int)
    add("--max-prefill-tokens", type=int, default=16384)
    add("--schedule-policy", type=str, default="fcfs")
    add("--page-size", type=int)
    add("--kv-cache-dtype", type=str, default="auto", choices=SGLANG_KV_DTYPES)
    # Kernels
    add("--attention-backend", type=str)
    add("--dsa-decode-backend", type=str)
    add("--dsa-prefill-backend", type=str)
    add("--moe-runner-backend", type=str, default="auto")
    add("--disable-flashinfer-autotune", action="store_true")
    add("--disable-cuda-graph", action="store_true")
    add("--cuda-graph-max-bs-decode", type=int)
    add("--disable-radix-cache", action="store_true")
    # Speculative decoding
    add("--speculative-algorithm", type=str, choices=SGLANG_SPEC_ALGORITHMS)
    add("--speculative-draft-model-path", type=str)
    add("--speculative-num-steps", type=int)
    add("--speculative-eagle-topk", type=int)
    add("--speculative-num-draft-tokens", type=int)
    # Parallelism and distribution
    add("--tp-size", type=int, default=1)
    add("--dp-size", type=int, default=1)
    add("--ep-size", type=int, default=1)
    add("--nnodes", type=int, default=1)
    add("--node-rank", type=int, default=0)
    add("--dist-init-addr", type=str)
    add("--dist-timeout", type=int)
    add("--watchdog-timeout", type=float, default=300)
    add("--enable-dp-attention", action="store_true")
    return _complete(p, "sglang", version)


def _sglang_args(ns: argparse.Namespace) -> EngineArgs:
    """EngineArgs from a parsed SGLang namespace; ConfigError for what SGLang refuses."""
    if ns.nnodes > 1 and not ns.dist_init_addr:
        raise ConfigError("--dist-init-addr is required when --nnodes > 1")
    if not 0 <= ns.node_rank < ns.nnodes:
        raise ConfigError(f"--node-rank {ns.node_rank} is out of range for --nnodes {ns.nnodes}")
    if ns.tp_size % ns.nnodes:
        raise ConfigError(f"--tp-size {ns.tp_size} is not divisible by --nnodes {ns.nnodes}")
    # The model is a DSA-class model: its KV and draft restrictions (docs/field-notes.md,
    # SGLang flags).
    if ns.kv_cache_dtype not in SGLANG_DSA_KV_DTYPES:
        raise ConfigError(f"DSA models only support bf16/bfloat16 or fp8_e4m3 KV cache, got "
                          f"--kv-cache-dtype {ns.kv_cache_dtype}")
    if ns.speculative_algorithm and (ns.speculative_eagle_topk or 1) > 1:
        raise ConfigError("speculative_eagle_topk > 1 is not supported by the DSA attention "
                          "backend (page_size > 1); use --speculative-eagle-topk 1")
    host, port = _host_port(ns.dist_init_addr or "127.0.0.1:20000", "--dist-init-addr")
    steps = ns.speculative_num_steps if ns.speculative_algorithm else 0
    if ns.speculative_algorithm and steps is None:
        steps = 3
    return EngineArgs(
        engine="sglang", model_path=ns.model_path,
        served_model_name=ns.served_model_name or ns.model_path, rank=ns.node_rank,
        nnodes=ns.nnodes, tp_size=ns.tp_size, head_host=host, group_port=port,
        http_host=ns.host, http_port=ns.port, context_length=ns.context_length,
        mem_fraction=ns.mem_fraction_static if ns.mem_fraction_static is not None else 0.88,
        chunked_prefill_size=ns.chunked_prefill_size or 8192,
        max_running_requests=ns.max_running_requests or 256, speculative_steps=steps or 0,
        dist_timeout_s=float(ns.dist_timeout or 600), watchdog_timeout_s=ns.watchdog_timeout,
        shutdown_timeout_s=None, headless=False, namespace=vars(ns))


# --- vLLM -----------------------------------------------------------------------------------

def _dashes(argv: list[str]) -> list[str]:
    """Like vLLM's FlexibleArgumentParser: `--max_model_len` means `--max-model-len`."""
    fixed = []
    for word in argv:
        if word.startswith("--") and "_" in word.split("=", 1)[0]:
            name, eq, value = word.partition("=")
            word = name.replace("_", "-") + eq + value
        fixed.append(word)
    return fixed


def _human_int(text: str) -> int:
    """vLLM's human-readable ints: 524288, 512k, 1m (k = 1000, K = 1024, as vLLM)."""
    match = re.fullmatch(r"(\d+(?:\.\d+)?)([kKmMgG]?)", text.strip())
    if not match:
        raise argparse.ArgumentTypeError(f"invalid integer: {text!r}")
    number, unit = float(match.group(1)), match.group(2)
    scale = {"": 1, "k": 10**3, "m": 10**6, "g": 10**9, "K": 2**10, "M": 2**20, "G": 2**30}
    return int(number * scale[unit])


def _json_object(text: str) -> dict:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as error:
        raise argparse.ArgumentTypeError(f"not valid JSON: {error}") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError("must be a JSON object")
    return value


def vllm_parser(version: str | None = None) -> argparse.ArgumentParser:
    """`vllm`'s parser with its `serve` subcommand (the flags the stub knows) for version
    (default: the installed one)."""
    version = version or installed_version("vllm")
    top = argparse.ArgumentParser(prog="vllm")
    top.add_argument("-v", "--version", action="version", version=version)
    commands = top.add_subparsers(dest="subcommand", required=True)
    p = commands.add_parser("serve", prog="vllm serve",
                            usage="vllm serve [model_tag] [options]")
    add = _declarer(p, "vllm", version)
    add("model_tag", nargs="?", help="The model tag to serve (optional if in --model).")
    add("--model", type=str)
    add("--served-model-name", type=str, nargs="+")
    add("--tokenizer", type=str)
    add("--trust-remote-code", action="store_true")
    add("--max-model-len", type=_human_int)
    add("--dtype", type=str, default="auto")
    add("--quantization", "-q", type=str)
    add("--kv-cache-dtype", type=str, default="auto")
    add("--gpu-memory-utilization", type=float, default=0.9)
    add("--max-num-seqs", type=int)
    add("--max-num-batched-tokens", type=_human_int)
    add("--enable-chunked-prefill", action=argparse.BooleanOptionalAction, default=None)
    add("--enable-prefix-caching", action=argparse.BooleanOptionalAction, default=None)
    add("--enforce-eager", action="store_true")
    add("--speculative-config", type=_json_object)
    add("--load-format", type=str, default="auto")
    add("--host", type=str)
    add("--port", type=int, default=8000)
    add("--api-key", type=str)
    add("--uvicorn-log-level", type=str, default="info")
    add("--disable-log-requests", action="store_true")
    add("--shutdown-timeout", type=int, default=0)
    add("--tensor-parallel-size", "-tp", type=int, default=1)
    add("--pipeline-parallel-size", "-pp", type=int, default=1)
    add("--data-parallel-size", "-dp", type=int, default=1)
    add("--distributed-executor-backend", type=str, choices=VLLM_BACKENDS)
    add("--nnodes", "-n", type=int, default=1)
    add("--node-rank", "-r", type=int, default=0)
    add("--master-addr", type=str, default="127.0.0.1")
    add("--master-port", type=int, default=29501)
    add("--headless", action="store_true")
    _complete(p, "vllm", version)
    return top


def _vllm_args(ns: argparse.Namespace) -> EngineArgs:
    """EngineArgs from a parsed `vllm serve` namespace; ConfigError for what vLLM refuses."""
    model = ns.model_tag or ns.model
    if not model:
        raise ConfigError("no model given: pass it as `vllm serve MODEL` or --model")
    if ns.model_tag and ns.model and ns.model_tag != ns.model:
        raise ConfigError(f"model given twice: {ns.model_tag!r} and --model {ns.model!r}")
    if ns.nnodes > 1 and ns.distributed_executor_backend not in ("mp", "uni",
                                                                 "external_launcher"):
        raise ConfigError("nnodes > 1 can only be set when distributed executor backend is "
                          "mp, uni or external_launcher.")
    if not 0 <= ns.node_rank < ns.nnodes:
        raise ConfigError(f"node_rank {ns.node_rank} must be in [0, {ns.nnodes})")
    if ns.kv_cache_dtype not in VLLM_KV_DTYPES:
        raise ConfigError(f"Unknown kv cache dtype: {ns.kv_cache_dtype!r}")
    if ns.shutdown_timeout < 0:  # VllmConfig.shutdown_timeout: Field(ge=0)
        raise ConfigError(f"shutdown_timeout: Input should be greater than or equal to 0, got "
                          f"{ns.shutdown_timeout}")
    spec = ns.speculative_config or {}
    steps = int(spec.get("num_speculative_tokens", 0) or 0)
    return EngineArgs(
        engine="vllm", model_path=model,
        served_model_name=(ns.served_model_name or [model])[0], rank=ns.node_rank,
        nnodes=ns.nnodes, tp_size=ns.tensor_parallel_size, head_host=ns.master_addr,
        group_port=ns.master_port, http_host=ns.host or "0.0.0.0",
        http_port=None if ns.headless or ns.node_rank > 0 else ns.port,
        context_length=ns.max_model_len, mem_fraction=ns.gpu_memory_utilization,
        chunked_prefill_size=ns.max_num_batched_tokens or 8192,
        max_running_requests=ns.max_num_seqs or 256, speculative_steps=steps,
        dist_timeout_s=600.0, watchdog_timeout_s=300.0,
        shutdown_timeout_s=float(ns.shutdown_timeout),
        headless=ns.headless, namespace=vars(ns))


# --- Both -----------------------------------------------------------------------------------

def option_list(engine: str, version: str) -> list[tuple[str, str, str]]:
    """(option, takes, first name) of every option of the engine version's list."""
    name = f"{engine}-{version}.txt"
    for folder in OPTIONS_DIRS:
        path = os.path.join(folder, name)
        if os.path.isfile(path):
            break
    else:
        raise FileNotFoundError(f"no option list {name} in {', '.join(OPTIONS_DIRS)}")
    rows = []
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            words = line.split()
            if words and not words[0].startswith("#"):
                rows.append((words[0], words[1], words[2] if len(words) > 2 else words[0]))
    return rows


def _complete(parser: argparse.ArgumentParser, engine: str,
              version: str) -> argparse.ArgumentParser:
    """parser with every listed option it does not declare yet, taken as text (a switch:
    store_true; an optional value: nargs='?'), each with its other names."""
    names: dict[str, list[tuple[str, str]]] = {}
    for option, takes, first in option_list(engine, version):
        names.setdefault(first, []).append((option, takes))
    known = parser._option_string_actions  # noqa: SLF001 - argparse keeps no public view
    for first, group in names.items():
        missing = [option for option, _ in group if option not in known]
        if not missing:
            continue
        takes = dict(group).get(first, group[0][1])
        dest = "x_" + missing[0].lstrip("-").replace("-", "_")  # never one the stub reads
        if takes == "none":
            parser.add_argument(*missing, dest=dest, action="store_true")
        else:
            metavar = first.lstrip("-").upper().replace("-", "_")
            parser.add_argument(*missing, dest=dest, metavar=metavar, type=str,
                                **({"nargs": "?", "const": True} if takes == "optional" else {}))
    return parser


def _host_port(text: str, flag: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not host:
        raise ConfigError(f"{flag} must be HOST:PORT, got {text!r}")
    return host.strip("[]"), int(port)


def parse(engine: str, argv: list[str]) -> EngineArgs:
    """Parse one engine's arguments (after the entry point: for vLLM starting with `serve`).

    SystemExit(2) with argparse's usage error for an unknown flag or a bad value;
    ConfigError for a command line the engine refuses at start.
    """
    if engine == "sglang":
        return _sglang_args(sglang_parser().parse_args(argv))
    if engine == "vllm":
        return _vllm_args(vllm_parser().parse_args(_dashes(argv)))
    raise ValueError(f"unknown engine {engine!r}")


def scan_rank(argv: list[str]) -> int:
    """The --node-rank in argv, leniently (for the record written before parsing); 0."""
    for index, word in enumerate(argv):
        value = None
        if word in ("--node-rank", "-r") and index + 1 < len(argv):
            value = argv[index + 1]
        elif word.startswith("--node-rank="):
            value = word.split("=", 1)[1]
        if value is not None and value.isdigit():
            return int(value)
    return 0
