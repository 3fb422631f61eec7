"""The verb CLI: every registered verb (and sub-command) answers --help; bad config is exit 2."""
from __future__ import annotations

import argparse
import subprocess
import sys

import pytest

from adev.cli import VERBS, build_parser, main


def _subcommands(parser: argparse.ArgumentParser, prefix: tuple[str, ...] = ()):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield (*prefix, name)
                yield from _subcommands(sub, (*prefix, name))


ALL = list(_subcommands(build_parser()))


def test_stack_verb_is_registered():
    assert ("stack",) in ALL
    for sub in (("stack", "up"), ("stack", "down"), ("stack", "status"), ("stack", "plan"),
                ("stack", "plan", "vllm")):
        assert sub in ALL
    assert {v[0] for v in ALL if len(v) == 1} <= set(VERBS)


@pytest.mark.parametrize("argv", ALL, ids=" ".join)
def test_help_works_for_every_verb(argv, capsys):
    with pytest.raises(SystemExit) as e:
        main([*argv, "--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: adev " + " ".join(argv))


def test_top_level_help_and_no_verb(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--help"])
    assert e.value.code == 0 and "stack" in capsys.readouterr().out
    assert main([]) == 2


def test_bad_config_is_exit_2_naming_the_field(tmp_path, capsys):
    f = tmp_path / "s.toml"
    f.write_text('[stack]\nconfiguration = "ram"\n')
    assert main(["stack", "plan", "vllm", "--config", str(f)]) == 2
    err = capsys.readouterr().err
    assert "stack.configuration" in err and "'store-ram+disk'" in err


def test_bad_choice_on_command_line_is_rejected(capsys):
    with pytest.raises(SystemExit) as e:
        main(["stack", "up", "--configuration", "ram"])
    assert e.value.code == 2
    assert "invalid choice: 'ram'" in capsys.readouterr().err


def test_console_script_runs():
    r = subprocess.run([sys.executable, "-m", "adev.cli", "stack", "plan", "vllm"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "MooncakeStoreConnector" in r.stdout
