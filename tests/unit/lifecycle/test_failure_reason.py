"""A failed start in one or two lines (lifecycle/loglines.reason, start.rank_failed): the
rank, its node and the log line that says why, never the start banner that JSON-logging
engines (and the stubs) print first, with every argv word and variable."""

from __future__ import annotations

import json
import textwrap

from sparkrack.deployments.ranks import Rank
from sparkrack.lifecycle.start import rank_failed
from sparkrack.logs.lines import REASON_CHARS, reason

ARGV = ["python3", "-m", "sglang.launch_server", *[f"--flag-{i}" for i in range(40)]]
BANNER = json.dumps({"argv": ARGV, "cmdline": ARGV, "env": {f"VAR_{i}": "x" * 20 for i in range(20)},
                     "event": "start", "node": "spark-03", "rank": 2, "sparkrack_stub": "sglang"})
GLOO = ("[enforce fail at /pytorch/third_party/gloo/gloo/transport/tcp/device.cc:83] ifa != "
        "nullptr. Unable to find address for: enp1s0f0np0")
SGLANG_GLOO = [BANNER,
               "[2026-12-06 07:58:20 TP2] DSA indexer scratch budget SGLANG_DSA_MQA_LOGITS_FREE_"
               "MEM_FRACTION=0.01: bounded, block cap 249 MiB",
               "[2026-12-06 07:58:20 TP2] Init torch distributed begin.",
               f"[2026-12-06 07:58:20 TP2] [rank2]: RuntimeError: {GLOO}"]
CAUSE = "RuntimeError: ifa != nullptr. Unable to find address for: enp1s0f0np0"


def stamped(lines):
    return [f"2026-12-06T07:58:20.{i:09d}Z {line}" for i, line in enumerate(lines)]


def test_the_gloo_failure_is_its_exception_line_without_the_source_location():
    assert reason(SGLANG_GLOO) == CAUSE


def test_a_vllm_line_and_a_traceback_give_the_last_exception():
    lines = ["INFO 12-06 07:58:20 [rank4] Init torch distributed begin.",
             "Traceback (most recent call last):",
             '  File "/usr/lib/python3/dist-packages/torch/distributed/c10d.py", line 12, in init',
             "ERROR 12-06 07:58:21 [rank4] [rank4]: torch.distributed.DistBackendError: NCCL error "
             "in: ProcessGroupNCCL.cpp:3356, remote process exited",
             "ERROR 12-06 07:58:21 [rank4] ncclRemoteError: rank 3 on spark-04 closed its "
             "connection"]
    assert reason(lines) == "ncclRemoteError: rank 3 on spark-04 closed its connection"
    assert reason(lines[:4]).startswith("torch.distributed.DistBackendError: NCCL error in: ")


def test_an_engine_logging_json_gives_its_error_event_not_its_start_event():
    lines = [BANNER,
             json.dumps({"level": "info", "message": "loading weights"}),
             json.dumps({"level": "error", "message": "worker died",
                         "exception": "Traceback (most recent call last):\n  File x\n"
                                      "OSError: [Errno 28] No space left on device"}),
             json.dumps({"level": "info", "message": "shutting down"})]
    assert reason(lines) == "OSError: [Errno 28] No space left on device"
    assert reason([BANNER, json.dumps({"level": "ERROR", "msg": "bad --foo"}),
                   json.dumps({"msg": "bye"})]) == "bad --foo"


def test_without_an_error_line_the_last_line_but_never_the_banner():
    assert reason([BANNER, "loading", "NCCL WARN NET/IB : port is not active", "bye"]) \
        == "NCCL WARN NET/IB : port is not active"
    assert reason([BANNER, "loading 3/8"]) == "loading 3/8"
    assert reason([BANNER]) is None and reason([]) is None


def test_a_long_cause_is_one_line_and_controls_are_escaped():
    cause = reason(["ValueError: " + "x" * 1000 + "\x1b]52;c;AAAA\x07"])
    assert len(cause) == REASON_CHARS and cause.endswith("…") and "\x1b" not in cause
    assert reason(["RuntimeError: boom \x1b[2J"]) == "RuntimeError: boom \\x1b[2J"


def test_the_failed_rank_in_two_lines_at_80_columns_its_log_kept():
    rank = Rank(node="spark-03", rank=2, name="sparkrack-sglang-r2", engine="sglang",
                profile="512k", deployment="d", status="exited", exit_code=1, stop_timeout=10)
    failed = rank_failed(rank, stamped(SGLANG_GLOO))
    line = failed.line()
    assert line == (f"rank 2 on spark-03 exited (exit code 1): {CAUSE} "
                    "(`invoke logs --failed` shows rank 2's last lines)")
    shown = textwrap.wrap(f"error: {line}", 80)  # as `up` ends, on an 80-column terminal
    assert "Unable to find address for: enp1s0f0np0" in " ".join(shown[:2])
    assert "argv" not in line and "\n" not in line
    assert failed.log_tail == {"rank": 2, "node": "spark-03", "lines": stamped(SGLANG_GLOO)}
    silent = rank_failed(rank, [])
    assert silent.line() == "rank 2 on spark-03 exited (exit code 1)" and silent.log_tail is None


def test_only_a_failed_record_carries_the_kept_lines(monkeypatch):
    """A current or last-good record keeps its old fields only: a reader of an older
    version (the watchdog on the head) takes a record with an unknown field for absent."""
    from dataclasses import replace

    from sparkrack.deployments import record

    written = {}
    monkeypatch.setattr(record, "store_on_head", lambda fleet, inventory, folder, kind, data,
                        what: written.__setitem__(kind, json.loads(data)))
    monkeypatch.setattr(record, "_mirror", lambda inventory, kind, data: None)
    serving = record.Deployment(engine="sglang", profile="512k", deployment_id="d",
                                spec_hash="s", image="i", image_id="sha256:x", status="serving")
    kept = {"rank": 2, "node": "spark-03", "lines": stamped(SGLANG_GLOO)}
    record.write(None, None, "current", serving)
    record.write(None, None, "failed", replace(serving, status="failed", log_tail=kept))
    assert "log_tail" not in written["current"]
    assert written["failed"]["log_tail"] == kept
    assert record.Deployment(**written["failed"]).log_tail == kept


def test_nccls_detail_under_last_error_replaces_its_generic_text():
    """NCCL prints the cause on the line under "Last error:"; it replaces the exception's
    generic `ncclRemoteError: A call failed possibly due to a network error...`."""
    detail = ("NET/IB : Got completion from peer 10.77.10.4<4791> with status="
              "IBV_WC_RETRY_EXC_ERR(12) opcode=IBV_WC_RDMA_WRITE(1) vendor_err=129")
    lines = [BANNER,
             "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:3356, "
             "remote process exited or there was a network error, NCCL version 2.27.7",
             "ncclRemoteError: A call failed possibly due to a network error or a remote "
             "process exiting prematurely.",
             "Last error:",
             detail]
    assert reason(lines) == f"ncclRemoteError: {detail}"
    assert reason(lines[:4]).endswith("exiting prematurely.")  # no detail yet


def test_nccls_detail_is_found_under_an_engines_log_prefix():
    detail = "NET/IB : Got completion from peer 10.77.10.4<4791> with status=IBV_WC_RETRY_EXC_ERR(12)"
    lines = ["ERROR 12-06 07:58:21 [rank0] ncclRemoteError: A call failed possibly due to a "
             "network error or a remote process exiting prematurely.",
             "ERROR 12-06 07:58:21 [rank0] Last error:",
             f"ERROR 12-06 07:58:22 [rank0] {detail}"]
    assert reason(lines) == f"ncclRemoteError: {detail}"
    sglang = ["[2026-12-06 07:58:20 TP2] ncclRemoteError: A call failed",
              "[2026-12-06 07:58:20 TP2] Last error:", f"[2026-12-06 07:58:21 TP2] {detail}"]
    assert reason(sglang) == f"ncclRemoteError: {detail}"


def test_a_registration_refused_after_the_load_says_what_happened():
    """KHO (issue 56, item 4): NCCL's own line says ibv_reg_mr failed; the operator reads
    what that means on a Spark and the fix."""
    rank = Rank(node="spark-03", rank=2, name="sparkrack-sglang-r2", engine="sglang",
                profile="512k", deployment="d", status="exited", exit_code=1, stop_timeout=10)
    lines = [BANNER, "[2026-12-06 07:58:20 TP2] Load weight end. mem usage=100.00 GB",
             "spark-03:77:77 [0] NCCL WARN Call to ibv_reg_mr_iova2 failed with error Cannot "
             "allocate memory",
             "[2026-12-06 07:58:21 TP2] [rank2]: torch.distributed.DistBackendError: NCCL error "
             "in: ProcessGroupNCCL.cpp:3356, unhandled system error, NCCL version 2.27.7",
             "ncclSystemError: System call (e.g. socket, malloc) or external library call "
             "failed or device error.", "Last error:",
             "Call to ibv_reg_mr_iova2 failed with error Cannot allocate memory"]
    assert rank_failed(rank, stamped(lines)).line() == (
        "rank 2 on spark-03 exited (exit code 1): memory registration failed (ibv_reg_mr: "
        "ENOMEM) on spark-03: a host kernel with Kexec HandOver on (CmaFree above CmaTotal in "
        "its /proc/meminfo) pins no more memory once about 108 GiB is committed, after the "
        "weights load; boot it with kho=off (`invoke logs --failed` shows rank 2's last lines)")


def test_nccl_s_info_lines_are_told_apart_from_its_warnings():
    from sparkrack.logs.lines import nccl_info

    assert nccl_info("spark-03:77:77 [0] NCCL INFO NET/IB : Using [0]rocep1s0f0:1/RoCE [RO]; "
                     "OOB enp1s0f0np0:10.77.3.13<0>")
    assert not nccl_info("spark-03:77:77 [0] NCCL WARN Call to ibv_reg_mr_iova2 failed")
    assert not nccl_info("[2026-12-06 07:58:20 TP2] NCCL INFO quoted by the engine")
