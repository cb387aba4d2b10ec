"""`python -m perf SCENARIO [ARGS]`: one entry point for every benchmark and scenario.

`python -m perf --help` lists them; `python -m perf SCENARIO --help` gives a scenario's
own arguments. The listing reads each module's docstring without importing it, so it
needs nothing beyond the standard library (the GPU probe check runs with little more).
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import sys

from perf.registry import KINDS, SCENARIOS


def summary(module: str) -> str:
    """The first sentence of the module's docstring, read from its source."""
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None:
        raise ModuleNotFoundError(module)
    with open(spec.origin, encoding="utf-8") as source:
        docstring = ast.get_docstring(ast.parse(source.read())) or ""
    paragraph = " ".join(docstring.split("\n\n")[0].split())
    sentence, period, _ = paragraph.partition(". ")
    return (sentence + period.strip()).rstrip(":")


def usage() -> str:
    lines = [
        "usage: python -m perf SCENARIO [ARGS]   (python -m perf SCENARIO --help: its arguments)"
    ]
    width = max(map(len, SCENARIOS))
    for package, heading in KINDS.items():
        names = [name for name, module in SCENARIOS.items() if module.startswith(package + ".")]
        if names:
            lines += ["", f"{heading}:"]
            lines += [f"  {name:<{width}}  {summary(SCENARIOS[name])}" for name in sorted(names)]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] in ("-h", "--help"):
        print(usage(), file=sys.stdout if args else sys.stderr)
        return 0 if args else 2
    name, rest = args[0], args[1:]
    if name not in SCENARIOS:
        print(f"python -m perf: unknown scenario {name!r}\n\n{usage()}", file=sys.stderr)
        return 2
    module = importlib.import_module(SCENARIOS[name])
    sys.argv = [f"python -m perf {name}", *rest]  # argparse's prog in the scenario's help
    return int(module.main(rest) or 0)


if __name__ == "__main__":
    sys.exit(main())
