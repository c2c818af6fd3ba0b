"""vllm_smoke as a module: argument spec, check mode, exit shape, documentation consistency."""
import json
import re

import pytest
import yaml
from ansible.module_utils.testing import patch_module_args

from ansible_collections.gpufleet.kimi_k3.plugins.modules import vllm_smoke

from tests.helpers.module_docs import module_doc
from tests.unit.plugins.module_utils.smoke.test_smoke_fake import FakeVLLM


def run_module(args, capsys, module=vllm_smoke):
    with patch_module_args(args):
        with pytest.raises(SystemExit) as exc:
            module.main()
    return exc.value.code, json.loads(capsys.readouterr().out)


def test_check_mode_runs_read_only_requests_and_reports_no_change(capsys):
    with FakeVLLM() as f:
        rc, out = run_module({"base_url": f.base_url, "groups": ["text"], "concurrency": 2, "max_tokens": 64,
                              "api_key": "not-logged", "_ansible_check_mode": True}, capsys)
    assert rc == 0
    assert out["changed"] is False
    facts = out["ansible_facts"]["vllm_smoke"]
    assert facts["groups"]["text"]["status"] == "ok"
    assert "text" in out["summary_table"] and "| text | ok |" in out["report_markdown"]
    assert "not-logged" not in json.dumps(out)


def test_invalid_numbers_fail(capsys):
    rc, out = run_module({"base_url": "http://127.0.0.1:9/v1", "concurrency": 0}, capsys)
    assert rc == 1 and "concurrency" in out["msg"]


def documented_options(module):
    """The module's options including those of its doc fragments (as ansible-doc merges them)."""
    return module_doc(module)


@pytest.mark.parametrize("name", ["vllm_smoke", "vllm_capacity_step"])
def test_endpoint_options_come_from_the_shared_fragments_and_spec(name):
    import importlib

    module = importlib.import_module("ansible_collections.gpufleet.kimi_k3.plugins.modules." + name)
    doc = documented_options(module)
    assert doc["options"]["validate_certs"]["default"] is True
    assert module.ARGUMENT_SPEC["validate_certs"] == {"type": "bool", "default": True}
    assert module.ARGUMENT_SPEC["ca_path"] == {"type": "path"}
    assert set(doc["options"]) == set(module.ARGUMENT_SPEC)
    # one declaration: the endpoint options are the shared spec's entries, the same objects in both modules
    from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.smoke import endpoint_args

    for option, spec in endpoint_args.ENDPOINT_ARGUMENT_SPEC.items():
        assert module.ARGUMENT_SPEC[option] is spec, option


def test_a_missing_ca_file_is_refused(capsys, tmp_path):
    rc, out = run_module({"base_url": "https://127.0.0.1:9/v1", "ca_path": str(tmp_path / "nope.pem")}, capsys)
    assert rc == 1 and "ca_path" in out["msg"] and "PEM file" in out["msg"]


def test_documentation_matches_argument_spec():
    doc = documented_options(vllm_smoke)
    spec = vllm_smoke.ARGUMENT_SPEC
    assert set(doc["options"]) == set(spec)
    for name, opt in doc["options"].items():
        assert opt["type"] == spec[name]["type"], name
        if "default" in spec[name]:
            assert opt.get("default") == spec[name]["default"], name
        # validate-modules refuses no_log in DOCUMENTATION: it lives in the argument spec only
        assert "no_log" not in opt, name
    assert spec["api_key"]["no_log"] is True
    # names that look like secrets to validate-modules (no-log-needed) must say explicitly whether they are
    for name, opt in spec.items():
        if re.search(r"pass(?!ive)|secret|token|key", name):
            assert "no_log" in opt, name
    yaml.safe_load(vllm_smoke.RETURN)
    yaml.safe_load(vllm_smoke.EXAMPLES)


def run_finalise(args, capsys):
    from ansible_collections.gpufleet.kimi_k3.plugins.modules import vllm_smoke_finalise

    return run_module(args, capsys, vllm_smoke_finalise)


def test_finalise_module_adds_the_logs_and_fails_the_log_policy_for_an_unreadable_one(capsys):
    facts = {"groups": {"text": {"status": "ok", "ttft_s": {"mean": 0.1}}}, "server": {}}
    rc, out = run_finalise({"facts": facts, "fail_policy": {"fail_on_log_errors": True}, "_ansible_check_mode": True,
                            "log_results": [{"item": "tray01", "rc": 0, "stdout": "INFO fine\n"},
                                            {"item": "tray02", "rc": 4, "stdout": "", "stderr": "denied"}]}, capsys)
    assert rc == 0 and out["changed"] is False
    got = out["ansible_facts"]["vllm_smoke"]
    assert got["log_findings"]["tray01"]["readable"] is True
    assert got["policy"]["violations"] == [
        "the container log of tray02 could not be read: vllm_container_log rc 4: denied"]
    assert "NOT READ" in out["report_markdown"] and "text" in out["summary_table"]


def test_finalise_documentation_matches_argument_spec():
    from ansible_collections.gpufleet.kimi_k3.plugins.modules import vllm_smoke_finalise as m

    doc = yaml.safe_load(m.DOCUMENTATION)
    assert set(doc["options"]) == set(m.ARGUMENT_SPEC)
    for name, opt in doc["options"].items():
        assert opt["type"] == m.ARGUMENT_SPEC[name]["type"], name
    yaml.safe_load(m.RETURN)
    yaml.safe_load(m.EXAMPLES)


def test_capacity_step_fails_when_the_server_answers_no_request(capsys):
    from ansible_collections.gpufleet.kimi_k3.plugins.modules import vllm_capacity_step

    with FakeVLLM(status=500, max_model_len=8192) as f:
        rc, out = run_module({"base_url": f.base_url, "concurrency_levels": [1, 2], "output_tokens": 8,
                              "max_prompt_tokens": 500, "timeout": 5}, capsys, module=vllm_capacity_step)
    assert rc == 1
    assert out["msg"].startswith("capacity sweep at max_model_len 8192 against %s: the server answered no request "
                                 "at concurrency 1: all 2 requests failed (HTTP 500: engine exploded)" % f.base_url)
    assert "status.yml names the node" in out["msg"]
    assert [s["failed_requests"] for s in out["sweep"]["steps"]] == [2, 4]
