"""Engine profile files: the shipped ones, `extends`, where files are found, and every
mistake reported at file:line."""

import shutil
from pathlib import Path

import pytest

from sparkrack.core.errors import InventoryError, UsageError
from sparkrack.data import shipped
from sparkrack.engines import engine_names, load_engine
from sparkrack.engines.profile_file import read_engine_file
from sparkrack.engines.serving import engine_serving

REPO = Path(__file__).resolve().parents[3]
REHEARSAL = REPO / "inventory" / "rehearsal"

BASE = """\
engine: demo
image_key: sglang
entrypoint: [demo-serve]
ports: {http: 9000, dist: 9001}
health_path: /health
flag_roles: {context_length: --ctx}
args:
  model: [--model, "{model_path}"]
  every_rank: [--rank, "{rank}", --join, "{head_roce_addr}:{dist_port}"]
  head: [--port, "{http_port}"]
  workers: [--headless]
secret_env: [HF_TOKEN]
serving:
  memory_fraction: {flag: --fraction, default: 0.9}
  worker_health_path: null
  liveness_path: /health
  metrics:
    flag: null
    running: demo:running
    waiting: demo:waiting
    progress: [demo:tokens_total]
profiles:
  base:
    description: the base
    ready_timeout_s: 900
    stop_timeout_s: 120
    flags:
      --ctx: 1024
      --fraction: "0.80"
      --switch: true
      --dtype: fp8
    env:
      A: "1"
      B: two
  child:
    description: the child
    extends: base
    stop_timeout_s: 60
    flags:
      --dtype: bf16
      --switch: null
      --extra: x
    env:
      B: null
      C: 3
  grandchild:
    description: the grandchild
    extends: child
    experimental: true
    note: just a test
    flags:
      --ctx: 2048
"""


def write(tmp_path: Path, text: str, name: str = "demo") -> Path:
    """The profile file name.yml holding text."""
    file = tmp_path / f"{name}.yml"
    file.write_text(text)
    return file


def line_of(text: str, snippet: str) -> int:
    """The 1-based line of text where snippet first occurs."""
    return text[:text.index(snippet)].count("\n") + 1


def error(tmp_path: Path, old: str, new: str) -> tuple[InventoryError, str]:
    """The InventoryError for BASE with old replaced by new, and the edited text."""
    assert old in BASE, old
    text = BASE.replace(old, new, 1)
    with pytest.raises(InventoryError) as caught:
        read_engine_file(write(tmp_path, text))
    return caught.value, text


# --- The shipped files ---------------------------------------------------------------


def test_the_shipped_engines_and_profiles():
    assert engine_names(REHEARSAL) == ("sglang", "vllm")
    sglang, vllm = load_engine(REHEARSAL, "sglang"), load_engine(REHEARSAL, "vllm")
    assert list(sglang.profiles) == ["512k", "131k-throughput"]
    assert list(vllm.profiles) == ["512k", "1m-nvfp4"]
    assert (sglang.image_key, vllm.image_key) == ("sglang", "vllm")
    assert sglang.ports == {"http": 30000, "dist_init": 20000}
    assert vllm.ports == {"http": 8000, "master": 29501}
    assert sglang.health_path == vllm.health_path == "/health"
    for definition in (sglang, vllm):
        for profile in definition.profiles.values():
            assert profile.ready_timeout_s >= 900 and profile.stop_timeout_s > 10
        assert definition.setting(definition.profiles["512k"], "context_length") == "524288"
    assert sglang.setting(sglang.profiles["512k"], "kv_cache_dtype") == "fp8_e4m3"
    assert vllm.setting(vllm.profiles["1m-nvfp4"], "kv_cache_dtype") == "nvfp4_ds_mla"
    assert [p.experimental for p in vllm.profiles.values()] == [False, True]


# --- extends ---------------------------------------------------------------------------


def test_extends_merges_flags_env_and_settings(tmp_path):
    definition = read_engine_file(write(tmp_path, BASE))
    base, child, grandchild = (definition.profiles[name]
                               for name in ("base", "child", "grandchild"))
    assert base.argv() == ("--ctx", "1024", "--fraction", "0.80", "--switch", "--dtype", "fp8")
    assert child.argv() == ("--ctx", "1024", "--fraction", "0.80", "--dtype", "bf16",
                            "--extra", "x")
    assert grandchild.argv() == ("--ctx", "2048", "--fraction", "0.80", "--dtype", "bf16",
                                 "--extra", "x")
    assert dict(child.env) == {"A": "1", "C": "3"} == dict(grandchild.env)
    assert (child.ready_timeout_s, child.stop_timeout_s) == (900, 60)
    assert grandchild.stop_timeout_s == 60 and not child.experimental
    assert grandchild.experimental and grandchild.note == "just a test"
    assert [p.description for p in (base, child, grandchild)] == [
        "the base", "the child", "the grandchild"]


def test_a_profile_may_run_from_its_own_model_path(tmp_path):
    from sparkrack.engines import build_specs, model_path_of
    from sparkrack.inventory import load_inventory

    rack = Path(shutil.copytree(REHEARSAL, tmp_path / "rack"))
    (rack / ".sparkrack" / "engines").mkdir(parents=True)
    text = (shipped("engines") / "sglang.yml").read_text()
    write(rack / ".sparkrack" / "engines", text + "  draft:\n    description: a draft checkpoint\n"
          "    extends: 512k\n    model_path: /models/draft/\n  draft-long:\n"
          "    description: inherits it\n    extends: draft\n", "sglang")
    inventory = load_inventory(rack)
    profiles = load_engine(rack, "sglang").profiles
    assert model_path_of(inventory, profiles["512k"]) == inventory.vars.model_path
    assert model_path_of(inventory, profiles["draft-long"]) == "/models/draft/"
    for spec in build_specs(inventory, "sglang", "draft-long"):
        argv = list(spec.argv)
        assert argv[argv.index("--model-path") + 1] == "/models/draft/"
        assert [(m.source, m.target) for m in spec.docker.mounts] == [("/models/draft/",) * 2]
    default = build_specs(inventory, "sglang", "512k")[0]
    assert default.docker.mounts[0].source == inventory.vars.model_path


# --- Where files are found -------------------------------------------------------------


def test_an_inventory_without_engines_uses_the_repos_files():
    assert load_engine(REHEARSAL, "sglang").file == shipped("engines") / "sglang.yml"


def test_an_inventorys_own_file_wins_for_that_engine_only(tmp_path):
    rack = Path(shutil.copytree(REHEARSAL, tmp_path / "rack"))
    (rack / ".sparkrack" / "engines").mkdir(parents=True)
    text = (shipped("engines") / "sglang.yml").read_text()
    write(rack / ".sparkrack" / "engines", text + "  mine:\n    description: mine\n    extends: 512k\n",
          "sglang")
    assert list(load_engine(rack, "sglang").profiles) == ["512k", "131k-throughput", "mine"]
    assert load_engine(rack, "vllm").file == shipped("engines") / "vllm.yml"


def test_unknown_engine_and_profile(tmp_path):
    with pytest.raises(UsageError, match=r"unknown engine 'tgi' \(valid engines: sglang, vllm\)"):
        load_engine(REHEARSAL, "tgi")
    definition = read_engine_file(write(tmp_path, BASE))
    with pytest.raises(UsageError) as caught:
        definition.profile("chidl")
    assert caught.value.message == "unknown demo profile 'chidl' (did you mean 'child'?)"
    assert caught.value.fix.endswith(": base, child, grandchild")


# --- Mistakes, each at file:line -------------------------------------------------------


@pytest.mark.parametrize("old, new, marker, message", [
    ("health_path: /health", "health_path: /health\nimage: x", "image: x",
     "unknown key 'image' (did you mean 'image_key'?)"),
    ("engine: demo", "engine: other", "engine: other", "engine 'other' in a file named demo.yml"),
    ('--fraction: "0.80"', "--fraction: 0.80", "--fraction: 0.80",
     "--fraction: expected true (a bare switch), null (drop an inherited flag) or a string"),
    ("    extends: base", "    extends: bsae", "extends: bsae",
     "profile 'child' extends unknown profile 'bsae' (did you mean 'base'?)"),
    ("    extends: base", "    extends: grandchild", "extends: child",
     "extends loop: child -> grandchild -> child"),
    ("    note: just a test\n", "", "experimental: true",
     "profile 'grandchild' is experimental without a note"),
    ("      --extra: x", "      --rank: 3", "--rank: 3",
     "--rank is set per rank by this file's args"),
    ('"{head_roce_addr}:{dist_port}"', '"{head_addr}:{dist_port}"', "every_rank:",
     "args.every_rank: '{head_addr}:{dist_port}': unknown placeholder {head_addr}"),
    ("      --extra: x", "      --missing: null", "--missing: null",
     "--missing: null drops an inherited setting, but none is inherited"),
    ("secret_env: [HF_TOKEN]", "env_from_inventory: {HCA: nccl_ib_hca}\nsecret_env: [HF_TOKEN]",
     "env_from_inventory:", "env_from_inventory is no longer read: each node's env files"),
    ("      B: two", "      HF_TOKEN: abc", "HF_TOKEN: abc", "HF_TOKEN is a secret"),
    ("      --ctx: 1024", "      ctx: 1024", "ctx: 1024", "invalid flag 'ctx'"),
    ("flag_roles: {context_length: --ctx}", "flag_roles: {context: --ctx}", "flag_roles:",
     "unknown flag role 'context'"),
    ("ports: {http: 9000, dist: 9001}", "ports: {web: 9000, dist: 9001}", "ports:",
     "ports has no http port"),
    ("    stop_timeout_s: 120\n", "", "  base:", "profile 'base' has no stop_timeout_s"),
    # issue 53: every number with its range and why (sparkrack/inventory/ranges.py)
    ("    ready_timeout_s: 900", "    ready_timeout_s: 0", "ready_timeout_s: 0",
     "ready_timeout_s: 0 is outside 1..7200 s: whole seconds, at least 1"),
    ("    stop_timeout_s: 60", "    stop_timeout_s: 60\n    stall_budget_s: 900",
     "stall_budget_s: 900", "stall_budget_s: 900 is outside 1..600 s: NCCL's own watchdog "
     "ends a hung group after 600 s"),
    ("ports: {http: 9000, dist: 9001}", "ports: {http: 9000, dist: 90010}", "ports:",
     "dist: 90010 is outside 1..65535: a port number is 16 bits"),
    ("      --switch: true", "      --switch: [true", "      --dtype: fp8",
     "YAML syntax error"),
    ("    stop_timeout_s: 60", "    stop_timeout_s: 60\n    model_path: models/x",
     "model_path: models/x", "model_path: expected an absolute path on the nodes"),
    ("    stop_timeout_s: 60", "    stop_timeout_s: 60\n    model_path: /models/a:b",
     "model_path: /models/a:b", "model_path: expected an absolute path"),
])
def test_mistakes_name_file_and_line(tmp_path, old, new, marker, message):
    caught, text = error(tmp_path, old, new)
    assert caught.message.startswith(f"{tmp_path / 'demo.yml'}:{line_of(text, marker)}: "), \
        caught.message
    assert message in caught.message
    assert caught.fix


# --- serving: what sparkrack reads of a running engine --------------------------------


def test_the_shipped_serving_facts():
    """The facts the memory gate, the start, the watchdog, bench and export read, from the
    engine files (they were constants keyed by engine name in lifecycle/ and bench/)."""
    sglang = load_engine(REHEARSAL, "sglang").serving
    vllm = load_engine(REHEARSAL, "vllm").serving
    assert (sglang.memory_fraction.flag, sglang.memory_fraction.default) == (
        "--mem-fraction-static", 0.88)
    assert (vllm.memory_fraction.flag, vllm.memory_fraction.default) == (
        "--gpu-memory-utilization", 0.9)
    assert (sglang.worker_health_path, vllm.worker_health_path) == ("/health", None)
    assert (sglang.liveness_path, vllm.liveness_path) == ("/v1/models", "/health")
    assert (sglang.metrics.flag, vllm.metrics.flag) == ("--enable-metrics", None)
    assert (sglang.metrics.running, vllm.metrics.waiting) == (
        "sglang:num_running_reqs", "vllm:num_requests_waiting")
    assert vllm.metrics.progress == ("vllm:prompt_tokens_total", "vllm:generation_tokens_total",
                                     "vllm:kv_cache_usage_perc")
    assert sglang.metrics.accept_length == "sglang:spec_accept_length"
    assert vllm.metrics.spec_drafts == "vllm:spec_decode_num_drafts_total"
    assert engine_serving(REHEARSAL, "vllm") == vllm  # read alone, the same facts


@pytest.mark.parametrize("old, new, marker, message", [
    ("  liveness_path: /health\n", "", "serving:", "missing key 'liveness_path' in serving"),
    ("  memory_fraction: {flag: --fraction, default: 0.9}",
     "  memory_fraction: {flag: --fraction, default: 1.5}", "memory_fraction:",
     "default: 1.5 is outside 0..1, 0 excluded: a share of at most 1"),
    ("  memory_fraction: {flag: --fraction, default: 0.9}",
     "  memory_fraction: {flag: fraction, default: 0.9}", "memory_fraction:",
     "flag: expected a flag such as --enable-metrics, got 'fraction'"),
    ("  worker_health_path: null", "  worker_health_path: health", "worker_health_path:",
     "worker_health_path: expected a path such as /health, or null when the workers serve "
     "no HTTP"),
    ("    running: demo:running", "    running: demo running", "running: demo running",
     "running: expected a Prometheus metric name"),
    ("    progress: [demo:tokens_total]", "    progress: []", "progress:",
     "progress: expected a non-empty list of Prometheus metric names"),
    ("    progress: [demo:tokens_total]", "", "  metrics:", "missing key 'progress' in metrics"),
    ("    progress: [demo:tokens_total]",
     "    progress: [demo:tokens_total]\n    spec_drafts: demo:drafts_total", "spec_drafts:",
     "metrics.spec_drafts without spec_accepted: the accept length needs both counters"),
    ("    flag: null", "    flags: null", "flags: null", "unknown key 'flags' (did you mean 'flag'?)"),
])
def test_serving_mistakes_name_file_line_and_key(tmp_path, old, new, marker, message):
    caught, text = error(tmp_path, old, new)
    assert caught.message.startswith(f"{tmp_path / 'demo.yml'}:{line_of(text, marker)}: "), \
        caught.message
    assert message in caught.message and "\n" not in caught.line()
    assert caught.fix


def test_an_own_file_without_serving_is_one_line_naming_it(tmp_path):
    """An inventory's own profile file written before `serving` existed: every command that
    loads it says so in one line, and so does the watchdog's light read; a memory flag the
    engine does not have is refused against its option table."""
    rack = Path(shutil.copytree(REHEARSAL, tmp_path / "rack"))
    own = rack / ".sparkrack" / "engines" / "sglang.yml"
    own.parent.mkdir(parents=True, exist_ok=True)
    text = (shipped("engines") / "sglang.yml").read_text()
    own.write_text(text[:text.index("\n# What sparkrack reads")] + text[text.index("\nprofiles:"):])
    for load in (lambda: load_engine(rack, "sglang"), lambda: engine_serving(rack, "sglang")):
        with pytest.raises(InventoryError) as caught:
            load()
        assert caught.value.line().startswith(f"{own}: missing key 'serving' (add a mapping "
                                              "serving:")
    own.write_text(text.replace("flag: --mem-fraction-static", "flag: --mem-fraction"))
    with pytest.raises(InventoryError) as caught:
        load_engine(rack, "sglang")
    assert caught.value.line().startswith(
        f"{own}:{line_of(own.read_text(), 'flag: --mem-fraction')}: memory_fraction.flag: "
        "--mem-fraction is an abbreviation of --mem-fraction-static")
