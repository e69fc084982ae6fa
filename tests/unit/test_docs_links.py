"""Every relative link in README.md and docs/*.md leads to a file of the repository, and
every `#anchor` to a heading of the page it names (GitHub's heading ids). Links in code
(fenced blocks, `inline code`) are not links; URLs with a scheme are not checked."""

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
LINK = re.compile(r"\[[^\]]*\]\(\s*<?([^)\s>]*)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE = re.compile(r"^ {0,3}\[[^\]]+\]:\s*<?([^\s>]+)>?")
FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,}).*?^ {0,3}\1[`~]*[ \t]*$", re.M | re.S)
INLINE_CODE = re.compile(r"(`+)(?!`).*?(?<!`)\1(?!`)")
HEADING = re.compile(r"^ {0,3}#{1,6}[ \t]+(.*?)[ \t#]*$")
SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")


def pages(repo: Path) -> list[Path]:
    return [repo / "README.md", *sorted((repo / "docs").glob("*.md"))]


def unfenced(text: str) -> str:
    """text with its fenced code blocks as as many empty lines."""
    return FENCE.sub(lambda m: "\n" * m.group(0).count("\n"), text)


def prose(text: str) -> str:
    """text without its code: fenced blocks and inline code."""
    return INLINE_CODE.sub("", unfenced(text))


def slug(heading: str) -> str:
    """GitHub's id for a heading: lower case, punctuation out (but - and _), spaces to -."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).replace("`", "").lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """The ids of page's headings, a repeated one with -1, -2, ... as GitHub numbers them."""
    seen: dict[str, int] = {}
    found = set()
    for line in unfenced(page.read_text()).splitlines():  # a heading's code is in its id
        match = HEADING.match(line)
        if match:
            base = slug(match.group(1))
            count = seen.get(base, 0)
            seen[base] = count + 1
            found.add(base if count == 0 else f"{base}-{count}")
    return found


def broken_links(repo: Path) -> list[str]:
    """`page:line: target: why` for every relative link that does not resolve."""
    problems = []
    for page in pages(repo):
        where = page.relative_to(repo)
        for number, line in enumerate(prose(page.read_text()).splitlines(), 1):
            targets = LINK.findall(line) + REFERENCE.findall(line)
            for target in targets:
                if SCHEME.match(target):
                    continue
                path, _, anchor = target.partition("#")
                file = (page.parent / path).resolve() if path else page
                if not path and not anchor:
                    why = "an empty link"
                elif not file.is_relative_to(repo.resolve()):
                    why = "outside the repository"
                elif not file.exists():
                    why = "no such file"
                elif anchor and file.suffix == ".md" and anchor not in anchors(file):
                    why = f"no heading #{anchor} in {file.relative_to(repo.resolve())}"
                else:
                    continue
                problems.append(f"{where}:{number}: {target}: {why}")
    return problems


def test_every_relative_link_resolves():
    assert broken_links(REPO) == []


def test_the_readme_links_every_docs_page():
    readme = REPO / "README.md"
    linked = {(readme.parent / target.partition("#")[0]).resolve()
              for target in LINK.findall(prose(readme.read_text())) if not SCHEME.match(target)}
    missing = [p.name for p in sorted((REPO / "docs").glob("*.md")) if p.resolve() not in linked]
    assert not missing, f"README.md does not link docs/{missing}"


@pytest.mark.parametrize("heading, expected", [
    ("The burn: proving the cap", "the-burn-proving-the-cap"),
    ("`up`'s phases", "ups-phases"),
    ("Comparing lanes: `invoke bench`", "comparing-lanes-invoke-bench"),
    ("Logs, and one command on every node", "logs-and-one-command-on-every-node"),
    ("Field report: What was tested", "field-report-what-was-tested"),
])
def test_slugs_are_githubs(heading, expected):
    assert slug(heading) == expected


def test_a_broken_link_is_found(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text("# A page\n\n## Same\n\n## Same\n\n## Run `it`: now\n")
    (tmp_path / "README.md").write_text(
        "# Read me\n\n"
        "[ok](docs/a.md) [ok](docs/a.md#a-page) [ok](docs/a.md#same-1) [ok](#read-me)\n"
        "[ok](docs/a.md#run-it-now) "
        "[gone](docs/b.md) and [no anchor](docs/a.md#nothing)\n"
        "[up](../elsewhere.md) [web](https://example.org/x.md) [mail](mailto:a@b)\n"
        "`[in code](docs/c.md)`\n\n"
        "```\n[in a block](docs/d.md)\n```\n\n"
        "[ref]: docs/e.md\n")
    assert broken_links(tmp_path) == [
        "README.md:4: docs/b.md: no such file",
        "README.md:4: docs/a.md#nothing: no heading #nothing in docs/a.md",
        "README.md:5: ../elsewhere.md: outside the repository",
        "README.md:12: docs/e.md: no such file",
    ]
