"""bench/bench_mutation.py: the mutmut configuration it writes and how it scores mutmut's results."""
from __future__ import annotations

import importlib.util
import json
import tomllib

from adev.config import ROOT

spec = importlib.util.spec_from_file_location("bench_mutation", ROOT / "bench" / "bench_mutation.py")
bm = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bm)


def test_config_section_mutates_only_the_chosen_modules_against_unit_tests():
    text = bm.mutmut_config(["adev/analysis/", "adev/emulator/pool.py"], ["tests/"],
                            ["stacks/", "results/"], ["--ignore=tests/x.py"])
    cfg = tomllib.loads(text)["tool"]["mutmut"]
    assert cfg["only_mutate"] == ["adev/analysis/*", "adev/emulator/pool.py"]
    assert cfg["source_paths"] == ["adev/"] and cfg["also_copy"] == ["stacks/", "results/"]
    assert cfg["pytest_add_cli_args"] == ["-m", "not integration", "-p", "no:cacheprovider",
                                          "--ignore=tests/x.py"]
    assert cfg["pytest_add_cli_args_test_selection"] == ["tests/"]
    assert "timeout_constant" not in cfg and "timeout_multiplier" not in cfg   # mutmut's defaults


def test_config_section_carries_the_timeout_settings():
    cfg = tomllib.loads(bm.mutmut_config(["adev/emulator/engine.py"], ["tests/"], [],
                                         timeout=(5, 2)))["tool"]["mutmut"]
    assert (cfg["timeout_constant"], cfg["timeout_multiplier"]) == (5.0, 2.0)


def test_bad_timeout_settings_are_refused(capsys):
    assert bm.main(["adev/emulator/engine.py", "--timeout-multiplier", "0"]) == 2
    assert "--timeout-multiplier > 0" in capsys.readouterr().err
    assert bm.main(["adev/emulator/engine.py", "--timeout-constant", "-1"]) == 2


def test_outcomes_and_score_from_mutmut_meta_files(tmp_path):
    meta = tmp_path / "mutants" / "adev" / "analysis"
    meta.mkdir(parents=True)
    codes = {"m.x_f__mutmut_1": 1, "m.x_f__mutmut_2": 0, "m.x_f__mutmut_3": 33,
             "m.x_f__mutmut_4": 36, "m.x_f__mutmut_5": None, "m.x_f__mutmut_6": 3}
    (meta / "windows.py.meta").write_text(json.dumps({"exit_code_by_key": codes}))
    (meta / "other.py.meta").write_text(json.dumps({"exit_code_by_key": {"o.x__mutmut_1": 0}}))
    res = bm.outcomes(tmp_path, ["adev/analysis/windows.py"])
    assert list(res) == ["adev/analysis/windows.py"]
    c = res["adev/analysis/windows.py"]
    # killed: exit 1 (a test failed), 3 (pytest internal error), 36 (timeout)
    assert (c["killed"], c["survived"], c["no tests"], c["not run"]) == (3, 1, 1, 1)
    assert bm.score(c) == 3 / 5
    assert c["survivor:m.x_f__mutmut_2"] and c["survivor:m.x_f__mutmut_3"]
    assert set(bm.outcomes(tmp_path, ["adev/analysis/"])) == {"adev/analysis/other.py",
                                                              "adev/analysis/windows.py"}


def test_merge_keeps_earlier_results_and_takes_the_rechecked_ones():
    before = {"a": 1, "b": 0, "c": 33, "d": 0, "e": None}
    # mutmut reset a (killed before) and e; reran b (now killed) and d (left unrun)
    after = {"a": None, "b": 1, "c": 33, "d": None, "e": None, "f": 0}
    merged = bm.merge_codes(before, after, {"b", "d"})
    assert merged == {"a": 1, "b": 1, "c": 33, "d": 0, "e": None, "f": 0}
    # a rechecked mutant that survives again stays a survivor; one not rechecked keeps its kill
    assert bm.merge_codes({"x": 0, "y": 3}, {"x": 0, "y": 0}, {"x"}) == {"x": 0, "y": 3}


def test_recheck_merge_rewrites_meta_files_in_place(tmp_path):
    meta = tmp_path / "mutants" / "adev" / "m.py.meta"
    meta.parent.mkdir(parents=True)
    before_codes = {"m.x_f__mutmut_1": 1, "m.x_f__mutmut_2": 0, "m.x_f__mutmut_3": 1}
    meta.write_text(json.dumps({"exit_code_by_key": before_codes, "durations_by_key": {}}))
    before = bm.read_codes(tmp_path)
    assert before == {"mutants/adev/m.py.meta": before_codes}
    # what mutmut leaves after `run m.x_f__mutmut_2` with changed tests: the others reset
    meta.write_text(json.dumps({"exit_code_by_key": {"m.x_f__mutmut_1": None, "m.x_f__mutmut_2": 1,
                                                     "m.x_f__mutmut_3": None},
                                "durations_by_key": {"m.x_f__mutmut_2": 0.5}}))
    bm.write_merged(tmp_path, before, {"m.x_f__mutmut_2"})
    out = json.loads(meta.read_text())
    assert out["exit_code_by_key"] == {"m.x_f__mutmut_1": 1, "m.x_f__mutmut_2": 1,
                                       "m.x_f__mutmut_3": 1}
    assert out["durations_by_key"] == {"m.x_f__mutmut_2": 0.5}
    c = bm.outcomes(tmp_path, ["adev/m.py"])["adev/m.py"]
    assert (c["killed"], c["survived"], c["not run"]) == (3, 0, 0)


def test_recheck_only_the_survivors_matching_a_glob():
    names = ["adev.e.engine.xǁEngineǁ_save__mutmut_1", "adev.e.engine.xǁEngineǁstop__mutmut_2",
             "adev.e.engine.x__spin_until__mutmut_3"]
    assert bm.select(names, []) == names
    assert bm.select(names, ["*_save__*", "*stop__*"]) == names[:2]
    assert bm.select(names, ["*nothing*"]) == []
