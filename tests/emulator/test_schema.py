"""The extension object: one definition, written by the server, read by the analysis."""
from __future__ import annotations

import msgspec
import pytest

from adev.analysis.run import SERVER_SCALARS, SERVER_TIERS, _flatten_calls
from adev.config import StackConfig, from_dict
from adev.emulator.engine import Request
from adev.emulator.http import dumps
from adev.emulator.schema import EndpointExtension, TokenSplit, decode, scalar_fields, token_fields
from adev.emulator.server import Endpoint


def test_adev_field_puts_every_value_in_its_field():
    ep = Endpoint(from_dict(StackConfig, {"configuration": "gpu-only", "policy": "length"}, "stack"),
                  "coder", None, None)
    # distinct values everywhere, so a field filled from the wrong source shows
    r = Request(rid="rid-1", prompt=[1] * 1000, out_ids=[2] * 10, finish_reason="stop",
                t_arrival=10.0, arrival_mono=500.0, t_admit=10.5, t_ready=11.25, t_prefill_done=13.0,
                t_first=14.0, gpu_hit_tokens=160, ram_blocks=3, disk_blocks=2, kv_transfer_tokens=7,
                lookup_s=0.125, load_s=0.5, read_host_s=0.875, transfer_s=0.0625,
                store_keys_looked_up=41, store_hit_blocks=5, put_blocks=43, put_refused_blocks=44,
                store_errors=45, preemptions=46)
    e = decode(dumps(ep.adev_field(r, 501.0, 502.0, (500.25, 500.75), "consume")))
    assert (e.request_id, e.t_arrival_mono, e.t_first_token_mono, e.t_end_mono) == ("rid-1", 500.0, 501.0, 502.0)
    assert (e.t_first_byte_sent_mono, e.t_first_token_sent_mono) == (500.25, 500.75)
    assert e.queue_s == 0.5 and e.lookup_s == 0.125 and e.load_s == 0.5 and e.read_path_s == 0.625
    assert e.read_path_host_s == 0.875 and e.transfer_s == 0.0625
    assert e.prefill_s == 13.0 - 11.25 and e.ttft_s == 4.0
    # 1000 = 160 GPU + 48 RAM + 32 disk + 7 transferred + 753 computed
    assert msgspec.structs.asdict(e.tokens) == {"gpu": 160, "store_ram": 48, "store_disk": 32,
                                                "kv_transfer": 7, "computed": 753}
    assert (e.store_keys_looked_up, e.store_hit_blocks, e.put_blocks, e.put_refused_blocks,
            e.store_errors, e.preemptions) == (41, 5, 43, 44, 45, 46)
    assert (e.configuration, e.time_scale, e.kv_role, e.transfer) == ("gpu-only", 10.0, "both", "consume")


def test_decode_rejects_a_value_outside_its_literal():
    good = dumps(EndpointExtension("r", 1.0, None, 2.0, None, None, 0.0, 0.0, 0.0, 0.0, None, 0.0,
                                   0.0, None, TokenSplit(0, 0, 0, 0, 5), 0, 0, 0, 0, 0, 0,
                                   "gpu-only", 10.0, "both", "none"))
    assert decode(good).tokens.computed == 5
    with pytest.raises(msgspec.ValidationError, match="transfer"):
        decode(good.replace(b'"transfer":"none"', b'"transfer":"sideways"'))


def test_analysis_reads_the_schema_fields():
    assert SERVER_SCALARS == scalar_fields() and SERVER_TIERS == token_fields()
    assert "ttft_s" in SERVER_SCALARS and "transfer_s" in SERVER_SCALARS
    assert "configuration" not in SERVER_SCALARS and "tokens" not in SERVER_SCALARS
    assert SERVER_TIERS == ("gpu", "store_ram", "store_disk", "kv_transfer", "computed")
    df = _flatten_calls([{"server": {"ttft_s": 0.25, "transfer_s": 0.5,
                                     "tokens": {"gpu": 16, "kv_transfer": 3, "computed": 1}}}])
    assert df["srv_ttft_s"][0] == 0.25 and df["srv_transfer_s"][0] == 0.5
    assert df["srv_tok_kv_transfer"][0] == 3 and df["srv_tok_gpu"][0] == 16
