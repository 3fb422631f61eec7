"""Tier attribution (adev.emulator.store_tiers) against a stand-in for the Mooncake master's HTTP
``/batch_query_keys`` on 127.0.0.1 (the real master answers it in test_store_integration.py): the
batches and the URL it sends, how each reply entry is read, and what a failure counts."""
from __future__ import annotations

import json
import logging

import pytest
from aiohttp import web

from adev.emulator.store_tiers import TierQuery


class Master:
    """Answers ``/batch_query_keys`` from ``entries`` (key -> reply entry; absent keys are left
    out of the reply) and records each request's raw query string and keys."""

    def __init__(self, entries: dict, status: int = 200, data_null: bool = False) -> None:
        self.entries, self.status, self.data_null = entries, status, data_null
        self.asked: list[list[str]] = []
        self.raw: list[str] = []

    async def handle(self, req: web.Request) -> web.Response:
        self.raw.append(req.raw_path)
        keys = req.query["keys"].split(",")
        self.asked.append(keys)
        if self.status != 200:
            return web.Response(status=self.status, text="boom")
        data = None if self.data_null else {k: self.entries[k] for k in keys if k in self.entries}
        return web.Response(text=json.dumps({"success": True, "data": data}))


@pytest.fixture
async def master():
    runners = []

    async def start(entries, **kw) -> tuple[Master, str]:
        m = Master(entries, **kw)
        app = web.Application()
        app.router.add_get("/batch_query_keys", m.handle)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        runners.append(runner)
        port = site._server.sockets[0].getsockname()[1]
        return m, f"127.0.0.1:{port}"
    yield start
    for r in runners:
        await r.cleanup()


def entry(i: int) -> dict:
    """Key i's reply: RAM (a memory replica) for i % 5 == 0, disk (local disk replica) for 1,
    disk (disk replica) for 2, both kinds empty for 3; i % 5 == 4 is not in the reply."""
    return [{"values": [{"size": 1}], "disk_values": [{"size": 1}]},
            {"values": [], "local_disk_values": [{"size": 1}]},
            {"disk_values": [{"size": 1}]},
            {"values": [], "local_disk_values": [], "disk_values": []}][i % 5]


async def test_query_reads_each_entry_in_batches_of_200(master):
    keys = [f"m@tp_rank:0@{i:04x}" for i in range(450)]
    m, addr = await master({k: entry(i) for i, k in enumerate(keys) if i % 5 != 4})
    tq = TierQuery(addr)
    got = await tq.query(keys)
    # 450 keys: batches of 200, 200, 50, in order
    assert m.asked == [keys[:200], keys[200:400], keys[400:]]
    assert got == {k: ["ram", "disk", "disk", None, None][i % 5] for i, k in enumerate(keys)}
    assert list(got) == keys
    assert tq._http is not None and tq._http.timeout.total == 5
    session = tq._http
    await tq.query(keys[:1])             # the same session for every query
    assert tq._http is session
    await tq.close()
    assert session.closed


async def test_query_url_keeps_at_and_colon_and_quotes_the_rest(master):
    keys = ["m@tp_rank:0@c16@ab", "a b/c", "x?%&y"]
    m, addr = await master({})
    tq = TierQuery(addr)
    assert await tq.query(keys) == dict.fromkeys(keys)
    # "@" and ":" as they are; space, "%" and "&" percent-encoded ("/" and "?" are quoted too,
    # and left as they are by the HTTP client, as a query may hold them), so each key reaches
    # the master whole
    assert m.raw == ["/batch_query_keys?keys=m@tp_rank:0@c16@ab,a%20b/c,x?%25%26y"]
    assert m.asked == [keys]
    await tq.close()


async def test_query_without_data_finds_nothing(master):
    m, addr = await master({}, data_null=True)
    tq = TierQuery(addr)
    assert await tq.query(["a", "b"]) == {"a": None, "b": None}
    await tq.close()


async def test_tiers_count_the_keys_they_could_not_attribute(master):
    keys = [f"k{i}" for i in range(10)]
    m, addr = await master({k: entry(i) for i, k in enumerate(keys) if i % 5 != 4})
    tq = TierQuery(addr)
    # keys 3, 4, 8, 9 have no replica in the reply: taken as RAM and counted unknown
    assert await tq.tiers(keys) == ["ram", "disk", "disk", "ram", "ram"] * 2
    assert tq.unknown == 4
    assert await tq.tiers([]) == [] and tq.unknown == 4 and len(m.asked) == 1
    await tq.close()


async def test_tiers_without_the_master_address_are_unknown_ram(caplog):
    tq = TierQuery(None)
    with caplog.at_level(logging.WARNING, logger="adev.emulator.store"):
        assert await tq.tiers(["a", "b", "c"]) == ["ram"] * 3 and tq.unknown == 3
    assert caplog.records == []          # nothing was asked, so nothing failed
    assert await tq.tiers([]) == [] and tq.unknown == 3
    await tq.close()                     # no session was opened
    assert tq._http is None


async def test_failed_query_is_logged_and_every_key_counted_unknown(master, caplog):
    m, addr = await master({}, status=500)
    tq = TierQuery(addr)
    with caplog.at_level(logging.WARNING, logger="adev.emulator.store"):
        assert await tq.tiers(["a", "b"]) == ["ram", "ram"]
    assert tq.unknown == 2 and m.asked == [["a", "b"]]
    [rec] = caplog.records
    # the master's 500 reply "boom" is no JSON: the error names why
    assert rec.getMessage() == "tier query failed: Expecting value: line 1 column 1 (char 0)"
    assert rec.levelno == logging.WARNING
    await tq.close()


async def test_sampled_just_past_two_strides_queries_the_samples():
    asked = []
    tq = TierQuery("x")

    async def fake_query(ks):
        asked.append(list(ks))
        return dict.fromkeys(ks, "ram")
    tq.query = fake_query
    keys = [f"k{i}" for i in range(33)]
    # 33 > 2 x 16: keys 0, 16, 32 (32 is also the last); one tier throughout: no refinement
    assert await tq.sampled(keys) == ["ram"] * 33
    assert asked == [["k0", "k16", "k32"]]
    asked.clear()
    # a smaller stride: 9 keys, stride 4 -> 0, 4, 8
    assert await tq.sampled(keys[:9], stride=4) == ["ram"] * 9 and asked == [["k0", "k4", "k8"]]
