"""bench/conformance.py runs each suite file as a module from the suite root and reads unittest's
summary: checked here on a stand-in suite of real unittest modules (no network, no gateway)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

_PATH = Path(__file__).resolve().parents[2] / "bench" / "conformance.py"
_spec = importlib.util.spec_from_file_location("bench_conformance", _PATH)
conformance = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(conformance)

_MODULE = """
import sys, unittest
class T(unittest.TestCase):
    def test_ok(self):
        assert "--server_url=http://localhost:9" in sys.argv and "--mock_agent_port=7" in sys.argv
    def test_fail(self):
        self.fail("suite says so")
    @unittest.skip("not advertised")
    def test_skip(self):
        pass
if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1])
"""


def test_summary_lines():
    assert conformance.summarise("Ran 7 tests in 1s\n\nFAILED (failures=2, errors=1, skipped=1)\n") == {
        "ran": 7, "pass": 3, "fail": 3, "skip": 1,
    }  # fmt: skip
    assert conformance.summarise("Ran 3 tests in 0.1s\n\nOK (skipped=3)\n")["skip"] == 3
    assert conformance.summarise("Traceback ...") is None


def test_failing_tests_are_named_once_each():
    out = (
        "FAIL: test_a (__main__.T.test_a)\nT.test_a\n---\nERROR: test_b (__main__.T.test_b)\n"
        "FAIL: test_a (__main__.T.test_a)\n  FAIL: not_a_header (x)\n"
    )
    assert conformance.failed_tests(out) == ["test_a", "test_b"]
    assert conformance.failed_tests("Ran 1 test in 0s\n\nOK\n") == []


def test_runs_files_from_the_suite_root_with_the_ports(tmp_path, capsys):
    (tmp_path / "core").mkdir()
    (tmp_path / "core" / "__init__.py").write_text("")
    (tmp_path / "core" / "protocol_test.py").write_text(_MODULE)
    (tmp_path / "core" / "binding_test.py").write_text("raise SystemExit(3)\n")
    code = conformance.main(
        ["--suite", str(tmp_path), "--python", sys.executable, "--server-url", "http://localhost:9",
         "--mock-agent-port", "7", "--json"]
    )  # fmt: skip
    out = capsys.readouterr().out
    import json

    rows = {r["file"]: r for r in json.loads(out)["files"]}
    assert rows["core/protocol_test.py"] == {
        "file": "core/protocol_test.py", "ran": 3, "pass": 1, "fail": 1, "skip": 1, "failed": ["test_fail"],
    }  # fmt: skip
    assert "error" in rows["core/binding_test.py"] and code == 2
