"""Third-party parity: AIPerf against an emulated endpoint (prints what it checked; exit 1 on a
mismatch).

Starts one emulated endpoint (``gpu-only``, no store, time scale 50, ``--policy``: default
``oracle``, the stack's default, whose natural replies are shorter than asked, so exact lengths
show that ``ignore_eos`` is honoured; ``replay`` is what a trace replay runs) and runs AIPerf
twice against it, as a new user would:

1. ``--endpoint-type chat --streaming`` on synthetic prompts with ``ignore_eos`` and
   ``--use-server-token-count --per-chunk-usage`` (continuous usage stats): no request may fail
   and every reply must have exactly the requested length (about 700 tokens, AIPerf's
   ``osl_mismatch_diff_pct`` 0; the oracle's own replies are shorter);
2. AIPerf's own Mooncake-trace replay (``--custom-dataset-type mooncake_trace``, the first
   ``--trace-lines`` rows of ``--trace``): every reply's server-reported completion tokens must be
   exactly the trace row's ``output_length``.

AIPerf runs in a venv of its own (``--aiperf``, default ``.venv-aiperf/bin/aiperf``, which ``make test`` installs;
``python3.12 -m venv V && V/bin/pip install aiperf``). With no network it cannot download a
tokenizer, so a small byte-level BPE tokenizer is built with that venv's ``tokenizers`` and put
in a private Hugging Face cache as ``local/adevtok``.

    .venv/bin/python bench/check_aiperf.py --trace TRACE.jsonl [--trace-lines 40] [--requests 20]
        [--policy oracle|replay|length]
"""
from __future__ import annotations

import argparse
import collections
import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import httpx  # noqa: E402

from adev.config import ROOT, StackConfig, from_dict  # noqa: E402
from adev.stack.lifecycle import endpoint_command, endpoint_env  # noqa: E402
from tests.emulator.helpers import free_port  # noqa: E402

TOKENIZER = """
import random, sys
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast
random.seed(0)
words = ["the", "store", "cache", "block", "prefix", "token", "agent", "test", "patch", "file"]
text = [" ".join(random.choice(words) + random.choice(["", "s", "ed"]) for _ in range(50))
        for _ in range(2000)]
tok = Tokenizer(models.BPE(unk_token="[UNK]"))
tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
tok.decoder = decoders.ByteLevel()
tok.train_from_iterator(text, trainers.BpeTrainer(
    vocab_size=4000, special_tokens=["[UNK]", "<|endoftext|>"],
    initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]",
                        eos_token="<|endoftext|>").save_pretrained(sys.argv[1])
"""


def offline_tokenizer(aiperf: Path, hf_home: Path) -> str:
    """Build ``local/adevtok`` in ``hf_home``'s hub cache; returns its name."""
    snap = hf_home / "hub" / "models--local--adevtok"
    rev = "0" * 39 + "1"
    (snap / "refs").mkdir(parents=True, exist_ok=True)
    (snap / "refs" / "main").write_text(rev)
    subprocess.run([str(aiperf.parent / "python"), "-c", TOKENIZER, str(snap / "snapshots" / rev)],
                   check=True, capture_output=True)
    return "local/adevtok"


def start_endpoint(work: Path, policy: str) -> tuple[subprocess.Popen, str, str]:
    st = from_dict(StackConfig, {"configuration": "gpu-only", "policy": policy, "time_scale": 50.0,
                                 "endpoints": [{"name": "coder"}]}, "stack")
    cfg = work / "stack.json"
    cfg.write_text(json.dumps(dataclasses.asdict(st)))
    port = free_port()
    cmd = endpoint_command("adev.emulator.server", cfg, "coder", port, None, None)
    log = open(work / "endpoint.log", "ab")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=endpoint_env(st, None),
                            cwd=str(ROOT))
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if httpx.get(url + "/health", timeout=0.5).status_code == 200:
                model = httpx.get(url + "/v1/models").json()["data"][0]["id"]
                return proc, url, model
        except httpx.HTTPError:
            time.sleep(0.2)
    proc.kill()
    raise RuntimeError(f"endpoint did not come up; see {work / 'endpoint.log'}")


def aiperf_run(aiperf: Path, env: dict[str, str], out: Path, args: list[str]) -> list[dict]:
    cmd = [str(aiperf), "profile", *args, "--artifact-dir", str(out)]
    with open(out.with_suffix(".log"), "w") as log:
        rc = subprocess.run(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, timeout=900).returncode
    if rc != 0:
        raise RuntimeError(f"aiperf exited {rc}; see {out.with_suffix('.log')}")
    return [json.loads(line) for line in (out / "profile_export.jsonl").read_text().splitlines()]


def metric(rec: dict, name: str) -> float | None:
    m = rec.get("metrics", {}).get(name)
    return m.get("value") if isinstance(m, dict) else None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--aiperf", type=Path, default=Path(os.environ.get(
        "ADEV_AIPERF", str(Path(__file__).resolve().parent.parent / ".venv-aiperf" / "bin" / "aiperf"))))
    ap.add_argument("--trace", type=Path, required=True,
                    help="a Mooncake JSONL trace (timestamp, input_length, output_length, hash_ids)")
    ap.add_argument("--trace-lines", type=int, default=40)
    ap.add_argument("--requests", type=int, default=20)
    ap.add_argument("--policy", default="oracle", help="the endpoint's policy (stack.policy)")
    a = ap.parse_args()
    if not a.aiperf.exists():
        print(f"check_aiperf: no aiperf at {a.aiperf} (--aiperf or ADEV_AIPERF)", file=sys.stderr)
        return 2
    if not a.trace.exists():
        print(f"check_aiperf: --trace {a.trace} not found", file=sys.stderr)
        return 2
    work = Path(tempfile.mkdtemp(prefix="adev-aiperf-"))
    env = dict(os.environ, HF_HOME=str(work / "hf"), HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    tok = offline_tokenizer(a.aiperf, work / "hf")
    rows = [json.loads(x) for x in a.trace.read_text().splitlines()[:a.trace_lines]]
    (work / "trace.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    proc, url, model = start_endpoint(work, a.policy)
    bad = 0
    try:
        base = ["--model", model, "--url", url, "--tokenizer", tok, "--streaming",
                "--extra-inputs", "ignore_eos:true"]
        recs = aiperf_run(a.aiperf, env, work / "chat", base + [
            "--endpoint-type", "chat", "--concurrency", "4", "--request-count", str(a.requests),
            "--synthetic-input-tokens-mean", "800", "--output-tokens-mean", "700",
            "--output-tokens-stddev", "30", "--use-server-token-count", "--per-chunk-usage"])
        errors = sum(1 for r in recs if r.get("error"))
        off = [metric(r, "osl_mismatch_diff_pct") for r in recs if metric(r, "osl_mismatch_diff_pct")]
        print(f"chat, streaming, synthetic: {len(recs)} requests, {errors} errors, "
              f"{len(off)} replies not of the requested length")
        bad += errors + len(off) + (len(recs) != a.requests)

        recs = aiperf_run(a.aiperf, env, work / "mooncake", base + [
            "--endpoint-type", "completions", "--input-file", str(work / "trace.jsonl"),
            "--custom-dataset-type", "mooncake_trace", "--concurrency", "8",
            "--request-count", str(len(rows))])
        want = collections.Counter((r["input_length"], r["output_length"]) for r in rows)
        got = collections.Counter((metric(r, "input_sequence_length"), metric(r, "usage_completion_tokens"))
                                  for r in recs)
        wrong = sum((want - got).values())
        errors = sum(1 for r in recs if r.get("error"))
        print(f"completions, mooncake_trace ({a.trace.name}, first {len(rows)} rows): {len(recs)} "
              f"requests, {errors} errors, {wrong} replies not of the trace's output length")
        bad += errors + wrong + (len(recs) != len(rows))
    finally:
        proc.terminate()
        proc.wait(10)
    print("OK" if not bad else "MISMATCH", f"(policy {a.policy}; artifacts in {work})")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
