"""Two captures of a rack compared: what changed on it since the first, one line each
(`spark-03: kernel 6.17.0-1008-nvidia -> 6.17.0-1014-nvidia`). Pure."""

from __future__ import annotations

from typing import Any

IGNORED = ("captured",)  # when it was taken is no change of the rack


def differences(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """What differs from old to new: the rack's vars, nodes gone or come, each node's
    fields and RDMA functions."""
    lines = [f"rack: {line}" for line in _compare(old.get("rack", {}), new.get("rack", {}))]
    before = {n["name"]: n for n in old.get("nodes", [])}
    after = {n["name"]: n for n in new.get("nodes", [])}
    for name in sorted(before.keys() - after.keys()):
        lines.append(f"{name}: gone from the rack")
    for name in sorted(after.keys() - before.keys()):
        lines.append(f"{name}: new in the rack")
    for name in sorted(before.keys() & after.keys(), key=lambda n: after[n].get("rank", 0)):
        lines += [f"{name}: {line}" for line in _compare(before[name], after[name])]
    return lines


def _compare(old: Any, new: Any, where: str = "") -> list[str]:
    if isinstance(old, dict) and isinstance(new, dict):
        lines = []
        for key in [*old, *(k for k in new if k not in old)]:
            if key in IGNORED:
                continue
            path = f"{where}.{key}" if where else str(key)
            if key not in new:
                lines.append(f"{path} gone (was {_text(old[key])})")
            elif key not in old:
                lines.append(f"{path} new: {_text(new[key])}")
            else:
                lines += _compare(old[key], new[key], path)
        return lines
    if isinstance(old, list) and isinstance(new, list) and all(
            isinstance(v, str) for v in (*old, *new)):
        gone = [v for v in old if v not in new]
        come = [v for v in new if v not in old]
        if not gone and not come:
            return [] if old == new else [f"{where} reordered"]
        return [f"{where}: " + "; ".join([*(f"-{v}" for v in gone), *(f"+{v}" for v in come)])]
    return [] if old == new else [f"{where} {_text(old)} -> {_text(new)}"]


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value or "''"
    return str(value)
