"""The gate's result as the session resends it: failing tests and their run-invariant text."""
from adev.gate.base import GateResult, run_invariant
from adev.records import TestResult


def test_run_invariant_replaces_addresses_and_durations():
    a = ("capsys = <_pytest.capture.CaptureFixture object at 0x7f2805a6bb30>\n"
         "where lookup = <prefixcache.cache.PrefixCache object at 0x7F9419A1AA80>.lookup\n"
         "1 failed, 3 passed in 0.53s")
    assert run_invariant(a) == (
        "capsys = <_pytest.capture.CaptureFixture object at 0x...>\n"
        "where lookup = <prefixcache.cache.PrefixCache object at 0x...>.lookup\n"
        "1 failed, 3 passed in ...s")
    # what is the code's own stays: short hex literals, numbers, durations not in pytest's form
    b = "assert 0xff == 255; took 0.53 s; mask 0x1234; x = 10.5s"
    assert run_invariant(b) == b


def test_failing_text_is_the_same_for_two_runs_of_the_same_failure():
    def result(addr: str) -> GateResult:
        return GateResult(verdict="fail", failed=1, passed=1, tests=[
            TestResult("tests/test_a.py::test_ok", "passed", 0.01, ""),
            TestResult("tests/test_a.py::test_x", "failed", 0.02,
                       f"assert 8 == 4\n where 8 = <C object at {addr}>.lookup(4)")])
    one, two = result("0x7f9419a1aa80").failing_text(), result("0x7f93b8a69940").failing_text()
    assert one == two == ("tests/test_a.py::test_x: failed\nassert 8 == 4\n"
                          " where 8 = <C object at 0x...>.lookup(4)")
