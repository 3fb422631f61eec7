"""Role prompts and settings, loaded from ``roles/*.md`` (editable without touching code).

Each file is Markdown with TOML front matter between ``+++`` lines::

    +++
    endpoint = "reasoner"          # logical endpoint: coder | reasoner (a fleet may remap)
    tools = ["read_file", ...]     # tool names from adev.session.tools.SCHEMAS
    max_tokens = 4096
    temperature = 0.4
    step_limit = 6                 # model calls per role turn at most
    +++
    ## Role: architect
    ... template text with $round, $max_rounds, $task, $modules, $module, $module_summary ...

``roles/system.md`` (front matter ``kind = "system"``) is the system prompt every role starts with;
the task spec follows it. The five LLM roles are architect, contract, test_writer, implementer,
integrator. Templates use ``string.Template`` placeholders so code braces in prompts are safe.
"""
from __future__ import annotations

import string
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal

from ..config import ROOT, ConfigError, from_dict
from .tools import SCHEMAS

ROLES_DIR = ROOT / "roles"
ROLE_NAMES = ("architect", "contract", "test_writer", "implementer", "integrator")


@dataclass(frozen=True)
class RoleSettings:
    endpoint: Literal["coder", "reasoner"]
    tools: list[str] = field(default_factory=lambda: ["list_files", "read_file", "write_file",
                                                       "finish"])
    max_tokens: int = field(default=4096, metadata={"positive": True})
    temperature: float = field(default=0.4, metadata={"min": 0, "max": 2})
    step_limit: int = field(default=6, metadata={"min": 1, "max": 100})
    no_tool_limit: int = field(default=2, metadata={"min": 1, "max": 20,
                                                    "help": "consecutive replies without a valid "
                                                            "tool call before the role gives up"})

    def validate(self, where: str) -> None:
        bad = [t for t in self.tools if t not in SCHEMAS]
        if bad:
            raise ConfigError(f"{where}.tools: unknown tool(s) {bad}; allowed: "
                              + ", ".join(sorted(SCHEMAS)))
        if "finish" not in self.tools:
            raise ConfigError(f"{where}.tools: must include 'finish'")


@dataclass(frozen=True)
class Role:
    name: str
    settings: RoleSettings
    template: str

    def render(self, **values: object) -> str:
        return string.Template(self.template).safe_substitute(
            {k: str(v) for k, v in values.items()}).strip() + "\n"


@dataclass(frozen=True)
class Roles:
    system_prompt: str
    roles: dict[str, Role]

    def __getitem__(self, name: str) -> Role:
        return self.roles[name]

    def with_overrides(self, overrides: dict[str, dict]) -> Roles:
        """Roles with settings replaced per role, e.g. ``{"integrator": {"endpoint": "coder"}}``
        (how a fleet file remaps roles to endpoints)."""
        roles = dict(self.roles)
        for name, over in overrides.items():
            if name not in roles:
                raise ConfigError(f"roles.{name}: unknown role; roles: {', '.join(ROLE_NAMES)}")
            base = roles[name].settings
            merged = {**{f: getattr(base, f) for f in base.__dataclass_fields__}, **over}
            roles[name] = replace(roles[name], settings=from_dict(RoleSettings, merged,
                                                                    f"roles.{name}"))
        return Roles(self.system_prompt, roles)


def split_front_matter(text: str, where: str) -> tuple[dict, str]:
    import tomllib
    if not text.startswith("+++"):
        raise ConfigError(f"{where}: must start with a '+++' TOML front matter block")
    end = text.find("\n+++", 3)
    if end < 0:
        raise ConfigError(f"{where}: front matter is not closed by a '+++' line")
    head = text[3:end]
    body = text[end + 4:].lstrip("\n")
    try:
        return tomllib.loads(head), body
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{where}: invalid TOML front matter: {e}") from None


def load_roles(folder: str | Path | None = None) -> Roles:
    """Load ``system.md`` and the five role files from ``folder`` (default ``roles/``)."""
    d = Path(folder) if folder else ROLES_DIR
    sys_path = d / "system.md"
    if not sys_path.is_file():
        raise ConfigError(f"{d}: system.md is missing")
    meta, system = split_front_matter(sys_path.read_text(), str(sys_path))
    if set(meta) - {"kind"}:
        raise ConfigError(f"{sys_path}: unknown front matter key(s) "
                          f"{sorted(set(meta) - {'kind'})}; allowed: kind")
    roles: dict[str, Role] = {}
    for name in ROLE_NAMES:
        p = d / f"{name}.md"
        if not p.is_file():
            raise ConfigError(f"{d}: role file {name}.md is missing (roles: "
                              f"{', '.join(ROLE_NAMES)})")
        meta, body = split_front_matter(p.read_text(), str(p))
        try:
            settings = from_dict(RoleSettings, meta, name)
        except ConfigError as e:
            raise ConfigError(f"{p}: {e}") from None
        roles[name] = Role(name, settings, body)
    return Roles(system.strip() + "\n", roles)
