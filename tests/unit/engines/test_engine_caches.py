"""The compile caches in the launch specs: one node folder per engine image (its ID, not its
tag) and GPU arch, bound read-write at one path in every rank, each cache's variable
pointed into it; `plan` shows the mount; the deployment hash leaves it out; the gates say
what each rank mounts and warn for a node whose arch is not known."""

import shlex
import shutil
from pathlib import Path

import pytest

from sparkrack.core.errors import UsageError
from sparkrack.data import shipped
from sparkrack.engines import CacheKey, build_specs, docker_run_argv, docker_sdk_kwargs
from sparkrack.engines.compilecaches import (
    CACHE_MOUNT,
    CACHE_ROOT,
    arch_of,
    cache_env,
    folder_name,
    parse_folder_name,
)
from sparkrack.facts.node import GpuFacts, NodeFacts
from sparkrack.inventory import load_inventory
from sparkrack.lifecycle.cachefolders import cache_gate_lines, cache_key

REPO = Path(__file__).resolve().parents[3]
IMAGE_ID = "sha256:3dd32b7c2e5e4f01aa55aa55aa55aa55aa55aa55aa55aa55aa55aa55aa55aa55"
OTHER_ID = "sha256:9e1f00dd2e5e4f01aa55aa55aa55aa55aa55aa55aa55aa55aa55aa55aa55aa55"


@pytest.fixture(scope="module")
def rack():
    return load_inventory(REPO / "inventory" / "rehearsal")


def key(rack, image_id=IMAGE_ID, **caps):
    """Every node a GB10 (12.1) unless caps says otherwise (spark_03="12.0")."""
    return CacheKey(image_id, {n.name: caps.get(n.name.replace("-", "_"), "12.1")
                               for n in rack.nodes})


def test_a_folder_is_named_by_engine_image_id_and_gpu_arch():
    assert arch_of("12.1") == "sm121" and arch_of("[N/A]") is None and arch_of(None) is None
    name = folder_name("sglang", IMAGE_ID, "12.1")
    assert name == "sglang-3dd32b7c2e5e4f01-sm121"
    assert parse_folder_name(name) == ("sglang", "3dd32b7c2e5e4f01", "sm121")
    # a tag pushed again is another image: another folder; another arch too
    assert folder_name("sglang", OTHER_ID, "12.1") != name
    assert folder_name("sglang", IMAGE_ID, "12.0") == "sglang-3dd32b7c2e5e4f01-sm120"
    assert parse_folder_name("../etc") is None and parse_folder_name("sglang-x-sm121") is None


def test_each_rank_binds_its_node_folder_and_its_caches_point_there(rack):
    for spec in build_specs(rack, "sglang", "512k", cache=key(rack)):
        model, cache = spec.docker.mounts
        assert model.source == "/models/GLM-5.3-NVFP4" and model.read_only
        assert (cache.source, cache.target, cache.read_only) == (
            f"{CACHE_ROOT}/sglang-3dd32b7c2e5e4f01-sm121", CACHE_MOUNT, False)
        assert spec.env["SGLANG_DG_CACHE_DIR"] == f"{CACHE_MOUNT}/deep_gemm"
        assert spec.env["DG_JIT_CACHE_DIR"] == f"{CACHE_MOUNT}/deep_gemm"
        assert spec.env["TRITON_CACHE_DIR"] == f"{CACHE_MOUNT}/triton"
        assert "sparkrack/engines/compilecaches.py" in spec.env_sources["TORCHINDUCTOR_CACHE_DIR"]
        assert "VLLM_CACHE_ROOT" not in spec.env
        binds = docker_sdk_kwargs(spec)["volumes"]
        assert binds[cache.source] == {"bind": CACHE_MOUNT, "mode": "rw"}
        assert f"{cache.source}:{CACHE_MOUNT}" in shlex.join(docker_run_argv(spec)).split()
    vllm = build_specs(rack, "vllm", "512k", cache=key(rack))[3]
    assert vllm.docker.mounts[1].source.endswith("/vllm-3dd32b7c2e5e4f01-sm121")
    assert vllm.env["VLLM_CACHE_ROOT"] == f"{CACHE_MOUNT}/vllm"
    assert set(cache_env("vllm")) <= set(vllm.env) and "SGLANG_CACHE_DIR" not in vllm.env


def test_without_a_key_nothing_is_bound_and_the_hash_does_not_change(rack):
    plain = build_specs(rack, "sglang", "512k")
    cached = build_specs(rack, "sglang", "512k", cache=key(rack))
    assert [len(s.docker.mounts) for s in plain] == [1] * 8
    assert not set(cache_env("sglang")) & set(plain[0].env)
    # where compiled kernels are kept is not what runs: the same deployment either way
    assert cached[0].spec_hash == plain[0].spec_hash
    assert build_specs(rack, "sglang", "512k", cache=key(rack, OTHER_ID))[0].spec_hash == \
        plain[0].spec_hash


def test_a_node_of_another_arch_gets_its_own_folder_an_unknown_one_none(rack):
    specs = build_specs(rack, "sglang", "512k", cache=key(rack, spark_03="12.0",
                                                          spark_05=None))
    sources = {s.node: [m.source for m in s.docker.mounts] for s in specs}
    assert sources["spark-03"][1].endswith("-sm120") and sources["spark-01"][1].endswith("-sm121")
    assert len(sources["spark-05"]) == 1 and "TRITON_CACHE_DIR" not in specs[4].env
    facts = {s.node: NodeFacts(gpu=GpuFacts(compute_cap=None if s.node == "spark-05" else "12.1",
                                            error="nvidia-smi exit 9" if s.node == "spark-05"
                                            else None)) for s in specs}
    problems, said = cache_gate_lines(specs, facts)
    assert problems == ["spark-05: GPU arch unknown (nvidia-smi exit 9): its rank starts "
                        "without the node's compile caches"]
    assert "sglang-3dd32b7c2e5e4f01-sm120 on spark-03" in said
    assert cache_key(IMAGE_ID, facts).compute_caps["spark-01"] == "12.1"


def test_plan_offline_shows_the_folder_with_what_was_not_asked(rack):
    spec = build_specs(rack, "sglang", "512k", cache=CacheKey(offline=True))[0]
    assert spec.docker.mounts[1].source == f"{CACHE_ROOT}/sglang-<image-id>-<gpu-arch>"
    half = CacheKey(compute_caps={"spark-01": "12.1"}, offline=True)
    assert build_specs(rack, "sglang", "512k", cache=half)[0].docker.mounts[1].source == \
        f"{CACHE_ROOT}/sglang-<image-id>-sm121"


def test_a_profile_may_not_point_a_cache_itself(tmp_path):
    own = Path(shutil.copytree(REPO / "inventory" / "rehearsal", tmp_path / "rack"))
    (own / ".sparkrack" / "engines").mkdir(parents=True)
    text = (shipped("engines") / "vllm.yml").read_text()
    assert "      VLLM_ENGINE_READY_TIMEOUT_S: 1200\n" in text
    text = text.replace("      VLLM_ENGINE_READY_TIMEOUT_S: 1200\n",
                        "      VLLM_ENGINE_READY_TIMEOUT_S: 1200\n      VLLM_CACHE_ROOT: /tmp/c\n")
    (own / ".sparkrack" / "engines" / "vllm.yml").write_text(text)
    with pytest.raises(UsageError) as caught:
        build_specs(load_inventory(own), "vllm", "512k")
    assert caught.value.message.startswith(
        "vllm profile 512k sets VLLM_CACHE_ROOT, which sparkrack sets to the node's compile "
        "cache folder")
    assert caught.value.fix.startswith("remove VLLM_CACHE_ROOT from ")


def test_housekeeping_keeps_what_runs_and_the_lanes_images(monkeypatch):
    from sparkrack.deployments.record import Deployment
    from sparkrack.lifecycle import cachefolders as caches

    last = Deployment(engine="sglang", profile="512k", deployment_id="d", spec_hash="s",
                      image="lmsysorg/sglang:v0.5.22-cu130", image_id=IMAGE_ID)
    monkeypatch.setattr(caches.record, "read", lambda fleet, inventory: {
        "current": None, "last-good": last, "failed": None})
    running = f"{CACHE_ROOT}/vllm-9e1f00dd2e5e4f01-sm121"
    monkeypatch.setattr(caches, "_mounted", lambda fleet: {running: {"sparkrack-vllm-r0@spark-01"}})
    folders = [caches.Folder(name, *parse_folder_name(name)) for name in (
        "sglang-3dd32b7c2e5e4f01-sm121", "sglang-3dd32b7c2e5e4f01-sm120",
        "vllm-9e1f00dd2e5e4f01-sm121", "sglang-9e1f00dd2e5e4f01-sm121")]
    caches.kept(None, None, folders)
    kept = {f.name: f.kept for f in folders}
    assert kept["sglang-3dd32b7c2e5e4f01-sm121"][0].startswith(
        "the last-good deployment's image (sglang 512k (sha256:3dd32b7c2e5e")
    assert kept["sglang-3dd32b7c2e5e4f01-sm120"] == kept["sglang-3dd32b7c2e5e4f01-sm121"]
    assert kept["vllm-9e1f00dd2e5e4f01-sm121"] == ["mounted by sparkrack-vllm-r0@spark-01"]
    assert kept["sglang-9e1f00dd2e5e4f01-sm121"] == []  # another engine's image ID: removable


def test_plan_shows_each_rank_s_cache_mount(capsys):
    from invoke import Collection, Program

    from sparkrack.cli import serve_tasks

    Program(namespace=Collection.from_module(serve_tasks)).run(
        ["invoke", "plan", "--engine", "vllm", "--offline", "-i",
         str(REPO / "inventory" / "rehearsal")], exit=False)
    out = capsys.readouterr().out
    folder = f"{CACHE_ROOT}/vllm-<image-id>-<gpu-arch>"
    assert f"# compile caches: {folder} on all 8 nodes -> {CACHE_MOUNT} (kept on the node" in out
    runs = [line for line in out.splitlines() if line.startswith("docker run")]
    assert len(runs) == 8 and all(f"--volume '{folder}:{CACHE_MOUNT}'" in run for run in runs)
    assert f"#   VLLM_CACHE_ROOT={CACHE_MOUNT}/vllm  <- the compile cache folder" in out
