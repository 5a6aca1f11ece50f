"""Exit 0 when pytest's arguments could select a test of the real-node lane, 1 when they
cannot; scripts/test.sh then does not start a second pytest only to collect that lane
(about 5 CPU-seconds, twice that under -n 2), as with the fast lane's -m "... and not k8s_node".

Every module of tests/k8s_node carries the ``k8s_node`` marker, so the lane can select a
test only if the -m expression holds for some set of markers that includes ``k8s_node``;
the names in the expression are the only markers that matter. Anything unexpected
(no -m, pytest's private expression parser moved) answers "could select".
"""

from __future__ import annotations

import itertools
import re
import sys


def markexpr(args: list[str]) -> str | None:
    found = None
    for i, arg in enumerate(args):
        if arg == "-m" and i + 1 < len(args):
            found = args[i + 1]
        elif arg.startswith("-m") and len(arg) > 2:
            found = arg[2:]
    return found  # pytest keeps the last -m


def _present(marks: set[str]):
    return lambda name, /, **_: name in marks


def could_select(expr: str) -> bool:
    try:
        from _pytest.mark.expression import Expression

        compiled = Expression.compile(expr)
    except Exception:
        return True
    others = sorted(set(re.findall(r"[A-Za-z_][\w.]*", expr)) - {"and", "or", "not", "k8s_node"})
    for size in range(len(others) + 1):
        for combo in itertools.combinations(others, size):
            if compiled.evaluate(_present({"k8s_node", *combo})):
                return True
    return False


if __name__ == "__main__":
    expr = markexpr(sys.argv[1:])
    sys.exit(0 if expr is None or could_select(expr) else 1)
