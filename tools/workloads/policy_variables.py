"""The environment variables fsdpskip reads, from their one home:
src/common/options.def (one OPTION(name, role, ...) row each)."""
import os
import re

_OPTIONS_DEF = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "src", "common", "options.def")

with open(_OPTIONS_DEF) as _f:
    ROWS = tuple(re.findall(r"^OPTION\((\w+), (\w+),", _f.read(), re.M))  # (name, role)
NAMES = tuple(name for name, _ in ROWS)


def without_policy(env):
    """`env` less every variable that could change fsdpskip's decision, and LD_PRELOAD."""
    return {k: v for k, v in env.items() if k not in NAMES and k != "LD_PRELOAD"}
