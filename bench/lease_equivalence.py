"""Leases kept in model time against a long real lease on the master (prints figures; not a test).

    .venv/bin/python bench/lease_equivalence.py [--rounds 140] [--blocks 20] [--disk]

The same sequence of store operations, once on a master whose lease is long in real time (60 s)
and once on a master with the 1 s grain whose leases the client keeps in model time
(:mod:`adev.emulator.leases`, model time standing still): each round one client saves
``--blocks`` new blocks and the other looks them up, asks their tier and loads them, as a
session's next request on the other endpoint does. Printed per setting: blocks put and refused.
Equal figures say the kept leases block eviction as the long real lease does; run with and without
the disk tier (``--disk``).
"""
from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from adev.emulator.store import MooncakeTier, StoreSettings  # noqa: E402
from tests.emulator.helpers import Master  # noqa: E402

MODEL = "Qwen3-Coder-30B-A3B-Instruct-FP8"
PAYLOAD = 1572864 // 64          # a block at payload scale 64
SEGMENT = 16 << 20               # each client's RAM segment (Mooncake's minimum): 682 blocks


async def run(lease_ms: int, keep: bool, rounds: int, blocks: int, disk: bool) -> tuple[int, int]:
    w = Path(tempfile.mkdtemp(prefix="adev-lease-"))
    m = Master(lease_ms=lease_ms, offload=disk, workdir=w).start()
    clients = []
    try:
        for n in range(2):
            st = MooncakeTier(StoreSettings(
                master=m.addr, model_name=MODEL, payload_bytes=PAYLOAD, segment_bytes=SEGMENT,
                lease_s=lease_ms / 1000, disk_dir=os.path.join(w, f"d{n}") if disk else None,
                model_lease_s=3600.0 if keep else None))
            st.model_now = lambda: 0.0
            await st.start()
            clients.append(st)
        put = refused = 0
        for i in range(rounds):
            a, b = clients[i % 2], clients[(i + 1) % 2]
            keys = a.keys([i * 1000 + j for j in range(blocks)])
            r = await a.save(keys)
            put, refused = put + r.put, refused + r.refused
            n = sum(await b.exists(keys) or [])
            if n:
                await b.tiers(keys[:n])
                await b.load(keys[:n])
            await asyncio.sleep(0.05)
        return put, refused
    finally:
        for st in clients:
            await st.close()
        m.kill()


async def main_async(args: argparse.Namespace) -> None:
    for label, lease_ms, keep in (("master lease 60 s real", 60_000, False),
                                  ("1 s grain, leases kept in model time", 1000, True)):
        put, refused = await run(lease_ms, keep, args.rounds, args.blocks, args.disk)
        print(f"{label}: put {put} blocks, refused {refused} of {put + refused}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=140)
    p.add_argument("--blocks", type=int, default=20)
    p.add_argument("--disk", action="store_true", help="the master offloads evicted objects")
    asyncio.run(main_async(p.parse_args()))


if __name__ == "__main__":
    main()
