"""Play validate_task's cheats against generated tasks: which would a constant or input-ignoring kernel pass?

    python -m kernels_env.execute.audit_generated                  # every task of the grammar, small sizes
    python -m kernels_env.execute.audit_generated --every 50 --sizes eval

The grammar leaves degenerate chains out (degenerate.py); this is the check that its rules and the
tasks' tolerances are enough: it prints one line per problem and exits 1 if there is any. The whole
grammar at small sizes takes about 8 minutes on one core (`--every K` checks every K-th task).
"""
from __future__ import annotations

import argparse
import sys

from kernels_env.execute.validate import validate_task
from kernels_env.tasks.generated import get_generated_task
from kernels_env.tasks.generated.grammar import all_specs


def audit(names: list[str], sizes: str = "small") -> list[str]:
    """validate_task's problems over the generated tasks `names`, in order."""
    problems: list[str] = []
    for name in names:
        problems += validate_task(get_generated_task(name), sizes=sizes)
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kernels_env.execute.audit_generated", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--every", type=int, default=1, help="check every K-th task of the grammar")
    parser.add_argument("--sizes", choices=("small", "eval"), default="small")
    args = parser.parse_args(argv)
    if args.every < 1:
        parser.error(f"--every {args.every}; expected an int >= 1")
    names = [s.name for s in all_specs()[::args.every]]
    problems = audit(names, args.sizes)
    print("\n".join(problems) if problems else f"{len(names)} generated tasks: no cheat passes")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
