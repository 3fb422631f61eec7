"""``adev storage profile | capacity | fio | crossover | coldstart | plan``."""
from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import re
import sys
from pathlib import Path
from typing import Any

from ..config import ROOT, ConfigError, load_model_profile

UNITS = {"": 1, "b": 1, "k": 1000, "kb": 1000, "m": 1000**2, "mb": 1000**2, "g": 1000**3,
         "gb": 1000**3, "t": 1000**4, "tb": 1000**4, "kib": 1024, "mib": 1024**2,
         "gib": 1024**3, "tib": 1024**4}
RESULTS = ROOT / "results" / "storage"


def parse_bytes(text: str, where: str) -> int:
    """``"5MiB"`` -> 5242880, ``"1.5GB"`` -> 1500000000, ``"4096"`` -> 4096."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:e[0-9]+)?)\s*([a-zA-Z]*)\s*", str(text))
    unit = m.group(2).lower() if m else None
    if not m or unit not in UNITS:
        raise ConfigError(f"{where}: {text!r} is not a size; allowed values: a number with an "
                          "optional unit B, KB, MB, GB, TB, KiB, MiB, GiB, TiB")
    return int(float(m.group(1)) * UNITS[unit])


def parse_ints(text: str, where: str) -> list[int]:
    try:
        out = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        out = []
    if not out or any(x <= 0 for x in out):
        raise ConfigError(f"{where}: {text!r} is not a list of positive integers (e.g. 1024,4096)")
    return out


def human(n: float | None) -> str:
    if n is None:
        return "n/a"
    for unit, f in (("TiB", 1024**4), ("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if abs(n) >= f:
            return f"{n / f:,.2f} {unit} ({n:,.0f} B)"
    return f"{n:,.0f} B"


def _bw(n: float | None) -> str:
    return "n/a" if n is None else f"{n / 1e9:.2f} GB/s" if n >= 1e8 else f"{n / 1e6:.1f} MB/s"


def _emit(args: argparse.Namespace, doc: Any, text: str) -> None:
    print(json.dumps(doc, indent=2) if getattr(args, "json", False) else text)


# --------------------------------------------------------------------------------------------
# Which bytes per token / block: a config.json, a stack model profile, or given


def _kv_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("model KV size (one of)")
    g.add_argument("--hf-config", metavar="CONFIG_JSON", help="a Hugging Face config.json")
    g.add_argument("--profile", metavar="NAME", help="a model profile in stacks/profiles/models")
    p.add_argument("--tp", type=int, default=1, help="tensor-parallel degree (with --hf-config)")
    p.add_argument("--kv-dtype", choices=("bf16", "fp8", "auto"), default="auto",
                   help="KV element type (with --hf-config; auto = the config's torch_dtype)")
    p.add_argument("--block-size", type=int, default=16, help="tokens per block (default 16)")


def _kv_bytes(args: argparse.Namespace) -> tuple[int, int, str]:
    """(bytes per token, bytes per block, where from) from --hf-config or --profile; ConfigError
    when neither is given."""
    kv = _kv_bytes_given(args)
    if kv is None:
        raise ConfigError("give the model's KV size: --hf-config CONFIG_JSON or --profile NAME")
    return kv


def _kv_bytes_given(args: argparse.Namespace) -> tuple[int, int, str] | None:
    """As :func:`_kv_bytes`; None when neither option is given."""
    from .kv import kv_profile_file
    if getattr(args, "hf_config", None):
        kp = kv_profile_file(args.hf_config, tp=args.tp, kv_dtype=args.kv_dtype,
                             block_size=args.block_size)
        return kp.bytes_per_token, kp.bytes_per_block, f"{args.hf_config} ({kp.rule})"
    if getattr(args, "profile", None):
        mp = load_model_profile(args.profile)
        return mp.bytes_per_token, mp.bytes_per_block, f"model profile {args.profile}"
    return None


# --------------------------------------------------------------------------------------------
# profile


def cmd_profile(args: argparse.Namespace) -> int:
    from .kv import kv_profile_file
    kp = kv_profile_file(args.config_json, tp=args.tp, kv_dtype=args.kv_dtype,
                         block_size=args.block_size)
    doc = {**kp.__dict__, "bytes_per_block": kp.bytes_per_block}
    lines = [f"model:            {kp.model} ({kp.layout.upper()}, {kp.num_layers} layers)",
             f"rule:             {kp.rule}"]
    if kp.layout == "gqa":
        lines.append(f"head_dim:         {kp.head_dim} (from {kp.head_dim_source})")
    lines += [f"KV dtype:         {kp.kv_dtype} ({kp.kv_dtype_bytes} B/element), TP {kp.tp}",
              f"bytes per token:  {human(kp.bytes_per_token)}",
              f"bytes per block:  {human(kp.bytes_per_block)}, {kp.block_size} tokens"]
    _emit(args, doc, "\n".join(lines))
    return 0


# --------------------------------------------------------------------------------------------
# capacity


def cmd_capacity(args: argparse.Namespace) -> int:
    from .runstats import run_kv
    from .sizing import capacity
    kv = _kv_bytes_given(args)
    measured = None
    if args.run:
        measured = run_kv(args.run, kv[0] if kv else None)
        if kv is None:
            from ..analysis.run import load_run
            prof = load_run(args.run).profile
            kv = (measured.bytes_per_token, prof.bytes_per_block if prof else 0,
                  "the run's model profile")
    if kv is None:
        raise ConfigError("give the model's KV size: --hf-config, --profile or --run")
    bpt, bpb, src = kv
    per: float
    if args.kv_per_session:
        per, per_src = parse_bytes(args.kv_per_session, "--kv-per-session"), "given"
    elif args.context_tokens:
        per, per_src = args.context_tokens * bpt, f"{args.context_tokens} tokens x {bpt} B/token"
    elif measured is not None:
        per = measured.kv_per_session_max_bytes if args.kv_stat == "max" \
            else measured.kv_per_session_mean_bytes
        per_src = (f"measured: {args.kv_stat} over {measured.sessions} sessions of the "
                   f"{measured.kv_per_session_source} x {bpt} B/token ({args.run})")
    else:
        raise ConfigError("give KV per session: --kv-per-session, --context-tokens or --run")
    rate = parse_bytes(args.new_kv_per_hour, "--new-kv-per-hour") if args.new_kv_per_hour \
        else (measured.new_kv_bytes_per_hour if measured else None)
    disk = parse_bytes(args.disk, "--disk") if args.disk else None
    try:
        cap = capacity(args.sessions, per, args.retention, bpb, new_kv_bytes_per_hour=rate,
                       disk_bytes=disk)
    except ValueError as e:
        raise ConfigError(f"capacity: {e}") from None
    doc = {**cap.__dict__, "kv_source": src, "kv_per_session_source": per_src,
           "run": measured.__dict__ if measured else None}
    lines = [f"KV size:          {bpt:,} B/token, {bpb:,} B/block ({src})",
             f"KV per session:   {human(per)} ({per_src})",
             f"sessions x retention: {cap.sessions} x {cap.retention:g}",
             f"RAM tier:         {human(cap.ram_bytes)} = {cap.ram_blocks:,} blocks "
             "(sessions x KV per session)",
             f"disk tier:        {human(cap.disk_bytes)} = {cap.disk_blocks:,} blocks "
             "(x retention)"]
    if cap.disk_hours is not None:
        how = "given"
        if measured is not None and not args.new_kv_per_hour:
            how = (f"measured: {measured.computed_tokens:,.0f} computed tokens over "
                   f"{measured.span_s / 3600:.3f} model h ({measured.computed_source})")
        lines.append(f"new KV per hour:  {human(cap.new_kv_bytes_per_hour)} ({how})")
        lines.append(f"a disk tier of {human(cap.disk_hours_for_bytes)} retains "
                     f"{cap.disk_hours:,.2f} hours of new KV")
    _emit(args, doc, "\n".join(lines))
    return 0


# --------------------------------------------------------------------------------------------
# fio / crossover


def _stamp() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%SZ")


def cmd_fio(args: argparse.Namespace) -> int:
    from .fio import FioError, run_fio, save_result
    if args.block_bytes:
        bpb, src = parse_bytes(args.block_bytes, "--block-bytes"), "given"
    else:
        _, bpb, src = _kv_bytes(args)
    try:
        res = run_fio(args.target, block_bytes=bpb, runtime_s=args.runtime,
                      size_bytes=parse_bytes(args.size, "--size"), direct=not args.no_direct,
                      numjobs=args.numjobs, allow_block_device=args.allow_block_device,
                      keep_file=args.keep_file, block_source=src)
    except FioError as e:
        print(f"adev storage fio: {e}", file=sys.stderr)
        return 1
    out = Path(args.out) if args.out else RESULTS / f"fio-{_stamp()}.json"
    save_result(res, out)
    if res.direct_note:
        print(f"note: {res.direct_note}", file=sys.stderr)
    lines = [f"fio {res.fio_version}: {res.target}, bs {res.block_bytes:,} B ({src}), randrw "
             f"{res.rwmixread}/{100 - res.rwmixread}, {res.numjobs} jobs, iodepth {res.iodepth}, "
             f"direct={int(res.direct)}, {res.runtime_s:g} s"]
    for name, d in (("read", res.read), ("write", res.write)):
        p50 = f"{d.p50_s * 1e3:.2f} ms" if d.p50_s is not None else "n/a"
        p99 = f"{d.p99_s * 1e3:.2f} ms" if d.p99_s is not None else "n/a"
        lines.append(f"  {name:5s} p50 {p50:>10s}  p99 {p99:>10s}  {_bw(d.bw_bytes_per_s):>10s}  "
                     f"{d.iops:,.0f} IOPS ({d.ios:,} I/Os)")
    lines.append(f"saved: {out}")
    _emit(args, {**res.to_json(), "saved": str(out)}, "\n".join(lines))
    return 0


def cmd_crossover(args: argparse.Namespace) -> int:
    from .fio import load_result
    from .runstats import prefill_time_per_token
    from .sizing import crossover
    res = load_result(args.fio_json)
    d = res.read if args.direction == "read" else res.write
    if d.p99_s is None:
        raise ConfigError(f"{args.fio_json}: the {args.direction} direction has no I/O; no p99")
    if args.prefill_rate:
        t, src = 1.0 / args.prefill_rate, f"--prefill-rate {args.prefill_rate:g} tok/s"
    elif args.run:
        t, n = prefill_time_per_token(args.run)
        src = f"median TTFT / prompt tokens of {n} uncached calls of {args.run}"
    else:
        name = args.profile or "qwen3-coder-30b-a3b"
        mp = load_model_profile(name)
        t, src = 1.0 / mp.prefill_tokens_per_s, \
            f"model profile {name}: {mp.prefill_tokens_per_s:g} tok/s"
    ctx = parse_ints(args.contexts, "--contexts") if args.contexts else []
    x = crossover(d.p99_s, t, ctx)
    doc = {"fio_result": str(args.fio_json), "direction": args.direction, "t_p99_s": x.t_p99_s,
           "t_prefill_s_per_token": x.t_prefill_s_per_token, "prefill_source": src,
           "crossover_tokens": x.crossover_tokens, "block_bytes": res.block_bytes,
           "direct": res.direct,
           "contexts": [{"tokens": n, "recompute_s": r, "gains": g} for n, r, g in x.contexts]}
    blocks = f"{res.block_bytes:,} B blocks" + (f" of {res.block_source}" if res.block_source
                                                 else "")
    lines = [f"T_p99 ({args.direction}, {blocks}, {res.target}): "
             f"{x.t_p99_s * 1e3:.2f} ms" + ("" if res.direct else " [buffered I/O]"),
             f"t_prefill: {x.t_prefill_s_per_token * 1e6:.2f} us/token ({src})",
             f"L_crossover = T_p99 / t_prefill = {x.crossover_tokens:,.0f} tokens: contexts "
             "longer than this gain from the tier"]
    for n, r, g in x.contexts:
        lines.append(f"  {n:>8,} tokens: recompute {r * 1e3:9.2f} ms vs restore "
                     f"{x.t_p99_s * 1e3:.2f} ms -> {'gains' if g else 'recompute is faster'}")
    _emit(args, doc, "\n".join(lines))
    return 0


# --------------------------------------------------------------------------------------------
# coldstart


def cmd_coldstart(args: argparse.Namespace) -> int:
    from . import coldstart as cs
    ctx = parse_ints(args.contexts, "--contexts")
    if args.config:
        from ..config import load_stack
        from ..stack import running_stack
        cfg = load_stack(args.config)

        async def ext() -> list:
            async with running_stack(cfg) as info:
                return await cs.measure(info, ctx, parallel=args.parallel)
        rows = asyncio.run(ext())
        tiers = [cfg.store.ram_tier, cfg.store.disk_tier]
        mp = cfg.model_profile()
    else:
        rows = asyncio.run(cs.run_embedded(ctx, parallel=args.parallel, time_scale=args.time_scale,
                                           profile=args.profile, payload_scale=args.payload_scale))
        tiers = ["ram", "local-raid0"]
        mp = load_model_profile(args.profile or "qwen3-coder-30b-a3b")
    summ = cs.summarize(rows)
    profs = cs.tier_profiles(tiers)
    out = Path(args.out) if args.out else RESULTS / f"coldstart-{_stamp()}.json"
    doc = {"rows": cs.to_json(rows), "summary": [s.__dict__ for s in summ],
           "tier_profiles": [p.__dict__ for p in profs], "parallel": args.parallel,
           "profile": mp.name}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=2) + "\n")
    lines = ["tier profiles (model scale):"]
    for p in profs:
        lines.append(f"  {p.name:12s} lookup {p.lookup_latency_s * 1e3:.2f} ms, read "
                     f"{_bw(p.read_bytes_per_s)}  ({p.source})")
    at = (f"for a {mp.prefill_reference_tokens:,}-token prompt, attention by position"
          if mp.prefill_time.per_token_pos_s else "flat")
    lines.append(f"recompute: {mp.prefill_tokens_per_s:g} tok/s {at} ({mp.name}); TTFT in model "
                 "seconds; speed-up = recompute TTFT / read-back TTFT")
    tier_of = {"ram": profs[0], "disk": profs[1], "ram+disk": profs[0]}
    lines.append("columns: speed-up (endpoint TTFT), client (client-side TTFT), predicted (the "
                 "tier profile, before the first decode step)")
    hdr = (f"{'context':>8s} {'recompute':>10s} | {'tier':5s} {'TTFT':>9s} {'speed-up':>8s} "
           f"{'client':>7s} {'predicted':>9s} {'read bw':>10s} {'host read':>10s} "
           f"{'in flight':>9s}")
    lines += [hdr, "-" * len(hdr)]
    for s in summ:
        for t, v in s.tiers.items():
            pred = cs.profile_speedup(s.context_tokens, tier_of[t], mp.prefill_time,
                                      mp.block_size, mp.bytes_per_block) if t in tier_of else None
            sp = f"{v['speedup']:.1f}x" if v["speedup"] else "n/a"
            spc = f"{v['speedup_client']:.1f}x" if v["speedup_client"] else "n/a"
            lines.append(
                f"{s.context_tokens:>8,} {s.recompute_ttft_s or float('nan'):>9.3f}s | {t:5s} "
                f"{v['ttft_s'] or float('nan'):>8.3f}s {sp:>8s} {spc:>7s} "
                f"{(f'{pred:.1f}x' if pred else 'n/a'):>9s} {_bw(v['read_bw_bytes_per_s']):>10s} "
                f"{_bw(v['host_read_bw_bytes_per_s']):>10s} "
                f"{(v['reads_in_flight'] or 0):>9.0f}")
    not_evicted = [r for r in rows if r.evicted is False]
    if not_evicted:
        lines.append(f"warning: {len(not_evicted)} re-activation(s) still hit the GPU cache "
                     "(the reset did not evict them)")
    lines.append(f"saved: {out}")
    _emit(args, doc, "\n".join(lines))
    return 0


# --------------------------------------------------------------------------------------------
# plan


def cmd_plan(args: argparse.Namespace) -> int:
    from . import provision as pv
    if args.kind == "raid0":
        plan = pv.raid0_plan(args.devices, md=args.md, chunk_kib=args.chunk_kib, fs=args.fs,
                             mountpoint=args.mount)
    else:
        plan = pv.nvmeof_plan(traddr=args.traddr, trsvcid=args.trsvcid, nqn=args.nqn,
                              transport=args.transport, fs=args.fs, mountpoint=args.mount)
    print(plan.render())
    if not args.apply:
        return 0
    problems = pv.check_apply(plan)
    if problems:
        print("adev storage plan: refusing --apply:", file=sys.stderr)
        for p in problems:
            print(f"  - {p}", file=sys.stderr)
        return 2
    try:
        if plan.kind == "raid0":
            pv.run_steps(plan.steps)
        else:
            pv.run_steps(plan.steps[:4])
            ns = pv.find_namespace(args.nqn)
            if ns is None:
                print(f"adev storage plan: connected, but no namespace of {args.nqn} appeared "
                      "under /sys/class/nvme-subsystem", file=sys.stderr)
                return 2
            problems = pv.device_problems(ns)
            if problems:
                print("adev storage plan: refusing to format the namespace:\n  - "
                      + "\n  - ".join(problems), file=sys.stderr)
                return 2
            plan = pv.nvmeof_plan(traddr=args.traddr, trsvcid=args.trsvcid, nqn=args.nqn,
                                  transport=args.transport, fs=args.fs, mountpoint=args.mount,
                                  namespace=ns)
            pv.run_steps(plan.steps[4:])
    except RuntimeError as e:
        print(f"adev storage plan: {e}", file=sys.stderr)
        return 1
    return 0


# --------------------------------------------------------------------------------------------


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("storage", help="size and characterise a KV store tier",
                              description="Storage planning for the KV store tier: bytes per "
                                          "token, capacity, fio, crossover, cold recovery, "
                                          "provisioning plans.")
    sub = p.add_subparsers(dest="storage_cmd", metavar="COMMAND")
    p.set_defaults(func=lambda a: (p.print_help(), 2)[1])

    q = sub.add_parser("profile", help="KV bytes per token and per block from a config.json")
    q.add_argument("config_json", metavar="CONFIG_JSON")
    q.add_argument("--tp", type=int, default=1, help="tensor-parallel degree (default 1)")
    q.add_argument("--kv-dtype", choices=("bf16", "fp8", "auto"), default="auto",
                   help="KV element type (auto = the config's torch_dtype)")
    q.add_argument("--block-size", type=int, default=16, help="tokens per block (default 16)")
    q.add_argument("--json", action="store_true", help="print JSON")
    q.set_defaults(func=cmd_profile)

    q = sub.add_parser("capacity", help="RAM and disk tier sizes, hours of KV a disk retains")
    q.add_argument("--sessions", type=int, required=True, help="concurrent sessions")
    q.add_argument("--retention", type=float, default=1.0,
                   help="retention factor of the disk tier (>= 1; default 1)")
    q.add_argument("--kv-per-session", metavar="SIZE", help="KV per session, e.g. 6GiB")
    q.add_argument("--context-tokens", type=int, help="KV per session = tokens x bytes/token")
    q.add_argument("--run", metavar="RUN_DIR", help="measure KV per session and new KV per hour "
                                                    "from a run's records")
    q.add_argument("--kv-stat", choices=("mean", "max"), default="mean",
                   help="with --run: mean or largest session (default mean)")
    q.add_argument("--disk", metavar="SIZE", help="disk tier size for the hours figure "
                                                  "(default: the planned disk tier)")
    q.add_argument("--new-kv-per-hour", metavar="SIZE", help="new KV per hour (else from --run)")
    _kv_args(q)
    q.add_argument("--json", action="store_true")
    q.set_defaults(func=cmd_capacity)

    q = sub.add_parser("fio", help="characterise a tier with fio at the model's block size")
    q.add_argument("target", metavar="TARGET", help="a file or a directory (a file is made in it)")
    q.add_argument("--block-bytes", metavar="SIZE", help="block size (else from the model)")
    _kv_args(q)
    q.add_argument("--runtime", type=float, default=60.0, help="seconds (default 60)")
    q.add_argument("--size", default="1GiB", help="file size per job region (default 1GiB)")
    q.add_argument("--numjobs", type=int, default=16, help="parallel jobs (default 16)")
    q.add_argument("--no-direct", action="store_true", help="buffered I/O instead of O_DIRECT")
    q.add_argument("--allow-block-device", action="store_true",
                   help="allow a block device TARGET (its data is overwritten)")
    q.add_argument("--keep-file", action="store_true", help="keep the test file")
    q.add_argument("--out", metavar="JSON", help="where to save (default results/storage/)")
    q.add_argument("--json", action="store_true")
    q.set_defaults(func=cmd_fio)

    q = sub.add_parser("crossover", help="restore-vs-recompute crossover from a fio result")
    q.add_argument("fio_json", metavar="FIO_JSON")
    g = q.add_mutually_exclusive_group()
    g.add_argument("--prefill-rate", type=float, metavar="TOK/S")
    g.add_argument("--run", metavar="RUN_DIR", help="t_prefill from a run's uncached calls")
    g.add_argument("--profile", metavar="NAME", help="model profile (default qwen3-coder-30b-a3b)")
    q.add_argument("--contexts", metavar="LIST", default="128,1024,4096,16384,65536",
                   help="context lengths to judge (default 128,1024,4096,16384,65536)")
    q.add_argument("--direction", choices=("read", "write"), default="read")
    q.add_argument("--json", action="store_true")
    q.set_defaults(func=cmd_crossover)

    q = sub.add_parser("coldstart", help="TTFT of re-activating evicted sessions: tiers vs "
                                         "recompute")
    q.add_argument("--contexts", default="1024,4096,16384,32768", metavar="LIST")
    q.add_argument("--parallel", type=int, default=1, help="sessions re-activated at once")
    q.add_argument("--time-scale", type=float, default=2.0, help="embedded stack time scale")
    q.add_argument("--payload-scale", type=int, default=1024, help="embedded stack payload scale")
    q.add_argument("--profile", metavar="NAME", help="model profile of the embedded stack")
    q.add_argument("--config", metavar="STACK_TOML",
                   help="measure this stack instead (e.g. external real vLLM; its own "
                        "configuration only)")
    q.add_argument("--out", metavar="JSON")
    q.add_argument("--json", action="store_true")
    q.set_defaults(func=cmd_coldstart)

    q = sub.add_parser("plan", help="provisioning plan for the store's disk tier")
    psub = q.add_subparsers(dest="kind", metavar="KIND", required=True)
    for kind in ("raid0", "nvmeof"):
        k = psub.add_parser(kind, help={"raid0": "local mdadm RAID0 over NVMe devices",
                                        "nvmeof": "remote NVMe-oF namespace (nvme-cli)"}[kind])
        if kind == "raid0":
            k.add_argument("devices", nargs="+", metavar="DEVICE")
            k.add_argument("--md", default="/dev/md/adev-kv")
            k.add_argument("--chunk-kib", type=int, default=512)
        else:
            k.add_argument("--traddr", required=True)
            k.add_argument("--trsvcid", default="4420")
            k.add_argument("--nqn", required=True)
            k.add_argument("--transport", choices=("tcp", "rdma"), default="tcp")
        k.add_argument("--fs", choices=("xfs", "ext4"), default="xfs")
        k.add_argument("--mount", default="/mnt/adev-kv", help="mount point")
        k.add_argument("--apply", action="store_true", help="run the steps (default: print)")
        k.set_defaults(func=cmd_plan)
