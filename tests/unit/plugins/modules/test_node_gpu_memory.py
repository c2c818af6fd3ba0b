"""node_gpu_memory as a module: check mode, exit shape, with a scripted nvidia-smi first on the PATH."""
import json
import os

import pytest
from ansible.module_utils.testing import patch_module_args

from ansible_collections.gpufleet.kimi_k3.plugins.modules import node_gpu_memory


def test_the_module_reads_in_check_mode_and_changes_nothing(capsys, tmp_path, monkeypatch):
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho '0, NVIDIA GB300, GPU-0, 580.173.02, 284208, 269998, 10.3, 00000008:06:00.0'\n")
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", "%s:%s" % (tmp_path, os.environ.get("PATH", "")))
    with patch_module_args({"_ansible_check_mode": True}):
        with pytest.raises(SystemExit) as exc:
            node_gpu_memory.main()
    out = json.loads(capsys.readouterr().out)
    assert exc.value.code == 0 and out["changed"] is False
    gm = out["gpu_memory"]
    assert (gm["vendor"], gm["gpus"], gm["errors"]) == (
        "nvidia", [{"index": 0, "memory_used_mib": 269998, "memory_total_mib": 284208}], [])


def _run(capsys, args):
    with patch_module_args(args):
        with pytest.raises(SystemExit):
            node_gpu_memory.main()
    return json.loads(capsys.readouterr().out)["gpu_memory"]


def test_a_node_without_gpu_tools_reads_the_engine_containers_memory(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # neither nvidia-smi nor amd-smi
    asked = []

    def engine_get(options, path, timeout=5.0):
        asked.append((options["docker_host"], path))
        return 200, json.dumps({"memory_stats": {"usage": 3 * 2 ** 30, "limit": 6 * 2 ** 30}}).encode()

    monkeypatch.setattr(node_gpu_memory.engine_api, "engine_get", engine_get)
    gm = _run(capsys, {"container": "vllm-kimi-k3", "docker_host": "unix:///run/n1/docker.sock"})
    assert asked == [("unix:///run/n1/docker.sock", "/containers/vllm-kimi-k3/stats?stream=false")]
    assert gm["engine_memory"] == {"container": "vllm-kimi-k3", "used_mib": 3072.0, "limit_mib": 6144.0}
    assert gm["vendor"] is None and gm["errors"] == ["neither nvidia-smi nor amd-smi on this node: GPU memory not read"]
    # no container named: nothing asked; an engine that does not answer is a reason, not a failure
    assert _run(capsys, {})["engine_memory"] is None and len(asked) == 1

    def no_engine(options, path, timeout=5.0):
        raise node_gpu_memory.engine_api.EngineError("no answer from the engine: connection refused")

    monkeypatch.setattr(node_gpu_memory.engine_api, "engine_get", no_engine)
    gm = _run(capsys, {"container": "vllm-kimi-k3"})
    assert gm["engine_memory"] is None
    assert gm["errors"][-1] == "docker stats vllm-kimi-k3: no answer from the engine: connection refused"
