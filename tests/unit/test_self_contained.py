"""The repository stands on its own: no tracked file points to the private notes folder the
project started from (it sat beside the checkout; users who clone do not have it). Field
knowledge lives in docs/field-notes.md."""

import re
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
# Spelled in pieces, so that this file does not match itself.
_PRIVATE = "sha" + "red"
POINTERS = re.compile(
    rf"\.\./{_PRIVATE}\b"                       # a path beside the checkout
    rf"|/work/{_PRIVATE}\b"                     # the folder's absolute path
    rf"|\bparent\s*/\s*[\"']{_PRIVATE}[\"']"    # REPO.parent / "<that folder>" in Python
    rf"|\b{_PRIVATE}/(?:notes|seed)\b")         # its subfolders, named without the ../


def tracked_files(repo: Path) -> list[Path]:
    """The files git tracks in repo; every file outside .git when repo is not a git
    checkout (an unpacked archive)."""
    try:
        out = subprocess.run(["git", "-C", str(repo), "ls-files", "-z"], check=True,
                             capture_output=True, timeout=30).stdout
    except (OSError, subprocess.CalledProcessError):
        return [path for path in repo.rglob("*")
                if path.is_file() and ".git" not in path.relative_to(repo).parts]
    return [repo / name for name in out.decode().split("\0") if name]


def pointers_in(repo: Path) -> list[str]:
    """`file:line: text` for every line of a tracked file that points to the private folder."""
    found = []
    for path in tracked_files(repo):
        if not path.is_file():  # deleted in the worktree, not yet committed
            continue
        text = path.read_bytes().decode("utf-8", errors="replace")
        for number, line in enumerate(text.splitlines(), 1):
            if POINTERS.search(line):
                found.append(f"{path.relative_to(repo)}:{number}: {line.strip()}")
    return found


def test_no_tracked_file_points_outside_the_repo():
    assert pointers_in(REPO) == []


@pytest.mark.parametrize("line", [
    f"see ../{_PRIVATE}/notes/field-facts.md",
    f"seed: ../{_PRIVATE}/seed/report.txt",
    f"cat /work/{_PRIVATE}/seed/x.txt",
    f'SEED = REPO.parent / "{_PRIVATE}" / "seed" / "x.txt"',
    f"the samples in {_PRIVATE}/notes",
])
def test_a_pointer_is_found_in_any_tracked_file(tmp_path, line):
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "notes.md").write_text(f"# Notes\n\n{line}\n")
    (tmp_path / "untracked.md").write_text(line + "\n")
    subprocess.run(["git", "-C", str(tmp_path), "add", "docs/notes.md"], check=True)
    assert pointers_in(tmp_path) == [f"docs/notes.md:3: {line}"]


@pytest.mark.parametrize("line", [
    "ipc_mode: str = 'host'  # shared memory between the engine's processes",
    "the shared libraries `ldd` names",
    "shared = {**group.settings}",
    "docs/field-notes.md",
])
def test_ordinary_uses_of_the_word_are_not_pointers(line):
    assert not POINTERS.search(line)
