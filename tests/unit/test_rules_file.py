"""The rules file: every quote is verbatim in its source, `explain` shows the evidence,
mistakes in a rules file are reported at file:line; and the argv reading the rules use."""

import re
from pathlib import Path

import pytest

from sparkrack.errors import InventoryError, UsageError
from sparkrack.rules import all_rules, explain
from sparkrack.rules.argv import address_part, flag_values, number
from sparkrack.rules.ruleset import RULES_FILE, read_rules_file

REPO = Path(__file__).resolve().parents[2]


def flat(text: str) -> str:
    """text with every run of whitespace as one space."""
    return re.sub(r"\s+", " ", text).strip()


@pytest.mark.parametrize("rule", all_rules(), ids=lambda rule: rule.id)
def test_every_quote_is_verbatim_in_its_source(rule):
    """The sources sit beside the repo (../shared, as CI lays it out); a clone without them
    cannot check this."""
    for item in rule.evidence:
        if not (REPO / item.source).is_file():
            pytest.skip(f"{item.source} is not beside this checkout")
        source = flat((REPO / item.source).read_text())
        assert flat(item.quote) in source, f"{rule.id}: not in {item.source}: {item.quote}"
        assert flat(item.section) in source or item.section.startswith("module docstring")


@pytest.mark.parametrize("rule", all_rules(), ids=lambda rule: rule.id)
def test_explain_prints_the_explanation_and_evidence(rule):
    text = explain(rule.id)
    assert text.startswith(f"{rule.id} ({rule.severity}): {rule.message}\n")
    assert flat(rule.explanation) in flat(text)
    for item in rule.evidence:
        assert f'{item.source}, "{item.section}":' in text
        assert flat(f'"{item.quote}"') in flat(text)
    assert f"waivers: {{{rule.id}: " in text


def test_explain_autotune_cites_the_field_report():
    text = explain("SM121-AUTOTUNE")
    assert "Checks: every rank's argv has --disable-flashinfer-autotune" in text
    assert '../shared/seed/000_b6970c8a2ad8a37f.txt, "What refuses to boot on SM121":' in text
    assert "deadlocks on two ranks" in text


def test_explain_unknown_rule():
    with pytest.raises(UsageError, match="unknown rule 'SM121-AUTOTUNES' .did you mean "
                                         "'SM121-AUTOTUNE'"):
        explain("SM121-AUTOTUNES")


def test_rule_ids_are_unique_and_severities_known():
    ids = [rule.id for rule in all_rules()]
    assert len(ids) == len(set(ids)) and read_rules_file(RULES_FILE).rules == all_rules()


RULES_HEAD = """\
sources: {seed: ../shared/seed/000_b6970c8a2ad8a37f.txt}
launch_flags: {}
rules:
  DEMO:
    severity: error
    engines: [sglang]
    message: a demo
    explanation: why
    evidence: [{source: seed, section: s, quote: q}]
"""


@pytest.mark.parametrize("check,error", [
    ("check: {flag_at_most: --x}", "check flag_at_most needs max"),
    ("check: {flag_present: --x, max: 2}", "check flag_present takes no max"),
    ("check: {flag_in: --x}", "check flag_in needs values"),
    ("check: {flag_present: --x, env_at_most: Y}", "check: expected one kind, got 2"),
    ("check: {flag_present: x}", "flag_present: expected a flag"),
    ("check: {env_at_most: 1X, max: 1}", "env_at_most: expected a variable name"),
    ("check: {code: nope}", "code: expected one of kv_fit, "),
    ("check: {flag_sometimes: --x}", "unknown key 'flag_sometimes'"),
    ("check: {code: kv_fit}\n    when: {flags: {--x: [a]}}",
     "DEMO: when.flags applies to per-rank data checks only"),
    ("check: {flag_present: --x}\n    when: {model: {colour: red}}", "unknown key 'colour'"),
])
def test_rules_file_mistakes_name_the_line(tmp_path, check, error):
    file = tmp_path / "rules.yml"
    file.write_text(RULES_HEAD + "    " + check + "\n")
    with pytest.raises(InventoryError, match=rf"rules\.yml:\d+: .*{re.escape(error)}"):
        read_rules_file(file)


def test_rules_file_refuses_unknown_engines_and_sources(tmp_path):
    file = tmp_path / "rules.yml"
    file.write_text(RULES_HEAD.replace("[sglang]", "[sglng]") + "    check: {code: kv_fit}\n")
    with pytest.raises(InventoryError, match="engines: expected a list of engines: sglang, vllm"):
        read_rules_file(file)
    file.write_text(RULES_HEAD.replace("source: seed", "source: blog")
                    + "    check: {code: kv_fit}\n")
    with pytest.raises(InventoryError, match="source: expected one of seed"):
        read_rules_file(file)


# --- argv as the engine reads it ------------------------------------------------------


def test_flag_values_reads_switches_values_and_last_wins():
    argv = ("vllm", "serve", "/models/x", "--a", "1", "--switch", "--b=two", "--a", "3",
            "--neg", "-1", "--last")
    assert flag_values(argv) == {"--a": "3", "--switch": True, "--b": "two", "--neg": "-1",
                                 "--last": True}


@pytest.mark.parametrize("text,value", [("524288", 524288), ("0.01", 0.01), ("1M", 2**20),
                                        ("1m", 10**6), ("25.6k", 25600), ("512K", 524288),
                                        ("lots", None), (True, None), (None, None)])
def test_number(text, value):
    assert number(text) == value


@pytest.mark.parametrize("value,with_port,host", [
    ("198.51.100.11:20000", True, "198.51.100.11"), ("[fd00::1]:20000", True, "fd00::1"),
    ("198.51.100.11", False, "198.51.100.11"), ("head", True, "head")])
def test_address_part(value, with_port, host):
    assert address_part(value, with_port) == host
