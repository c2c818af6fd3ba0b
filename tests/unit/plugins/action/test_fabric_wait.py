"""The fabric_wait action (issue #35): the fabric job's progress lines, each printed once, a still-running line when
the job says nothing new, and one result when its container ends, never an until loop's FAILED - RETRYING."""
from unittest import mock

from ansible_collections.gpufleet.kimi_k3.plugins.action import fabric_wait as action
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.fabric import wait as W

PORTS = "FABRIC_PROGRESS ports: listening on this node's ports and dialling every peer's, 30s"
JOIN = "FABRIC_PROGRESS collective: 1 local rank(s) join n0 (10.0.0.1:29501) over gloo, 28s left"


def test_each_progress_line_is_printed_once_and_silence_gets_a_reminder():
    progress = W.Progress(15)
    assert progress.feed(2.0, ["some vLLM import warning", PORTS]) == [
        "    2s  ports: listening on this node's ports and dialling every peer's, 30s"]
    assert progress.feed(4.0, [PORTS]) == []
    assert progress.feed(16.9, [PORTS]) == []
    assert progress.feed(17.0, [PORTS]) == [
        "   17s  still running (last: ports: listening on this node's ports and dialling every peer's, 30s)"]
    assert progress.feed(19.0, ["2026-01-01T00:00:00Z " + PORTS, "2026-01-01T00:00:01Z " + JOIN]) == [
        "   19s  collective: 1 local rank(s) join n0 (10.0.0.1:29501) over gloo, 28s left"]
    assert progress.last == "collective: 1 local rank(s) join n0 (10.0.0.1:29501) over gloo, 28s left"
    assert W.Progress(15).feed(15.0, None) == ["   15s  still running (last: the job has not started yet)"]


def test_the_outcome_says_how_the_job_ended():
    assert W.outcome({"running": False, "status": "exited", "exit_code": 0}, 41.4, "done in 40s: collective ok") == (
        False, "the fabric job ended after 41s (exited, exit code 0); last progress: done in 40s: collective ok")
    assert W.outcome({"running": True, "status": "running"}, 120.2, None) == (
        True, "the fabric job still runs after 120s (its timeout plus the start grace); last progress: none")


def _run(looks, timeout=120.0):
    task = mock.MagicMock()
    task.args = {"container": "vllm-kimi-k3-fabric", "timeout": timeout, "interval": 2, "progress_every": 15}
    task.async_val = 0
    plugin = action.ActionModule(task, mock.MagicMock(), mock.MagicMock(), loader=None, templar=None,
                                 shared_loader_obj=None)
    clock = {"t": 100.0}
    calls, printed = [], []

    def fake(module_name, module_args, task_vars):
        calls.append((module_name, dict(module_args)))
        return looks.pop(0)

    def sleep(seconds):
        clock["t"] += seconds

    with mock.patch.object(action.ActionBase, "run", return_value={}), \
            mock.patch.object(plugin, "_execute_module", side_effect=fake), \
            mock.patch.object(action.time, "monotonic", side_effect=lambda: clock["t"]), \
            mock.patch.object(action.time, "sleep", side_effect=sleep), \
            mock.patch.object(action.display, "display", side_effect=printed.append):
        result = plugin.run(task_vars={"inventory_hostname": "n1"})
    return result, calls, printed


def test_the_wait_prints_progress_and_ends_with_the_container():
    looks = [{"running": True, "status": "running", "log_tail": [PORTS]},
             {"running": True, "status": "running", "log_tail": [PORTS, JOIN]},
             {"running": False, "status": "exited", "exit_code": 0,
              "log_tail": [PORTS, JOIN, "FABRIC_PROGRESS done in 9s: collective ok", "FABRIC_RESULT {}"]}]
    result, calls, printed = _run(looks)
    assert printed == ["[n1]     0s  ports: listening on this node's ports and dialling every peer's, 30s",
                       "[n1]     2s  collective: 1 local rank(s) join n0 (10.0.0.1:29501) over gloo, 28s left",
                       "[n1]     4s  done in 9s: collective ok"]
    assert calls[0] == ("gpufleet.kimi_k3.vllm_node_status", {
        "container": "vllm-kimi-k3-fabric", "docker_host": "unix:///var/run/docker.sock", "tail": 40, "wait_s": 0,
        "docker_client": {"tls": False, "validate_certs": False, "ca_path": None, "client_cert": None,
                          "client_key": None, "use_ssh_client": False}})
    assert len(calls) == 3
    assert result == {"changed": False, "failed": False, "elapsed_s": 4.0, "running": False, "status": "exited",
                      "exit_code": 0, "progress": "done in 9s: collective ok",
                      "msg": "n1: the fabric job ended after 4s (exited, exit code 0); last progress: done in 9s: "
                             "collective ok"}


def test_a_job_past_its_timeout_fails_with_its_last_progress():
    looks = [{"running": True, "status": "running", "log_tail": [JOIN]} for _look in range(4)]
    result, calls, _printed = _run(looks, timeout=6.0)
    assert len(calls) == 4 and result["failed"] and result["running"]
    assert result["msg"] == ("n1: the fabric job still runs after 6s (its timeout plus the start grace); last "
                             "progress: collective: 1 local rank(s) join n0 (10.0.0.1:29501) over gloo, 28s left")


def test_an_engine_that_cannot_be_read_three_times_in_a_row_fails_the_wait():
    looks = [{"failed": True, "msg": "Cannot connect to the Docker daemon"}] * 3
    result, calls, _printed = _run(looks)
    assert len(calls) == 3 and result == {
        "failed": True, "msg": "n1: the fabric job's container cannot be read: Cannot connect to the Docker daemon"}
