"""The controller-side board of vllm_wait (plugins/action/vllm_wait.py): per-run directories and verdict exchange.

Lives under tests/unit/plugins/action because ansible-test units runs module_utils tests without the controller
half of ansible (ansible.errors), which the action plugin imports.
"""
from ansible_collections.gpufleet.kimi_k3.plugins.action import vllm_wait
from ansible_collections.gpufleet.kimi_k3.plugins.module_utils import launch_watch as lw


def test_board_round_trip_and_per_run_directories(tmp_path, monkeypatch):
    monkeypatch.setattr(vllm_wait.tempfile, "gettempdir", lambda: str(tmp_path))
    path = vllm_wait.board_dir("launch-20261201T0900")
    assert path.startswith(str(tmp_path)) and path.endswith("launch-20261201T0900")
    assert vllm_wait.board_dir("../../etc").endswith("/etc") and str(tmp_path) in vllm_wait.board_dir("../../etc")
    board = vllm_wait.Board(path)
    # with an earlier board present, the next group start still gets its own (never an earlier run's records)
    assert vllm_wait.board_dir("launch-20261201T0905").endswith("launch-20261201T0905")
    board.publish(lw.board_record("a", "exited", 5.0, "x"))
    board.publish(lw.board_record("b", "waiting", 6.0))
    got = board.read(["a", "b", "c"])
    assert sorted(got) == ["a", "b"] and got["a"]["verdict"] == "exited"
    assert lw.group_verdict("b", got, 7.0, 60)["host"] == "a"


def test_a_board_another_hosts_watcher_created_between_check_and_create_is_joined(tmp_path, monkeypatch):
    """Every host's watcher opens the same board at once (one forked worker each); one of them losing the race used to
    fail its wait with [Errno 17] File exists (CI, mi355x-node02)."""
    path = str(tmp_path / "launch-20261201T170428709791")
    real_makedirs = vllm_wait.os.makedirs

    def makedirs_after_the_other_watcher(name, *args, **kwargs):  # another host's watcher gets there first
        real_makedirs(name, exist_ok=True)
        return real_makedirs(name, *args, **kwargs)
    monkeypatch.setattr(vllm_wait.os, "makedirs", makedirs_after_the_other_watcher)
    first = vllm_wait.Board(path)
    first.publish(lw.board_record("a", "waiting", 1.0))
    second = vllm_wait.Board(path)
    assert sorted(second.read(["a"])) == ["a"]
