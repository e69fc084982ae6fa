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

from sparkrack.inventory.pdu import ENV_PREFIX as PDU_ENV_PREFIX

MASK = "***"
SECRET_NAME = re.compile(r"token|secret|passw|api_?key|credential|auth", re.I)
SECRET_ENV = ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN")  # and every PDU_ENV_PREFIX variable
MIN_SECRET_CHARS = 4  # a shorter value of those would mask common words
_WORD = r"""(?:'[^']*'|"[^"]*"|[^\s'";&|]+)"""  # a value: quoted, or up to a space or ;&|
_UNMASKED = r"(?!\*\*\*(?:[\s'\";&|]|$))"  # a value not masked yet (repeated rules)
_PASS = r"(?:[\w-]*-)?pass(?:w(?:or)?d|phrase)?(?:-[\w-]*)?"  # --pass, --db-password-file


@dataclass(frozen=True)
class Rule:
    """One kind of secret: how docs/security.md lists it, and where its value is in text
    (the part before the value is the match's group 1, kept). A repeated rule is applied
    until nothing changes: one command's several options (`snmpset -A a -X b`)."""

    says: str
    pattern: re.Pattern
    repeated: bool = False

    def apply(self, text: str) -> str:
        while True:
            masked = self.pattern.sub(lambda m: m.group(1) + MASK, text)
            if not self.repeated or masked == text:
                return masked
            text = masked


def _options_of(command: str, options: str, attached: bool = True) -> re.Pattern:
    """The values of options (a regex alternation) given to command, later in its line;
    attached: the value may follow the letter at once (getopt's `-Pvalue`)."""
    return re.compile(r"(\b" + command + r"\b[^;&|\n]*?\s-(?:" + options + r")"
                      + (r"\s*" if attached else r"\s+") + ")" + _UNMASKED + _WORD)


RULES = (
    Rule("openssl's `-pass pass:VALUE`, `-passin pass:VALUE` and `-passout pass:VALUE`",
         re.compile(r"""(?<!\S)(-pass(?:in|out)?\s+(['"])?pass:)(?(2)[^'"]*|"""
                    + _WORD + ")")),
    Rule("`-p VALUE` and `-pVALUE` (`mysql -pS3cret`)",
         re.compile(r"""(?<!\S)(-p(?:\s+|=)?)(?![\s*])(?!ass(?:in|out)?\s+['"]?(?:pass|env|"""
                    r"file|fd|stdin)\b)" + _WORD)),
    Rule("the value of `--pass`, `--password`, `--passphrase` and of any flag naming a "
         "token, secret, API key or credential (`--hf-token X`, `--api-key=X`)",
         re.compile(r"(?<!\S)(--(?:" + _PASS + r"|[\w-]*(?:token|secret|api[-_]?key|credential)"
                    r"[\w-]*)(?:\s+|=))" + _WORD, re.I)),
    Rule("`redis-cli -a VALUE`",
         re.compile(r"(\bredis-cli\b[^;&|\n]*?\s-a\s+)" + _WORD)),
    Rule("net-snmp's `-A VALUE` and `-X VALUE` (pass phrases), `-3m`, `-3M`, `-3k`, `-3K` "
         "(keys) and `-c VALUE` (community) after any `snmp...` command (`snmpset`, "
         "`snmpwalk`)", _options_of(r"snmp\w*", r"[AXc]|3[mMkK]"), repeated=True),
    Rule("`ipmitool -P VALUE` (password), `-k VALUE` and `-y VALUE` (Kg key)",
         _options_of("ipmitool", "[Pky]"), repeated=True),
    Rule("`openssl -k VALUE` (password) and `-K VALUE` (key)",
         _options_of("openssl", "[kK]", attached=False), repeated=True),
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
    Rule("a quoted value under a secret-looking key in JSON or a Python mapping "
         "(`\"password\": \"***\"`, `'api_key': '***'`)",
         re.compile(r"""((["'])[\w-]*(?:passw|secret|token|api_?key|credential|auth|pwd|"""
                    r"""private_?key)[\w-]*\2\s*:\s*(["']))(?:(?!\3)[^\\]|\\.)*(?=\3)""",
                    re.I)),
    Rule("the password in a URL, up to the last `@` before the host: "
         "`https://user:***@host` (`https://user:p@ss@host` too)",
         re.compile(r"""\b([a-z][a-z0-9+.-]*://[^/\s:@'"]*:)[^\s/'"]+(?=@)""", re.I)),
    Rule("the body of a PEM private key (`-----BEGIN ... PRIVATE KEY-----`), up to its "
         "END line or the end of the text",
         re.compile(r"(-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----)(?:(?!-----END )[\s\S])+")),
    Rule("tokens by their shape: Hugging Face `hf_...`, GitHub `ghp_...`, `gho_`, `ghu_`, "
         "`ghs_`, `ghr_` and `github_pat_...`, GitLab `glpat-...` and `glrt-...`, "
         "Anthropic `sk-ant-...`",
         re.compile(r"()\b(?:hf_[A-Za-z0-9]{16,}|gh[pousr]_[A-Za-z0-9]{20,}|"
                    r"github_pat_\w{20,}|gl(?:pat|rt)-[\w.-]{20,}|sk-ant-[\w-]{20,})")),
)


def secret_values(environ: Mapping[str, str] = os.environ) -> list[str]:
    """The values masked wherever they appear: $HF_TOKEN's, $HUGGING_FACE_HUB_TOKEN's and
    every SPARKRACK_PDU_* variable's (the only ones an inventory's pdu: may name) but a
    user name's (`*_USER`: SNMPv3 sends it in the clear, and a common word such as the
    rehearsal's `sparkrack` masked everywhere would blank the records), the longest first
    (one may hold another)."""
    values = {value for name, value in environ.items()
              if (name in SECRET_ENV or name.startswith(PDU_ENV_PREFIX)
                  and not name.endswith("_USER")) and len(value) >= MIN_SECRET_CHARS}
    return sorted(values, key=len, reverse=True)


def mask_text(text: str) -> str:
    """text with secrets replaced by ***: the values of secret_values() wherever they
    appear, then each rule of RULES."""
    for value in secret_values():
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
