"""A tool's output and its diagnostics stay apart wherever the project reads output.

ansible-core 2.21 under cryptography 51 prints a deprecation warning on stderr at every `ansible*` command; a test
that merged stderr into stdout and parsed the result (`ansible-doc --json`) failed on a machine where nothing of the
project had changed. Two guards: the shared runner (tests/helpers/cli.run) keeps the streams apart, and no Python
file of the project merges stderr into a pipe except the few places listed here, which stream a log for people or
keep one timeline of events, and parse nothing a tool prints as data.
"""
import ast
import json
import os
import sys

import pytest

from tests.helpers import cli

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCANNED = ("tests", "sim", "scripts", "benchmarks", "plugins")

# (file, enclosing function) -> why merging the streams is right there
MERGE_ALLOWED = {
    ("tests/chaos/chaos_soak.py", "__init__"):
        "one timeline of the playbook's lines: moments and detection times are read from when lines arrive",
    ("tests/realparser/run.py", "ensure_venv"): "pip's log file for people",
    ("tests/realparser/run.py", "run_in_venv"): "a log file for people (results are read from files the run writes)",
    ("tests/integration/test_real_engine.py", "test_f_interrupted_upgrade_is_finished_by_the_next_deploy"):
        "follows the playbook's progress lines to time the interrupt; asserts on state, not on output",
    ("tests/integration/test_smoke_standin.py", "__init__"): "the stand-in server's log, shown on failure",
    ("tests/integration/test_monitoring_sim.py", "test_prometheus_scrapes_the_vllm_series"):
        "Prometheus' log file, shown on failure",
    ("sim/standin/vllm_standin/testing.py", "__init__"): "the stand-in server's log file",
    ("benchmarks/smoke_vs_vllm_bench.py", "run_timed_container"):
        "vllm bench's logger lines and result table form one timeline (CPU marks are taken as lines arrive)",
}


def _merges(node):
    """True for a call with stderr=<something>.STDOUT (subprocess.STDOUT or an alias)."""
    return isinstance(node, ast.Call) and any(
        kw.arg == "stderr" and isinstance(kw.value, ast.Attribute) and kw.value.attr == "STDOUT"
        or kw.arg == "stderr" and isinstance(kw.value, ast.Name) and kw.value.id == "STDOUT"
        for kw in node.keywords)


def _merge_sites(path):
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
    sites = []

    def visit(node, func):
        for child in ast.iter_child_nodes(node):
            name = child.name if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) else func
            if _merges(child):
                sites.append((name, child.lineno))
            visit(child, name)
    visit(tree, "<module>")
    return sites


def _python_files():
    for top in SCANNED:
        for root, dirs, files in os.walk(os.path.join(REPO, top)):
            dirs[:] = [d for d in dirs if d not in ("__pycache__", ".state", "mutants")]
            for name in files:
                if name.endswith(".py"):
                    yield os.path.join(root, name)


def test_no_parser_reads_stderr_merged_into_stdout():
    found = {}
    for path in _python_files():
        rel = os.path.relpath(path, REPO)
        for func, line in _merge_sites(path):
            found[(rel, func)] = line
    unexpected = sorted("%s:%d (in %s)" % (rel, line, func) for (rel, func), line in found.items()
                        if (rel, func) not in MERGE_ALLOWED)
    assert not unexpected, (
        "stderr merged into stdout: read a tool's output from stdout alone (tests/helpers/cli.run), or add the "
        "place to MERGE_ALLOWED with the reason it parses nothing: %s" % unexpected)
    stale = sorted("%s (%s)" % key for key in MERGE_ALLOWED if key not in found)
    assert not stale, "MERGE_ALLOWED names places that no longer merge the streams: %s" % stale


def test_the_scan_sees_a_merge_and_its_enclosing_function(tmp_path):
    src = tmp_path / "probe.py"
    src.write_text("import subprocess\nfrom subprocess import STDOUT\n\n"
                   "def reads_json():\n    return subprocess.run(['x'], stdout=subprocess.PIPE,\n"
                   "                          stderr=subprocess.STDOUT)\n\n"
                   "def apart():\n    return subprocess.run(['x'], stdout=subprocess.PIPE, stderr=subprocess.PIPE)\n\n"
                   "def alias():\n    return subprocess.check_output(['x'], stderr=STDOUT)\n")
    assert _merge_sites(str(src)) == [("reads_json", 5), ("alias", 12)]


FAKE_TOOL = ("import sys; sys.stderr.write('/x/_ssh_agent.py:18: CryptographyDeprecationWarning: DSA is deprecated\\n');"
             " sys.stderr.flush(); print('{\"doc\": 1}'); sys.exit(int(sys.argv[1]))")


def test_cli_run_gives_stdout_alone_to_the_parser():
    proc = cli.run([sys.executable, "-c", FAKE_TOOL, "0"])
    assert json.loads(proc.stdout) == {"doc": 1}
    assert "CryptographyDeprecationWarning" in proc.stderr


def test_cli_run_failure_shows_both_streams_labelled():
    with pytest.raises(AssertionError) as err:
        cli.run([sys.executable, "-c", FAKE_TOOL, "3"])
    text = str(err.value)
    assert "(rc 3)" in text
    streams = text.split("\n--- stdout ---\n", 1)[1]
    out, err_text = streams.split("\n--- stderr ---\n", 1)
    assert out.strip() == '{"doc": 1}'
    assert "CryptographyDeprecationWarning" in err_text


def test_cli_run_without_check_returns_the_failure():
    proc = cli.run([sys.executable, "-c", FAKE_TOOL, "2"], check=False)
    assert proc.returncode == 2 and proc.stdout.strip() == '{"doc": 1}'
