"""What the code's own words point at exists: a docs link in a docstring or comment leads to
a page and a heading of it, and a repository path named in a docstring, a comment, or a
role's, inventory's or data file's text is a file or folder of the repository."""

import ast
import io
import re
import tokenize
from pathlib import Path

from test_docs_links import anchors

REPO = Path(__file__).resolve().parents[2]
DOCS_LINK = re.compile(r"(?<![\w/.-])docs/([\w-]+\.md)(?:#([\w-]+))?")
# a relative path: words joined by '/', starting at a top-level folder of the repository or
# a package of sparkrack; a word in capitals or with <, {, * is a placeholder (remote/NAME.py)
PATH = re.compile(r"(?<![\w/.~$<{*-])((?:[a-z_][\w.-]*/)+[\w.-]*\w)")
PLACEHOLDER = re.compile(r"[A-Z]{2,}|[<{*]")
MADE_AT_RUN_TIME = {
    "inventory/twin",  # `rehearsal.up --twin` writes the twin's inventory there
    "sparkrack/roles",  # the wheel's name for roles/ (pyproject's package-dir)
}
DATA_TEXT = ("roles", "inventory", "sparkrack/data")


def roots(repo: Path) -> set[str]:
    """The first words a repository path starts with: top-level folders, sparkrack's packages."""
    return {p.name for folder in (repo, repo / "sparkrack") for p in folder.iterdir()
            if p.is_dir() and not p.name.startswith((".", "__"))}


def python_text(path: Path) -> list[tuple[int, str]]:
    """(line, text) of every docstring and comment of a Python file."""
    source = path.read_text()
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node, clean=False)
            if doc is not None:
                found.append((node.body[0].lineno, doc))
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            found.append((token.start[0], token.string))
    return found


def texts(repo: Path) -> list[tuple[Path, int, str]]:
    """(file, line, text) to look through: the package's docstrings and comments, and the
    lines of the roles', inventories' and package data's YAML and templates."""
    found = [(path, line, text) for path in sorted((repo / "sparkrack").rglob("*.py"))
             for line, text in python_text(path)]
    for folder in DATA_TEXT:
        for path in sorted((repo / folder).rglob("*")):
            if path.suffix in (".yml", ".yaml", ".j2"):
                found += [(path, number, line)
                          for number, line in enumerate(path.read_text().splitlines(), 1)]
    return found


def resolves(reference: str, where: Path, repo: Path) -> bool:
    """Whether a path named in the file at where is there: from the repository's top, the
    package's, or the folder of where or the one above it."""
    bases = (repo, repo / "sparkrack", where.parent, where.parent.parent)
    return reference in MADE_AT_RUN_TIME or any((base / reference).exists() for base in bases)


def broken_references(repo: Path) -> list[str]:
    """`file:line: reference: why` for every docs link or repository path that leads nowhere."""
    starts = roots(repo)
    problems = []
    for path, line, text in texts(repo):
        where = f"{path.relative_to(repo)}:{line}"
        for page, anchor in DOCS_LINK.findall(text):
            if not (repo / "docs" / page).exists():
                problems.append(f"{where}: docs/{page}: no such page")
            elif anchor and anchor not in anchors(repo / "docs" / page):
                problems.append(f"{where}: docs/{page}#{anchor}: no such heading")
        for reference in PATH.findall(text):
            if (reference.split("/")[0] in starts and not PLACEHOLDER.search(reference)
                    and not reference.startswith("docs/")
                    and not resolves(reference.rstrip("."), path, repo)):
                problems.append(f"{where}: {reference}: no such file or folder")
    return problems


def test_every_reference_in_the_codes_own_words_resolves():
    assert broken_references(REPO) == []


def test_a_broken_reference_is_found(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text("# A page\n\n## Its part\n")
    package = tmp_path / "sparkrack" / "engines"
    package.mkdir(parents=True)
    (package / "spec.py").write_text("x = 1\n")
    (package / "files.py").write_text(
        '"""Read (docs/a.md#its-part), made by engines/spec.py and spec.py; not by\n'
        'engines/nodeenv.py (docs/a.md#gone, docs/b.md), nor sglang/srt/server_args.py,\n'
        'remote/NAME.py or /etc/engines/x.py."""\n'
        "x = 1  # see sparkrack/engines/gone.py\n")
    (tmp_path / "roles" / "r").mkdir(parents=True)
    (tmp_path / "roles" / "r" / "main.yml").write_text("# read by sparkrack/engines/spec.py\n")
    assert broken_references(tmp_path) == [
        "sparkrack/engines/files.py:1: docs/a.md#gone: no such heading",
        "sparkrack/engines/files.py:1: docs/b.md: no such page",
        "sparkrack/engines/files.py:1: engines/nodeenv.py: no such file or folder",
        "sparkrack/engines/files.py:4: sparkrack/engines/gone.py: no such file or folder",
    ]
