"""module_utils.probe.access: the operator-access observation on a node and its preflight finding."""
import os

from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.probe import access as pa


def _obs(**kw):
    base = {"user": "ops", "euid": 1001, "groups": ["docker", "ops"], "socket": "/var/run/docker.sock",
            "socket_rw": True, "paths": {"/etc/kimi-k3": False, "/data/hf-cache": True}}
    base.update(kw)
    return base


def test_root_passes():
    f = pa.check_access("tray01", _obs(user="root", euid=0))
    assert f == {"host": "tray01", "check": "access", "status": "pass", "observed": "modules run as root (uid 0)",
                 "expected": "root (login or become) on the node", "fix": None}


def test_docker_group_user_without_sudo_is_refused_naming_what_it_cannot_write():
    f = pa.check_access("tray01", _obs())
    assert f["status"] == "fail"
    assert f["observed"] == ("modules run as ops (uid 1001) without become; engine socket usable (groups: docker, ops); "
                             "not writable: /etc/kimi-k3")
    assert "ansible_become: true" in f["fix"] and "/etc/kimi-k3" in f["fix"] and "not supported" in f["fix"]


def test_user_without_socket_access_is_told_so():
    f = pa.check_access("n1", _obs(groups=["ops"], socket_rw=False, paths={}))
    assert f["status"] == "fail" and "engine socket /var/run/docker.sock not usable" in f["observed"]
    assert "/etc/kimi-k3" in f["fix"]


def test_even_a_user_who_can_write_everything_is_refused_without_become():
    f = pa.check_access("n1", _obs(paths={"/srv/k3": True}))
    assert f["status"] == "fail" and "not writable" not in f["observed"] and "/srv/k3" in f["fix"]


def test_missing_observation_fails_with_a_re_run_hint():
    for obs in (None, {}, "x"):
        f = pa.check_access("n1", obs)
        assert f["status"] == "fail" and f["observed"] == "not observed" and "Re-run preflight" in f["fix"]


def test_observe_access_reports_this_process(tmp_path):
    sock = tmp_path / "docker.sock"
    sock.write_text("")
    missing_child = tmp_path / "a" / "b"
    obs = pa.observe_access("unix://%s" % sock, [str(missing_child), "/proc/1"])
    assert obs["euid"] == os.geteuid() and obs["socket"] == str(sock)
    assert obs["socket_rw"] is True
    assert obs["paths"][str(missing_child)] is True   # nearest existing parent (tmp_path) is writable
    assert obs["paths"]["/proc/1"] is os.access("/proc/1", os.W_OK)
    assert pa.observe_access("unix:///nonexistent/docker.sock")["socket_rw"] is False
    assert pa.observe_access("tcp://127.0.0.1:2375")["socket_rw"] is None
