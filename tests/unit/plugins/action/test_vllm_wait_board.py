"""The controller-side board of vllm_wait (plugins/action/vllm_wait.py): per-run directories and verdict exchange.

Lives under tests/unit/plugins/action because ansible-test units runs module_utils tests without the controller
half of ansible (ansible.errors), which the action plugin imports.
"""
import os
import stat

import pytest
from ansible.errors import AnsibleActionFail

from ansible_collections.gpufleet.kimi_k3.plugins.action import vllm_wait
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.launch import watch as lw


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
    """Every host's watcher opens the same board at once (one forked worker each); one of them losing the race must not
    fail its wait with [Errno 17] File exists (seen in CI on mi355x-node02)."""
    path = str(tmp_path / "launch-20261201T170428709791")
    real_mkdir = vllm_wait.os.mkdir

    def mkdir_after_the_other_watcher(name, *args, **kwargs):  # another host's watcher gets there first
        if not os.path.isdir(name):
            real_mkdir(name, 0o700)
        return real_mkdir(name, *args, **kwargs)
    monkeypatch.setattr(vllm_wait.os, "mkdir", mkdir_after_the_other_watcher)
    first = vllm_wait.Board(path)
    first.publish(lw.board_record("a", "waiting", 1.0))
    second = vllm_wait.Board(path)
    assert sorted(second.read(["a"])) == ["a"]


FIX = "remove it, or point TMPDIR at a directory only this user can write (vllm_wait keeps its boards there)"


def _root(tmp_path):
    return str(tmp_path / ("kimi-k3-wait-%d" % os.geteuid()))


def _mode(path):
    return stat.S_IMODE(os.lstat(path).st_mode)


def test_board_root_and_boards_are_created_private(tmp_path, monkeypatch):
    monkeypatch.setattr(vllm_wait.tempfile, "gettempdir", lambda: str(tmp_path))
    old = os.umask(0o022)
    try:
        path = vllm_wait.board_dir("launch-1")
        vllm_wait.Board(path).publish(lw.board_record("a", "waiting", 1.0))
    finally:
        os.umask(old)
    assert os.path.dirname(path) == _root(tmp_path)
    assert (_mode(_root(tmp_path)), _mode(path)) == (0o700, 0o700)
    assert os.lstat(path).st_uid == os.geteuid()


def test_a_board_root_open_to_other_users_is_refused(tmp_path, monkeypatch):
    """Created by someone (or something) else with group/world access: refused, the verdicts in it never read."""
    monkeypatch.setattr(vllm_wait.tempfile, "gettempdir", lambda: str(tmp_path))
    os.mkdir(_root(tmp_path))
    os.chmod(_root(tmp_path), 0o1777)
    with pytest.raises(AnsibleActionFail) as err:
        vllm_wait.board_dir("launch-1")
    assert str(err.value) == "vllm_wait: %s is open to other users (mode 1777, must be 0700): %s" % (
        _root(tmp_path), FIX)
    assert os.listdir(_root(tmp_path)) == []


def test_an_own_board_root_only_readable_by_others_is_made_private(tmp_path, monkeypatch):
    """0755, as an earlier release of the collection left it: nobody else could write into it, so it is tightened."""
    monkeypatch.setattr(vllm_wait.tempfile, "gettempdir", lambda: str(tmp_path))
    os.mkdir(_root(tmp_path))
    os.chmod(_root(tmp_path), 0o755)
    path = vllm_wait.board_dir("launch-1")
    assert os.path.dirname(path) == _root(tmp_path) and _mode(_root(tmp_path)) == 0o700


def test_a_board_root_that_is_a_symlink_is_refused(tmp_path, monkeypatch):
    """Another user's symlink to a directory of theirs (or of ours): never followed."""
    monkeypatch.setattr(vllm_wait.tempfile, "gettempdir", lambda: str(tmp_path))
    target = tmp_path / "elsewhere"
    target.mkdir(mode=0o700)
    os.symlink(str(target), _root(tmp_path))
    with pytest.raises(AnsibleActionFail) as err:
        vllm_wait.board_dir("launch-1")
    assert str(err.value) == "vllm_wait: %s is not a directory (a symlink): %s" % (_root(tmp_path), FIX)


def test_a_board_path_that_is_a_file_is_refused(tmp_path):
    path = tmp_path / "launch-1"
    path.write_text("x")
    with pytest.raises(AnsibleActionFail) as err:
        vllm_wait.Board(str(path))
    assert str(err.value) == "vllm_wait: %s is not a directory (a file): %s" % (path, FIX)


@pytest.mark.skipif(os.geteuid() != 0, reason="giving the directory to another user needs root")
def test_a_board_root_owned_by_another_user_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(vllm_wait.tempfile, "gettempdir", lambda: str(tmp_path))
    os.mkdir(_root(tmp_path), 0o700)
    os.chown(_root(tmp_path), 65534, 65534)
    with pytest.raises(AnsibleActionFail) as err:
        vllm_wait.board_dir("launch-1")
    assert str(err.value) == "vllm_wait: %s belongs to uid 65534, not to this user (uid 0): %s" % (
        _root(tmp_path), FIX)


def test_a_private_board_root_of_an_earlier_run_is_reused(tmp_path, monkeypatch):
    monkeypatch.setattr(vllm_wait.tempfile, "gettempdir", lambda: str(tmp_path))
    os.mkdir(_root(tmp_path), 0o700)
    earlier = os.path.join(_root(tmp_path), "launch-0")
    os.mkdir(earlier, 0o700)
    assert vllm_wait.board_dir("launch-1") == os.path.join(_root(tmp_path), "launch-1")
    assert os.path.isdir(earlier)  # younger than a day: kept


def _wait_options(args):
    from unittest import mock
    task = mock.MagicMock()
    task.args = dict({"container": "vllm-kimi-k3"}, **args)
    plugin = vllm_wait.ActionModule(task, mock.MagicMock(), mock.MagicMock(), loader=None, templar=None,
                                    shared_loader_obj=None)
    return plugin._options()["module_args"]


def test_the_engine_client_options_reach_the_status_module():
    client = {"validate_certs": True, "ca_path": "/etc/docker/ca.pem", "client_cert": "/etc/docker/cert.pem",
              "client_key": "/etc/docker/key.pem"}
    got = _wait_options({"docker_host": "tcp://10.0.0.11:2376", "docker_client": client})
    assert got["docker_host"] == "tcp://10.0.0.11:2376"
    assert got["docker_client"] == dict(client, tls=False, use_ssh_client=False)
    plain = _wait_options({})
    assert plain["docker_host"] == "unix:///var/run/docker.sock"
    assert plain["docker_client"] == {"tls": False, "validate_certs": False, "ca_path": None, "client_cert": None,
                                      "client_key": None, "use_ssh_client": False}
