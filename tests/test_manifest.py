"""Run manifests: config, versions, git commit, host, seeds; secrets never written."""
from __future__ import annotations

import json
import subprocess

from adev import event_loop
from adev.config import ROOT, load_stack
from adev.manifest import build_manifest, git_state, redact
from adev.records import RunDir


def test_redacts_secret_keys_recursively():
    cfg = {"llm": {"api_key": "sk-live-123", "base_url": "http://x"},
           "gate": {"ssh": {"private_key": "-----BEGIN", "user": "adev"}},
           "tokens": 5, "access_token": "tok", "password": "hunter2", "secret": "",
           "list": [{"Auth_Token": "nested-auth-value"}]}
    m = build_manifest("run-1", config=cfg, command=["adev", "fleet"])
    text = json.dumps(m)
    for s in ("sk-live-123", "-----BEGIN", "hunter2", "\"tok\"", "nested-auth-value"):
        assert s not in text
    c = m["config"]
    assert c["llm"]["api_key"] == "<redacted>" and c["llm"]["base_url"] == "http://x"
    assert c["gate"]["ssh"]["private_key"] == "<redacted>" and c["gate"]["ssh"]["user"] == "adev"
    assert c["tokens"] == 5  # numbers are not secrets (token counts)
    assert c["list"][0]["Auth_Token"] == "<redacted>"
    assert redact({"key_count": 3}) == {"key_count": 3}


def test_includes_git_commit_versions_host_seeds(tmp_path):
    m = build_manifest("run-2", config=load_stack(), seeds={"fleet": 11}, time_scale=10.0)
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True,
                          text=True).stdout.strip()
    assert m["git"]["commit"] == head and len(head) == 40
    assert isinstance(m["git"]["dirty"], bool)
    assert m["packages"]["adev"] and m["packages"]["mooncake-transfer-engine-non-cuda"]
    assert m["host"]["hostname"] and m["host"]["cpus"] >= 1
    assert m["event_loop"] == event_loop.loop_name()  # the loop the run's stamps come from
    assert m["loop_scheduling"] == event_loop.scheduling()  # and how its thread was scheduled
    assert m["seeds"] == {"fleet": 11} and m["time_scale"] == 10.0
    assert m["config"]["store"]["lease_ttl_s"] == 5.0  # dataclass config -> plain dict
    rd = RunDir(tmp_path)
    rd.write_json("manifest.json", m)
    assert rd.manifest() == json.loads(json.dumps(m))


def test_git_state_outside_a_repo_is_null_with_reason(monkeypatch, tmp_path):
    import adev.manifest as manifest
    monkeypatch.setattr(manifest, "ROOT", tmp_path)
    g = git_state()
    assert g["commit"] is None and g["why"]


def test_redacts_credentials_in_urls_in_command_and_config():
    cfg = {"session": {"endpoints": {"coder": "http://alice:s3cr3t@gpu1:8000/v1",
                                     "reasoner": "https://tok-XYZ@gpu2/v1?api_key=k-987&x=1"}},
           "stack": {"endpoints": [{"name": "c", "base_url": "http://bob:pw-42@h:1/v1"}]}}
    cmd = ["adev", "session", "--endpoint", "coder=http://alice:s3cr3t@gpu1:8000/v1"]
    m = build_manifest("run-3", config=cfg, command=cmd)
    text = json.dumps(m)
    for s in ("alice", "s3cr3t", "tok-XYZ", "k-987", "bob", "pw-42"):
        assert s not in text
    eps = m["config"]["session"]["endpoints"]
    assert eps["coder"] == "http://<redacted>@gpu1:8000/v1"
    assert eps["reasoner"] == "https://<redacted>@gpu2/v1?api_key=<redacted>&x=1"
    assert m["config"]["stack"]["endpoints"][0]["base_url"] == "http://<redacted>@h:1/v1"
    assert m["command"][-1] == "coder=http://<redacted>@gpu1:8000/v1"
    # what is not a credential stays
    assert redact(["a@b.c", "http://h:8000/v1?x=1", "--rpc=127.0.0.1:1"]) == \
        ["a@b.c", "http://h:8000/v1?x=1", "--rpc=127.0.0.1:1"]
