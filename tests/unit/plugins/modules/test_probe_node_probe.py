"""node_probe as a module on this (GPU-less) machine: exit shape, check mode, docs vs argspec, stdlib only."""
import ast
import json
import os
import socket

import pytest
import yaml

from tests.helpers.module_docs import module_doc
from ansible.module_utils.testing import patch_module_args

from ansible_collections.gpufleet.kimi_k3.plugins.doc_fragments import attributes
from ansible_collections.gpufleet.kimi_k3.plugins.modules import node_probe

PLUGINS = os.path.dirname(os.path.dirname(os.path.abspath(node_probe.__file__)))


def run_module(args, capsys):
    with patch_module_args(args):
        with pytest.raises(SystemExit) as exc:
            node_probe.main()
    return exc.value.code, json.loads(capsys.readouterr().out)


def test_runs_without_any_gpu_tool_and_reports_absence(capsys, tmp_path):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(1)
    busy = s.getsockname()[1]
    try:
        rc, out = run_module({"docker_host": "unix://%s/none.sock" % tmp_path, "model_cache_dir": str(tmp_path / "x"),
                              "ports": [busy, {"name": "api", "port": busy, "bind": ["192.0.2.1"]}],
                              "bind_addresses": ["127.0.0.1"], "_ansible_check_mode": True}, capsys)
    finally:
        s.close()
    assert rc == 0 and out["changed"] is False
    f = out["ansible_facts"]["node_probe"]
    for key in ("gpu_count", "gpu_model", "driver_version", "cuda_version", "rocm_version", "mnnvl", "tools",
                "errors"):
        assert key in f
    if f["tools"]["nvidia-smi"] is None and f["tools"]["amd-smi"] is None and not os.path.exists("/dev/kfd"):
        assert f["vendor"] is None and f["gpu_count"] == 0 and f["errors"]
    assert f["engine"]["reachable"] in (True, False)
    assert f["disk"]["checked_path"] == str(tmp_path) and f["disk"]["free_bytes"] > 0
    assert f["shm_bytes"] is None or f["shm_bytes"] > 0
    assert f["kernel"] == os.uname().release
    assert [p["state"] for p in f["ports"]] == ["in_use", "not_local"]


def test_bad_option_type_fails(capsys):
    rc, out = run_module({"command_timeout": "soon", "docker_host": "unix:///x.sock", "model_cache_dir": "/x"}, capsys)
    assert rc == 1 and "command_timeout" in out["msg"]


def test_engine_socket_and_cache_dir_have_no_default_here(capsys):
    """They come from the plan (one declaration), the module does not repeat a default."""
    rc, out = run_module({}, capsys)
    assert rc == 1 and out["msg"] == "missing required arguments: docker_host, model_cache_dir"


def test_documentation_matches_argument_spec():
    doc = module_doc(node_probe)
    spec = node_probe.ARGUMENT_SPEC
    assert set(doc["options"]) == set(spec)
    for name, opt in doc["options"].items():
        assert opt["type"] == spec[name]["type"], name
        assert opt.get("default") == spec[name].get("default"), name
        assert opt.get("elements") == spec[name].get("elements"), name
    subs = doc["options"]["docker_client"]["suboptions"]
    assert set(subs) == set(spec["docker_client"]["options"]) == {"tls", "validate_certs", "ca_path", "client_cert",
                                                                  "client_key", "use_ssh_client"}
    for name, opt in subs.items():
        want = spec["docker_client"]["options"][name]
        assert (opt["type"], opt.get("default")) == (want["type"], want["default"]), name
    # the support levels come from the collection's attributes fragment
    assert "gpufleet.kimi_k3.attributes" in doc["extends_documentation_fragment"]
    shared = yaml.safe_load(attributes.ModuleDocFragment.DOCUMENTATION)["attributes"]
    assert shared["check_mode"]["support"] == "full" and doc["attributes"]["check_mode"]["details"]
    ret = yaml.safe_load(node_probe.RETURN)
    contains = ret["ansible_facts"]["contains"]["node_probe"]["contains"]
    for key in ("gpu_count", "gpu_model", "driver_version", "cuda_version", "rocm_version", "mnnvl", "tools",
                "errors"):
        assert key in contains
    yaml.safe_load(node_probe.EXAMPLES)


STDLIB_OK = {"__future__", "errno", "glob", "json", "os", "re", "socket", "http", "urllib", "urlparse",
             "xml", "resource", "time", "importlib", "sys", "ansible", "ansible_collections"}


@pytest.mark.parametrize("path", ["modules/node_probe.py", "module_utils/probe/collect.py",
                                  "module_utils/probe/parsers.py", "module_utils/engine/api.py",
                                  "module_utils/engine/docker_sdk.py", "modules/node_gpu_memory.py",
                                  "module_utils/probe/gpu_memory.py"])
def test_node_side_code_is_stdlib_only_and_py39(path):
    src = open(os.path.join(PLUGINS, path)).read()
    tree = ast.parse(src, feature_version=(3, 9))      # syntax valid for Python 3.9
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            names = [node.module or ""]
        else:
            continue
        for n in names:
            assert n.split(".")[0] in STDLIB_OK, (path, n)
