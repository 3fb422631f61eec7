"""Prometheus text -> samples: the one scraper for vLLM, the emulator and the Mooncake master.

Samples are keyed ``name{label="v",...}`` with labels sorted, values floats. Counters keep their
exported ``_total`` names. Parsing uses ``prometheus_client``'s parser.
"""
from __future__ import annotations

import httpx
from prometheus_client.parser import text_string_to_metric_families


def sample_key(name: str, labels: dict[str, str]) -> str:
    if not labels:
        return name
    inner = ",".join(f'{k}="{labels[k]}"' for k in sorted(labels))
    return f"{name}{{{inner}}}"


def parse_metrics(text: str) -> dict[str, float]:
    """Parse exposition text; tolerant of Mooncake's metric names (no TYPE lines, odd suffixes)."""
    out: dict[str, float] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[sample_key(s.name, s.labels)] = float(s.value)
    return out


def total(samples: dict[str, float], name: str, **match: str) -> float | None:
    """Sum of all samples named ``name`` whose labels include ``match``; None if absent."""
    found = False
    acc = 0.0
    for key, v in samples.items():
        base, _, rest = key.partition("{")
        if base != name:
            continue
        if match and not all(f'{k}="{val}"' in rest for k, val in match.items()):
            continue
        found = True
        acc += v
    return acc if found else None


async def scrape(client: httpx.AsyncClient, url: str, timeout: float = 5.0) -> dict[str, float]:
    """GET ``url`` and parse it; raises httpx errors to the caller (which records them)."""
    r = await client.get(url, timeout=timeout)
    r.raise_for_status()
    return parse_metrics(r.text)


def scrape_sync(url: str, timeout: float = 5.0) -> dict[str, float]:
    r = httpx.get(url, timeout=timeout)
    r.raise_for_status()
    return parse_metrics(r.text)
