"""Real Mooncake I/O per block against the tier profiles: up to which time scale S this host's real
store reads keep pace with the modelled ones (prints figures; not a test).

    .venv/bin/python bench/bench_store_io.py [--blocks 2000] [--repeats 3] [--time-scale 10]
                                             [--payload BYTES] [--batch-keys 128] [--chunk-blocks C]

The emulated endpoint models a load of n store blocks as ``lookup_latency_s + n * bytes_per_block /
read_bytes_per_s`` (the tier profile, model seconds; /S on the wall) and does the real read
alongside it with the real Mooncake client. Where the real read takes longer than the modelled one,
the request's first token comes out late (``adev_emulator_read_path_overrun_seconds``; the fleet
report's "TTFT over the emulator's model" and "real store reads / tier profile"). This benchmark runs
each read path the emulator's store tier takes (:class:`adev.emulator.store.MooncakeTier`, the code
the endpoints run, on a real ``mooncake_master`` with the stack's own flags and its lease at
``--time-scale``) on ``--blocks`` blocks at the stack's payload size, stored as objects of
``--chunk-blocks`` blocks each (``stack.store.chunk_blocks``; figures stay per block):

- ``lookup``: ``batch_is_exist`` over keys that are present (it grants their leases);
- ``ram, own segment``: a load of blocks this client put (the default ``local`` placement: reads
  of one's own segment are memory copies);
- ``ram, other process``: a load of blocks another client process put in its own segment (Mooncake's
  TCP transport on this host: what a hit costs when the putting endpoint is not the reader);
- ``disk``: a load of blocks whose only replica is in this client's offload directory (Mooncake's
  file-per-key backend, as the stack runs it);
- ``put``: ``batch_put_from`` of new blocks into this client's segment.

Per path it prints wall and CPU microseconds per block (CPU of every process involved: the
reader, the master, the other client), the modelled microseconds per block of the tier that
serves it, and ``S_max = modelled / real wall``: the largest time scale at which that path's real
reads are not slower than the model, one request at a time on an idle host. Under load the
processes share the host's cores, so ``cores at S`` (real CPU per block / modelled wall per
block at ``--time-scale``) says how many cores a stream of such reads needs to keep pace at that
S. Each phase runs in a fresh process with its own master (``--phase`` is internal).
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from adev import event_loop  # noqa: E402
from adev.config import StackConfig, load_model_profile, load_tier_profile  # noqa: E402
from adev.emulator.store import MIN_SEGMENT, MooncakeTier, StoreSettings  # noqa: E402
from tests.emulator.helpers import Master  # noqa: E402  (a master with the stack's own flags)

HOLDER_READY = "HOLDER READY"


def _cpu(pid: int) -> float:
    """CPU seconds of process ``pid`` so far: the sum of its live threads' on-CPU time from
    ``/proc/PID/task/*/schedstat`` (nanoseconds; ``/proc/PID/stat`` counts 10 ms ticks, too coarse
    for a few thousand blocks). The clients' and the master's threads live for the whole phase."""
    total = 0
    for t in os.listdir(f"/proc/{pid}/task"):
        try:
            total += int(Path(f"/proc/{pid}/task/{t}/schedstat").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            pass   # a thread that ended meanwhile
    return total / 1e9


def _tier(master: str, http: str, payload: int, segment: int, disk: Path | None,
          lease_s: float, batch_keys: int = StoreSettings.batch_keys,
          chunk: int = 1) -> MooncakeTier:
    return MooncakeTier(StoreSettings(master=master, model_name="bench", payload_bytes=payload,
                                      segment_bytes=segment, disk_dir=str(disk) if disk else None,
                                      master_http=http, lease_s=lease_s,
                                      batch_keys=batch_keys, chunk_blocks=chunk))


async def _timed(label: str, n: int, pids: list[int], fn, repeats: int) -> dict:
    """Median over ``repeats`` of wall and CPU (all ``pids``) per block of ``await fn()``."""
    walls, cpus, ok = [], [], []
    for _ in range(repeats):
        c0 = sum(_cpu(p) for p in pids)
        t0 = time.monotonic()
        got = await fn()
        walls.append((time.monotonic() - t0) / n)
        cpus.append((sum(_cpu(p) for p in pids) - c0) / n)
        ok.append(got)
        await asyncio.sleep(0.3)
    return {"path": label, "blocks": n, "wall_us": statistics.median(walls) * 1e6,
            "cpu_us": statistics.median(cpus) * 1e6, "ok": min(ok)}


async def _holder(master_addr: str, http: str, payload: int, n: int, chunk: int) -> None:
    """Another client process: put ``n`` objects into its own segment, then wait for stdin to close."""
    t = _tier(master_addr, f"127.0.0.1:{http}", payload,
              max(MIN_SEGMENT, 4 * n * payload * chunk), None, 60.0, chunk=chunk)
    await t.start()
    res = await t.save(t.keys(list(range(2_000_000, 2_000_000 + n))))
    print(HOLDER_READY, res.put, flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
    await t.close()


async def _phase(phase: str, n: int, repeats: int, payload: int, lease_ms: int,
                 batch_keys: int, chunk: int = 1) -> list[dict]:
    """The phase's rows per block: ``n`` objects of ``chunk`` blocks each are timed."""
    obj = payload * chunk
    work = Path(tempfile.mkdtemp(prefix="adev-bench-io-"))
    master = Master(lease_ms=lease_ms, offload=phase == "disk", workdir=work).start()
    me, mp = os.getpid(), master.proc.pid
    out: list[dict] = []
    holder = None
    try:
        http = f"127.0.0.1:{master.http}"
        if phase == "disk":   # a small segment: older blocks leave RAM and stay readable from disk
            t = _tier(master.addr, http, payload, MIN_SEGMENT, work / "disk", lease_ms / 1000,
                      batch_keys, chunk)
        else:
            t = _tier(master.addr, http, payload, max(MIN_SEGMENT, 8 * n * obj), None,
                      lease_ms / 1000, batch_keys, chunk)
        await t.start()
        keys = t.keys(list(range(1, n + 1)))
        if phase == "local":
            fresh = iter(range(10_000_000, 10_000_000 * (repeats + 2), 10_000_000))

            async def put():
                base = next(fresh)
                k = t.keys(list(range(base, base + n)))
                r = await t.save(k)
                return r.put == n
            out.append(await _timed("put", n, [me, mp], put, repeats))
            await t.save(keys)

            async def lookup():
                return sum(await t.exists(keys) or []) == n
            out.append(await _timed("lookup", n, [me, mp], lookup, repeats))

            async def load_own():
                return (await t.load(keys, time.monotonic())).loaded == n
            out.append(await _timed("ram, own segment", n, [me, mp], load_own, repeats))
        elif phase == "remote":
            holder = subprocess.Popen([sys.executable, __file__, "--holder", master.addr, str(master.http),
                                       "--blocks", str(n), "--payload", str(payload),
                                       "--chunk-blocks", str(chunk)],
                                      stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
            line = ""
            while HOLDER_READY not in line:
                line = holder.stdout.readline()
                if not line and holder.poll() is not None:
                    raise RuntimeError("the holder process exited before its blocks were put")
            rkeys = t.keys(list(range(2_000_000, 2_000_000 + n)))

            async def load_remote():
                return (await t.load(rkeys, time.monotonic())).loaded == n
            out.append(await _timed("ram, other process", n, [me, mp, holder.pid], load_remote, repeats))
        else:
            # put 4 x the segment's blocks in steps the offload heartbeat (1 s) keeps up with
            seg_blocks = MIN_SEGMENT // obj
            total = max(4 * seg_blocks, 2 * n)
            allk = t.keys(list(range(1, total + 1)))
            step = seg_blocks // 3
            for i in range(0, total, step):
                await t.save(allk[i:i + step])
                await asyncio.sleep(1.1)
            await asyncio.sleep(1.5)
            tiers = await t.tiers(allk[:total // 2])
            dkeys = [k for k, tr in zip(allk[:total // 2], tiers, strict=True) if tr == "disk"][:n]
            if len(dkeys) < n // 2:
                raise RuntimeError(f"only {len(dkeys)} of the first {total // 2} blocks are disk-only")

            async def load_disk():
                return (await t.load(dkeys, time.monotonic())).loaded == len(dkeys)
            out.append(await _timed("disk", len(dkeys), [me, mp], load_disk, repeats))
        await t.close()
    finally:
        if holder is not None:
            holder.stdin.close()
            try:
                holder.wait(15)
            except subprocess.TimeoutExpired:
                holder.kill()
        master.proc.terminate()
        master.proc.wait(10)
        shutil.rmtree(work, ignore_errors=True)
    for r in out:   # per object -> per block
        r["blocks"] *= chunk
        r["wall_us"] /= chunk
        r["cpu_us"] /= chunk
    return out


def _print(rows: list[dict], S: float, ram_us: float, disk_us: float) -> None:
    model = {"ram, own segment": ram_us, "ram, other process": ram_us, "disk": disk_us}
    print(f"{'path':<22}{'blocks':>7}{'wall us/block':>15}{'CPU us/block':>14}{'modelled us/block':>19}"
          f"{'S_max':>8}{f'cores at S={S:g}':>15}")
    for r in rows:
        m = model.get(r["path"])
        s_max = f"{m / r['wall_us']:.2f}" if m else "-"
        cores = f"{r['cpu_us'] / (m / S):.2f}" if m else "-"
        print(f"{r['path']:<22}{r['blocks']:>7}{r['wall_us']:>15.1f}{r['cpu_us']:>14.1f}"
              f"{(f'{m:.1f}' if m else '-'):>19}{s_max:>8}{cores:>15}{'' if r['ok'] else '  (incomplete)'}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--blocks", type=int, default=2000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--time-scale", type=float, default=StackConfig().time_scale)
    ap.add_argument("--payload", type=int, default=0, help="bytes per block (default: the stack's)")
    ap.add_argument("--batch-keys", type=int, default=StoreSettings.batch_keys,
                    help="keys per load / put batch (default: the emulator's)")
    ap.add_argument("--chunk-blocks", type=int, default=StackConfig().store.chunk_blocks,
                    help="blocks per store object (stack.store.chunk_blocks)")
    ap.add_argument("--phase", choices=("local", "remote", "disk"), help=argparse.SUPPRESS)
    ap.add_argument("--holder", nargs=2, metavar=("MASTER", "HTTP_PORT"), help=argparse.SUPPRESS)
    a = ap.parse_args()
    stack = StackConfig()
    profile = load_model_profile(stack.profile)
    payload = a.payload or max(1, profile.bytes_per_block // stack.payload_scale)
    if a.holder:
        event_loop.run(_holder(a.holder[0], a.holder[1], payload, a.blocks, a.chunk_blocks))
        return 0
    if a.phase:
        # the stack's lease at this time scale (Mooncake counts it in real milliseconds)
        lease_ms = max(1, round(stack.store.lease_ttl_s / a.time_scale * 1000))
        rows = event_loop.run(_phase(a.phase, a.blocks, a.repeats, payload, lease_ms, a.batch_keys,
                                     a.chunk_blocks))
        print("ROWS " + json.dumps(rows), flush=True)
        sys.stdout.flush()
        os._exit(0)  # Mooncake's threads must not hold the interpreter at exit
    ram = load_tier_profile(stack.store.ram_tier)
    disk = load_tier_profile(stack.store.disk_tier)
    per_block = profile.bytes_per_block
    ram_us, disk_us = per_block / ram.read_bytes_per_s * 1e6, per_block / disk.read_bytes_per_s * 1e6
    print(f"({event_loop.describe()}; {os.cpu_count()} cores; payload {payload} B per block "
          f"= {per_block} B / payload scale {stack.payload_scale}; {a.chunk_blocks} block(s) "
          f"per store object)")
    print(f"modelled per block: {ram.name} {ram_us:.1f} us, {disk.name} {disk_us:.1f} us (model time; "
          f"/S on the wall: {ram_us / a.time_scale:.1f} and {disk_us / a.time_scale:.1f} us at "
          f"S={a.time_scale:g}); lookup latency per request {ram.lookup_latency_s * 1e6:.0f} us")
    rows: list[dict] = []
    for phase in ("local", "remote", "disk"):
        p = subprocess.run([sys.executable, __file__, "--phase", phase,
                            "--blocks", str(max(1, a.blocks // a.chunk_blocks)),   # objects
                            "--repeats", str(a.repeats), "--payload", str(payload),
                            "--time-scale", str(a.time_scale), "--batch-keys", str(a.batch_keys),
                            "--chunk-blocks", str(a.chunk_blocks)],
                           capture_output=True, text=True, timeout=600)
        got = [ln for ln in p.stdout.splitlines() if ln.startswith("ROWS ")]
        if not got:
            print(f"phase {phase} failed (rc {p.returncode}): {p.stderr.strip().splitlines()[-3:]}")
            continue
        rows += json.loads(got[-1][5:])
    _print(rows, a.time_scale, ram_us, disk_us)
    print(f"(host load average {os.getloadavg()[0]:.1f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
