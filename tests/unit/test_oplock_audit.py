"""The audit log's pure parts: masking, the command line, pairing, filters, --since."""

from __future__ import annotations

import json
import time
from datetime import datetime
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


def test_since_takes_durations_and_dates():
    now = 1_000_000.0
    assert audit.parse_since("30m", now) == now - 1800
    assert audit.parse_since("2h", now) == now - 7200
    assert audit.parse_since("1.5d", now) == now - 1.5 * 86400
    assert audit.parse_since("2026-05-01") == datetime(2026, 5, 1).astimezone().timestamp()
    assert audit.parse_since("2026-05-01 14:00") == datetime(2026, 5, 1, 14).astimezone().timestamp()
    with pytest.raises(ValueError, match="give 30m"):
        audit.parse_since("last tuesday")


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


def test_local_copy_appends_one_line_per_record(tmp_path, monkeypatch):
    monkeypatch.setenv("SPARKRACK_STATE_DIR", str(tmp_path / "state"))
    assert audit.append_local('{"id":"a"}') is None
    assert audit.append_local('{"id":"b"}', '{"id":"c"}') is None
    assert (tmp_path / "state" / "audit.jsonl").read_text() == '{"id":"a"}\n{"id":"b"}\n{"id":"c"}\n'


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
