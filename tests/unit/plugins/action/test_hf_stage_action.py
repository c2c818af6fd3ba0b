"""The hf_stage action plugin: rounds until done, summed byte counts, progress lines, the final message."""
import json
from unittest import mock

from ansible_collections.gpufleet.kimi_k3.plugins.action import hf_stage as action

FILES = [{"type": "file", "path": "a", "size": 10, "oid": "a" * 40}]


def _round(**kw):
    base = {"repo": "o/m", "revision": "r" * 40, "snapshot_dir": "/c/hub/models--o--m/snapshots/" + "r" * 40,
            "files_total": 2, "bytes_total": 3_000_000_000, "files_present": 0, "bytes_present": 0,
            "bytes_needed": 3_000_000_000, "free_bytes": 10 ** 13, "bytes_transferred": 0, "files_transferred": 0,
            "files_linked": 0, "restarted": [], "current": None, "done": False, "changed": False, "files": FILES}
    base.update(kw)
    return base


def _run(rounds, check_mode=False, args=None):
    task = mock.MagicMock()
    task.args = dict({"repo": "o/m", "revision": "r" * 40, "cache_dir": "/c"}, **(args or {}))
    task.check_mode = check_mode
    task.async_val = 0
    plugin = action.ActionModule(task, mock.MagicMock(), mock.MagicMock(), loader=None, templar=None,
                                 shared_loader_obj=None)
    calls = []

    def fake(module_args, task_vars):
        calls.append(dict(module_args))
        return rounds.pop(0)

    printed = []
    with mock.patch.object(action.ActionBase, "run", return_value={}), \
            mock.patch.object(plugin, "_round", side_effect=fake), \
            mock.patch.object(action.display, "display", side_effect=printed.append):
        result = plugin.run(task_vars={"inventory_hostname": "tray01"})
    return result, calls, printed


def test_rounds_are_summed_and_the_file_list_is_passed_on():
    result, calls, printed = _run([
        _round(bytes_transferred=1_000_000_000, current="model-00001.safetensors", changed=True),
        _round(bytes_transferred=2_000_000_000, bytes_from_endpoint=2_000_000_000, files_transferred=2,
               files_verified=2, done=True, changed=True,
               verified={"ok": True, "problems": [], "extra": []}),
    ])
    assert "files" not in calls[0] and calls[1]["files"] == FILES
    assert result["bytes_transferred"] == 3_000_000_000 and result["files_transferred"] == 2 and result["rounds"] == 2
    assert result["changed"] and not result.get("failed")
    assert result["msg"].startswith("tray01: staged %s: 2 files, 3.00 GB transferred (2.00 GB from the endpoint, 0.00 "
                                    "GB from peers) in " % ("r" * 40))
    assert result["msg"].endswith(", 2 verified by content hash")
    assert len(printed) == 1 and printed[0].startswith("[tray01] 1.00 / 3.00 GB (33.3 %), ")
    assert printed[0].endswith("at model-00001.safetensors")


def test_already_staged_reports_nothing_transferred_and_no_change():
    result, _calls, printed = _run([_round(files_present=2, bytes_present=3_000_000_000, bytes_needed=0, done=True,
                                           verified={"ok": True, "problems": [], "extra": []})])
    assert not result["changed"] and printed == []
    assert result["msg"] == ("tray01: %s already staged (2 files, 3.00 GB verified): nothing transferred, nothing "
                             "re-read" % ("r" * 40))


def test_failed_round_and_failed_verification_fail_the_node():
    failed, _c, _p = _run([_round(), {"failed": True, "msg": "cannot reach http://m/api: refused"}])
    assert failed["failed"] and failed["msg"] == "tray01: weight staging failed: cannot reach http://m/api: refused"
    bad, _c, _p = _run([_round(done=True, bytes_transferred=5, files_transferred=1,
                               verified={"ok": False, "problems": ["a is missing"], "extra": []})])
    assert bad["failed"] and bad["msg"].endswith("does not match the file list: a is missing")


def test_max_rounds_keeps_the_partial_files_and_says_so():
    result, calls, _p = _run([_round(bytes_transferred=1), _round(bytes_transferred=1)], args={"max_rounds": 2})
    assert result["failed"] and "not finished after 2 rounds" in result["msg"] and "resumes" in result["msg"]
    assert all("max_rounds" not in c for c in calls)


def test_check_mode_message():
    result, _c, _p = _run([_round(done=True, changed=True)], check_mode=True)
    assert result["changed"] and result["msg"] == (
        "tray01: %s: 0 of 2 files present and verified; a real run would transfer 3.00 GB" % ("r" * 40))


REFUSAL = {"node": "tray01", "path": "modeling_kimi.py", "algo": "git-sha1", "expected": "e" * 40, "actual": "a" * 40,
           "source": "endpoint http://m/o/m/resolve/x/modeling_kimi.py", "msg": "tray01: modeling_kimi.py refused: ..."}


def test_a_refused_file_fails_the_node_with_the_refusal_and_the_report_names_it(tmp_path):
    result, _c, _p = _run([_round(done=True, bytes_transferred=5, bytes_from_endpoint=5, refused=[REFUSAL],
                                  verified={"ok": False, "problems": ["modeling_kimi.py is missing"], "extra": []})],
                          args={"artifacts_dir": str(tmp_path), "run": "r1", "cluster": ["tray01"]})
    assert result["failed"] and result["msg"].endswith("does not match the file list: tray01: modeling_kimi.py refused: ...")
    report = json.load(open(str(tmp_path / "weights-report.json")))
    (node,) = report["nodes"]
    assert (node["node"], node["ok"], node["bytes_from_endpoint"], node["refused"]) == ("tray01", False, 5, [REFUSAL])
    assert "modeling_kimi.py (expected %s, got %s" % ("e" * 40, "a" * 40) in open(str(tmp_path / "weights-report.md")).read()


def test_peers_come_from_the_plans_internal_addresses():
    plans = {"a": {"internal_address": "10.0.0.1"}, "b": {"internal_address": "10.0.0.2"}, "r": {}}
    assert action.peers_of(["a", "b", "r"], plans, 29780) == [
        {"name": "a", "address": "10.0.0.1", "port": 29780}, {"name": "b", "address": "10.0.0.2", "port": 29780}]
    assert action.peers_of(["a"], plans, 29780) is None and action.peers_of(["a", "b"], plans, None) is None
