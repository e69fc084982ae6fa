"""engines.learn without a rack: the table kept in the inventory with its image's ref and
ID, the version the image then runs, and what changed from the nearest known version."""

from __future__ import annotations

import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest

from sparkrack.engines.option_names import (
    LEARNED_DIR,
    image_version,
    lane_options,
    options_for,
    read_options,
    tables,
)
from sparkrack.inventory import load_inventory
from sparkrack.learn.options import LearnFailed, compare, keep, nearest_table
from sparkrack.rehearsal.stubversions import VERSIONS

REPO = Path(__file__).resolve().parents[3]
REF = "lmsysorg/sglang:v0.5.23-cu130"
IMAGE_ID = "sha256:" + "3" * 64


@pytest.fixture
def rack(tmp_path):
    return load_inventory(shutil.copytree(REPO / "inventory" / "rehearsal", tmp_path / "rack"))


def learned(rack, key=("sglang", "0.5.23"), ref=REF):
    return keep(rack, key[0], ref, IMAGE_ID, "spark-01", VERSIONS[key].table(), notes=[],
                seconds=0.5)


def test_a_learned_table_is_kept_with_its_image_and_compared(rack):
    found = learned(rack)
    assert found.file == rack.path / LEARNED_DIR / "sglang-0.5.23.txt"
    header = [line for line in found.file.read_text().splitlines() if line.startswith("#: ")]
    assert header[:4] == ["#: engine sglang", "#: version 0.5.23", "#: allow_abbrev true",
                          "#: underscores false"]
    assert header[4:7] == [f"#: image {REF}", f"#: image_id {IMAGE_ID}", "#: learned_on spark-01"]
    assert found.options.image == REF and found.version == "0.5.23"
    assert found.comparison.lines() == [
        "compared with sglang 0.5.22:",
        "  removed  --cuda-graph-max-bs-decode",
        "  renamed  --schedule-conservativeness -> --schedule-conservative-factor "
        "(likely: a removed and an added option, close names, same kind of value)"]
    assert list(tables("sglang", rack.path)) == ["0.5.22", "0.5.23"]


def test_the_image_says_its_version_once_learned(rack):
    """A ref whose tag names no version runs what the image said when it was learned."""
    ref = "registry.example/sglang:nightly"
    assert image_version("sglang", ref, rack.path).source == "none"
    learned(rack, ref=ref)
    version, options = lane_options("sglang", ref, rack.path)
    assert (version.version, version.source) == ("0.5.23", "image")
    assert version.describe() == f"sglang 0.5.23 (read from the image by engines.learn: {ref})"
    assert options.label == "sglang 0.5.23" and "--cuda-graph-max-bs-decode" not in options.takes
    assert lane_options("sglang", REF, rack.path)[0].source == "tag"  # another ref: its tag


def test_learning_the_pinned_version_again_compares_with_the_shipped_table(rack):
    found = learned(rack, ("sglang", "0.5.22"), "lmsysorg/sglang:v0.5.22-cu130")
    assert found.comparison.same and found.comparison.lines() == ["the same options as sglang 0.5.22"]
    assert options_for("sglang", "0.5.22", rack.path).file == found.file  # the inventory's wins


def test_a_vllm_version_compares_with_its_own_engine_only(rack):
    found = learned(rack, ("vllm", "0.34.0"), "vllm/vllm-openai:v0.34.0")
    assert found.comparison.old == "vllm 0.33.0"
    assert found.comparison.renamed == (("--block-size", "--kv-block-size"),)
    assert found.comparison.removed == ("--disable-log-stats",)


def test_output_without_a_table_header_is_refused(rack):
    with pytest.raises(LearnFailed, match="has no header"):
        keep(rack, "sglang", REF, IMAGE_ID, "spark-01", "Traceback (most recent call last)\n",
             notes=[], seconds=0.1)
    assert not (rack.path / LEARNED_DIR).exists() or not any((rack.path / LEARNED_DIR).iterdir())


def test_the_nearest_table_is_the_same_version_else_below_else_above():
    shipped = read_options(REPO / "sparkrack" / "engines" / "options" / "sglang-0.5.22.txt")
    known = {"0.5.22": shipped, "0.5.30": shipped}
    assert nearest_table(known, "0.5.22") is shipped
    assert nearest_table({"0.5.30": "above", "0.5.20": "below"}, "0.5.25") == "below"
    assert nearest_table({"0.5.30": "above"}, "0.5.25") == "above"
    assert nearest_table({}, "0.5.25") is None


def test_a_switch_that_takes_a_value_now_is_a_change():
    shipped = read_options(REPO / "sparkrack" / "engines" / "options" / "sglang-0.5.22.txt")
    takes = dict(shipped.takes, **{"--enable-metrics": "value"})
    changed = compare(shipped, type(shipped)(**{**shipped.__dict__, "takes": takes}))
    assert changed.changed == (("--enable-metrics", "none", "value"),)
    assert "  changed  --enable-metrics: takes none -> value" in changed.lines()


def test_learning_again_does_not_need_a_profile_the_version_takes(rack, monkeypatch):
    """Once 0.5.23 is learned the shipped profile is refused on it; learning the image
    again (a re-pushed tag) still works: only the profile file's image key is read."""
    import sparkrack.learn.options as learn_module

    rack_vars = rack.path / "group_vars" / "all.yml"
    rack_vars.write_text(rack_vars.read_text().replace("lmsysorg/sglang:v0.5.22-cu130", REF))
    rack = load_inventory(rack.path)
    learned(rack)

    class Stop(Exception):
        pass

    def fleet(inventory, nodes):
        assert [node.name for node in nodes] == ["spark-01"]  # the head alone
        raise Stop(inventory.vars.images["sglang"])
    monkeypatch.setattr(learn_module, "Fleet", fleet)
    with pytest.raises(Stop, match=REF):
        learn_module.learn(rack, "sglang")


def lane_of(rack, image: str) -> SimpleNamespace:
    """What the image gate reads of a lane resolved for image: the version its options are
    the table of, and that table (EngineLane.version / .options, from lane_options)."""
    version, options = lane_options("sglang", image, rack.path)
    return SimpleNamespace(version=version, options=options)


def test_a_tag_pushed_again_since_it_was_learned_is_refused_at_the_image_gate(rack):

    from sparkrack.lifecycle.gates import version_problems

    learned(rack)
    head = SimpleNamespace(engine="sglang", image=REF, node="spark-01")
    lane = lane_of(rack, REF)
    assert version_problems(lane, head, IMAGE_ID, {}) == []
    assert version_problems(lane, head, "sha256:" + "4" * 64, {}) == [
        f"{REF} is sha256:444444444444 on spark-01, its options were learned from "
        "sha256:333333333333 (the tag was pushed again): run `invoke engines.learn --engine "
        "sglang`"]


def test_an_image_whose_label_names_another_version_than_its_tag_is_refused(rack):
    """Read from its tag, the lane would be checked as 0.5.22; the image says 0.5.23."""

    from sparkrack.lifecycle.gates import version_problems

    ref = "lmsysorg/sglang:v0.5.22-cu130"
    head = SimpleNamespace(engine="sglang", image=ref, node="spark-01")
    label = "org.opencontainers.image.version"
    lane = lane_of(rack, ref)
    assert version_problems(lane, head, IMAGE_ID, {label: "0.5.22"}) == []
    assert version_problems(lane, head, IMAGE_ID, {label: "0.5.23"}) == [
        f"{ref} on spark-01 says it runs sglang 0.5.23 (label {label}), its tag 0.5.22: run "
        "`invoke engines.learn --engine sglang` (reads the options of the version it runs)"]
    learned(rack, ref=ref)  # learned: the image's own version checks the lane; no label read
    assert version_problems(lane_of(rack, ref), head, IMAGE_ID, {label: "0.5.99"}) == []


def test_a_profile_flag_the_new_version_dropped_or_renamed_is_named_so(rack):
    """On the learned 0.5.23 table, a flag 0.5.22 had is not just unknown: the error says
    the release removed it, or likely renamed it and to what."""
    learned(rack)
    options = lane_options("sglang", REF, rack.path)[1]
    assert options.previous.label == "sglang 0.5.22"
    assert options.problem("--cuda-graph-max-bs-decode") == (
        "sglang 0.5.23 has no option --cuda-graph-max-bs-decode: sglang 0.5.22 had it, 0.5.23 "
        "removed it", "drop --cuda-graph-max-bs-decode from the profile")
    assert options.problem("--schedule-conservativeness") == (
        "sglang 0.5.23 has no option --schedule-conservativeness: sglang 0.5.22 had it, 0.5.23 "
        "likely renamed it --schedule-conservative-factor",
        "write --schedule-conservative-factor")
    assert options.problem("--no-such-option")[0].startswith("unknown sglang 0.5.23 option")


def table_with(rack, *, version="0.5.23", after=(), before=()):
    """The 0.5.23 table as the extractor prints it, its version line replaced, with lines
    added after its header or at its end."""
    lines = VERSIONS[("sglang", "0.5.23")].table().splitlines()
    lines = [f"#: version {version}" if line.startswith("#: version ") else line
             for line in lines]
    at = next(i for i, line in enumerate(lines) if line.startswith("#: underscores")) + 1
    return "\n".join([*lines[:at], *before, *lines[at:], *after]) + "\n"


def tree(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file()}


@pytest.mark.parametrize("version", ["/../../x", "../../../x", "0.5.23/../../../x", "",
                                     "0.5.23\x1b]52", "a" * 80, "0.5.23 extra"])
def test_a_version_that_is_no_version_is_refused_and_nothing_written(rack, tmp_path, version):
    """Issue 46 item 10: the `#: version` line is the image's word, and `/../../x` wrote a
    file outside the inventory."""
    outside = tree(tmp_path)
    with pytest.raises(LearnFailed) as refused:
        keep(rack, "sglang", REF, IMAGE_ID, "spark-01", table_with(rack, version=version),
             notes=[], seconds=0.1)
    assert refused.value.line().startswith(
        f"the sglang table read from {REF} names version {version!r}, which is not a version")
    assert tree(tmp_path) == outside and not (rack.path / LEARNED_DIR).exists()


@pytest.mark.parametrize("extra, says", [
    (["#: image evil/sglang:v0.5.23"], "'#: image' is sparkrack's own header line"),
    (["#: image_id sha256:" + "4" * 64], "'#: image_id' is sparkrack's own header line"),
    (["#: version 0.5.99"], "'#: version' twice"),
    (["#: engine vllm"], "'#: engine' twice"),
    (["#: learned_on elsewhere"], "'#: learned_on' is sparkrack's own header line"),
])
def test_the_images_output_cannot_write_the_header(rack, extra, says):
    """Later output overrode the header (the last line of a key wins when a table is
    read): sparkrack's own lines are refused from the image, and so is a key said twice
    or a header line among the options."""
    for text in (table_with(rack, after=extra), table_with(rack, before=extra)):
        with pytest.raises(LearnFailed) as refused:
            keep(rack, "sglang", REF, IMAGE_ID, "spark-01", text, notes=[], seconds=0.1)
        assert says in refused.value.line() or "among the options" in refused.value.line()
        assert not (rack.path / LEARNED_DIR).exists()


def test_a_table_read_later_keeps_its_first_header_line(rack, tmp_path):
    """A table written before (or by hand) with a key twice is refused when read, naming
    the line, rather than the last one winning."""
    file = tmp_path / "sglang-0.5.23.txt"
    file.write_text(table_with(rack, after=[f"#: image {REF}", "#: image other/ref:v1"]))
    with pytest.raises(ValueError, match=r"sglang-0.5.23.txt:\d+: '#: image' twice"):
        read_options(file)


def test_the_learn_container_is_limited_and_unprivileged(rack, monkeypatch):
    import sparkrack.learn.options as learn_module

    ran = {}

    class Docker:
        def image_info(self, ref):
            return IMAGE_ID, {}

        def run_to_end(self, image, argv, **options):
            ran.update(options)
            return 0, VERSIONS[("sglang", "0.5.23")].table().encode(), b""

    class Fleet:
        def __init__(self, inventory, nodes):
            pass

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def docker(self, node):
            return Docker()

    monkeypatch.setattr(learn_module, "Fleet", Fleet)
    learn_module.learn(rack, "sglang", REF)
    assert ran["limits"] == {
        "mem_limit": "2g", "memswap_limit": "2g", "pids_limit": 64,
        # issue 53 item 3: none of these were set
        "nano_cpus": 2_000_000_000, "cap_drop": ["ALL"], "security_opt": ["no-new-privileges"],
        "log_config": {"type": "json-file", "config": {"max-size": "4m", "max-file": "2"}}}
    assert ran["output_limit"] == 1 << 20


def test_an_image_printing_too_much_is_one_line_and_nothing_learned(rack, monkeypatch):
    import sparkrack.learn.options as learn_module
    from sparkrack.fleet.containers import OutputTooLong

    class Docker:
        def image_info(self, ref):
            return IMAGE_ID, {}

        def run_to_end(self, image, argv, **options):
            raise OutputTooLong(f"python3 in {image} on spark-01 printed over 1,048,576 bytes "
                                "on stdout (read no further)")

    class Fleet:
        def __init__(self, inventory, nodes):
            pass

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def docker(self, node):
            return Docker()

    before = sorted(p.name for p in rack.path.rglob("*"))
    monkeypatch.setattr(learn_module, "Fleet", Fleet)
    with pytest.raises(learn_module.LearnFailed) as failed:
        learn_module.learn(rack, "sglang", REF)
    assert failed.value.line() == (
        f"python3 in {REF} on spark-01 printed over 1,048,576 bytes on stdout (read no "
        f"further): not an option table, nothing learned (an option table is some KiB: is "
        f"{REF} the sglang image it says it is?)")
    assert sorted(p.name for p in rack.path.rglob("*")) == before
