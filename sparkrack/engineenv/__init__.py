"""The engine environment: every variable a rank gets from its node's env files, with its
value and where that comes from, computed here (pure: no node, no SSH). Provision writes it
(roles nccl_env and engine_env print it), the engines start ranks with it, and reading a
node's files back takes each variable's source from here. docs/engines.md#where-each-variable-comes-from
"""

from sparkrack.engineenv.compute import (
    ETC_DIR,
    NCCL_FILE,
    TOKEN_FILE,
    EngineEnv,
    engine_env_file,
    inventory_views,
)
from sparkrack.engineenv.gid import GidIndex, gid_index
from sparkrack.engineenv.nodeenv import (
    SECRET_KEYS,
    VIEW_INVENTORY,
    VIEW_NODE,
    EnvVar,
    NodeEnv,
    parse_env,
    read_vars,
    secret_names,
)

__all__ = [
    "ETC_DIR", "NCCL_FILE", "SECRET_KEYS", "TOKEN_FILE", "VIEW_INVENTORY", "VIEW_NODE",
    "EngineEnv", "EnvVar", "GidIndex", "NodeEnv", "engine_env_file", "gid_index",
    "inventory_views", "parse_env", "read_vars", "secret_names",
]
