"""The engine versions the rehearsal's stub images come in: the pinned ones, and one made-up
next version of each engine to rehearse an upgrade with, each carrying what
`engines.learn` reads in a real image (docs/rehearsal.md#the-stub-images).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from sparkrack.rehearsal.stub.cli import PINNED, SHIPPED_OPTIONS

OPTIONS_DIR = Path(SHIPPED_OPTIONS)


@dataclass(frozen=True)
class StubVersion:
    """One engine version a stub image can be: the pinned table, or it with changes."""

    engine: str
    version: str
    base: str  # the pinned version it derives from (itself for a pinned one)
    removed: tuple[str, ...] = ()
    renamed: dict[str, str] = field(default_factory=dict)  # old name -> new name

    def table(self) -> str:
        """The version's option list, in the tables' format."""
        base = (OPTIONS_DIR / f"{self.engine}-{self.base}.txt").read_text(encoding="utf-8")
        if self.version == self.base:
            return base
        out = [f"# {self.engine} {self.version}: the sparkrack rehearsal's stub of a next "
               f"release ({self.base} with {', '.join(self.removed)} removed and "
               + ", ".join(f"{a} renamed {b}" for a, b in self.renamed.items()) + ")."]
        for line in base.splitlines():
            words = line.split()
            if line.startswith("#: version "):
                out.append(f"#: version {self.version}")
            elif line.startswith("#"):
                if line.startswith("#:"):
                    out.append(line)
            elif words[0] in self.removed or (len(words) > 2 and words[2] in self.removed):
                continue
            else:
                out.append(" ".join(self.renamed.get(word, word) for word in words))
        return "\n".join(out) + "\n"


VERSIONS = {
    ("sglang", "0.5.22"): StubVersion("sglang", "0.5.22", "0.5.22"),
    ("vllm", "0.33.0"): StubVersion("vllm", "0.33.0", "0.33.0"),
    ("sglang", "0.5.23"): StubVersion(
        "sglang", "0.5.23", "0.5.22", removed=("--cuda-graph-max-bs-decode",),
        renamed={"--schedule-conservativeness": "--schedule-conservative-factor"}),
    ("vllm", "0.34.0"): StubVersion(
        "vllm", "0.34.0", "0.33.0", removed=("--disable-log-stats",),
        renamed={"--block-size": "--kv-block-size"}),
}


def stub_version(engine: str, ref: str) -> StubVersion | None:
    """The stub version ref's tag names (the pinned one when the tag names none), or None
    when the rehearsal has no stub of the version it names."""
    tag = ref.split("@", 1)[0].rpartition(":")[2]
    for (name, version), stub in VERSIONS.items():
        if name == engine and re.match(rf"v?{re.escape(version)}(?![0-9.])", tag):
            return stub
    return None if re.match(r"v?\d+\.\d+", tag) else VERSIONS[(engine, PINNED[engine])]


def known(engine: str) -> list[str]:
    """The versions the rehearsal has stubs of."""
    return [version for name, version in VERSIONS if name == engine]


def parser_sources(stub: StubVersion) -> dict[str, str]:
    """{path under site-packages: text}: the package's metadata and its parser, written in
    the real engine's layout from the version's option list."""
    groups: list[tuple[list[str], str]] = []
    for line in stub.table().splitlines():
        words = line.split()
        if not words or line.startswith("#"):
            continue
        if len(words) == 3 and groups and groups[-1][0][0] == words[2]:
            groups[-1][0].append(words[0])
        else:
            groups.append(([words[0]], words[1]))
    calls = [f"        parser.add_argument({', '.join(map(repr, names))}"
             + {"none": ', action="store_true")', "optional": ', nargs="?")',
                "value": ")"}[takes] for names, takes in groups]
    body = "\n".join(calls)
    name, version = stub.engine, stub.version
    files = {f"{name}-{version}.dist-info/METADATA":
             f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
             "Summary: sparkrack rehearsal stub\n",
             f"{name}-{version}.dist-info/INSTALLER": "sparkrack-stubimage\n"}
    doc = f'"""{name} {version} (sparkrack rehearsal stub): the command line\'s options."""\n\n'
    if name == "sglang":
        files["sglang/srt/__init__.py"] = ""
        files["sglang/srt/server_args.py"] = (
            f"{doc}_INPUT_NAMESPACES = []\n\n\nclass ServerArgs:\n    @staticmethod\n"
            f"    def add_cli_args(parser):\n{body}\n")
    else:
        files["vllm/__init__.py"] = f'__version__ = "{version}"\n'
        for package in ("vllm/entrypoints", "vllm/entrypoints/common", "vllm/engine"):
            files[f"{package}/__init__.py"] = ""
        files["vllm/entrypoints/common/cli_args.py"] = (
            f"{doc}def make_arg_parser(parser):\n{body.replace('        ', '    ')}\n"
            "    return parser\n")
        files["vllm/engine/arg_utils.py"] = (
            f"{doc}class EngineArgs:\n    @staticmethod\n    def add_cli_args(parser):\n"
            "        return parser\n\n\nclass AsyncEngineArgs(EngineArgs):\n"
            "    @staticmethod\n    def add_cli_args(parser):\n        return parser\n")
    return files


def write_parser_sources(stub: StubVersion, root: Path) -> None:
    """parser_sources(stub) as files under root (a site-packages folder)."""
    for path, text in parser_sources(stub).items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text, encoding="utf-8")
