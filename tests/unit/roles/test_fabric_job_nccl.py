"""The NCCL (GPU) branch of the fabric job (roles/fabric/files/fabric_job.py), which no GPU runs here: the rank's
command and env, its init_process_group arguments and device, the NCCL / RCCL version it reads, the parsing of a
rank's output and the merge of the ranks' reports; and the judge's use of that version (fabric.known_bad)."""
import copy
import json
import os

import pytest
from hypothesis import given, settings, strategies as st

from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.fabric import report as R
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.fabric import specs as fabric
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import recipe_data
from tests.unit.plugins.action.test_plan_golden import plan_inventory
from tests.unit.roles.test_fabric_job import job_module

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
JOB = os.path.join(REPO, "roles", "fabric", "files", "fabric_job.py")
FABRIC = recipe_data.load_recipe()["fabric"]
ROWS = FABRIC["known_bad"]


@pytest.fixture(name="job", scope="module")
def fixture_job():
    return job_module()


@pytest.fixture(name="gb300_spec", scope="module")
def fixture_gb300_spec():
    return fabric.build_specs(plan_inventory("gb300-cluster"), FABRIC)["specs"]["gb300-tray02"]


# ----------------------------------------------------------------------------- what the job builds


def test_the_gb300_spec_carries_the_plans_nccl_env(gb300_spec):
    assert (gb300_spec["backend"], gb300_spec["local_ranks"], gb300_spec["world_size"]) == ("nccl", 4, 8)
    assert gb300_spec["collective_env"] == {"NCCL_CUMEM_ENABLE": "1", "NCCL_MNNVL_ENABLE": "1",
                                            "NCCL_NVLS_ENABLE": "1", "NCCL_SOCKET_IFNAME": "bond0"}


def test_a_rank_command_keeps_the_containers_nccl_env_and_asks_for_nccls_warnings(job, gb300_spec):
    base = {"NCCL_NVLS_ENABLE": "1", "NCCL_SOCKET_IFNAME": "eth0", "PATH": "/usr/bin"}
    argv, env = job.worker_command(gb300_spec, 3, 1767225641.25, base, executable="/usr/bin/python3")
    assert argv == ["/usr/bin/python3", JOB, "--worker", "3", "--deadline", "1767225641.250"]
    assert dict((k, v) for k, v in env.items() if k != "KIMI_FABRIC_SPEC") == dict(base, NCCL_DEBUG="WARN")
    assert json.loads(env["KIMI_FABRIC_SPEC"]) == gb300_spec
    assert base == {"NCCL_NVLS_ENABLE": "1", "NCCL_SOCKET_IFNAME": "eth0", "PATH": "/usr/bin"}
    # the operator's own NCCL_DEBUG stands; gloo gets none
    assert job.worker_command(gb300_spec, 0, 1, {"NCCL_DEBUG": "INFO"})[1]["NCCL_DEBUG"] == "INFO"
    assert "NCCL_DEBUG" not in job.worker_command(dict(gb300_spec, backend="gloo"), 0, 1, {})[1]


def test_init_arguments_and_device_of_an_nccl_rank(job, gb300_spec):
    assert job.init_arguments(gb300_spec, 7, 0.4) == {
        "backend": "nccl", "rank": 7, "world_size": 8, "init_method": "tcp://10.20.0.11:29501", "timeout_s": 1.0,
        "device_id": True}
    assert job.device_choice(gb300_spec, 3) == ("cuda", 3)
    v6 = dict(gb300_spec, backend="gloo", master_addr="fd00::1")
    assert job.init_arguments(v6, 0, 30)["init_method"] == "tcp://[fd00::1]:29501"
    assert job.init_arguments(v6, 0, 30)["device_id"] is False and job.device_choice(v6, 3) == ("cpu", None)


@pytest.mark.parametrize("raw,text", [
    ((2, 30, 7), "2.30.7"), ([2, 28, 9], "2.28.9"), ((2, 21, 5, "x"), "2.21.5"),
    (23007, "2.30.7"), (22809, "2.28.9"), (2708, "2.7.8"), (2408, "2.4.8"),
    (None, None), ("2.30.7", None), (0, None), (True, None), ((2, 30), None)])
def test_nccl_version_text(job, raw, text):
    assert job.nccl_version_text(raw) == text


class _Nccl(object):
    def __init__(self, value):
        self.value = value

    def version(self):
        if isinstance(self.value, Exception):
            raise self.value
        return self.value


def _torch(value, hip=None):
    return type("Torch", (), {"version": type("V", (), {"hip": hip, "cuda": None if hip else "13.0"}),
                              "cuda": type("C", (), {"nccl": _Nccl(value)})})


def test_collective_library_reads_nccl_and_rccl(job):
    assert job.collective_library(_torch((2, 30, 7))) == {"library": "nccl", "version": "2.30.7", "error": None}
    rccl = {"library": "rccl", "version": "2.26.6", "error": None}
    assert job.collective_library(_torch((2, 26, 6), hip="7.2")) == rccl
    assert job.collective_library(_torch(RuntimeError("NCCL not built"))) == {
        "library": "nccl", "version": None, "error": "RuntimeError: NCCL not built"}
    assert job.collective_library(_torch("weird")) == {"library": "nccl", "version": None,
                                                       "error": "unreadable version 'weird'"}


# ----------------------------------------------------------------------------- what the job parses


def test_a_rank_report_is_its_last_result_line(job):
    out = (b'NCCL INFO x\nFABRIC_RESULT {"status": "failed"}\n'
           b'FABRIC_RESULT {"local_rank": 1, "status": "ok"}\n')
    assert job.parse_worker_output(out, b"", 0, 1) == {"local_rank": 1, "status": "ok"}


def test_a_failed_rank_keeps_nccls_warn_lines_and_stderr(job):
    out = (b"host:1:1 [1] NCCL WARN Call to mlx5dv_reg_dmabuf_mr failed with error 524\n"
           b'FABRIC_RESULT {"local_rank": 1, "status": "failed", "stage": "join", "error": "DistBackendError: '
           b'NCCL error: unhandled system error"}\n')
    assert job.parse_worker_output(out, b"Traceback\nboom\n", 1, 1) == {
        "local_rank": 1, "status": "failed", "stage": "join", "error": "DistBackendError: NCCL error: unhandled "
        "system error", "stderr": "host:1:1 [1] NCCL WARN Call to mlx5dv_reg_dmabuf_mr failed with error 524\n"
        "Traceback\nboom"}


def test_a_rank_without_a_report_or_with_a_garbled_one_is_a_failure(job):
    assert job.parse_worker_output(b"", b"Segmentation fault\n", -11, 2) == {
        "local_rank": 2, "status": "failed", "stage": "exited -11 without a report", "stderr": "Segmentation fault"}
    garbled = job.parse_worker_output(b"FABRIC_RESULT {not json\n", b"", 0, 0)
    assert garbled["status"] == "failed" and garbled["stage"].startswith("unreadable report (")
    assert job.parse_worker_output(b"FABRIC_RESULT [1]\n", None, 3, 0)["stage"] == "exited 3 without a report"
    # an object without a status is no report either (found by the property test below)
    assert job.parse_worker_output(b"FABRIC_RESULT {}\n", b"", 0, 1) == {
        "local_rank": 1, "status": "failed", "stage": "unreadable report (no status)", "stderr": ""}


@settings(max_examples=200, deadline=None)
@given(out=st.binary(max_size=200), err=st.binary(max_size=100), code=st.integers(-20, 300))
def test_parsing_any_output_gives_a_report(job, out, err, code):
    report = job.parse_worker_output(b"FABRIC_RESULT " + out, err, code, 0)
    assert isinstance(report, dict) and "status" in report


def test_merged_ranks_carry_the_library_even_when_the_group_hangs(job, gb300_spec):
    lib = {"library": "nccl", "version": "2.30.7", "error": None}
    reports = [{"local_rank": 0, "status": "timeout", "stage": "killed at the deadline", "stderr": "NVLS tuning"},
               {"local_rank": 1, "status": "timeout", "stage": "join", "library": lib}]
    merged = job._merge_workers(gb300_spec, reports)
    assert merged["status"] == "timeout" and merged["library"] == lib
    assert merged["reason"] == "local rank 0: killed at the deadline"
    assert "library" not in job._merge_workers(gb300_spec, [{"local_rank": 0, "status": "ok"}])


# ----------------------------------------------------------------------------- the judge with the version


def _result(collective):
    return {"host": "tray02", "duration_s": 9.0, "interfaces": [], "names": {}, "listen": [], "pairs": [],
            "provenance": {"vllm": "0.28.0", "torch": "2.13.0+cu130", "torch_cuda": "13.0", "torch_hip": None},
            "collective": collective, "ep_kernel": None}


OK = {"status": "ok", "join_s": 1.5, "latency_us": 20.0, "all_reduce": {"busbw_gbps": 700.0, "correct": True},
      "all_to_all": {"busbw_gbps": 300.0, "correct": True}, "pairs": []}


def _library_findings(spec, collective):
    report = R.build_report({"gb300-tray02": spec}, {"gb300-tray02": _result(collective)}, known_bad_rows=ROWS)
    return report, [f for f in report["findings"] if f["check"] == "nccl_version"]


def test_gb300_with_nccl_2_30_7_warns_of_nvls_and_still_passes(gb300_spec):
    report, found = _library_findings(gb300_spec, dict(OK, library={"library": "nccl", "version": "2.30.7"}))
    assert [(f["status"], f["expected"]) for f in found] == [
        ("warn", "no known-bad version or setting (fabric.known_bad: nvls_moe_weight_load_hang)")]
    assert found[0]["fix"].startswith("set kimi_k3_nccl_nvls_enable: false")
    assert found[0]["fix"].endswith("(source: NVIDIA/nccl#2167; vast-ai/base-image PR #233 (kimi-k3-on-vllm.md "
                                    "section 9.4; field-failures.md))")
    assert report["summary"]["ok"] and report["summary"]["warn"] == 1
    assert report["nodes"]["gb300-tray02"]["collective_library"] == {"library": "nccl", "version": "2.30.7"}
    assert "| gb300-tray02 | nccl_version | warn | NCCL 2.30.7: NCCL_NVLS_ENABLE=1" in R.render_markdown(report)


def test_nccl_2_28_9_passes_and_nvls_off_passes(gb300_spec):
    _report, found = _library_findings(gb300_spec, dict(OK, library={"library": "nccl", "version": "2.28.9"}))
    assert [(f["status"], f["observed"]) for f in found] == [("pass", "NCCL 2.28.9")]
    off = copy.deepcopy(gb300_spec)
    off["collective_env"]["NCCL_NVLS_ENABLE"] = "0"
    nccl = {"library": "nccl", "version": "2.30.7"}
    assert [f["status"] for f in _library_findings(off, dict(OK, library=nccl))[1]] == ["pass"]


def test_dmabuf_errno_524_in_a_ranks_output_fails_the_host_with_the_fix(gb300_spec):
    col = {"status": "failed", "reason": "local rank 0: join", "library": {"library": "nccl", "version": "2.28.7"},
           "ranks": [{"local_rank": 0, "status": "failed", "error": "DistBackendError: NCCL error: unhandled system "
                      "error", "stderr": "NCCL WARN Call to mlx5dv_reg_dmabuf_mr failed with error 524"}]}
    report, found = _library_findings(gb300_spec, col)
    assert [(f["status"], f["fix"][:52]) for f in found] == [
        ("fail", 'set kimi_k3_extra_env: {NCCL_DMABUF_ENABLE: "0"} and')]
    failed = [(f["host"], f["check"]) for f in report["findings"] if f["status"] == "fail"]
    assert ("gb300-tray02", "nccl_version") in failed


def test_a_version_not_read_is_a_skip_that_says_the_table_was_not_checked(gb300_spec):
    _report, found = _library_findings(gb300_spec, dict(OK, library={"library": "nccl", "version": None,
                                                                     "error": "RuntimeError: x"}))
    assert [(f["status"], f["observed"]) for f in found] == [("skip", "not read in the image: RuntimeError: x")]
    # gloo, or a collective that did not run: nothing to judge
    assert _library_findings(gb300_spec, {"status": "not_run", "reason": "no torch in image"})[1] == []
    assert _library_findings(dict(gb300_spec, backend="gloo"), OK)[1] == []
