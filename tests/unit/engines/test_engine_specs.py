"""Launch specs: the field report's SGLang 512K config verbatim, per-rank flags for both
engines, docker options and labels, the deployment hash, secrets and `invoke plan`."""

import dataclasses
import hashlib
import json
import shlex
import shutil
from pathlib import Path

import docker.models.containers
import pytest
from invoke import Collection, Program

from sparkrack.cli import serve_tasks
from sparkrack.core.errors import UsageError
from sparkrack.data import shipped
from sparkrack.engineenv import VIEW_NODE, EnvVar, inventory_views
from sparkrack.engines import (
    LABEL_DEPLOYMENT,
    LABEL_ENGINE,
    LABEL_PROFILE,
    LABEL_RANK,
    LABEL_SPEC_HASH,
    LABEL_STOP_TIMEOUT,
    api_url,
    build_specs,
    docker_run_argv,
    docker_sdk_kwargs,
)
from sparkrack.engines.spec import DRAIN_EXIT_S, deployment_hash
from sparkrack.inventory import load_inventory
from sparkrack.inventory.schema import FrozenMapping
from sparkrack.provision.envfiles import RackView

REPO = Path(__file__).resolve().parents[3]
FIELD_NOTES = REPO / "docs" / "field-notes.md"  # quotes the field report's config verbatim
REPRODUCE = Path(__file__).parents[1] / "data" / "engines" / "sglang-512k-reproduce.txt"
HEADING = "### Field report: Reproduce the SGLang 512K config"
PROBED = "probed on the node (the RoCE v2 entry whose GID is IPv4-mapped)"
TOKEN_FILE = "/etc/sparkrack/hf/token"  # role engine_env's: HF_TOKEN_PATH in the env files


@pytest.fixture(scope="module")
def real_inventory():
    """The real-rack inventory (example addresses; nothing is contacted)."""
    return load_inventory(REPO / "inventory" / "rack")


@pytest.fixture
def own_rack(tmp_path):
    """A private copy of the rehearsal inventory, to edit."""
    return Path(shutil.copytree(REPO / "inventory" / "rehearsal", tmp_path / "rack"))


def specs(inventory, engine, profile="512k", **options):
    """build_specs (default: the inventory's view of every node's env files)."""
    return build_specs(inventory, engine, profile, **options)


def read_env(inventory, engine, **per_node):
    """Every node's env as if read from its files: the inventory's view, with per_node
    {node: {VAR: (value, source)}} laid over it (spark_03= for spark-03)."""
    views = inventory_views(inventory, engine)
    result = {}
    for name, view in views.items():
        found = dict(view.vars)
        for key, (value, source) in per_node.get(name.replace("-", "_"), {}).items():
            file = f"/etc/sparkrack/{engine}.env" if key == "HF_TOKEN" else "/etc/sparkrack/nccl.env"
            found[key] = EnvVar(value, source, file)
        result[name] = dataclasses.replace(view, view=VIEW_NODE, vars=FrozenMapping(found))
    return result


def report_lines(text: str) -> list[str]:
    """The non-blank lines of the code block under the field notes' quote of the report's
    Reproduce section."""
    lines = text.splitlines()
    start = lines.index("```", lines.index(HEADING)) + 1
    end = lines.index("```", start)
    return [line for line in lines[start:end] if line.strip()]


def fixture_lines() -> list[str]:
    """The verbatim copy of those lines kept with the tests."""
    return [line for line in REPRODUCE.read_text().splitlines()
            if line.strip() and not line.startswith("#")]


def parse_config(lines: list[str]) -> tuple[list[tuple[str, str | None]], dict[str, str]]:
    """The flags (flag, value or None for a switch) and env vars of the Reproduce lines."""
    tokens = shlex.split(" ".join(lines))
    split = tokens.index("env:")
    flags, words = [], tokens[:split]
    for i, word in enumerate(words):
        if word.startswith("--"):
            following = words[i + 1] if i + 1 < len(words) else "--"
            flags.append((word, None if following.startswith("--") else following))
    env = dict(token.split("=", 1) for token in tokens[split + 1:])
    return flags, env


def flag_value(argv: tuple[str, ...], flag: str) -> str | None:
    """The value after flag in argv (None for a switch); the flag must occur exactly once."""
    assert argv.count(flag) == 1, f"{flag} occurs {argv.count(flag)} times"
    i = argv.index(flag)
    following = argv[i + 1] if i + 1 < len(argv) else None
    return None if following is None or following.startswith("--") else following


# --- The field report's SGLang 512K config -------------------------------------------


def test_the_fixture_is_the_field_reports_text():
    lines = report_lines(FIELD_NOTES.read_text())
    assert len(lines) == 6 and lines[0].startswith("--context-length 524288")
    assert lines == fixture_lines()


def test_sglang_512k_carries_every_flag_and_env_var_of_the_field_report(real_inventory):
    flags, env = parse_config(fixture_lines())
    assert len(flags) == 11 and len(env) == 4  # the parse found the whole section
    for spec in specs(real_inventory, "sglang"):
        for flag, value in flags:
            assert flag_value(spec.argv, flag) == value, (spec.rank, flag)
        for key, value in env.items():
            assert spec.env[key] == value, (spec.rank, key)


def test_sglang_512k_adds_the_reports_decode_path(real_inventory):
    for spec in specs(real_inventory, "sglang"):
        assert flag_value(spec.argv, "--dsa-decode-backend") == "flashinfer_sparse_mla"


def test_the_indexer_budget_comes_from_the_inventory(own_rack):
    vars_file = own_rack / "group_vars" / "all.yml"
    vars_file.write_text(vars_file.read_text().replace("indexer_mem_fraction: 0.01",
                                                       "indexer_mem_fraction: 0.02"))
    for spec in specs(load_inventory(own_rack), "sglang"):
        assert spec.env["SGLANG_DSA_MQA_LOGITS_FREE_MEM_FRACTION"] == "0.02"


def test_a_profile_may_not_redefine_a_variable_of_the_env_files(own_rack):
    (own_rack / ".sparkrack" / "engines").mkdir(parents=True)
    text = (shipped("engines") / "sglang.yml").read_text()
    text = text.replace("      --dsa-decode-backend: flashinfer_sparse_mla",
                        "      --dsa-decode-backend: flashinfer_sparse_mla\n"
                        "    env:\n      SGLANG_DSA_MQA_LOGITS_FREE_MEM_FRACTION: '0.05'")
    (own_rack / ".sparkrack" / "engines" / "sglang.yml").write_text(text)
    with pytest.raises(UsageError) as caught:
        specs(load_inventory(own_rack), "sglang")
    assert caught.value.message == (
        "sglang profile 512k sets SGLANG_DSA_MQA_LOGITS_FREE_MEM_FRACTION, which "
        "/etc/sparkrack/sglang.env already sets (inventory indexer_mem_fraction)")
    assert "define SGLANG_DSA_MQA_LOGITS_FREE_MEM_FRACTION once" in caught.value.fix


def test_each_variable_says_where_it_comes_from(real_inventory):
    spec = specs(real_inventory, "vllm")[2]
    assert spec.env_view == "inventory"
    sources = spec.env_sources
    assert sources["NCCL_IB_HCA"].startswith("inventory nccl_ib_hca")
    assert sources["NCCL_IB_GID_INDEX"].startswith("inventory nccl_ib_gid_index (provision "
                                                   "writes the index probed on the node)")
    assert sources["GLOO_SOCKET_IFNAME"] == "inventory nccl_socket_ifname [/etc/sparkrack/nccl.env]"
    assert sources["VLLM_ENGINE_READY_TIMEOUT_S"] == "profile vllm 512k [vllm.yml]"
    assert set(sources) == set(spec.env)


def test_sglang_131k_throughput_changes_context_and_speculation_only(real_inventory):
    base = specs(real_inventory, "sglang")[0]
    fast = specs(real_inventory, "sglang", "131k-throughput")[0]
    assert flag_value(fast.argv, "--context-length") == "131072"
    assert flag_value(fast.argv, "--speculative-num-steps") == "2"
    assert flag_value(fast.argv, "--speculative-num-draft-tokens") == "3"
    changed = {"--context-length", "--speculative-num-steps", "--speculative-num-draft-tokens"}
    for flag in (word for word in base.argv if word.startswith("--") and word not in changed):
        assert flag_value(fast.argv, flag) == flag_value(base.argv, flag), flag
    assert fast.env == base.env


# --- Rank 0 and the workers ----------------------------------------------------------


def test_sglang_ranks_join_the_head_at_its_roce_address(real_inventory):
    all_specs = specs(real_inventory, "sglang")
    assert [spec.rank for spec in all_specs] == list(range(8))
    for spec, node in zip(all_specs, real_inventory.nodes, strict=False):
        assert spec.node == node.name
        assert spec.argv[:5] == ("python3", "-m", "sglang.launch_server", "--model-path",
                                 "/models/GLM-5.3-NVFP4")
        tail = ("--tp-size", "8", "--nnodes", "8", "--node-rank", str(spec.rank),
                "--dist-init-addr", "198.51.100.11:20000", "--host", "0.0.0.0",
                "--port", "30000")
        assert spec.argv[-len(tail):] == tail
        assert "--tp" not in spec.argv  # only the full spelling is safe with argparse
        assert spec.ports == {"http": 30000, "dist_init": 20000}
        assert spec.is_head == (spec.rank == 0)


def test_vllm_head_serves_http_and_workers_run_headless(real_inventory):
    all_specs = specs(real_inventory, "vllm")
    for spec in all_specs:
        assert spec.argv[:3] == ("vllm", "serve", "/models/GLM-5.3-NVFP4")
        for flag, value in (("--tensor-parallel-size", "8"), ("--nnodes", "8"),
                            ("--node-rank", str(spec.rank)), ("--master-addr", "198.51.100.11"),
                            ("--master-port", "29501"), ("--distributed-executor-backend", "mp"),
                            ("--max-model-len", "524288"), ("--kv-cache-dtype", "fp8")):
            assert flag_value(spec.argv, flag) == value, (spec.rank, flag)
        config = json.loads(flag_value(spec.argv, "--speculative-config"))
        assert config == {"method": "mtp", "num_speculative_tokens": 3}
        assert int(spec.env["VLLM_ENGINE_READY_TIMEOUT_S"]) > 600
        assert spec.env["NCCL_IB_HCA"] == "rocep1s0f0,roceP2p1s0f0"
        assert spec.env["NCCL_IB_GID_INDEX"] == "3"
    head, workers = all_specs[0], all_specs[1:]
    assert head.argv[-6:] == ("--host", "0.0.0.0", "--port", "8000", "--shutdown-timeout",
                              "120")  # the inventory's drain_budget_s: rank 0 drains
    assert head.docker.stop_timeout_s == 120 + DRAIN_EXIT_S  # docker lets it drain too
    assert "--headless" not in head.argv
    for spec in workers:
        assert spec.argv[-1] == "--headless"
        assert "--port" not in spec.argv and "--host" not in spec.argv


def test_vllm_1m_nvfp4_is_experimental_with_the_reports_reason(real_inventory):
    spec = specs(real_inventory, "vllm", "1m-nvfp4")[0]
    assert spec.experimental and "984K" in spec.note and "754K" in spec.note
    assert flag_value(spec.argv, "--kv-cache-dtype") == "nvfp4_ds_mla"
    assert flag_value(spec.argv, "--max-model-len") == "1048576"
    assert flag_value(spec.argv, "--speculative-config") is not None  # inherited
    assert not specs(real_inventory, "vllm")[0].experimental


def test_a_probed_gid_index_applies_to_its_node_only(real_inventory):
    envs = read_env(real_inventory, "sglang", spark_03={"NCCL_IB_GID_INDEX": ("5", PROBED)})
    all_specs = specs(real_inventory, "sglang", node_env=envs)
    assert [spec.env["NCCL_IB_GID_INDEX"] for spec in all_specs] == ["3", "3", "5", "3", "3",
                                                                      "3", "3", "3"]
    assert all_specs[2].env_sources["NCCL_IB_GID_INDEX"] == f"{PROBED} [/etc/sparkrack/nccl.env]"
    assert {spec.env_view for spec in all_specs} == {"node"}
    del envs["spark-08"]
    with pytest.raises(UsageError, match="no environment for spark-08"):
        specs(real_inventory, "sglang", node_env=envs)


# --- Docker options and labels -------------------------------------------------------


def test_docker_options_and_labels(real_inventory):
    for spec in specs(real_inventory, "sglang", deployment_id="dep-1"):
        assert spec.container_name == f"sparkrack-sglang-r{spec.rank}"
        assert spec.image == "lmsysorg/sglang:v0.5.22-cu130"
        assert dict(spec.labels) == {
            LABEL_ENGINE: "sglang", LABEL_PROFILE: "512k", LABEL_RANK: str(spec.rank),
            LABEL_DEPLOYMENT: "dep-1", LABEL_SPEC_HASH: spec.spec_hash,
            LABEL_STOP_TIMEOUT: "150" if spec.rank == 0 else "120"}  # rank 0 drains
        options = spec.docker
        assert (options.network_mode, options.ipc_mode, options.shm_size) == ("host", "host", "32g")
        assert options.devices == ("/dev/infiniband",) and options.cap_add == ("IPC_LOCK",)
        assert {(u.name, u.soft, u.hard) for u in options.ulimits} == {
            ("memlock", -1, -1), ("nofile", 1048576, 1048576)}
        assert options.stop_timeout_s > 10 and spec.ready_timeout_s == 900


def test_docker_run_argv_is_the_whole_container(real_inventory):
    spec = specs(real_inventory, "vllm", deployment_id="dep-1")[1]
    argv = docker_run_argv(spec)
    text = shlex.join(argv)
    for piece in ("docker run --detach --name sparkrack-vllm-r1", "--network host",
                  "--ipc host", "--gpus all", "--device /dev/infiniband", "--cap-add IPC_LOCK",
                  "--ulimit memlock=-1:-1", "--ulimit nofile=1048576:1048576",
                  "--shm-size 32g", "--stop-timeout 120",
                  "--volume /models/GLM-5.3-NVFP4:/models/GLM-5.3-NVFP4:ro",
                  "--label sparkrack.rank=1", "--env NCCL_IB_GID_INDEX=3"):
        assert piece in text, piece
    image_at = argv.index(spec.image)
    assert argv[image_at - 2:image_at] == ["--entrypoint", "vllm"]
    assert tuple(argv[image_at + 1:]) == spec.argv[1:]
    assert shlex.split(text) == argv


def test_docker_sdk_kwargs_are_accepted_by_the_sdk(real_inventory):
    spec = specs(real_inventory, "sglang", node_env=read_env(real_inventory, "sglang"))[0]
    kwargs = docker_sdk_kwargs(spec)
    assert kwargs["entrypoint"] + kwargs["command"] == list(spec.argv)
    assert kwargs["environment"]["HF_TOKEN_PATH"] == TOKEN_FILE
    create = docker.models.containers._create_container_args({**kwargs, "version": "1.44"})
    host = create["host_config"]
    assert (host["NetworkMode"], host["IpcMode"]) == ("host", "host")
    assert host["DeviceRequests"][0]["Count"] == -1
    assert host["DeviceRequests"][0]["Capabilities"] == [["gpu"]]
    assert host["Devices"][0]["PathOnHost"] == "/dev/infiniband"
    assert host["CapAdd"] == ["IPC_LOCK"] and host["ShmSize"] == 32 << 30
    assert {u["Name"]: (u["Soft"], u["Hard"]) for u in host["Ulimits"]} == {
        "memlock": (-1, -1), "nofile": (1048576, 1048576)}
    assert host["Binds"] == ["/models/GLM-5.3-NVFP4:/models/GLM-5.3-NVFP4:ro",
                             "/etc/sparkrack/hf:/etc/sparkrack/hf:ro"]
    assert create["labels"] == dict(spec.labels) and create["name"] == "sparkrack-sglang-r0"


# --- Deployment hash and secrets -----------------------------------------------------


def test_the_spec_hash_is_stable(real_inventory):
    first = specs(real_inventory, "sglang")
    again = specs(real_inventory, "sglang", deployment_id="other")
    assert len({spec.spec_hash for spec in first}) == 1
    assert first[0].spec_hash == again[0].spec_hash and len(first[0].spec_hash) == 64
    assert first[0].deployment_id == f"sglang-512k-{first[0].spec_hash[:8]}"
    envs = read_env(real_inventory, "sglang", **{f"spark_0{n}": {"HF_TOKEN": ("hf_x", "secret")}
                                         for n in range(1, 9)})
    with_token = specs(real_inventory, "sglang", node_env=envs)
    assert with_token[0].spec_hash == first[0].spec_hash  # a token does not change what runs
    assert with_token[0].env_view == "node" and with_token[0].env["HF_TOKEN"] == "hf_x"


def test_the_spec_hash_changes_with_what_runs(real_inventory, own_rack):
    base = specs(real_inventory, "sglang")[0].spec_hash
    assert specs(real_inventory, "sglang", "131k-throughput")[0].spec_hash != base
    probed = read_env(real_inventory, "sglang", spark_08={"NCCL_IB_GID_INDEX": ("5", PROBED)})
    assert specs(real_inventory, "sglang", node_env=probed)[0].spec_hash != base
    (own_rack / ".sparkrack" / "engines").mkdir(parents=True)
    text = (shipped("engines") / "sglang.yml").read_text()
    (own_rack / ".sparkrack" / "engines" / "sglang.yml").write_text(
        text.replace("--chunked-prefill-size: 4096", "--chunked-prefill-size: 8192"))
    rehearsal = load_inventory(REPO / "inventory" / "rehearsal")
    assert (specs(load_inventory(own_rack), "sglang")[0].spec_hash
            != specs(rehearsal, "sglang")[0].spec_hash)


def test_a_rank_reads_its_hub_token_from_a_read_only_file_never_its_environment(
        real_inventory, monkeypatch):
    """Issue 46 item 8: an HF_TOKEN in the container's environment shows in `docker
    inspect`. A rank gets HF_TOKEN_PATH (the env file's) and the token file's folder bound
    read-only at the same path, where huggingface_hub reads it."""
    monkeypatch.setenv("HF_TOKEN", "hf_operator")  # the operator's own: never a rank's
    for spec in specs(real_inventory, "sglang", node_env=read_env(real_inventory, "sglang")):
        kwargs = docker_sdk_kwargs(spec)
        assert kwargs["environment"]["HF_TOKEN_PATH"] == TOKEN_FILE
        assert "HF_TOKEN" not in kwargs["environment"]
        assert kwargs["volumes"]["/etc/sparkrack/hf"] == {"bind": "/etc/sparkrack/hf",
                                                          "mode": "ro"}
        assert "hf_operator" not in json.dumps(kwargs, default=str)
        assert "--volume /etc/sparkrack/hf:/etc/sparkrack/hf:ro" in shlex.join(
            docker_run_argv(spec))


def test_a_token_left_in_an_env_file_is_shown_masked_and_never_started(real_inventory):
    """An env file provision wrote before the token moved to its file (or a hand edit)
    still holds HF_TOKEN: `plan` shows it as ***, and no container is made with it."""
    envs = read_env(real_inventory, "sglang", spark_01={"HF_TOKEN": ("hf_secret", "secret")})
    spec = specs(real_inventory, "sglang", node_env=envs)[0]
    assert "HF_TOKEN" in spec.secret_names
    shown = shlex.join(docker_run_argv(spec))
    assert "HF_TOKEN=***" in shown and "hf_secret" not in shown
    assert "hf_secret" not in json.dumps(spec.as_dict()) and "hf_secret" not in repr(spec)
    with pytest.raises(UsageError) as refused:
        docker_sdk_kwargs(spec)
    assert refused.value.line() == (
        "spark-01: HF_TOKEN is in the environment the engine would start with "
        "(/etc/sparkrack/sglang.env), where `docker inspect` shows it to anyone who may "
        "run docker (run invoke provision: the token goes to its own 0600 file, which the "
        "ranks read through HF_TOKEN_PATH)")
    assert "hf_secret" not in refused.value.line()
    assert "HF_TOKEN" not in specs(real_inventory, "sglang")[0].env


# --- Errors ----------------------------------------------------------------------------


def test_unknown_engine_and_profile_name_the_valid_ones(real_inventory):
    with pytest.raises(UsageError) as caught:
        specs(real_inventory, "sglng")
    assert caught.value.line() == ("unknown engine 'sglng' (did you mean 'sglang'?) "
                                   "(valid engines: sglang, vllm)")
    with pytest.raises(UsageError) as caught:
        specs(real_inventory, "vllm", "1m")
    assert caught.value.message.startswith("unknown vllm profile '1m'")
    assert caught.value.fix.endswith("512k, 1m-nvfp4")


def test_tp_size_must_equal_the_node_count_and_the_image_must_exist(real_inventory):
    with pytest.raises(UsageError, match="tp_size is 4 but the inventory has 8 nodes"):
        specs(dataclasses.replace(real_inventory,
                                  vars=dataclasses.replace(real_inventory.vars, tp_size=4)),
              "sglang")
    no_image = dataclasses.replace(real_inventory.vars, images={"vllm": "vllm/vllm-openai:v0.33.0"})
    with pytest.raises(UsageError, match="no image for 'sglang'"):
        specs(dataclasses.replace(real_inventory, vars=no_image), "sglang")


# --- invoke plan -----------------------------------------------------------------------


def run_plan(*args: str) -> None:
    """Run `invoke plan ARGS` in this process."""
    Program(namespace=Collection.from_module(serve_tasks)).run(["invoke", "plan", *args],
                                                               exit=False)


def test_plan_prints_eight_docker_runs_and_says_it_shows_the_inventorys_view(capsys, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf_secret")  # the operator's: no rank gets it from here
    run_plan("--engine", "sglang", "-i", str(REPO / "inventory" / "rack"))
    out = capsys.readouterr().out
    commands = [line for line in out.splitlines() if line.startswith("docker run")]
    assert len(commands) == 8 and "hf_secret" not in out and "HF_TOKEN=" not in out
    assert all(f"--env HF_TOKEN_PATH={TOKEN_FILE}" in command for command in commands)
    assert "--node-rank 7" in commands[7] and "# rank 0 on spark-01 (head)" in out
    assert ("# environment: the inventory's view (no node's env files could be read: spark-01 "
            "(192.0.2.11): the address is an example") in out
    assert ("#   NCCL_IB_GID_INDEX=3  <- inventory nccl_ib_gid_index (provision writes the "
            "index probed on the node) [/etc/sparkrack/nccl.env]") in out
    run_plan("--engine", "sglang", "-i", str(REPO / "inventory" / "rack"), "--offline")
    assert "# environment: the inventory's view (--offline" in capsys.readouterr().out


def test_plan_shows_what_differs_per_rank_under_its_rank_and_masks_secrets(real_inventory):
    envs = read_env(real_inventory, "sglang", spark_05={"NCCL_IB_GID_INDEX": ("5", PROBED),
                                              "HF_TOKEN": ("hf_secret", "secret")})
    all_specs = specs(real_inventory, "sglang", node_env=envs)
    view = RackView(envs, {})
    header = "\n".join(serve_tasks.env_lines(all_specs, view))
    assert header.startswith("# environment: read from each node's env files\n# every rank:")
    assert "NCCL_IB_GID_INDEX" not in header and "NCCL_IB_HCA=rocep1s0f0" in header
    own = ["SGLANG_HOST_IP", "VLLM_HOST_IP"]  # each rank advertises its own fabric address
    assert serve_tasks.own_vars(all_specs, all_specs[4]) == [
        "NCCL_IB_GID_INDEX", *own, "HF_TOKEN"]
    assert serve_tasks.own_vars(all_specs, all_specs[3]) == ["NCCL_IB_GID_INDEX", *own]
    assert all_specs[4].shown_env()["HF_TOKEN"] == "***"


def test_plan_json_and_experimental_warning(capsys):
    run_plan("--engine", "vllm", "--profile", "1m-nvfp4", "-i", str(REPO / "inventory" / "rack"), "--json")
    captured = capsys.readouterr()
    plan = json.loads(captured.out)
    assert plan["experimental"] and len(plan["ranks"]) == 8
    assert plan["ranks"][1]["docker_run"].endswith("--headless")
    assert "experimental" in captured.err


def test_plan_json_describes_each_container_once_from_one_list_of_mounts(capsys):
    """Issue 57 item 2: `docker_run` bound /etc/sparkrack/hf read-only, as the container does,
    but the `docker` block's mounts omitted it: an audit of the JSON missed the token folder."""
    run_plan("--engine", "sglang", "-i", str(REPO / "inventory" / "rack"), "--json")
    for rank in json.loads(capsys.readouterr().out)["ranks"]:
        mounts = rank["docker"]["mounts"]
        argv = shlex.split(rank["docker_run"])
        volumes = [argv[i + 1] for i, word in enumerate(argv) if word == "--volume"]
        assert volumes == [f"{m['source']}:{m['target']}" + (":ro" if m["read_only"] else "")
                           for m in mounts]
        assert {"source": "/etc/sparkrack/hf", "target": "/etc/sparkrack/hf",
                "read_only": True} in mounts
        assert rank["docker"]["token_mount"]["source"] == "/etc/sparkrack/hf"


def test_the_token_folder_in_the_mounts_leaves_the_spec_hash_as_it_was(real_inventory):
    """Listing the token's folder among the mounts changes no deployment's hash: a rack
    serving when sparkrack is upgraded is not taken for another deployment."""
    spec = specs(real_inventory, "sglang", node_env=read_env(real_inventory, "sglang"))[0]
    assert spec.docker.token_mount is not None
    data = spec.as_dict()
    data["docker"]["mounts"] = data["docker"]["mounts"][:-1]  # as before: without the token's
    for key in ("deployment_id", "spec_hash", "labels", "secret_names", "env_sources",
                "env_view", "stall_budget_s"):
        del data[key]
    data["env"] = {k: v for k, v in spec.env.items() if k not in spec.secret_names}
    text = json.dumps([data], sort_keys=True, separators=(",", ":"))
    assert deployment_hash((spec,)) == hashlib.sha256(text.encode()).hexdigest()


def test_api_port_gives_every_lane_one_address(own_rack):
    vars_file = own_rack / "group_vars" / "all.yml"
    vars_file.write_text(vars_file.read_text() + "\napi_port: 9000\n")
    rack = load_inventory(own_rack)
    for engine in ("sglang", "vllm"):
        head = specs(rack, engine)[0]
        assert head.ports["http"] == 9000
        assert head.argv[head.argv.index("--port") + 1] == "9000"
        assert api_url(rack, engine) == f"http://{rack.head.address}:9000/v1"


def test_api_port_may_not_take_another_port_of_a_lane(own_rack):
    vars_file = own_rack / "group_vars" / "all.yml"
    vars_file.write_text(vars_file.read_text() + "\napi_port: 20000\n")
    with pytest.raises(UsageError) as caught:
        specs(load_inventory(own_rack), "sglang")
    assert caught.value.message == "api_port 20000 is sglang's dist_init port too"
