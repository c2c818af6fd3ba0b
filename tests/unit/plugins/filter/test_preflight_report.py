"""Report assembly and rendering (module_utils.preflight_report) and the preflight filters."""
import importlib.util
import json
import os

from ansible_collections.gpufleet.kimi_k3.plugins.filter import preflight as F
from ansible_collections.gpufleet.kimi_k3.plugins.module_utils import preflight_report as R
from ansible_collections.gpufleet.kimi_k3.plugins.module_utils import probe_collect as PC

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))
_spec = importlib.util.spec_from_file_location(
    "probe_fixture_io", os.path.join(REPO, "tests", "unit", "fixtures", "probes", "fixture_io.py"))
fixture_io = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fixture_io)


def facts(node):
    return PC.collect(fixture_io.FixtureIO(node), {"model": "moonshotai/Kimi-K3", "ports": [
        {"name": "api", "port": 8000}]})


def expected(role):
    return {"accelerator": "gb300", "gpus_per_node": 4, "interconnect": "nvlink", "nnodes": 2, "role": role,
            "memlock": -1, "shm_size": "64g"}


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
    assert "tray02 cuda_version: 12.8 (expected >= 13.0)" in msg
    assert R.failure_message(report()) == "preflight passed"


def test_probe_failure_message_is_carried():
    rep = R.build_report(["a"], {"a": None}, {"a": expected("head")}, probe_failures={"a": "Data could not be sent"})
    f = [x for x in rep["findings"] if x["check"] == "probe"][0]
    assert "Data could not be sent" in f["observed"] and f["status"] == "fail"


# ------------------------------------------------------------------ filter plugin

class FakeHostvars(dict):
    """Mapping like Ansible's hostvars; a missing key raises like an undefined variable."""


def test_filter_reads_hostvars_and_renders():
    hv = FakeHostvars({
        "tray01": {"ansible_facts": {"node_probe": facts("gb300-tray01")}, "preflight_expected": expected("head"),
                   "preflight_probe_result": {"changed": False}},
        "tray02": {"ansible_facts": {}, "preflight_expected": expected("worker"),
                   "preflight_probe_result": {"unreachable": True, "msg": "ssh: connect to host refused"}},
    })
    out = F.preflight_report(["tray01", "tray02"], hv, {"min_driver": "580"})
    assert out["ok"] is False
    assert set(out) == {"ok", "report", "table", "markdown", "json", "failure_message"}
    assert json.loads(out["json"]) == out["report"]
    probe = [f for f in out["report"]["findings"] if f["check"] == "probe"][0]
    assert probe["host"] == "tray02" and "ssh: connect to host refused" in probe["observed"]
    assert "tray02 probe" in out["failure_message"]


def test_filter_takes_cluster_expectations_once_and_the_host_part_from_hostvars():
    common = {"accelerator": "gb300", "gpus_per_node": 4, "interconnect": "nvlink", "nnodes": 2, "memlock": -1,
              "shm_size": "64g"}
    f1, f2 = facts("gb300-tray01"), facts("gb300-tray02")
    f1["ports"] = [{"name": "master", "address": "10.9.9.1", "port": 29501, "state": "free"}]
    hv = FakeHostvars({
        "tray01": {"preflight_probe_result": {"ansible_facts": {"node_probe": f1}}, "group_names": ["vllm_head"]},
        "tray02": {"preflight_probe_result": {"ansible_facts": {"node_probe": f2}}, "group_names": ["vllm_workers"],
                   "ansible_host": "10.9.9.2"},
    })
    exp = {h: F._host_expected(h, hv[h], hv[h]["preflight_probe_result"]["ansible_facts"]["node_probe"], common)
           for h in hv}
    assert [exp[h]["groups"] for h in ("tray01", "tray02")] == [["vllm_head"], ["vllm_workers"]]
    assert exp["tray01"]["internal_address"] == "10.9.9.1"        # what its probe checked the master port on
    assert exp["tray02"]["internal_address"] == "10.9.9.2"        # no master port probed: the inventory address
    out = F.preflight_report(["tray01", "tray02"], hv, {"min_driver": "580"}, True, common)
    assert out["report"]["nodes"]["tray01"]["role"] == "head" and out["report"]["nodes"]["tray02"]["role"] == "worker"
    counts = [f for f in out["report"]["findings"] if f["check"] == "gpu_count"]
    assert [f["status"] for f in counts] == ["pass", "pass"] and "4" in counts[0]["expected"]
    wrong = F.preflight_report(["tray01", "tray02"], hv, None, True, dict(common, gpus_per_node=8))
    assert sorted(wrong["report"]["summary"]["failed_checks"]) == ["tray01:gpu_count", "tray02:gpu_count"]


def test_filter_host_missing_from_hostvars():
    out = F.preflight_report(["ghost"], FakeHostvars(), None)
    assert out["report"]["summary"]["failed_checks"] == ["ghost:probe"]


def test_filter_module_and_show_pass():
    fm = F.FilterModule().filters()
    assert set(fm) == {"preflight_report"}
    hv = FakeHostvars({"t": {"ansible_facts": {"node_probe": facts("gb300-tray01")},
                             "preflight_expected": dict(expected("head"), nnodes=1)}})
    full = fm["preflight_report"](["t"], hv, None)
    short = fm["preflight_report"](["t"], hv, None, False)
    assert " PASS " in full["table"] and " PASS " not in short["table"]
    assert full["report"] == short["report"] and full["ok"] is True
