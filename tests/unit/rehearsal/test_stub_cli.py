"""Stub engines' command lines: every argv the shipped profiles produce parses, as on the
real engines; an unknown flag is argparse's usage error (exit 2); the stub settings file."""

import argparse
from pathlib import Path

import pytest

from sparkrack.engines import build_specs, engine_names, load_engine
from sparkrack.inventory import load_inventory
from sparkrack.rehearsal.stub import cli, config, modeldir

REPO = Path(__file__).resolve().parents[3]
INVENTORIES = [REPO / "inventory" / "rack", REPO / "inventory" / "rehearsal"]


def shipped_specs():
    """(id, spec) of every rank of every profile of every engine, for both inventories."""
    found = []
    for path in INVENTORIES:
        inventory = load_inventory(path)
        for engine in engine_names(inventory.path):
            for profile in load_engine(inventory.path, engine).profiles:
                for spec in build_specs(inventory, engine, profile):
                    found.append((f"{path.name}-{engine}-{profile}-r{spec.rank}", spec))
    return found


SPECS = shipped_specs()


def engine_argv(spec) -> list[str]:
    """The argv after the entry point (`python3 -m sglang.launch_server` / `vllm`)."""
    entry = {"sglang": 3, "vllm": 1}[spec.engine]
    return list(spec.argv[entry:])


def test_every_shipped_engine_has_a_stub():
    assert {spec.engine for _, spec in SPECS} == {"sglang", "vllm"}
    assert len(SPECS) >= 2 * 2 * 2 * 8  # two inventories, two engines, two profiles each


@pytest.mark.parametrize("spec", [s for _, s in SPECS], ids=[i for i, _ in SPECS])
def test_every_shipped_argv_parses(spec):
    args = cli.parse(spec.engine, engine_argv(spec))
    assert args.engine == spec.engine
    assert args.rank == spec.rank and args.nnodes == 8 and args.tp_size == 8
    head = spec.argv[spec.argv.index("--dist-init-addr") + 1].rsplit(":", 1) \
        if spec.engine == "sglang" else \
        [spec.argv[spec.argv.index("--master-addr") + 1],
         spec.argv[spec.argv.index("--master-port") + 1]]
    assert (args.head_host, args.group_port) == (head[0], int(head[1]))
    assert args.model_path == spec.argv[spec.argv.index("--model-path") + 1] \
        if spec.engine == "sglang" else args.model_path == spec.argv[2]
    port = spec.ports["http"]
    if spec.engine == "sglang":
        assert args.http_port == port and args.http_host == "0.0.0.0"  # workers: dummy /health
    else:
        assert args.http_port == (port if spec.rank == 0 else None)  # headless workers
        assert args.headless == (spec.rank > 0)


def test_the_512k_profiles_reach_the_stub_as_written():
    inventory = load_inventory(REPO / "inventory" / "rehearsal")
    sglang = cli.parse("sglang", engine_argv(build_specs(inventory, "sglang", "512k")[3]))
    assert (sglang.context_length, sglang.mem_fraction, sglang.chunked_prefill_size,
            sglang.max_running_requests, sglang.speculative_steps) == (524288, 0.8, 4096, 2, 3)
    assert sglang.namespace["kv_cache_dtype"] == "fp8_e4m3"
    assert sglang.namespace["disable_flashinfer_autotune"] is True
    assert sglang.namespace["dsa_decode_backend"] == "flashinfer_sparse_mla"
    vllm = cli.parse("vllm", engine_argv(build_specs(inventory, "vllm", "512k")[0]))
    assert (vllm.context_length, vllm.speculative_steps, vllm.served_model_name) == \
        (524288, 3, "GLM-5.3")
    assert vllm.namespace["speculative_config"] == {"method": "mtp", "num_speculative_tokens": 3}


@pytest.mark.parametrize("engine", ["sglang", "vllm"])
def test_an_unknown_flag_is_a_usage_error(engine, capsys):
    inventory = load_inventory(REPO / "inventory" / "rehearsal")
    argv = engine_argv(build_specs(inventory, engine, "512k")[0]) + ["--no-such-flag", "1"]
    with pytest.raises(SystemExit) as stop:
        cli.parse(engine, argv)
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: ") and "unrecognized arguments: --no-such-flag 1" in err


def test_values_are_checked_like_the_engines_do(capsys):
    base = ["--model-path", "/m", "--tp-size", "8", "--nnodes", "8", "--node-rank", "1",
            "--dist-init-addr", "10.0.0.1:20000"]
    with pytest.raises(SystemExit) as stop:  # argparse choices: exit 2
        cli.parse("sglang", base + ["--kv-cache-dtype", "fp8"])
    assert stop.value.code == 2 and "invalid choice: 'fp8'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli.parse("sglang", base + ["--context-length", "lots"])
    with pytest.raises(cli.ConfigError, match="DSA models only support"):  # refused at start
        cli.parse("sglang", base + ["--kv-cache-dtype", "nvfp4"])
    with pytest.raises(cli.ConfigError, match="topk > 1"):
        cli.parse("sglang", base + ["--speculative-algorithm", "EAGLE",
                                    "--speculative-eagle-topk", "2"])
    with pytest.raises(cli.ConfigError, match="--dist-init-addr is required"):
        cli.parse("sglang", ["--model-path", "/m", "--nnodes", "2"])
    # `--tp` is an argparse prefix of --tp-size, as in SGLang (docs/field-notes.md)
    assert cli.parse("sglang", ["--model-path", "/m", "--tp", "8"]).tp_size == 8
    vllm = ["serve", "/m", "--nnodes", "8", "--node-rank", "2", "--master-addr", "h"]
    with pytest.raises(cli.ConfigError, match="nnodes > 1 can only be set"):
        cli.parse("vllm", vllm + ["--distributed-executor-backend", "ray"])
    with pytest.raises(cli.ConfigError, match="Unknown kv cache dtype"):
        cli.parse("vllm", vllm + ["--distributed-executor-backend", "mp", "--kv-cache-dtype",
                                  "fp3"])
    args = cli.parse("vllm", vllm + ["--distributed-executor-backend", "mp", "--max_model_len",
                                     "512k", "--headless"])
    assert args.context_length == 512000 and args.http_port is None
    # vLLM 0.33's parsers keep argparse's default allow_abbrev: a unique prefix is taken
    args = cli.parse("vllm", vllm + ["--distributed-executor-backend", "mp", "--max-model", "8"])
    assert args.context_length == 8
    with pytest.raises(SystemExit):  # an ambiguous one is argparse's usage error
        cli.parse("vllm", vllm + ["--distributed-executor-backend", "mp", "--max-num", "8"])


def _option_strings(parser) -> set[str]:
    return set(parser._option_string_actions) - {"-h", "--help"}


def test_the_stub_parsers_take_exactly_the_pinned_option_names():
    from sparkrack.engines.option_names import PINNED, options_for
    assert {"sglang": cli.SGLANG_VERSION, "vllm": cli.VLLM_VERSION} == PINNED
    assert _option_strings(cli.sglang_parser()) == set(options_for("sglang").takes)
    serve = next(a for a in cli.vllm_parser()._actions
                 if isinstance(a, argparse._SubParsersAction)).choices["serve"]
    assert _option_strings(serve) == set(options_for("vllm").takes)
    # a listed option the stub does not use is taken, and so is its switch form
    args = cli.parse("sglang", ["--model-path", "/m", "--enable-metrics-for-all-schedulers",
                                "--cuda-graph-bs-decode", "1"])
    assert args.namespace["x_enable_metrics_for_all_schedulers"] is True
    with pytest.raises(SystemExit):  # not an option of SGLang 0.5.22 (and ambiguous)
        cli.parse("sglang", ["--model-path", "/m", "--cuda-graph-max-bs", "4"])


def test_scan_rank_finds_the_rank_before_parsing():
    assert cli.scan_rank(["--x", "--node-rank", "5"]) == 5
    assert cli.scan_rank(["--node-rank=3"]) == 3
    assert cli.scan_rank(["--bogus"]) == 0


# --- sparkrack-stub.json ---------------------------------------------------------------------

def test_config_defaults_and_precedence():
    assert config.resolve({}, "sglang", 0, [], 3) == config.RankConfig(
        load_delay_s=3.0, compile_s=3.0, tokens_per_s=50.0, prefill_tokens_per_s=4000.0, answer_tokens=64,
        accept_length=2.83, rank_mem_gib=None, indexer_scale=1.0, health_timeout_s=20.0)
    data = config.check({
        "load_delay_s": 2, "tokens_per_s": 40,
        "ranks": {"3": {"exit_at_start": True}, "5": {"die_after_s": 7, "exit_code": 9},
                  "2": {"load_delay_s": 10}},
        "engines": {"vllm": {"tokens_per_s": 45, "ranks": {"3": {"exit_at_start": False}}}},
        "overrides": [{"when": {"--context-length": "131072"}, "tokens_per_s": 60},
                      {"when": {"--disable-flashinfer-autotune": True}, "accept_length": 2.5}]})
    argv_131k = ["--context-length", "131072", "--disable-flashinfer-autotune"]
    assert config.resolve(data, "sglang", 0, argv_131k, 2).tokens_per_s == 60
    assert config.resolve(data, "sglang", 0, argv_131k, 2).accept_length == 2.5
    assert config.resolve(data, "sglang", 0, ["--context-length", "524288"], 2).tokens_per_s == 40
    assert config.resolve(data, "sglang", 0, [], 2).accept_length == 2.37  # 1+p+p^2
    assert config.resolve(data, "sglang", 3, [], 0).exit_at_start is True
    assert config.resolve(data, "vllm", 3, [], 0).exit_at_start is False
    assert config.resolve(data, "vllm", 1, [], 0).tokens_per_s == 45
    five = config.resolve(data, "sglang", 5, [], 0)
    assert (five.die_after_s, five.exit_code, five.load_delay_s) == (7.0, 9, 2.0)
    assert config.resolve(data, "sglang", 2, [], 0).load_delay_s == 10.0
    # a cold start's compile is as long as the rank's load unless the settings say
    assert config.resolve(data, "sglang", 2, [], 0).compile_s == 10.0
    assert config.resolve({"compile_s": 4, "engines": {"vllm": {"compile_s": 0}}}, "vllm", 2,
                          [], 0).compile_s == 0.0
    assert config.resolve(data, "sglang", 1, [], 0).accept_length == 1.0  # no speculation


@pytest.mark.parametrize("bad, message", [
    ({"load_dely_s": 1}, "unknown key 'load_dely_s'"),
    ({"tokens_per_s": "fast"}, "tokens_per_s must be a number"),
    ({"tokens_per_s": -1}, "must be >= 0"),
    ({"recall_tokens": "all"}, "recall_tokens must be a number"),
    ({"ranks": {"x": {}}}, "keys are rank numbers"),
    ({"ranks": {"1": {"die_after": 3}}}, "unknown key 'die_after'"),
    ({"ranks": {"1": {"exit_at_start": 1}}}, "bad value 1"),
    ({"engines": {"trt": {}}}, "unknown engine"),
    ({"overrides": [{"tokens_per_s": 3}]}, "needs a 'when' object"),
    ([], "must be a JSON object"),
])
def test_config_errors_name_the_key(bad, message):
    with pytest.raises(config.StubConfigError, match=message):
        config.check(bad)


def test_config_file_is_read_from_the_model_dir(tmp_path):
    assert config.load(str(tmp_path)) == {}
    (tmp_path / config.CONFIG_NAME).write_text('{"tokens_per_s": 7}')
    assert config.load(str(tmp_path)) == {"tokens_per_s": 7}
    (tmp_path / config.CONFIG_NAME).write_text('{"tokens_per_s": ')
    with pytest.raises(config.StubConfigError, match=config.CONFIG_NAME):
        config.load(str(tmp_path))


def test_model_dir_files_are_deterministic_and_listed_in_the_manifest():
    files = modeldir.model_files({"load_delay_s": 2})
    assert files == modeldir.model_files({"load_delay_s": 2})
    assert set(files) == {"config.json", "model-00001-of-00002.safetensors",
                          "model-00002-of-00002.safetensors", "model.safetensors.index.json",
                          modeldir.MANIFEST_NAME, config.CONFIG_NAME}
    listed = {line.split()[1] for line in files[modeldir.MANIFEST_NAME].decode().splitlines()}
    assert listed == set(files) - {modeldir.MANIFEST_NAME, config.CONFIG_NAME}
    assert config.CONFIG_NAME not in modeldir.model_files(None)
    with pytest.raises(config.StubConfigError):
        modeldir.model_files({"bogus": 1})


def test_a_stub_of_the_next_version_takes_its_own_options(tmp_path, monkeypatch):
    """The 0.5.23 stub refuses the option 0.5.23 removed (exit 2, as the engine would) and
    takes the renamed one; the option the stub reads keeps its default."""
    from sparkrack.rehearsal.stubversions import VERSIONS

    (tmp_path / "sglang-0.5.23.txt").write_text(VERSIONS[("sglang", "0.5.23")].table())
    monkeypatch.setattr(cli, "OPTIONS_DIRS", (str(tmp_path),))
    parser = cli.sglang_parser("0.5.23")
    assert "--cuda-graph-max-bs-decode" not in _option_strings(parser)
    assert _option_strings(parser) == {
        line.split()[0] for line in VERSIONS[("sglang", "0.5.23")].table().splitlines()
        if line and not line.startswith("#")}
    namespace = parser.parse_args(["--model-path", "/m", "--schedule-conservative-factor",
                                   "1.3"])
    assert namespace.cuda_graph_max_bs_decode is None
    with pytest.raises(SystemExit) as stopped:
        parser.parse_args(["--model-path", "/m", "--cuda-graph-max-bs-decode", "4"])
    assert stopped.value.code == 2


def test_a_stub_fault_can_belong_to_one_engine_version():
    data = config.check({"engines": {"sglang": {"versions": {
        "0.5.23": {"ranks": {"3": {"exit_at_start": True}}, "tokens_per_s": 10}}}}})
    new = config.resolve(data, "sglang", 3, [], 0, "0.5.23")
    old = config.resolve(data, "sglang", 3, [], 0, "0.5.22")
    assert new.exit_at_start and new.tokens_per_s == 10
    assert not old.exit_at_start and old.tokens_per_s == config.DEFAULTS["tokens_per_s"]
    with pytest.raises(config.StubConfigError, match=r"engines\.sglang\.versions\.0\.5\.23: "
                       r"unknown key 'wedge'"):
        config.check({"engines": {"sglang": {"versions": {"0.5.23": {"wedge": 1}}}}})
