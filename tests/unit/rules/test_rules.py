"""Rule checks: each rule fires on a profile that breaks it and stays silent on the field
report's working 512K profiles; waivers; node facts; the launch specs given or built."""

import dataclasses
import shutil
from pathlib import Path

import pytest
import yaml

from sparkrack.core.errors import InventoryError, UsageError
from sparkrack.data import shipped
from sparkrack.engines import build_specs, load_engine
from sparkrack.facts.kernel import KernelFacts
from sparkrack.inventory import load_inventory
from sparkrack.inventory.schema import FrozenMapping
from sparkrack.rules import ERROR, WARNING, all_rules, check_profile

REPO = Path(__file__).resolve().parents[3]
GOOD = KernelFacts("6.17.0-1008-nvidia", "BOOT_IMAGE=/boot/vmlinuz ro quiet", 0, 0)
KHO = KernelFacts("7.0.0-1019-nvidia", "BOOT_IMAGE=/boot/vmlinuz ro quiet", 0, 10171187)
WORKING = [("sglang", "512k"), ("sglang", "131k-throughput"), ("vllm", "512k")]


def kernels(inventory, bad=None):
    """Node facts: every node on a good kernel, the nodes of bad on their given kernel."""
    return {node.name: (bad or {}).get(node.name, GOOD) for node in inventory.nodes}


@pytest.fixture
def rack_dir(tmp_path):
    """A private copy of the rehearsal inventory, to edit."""
    return Path(shutil.copytree(REPO / "inventory" / "rehearsal", tmp_path / "rack"))


def engine_file(rack_dir, engine, edit):
    """Give rack_dir its own .sparkrack/engines/<engine>.yml: the shipped one, changed by edit(data)."""
    data = yaml.safe_load((shipped("engines") / f"{engine}.yml").read_text())
    edit(data)
    folder = rack_dir / ".sparkrack" / "engines"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{engine}.yml").write_text(yaml.safe_dump(data, sort_keys=False))
    return load_inventory(rack_dir)


def bad_profile(rack_dir, engine, **body):
    """An inventory whose engine file has profile 'bad': 512k with body's flags/env/waivers."""
    def edit(data):
        data["profiles"]["bad"] = {"description": "breaks a rule", "extends": "512k", **body}
    return engine_file(rack_dir, engine, edit)


def fired(report, rule_id):
    """The findings of one rule."""
    return [finding for finding in report.findings if finding.rule == rule_id]


def only(report, rule_id, severity=ERROR):
    """The single finding of report, which must be of rule_id with this severity."""
    assert [f.rule for f in report.findings] == [rule_id], report.findings
    finding = report.findings[0]
    assert finding.severity == severity
    return finding


# --- The working profiles are clean ---------------------------------------------------


@pytest.mark.parametrize("inventory_dir", ["inventory/rack", "inventory/rehearsal"])
@pytest.mark.parametrize("engine,profile", WORKING)
def test_working_profiles_have_no_findings(inventory_dir, engine, profile):
    inventory = load_inventory(REPO / inventory_dir)
    report = check_profile(inventory, engine, profile, node_kernels=kernels(inventory))
    assert report.findings == () and report.notes == ()
    assert not report.blocking and report.summary() == (
        f"{engine} {profile}: may start (0 error(s), 0 warning(s), 0 waived)")


def test_every_rule_applies_to_a_shipped_engine():
    assert {rule.id for rule in all_rules()} >= {
        "SM121-AUTOTUNE", "DSA-EAGLE-TOPK", "NVFP4-MOE-BACKEND", "DSA-KV-DTYPE",
        "DSA-INDEXER-BUDGET", "KV-FIT", "NVFP4-KV-CONTEXT", "TP-GROUP", "HEAD-HOST",
        "RENDEZVOUS-ADDR", "HOST-KERNEL", "ENGINE-VERSION", "EXPERIMENTAL"}


# --- Data rules on the SGLang profile -------------------------------------------------


def test_autotune_left_on_is_an_error_on_every_rank(rack_dir):
    inventory = bad_profile(rack_dir, "sglang", flags={"--disable-flashinfer-autotune": None})
    report = check_profile(inventory, "sglang", "bad")
    finding = only(report, "SM121-AUTOTUNE")
    assert finding.message == ("FlashInfer autotune must be disabled on SM121: "
                               "--disable-flashinfer-autotune is missing")
    assert finding.nodes == tuple(node.name for node in inventory.nodes)
    assert finding.ranks == tuple(range(8)) and finding.where(8) == "all ranks"
    assert report.blocking == (finding,) and report.errors == (finding,)
    assert report.summary() == ("sglang bad: blocked by SM121-AUTOTUNE "
                                "(1 error(s), 0 warning(s), 0 waived)")


@pytest.mark.parametrize("topk,fires", [("4", True), ("2", True), ("1", False)])
def test_eagle_tree_drafts_with_dsa(rack_dir, topk, fires):
    inventory = bad_profile(rack_dir, "sglang", flags={"--speculative-eagle-topk": topk})
    report = check_profile(inventory, "sglang", "bad")
    if fires:
        assert only(report, "DSA-EAGLE-TOPK").message.endswith(
            f"--speculative-eagle-topk {topk} is above 1")
    else:
        assert report.findings == ()


@pytest.mark.parametrize("backend,fires", [("flashinfer_cutedsl", True), ("triton", True),
                                           ("auto", False), ("cutlass", False)])
def test_moe_runner_backends_that_cannot_load_nvfp4(rack_dir, backend, fires):
    inventory = bad_profile(rack_dir, "sglang", flags={"--moe-runner-backend": backend})
    report = check_profile(inventory, "sglang", "bad")
    if fires:
        assert only(report, "NVFP4-MOE-BACKEND").message.endswith(
            f"--moe-runner-backend {backend} is given")
    else:
        assert report.findings == ()


@pytest.mark.parametrize("dtype", ["nvfp4", "fp4_mx_block16", "fp8_e5m2"])
def test_kv_dtypes_sglang_refuses_for_dsa(rack_dir, dtype):
    inventory = bad_profile(rack_dir, "sglang", flags={"--kv-cache-dtype": dtype})
    report = check_profile(inventory, "sglang", "bad")
    (finding,) = report.blocking
    assert finding.rule == "DSA-KV-DTYPE" and finding.message.endswith(
        f"--kv-cache-dtype {dtype} is not one of auto, fp8_e4m3, bf16, bfloat16")
    assert [f.rule for f in report.warnings] == ["KV-FIT"]  # no size per token for it either


def with_rank_env(specs, edit):
    """specs with edit(env) applied to every rank's environment (as if read from a node)."""
    result = []
    for spec in specs:
        env = dict(spec.env)
        edit(env)
        result.append(dataclasses.replace(spec, env=FrozenMapping(env)))
    return tuple(result)


@pytest.mark.parametrize("value,detail", [
    ("0.2", "SGLANG_DSA_MQA_LOGITS_FREE_MEM_FRACTION=0.2 is above 0.05"),
    ("lots", "SGLANG_DSA_MQA_LOGITS_FREE_MEM_FRACTION=lots is not a number"),
])
def test_indexer_budget_too_high_in_a_nodes_env(rack_dir, value, detail):
    inventory = load_inventory(rack_dir)
    specs = with_rank_env(build_specs(inventory, "sglang", "512k"), lambda env: env.update(
        SGLANG_DSA_MQA_LOGITS_FREE_MEM_FRACTION=value))
    report = check_profile(inventory, "sglang", "512k", specs=specs)
    assert only(report, "DSA-INDEXER-BUDGET").message == (
        "the DSA indexer budget must be set low on unified memory (0.01 is verified): " + detail)


def test_indexer_budget_unset(rack_dir):
    inventory = load_inventory(rack_dir)
    specs = with_rank_env(build_specs(inventory, "sglang", "512k"),
                          lambda env: env.pop("SGLANG_DSA_MQA_LOGITS_FREE_MEM_FRACTION"))
    report = check_profile(inventory, "sglang", "512k", specs=specs)
    assert only(report, "DSA-INDEXER-BUDGET").message.endswith(
        "SGLANG_DSA_MQA_LOGITS_FREE_MEM_FRACTION is not set")


def test_indexer_budget_from_the_inventory(rack_dir):
    rack_vars = rack_dir / "group_vars" / "all.yml"
    rack_vars.write_text(rack_vars.read_text().replace("indexer_mem_fraction: 0.01",
                                                       "indexer_mem_fraction: 0.2"))
    report = check_profile(load_inventory(rack_dir), "sglang", "512k")
    assert only(report, "DSA-INDEXER-BUDGET").message.endswith("=0.2 is above 0.05")
    rack_vars.write_text(rack_vars.read_text().replace("0.2", "0.05"))
    assert check_profile(load_inventory(rack_dir), "sglang", "512k").findings == ()


# --- The engine version of the image --------------------------------------------------


def with_image(rack_dir, engine: str, ref: str):
    rack_vars = rack_dir / "group_vars" / "all.yml"
    data = yaml.safe_load(rack_vars.read_text())
    data["images"] = {**data.get("images", {}), engine: ref}
    rack_vars.write_text(yaml.safe_dump(data, sort_keys=False))
    return load_inventory(rack_dir)


@pytest.mark.parametrize("engine,ref,version", [
    ("sglang", "lmsysorg/sglang:v0.5.23-cu130", "0.5.23"),
    ("vllm", "vllm/vllm-openai:v0.34.1", "0.34.1")])
def test_an_image_of_a_version_without_an_option_table_is_refused(rack_dir, engine, ref,
                                                                   version):
    report = check_profile(with_image(rack_dir, engine, ref), engine, "512k")
    pinned = {"sglang": "0.5.22", "vllm": "0.33.0"}[engine]
    assert only(report, "ENGINE-VERSION").message == (
        "the image's engine version has no option table to check the profile against: "
        f"{ref} runs {engine} {version}, which has no option table (known: {pinned}): run "
        f"`invoke engines.learn --engine {engine} --image {ref}`, or from its wheel "
        "`python -m sparkrack.engines.option_extract WHEEL > "
        f"{rack_dir}/.sparkrack/engines/options/"
        f"{engine}-{version}.txt`")
    assert report.blocking and report.engine_version == version
    assert report.checked_against == (f"no option table for {engine} {version} (rule "
                                      "ENGINE-VERSION refuses the lane)")
    assert f"not verified on {engine} {version}" in " ".join(report.notes)


def test_an_image_ref_without_a_version_is_refused_until_learned(rack_dir):
    ref = "registry.example/sglang@sha256:" + "a" * 64
    report = check_profile(with_image(rack_dir, "sglang", ref), "sglang", "512k")
    assert only(report, "ENGINE-VERSION").message.endswith(
        f"{ref} names no sglang version in its tag and was not learned: run `invoke "
        f"engines.learn --engine sglang --image {ref}` (reads the version and the options "
        "from the image on the head)")
    assert report.engine_version is None


def test_a_learned_table_names_the_version_of_its_image_and_checks_the_profile(rack_dir):
    """A table whose header names the ref wins over the tag: the image said its version."""
    ref = "registry.example/sglang:nightly"
    learned = rack_dir / ".sparkrack" / "engines" / "options"
    learned.mkdir(parents=True)
    shipped = (REPO / "sparkrack" / "engines" / "options" / "sglang-0.5.22.txt").read_text()
    table = shipped.replace("#: version 0.5.22", f"#: version 0.5.24\n#: image {ref}")
    without = table.replace("--cuda-graph-max-bs-decode value\n", "")
    (learned / "sglang-0.5.24.txt").write_text(without)
    line = 1 + next(n for n, text in enumerate(
        (REPO / "sparkrack" / "data" / "engines" / "sglang.yml").read_text().splitlines())
        if "--cuda-graph-max-bs-decode" in text)
    with pytest.raises(InventoryError, match=rf"sglang\.yml:{line}: sglang 0\.5\.24 has no option "
                       r"--cuda-graph-max-bs-decode: sglang 0\.5\.22 had it, 0\.5\.24 removed "
                       r"it \(drop --cuda-graph-max-bs-decode from the profile\)"):
        check_profile(with_image(rack_dir, "sglang", ref), "sglang", "512k")
    (learned / "sglang-0.5.24.txt").write_text(table)
    report = check_profile(with_image(rack_dir, "sglang", ref), "sglang", "512k")
    assert not report.blocking and report.engine_version == "0.5.24"
    assert report.checked_against == (
        f"the sglang 0.5.24 option table ({learned / 'sglang-0.5.24.txt'}; sglang 0.5.24 (read "
        f"from the image by engines.learn: {ref}))")
    assert report.unverified and "SM121-AUTOTUNE" in report.unverified
    assert ("not verified on sglang 0.5.24, run as written for the versions named: "
            "SM121-AUTOTUNE (0.5.22)") in " ".join(report.notes)


def test_the_pinned_versions_are_checked_and_every_rule_verified_on_them(rack_dir):
    for engine, version in (("sglang", "0.5.22"), ("vllm", "0.33.0")):
        report = check_profile(load_inventory(rack_dir), engine, "512k")
        assert report.engine_version == version and report.unverified == ()
        assert report.checked_against.startswith(
            f"the {engine} {version} option table (sparkrack/engines/options/{engine}-{version}")


# --- KV fit and the vLLM 4-bit ceiling ------------------------------------------------


def test_1m_context_does_not_fit_in_sglang(rack_dir):
    inventory = bad_profile(rack_dir, "sglang", flags={"--context-length": 1048576})
    finding = only(check_profile(inventory, "sglang", "bad"), "KV-FIT")
    assert finding.message.endswith(
        "1,048,576 tokens of fp8_e4m3 KV need 52.68 GiB per node, 52.60 GiB is free after weights")


def test_kv_fit_warns_when_it_cannot_check(rack_dir):
    inventory = bad_profile(rack_dir, "sglang", flags={"--kv-cache-dtype": "bf16"})
    finding = only(check_profile(inventory, "sglang", "bad"), "KV-FIT", WARNING)
    assert finding.message.endswith(
        "cannot check: glm-5.3.yml gives no KV bytes per token for sglang with KV dtype bf16")
    inventory = bad_profile(rack_dir, "sglang", flags={"--context-length": None})
    assert "is not given" in only(check_profile(inventory, "sglang", "bad"), "KV-FIT",
                                  WARNING).message


def test_kv_fit_refuses_a_context_that_is_not_a_number(rack_dir):
    inventory = bad_profile(rack_dir, "sglang", flags={"--context-length": "long"})
    assert only(check_profile(inventory, "sglang", "bad"), "KV-FIT").message.endswith(
        "--context-length long is not a token count")


def test_vllm_human_readable_context_counts(rack_dir):
    inventory = bad_profile(rack_dir, "vllm", flags={"--max-model-len": "1M"})
    assert only(check_profile(inventory, "vllm", "bad"), "KV-FIT").message.startswith(
        "the context's KV cache must fit the memory left after weights on each node: "
        "1,048,576 tokens of fp8 KV need 52.68 GiB")


def test_vllm_1m_nvfp4_warns_and_does_not_block():
    report = check_profile(load_inventory(REPO / "inventory" / "rack"), "vllm", "1m-nvfp4")
    assert not report.blocking and report.errors == ()
    assert [f.rule for f in report.warnings] == ["KV-FIT", "NVFP4-KV-CONTEXT", "EXPERIMENTAL"]
    context, experimental = fired(report, "NVFP4-KV-CONTEXT")[0], fired(report, "EXPERIMENTAL")[0]
    assert context.message.endswith("--max-model-len 1048576 is above 772,096")
    assert experimental.message.startswith(
        "the profile is experimental: 1M is not a working context on this stack")
    assert experimental.nodes == () and experimental.where(8) == ""


def test_nvfp4_context_at_the_shown_ceiling_is_quiet(rack_dir):
    inventory = bad_profile(rack_dir, "vllm", flags={"--kv-cache-dtype": "nvfp4_ds_mla",
                                                     "--max-model-len": 772096})
    report = check_profile(inventory, "vllm", "bad")
    assert [f.rule for f in report.findings] == ["KV-FIT"]  # cannot check, no NVFP4 warning


# --- TP group and addresses -----------------------------------------------------------


def test_tp_size_flag_that_is_not_the_node_count(rack_dir):
    def edit(data):
        every = data["args"]["every_rank"]
        every[every.index("--tp-size") + 1] = "4"
    report = check_profile(engine_file(rack_dir, "sglang", edit), "sglang", "512k")
    assert only(report, "TP-GROUP").message.endswith("--tp-size 4, expected 8")


def test_node_rank_that_is_not_the_rank(rack_dir):
    def edit(data):
        every = data["args"]["every_rank"]
        every[every.index("--node-rank") + 1] = "0"
    report = check_profile(engine_file(rack_dir, "vllm", edit), "vllm", "512k")
    assert len(report.findings) == 7  # one per rank >= 1: each expects its own rank
    assert report.findings[2].message.endswith("--node-rank 0, expected 3")
    assert report.findings[2].nodes == ("spark-04",) and report.findings[2].ranks == (3,)


def test_inventory_with_fewer_nodes_than_tp_size():
    inventory = load_inventory(REPO / "inventory" / "rack")
    short = dataclasses.replace(inventory, nodes=inventory.nodes[:7])
    report = check_profile(short, "sglang", "512k")
    assert only(report, "TP-GROUP").message.endswith("tp_size is 8 but the inventory has 7 nodes")
    assert report.notes[0].startswith("launch specs not built")


def test_a_node_without_a_rank():
    inventory = load_inventory(REPO / "inventory" / "rack")
    specs = build_specs(inventory, "sglang", "512k")
    report = check_profile(inventory, "sglang", "512k", specs=specs[:7])
    finding = only(report, "TP-GROUP")
    assert finding.message.endswith("the node runs 0 ranks, not 1")
    assert finding.nodes == ("spark-08",)


def test_given_specs_must_be_the_profiles():
    inventory = load_inventory(REPO / "inventory" / "rack")
    specs = build_specs(inventory, "sglang", "131k-throughput")
    with pytest.raises(UsageError, match="is for sglang 131k-throughput, not sglang 512k"):
        check_profile(inventory, "sglang", "512k", specs=specs)


@pytest.mark.parametrize("host,detail", [
    (None, "--host is not given (sglang binds 127.0.0.1)"),
    ("127.0.0.1", "--host 127.0.0.1"),
])
def test_head_api_on_loopback(rack_dir, host, detail):
    def edit(data):
        every = data["args"]["every_rank"]
        at = every.index("--host")
        del every[at:at + 2]
        if host:
            data["args"]["head"] += ["--host", host]
    report = check_profile(engine_file(rack_dir, "sglang", edit), "sglang", "512k")
    finding = only(report, "HEAD-HOST")
    assert finding.message.endswith(f"{detail}: the API would not answer at 10.77.1.11; "
                                    "pass --host 0.0.0.0")
    assert finding.nodes == ("spark-01",)


def test_head_api_on_the_node_address_or_vllm_default(rack_dir):
    def edit(data):
        every = data["args"]["every_rank"]
        every[every.index("--host") + 1] = "10.77.1.11"  # the head's own address
    assert check_profile(engine_file(rack_dir, "sglang", edit), "sglang", "512k").findings == ()

    def drop_host(data):
        data["args"]["head"] = ["--port", "{http_port}"]  # vLLM binds every interface
    assert check_profile(engine_file(rack_dir, "vllm", drop_host), "vllm", "512k").findings == ()


def test_rendezvous_on_the_management_address(tmp_path):
    rack_dir = Path(shutil.copytree(REPO / "inventory" / "rack", tmp_path / "real"))

    def edit(data):
        every = data["args"]["every_rank"]
        every[every.index("--dist-init-addr") + 1] = "192.0.2.11:{dist_init_port}"
    report = check_profile(engine_file(rack_dir, "sglang", edit), "sglang", "512k")
    assert only(report, "RENDEZVOUS-ADDR").message.endswith(
        "--dist-init-addr 192.0.2.11:20000 is not the head's RoCE address 198.51.100.11")


def test_vllm_without_master_addr(rack_dir):
    def edit(data):
        every = data["args"]["every_rank"]
        at = every.index("--master-addr")
        del every[at:at + 2]
    report = check_profile(engine_file(rack_dir, "vllm", edit), "vllm", "512k")
    assert only(report, "RENDEZVOUS-ADDR").message.endswith("--master-addr is missing")


# --- Host kernels (node facts) --------------------------------------------------------


def test_a_kernel_whose_kho_broke_cma_is_refused_on_its_node():
    inventory = load_inventory(REPO / "inventory" / "rack")
    facts = kernels(inventory, {"spark-03": KHO})
    finding = only(check_profile(inventory, "vllm", "512k", node_kernels=facts), "HOST-KERNEL")
    assert finding.message == (
        "a node's host kernel breaks RDMA memory registration: host kernel 7.0.0-1019-nvidia: "
        "CmaFree 10171187 kB above its CmaTotal 0 kB and no kho=off on its command line "
        "(KHO's scratch pageblocks): ibv_reg_mr fails with ENOMEM once about 108 GiB is "
        "committed, after the weights load; boot it with kho=off")
    assert finding.nodes == ("spark-03",) and finding.where(8) == "spark-03 (rank 2)"


def test_the_kernel_rule_judges_the_symptom_not_the_name():
    """A fixed 7.0.0-1019-nvidia (kho=off: both counters 0) passes; the symptom under any
    other release is refused."""
    inventory = load_inventory(REPO / "inventory" / "rack")
    fixed = dataclasses.replace(KHO, cmdline=KHO.cmdline + " kho=off", cma_free_kb=0)
    assert check_profile(inventory, "vllm", "512k", node_kernels=kernels(
        inventory, {"spark-03": fixed})).findings == ()
    renamed = dataclasses.replace(KHO, release="7.0.0-1031-nvidia")
    finding = only(check_profile(inventory, "vllm", "512k", node_kernels=kernels(
        inventory, {"spark-06": renamed})), "HOST-KERNEL")
    assert "host kernel 7.0.0-1031-nvidia: CmaFree 10171187 kB above its CmaTotal 0 kB" in finding.message
    assert finding.nodes == ("spark-06",)


def test_kernel_rule_without_facts_is_noted_and_unknown_nodes_warn():
    inventory = load_inventory(REPO / "inventory" / "rack")
    assert check_profile(inventory, "sglang", "512k").notes == (
        "HOST-KERNEL not checked: no node facts given (host kernel per node)",)
    facts = kernels(inventory, {"spark-02": dataclasses.replace(GOOD, cmdline=None)})
    del facts["spark-05"]
    finding = only(check_profile(inventory, "sglang", "512k", node_kernels=facts),
                   "HOST-KERNEL", WARNING)
    assert finding.nodes == ("spark-02", "spark-05") and finding.message.endswith("cannot check")
    with pytest.raises(UsageError, match="kernel given for unknown node 'spark-09'"):
        check_profile(inventory, "sglang", "512k", node_kernels={"spark-09": GOOD})


# --- Waivers --------------------------------------------------------------------------


def test_a_waived_rule_shows_with_its_reason_and_never_blocks(rack_dir):
    reason = "testing a FlashInfer fix for the two-rank deadlock"
    inventory = bad_profile(rack_dir, "sglang", flags={"--disable-flashinfer-autotune": None},
                            waivers={"SM121-AUTOTUNE": reason})
    report = check_profile(inventory, "sglang", "bad")
    finding = only(report, "SM121-AUTOTUNE")
    assert finding.waived and finding.waiver_reason == reason and not finding.blocking
    assert report.blocking == () and report.waived == (finding,)
    assert dict(report.waivers) == {"SM121-AUTOTUNE": reason}
    data = report.as_dict()
    assert data["waivers"] == {"SM121-AUTOTUNE": reason} and data["blocking"] is False
    assert data["findings"][0]["waiver_reason"] == reason
    assert report.summary() == "sglang bad: may start (1 error(s), 0 warning(s), 1 waived)"


def test_a_waiver_without_a_reason_is_refused_at_load(rack_dir):
    inventory = bad_profile(rack_dir, "sglang", waivers={"KV-FIT": None})
    with pytest.raises(InventoryError, match=r"sglang\.yml:\d+: KV-FIT: expected the reason"):
        load_engine(inventory.path, "sglang")
    inventory = bad_profile(rack_dir, "sglang", waivers={"KV-FIT": "  "})
    with pytest.raises(InventoryError, match="KV-FIT: expected the reason the rule is waived"):
        load_engine(inventory.path, "sglang")
    inventory = bad_profile(rack_dir, "sglang", waivers={"kv fit": "because"})
    with pytest.raises(InventoryError, match="invalid rule id 'kv fit'"):
        load_engine(inventory.path, "sglang")


def test_a_waiver_of_an_unknown_rule_is_refused(rack_dir):
    inventory = bad_profile(rack_dir, "sglang", waivers={"KV-FITS": "because"})
    with pytest.raises(InventoryError,
                       match="waives unknown rule 'KV-FITS' .did you mean 'KV-FIT'"):
        check_profile(inventory, "sglang", "bad")


def test_unused_waivers_are_noted_and_not_inherited(rack_dir):
    def edit(data):
        data["profiles"]["512k"]["waivers"] = {"KV-FIT": "a stale waiver"}
        data["profiles"]["child"] = {"description": "inherits no waiver", "extends": "512k",
                                     "flags": {"--context-length": 1048576}}
    inventory = engine_file(rack_dir, "sglang", edit)
    parent = check_profile(inventory, "sglang", "512k")
    assert parent.findings == ()
    assert "waiver of KV-FIT unused: the rule found nothing" in parent.notes
    assert only(check_profile(inventory, "sglang", "child"), "KV-FIT").blocking
