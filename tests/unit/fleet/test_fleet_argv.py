"""Quoting argv for the remote shell: literal, whatever the arguments hold; secrets starred."""

from __future__ import annotations

import subprocess

import pytest

from sparkrack.fleet import Secret, quote_argv, redact_argv, sh
from sparkrack.fleet.argv import redact_text, secret_values

NASTY = ["plain", "two words", "semi;colon", "$(touch /tmp/pwned)", "`id`", "$HOME", "${x:-y}",
         "it's", 'say "hi"', "back\\slash", "new\nline", "tab\there", "*", "?", "~", "-n",
         "", "'", '"', "a'b\"c", "&& rm -rf /", "| cat", "> /dev/null", "#comment", "!", "é ✓"]


def through_sh(line: str) -> list[str]:
    """The arguments that a local `sh -c line` gives printf, one per NUL-ended record."""
    out = subprocess.run(["sh", "-c", line], capture_output=True, check=True).stdout
    return out.decode().split("\0")[:-1]


def test_every_argument_reaches_the_command_literally():
    assert through_sh(quote_argv(["printf", "%s\\0", *NASTY])) == NASTY


def test_sh_passes_values_as_positional_parameters_not_as_script():
    script = 'for a in "$@"; do printf "%s\\0" "$a"; done'
    argv = sh(script, *NASTY)
    assert argv[:4] == ["sh", "-c", script, "sh"]
    assert through_sh(quote_argv(argv)) == NASTY


def test_secrets_are_sent_but_never_shown():
    token = Secret("s3cr3t; $(x)")
    argv = ["docker", "login", "-p", token, "registry"]
    assert through_sh(quote_argv(["printf", "%s\\0", token])) == ["s3cr3t; $(x)"]
    assert redact_argv(argv) == "docker login -p *** registry"
    for shown in (str(token), repr(token), f"{token}", repr(argv)):
        assert "s3cr3t" not in shown
    assert secret_values([argv, ["x", Secret("other")]]) == ("s3cr3t; $(x)", "other")
    assert redact_text("denied for s3cr3t; $(x)!", ["s3cr3t; $(x)"]) == "denied for ***!"


@pytest.mark.parametrize("argv, error", [
    ([], ValueError),
    ("rm -rf /", ValueError),
    (["echo", "nul\0byte"], ValueError),
    (["echo", 3], TypeError),
    (["echo", b"bytes"], TypeError),
])
def test_bad_commands_are_refused(argv: object, error: type[Exception]):
    with pytest.raises(error):
        quote_argv(argv)
