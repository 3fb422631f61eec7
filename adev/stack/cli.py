"""``adev stack up | down | status | plan vllm``."""
from __future__ import annotations

import argparse
import dataclasses
import json
import signal
import sys
import time
from typing import Any, get_args

from ..config import Configuration, ConfigError, StackConfig, from_dict, load_stack, parse_cpu_list
from ..emulator.policies import POLICIES

LEASE_WARN_MS = 50
"""Below this real lease, store reads of a loaded 2-core machine may outlive their lease."""


def _add_config_args(p: argparse.ArgumentParser, *, overrides: bool = False) -> None:
    p.add_argument("--config", metavar="FILE",
                   help="stack TOML (default stacks/embedded.toml)")
    p.add_argument("--state-dir", metavar="DIR",
                   help="where the state file and logs live (default .adev/stack under the "
                        "project root)")
    if not overrides:
        return
    p.add_argument("--time-scale", type=float, metavar="S",
                   help="divide every modelled duration by S (stack.time_scale)")
    p.add_argument("--configuration", choices=get_args(Configuration),
                   help="cache configuration (stack.configuration)")
    p.add_argument("--lease-ttl", type=float, metavar="SECONDS",
                   help="store lease TTL in model seconds (stack.store.lease_ttl_s)")
    p.add_argument("--ram-gb", type=float, metavar="GB",
                   help="store RAM tier at model scale (stack.store.ram_gb)")
    p.add_argument("--payload-scale", type=int, metavar="N",
                   help="store values are 1/N of the real KV bytes (stack.payload_scale)")
    p.add_argument("--policy", choices=tuple(POLICIES),
                   help="what the emulated model says (stack.policy)")
    p.add_argument("--seed", type=int, help="stack.seed")
    p.add_argument("--cpus", metavar="LIST",
                   help="cores of the stack's processes, e.g. 0 or 0-1 (stack.cpus)")


def load_from_args(args: argparse.Namespace) -> StackConfig:
    """The stack config named by ``--config`` with the command-line overrides applied."""
    top = {"time_scale": getattr(args, "time_scale", None),
           "configuration": getattr(args, "configuration", None),
           "payload_scale": getattr(args, "payload_scale", None),
           "policy": getattr(args, "policy", None), "seed": getattr(args, "seed", None),
           "state_dir": getattr(args, "state_dir", None),
           "cpus": (parse_cpu_list(args.cpus, "--cpus") if getattr(args, "cpus", None)
                    else None)}
    cfg = load_stack(getattr(args, "config", None), **top)
    store = {"lease_ttl_s": getattr(args, "lease_ttl", None), "ram_gb": getattr(args, "ram_gb", None)}
    store = {k: v for k, v in store.items() if v is not None}
    if store:
        d = dataclasses.asdict(cfg)
        d["store"].update(store)
        cfg = from_dict(StackConfig, d, "stack")
    return cfg


def _print_info_table(status: dict[str, Any]) -> None:
    if status.get("mode") == "embedded" and not status.get("endpoints"):
        print(f"no stack running ({status.get('reason')}; {status.get('state_file')})")
        return
    head = f"stack: {status['mode']}, {'running' if status['running'] else 'NOT healthy'}"
    if status["mode"] == "embedded":
        head += (f", configuration {status['configuration']}, time scale {status['time_scale']:g}, "
                 f"model {status['model']}")
    print(head)
    m = status.get("master")
    if m:
        extra = f" rpc {m['address']} pid {m['pid']}" if "pid" in m else ""
        print(f"  master   {'ok ' if m['healthy'] else 'DOWN'} metrics {m['metrics_url']}{extra}")
    for name, e in status["endpoints"].items():
        pid = f" pid {e['pid']}" if "pid" in e else ""
        print(f"  {name:<8} {'ok ' if e['healthy'] else 'DOWN'} {e['base_url']}  metrics "
              f"{e['metrics_url']}{pid}")


def cmd_up(args: argparse.Namespace) -> int:
    from .lifecycle import stack_status, start_stack, stop_stack
    from .procs import StackError
    cfg = load_from_args(args)
    if cfg.mode == "external":
        print("adev: stack mode is 'external': nothing to start (see `adev stack status`)",
              file=sys.stderr)
        return 2
    try:
        info = start_stack(cfg, reuse=False, auto_stop=False)
    except StackError as e:
        print(f"adev: stack up failed: {e}", file=sys.stderr)
        return 1
    if info.lease_ttl_real_ms is not None and info.lease_ttl_real_ms < LEASE_WARN_MS:
        print(f"adev: warning: the store lease is {info.lease_ttl_real_ms} ms real "
              f"(stack.store.lease_ttl_s / time_scale); store reads slower than that fail "
              "(Mooncake -707) and are recomputed", file=sys.stderr)
    st = stack_status(cfg)
    if args.json:
        print(json.dumps(st, indent=2))
    else:
        _print_info_table(st)
        print(f"state: {info.state_path}; stop with `adev stack down"
              f"{'' if args.state_dir is None else ' --state-dir ' + args.state_dir}`")
    if not args.foreground:
        return 0
    # Foreground: keep the stack up until Ctrl-C / SIGTERM, then stop it.
    stop = {"flag": False}
    signal.signal(signal.SIGTERM, lambda *_: stop.__setitem__("flag", True))
    try:
        while not stop["flag"]:
            time.sleep(0.5)
    except KeyboardInterrupt:
        pass
    stop_stack(cfg)
    print("stack stopped")
    return 0


def cmd_down(args: argparse.Namespace) -> int:
    from .lifecycle import stop_stack
    cfg = load_from_args(args)
    if cfg.mode == "external":
        print("adev: stack mode is 'external': nothing was started here", file=sys.stderr)
        return 0
    res = stop_stack(cfg)
    if res is None:
        print("no stack recorded; nothing to stop")
        return 0
    for name, how in res.items():
        print(f"  {name}: {how}")
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    from .lifecycle import stack_status
    st = stack_status(load_from_args(args))
    if args.json:
        print(json.dumps(st, indent=2))
    else:
        _print_info_table(st)
    return 0 if st["running"] else 1


def cmd_plan(args: argparse.Namespace) -> int:
    from .plan import render, vllm_plan
    cfg = load_from_args(args)
    plan = vllm_plan(cfg, master_host=args.master_host, master_port=args.master_port,
                     metrics_port=args.metrics_port, protocol=args.protocol,
                     device_name=args.device_name, port=args.port, model=args.model,
                     config_path=args.config_path, disk_path=args.disk_path,
                     hash_seed=args.hash_seed,
                     tool_call_parser=None if args.tool_call_parser == "none"
                     else args.tool_call_parser)
    if args.json:
        print(json.dumps(dataclasses.asdict(plan), indent=2))
    else:
        sys.stdout.write(render(plan))
    return 0


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "stack", help="start/stop/inspect the embedded stack; plan a real vLLM deployment",
        description="The embedded stack: a real Mooncake master and emulated vLLM-compatible "
                    "endpoints on 127.0.0.1; or a plan for real vLLM endpoints on GPU nodes.")
    p.set_defaults(func=lambda a: (p.print_help(), 2)[1])
    sub = p.add_subparsers(dest="stack_cmd", metavar="CMD")

    up = sub.add_parser("up", help="start the Mooncake master and the endpoints, wait for health",
                        description="Start a local mooncake_master and the emulated endpoints, "
                                    "wait until healthy, record pids/ports/URLs in the state file.")
    _add_config_args(up, overrides=True)
    up.add_argument("--json", action="store_true", help="print the status as JSON")
    up.add_argument("--foreground", action="store_true",
                    help="stay in the foreground; Ctrl-C stops the stack")
    up.set_defaults(func=cmd_up)

    down = sub.add_parser("down", help="stop exactly what `up` started (endpoints, then master)")
    _add_config_args(down)
    down.set_defaults(func=cmd_down)

    status = sub.add_parser("status", help="URLs and health of the stack (exit 1 if not running)")
    _add_config_args(status)
    status.add_argument("--json", action="store_true",
                        help="print endpoint base/metrics URLs, master metrics URL, health as JSON")
    status.set_defaults(func=cmd_status)

    plan = sub.add_parser("plan", help="print the commands for a real deployment")
    plan_sub = plan.add_subparsers(dest="plan_target", metavar="TARGET")
    plan.set_defaults(func=lambda a: (plan.print_help(), 2)[1])
    v = plan_sub.add_parser(
        "vllm", help="mooncake_master flags, MOONCAKE_CONFIG_PATH JSON, vllm serve commands",
        description="Print the commands a user runs on GPU nodes: mooncake_master (lease in real "
                    "ms), the Mooncake client JSON, `vllm serve` with MooncakeStoreConnector, "
                    "--enable-prompt-tokens-details and a common PYTHONHASHSEED.")
    _add_config_args(v, overrides=True)
    v.add_argument("--master-host", default="MASTER_HOST",
                   help="address the GPU nodes use to reach the master")
    v.add_argument("--master-port", type=int, default=50051, help="master RPC port")
    v.add_argument("--metrics-port", type=int, default=9003, help="master metrics port")
    v.add_argument("--protocol", choices=("rdma", "tcp"), default="rdma",
                   help="Mooncake transfer protocol")
    v.add_argument("--device-name", default="", help="RDMA device(s), e.g. mlx5_0 ('' = auto)")
    v.add_argument("--port", type=int, default=8000, help="vLLM port (when the endpoint sets none)")
    v.add_argument("--model", help="model to serve (default: the profile's HF repo id)")
    v.add_argument("--hash-seed", type=int, help="PYTHONHASHSEED (default stack.seed)")
    v.add_argument("--config-path", default="/etc/adev/mooncake_config.json",
                   help="where the Mooncake JSON goes on each node")
    v.add_argument("--disk-path", default="/mnt/kvcache/mooncake",
                   help="disk tier directory on each node (disk configurations)")
    v.add_argument("--tool-call-parser", default="auto",
                   help="vLLM tool-call parser ('auto': qwen3_coder for Qwen3-Coder; 'none')")
    v.add_argument("--json", action="store_true", help="print the plan as JSON")
    v.set_defaults(func=cmd_plan)


__all__ = ["register", "load_from_args", "ConfigError"]
