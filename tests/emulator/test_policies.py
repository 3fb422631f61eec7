"""The policy registry, config validation against it, and the replay policy."""
from __future__ import annotations

import subprocess
import sys

import pytest

from adev.config import ROOT, ConfigError, StackConfig, from_dict
from adev.emulator.policies import POLICIES, check_policy, load_policy
from adev.emulator.policies.base import PolicyInputError, PolicyRequest


def test_every_registered_policy_loads():
    for name in POLICIES:
        p = load_policy(name, None, 0)
        assert p.name == name and callable(p.reply)


def test_unknown_names_are_answered_with_the_registered_ones():
    with pytest.raises(ValueError) as e:
        load_policy("echo", None, 0)
    assert str(e.value) == "policy: 'echo' is not a policy; allowed values: 'length', 'oracle', 'replay'"
    with pytest.raises(ConfigError, match=r"^stack\.policy: 'echo' is not a policy; allowed values: 'length'"):
        from_dict(StackConfig, {"policy": "echo"}, "stack")
    with pytest.raises(ValueError):
        check_policy(None)
    assert from_dict(StackConfig, {"policy": "replay"}, "stack").policy == "replay"


def test_stack_cli_offers_the_registry():
    import argparse

    from adev.stack.cli import _add_config_args
    p = argparse.ArgumentParser()
    _add_config_args(p, overrides=True)
    act = next(a for a in p._actions if a.dest == "policy")
    assert tuple(act.choices) == tuple(POLICIES)


def test_the_emulator_does_not_import_the_session_package():
    code = ("import sys, adev.emulator.server, adev.emulator.policies.oracle as o;"
            "o.Policy(None, 0)._task('kvblock-store');"
            "print(sorted(m for m in sys.modules if m.startswith('adev.session')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                         check=True)
    assert out.stdout.strip() == "[]"


def req(**kw) -> PolicyRequest:
    return PolicyRequest(model="m", messages=[], **kw)


def test_replay_policy():
    p = load_policy("replay", None, 0)
    assert p.reply(req(max_tokens=700, ignore_eos=True)).output_tokens == 700
    r = p.reply(req(extension={"recorded_output": {"token_ids": [5, 6, 7]}}))
    assert r.token_ids == [5, 6, 7]
    r = p.reply(req(max_tokens=40, extension={"recorded_output": {"text": "done."}}))
    assert r.content == "done." and r.output_tokens == 40
    for bad, msg in (({}, "no recorded output"),
                     ({"extension": {"recorded_output": {"token_ids": [1, "x"]}}}, "token_ids"),
                     ({"extension": {"recorded_output": {"text": 3}}}, "text"),
                     ({"extension": {"recorded_output": {}}}, "give token_ids or text"),
                     ({"extension": {"recorded_output": [1]}}, "expected an object")):
        with pytest.raises(PolicyInputError, match=msg):
            p.reply(req(**bad))
