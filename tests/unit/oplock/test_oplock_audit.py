"""The audit log's pure parts: masking, the command line, pairing, filters, --since."""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path

import pytest

from sparkrack.oplock import audit
from sparkrack.oplock.identity import inventory_digest
from sparkrack.oplock.remote import parse_reply


def test_secrets_are_masked_by_name_and_by_value(monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "s3cr3t-value")
    args = {"engine": "sglang", "hf_token": "abc", "api_key": None, "password": "pw",
            "reason": "using s3cr3t-value and hf_ABCDEFGHIJKLMNOPQRSTU", "waive": ["mtu=ok"],
            "fingerprint": "SHA256:public"}
    assert audit.mask(args) == {
        "engine": "sglang", "hf_token": "***", "api_key": None, "password": "***",
        "reason": "using *** and ***", "waive": ["mtu=ok"], "fingerprint": "SHA256:public"}
    assert audit.command_line("onboard", {"name": "spark-09", "check": False, "yes": True,
                                          "waive": ["mtu=a b"], "hf_token": "abc"}) == \
        "onboard --name spark-09 --yes --waive 'mtu=a b' --hf-token '***'"


@pytest.mark.parametrize("typed, recorded", [
    ("docker login -u bot -p S3cret reg", "docker login -u bot -p *** reg"),
    ("mysql --password S3cret", "mysql --password ***"),
    ("tool --password=S3cret --client-secret 'a b' --api-key=k1",
     "tool --password=*** --client-secret *** --api-key=***"),
    ("curl -H 'Authorization: Bearer eyJ.x.y' http://h", "curl -H 'Authorization: Bearer ***' http://h"),
    ("curl -H 'Authorization: Basic dXNlcjpw'", "curl -H 'Authorization: Basic ***'"),
    ("HF_TOKEN=abc AWS_SECRET_ACCESS_KEY=k MY_SECRET='x y' API_KEY=z FOO=bar cmd",
     "HF_TOKEN=*** AWS_SECRET_ACCESS_KEY=*** MY_SECRET=*** API_KEY=*** FOO=bar cmd"),
    ("git clone https://bot:S3cret@git.example/x.git; ssh://root@h",
     "git clone https://bot:***@git.example/x.git; ssh://root@h"),
    # issue 46 item 14: none of these were masked
    ("PGPASSWORD=S3cret psql -h db", "PGPASSWORD=*** psql -h db"),
    ("MYSQL_PWD=S3cret REDISCLI_AUTH=S3cret x", "MYSQL_PWD=*** REDISCLI_AUTH=*** x"),
    ("mysql -u root -pS3cret db", "mysql -u root -p*** db"),
    ("redis-cli -h r -a S3cret ping; ls -a /", "redis-cli -h r -a *** ping; ls -a /"),
    ("redis-cli --pass S3cret get k", "redis-cli --pass *** get k"),
    ("curl -u bot:S3cret https://h", "curl -u bot:*** https://h"),
    ("curl --user 'bot:S3cret' -Ubot:S3cret h", "curl --user 'bot:***' -Ubot:*** h"),
    ("curl -H \"X-Api-Key: S3cret\" -H 'X-Auth-Token: S3cret' h",
     "curl -H \"X-Api-Key: ***\" -H 'X-Auth-Token: ***' h"),
    ("curl -H 'Cookie: session=S3cret' -H 'Accept: json' h",
     "curl -H 'Cookie: ***' -H 'Accept: json' h"),
    ("git push https://ghp_S3cretS3cretS3cretS3cret00@x ghp_S3cretS3cretS3cretS3cret00",
     "git push https://***@x ***"),
    ("gh auth login --with-token github_pat_S3cretS3cretS3cretS3cret_xx",
     "gh auth login --with-token ***"),
    ("aws configure set aws_secret_access_key S3cret && aws configure set "
     "aws_session_token S3cret", "aws configure set aws_secret_access_key *** && aws "
     "configure set aws_session_token ***"),
    # issue 53 item 3: none of these were masked whole
    ("snmpset -v3 -l authPriv -u ops -a SHA -A S3cretA -x AES -X 'S3cret X' pdu x i 3",
     "snmpset -v3 -l authPriv -u ops -a SHA -A *** -x AES -X *** pdu x i 3"),
    ("snmpwalk -v2c -c S3cret pdu; snmpget -v3 -3m 0xS3cret -3K 0xS3cret -AS3cret pdu",
     "snmpwalk -v2c -c *** pdu; snmpget -v3 -3m *** -3K *** -A*** pdu"),
    ("ipmitool -I lanplus -H bmc -U admin -P S3cret -y 53cre7 chassis power cycle",
     "ipmitool -I lanplus -H bmc -U admin -P *** -y *** chassis power cycle"),
    ("ipmitool -H bmc -PS3cret -k S3cret sel list", "ipmitool -H bmc -P*** -k *** sel list"),
    ("openssl enc -aes-256-cbc -k S3cret -in a -out b",
     "openssl enc -aes-256-cbc -k *** -in a -out b"),
    ("openssl pkcs12 -export -passout pass:S3cret -passin 'pass:S3cret x' -in a.pem",
     "openssl pkcs12 -export -passout pass:*** -passin 'pass:***' -in a.pem"),
    ("curl -d '{\"password\": \"S3cret\", \"user\": \"bob\", \"api_key\":\"S3\\\"cret\"}' h",
     "curl -d '{\"password\": \"***\", \"user\": \"bob\", \"api_key\":\"***\"}' h"),
    ("python3 -c \"db = {'db_password': 'S3cret'}\"", "python3 -c \"db = {'db_password': '***'}\""),
    ("git clone https://bot:p@ss@S3cret@git.example/x.git; ssh://root@h",
     "git clone https://bot:***@git.example/x.git; ssh://root@h"),
    ("glab auth login --hostname g glpat-S3cretS3cretS3cret_xx.01.abc",
     "glab auth login --hostname g ***"),
    ("claude -p hi ANTHROPIC=sk-ant-api03-S3cretS3cretS3cret-S3cret x",
     "claude -p *** ANTHROPIC=*** x"),
    ("printf '-----BEGIN OPENSSH PRIVATE KEY-----\\nb3BlS3cret\\n-----END OPENSSH PRIVATE "
     "KEY-----\\n' > k", "printf '-----BEGIN OPENSSH PRIVATE KEY-----***-----END OPENSSH "
     "PRIVATE KEY-----\\n' > k"),
    ("-----BEGIN EC PRIVATE KEY-----\nMHcCAQEEIS3cret\nMore", "-----BEGIN EC PRIVATE KEY-----***"),
])
def test_secrets_in_command_lines_are_masked(typed, recorded):
    """Issue 23 item 3: what `invoke run --shell` records never holds the secret."""
    assert audit.mask_text(typed) == recorded
    line = audit.command_line("run", {"argv": f"sh -c {typed}"})
    assert "S3cret" not in line and "eyJ" not in line and "dXNlcjpw" not in line


@pytest.mark.parametrize("typed", [
    "docker ps -a --filter label=sparkrack.engine", "ls -a /models",
    "journalctl -u sparkrack-watchdog --since 10:00", "invoke up sglang --profile 512k",
    "docker run -u 1000 img", "ip -4 addr show dev enp1s0f0np0",
    "openssl req -new -keyout key.pem -out req.pem", "openssl pkcs12 -passin env:PW -in a",
    "ipmitool -I lanplus -H bmc -U admin -E chassis status", "ls -c /x; sh -c 'uptime'",
    "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----",
    'echo \'{"user": "bob", "host": "h"}\'',
])
def test_ordinary_command_lines_are_recorded_as_typed(typed):
    assert audit.mask_text(typed) == typed


def test_the_pdus_keys_are_masked_wherever_they_appear(monkeypatch):
    """Issue 53 item 3: the values of the variables `pdu:` names (SPARKRACK_PDU_*, the only
    names it may give) were recorded as typed; a user name (*_USER) is not a secret."""
    monkeypatch.setenv("SPARKRACK_PDU_AUTH_KEY", "auth-S3cret-1")
    monkeypatch.setenv("SPARKRACK_PDU_LAB_PRIV", "priv-S3cret-22")
    monkeypatch.setenv("SPARKRACK_PDU_USER", "sparkrack")
    typed = ("snmpget -l authPriv -u sparkrack -a SHA auth-S3cret-1 priv-S3cret-22 "
             "label=sparkrack.engine")
    assert audit.mask_text(typed) == ("snmpget -l authPriv -u sparkrack -a SHA *** *** "
                                      "label=sparkrack.engine")
    record = audit.mask({"reason": "key priv-S3cret-22 leaked", "waive": ["auth-S3cret-1"]})
    assert record == {"reason": "key *** leaked", "waive": ["***"]}


def test_the_security_doc_lists_exactly_what_is_masked():
    """docs/security.md's list of what the audit log masks is masking.RULES, one bullet a
    rule in order, after the arguments by name and the environment's tokens."""
    from sparkrack.oplock.masking import RULES

    text = (Path(__file__).resolve().parents[3] / "docs" / "security.md").read_text()
    bullets: list[str] = []
    for line in text.split("**Masking.**", 1)[1].split("\n- **", 1)[0].splitlines():
        if line.startswith("  - "):
            bullets.append(line[4:])
        elif line.startswith("    ") and bullets:
            bullets[-1] += " " + line.strip()
    assert bullets[2:] == [rule.says + ";" for rule in RULES[:-1]] + [RULES[-1].says + "."]


def test_merge_pairs_start_and_end_and_flags_the_unfinished():
    lines = [
        {"id": "a", "phase": "start", "task": "up", "time": "t1", "ts": 1.0},
        {"id": "b", "phase": "start", "task": "provision", "time": "t2", "ts": 2.0},
        {"id": "c", "phase": "end", "task": "up", "time": "t3", "ts": 3.0, "outcome": "refused"},
        {"id": "a", "phase": "end", "time": "t4", "ts": 4.0, "outcome": "ok", "duration_s": 3.0},
        {"id": "d", "phase": "start", "task": "roll", "time": "t5", "ts": 5.0},
    ]
    text = "\n".join(json.dumps(r) for r in lines) + "\nnot json\n"
    entries = audit.merge(audit.parse_lines(text), running=["d"])
    assert [(e["id"], e["outcome"], e["time"], e.get("ended")) for e in entries] == [
        ("a", "ok", "t1", "t4"), ("b", "interrupted", "t2", None), ("c", "refused", "t3", None),
        ("d", "running", "t5", None)]
    assert "no end record" in entries[1]["error"]
    assert [e["id"] for e in audit.select(entries, since=2.5)] == ["c", "d"]
    assert [e["id"] for e in audit.select(entries, task="up")] == ["a", "c"]


def test_note_merges_lists_and_keeps_the_rest():
    record = audit.Record("x", {"task": "up", "command": "up"})
    with audit.active(record):
        audit.note(nodes=["spark-02"], deployment="d1", waivers={"r": "why"})
        audit.note(nodes=["spark-01", "spark-02"], overrides=["o"], rebooted=["spark-01"])
        audit.note(overrides=["o"])
    audit.note(nodes=["ignored"])  # no active record: nothing
    end = record.end("ok")
    assert end["changed"] == {"nodes": ["spark-01", "spark-02"], "deployment": "d1",
                              "rebooted": ["spark-01"]}
    assert (end["waivers"], end["overrides"]) == ({"r": "why"}, ["o"])
    assert audit.changed_summary(end["changed"]) == \
        "deployment d1; nodes spark-01, spark-02; rebooted spark-01"


def test_local_copy_appends_one_chained_line_per_record(tmp_path, monkeypatch):
    monkeypatch.setenv("SPARKRACK_STATE_DIR", str(tmp_path / "state"))
    assert audit.append_local('{"id":"a"}') is None
    assert audit.append_local('{"id":"b"}', '{"id":"c"}') is None
    path = tmp_path / "state" / "audit.jsonl"
    text = path.read_text()
    assert [r["id"] for r in audit.parse_lines(text)] == ["a", "b", "c"]
    first, second, third = text.splitlines()
    assert first == '{{"prev":"{}","id":"a"}}'.format(hashlib.sha256(b"").hexdigest())
    assert json.loads(third)["prev"] == hashlib.sha256(second.encode()).hexdigest()
    assert audit.verify_chain(text).ok
    assert path.stat().st_mode & 0o777 == 0o600


def _log(*ids: str) -> list[str]:
    lines, previous = [], ""
    for token in ids:
        previous = audit.chain(previous, json.dumps({"id": token}))
        lines.append(previous)
    return lines


def test_verify_names_the_first_line_edited_inserted_or_removed():
    """Issue 23 item 11: any change to a line but the last breaks the chain at a line
    --verify names."""
    lines = _log("a", "b", "c", "d")
    assert audit.verify_chain("\n".join(lines) + "\n") == audit.ChainCheck(4, 0)
    edited = [*lines]
    edited[1] = edited[1].replace('"b"', '"B"')
    removed = [lines[0], *lines[2:]]
    inserted = [*lines[:2], '{"id":"forged","phase":"end"}', *lines[2:]]
    forged = [*lines[:2], audit.chain("not the line before", '{"id":"x"}'), *lines[2:]]
    cut_head = lines[1:]
    for changed, line in ((edited, 3), (removed, 2), (inserted, 3), (forged, 3), (cut_head, 1)):
        checked = audit.verify_chain("\n".join(changed) + "\n")
        assert not checked.ok and checked.broken == line, (changed, checked)
        assert checked.describe("spark-01").startswith(f"audit log (spark-01): line {line} ")


def test_verify_starts_at_the_first_chained_line_of_an_older_log():
    legacy = ['{"id":"old1"}', '{"id":"old2"}']
    chained = [audit.chain(legacy[-1], '{"id":"new"}')]
    checked = audit.verify_chain("\n".join(legacy + chained) + "\n")
    assert checked.ok and (checked.lines, checked.unchained) == (3, 2)
    assert "lines 1-2 were written before the chain and not verified" in checked.describe("x")
    only_old = audit.verify_chain("\n".join(legacy) + "\n")
    assert not only_old.ok and only_old.broken is None
    assert "none of its 2 lines is chained" in only_old.describe("x")
    assert audit.verify_chain("").ok
    edited_old = audit.verify_chain("\n".join(['{"id":"OLD1"}', legacy[1]] + chained) + "\n")
    assert edited_old.ok  # before the chain: not verifiable (said by describe)
    edited_last_old = audit.verify_chain("\n".join([legacy[0], '{"id":"x"}'] + chained))
    assert edited_last_old.broken == 3


class _Fleet:
    """Records what one lock operation sends: its argv and its stdin."""

    def __init__(self):
        self.sent = []

    def run(self, commands, timeout=None, stdin=None):
        from sparkrack.fleet.results import NodeResult

        self.sent += [(argv, stdin) for argv in commands.values()]
        return {node: NodeResult(node, "ok", 0, "NOW 1\nAPPENDED\n", "") for node in commands}


def test_audit_lines_travel_on_stdin_never_in_argv():
    """Issue 23 item 3: `ps` on the head shows argv to every user: no audit line there."""
    from sparkrack.oplock.lock import call

    fleet = _Fleet()
    line = json.dumps({"id": "a", "command": "run --argv 'docker login -p ***'"})
    assert call(fleet, "spark-01", "append", lines=[line]).status == "APPENDED"
    [(argv, stdin)] = fleet.sent
    assert not any("docker login" in word for word in argv)
    assert stdin == (line + "\n").encode()


def test_inventory_digest_covers_the_files_and_skips_nested_inventories(tmp_path: Path):
    (tmp_path / "group_vars").mkdir()
    (tmp_path / "hosts.yml").write_text("a")
    (tmp_path / "group_vars" / "all.yml").write_text("b")
    (tmp_path / "rehearsal").mkdir()
    (tmp_path / "rehearsal" / "hosts.yml").write_text("c")
    first = inventory_digest(tmp_path)
    (tmp_path / "rehearsal" / "hosts.yml").write_text("changed")
    (tmp_path / ".swp").write_text("editor")
    assert inventory_digest(tmp_path) == first
    (tmp_path / "group_vars" / "all.yml").write_text("B")
    assert inventory_digest(tmp_path) != first


def test_the_lock_scripts_replies_parse():
    now = time.time()
    holder = {"since": now - 75, "token": "ab" * 16, "operator": "bob@ci", "pid": 7,
              "task": "up", "command": "up --engine vllm"}
    reply = parse_reply(f"NOW {now:.0f}\nHOLDER 3 {json.dumps(holder)}\nHELD\n")
    assert reply.status == "HELD" and reply.holder.operator == "bob@ci"
    assert reply.holder.describe(now).startswith("bob@ci (pid 7) running `up --engine vllm` since ")
    assert "(75 s ago; last heartbeat 3 s ago)" in reply.holder.describe(now)
    taken = parse_reply(f"NOW 100\nSTALE 31 {json.dumps(holder)}\nTAKEN\n")
    assert (taken.status, taken.stale.age, taken.holder) == ("TAKEN", 31.0, None)
    log = parse_reply("NOW 100\nFREE\nAUDIT\n{\"id\":\"a\"}\nHELD\n")
    assert (log.status, log.audit) == ("FREE", '{"id":"a"}\nHELD\n')
    assert parse_reply("NOW 1\nERROR flock(1) is missing\n").error == "flock(1) is missing"
    assert parse_reply("").status == "ERROR"
