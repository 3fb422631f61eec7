"""Disaggregated prefill on the emulated endpoints (vLLM's ``kv_transfer_params`` protocol).

vLLM's disaggregated serving (a proxy in front of prefill and decode instances, as in vLLM's
``toy_proxy_server.py``) sends each request twice:

1. to a prefill instance (``kv_role`` producer) with ``kv_transfer_params:
   {"do_remote_decode": true, "do_remote_prefill": false, ...}``, ``max_tokens: 1``, not streamed;
   the response carries ``kv_transfer_params: {"do_remote_prefill": true, "do_remote_decode":
   false, "remote_engine_id", "remote_block_ids", "remote_host", "remote_port", "tp_size"}``;
2. to a decode instance (``kv_role`` consumer) with those ``kv_transfer_params``; the decode
   instance pulls the prompt's KV from the prefill instance and generates the reply.

The emulated endpoints take both halves. A producer request runs as any request (store lookup and
load, prefill) and stops after its first token. A consumer request is admitted like any other
(local prefix lookup, blocks for the whole prompt), skips the store read path, and waits the
modelled transfer of the prompt tokens its own GPU prefix cache lacks:

    transfer_s = link.latency_s + (prompt tokens - local hit tokens) * bytes_per_token
                 / link.bytes_per_s

then computes the prompt's last token itself (vLLM recomputes it) and decodes. The link is a
profile in ``stacks/profiles/links/`` (:class:`LinkProfile`, ``stack.kv_link``). The transfer
is not a real copy between the processes: only its time is modelled.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from adev.config import KvRole, load, resolve

Transfer = Literal["none", "produce", "consume"]
"""What a request asks of this endpoint: nothing special, prefill for a remote decode, or decode
from a remote prefill."""


@dataclass(frozen=True)
class LinkProfile:
    """The prefill-to-decode KV link: ``time = latency_s + bytes / bytes_per_s``."""

    name: str
    latency_s: float = field(metadata={"min": 0})
    bytes_per_s: float = field(metadata={"positive": True})
    source: str = ""


def load_link_profile(name_or_path: str) -> LinkProfile:
    return load(LinkProfile, resolve(name_or_path, "stacks/profiles/links"))


def transfer_kind(body: dict[str, Any], role: KvRole) -> Transfer:
    """What the request's ``kv_transfer_params`` ask of an endpoint of this role. Parameters the
    role does not serve are ignored, as a vLLM instance without that connector side ignores
    them: the request then runs as a plain one."""
    p = body.get("kv_transfer_params")
    if not isinstance(p, dict):
        return "none"
    if p.get("do_remote_prefill") is True and role in ("consumer", "both"):
        return "consume"
    if p.get("do_remote_decode") is True and role in ("producer", "both"):
        return "produce"
    return "none"


def producer_params(engine_id: str, host: str, port: int | None, prompt_tokens: int,
                    block_size: int) -> dict[str, Any]:
    """The ``kv_transfer_params`` a producer answers with (NixlConnector's keys).
    ``remote_block_ids`` are the prompt's block positions (the emulator has no physical ids)."""
    n = -(-prompt_tokens // block_size)
    return {"do_remote_prefill": True, "do_remote_decode": False,
            "remote_block_ids": list(range(n)), "remote_engine_id": engine_id,
            "remote_host": host, "remote_port": port, "tp_size": 1}
