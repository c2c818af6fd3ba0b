"""Opt-in: parse every example plan with the real `vllm serve` parser (needs the vllm package)."""
import glob
import json
import os

import pytest

from tests.helpers.runner import REPO, run_playbook

vllm = pytest.importorskip("vllm", reason="the real vllm package is not installed (opt-in test)")
pytestmark = pytest.mark.vllm


@pytest.mark.parametrize("inventory", sorted(glob.glob(os.path.join(REPO, "inventories", "*-*"))))
def test_real_parser_accepts_example_plans(inventory, tmp_path):
    import importlib.util
    spec = importlib.util.spec_from_file_location("dump", os.path.join(REPO, "scripts", "dump_vllm_flags.py"))
    dump = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(dump)
    parser = dump.build_serve_parser()
    r = run_playbook("plan.yml", inventory, extravars={"plan_dir": str(tmp_path)})
    assert r.status == "successful"
    for path in glob.glob(str(tmp_path / "*.json")):
        with open(path) as handle:
            plan = json.load(handle)
        if plan["vllm_version"] != vllm.__version__.split("+")[0]:
            continue
        parser.parse_args(plan["vllm_args"])  # raises SystemExit on an unknown flag or a bad choice
