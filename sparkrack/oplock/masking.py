"""Secrets masked (`***`) before anything is recorded: the one table of rules (RULES),
applied in order by mask_text, and the names of arguments whose values are masked whole
(SECRET_NAME). docs/security.md lists each rule by its `says` (a test holds them equal).
The masking errs on the safe side: `-p` is masked after any command (`mkdir -p ***`).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass

MASK = "***"
SECRET_NAME = re.compile(r"token|secret|passw|api_?key|credential|auth", re.I)
SECRET_ENV = ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN")
_WORD = r"""(?:'[^']*'|"[^"]*"|[^\s'";&|]+)"""  # a value: quoted, or up to a space or ;&|
_PASS = r"(?:[\w-]*-)?pass(?:w(?:or)?d|phrase)?(?:-[\w-]*)?"  # --pass, --db-password-file


@dataclass(frozen=True)
class Rule:
    """One kind of secret: how docs/security.md lists it, and where its value is in text
    (the part before the value is the match's group 1, kept)."""

    says: str
    pattern: re.Pattern

    def apply(self, text: str) -> str:
        return self.pattern.sub(lambda m: m.group(1) + MASK, text)


RULES = (
    Rule("`-p VALUE` and `-pVALUE` (`mysql -pS3cret`)",
         re.compile(r"(?<!\S)(-p(?:\s+|=)?)(?![\s*])" + _WORD)),
    Rule("the value of `--pass`, `--password`, `--passphrase` and of any flag naming a "
         "token, secret, API key or credential (`--hf-token X`, `--api-key=X`)",
         re.compile(r"(?<!\S)(--(?:" + _PASS + r"|[\w-]*(?:token|secret|api[-_]?key|credential)"
                    r"[\w-]*)(?:\s+|=))" + _WORD, re.I)),
    Rule("`redis-cli -a VALUE`",
         re.compile(r"(\bredis-cli\b[^;&|\n]*?\s-a\s+)" + _WORD)),
    Rule("the password of `-u USER:PASSWORD`, `--user USER:PASSWORD`, `-U` and "
         "`--proxy-user` (curl)",
         re.compile(r"""(?<!\S)((?:-u|-U|--user|--proxy-user)(?:\s+|=)?['"]?[^\s:'"]*:)"""
                    r"""[^\s'"]+""")),
    Rule("`NAME=VALUE` where NAME holds KEY, TOKEN, SECRET, PASS, PWD or AUTH (`HF_TOKEN=`, "
         "`PGPASSWORD=`, `MYSQL_PWD=`, `REDISCLI_AUTH=`, `AWS_SECRET_ACCESS_KEY=`)",
         re.compile(r"\b(\w*(?:key|token|secret|pass|pwd|auth)\w*=)" + _WORD, re.I)),
    Rule("`aws_secret_access_key VALUE` and `aws_session_token VALUE` (`aws configure set`)",
         re.compile(r"\b((?:aws_secret_access_key|aws_session_token)\s+)" + _WORD, re.I)),
    Rule("`Authorization: Bearer|Basic|token VALUE`, and any `Bearer VALUE`",
         re.compile(r"\b((?:authorization:\s*(?:bearer|basic|token)?|bearer)\s*)"
                    r"""[^\s'";&|]+""", re.I)),
    Rule("the value of a header whose name holds key, token, secret, auth, pass or cookie "
         "(`X-Api-Key: VALUE`, `X-Auth-Token: VALUE`, `Cookie: VALUE`)",
         re.compile(r"""\b((?![\w-]*authorization:)[\w-]*(?:key|token|secret|auth|pass|"""
                    r"""cookie)[\w-]*:[ \t]*)[^\s'";&|]+""", re.I)),
    Rule("the password in a URL: `https://user:***@host`",
         re.compile(r"""\b([a-z][a-z0-9+.-]*://[^/\s:@'"]*:)[^@\s/'"]+(?=@)""", re.I)),
    Rule("tokens by their shape: Hugging Face `hf_...`, GitHub `ghp_...`, `gho_`, `ghu_`, "
         "`ghs_`, `ghr_` and `github_pat_...`",
         re.compile(r"()\b(?:hf_[A-Za-z0-9]{16,}|gh[pousr]_[A-Za-z0-9]{20,}|"
                    r"github_pat_\w{20,})\b")),
)


def mask_text(text: str) -> str:
    """text with secrets replaced by ***: the values of $HF_TOKEN and
    $HUGGING_FACE_HUB_TOKEN wherever they appear, then each rule of RULES."""
    for name in SECRET_ENV:
        value = os.environ.get(name)
        if value and len(value) >= 4:
            text = text.replace(value, MASK)
    for rule in RULES:
        text = rule.apply(text)
    return text


def mask(value, key: str = ""):
    """value with secrets masked: any value under a secret-looking key, tokens in text."""
    if key and SECRET_NAME.search(key) and value not in (None, False, "", [], ()):
        return MASK
    if isinstance(value, str):
        return mask_text(value)
    if isinstance(value, Mapping):
        return {k: mask(v, str(k)) for k, v in value.items()}
    if isinstance(value, (list, tuple, set)):
        return [mask(v, key) for v in value]
    if value is None or isinstance(value, (bool, int, float)):
        return value
    return mask_text(str(value))
