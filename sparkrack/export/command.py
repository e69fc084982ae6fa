"""A rank's argv for a LeaderWorkerSet pod: the launch spec's argv, with each rank-dependent
word taken from the LWS downward env instead.

A word is rank-dependent when the engine file's template for it uses {rank}, {nnodes} or
{head_roce_addr} (`args` in engines/<engine>.yml). Such a word is filled again with
Kubernetes `$(VAR)` references to the variables LWS puts in every pod of a group, which
the kubelet expands in `command`, `args` and env values. Every other `$` is doubled, the
escape of that expansion, so the container gets exactly the text the launch spec has.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sparkrack.core.errors import SparkrackError
from sparkrack.engines import EngineDef, LaunchSpec
from sparkrack.engines.templates import fill

LWS_DOWNWARD = {"rank": "$(LWS_WORKER_INDEX)", "nnodes": "$(LWS_GROUP_SIZE)",
                "head_roce_addr": "$(LWS_LEADER_ADDRESS)"}
"""Template placeholder -> the LWS variable that has its value in a group's pod."""


def kubernetes_literal(text: str) -> str:
    """text escaped for Kubernetes' `$(VAR)` expansion, which turns `$$` into `$`: the
    container gets text itself."""
    return text.replace("$", "$$")


def group_argv(spec: LaunchSpec, definition: EngineDef,
               values: Mapping[str, Any]) -> tuple[str, ...]:
    """spec.argv with its rank-dependent words as LWS `$(VAR)` references, every other word
    escaped (kubernetes_literal).

    values are what the spec's templates were filled with (`template_values` of its node).
    Each templated word must equal its template filled with values, so that only those
    words change; SparkrackError if the argv is not laid out as the engine file says.
    """
    args = definition.args
    per_rank = (*args.every_rank, *(args.head if spec.is_head else args.workers))
    segments = ((len(definition.entrypoint), args.model),
                (len(spec.argv) - len(per_rank), per_rank))
    escaped = {key: kubernetes_literal(str(value)) for key, value in values.items()}
    group_values = {**escaped, **LWS_DOWNWARD}
    argv = [kubernetes_literal(word) for word in spec.argv]
    for start, templates in segments:
        for offset, template in enumerate(templates):
            if fill(template, values) != spec.argv[start + offset]:
                raise SparkrackError(
                    f"rank {spec.rank}'s argv word {start + offset} is "
                    f"{spec.argv[start + offset]!r}, not the engine file's {template!r}",
                    fix=f"the launch spec no longer follows {definition.file}'s args")
            argv[start + offset] = fill(kubernetes_literal(template), group_values)
    return tuple(argv)
