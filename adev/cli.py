"""The ``adev`` command line: thin verbs that call the functions of each stage.

Each verb lives with its stage; the module named here provides ``register(subparsers)``, which
adds its parser and sets ``func`` (called with the parsed args; returns an exit code).
"""
from __future__ import annotations

import argparse
import importlib
import math
import sys

VERBS = {
    "stack": "adev.stack",
    "session": "adev.session.cli",
    "fleet": "adev.fleet.cli",
    "nightly": "adev.fleet.campaign",
    "vm": "adev.gate.cli",
    "report": "adev.analysis.report",
    "replay": "adev.replay.cli",
    "trace": "adev.replay.traces",
    "storage": "adev.storage.cli",
    "whatif": "adev.whatif.cli",
    "emulator": "adev.emulator.server",
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="adev",
        description="How much GPU prefill work does a KV-cache store tier save for agentic coding "
                    "workloads, and at what cost?")
    sub = parser.add_subparsers(dest="verb", metavar="VERB")
    for modname in VERBS.values():
        try:
            mod = importlib.import_module(modname)
        except ModuleNotFoundError as e:
            if e.name and (e.name == modname or modname.startswith(e.name + ".")):
                continue  # stage not built yet
            raise
        register = getattr(mod, "register", None)
        if register is not None:
            register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    from .config import ConfigError
    from .stack.procs import StackError
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    for dest, v in vars(args).items():  # argparse takes "nan" and "inf" for type=float
        if isinstance(v, float) and not math.isfinite(v):
            print(f"adev: --{dest.replace('_', '-')}: {v!r} is not allowed; expected a finite "
                  "number", file=sys.stderr)
            return 2
    try:
        return int(args.func(args) or 0)
    except ConfigError as e:
        print(f"adev: config error: {e}", file=sys.stderr)
        return 2
    except StackError as e:  # the stack could not be started, found or shared: the message says why
        print(f"adev: stack: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("adev: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
