"""The pinned engines' option names (sparkrack/engines/options/): profile flags must be
exact option names, spelled in full by their first name; the rules see canonical names."""

import dataclasses
import shutil
from pathlib import Path

import pytest

from sparkrack import data
from sparkrack.core.errors import InventoryError
from sparkrack.engines import build_specs, load_engine
from sparkrack.engines.option_names import PINNED, options_for, read_options
from sparkrack.inventory import load_inventory
from sparkrack.rules import check_profile
from sparkrack.rules.rule import DataCheck, LaunchFlags
from sparkrack.rules.ruleset import shipped

REPO = Path(__file__).resolve().parents[3]
REHEARSAL = REPO / "inventory" / "rehearsal"


@pytest.fixture
def rack_dir(tmp_path):
    return Path(shutil.copytree(REHEARSAL, tmp_path / "rack"))


def own_engine_file(rack_dir: Path, engine: str, old: str, new: str) -> tuple[Path, int]:
    """rack_dir's own .sparkrack/engines/<engine>.yml: the shipped one with old replaced by
    new; the file and the 1-based line of new."""
    text = (data.shipped("engines") / f"{engine}.yml").read_text()
    assert old in text, old
    text = text.replace(old, new, 1)
    folder = rack_dir / ".sparkrack" / "engines"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{engine}.yml").write_text(text)
    return folder / f"{engine}.yml", text[:text.index(new)].count("\n") + 1


def refused(rack_dir, engine, old, new) -> str:
    """The one-line error loading the edited profile file gives; it must name file:line."""
    file, line = own_engine_file(rack_dir, engine, old, new)
    with pytest.raises(InventoryError) as caught:
        load_engine(rack_dir, engine)
    text = caught.value.line()
    assert text.startswith(f"{file}:{line}: "), text
    assert "\n" not in text
    return text[len(f"{file}:{line}: "):]


# --- The lists ---------------------------------------------------------------------------


def test_the_lists_are_the_pinned_versions_and_say_how_they_were_made():
    for engine, version in PINNED.items():
        options = options_for(engine)
        assert (options.engine, options.version) == (engine, version)
        header = options.file.read_text().split("\n#: engine")[0]
        assert f"pip download --no-deps {engine}=={version}" in header
        assert "tools/engine_options.py" in header and "sha256 " in header
        assert options.allow_abbrev  # both engines' parsers take prefixes (argparse default)
    sglang, vllm = options_for("sglang"), options_for("vllm")
    assert len(sglang.takes) > 500 and len(vllm.takes) > 450
    assert sglang.primary["--model"] == "--model-path" and not sglang.underscores
    assert vllm.primary["-tp"] == "--tensor-parallel-size" and vllm.underscores
    assert sglang.takes["--disable-flashinfer-autotune"] == "none"
    assert sglang.takes["--speculative-eagle-topk"] == "value"
    assert vllm.takes["--no-enable-prefix-caching"] == vllm.takes["--headless"] == "none"
    assert options_for("demo") is None


def test_a_list_line_that_is_not_option_takes_primary_is_refused(tmp_path):
    bad = tmp_path / "x-1.txt"
    bad.write_text("#: engine x\n#: version 1\n--a value\n--b maybe\n")
    with pytest.raises(ValueError, match=r"x-1.txt:4: expected OPTION TAKES"):
        read_options(bad)


def test_every_flag_the_shipped_files_and_rules_name_is_a_first_name():
    for engine in PINNED:
        options = options_for(engine)
        definition = load_engine(REHEARSAL, engine)
        named = [*definition.flag_roles.values()]
        named += [w.split("=", 1)[0] for group in ("model", "every_rank", "head", "workers")
                  for w in getattr(definition.args, group) if w.startswith("-")]
        named += [flag for p in definition.profiles.values() for flag in p.flags]
        launch: LaunchFlags = shipped().launch_flags[engine]
        named += [getattr(launch, f.name) for f in dataclasses.fields(launch)
                  if isinstance(getattr(launch, f.name), str)
                  and getattr(launch, f.name).startswith("--")]
        for rule in shipped().rules:
            if engine in rule.engines:
                named += list(rule.when.flags)
                if isinstance(rule.check, DataCheck) and \
                        str(rule.check.subject or "").startswith("--"):
                    named.append(rule.check.subject)
        assert len(named) > 10
        for flag in named:
            assert options.problem(flag) is None, (engine, flag)


# --- Profiles: the hostile spellings, each one line at file:line ----------------------


@pytest.mark.parametrize("engine, old, new, message", [
    ("sglang", "--speculative-eagle-topk: 1 ", "--speculative-eagle-top: 4 ",
     "--speculative-eagle-top is an abbreviation of --speculative-eagle-topk; spell it in "
     "full (write --speculative-eagle-topk)"),
    ("sglang", "--chunked-prefill-size: 4096", "--model-pat: /tmp/other",
     "--model-pat is an abbreviation of --model-path; spell it in full (write --model-path)"),
    ("sglang", "--chunked-prefill-size: 4096", "--chunked-prefil-size: 4096",
     "unknown sglang 0.5.22 option --chunked-prefil-size (did you mean "
     "'--chunked-prefill-size'?) (its options: "
     "sparkrack/engines/options/sglang-0.5.22.txt)"),
    ("sglang", "--chunked-prefill-size: 4096", "--speculative-num: 4096",
     "--speculative-num is an abbreviation of several sglang 0.5.22 options "
     "(--speculative-num-draft-tokens, --speculative-num-steps); spell one in full"),
    ("sglang", "--chunked-prefill-size: 4096", "--model: /tmp/other",
     "--model is another name for --model-path (write --model-path"),
    ("sglang", "--context-length: 524288", "--context-length: true",
     "--context-length takes a value (write --context-length: VALUE)"),
    ("sglang", "--disable-flashinfer-autotune: true", "--disable-flashinfer-autotune: 1",
     "--disable-flashinfer-autotune is a switch and takes no value"),
    ("sglang", "--kv-cache-dtype: fp8_e4m3", "--kv-cache-dtype: --host=127.0.0.1",
     "--kv-cache-dtype: the value '--host=127.0.0.1' would be read as an option"),
    ("sglang", "--kv-cache-dtype: fp8_e4m3", '--kv-cache-dtype: "fp8_e4m3\\n--host"',
     "--kv-cache-dtype: the value 'fp8_e4m3\\n--host' holds a control character"),
    ("sglang", "every_rank: [--tp-size,", "every_rank: [--tp,",
     "args.every_rank: --tp is an abbreviation of --tp-size; spell it in full"),
    ("sglang", "context_length: --context-length", "context_length: --context-len",
     "flag_roles.context_length: --context-len is an abbreviation of --context-length"),
    ("vllm", "--max-model-len: 524288", "--max_model_len: 524288",
     "vllm 0.33.0 reads --max_model_len as --max-model-len; write --max-model-len"),
    ("vllm", "--max-model-len: 524288", "--max-model: 524288",
     "--max-model is an abbreviation of --max-model-len; spell it in full"),
    ("vllm", "--kv-cache-dtype: fp8\n", "--speculative-config.method: mtp\n      --kv-cache-dtype: fp8\n",
     "--speculative-config.method: give --speculative-config as one JSON value"),
    ("vllm", "[--tensor-parallel-size,", "[-tp,",
     "args.every_rank: -tp is another name for --tensor-parallel-size"),
    ("vllm", "--kv-cache-dtype: fp8\n", "--master-add: 10.0.0.9\n      --kv-cache-dtype: fp8\n",
     "--master-add is an abbreviation of --master-addr; spell it in full"),
])
def test_a_flag_that_is_not_an_exact_option_is_refused(rack_dir, engine, old, new, message):
    assert message in refused(rack_dir, engine, old, new)


@pytest.mark.parametrize("engine, old, new, where", [
    ("vllm", "--kv-cache-dtype: fp8\n", "--config: /models/serve.yaml\n      --kv-cache-dtype: fp8\n",
     "--config"),
    ("sglang", "--chunked-prefill-size: 4096", "--config: /models/serve.yaml", "--config"),
    ("vllm", "every_rank: [--tensor-parallel-size,",
     "every_rank: [--config, /models/serve.yaml, --tensor-parallel-size,", "args.every_rank: --config"),
])
def test_a_config_file_option_is_refused_naming_the_file(rack_dir, engine, old, new, where):
    """A settings file read by the engine on the node hides its settings from the rules
    (`check` would say "may start" whatever it sets): refused at the line that gives it."""
    file, _ = own_engine_file(rack_dir, engine, old, new)
    said = refused(rack_dir, engine, old, new)
    assert said.startswith(f"{where}: {engine} would read further options from that file, "
                           "where the rules (invoke check) cannot see them"), said
    assert said.endswith(f"(write those settings as flags of the profile in {file})"), said


def test_the_reserved_flag_guard_sees_through_abbreviations_without_a_list(tmp_path):
    from sparkrack.engines.profile_file import read_engine_file
    text = """\
engine: demo
image_key: sglang
entrypoint: [demo-serve]
ports: {http: 9000}
health_path: /health
args: {model: [--model-path, "{model_path}"]}
serving:
  memory_fraction: {flag: --mem-fraction-static, default: 0.88}
  worker_health_path: /health
  liveness_path: /health
  metrics: {flag: null, running: a, waiting: b, progress: [c]}
profiles:
  p:
    description: d
    ready_timeout_s: 1
    stop_timeout_s: 1
    flags: {--model-pat: /tmp/other}
"""
    (tmp_path / "demo.yml").write_text(text)
    with pytest.raises(InventoryError, match=r"demo.yml:17: --model-pat is set per rank by "
                                             r"this file's args \(as --model-path\)"):
        read_engine_file(tmp_path / "demo.yml")


def test_the_hostile_profiles_exit_2_through_the_cli(rack_dir):
    import subprocess
    import sys
    own_engine_file(rack_dir, "sglang", "--speculative-eagle-topk: 1 ",
                    "--speculative-eagle-top: 4 ")
    done = subprocess.run([sys.executable, "-m", "invoke", "-r", str(REPO), "check", "--engine",
                           "sglang", "-i", str(rack_dir)], capture_output=True, text=True,
                          cwd=REPO, timeout=120)
    assert done.returncode == 2, done.stderr
    lines = (done.stdout + done.stderr).strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and \
        "is an abbreviation of --speculative-eagle-topk" in lines[0]


# --- The rules see canonical names ---------------------------------------------------


def test_the_rules_see_an_abbreviation_as_the_option_the_engine_reads(rack_dir):
    inventory = load_inventory(rack_dir)
    specs = build_specs(inventory, "sglang", "512k")
    sneaky = []
    for spec in specs:
        argv = list(spec.argv)
        at = argv.index("--speculative-eagle-topk")
        argv[at:at + 2] = ["--speculative-eagle-top", "4"]
        argv.remove("--disable-flashinfer-autotune")
        argv.append("--disable-flashinfer-auto")
        at = argv.index("--host")
        argv[at] = "--hos"
        sneaky.append(dataclasses.replace(spec, argv=tuple(argv)))
    report = check_profile(inventory, "sglang", "512k", specs=tuple(sneaky))
    assert {f.rule for f in report.findings} == {"DSA-EAGLE-TOPK"}
    assert "--speculative-eagle-topk 4 is above 1" in report.findings[0].message


def test_vllm_underscores_and_short_names_count_for_the_rules(rack_dir):
    inventory = load_inventory(rack_dir)
    specs = build_specs(inventory, "vllm", "1m-nvfp4")
    renamed = tuple(dataclasses.replace(spec, argv=tuple(
        "--max_model_len" if word == "--max-model-len" else word for word in spec.argv))
        for spec in specs)
    before = check_profile(inventory, "vllm", "1m-nvfp4", specs=specs)
    after = check_profile(inventory, "vllm", "1m-nvfp4", specs=renamed)
    assert [f.rule for f in after.findings] == [f.rule for f in before.findings]
    assert "NVFP4-KV-CONTEXT" in {f.rule for f in after.findings}
