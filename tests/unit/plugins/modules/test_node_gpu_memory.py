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
