"""Report assembly and rendering (plugin_utils.preflight.report): tables, Markdown, per-host failure messages."""
import importlib.util
import json
import os

import pytest

from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.preflight.fixes import FIX
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.preflight import report as R
from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.probe import collect as PC
from tests.helpers.runner import REPO

_spec = importlib.util.spec_from_file_location(
    "probe_fixture_io", os.path.join(REPO, "tests", "unit", "fixtures", "probes", "fixture_io.py"))
fixture_io = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fixture_io)


def facts(node):
    return PC.collect(fixture_io.FixtureIO(node), {"model": "moonshotai/Kimi-K3", "ports": [
        {"name": "api", "port": 8000}], "docker_host": "unix:///var/run/docker.sock", "model_cache_dir": "/data/hf-cache"})


def expected(role):
    return {"accelerator": "gb300", "vendor": "nvidia", "gpus_per_node": 4, "interconnect": "nvlink", "nnodes": 2,
            "role": role, "memlock": -1, "shm_size": "64g", "min_driver": "580", "min_cuda": "13.0",
            "min_gpu_memory_mib": 280000}


def report(tray02="gb300-tray02"):
    return R.build_report(["tray01", "tray02"], {"tray01": facts("gb300-tray01"), "tray02": facts(tray02)},
                          {"tray01": expected("head"), "tray02": expected("worker")})


def test_report_structure_and_determinism():
    a, b = report(), report()
    assert a == b                                           # no timestamps: identical re-runs
    assert set(a) == {"schema", "summary", "findings", "drift", "nodes", "thresholds"}
    assert a["nodes"]["tray01"]["gpu_model"] == "gb300" and a["nodes"]["tray02"]["role"] == "worker"
    json.dumps(a)


def test_table_lists_failures_first_with_fixes():
    rep = report("gb300-driver570")
    text = R.render_table(rep)
    lines = text.splitlines()
    assert lines[0].split() == ["HOST", "CHECK", "STATUS", "OBSERVED", "EXPECTED"]
    first_row = lines[2]
    assert "FAIL" in first_row
    assert "PREFLIGHT FAILED" in text
    assert "- [FAIL] tray02 gpu_driver: Install NVIDIA driver r580" in text
    assert "570.172.08" in text
    only_bad = R.render_table(rep, include_pass=False)
    assert " PASS " not in only_bad and "FAIL" in only_bad


def test_table_ok_summary():
    text = R.render_table(report())
    assert "PREFLIGHT OK: 2 hosts, 0 fail" in text and "[FAIL]" not in text


def test_long_values_are_cut_in_the_table_not_in_the_report():
    rep = report("gb300-imex-down")
    long = [f for f in rep["findings"] if len(f["observed"]) > 70]
    for f in long:
        assert f["observed"] not in R.render_table(rep)
    assert any("~" in line for line in R.render_table(rep).splitlines()) == bool(long)


def test_markdown_sections_and_escaping():
    rep = report("gb300-gpu-missing")
    rep["findings"][0]["observed"] += " | pipe"
    md = R.render_markdown(rep)
    assert md.startswith("# Preflight report\n")
    for section in ("## Problems", "## Nodes", "## Drift", "## All checks"):
        assert section in md
    assert "\\| pipe" in md
    assert "| tray02 | gpu_count | fail | 3 | 4 |" in md
    assert "**FAILED**" in md


def test_failure_message_names_every_failing_host_and_check():
    msg = R.failure_message(report("gb300-driver570"))
    assert msg.startswith("Preflight failed on tray02")
    assert "tray02 gpu_driver: 570.172.08 (expected >= 580)" in msg
    assert "cuda_version" not in msg                     # skipped behind the driver, not a second failure
    assert R.failure_message(report()) == "preflight passed"


def test_host_failures_charge_the_failing_host_with_its_fixes_and_skips():
    rep = report("gb300-driver570")
    out = R.host_failures(rep)
    assert list(out) == ["tray02"]
    assert out["tray02"].startswith("Preflight failed on tray02 - tray02 gpu_driver: 570.172.08 (expected >= 580)")
    assert "fix: Install NVIDIA driver r580" in out["tray02"]
    assert "Not checked until that is fixed: cuda_version" in out["tray02"]
    assert R.host_failures(report()) == {}


def test_skipped_checks_are_counted_and_not_in_what_to_do():
    rep = report("gb300-driver570")
    assert rep["summary"]["skip"] == 1
    text = R.render_table(rep)
    assert "1 skipped" in text
    assert [line.split()[:3] for line in text.splitlines() if " SKIP " in line] == [["tray02", "cuda_version", "SKIP"]]
    assert "[SKIP]" not in text


def test_probe_failure_message_is_carried():
    rep = R.build_report(["a"], {"a": None}, {"a": expected("head")}, probe_failures={"a": "Data could not be sent"})
    f = [x for x in rep["findings"] if x["check"] == "probe"][0]
    assert "Data could not be sent" in f["observed"] and f["status"] == "fail"


@pytest.mark.parametrize("msg,options", [
    ("argument 'command_timeout' is of type str and we were unable to convert to int: \"'soon'\" cannot be converted "
     "to an int", True),
    ("argument 'access_paths' is of type <class 'int'> and we were unable to convert to list", True),   # 2.17 wording
    ("Unsupported parameters for (gpufleet.kimi_k3.node_probe) module: bogus.", True),
    ("Data could not be sent to remote host \"10.0.0.5\". Make sure this host can be reached over ssh", False),
    ("probe failed", False),
])
def test_a_refused_probe_option_gets_the_option_fix_not_the_ssh_fix(msg, options):
    """The role's argument-spec check runs once; a probe option set wrong for another node is refused by
    node_probe on that node - the fix names the role variables, not SSH reachability."""
    rep = R.build_report(["a"], {"a": None}, {"a": expected("head")}, probe_failures={"a": msg})
    f = [x for x in rep["findings"] if x["check"] == "probe"][0]
    assert f["status"] == "fail" and msg in f["observed"]
    assert (f["fix"] == FIX["probe.options"]) is options
    assert (f["fix"] == FIX["probe"]) is not options
