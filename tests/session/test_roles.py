"""Role prompts and settings load from roles/*.md and validate with named errors."""
from __future__ import annotations

import shutil

import pytest

from adev.config import ConfigError
from adev.session.roles import ROLE_NAMES, ROLES_DIR, load_roles


def test_builtin_roles_load():
    roles = load_roles()
    assert set(roles.roles) == set(ROLE_NAMES)
    assert "specification follows" in roles.system_prompt
    for role in roles.roles.values():
        assert role.template.startswith("## Role: ")
        assert "finish" in role.settings.tools
        text = role.render(round=2, max_rounds=3, task="t", modules="- a", module="a.py",
                           module_summary="s")
        assert "This is round 2 of 3 of task `t`." in text and "$" not in text
    assert roles["implementer"].settings.endpoint == "coder"
    assert roles["architect"].settings.endpoint == "reasoner"


def test_overrides_remap_endpoint():
    roles = load_roles().with_overrides({"integrator": {"endpoint": "coder", "max_tokens": 100}})
    assert roles["integrator"].settings.endpoint == "coder"
    assert roles["integrator"].settings.max_tokens == 100
    with pytest.raises(ConfigError, match="roles.integrator.endpoint"):
        load_roles().with_overrides({"integrator": {"endpoint": "gpu9"}})
    with pytest.raises(ConfigError, match="roles.boss: unknown role"):
        load_roles().with_overrides({"boss": {}})


@pytest.mark.parametrize("front,match", [
    ('endpoint = "coder"\ntools = ["read_file", "rm"]', r"tools: unknown tool"),
    ('endpoint = "coder"\ntools = ["read_file"]', r"must include 'finish'"),
    ('endpoint = "gpu"', r"architect.endpoint: 'gpu' is not allowed"),
    ('endpoint = "coder"\nmax_tokens = 0', r"max_tokens: 0 must be greater than 0"),
    ('endpoint = "coder"\ncolour = 1', r"unknown key"),
])
def test_bad_front_matter_named(tmp_path, front, match):
    d = tmp_path / "roles"
    shutil.copytree(ROLES_DIR, d)
    (d / "architect.md").write_text(f"+++\n{front}\n+++\n## Role: architect\n")
    with pytest.raises(ConfigError, match=match):
        load_roles(d)


def test_missing_files(tmp_path):
    d = tmp_path / "roles"
    shutil.copytree(ROLES_DIR, d)
    (d / "contract.md").unlink()
    with pytest.raises(ConfigError, match="contract.md is missing"):
        load_roles(d)
    (d / "system.md").write_text("no front matter")
    with pytest.raises(ConfigError, match="front matter"):
        load_roles(d)
