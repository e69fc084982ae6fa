"""What the code's own words point at exists: a docs link in a docstring or comment leads to
a page and a heading of it, and a repository path named in a docstring, a comment, or a
role's, inventory's or data file's text is a file or folder of the repository. The
look-ups of docs/internals.md ("Where to look first") too: each path they name is there,
and each `module.name` they name is defined in that module."""

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
LOOKUPS = "Where to look first"  # docs/internals.md's look-ups follow this line
CODE = re.compile(r"`([^`\s]+)`")  # inline code of one word: a path, a name
INLINE_CODE = re.compile(r"`[^`]*`")
NAME = re.compile(r"[a-z_]\w*(?:\.[A-Za-z_]\w*)+")  # module.name[.attribute...]


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


def lookups(repo: Path) -> list[tuple[int, str]]:
    """(line, text) of each bullet of docs/internals.md's look-ups, its lines joined."""
    lines = (repo / "docs" / "internals.md").read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(LOOKUPS))
    bullets: list[tuple[int, str]] = []
    for number, line in enumerate(lines[start + 1:], start + 2):
        if line.startswith("```") or (bullets and not line.strip()):
            break
        if line.startswith("- "):
            bullets.append((number, line[2:]))
        elif bullets:
            bullets[-1] = (bullets[-1][0], f"{bullets[-1][1]} {line.strip()}")
    return bullets


def defines(module: Path, chain: list[str]) -> bool:
    """Whether module defines chain (a function, a class, a name assigned at its top; then
    a method or attribute of that class, and so on)."""
    body = ast.parse(module.read_text()).body
    for name in chain:
        found = [node for node in body if getattr(node, "name", None) == name or any(
            isinstance(target, ast.Name) and target.id == name
            for target in getattr(node, "targets", [getattr(node, "target", None)]))]
        if not found:
            return False
        body = getattr(found[0], "body", [])
    return True


def modules_named(stem: str, files: list[Path], folders: list[Path], repo: Path) -> set[Path]:
    """Where `stem.name` points: the bullet's own file of that stem, else one in a folder it
    names, else the package's modules of that stem."""
    mine = {path for path in files if path.stem == stem and path.suffix == ".py"}
    mine |= {folder / f"{stem}.py" for folder in folders if (folder / f"{stem}.py").is_file()}
    return mine or set((repo / "sparkrack").rglob(f"{stem}.py"))


def broken_lookups(repo: Path) -> list[str]:
    """`docs/internals.md:line: what: why` for each path of the look-ups that is not there,
    and each `module.name` not defined there (or whose module is not one file)."""
    problems = []
    for line, text in lookups(repo):
        where = f"docs/internals.md:{line}"
        code = CODE.findall(text)
        named = [word for word in code if "/" in word] + [
            path for path in PATH.findall(INLINE_CODE.sub(" ", text))
            if path.split("/")[0] in roots(repo)]
        found: list[Path] = []
        for path in named:
            if PLACEHOLDER.search(path):
                continue
            bases = [repo, repo / "sparkrack", *(p for p in found if p.is_dir())]
            there = [base / path for base in bases if (base / path).exists()]
            if there:
                found.append(there[0])
            else:
                problems.append(f"{where}: {path}: no such file or folder")
        for name in code:
            if not NAME.fullmatch(name):
                continue
            stem, *chain = name.split(".")
            modules = modules_named(stem, [p for p in found if p.is_file()],
                                    [p for p in found if p.is_dir()], repo)
            if len(modules) != 1:
                problems.append(f"{where}: {name}: {len(modules)} modules named {stem}.py "
                                "(name its path in the look-up)")
            elif not defines(modules.pop(), chain):
                problems.append(f"{where}: {name}: not defined in {stem}.py")
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


def test_every_path_and_name_of_the_lookups_is_there():
    assert broken_lookups(REPO) == []


def test_a_lookup_that_leads_nowhere_is_found(tmp_path):
    watchdog = tmp_path / "sparkrack" / "watchdog"
    watchdog.mkdir(parents=True)
    (watchdog / "service.py").write_text(
        "class Watchdog:\n    def _consider(self):\n        pass\n\n\nLIMIT = 3\n")
    (watchdog / "gpuwatch.py").write_text("def judge():\n    pass\n")
    (tmp_path / "sparkrack" / "status").mkdir()
    (tmp_path / "sparkrack" / "status" / "service.py").write_text("x = 1\n")
    (tmp_path / "roles" / "clock_cap" / "templates").mkdir(parents=True)
    (tmp_path / "roles" / "clock_cap" / "templates" / "unit.j2").write_text("")
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "internals.md").write_text(
        "# Internals\n\nWhere to look first:\n\n"
        "- **a cycle** in `sparkrack/watchdog/`: `gpuwatch.judge`, then\n"
        "  `service._to_cycle` and `latched.cycle_latched`, not `service.Watchdog.gone`;\n"
        "  `service.Watchdog._consider` and `service.LIMIT` are there;\n"
        "- **the cap** in `roles/clock_cap/` (`templates/unit.j2`, not `templates/gone.j2`),\n"
        "  and sparkrack/watchdog/capguard.py; `service.LIMIT` is two modules here.\n"
        "\n```\n- `sparkrack/not/a/lookup.py`\n```\n")
    assert broken_lookups(tmp_path) == [
        "docs/internals.md:5: service._to_cycle: not defined in service.py",
        "docs/internals.md:5: latched.cycle_latched: 0 modules named latched.py (name its "
        "path in the look-up)",
        "docs/internals.md:5: service.Watchdog.gone: not defined in service.py",
        "docs/internals.md:8: templates/gone.j2: no such file or folder",
        "docs/internals.md:8: sparkrack/watchdog/capguard.py: no such file or folder",
        "docs/internals.md:8: service.LIMIT: 2 modules named service.py (name its path in "
        "the look-up)",
    ]
