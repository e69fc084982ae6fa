"""The rules file: every quote is verbatim in its source under the heading it names (the
sources are in the repo: docs/field-notes.md and docs/formats.md), `explain` shows the
evidence, mistakes in a rules file are reported at file:line; and the argv reading the
rules use."""

import re
from dataclasses import replace
from pathlib import Path

import pytest

from sparkrack.core.errors import InventoryError, UsageError
from sparkrack.rules import all_rules, explain
from sparkrack.rules.argv import address_part, flag_values, number
from sparkrack.rules.ruleset import RULES_FILE, get_rule, read_rules_file

REPO = Path(__file__).resolve().parents[3]
FIELD_NOTES = "docs/field-notes.md"
_HEADING = re.compile(r"(#{1,6})\s+(.+?)\s*#*\s*$")


def flat(text: str) -> str:
    """text with every run of whitespace as one space."""
    return re.sub(r"\s+", " ", text).strip()


def markdown_sections(text: str) -> dict[str, str]:
    """heading -> the text under it, down to the next heading of the same or a higher level
    (so a section includes its subsections); lines inside ``` fences are never headings.
    A heading that occurs twice is an error: a rule could not say which one it means."""
    lines = text.splitlines()
    headings, fenced = [], False
    for index, line in enumerate(lines):
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and (match := _HEADING.fullmatch(line)):
            headings.append((index, len(match.group(1)), match.group(2)))
    sections: dict[str, str] = {}
    for position, (start, level, title) in enumerate(headings):
        end = next((i for i, lvl, _ in headings[position + 1:] if lvl <= level), len(lines))
        assert title not in sections, f"heading '{title}' occurs twice"
        sections[title] = "\n".join(lines[start + 1:end])
    return sections


def section_text(path: Path, section: str) -> str | None:
    """The text under a Markdown heading of the file at path; None when it has none such."""
    return markdown_sections(path.read_text()).get(section)


def evidence_problems(evidence, repo: Path = REPO) -> list[str]:
    """What is wrong with a rule's evidence: a source file missing from the repo, a section
    it does not have, a quote that is not verbatim in that section. Empty when all holds."""
    problems = []
    for item in evidence:
        path = repo / item.source
        if not path.is_file():
            problems.append(f"{item.source}: no such file in the repo")
            continue
        text = section_text(path, item.section)
        if text is None:
            problems.append(f'{item.source}: no section "{item.section}"')
        elif flat(item.quote) not in flat(text):
            problems.append(f'{item.source}, "{item.section}": not verbatim there: {item.quote}')
    return problems


@pytest.mark.parametrize("rule", all_rules(), ids=lambda rule: rule.id)
def test_every_quote_is_verbatim_in_its_source(rule):
    assert evidence_problems(rule.evidence) == []


def test_the_evidence_is_in_the_repo_and_mostly_the_field_notes():
    sources = {item.source for rule in all_rules() for item in rule.evidence}
    assert FIELD_NOTES in sources
    assert all(not Path(source).is_absolute() and ".." not in Path(source).parts
               for source in sources), sources


def test_every_field_report_quote_sits_in_the_quoted_section():
    """The field report's own words are kept apart from the notes written for the project."""
    quoted = markdown_sections((REPO / FIELD_NOTES).read_text())["Quoted from the field report"]
    for rule in all_rules():
        for item in rule.evidence:
            if item.section.startswith("Field report: "):
                assert f"### {item.section}\n" in quoted, (rule.id, item.section)


def test_an_altered_quote_or_section_is_caught():
    item = get_rule("SM121-AUTOTUNE").evidence[0]
    assert evidence_problems([item]) == []
    altered = item.quote.replace("two ranks", "three ranks")
    assert altered != item.quote
    assert evidence_problems([replace(item, quote=altered)]) == [
        f'{FIELD_NOTES}, "{item.section}": not verbatim there: {altered}']
    # verbatim in the file, but under another heading than the one named
    assert evidence_problems([replace(item, section="Known failures on SM121")]) != []
    assert evidence_problems([replace(item, section="Nowhere")]) == [
        f'{FIELD_NOTES}: no section "Nowhere"']
    assert evidence_problems([replace(item, source="docs/gone.md")]) == [
        "docs/gone.md: no such file in the repo"]


def test_markdown_sections_nest_and_skip_code_fences():
    text = "# A\na\n## B\nb\n```\n# not a heading\n```\n### C\nc\n## D\nd\n"
    sections = markdown_sections(text)
    assert list(sections) == ["A", "B", "C", "D"]
    assert flat(sections["B"]) == "b ``` # not a heading ``` ### C c"
    assert flat(sections["A"]).endswith("## D d")
    with pytest.raises(AssertionError, match="heading 'B' occurs twice"):
        markdown_sections("## B\n## B\n")


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
    assert 'docs/field-notes.md, "Field report: What refuses to boot on SM121":' in text
    assert "deadlocks on two ranks" in text


def test_explain_unknown_rule():
    with pytest.raises(UsageError, match="unknown rule 'SM121-AUTOTUNES' .did you mean "
                                         "'SM121-AUTOTUNE'"):
        explain("SM121-AUTOTUNES")


def test_rule_ids_are_unique_and_severities_known():
    ids = [rule.id for rule in all_rules()]
    assert len(ids) == len(set(ids)) and read_rules_file(RULES_FILE).rules == all_rules()


RULES_HEAD = """\
sources: {seed: docs/field-notes.md}
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
    ("check: {flag_present: --x}\n    verified_on: {sglang: 0.5.x}",
     "sglang: expected a version, 'LOW - HIGH', a list of those, or any"),
    ("check: {flag_present: --x}\n    verified_on: {tgi: 1.0}", "unknown engine 'tgi'"),
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


def test_a_rule_says_the_versions_it_was_verified_on(tmp_path):
    file = tmp_path / "rules.yml"
    head = RULES_HEAD.replace("launch_flags: {}",
                              "launch_flags: {}\nverified_on: {sglang: 0.5.22}")
    file.write_text(head + "    check: {flag_present: --x}\n"
                    "  OWN:\n    severity: error\n    engines: [sglang, vllm]\n"
                    "    message: m\n    explanation: e\n"
                    "    evidence: [{source: seed, section: s, quote: q}]\n"
                    "    check: {flag_present: --x}\n"
                    "    verified_on: {sglang: [0.5.18 - 0.5.21, 0.5.23], vllm: any}\n")
    demo, own = read_rules_file(file).rules
    assert demo.verified("sglang", "0.5.22") and not demo.verified("sglang", "0.5.23")
    assert not demo.verified("vllm", "0.33.0") and demo.verified_text("vllm") == "none"
    assert [own.verified("sglang", v) for v in ("0.5.17", "0.5.18", "0.5.20", "0.5.22",
                                                 "0.5.23")] == [False, True, True, False, True]
    assert own.verified_text("sglang") == "0.5.18 - 0.5.21, 0.5.23"
    assert own.verified("vllm", "9.9.9") and own.verified_text("vllm") == "any"
