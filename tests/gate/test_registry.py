"""The gate registry: one table, unknown names answered with the available ones, the unconfined
gate refused against external endpoints unless allowed; no import cycle among gate modules."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

import adev.gate
from adev.config import ConfigError
from adev.fleet.config import fleet_from_dict
from adev.gate.local import LocalGate
from adev.gate.registry import GATES, check_gate_policy, gate_kind, make_gate


def test_table_and_unknown_name():
    assert list(GATES) == ["local", "local-unconfined", "vm"]
    with pytest.raises(ConfigError, match=r"fleet\.gate: unknown gate executor 'cloud'; "
                                          r"available: local, local-unconfined, vm"):
        gate_kind("cloud", "fleet.gate")
    g = make_gate("local")
    assert isinstance(g, LocalGate) and g.confined and g.name == "local"
    u = make_gate("local-unconfined")
    assert isinstance(u, LocalGate) and not u.confined and u.name == "local-unconfined"


def test_unconfined_refused_against_external_endpoints():
    with pytest.raises(ConfigError, match="external.*--allow-unconfined-gate"):
        make_gate("local-unconfined", external=True)
    assert not make_gate("local-unconfined", external=True, allow_unconfined=True).confined
    assert check_gate_policy("local", external=True, allow_unconfined=False).confined
    assert check_gate_policy("vm", external=True, allow_unconfined=False).confined


def test_fleet_config_uses_the_registry(tmp_path):
    with pytest.raises(ConfigError, match="fleet.gate: unknown gate executor 'cloud'"):
        fleet_from_dict({"gate": "cloud"})
    ext = tmp_path / "ext.toml"
    ext.write_text('[stack]\nmode = "external"\n[[stack.endpoints]]\nname = "coder"\n'
                   'base_url = "http://127.0.0.1:9/v1"\n')
    cfg = fleet_from_dict({"gate": "local-unconfined", "stack": str(ext)})
    with pytest.raises(ConfigError, match="fleet.gate: 'local-unconfined'"):
        cfg.stack_config()
    ok = fleet_from_dict({"gate": "local-unconfined", "stack": str(ext),
                          "allow_unconfined_gate": True})
    assert ok.stack_config().mode == "external"
    assert fleet_from_dict({"gate": "local", "stack": str(ext)}).stack_config().mode == "external"


def test_no_import_cycle_among_gate_modules():
    """Each gate module's imports of sibling modules (top level or inside functions) form no
    cycle (nvme.py and ssh.py used to import each other)."""
    pkg = Path(adev.gate.__file__).parent
    deps: dict[str, set[str]] = {}
    for f in pkg.glob("*.py"):
        names = set()
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 1:
                if node.module:
                    names.add(node.module.split(".")[0])
                else:
                    names.update(a.name for a in node.names)
        deps[f.stem] = {n for n in names if (pkg / f"{n}.py").exists()}

    def reach(start: str) -> set[str]:
        seen, todo = set(), list(deps[start])
        while todo:
            m = todo.pop()
            if m not in seen:
                seen.add(m)
                todo.extend(deps.get(m, ()))
        return seen
    cyclic = sorted(m for m in deps if m in reach(m))
    assert cyclic == []


def test_recorded_executor_names_are_the_schema_alias():
    """GateRecord.executor is typed by records.GateExecutor: the registry's names plus the bare
    ssh executor that ``vm`` wraps, and nothing else."""
    from typing import get_args

    from adev.gate.ssh import SshGate
    from adev.records import GateExecutor
    assert set(get_args(GateExecutor)) == set(GATES) | {SshGate.name}
