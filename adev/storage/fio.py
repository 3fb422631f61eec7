"""Storage characterisation with fio at the model's block size (the source study's job).

The job, per the source study of tiered KV offloading::

    fio --name=adev-kv --filename=TARGET --rw=randrw --rwmixread=75 --bs=<block bytes>
        --iodepth=1 --numjobs=16 --direct=1 --ioengine=libaio --time_based --runtime=<s>
        --size=<bytes> --group_reporting --output-format=json --percentile_list=50:99

``--group_reporting`` merges the 16 jobs, so the JSON holds one job whose read and write
completion-latency percentiles (``clat_ns``) cover every I/O. :func:`parse_fio_json` turns it into
a :class:`FioResult`: p50/p99 completion latency in seconds and bandwidth in bytes/s per
direction. Direct I/O (``O_DIRECT``) is refused by some filesystems (tmpfs, some overlay
mounts): the run is then repeated once with ``--direct=0`` and the result says so
(``direct=False``, ``direct_note``); ``--no-direct`` asks for buffered I/O from the start.
"""
from __future__ import annotations

import datetime
import json
import os
import platform
import shutil
import stat
import subprocess
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..config import ConfigError

FIO_PACKAGE = "fio"
DIRECT_IO_ERRORS = ("O_DIRECT", "direct=1", "Invalid argument", "EINVAL", "error=22")
"""Markers of fio's failure to open or write with O_DIRECT (fio: "looks like your file system does
not support direct=1/buffered=0", "destination does not support O_DIRECT", errno 22)."""
TARGET_FILE = "adev-fio.dat"


class FioError(RuntimeError):
    """fio is missing, failed, or wrote output that is not its JSON report."""


@dataclass
class FioDirection:
    """One direction (read or write) of a fio job: completion latency and bandwidth."""

    ios: int
    p50_s: float | None            # clat_ns percentile 50 / 1e9; None when no I/O
    p99_s: float | None            # clat_ns percentile 99 / 1e9
    mean_s: float | None           # clat_ns mean / 1e9
    bw_bytes_per_s: float          # fio's bw_bytes (bytes moved / runtime)
    iops: float


@dataclass
class FioResult:
    target: str
    block_bytes: int
    runtime_s: float
    size_bytes: int
    numjobs: int
    iodepth: int
    rwmixread: int
    direct: bool
    direct_note: str | None
    read: FioDirection
    write: FioDirection
    fio_version: str
    command: list[str]
    date: str
    host: str = field(default_factory=platform.node)
    block_source: str = ""         # what gave the block size (a model profile, a config.json)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, d: dict[str, Any], where: str = "fio result") -> "FioResult":
        try:
            return cls(**{**d, "read": FioDirection(**d["read"]),
                          "write": FioDirection(**d["write"])})
        except (KeyError, TypeError) as e:
            raise ConfigError(f"{where}: not an adev fio result ({e})") from None


def fio_command(target: str, *, block_bytes: int, runtime_s: float, size_bytes: int,
                direct: bool = True, numjobs: int = 16, iodepth: int = 1,
                rwmixread: int = 75, fio: str = "fio") -> list[str]:
    """The source study's fio job against ``target`` (a file path), JSON output."""
    return [fio, "--name=adev-kv", f"--filename={target}", "--rw=randrw",
            f"--rwmixread={rwmixread}", f"--bs={block_bytes}", f"--iodepth={iodepth}",
            f"--numjobs={numjobs}", f"--direct={1 if direct else 0}", "--ioengine=libaio",
            "--time_based", f"--runtime={max(1, round(runtime_s))}", f"--size={size_bytes}",
            "--group_reporting", "--output-format=json", "--percentile_list=50:99"]


def _direction(d: dict[str, Any]) -> FioDirection:
    clat = d.get("clat_ns") or {}
    pct = clat.get("percentile") or {}

    def p(q: str) -> float | None:
        for k, v in pct.items():
            if abs(float(k) - float(q)) < 1e-9:
                return float(v) / 1e9
        return None
    ios = int(d.get("total_ios", 0))
    return FioDirection(ios=ios, p50_s=p("50") if ios else None, p99_s=p("99") if ios else None,
                        mean_s=float(clat["mean"]) / 1e9 if ios and "mean" in clat else None,
                        bw_bytes_per_s=float(d.get("bw_bytes", 0.0)),
                        iops=float(d.get("iops", 0.0)))


def parse_fio_json(text: str) -> tuple[FioDirection, FioDirection, str]:
    """fio's ``--output-format=json`` report -> (read, write, fio version). fio may print
    warnings before the JSON; they are skipped."""
    i = text.find("{")
    if i < 0:
        raise FioError("fio wrote no JSON report")
    try:
        doc = json.loads(text[i:])
    except json.JSONDecodeError as e:
        raise FioError(f"fio's JSON report is malformed: {e}") from None
    jobs = doc.get("jobs") or []
    if not jobs:
        raise FioError("fio's JSON report has no jobs")
    job = jobs[0]
    if job.get("error"):
        raise FioError(f"fio job error {job['error']}")
    return _direction(job.get("read") or {}), _direction(job.get("write") or {}), \
        str(doc.get("fio version", ""))


def resolve_target(target: str, *, allow_block_device: bool = False) -> tuple[str, bool]:
    """The file fio writes: ``target`` itself, or ``target/adev-fio.dat`` for a directory.
    Returns (path, created_by_us). A block device is refused unless allowed (randrw writes to
    it and destroys its data)."""
    p = Path(target)
    if p.is_dir():
        f = p / TARGET_FILE
        return str(f), not f.exists()
    if p.exists() and stat.S_ISBLK(p.stat().st_mode):
        if not allow_block_device:
            raise ConfigError(f"{target}: is a block device; the job writes to it and destroys its "
                              "data; pass --allow-block-device to run it anyway")
        return str(p), False
    if not p.parent.exists():
        raise ConfigError(f"{target}: directory {p.parent} does not exist")
    return str(p), not p.exists()


def _direct_refused(out: str) -> bool:
    return any(s in out for s in DIRECT_IO_ERRORS)


def _direct_refused_run(proc: subprocess.CompletedProcess) -> bool:
    """fio failed (exit status, or a job error 22 = EINVAL in its report) for want of O_DIRECT."""
    out = proc.stdout + proc.stderr
    if proc.returncode != 0:
        return _direct_refused(out)
    try:
        parse_fio_json(proc.stdout)
    except FioError as e:
        return "error 22" in str(e) or _direct_refused(out)
    return False


def run_fio(target: str, *, block_bytes: int, runtime_s: float = 60.0,
            size_bytes: int = 1 << 30, direct: bool = True, numjobs: int = 16,
            iodepth: int = 1, rwmixread: int = 75, allow_block_device: bool = False,
            keep_file: bool = False, block_source: str = "") -> FioResult:
    """Run the job (see the module doc) and parse its report."""
    if block_bytes <= 0 or block_bytes % 512:
        raise ConfigError(f"--block-bytes: {block_bytes} must be a positive multiple of 512 "
                          "(direct I/O needs sector-aligned blocks)")
    if size_bytes < block_bytes:
        raise ConfigError(f"--size: {size_bytes} must be at least one block ({block_bytes})")
    fio = shutil.which("fio")
    if fio is None:
        raise FioError(f"fio not found on PATH; install the Debian package {FIO_PACKAGE}")
    path, created = resolve_target(target, allow_block_device=allow_block_device)
    note = None if direct else "buffered I/O requested (--no-direct)"
    try:
        cmd = fio_command(path, block_bytes=block_bytes, runtime_s=runtime_s,
                          size_bytes=size_bytes, direct=direct, numjobs=numjobs, iodepth=iodepth,
                          rwmixread=rwmixread, fio=fio)
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=runtime_s + 300)
        if direct and _direct_refused_run(proc):
            note = ("direct I/O refused by the filesystem of "
                    f"{path} ({_first_error(proc.stdout + proc.stderr)}); rerun with --direct=0 "
                    "(buffered: latencies include the page cache)")
            direct = False
            cmd = fio_command(path, block_bytes=block_bytes, runtime_s=runtime_s,
                              size_bytes=size_bytes, direct=False, numjobs=numjobs,
                              iodepth=iodepth, rwmixread=rwmixread, fio=fio)
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=runtime_s + 300)
        if proc.returncode != 0:
            raise FioError(f"fio exited {proc.returncode}: "
                           f"{_first_error(proc.stdout + proc.stderr)}")
        read, write, version = parse_fio_json(proc.stdout)
    finally:
        if created and not keep_file:
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
    return FioResult(target=path, block_bytes=block_bytes, runtime_s=runtime_s,
                     size_bytes=size_bytes, numjobs=numjobs, iodepth=iodepth, rwmixread=rwmixread,
                     direct=direct, direct_note=note, read=read, write=write, fio_version=version,
                     command=cmd, date=datetime.datetime.now(datetime.timezone.utc).isoformat(
                         timespec="seconds"), block_source=block_source)


def _first_error(out: str) -> str:
    lines = [ln.strip() for ln in out.splitlines() if ln.strip()]
    errs = [ln for ln in lines if "err" in ln.lower() or "fio:" in ln]
    return (errs or lines or ["no output"])[0][:300]


def save_result(res: FioResult, out: str | Path) -> Path:
    p = Path(out)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_suffix(p.suffix + ".tmp")
    tmp.write_text(json.dumps(res.to_json(), indent=2) + "\n")
    os.replace(tmp, p)
    return p


def load_result(path: str | Path) -> FioResult:
    p = Path(path)
    try:
        d = json.loads(p.read_text())
    except FileNotFoundError:
        raise ConfigError(f"{p}: file not found") from None
    except json.JSONDecodeError as e:
        raise ConfigError(f"{p}:{e.lineno}: invalid JSON: {e.msg}") from None
    if not isinstance(d, dict):
        raise ConfigError(f"{p}: expected a JSON object")
    return FioResult.from_json(d, str(p))
