"""plugin_utils.fabric.specs (job specs from the plan) and plugin_utils.fabric.report (the judge, the report section):
exact values on the example inventories' plans and on scripted job results."""
import copy
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.fabric import specs as fabric
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.fabric import report as R
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import recipe_data
from tests.unit.plugins.action.test_plan_golden import plan_inventory

FABRIC = recipe_data.load_recipe()["fabric"]


# ----------------------------------------------------------------------------- specs from the plan


def test_sim_gb300_pd_specs_per_deployment():
    out = fabric.build_specs(plan_inventory("sim-gb300-pd"), FABRIC)
    assert out["deployments"] == [
        {"name": "prefill-1", "head": "gb300-tray31", "hosts": ["gb300-tray31", "gb300-tray32"]},
        {"name": "decode-1", "head": "gb300-tray33", "hosts": ["gb300-tray33", "gb300-tray34"]}]
    assert sorted(out["specs"]) == ["gb300-tray31", "gb300-tray32", "gb300-tray33", "gb300-tray34"]
    worker = out["specs"]["gb300-tray34"]
    assert (worker["deployment"], worker["node_rank"], worker["nnodes"], worker["local_ranks"], worker["world_size"],
            worker["backend"]) == ("decode-1", 1, 2, 4, 8, "nccl")
    master = (worker["master_host"], worker["master_addr"], worker["master_port"])
    assert master == ("gb300-tray33", "127.0.0.33", 29501)
    # decode: DEP over both trays -> the head serves DP RPC; NIXL side channel 5558 on every node
    assert worker["nodes"] == [
        {"host": "gb300-tray33", "address": "127.0.0.33", "node_rank": 0,
         "ports": [{"port": 5558, "name": "nixl_side_channel"}, {"port": 29501, "name": "master"},
                   {"port": 29550, "name": "dp_rpc"}]},
        {"host": "gb300-tray34", "address": "127.0.0.34", "node_rank": 1,
         "ports": [{"port": 5558, "name": "nixl_side_channel"}]}]
    # --max-num-batched-tokens 32 of the decode role: 32 x 7168 x 1 byte dispatched, x 2 bytes all-reduced
    assert worker["sizes"] == {"all_reduce": 458752, "all_to_all": 229376, "pair": 229376, "iterations": 5,
                               "tokens": 32, "capped_at": None}
    assert worker["ifnames"] == {"GLOO_SOCKET_IFNAME": ["lo"], "NCCL_SOCKET_IFNAME": ["lo"]}
    assert worker["expect"] == {"vllm_version": "0.28.0", "vendor": "nvidia", "torch_build": "cuda", "version_from_image": False,
                                "image": "127.0.0.1:5000/vllm/vllm-openai@sha256:" + "e" * 64}
    # FlashInfer's NVLink all-to-all has no test of its own: the job reports it as a warning (#35).
    assert worker["ep_kernel"] == {"backend": "flashinfer_nvlink_one_sided", "module": "flashinfer",
                                   "runner": "script", "scope": "internode", "tests": []}
    assert worker["names"] == [] and worker["timeout_s"] == 60.0
    prefill = out["specs"]["gb300-tray31"]
    # TEP: no DP RPC
    assert prefill["nodes"][0]["ports"] == [{"port": 5557, "name": "nixl_side_channel"}, {"port": 29501, "name": "master"}]


def test_mi355x_mori_plan_names_mori_tests_and_rccl_through_nccl():
    specs = fabric.build_specs(plan_inventory("mi355x-rdma-2node"), FABRIC)["specs"]
    spec = specs["mi355x-node02"]
    assert (spec["backend"], spec["local_ranks"], spec["world_size"]) == ("nccl", 8, 16)
    assert spec["expect"]["torch_build"] == "hip"
    assert spec["ep_kernel"] == {
        "backend": "mori_high_throughput", "module": "mori", "runner": "pytest", "scope": "internode",
        "tests": ["/opt/mori/tests/python/ops/test_dispatch_combine_internode.py",
                  "/workspace/mori/tests/python/ops/test_dispatch_combine_internode.py"]}
    assert spec["sizes"]["all_to_all"] == 4096 * 7168 and spec["sizes"]["all_reduce"] == 4096 * 7168 * 2


def test_one_node_deployment_has_no_peers_and_intranode_kernel_scope():
    plan = plan_inventory("sim-gb300")
    plan = copy.deepcopy(plan)
    for p in plan["plans"].values():
        p["vllm_args"] = p["vllm_args"] + ["--all2all-backend", "deepep_low_latency"]
    dep = {"name": "solo", "head": "gb300-tray01", "hosts": ["gb300-tray01"]}
    spec = fabric.deployment_specs(plan, dep, FABRIC)["gb300-tray01"]
    assert spec["nnodes"] == 1 and spec["world_size"] == 4
    assert spec["ep_kernel"]["scope"] == "intranode"
    assert spec["ep_kernel"]["tests"] == ["/opt/DeepEP/tests/test_intranode.py",
                                          "/workspace/DeepEP/tests/test_intranode.py"]


def test_cpu_vendor_is_capped_and_runs_one_rank_per_node():
    plan = copy.deepcopy(plan_inventory("sim-gb300"))
    for p in plan["plans"].values():
        p["vendor"] = "cpu"
    specs = fabric.build_specs(plan, FABRIC)["specs"]
    spec = specs["gb300-tray02"]
    assert (spec["backend"], spec["local_ranks"], spec["world_size"]) == ("gloo", 1, 2)
    assert spec["sizes"]["all_reduce"] == 1048576 and spec["sizes"]["all_to_all"] == 1048576
    assert spec["sizes"]["capped_at"] == 1048576 and spec["expect"]["torch_build"] == "cpu"


def test_unknown_vendor_and_partial_deployment_are_refused_with_the_fix():
    plan = copy.deepcopy(plan_inventory("sim-gb300"))
    plan["plans"]["gb300-tray01"]["vendor"] = "intel"
    with pytest.raises(fabric.FabricSpecError) as err:
        fabric.build_specs(plan, FABRIC)
    assert str(err.value) == ("gb300-tray01: the fabric step has no backend for vendor 'intel' (known: amd, cpu, "
                              "nvidia). Fix: add it under fabric.vendors in data/recipes/kimi_k3.yml.")
    with pytest.raises(fabric.FabricSpecError) as err:
        fabric.build_specs(plan_inventory("sim-gb300"), FABRIC, hosts=["gb300-tray02"])
    assert str(err.value).startswith("deployment main: the play holds only gb300-tray02 of its hosts gb300-tray01, "
                                     "gb300-tray02 - the fabric job needs every rank")


def test_names_are_host_names_only_and_ifname_lists():
    plans = [{"internal_address": "tray1.fabric", "env": {"VLLM_NIXL_SIDE_CHANNEL_HOST": "10.0.0.1"},
              "vllm_args": ["m", "--master-addr", "head.fabric", "--data-parallel-address=fe80::1"]}]
    assert fabric.plan_names(plans) == ["head.fabric", "tray1.fabric"]
    assert fabric.socket_ifnames({"NCCL_SOCKET_IFNAME": "=eth0,^docker", "GLOO_SOCKET_IFNAME": "bond0",
                                  "NVSHMEM_BOOTSTRAP_UID_SOCK_IFNAME": "ib0", "OTHER": "x"}) == {
        "GLOO_SOCKET_IFNAME": ["bond0"], "NCCL_SOCKET_IFNAME": ["eth0"], "NVSHMEM_BOOTSTRAP_UID_SOCK_IFNAME": ["ib0"]}


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.text(max_size=30), st.text(max_size=30), max_size=6))
def test_socket_ifnames_never_raises_and_names_no_exclusion(env):
    out = fabric.socket_ifnames(env)
    for variable, names in out.items():
        assert variable.endswith(fabric.IFNAME_SUFFIXES) and names
        assert all(n and not n.startswith("^") and "," not in n for n in names)


# ----------------------------------------------------------------------------- the judge


def spec(host, rank, vendor="cpu", version="0.32.0", build="cpu"):
    nodes = [{"host": "n0", "address": "10.0.0.1", "node_rank": 0, "ports": [{"port": 29501, "name": "master"}]},
             {"host": "n1", "address": "10.0.0.2", "node_rank": 1, "ports": []}]
    return {"deployment": "main", "host": host, "node_rank": rank, "address": nodes[rank]["address"],
            "backend": "gloo", "world_size": 2, "local_ranks": 1, "master_host": "n0", "master_addr": "10.0.0.1",
            "master_port": 29501, "timeout_s": 60.0, "nodes": nodes,
            "sizes": {"all_reduce": 1048576, "all_to_all": 1048576},
            "expect": {"vllm_version": version, "vendor": vendor, "torch_build": build, "image": "img@sha256:x"}}


def good(host, rank):
    pairs = [] if rank == 0 else [{"from": "n1", "to": "n0", "address": "10.0.0.1", "port": 29501, "name": "master",
                                   "status": "ok", "connect_ms": 0.2, "detail": None}]
    return {"host": host, "duration_s": 7.5, "phases_s": {"provenance": 2.25, "ports": 0.5, "collective": 4.0},
            "interfaces": [{"variable": "GLOO_SOCKET_IFNAME", "ifnames": ["eth0"], "missing": [],
                            "carries_address": True, "address": "10.0.0.%d" % (rank + 1),
                            "interface_addresses": ["10.0.0.%d" % (rank + 1)], "address_on": ["eth0"],
                            "status": "ok"}],
            "names": {}, "listen": [], "pairs": pairs,
            "provenance": {"vllm": "0.32.0+cpu", "vllm_source": "vllm.__version__", "torch": "2.13.0+cpu",
                           "torch_cuda": None, "torch_hip": None, "errors": []},
            "collective": {"status": "ok", "join_s": 0.08, "latency_us": 130.7,
                           "all_reduce": {"busbw_gbps": 0.5, "correct": True},
                           "all_to_all": {"busbw_gbps": 1.5, "correct": True},
                           "pairs": [{"from": "n0", "to": "n1", "latency_us": 35.0, "bandwidth_gbps": 5.25,
                                      "bytes": 1048576}] if rank == 0 else []},
            "ep_kernel": None}


SPECS = {"n0": spec("n0", 0), "n1": spec("n1", 1)}


def fails(report):
    return [(f["host"], f["check"]) for f in report["findings"] if f["status"] == "fail"]


def test_healthy_results_pass_with_every_row():
    report = R.build_report(SPECS, {"n0": good("n0", 0), "n1": good("n1", 1)})
    assert report["summary"] == {"pass": 10, "fail": 0, "warn": 0, "skip": 0, "ok": True, "hosts": 2,
                                 "failed_hosts": [], "deployments": ["main"]}
    col = [f for f in report["findings"] if f["check"] == "collective" and f["host"] == "n0"][0]
    assert col["observed"] == "joined in 0.08s, all-reduce 0.500 GB/s, all-to-all 1.500 GB/s, latency 130.7 us"
    assert report["nodes"]["n1"]["all_to_all_busbw_gbps"] == 1.5 and report["nodes"]["n1"]["vllm"] == "0.32.0+cpu"
    assert (report["nodes"]["n1"]["duration_s"], report["nodes"]["n1"]["provenance_s"]) == (7.5, 2.25)
    assert report["bandwidth"] == [{"from": "n0", "to": "n1", "latency_us": 35.0, "bandwidth_gbps": 5.25,
                                    "bytes": 1048576}]
    md = R.render_markdown(report)
    assert "| n1 | n0 | 10.0.0.1 | 29501 | master | ok | 0.2 | - |" in md
    assert "| n0 | n1 | 35.0 | 5.25 | 1048576 |" in md
    assert md.startswith("## Fabric\n\n**OK** - 2 hosts (main), 0 fail, 0 skipped, 10 pass.\n")


def test_vllm_release_other_than_the_plan_is_refused_with_the_fix():
    specs = {"n0": spec("n0", 0, version="0.33.0"), "n1": spec("n1", 1, version="0.33.0")}
    report = R.build_report(specs, {"n0": good("n0", 0), "n1": good("n1", 1)})
    assert fails(report) == [("n0", "vllm_version"), ("n1", "vllm_version")]
    f = report["findings"][[x["check"] for x in report["findings"]].index("vllm_version")]
    assert f["observed"] == "image img@sha256:x carries vLLM 0.32.0+cpu (vllm.__version__)"
    assert f["fix"] == ("the plan was rendered for vLLM 0.33.0 (flags and env of that release): set "
                        "kimi_k3_vllm_version: \"0.32.0\" if the collection supports it (data/vllm_flags/), or pin "
                        "an image with vLLM 0.33.0 in kimi_k3_image")
    assert f["variable"] == "kimi_k3_vllm_version"


def test_torch_build_of_the_wrong_vendor_is_refused():
    specs = {"n0": spec("n0", 0, vendor="amd", version="0.32.0", build="hip"), "n1": spec("n1", 1)}
    n0 = good("n0", 0)
    n0["provenance"].update(torch="2.13.0+cu130", torch_cuda="13.0")
    report = R.build_report(specs, {"n0": n0, "n1": good("n1", 1)})
    assert fails(report) == [("n0", "torch_build")]
    f = [x for x in report["findings"] if x["check"] == "torch_build" and x["host"] == "n0"][0]
    assert (f["observed"], f["expected"]) == ("torch 2.13.0+cu130 (a CUDA build)", "a ROCm (HIP) build")
    assert f["fix"] == ("img@sha256:x is planned for amd nodes: use the ROCm image (vllm/vllm-openai-rocm), pinned by "
                        "digest (kimi_k3_image)")


def test_a_blocked_master_port_names_the_pair_and_the_join_that_did_not_happen():
    n1 = good("n1", 1)
    n1["pairs"][0].update(status="timeout", connect_ms=None, detail="no answer within the timeout (last: timeout)")
    for res in (n1,):
        res["collective"] = {"status": "timeout", "reason": "local rank 0: join"}
    n0 = good("n0", 0)
    n0["collective"] = {"status": "timeout", "reason": "local rank 0: join"}
    report = R.build_report(SPECS, {"n0": n0, "n1": n1})
    assert fails(report) == [("n0", "collective"), ("n1", "port"), ("n1", "collective")]
    port = [f for f in report["findings"] if f["check"] == "port"][0]
    assert port["observed"] == ("n1 -> n0 10.0.0.1:29501 (master): timeout - no answer within the timeout "
                                "(last: timeout)")
    assert port["fix"] == ("packets from n1 to 10.0.0.1:29501 are dropped (a packet filter on n0 or in the path). "
                           "Allow TCP 29501 from n1 to n0, and all TCP between the serving nodes.")
    assert port["pair"] == ["n1", "n0", 29501] and port["variable"] == "kimi_k3_master_port"
    col = [f for f in report["findings"] if f["check"] == "collective" and f["host"] == "n1"][0]
    assert col["observed"] == "did not join within 60s: local rank 0: join"
    assert col["fix"] == ("the failing pair(s) n1 -> n0:29501 (master, timeout): fix them first (see the port "
                          "findings)")
    assert R.host_failures(report)["n1"].startswith("Fabric failed on n1 - port: n1 -> n0 10.0.0.1:29501")


def test_join_timeout_without_a_failed_pair_points_at_the_interfaces():
    n0, n1 = good("n0", 0), good("n1", 1)
    n1["collective"] = {"status": "timeout", "reason": "local rank 0: join"}
    report = R.build_report(SPECS, {"n0": n0, "n1": n1})
    col = [f for f in report["findings"] if f["check"] == "collective" and f["status"] == "fail"][0]
    assert col["fix"].startswith("every planned port answered, so gloo's own connections between the ranks failed")


def test_no_result_skipped_deployment_and_crash():
    report = R.build_report(SPECS, {"n0": None, "n1": {"error": "KeyError: 'x'"}},
                            failures={"n0": "job container exited 127 without a result (no error)"})
    assert [(f["host"], f["check"], f["status"], f["observed"]) for f in report["findings"]] == [
        ("n0", "job", "fail", "job container exited 127 without a result (no error)"),
        ("n1", "job", "fail", "the job crashed: KeyError: 'x'")]
    report = R.build_report(SPECS, {}, skipped={"n0": "vLLM already runs on n0", "n1": "vLLM already runs on n0"})
    assert report["summary"]["ok"] and report["summary"]["skip"] == 2


def test_names_resolving_differently_or_to_loopback_fail():
    n0, n1 = good("n0", 0), good("n1", 1)
    n0["names"] = {"head.fabric": {"addresses": ["10.0.0.1"], "error": None}}
    n1["names"] = {"head.fabric": {"addresses": ["127.0.1.1"], "error": None}}
    report = R.build_report(SPECS, {"n0": n0, "n1": n1})
    f = [x for x in report["findings"] if x["check"] == "name"][0]
    assert (f["status"], f["observed"]) == ("fail", "head.fabric resolves differently (n0: 10.0.0.1, n1: 127.0.1.1)")
    n1["names"] = {"head.fabric": {"addresses": [], "error": "[Errno -2] Name or service not known"}}
    report = R.build_report(SPECS, {"n0": n0, "n1": n1})
    assert ("n1", "name") in fails(report)


def test_interface_that_does_not_exist_and_one_without_the_address():
    n0 = good("n0", 0)
    n0["interfaces"] = [{"variable": "GLOO_SOCKET_IFNAME", "ifnames": ["eth9"], "missing": ["eth9"],
                         "carries_address": False, "address": "10.0.0.1", "interface_addresses": [],
                         "address_on": ["bond0"], "status": "failed"}]
    f = R.check_interfaces("n0", n0)[0]
    assert f["observed"] == "GLOO_SOCKET_IFNAME=eth9 does not exist here"
    assert f["fix"].startswith("set kimi_k3_socket_ifname to bond0 (the interface that carries 10.0.0.1 on n0)")


def test_ep_kernel_not_tested_is_a_visible_warning_that_says_what():
    n0 = good("n0", 0)
    n0["ep_kernel"] = {"backend": "deepep_v2", "status": "not_tested", "detail": "the image has no deep_ep package"}
    (f,) = R.check_ep_kernel("n0", n0)
    assert (f["status"], f["observed"]) == ("warn", "deepep_v2: the image has no deep_ep package")
    assert f["fix"].startswith("the plan's all-to-all (--all2all-backend deepep_v2) runs untested")
    report = R.build_report(SPECS, {"n0": n0, "n1": good("n1", 1)})
    assert report["summary"]["ok"] and report["summary"]["warn"] == 1
    assert R.failure_message(report) == ("fabric passed on 2 hosts with 1 WARNING(s): n0 ep_kernel: deepep_v2: the "
                                         "image has no deep_ep package")


def test_flashinfer_nvlink_is_named_untested():
    from tests.unit.roles.test_fabric_job import job_module
    plan = {"vllm_args": ["m", "--all2all-backend", "flashinfer_nvlink_one_sided"]}
    kernel = fabric.ep_kernel(plan, 2, recipe_data.load_recipe()["fabric"])
    assert kernel == {"backend": "flashinfer_nvlink_one_sided", "module": "flashinfer", "runner": "script",
                      "scope": "internode", "tests": []}
    got = job_module().ep_kernel_phase({"ep_kernel": kernel}, 0, runner=lambda argv, t: (0, ""))
    assert got == {"backend": "flashinfer_nvlink_one_sided", "status": "not_tested",
                   "detail": "no test of its own is known for flashinfer (FlashInfer ships none in its wheel): the "
                             "flashinfer_nvlink_one_sided dispatch and combine were not tested"}


def test_merge_into_preflight_replaces_an_earlier_fabric_section():
    report = R.build_report(SPECS, {"n0": good("n0", 0), "n1": good("n1", 1)})
    text, md = R.merge_into_preflight('{"schema": 1}', "# Preflight report\n\nbody\n", report)
    assert json.loads(text)["fabric"]["summary"]["ok"] is True and json.loads(text)["schema"] == 1
    again_text, again_md = R.merge_into_preflight(text, md, report)
    assert again_md == md and again_md.count("## Fabric") == 1 and md.startswith("# Preflight report\n\nbody\n")


@pytest.mark.parametrize("version,want", [("0.32.0+cpu", "0.32.0"), ("v0.28.0", "0.28.0"), ("0.28.0", "0.28.0"),
                                          ("0.1.dev19253+g5f76ae224", "0.1.dev19253"), ("", ""), (None, "")])
def test_release(version, want):
    assert R.release(version) == want


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.none(), st.text(max_size=40), st.integers(), st.floats(allow_nan=False)))
def test_release_never_raises_and_drops_the_local_part(value):
    out = R.release(value)
    assert isinstance(out, str) and "+" not in out


def test_a_rank_that_gave_up_names_its_phase_and_peer_in_the_message():
    n0, n1 = good("n0", 0), good("n1", 1)
    n1["collective"] = {"status": "timeout", "phase": "rendezvous", "peer": "n0 (10.0.0.1:29501)",
                        "reason": "local rank 0: rendezvous with n0 (10.0.0.1:29501) failed after 7 attempt(s) in "
                                  "29.5s: RuntimeError: The client socket has timed out"}
    n0["collective"] = {"status": "timeout", "phase": "join", "peer": "n1 10.0.0.2 (rank 1)",
                        "reason": "local rank 0: killed at the deadline"}
    report = R.build_report(SPECS, {"n0": n0, "n1": n1})
    assert fails(report) == [("n0", "collective"), ("n1", "collective")]
    col = dict((f["host"], f) for f in report["findings"] if f["check"] == "collective")
    assert col["n1"]["observed"] == (
        "did not join within 60s in phase rendezvous (peer n0 (10.0.0.1:29501)): local rank 0: rendezvous with n0 "
        "(10.0.0.1:29501) failed after 7 attempt(s) in 29.5s: RuntimeError: The client socket has timed out")
    assert col["n1"]["fix"] == ("the master port answered the port check, so the head's rank served its store late "
                                "or not at all: see n0's collective finding; on a busy machine raise "
                                "fabric_timeout_s")
    assert col["n0"]["observed"] == ("did not join within 60s in phase join (peer n1 10.0.0.2 (rank 1)): local rank "
                                     "0: killed at the deadline")
    assert R.host_failures(report)["n0"] == (
        "Fabric failed on n0 - collective: did not join within 60s in phase join (peer n1 10.0.0.2 (rank 1)): local "
        "rank 0: killed at the deadline (expected 2 ranks joined within 60s over gloo) - fix: every planned port "
        "answered, so gloo's own connections between the ranks failed: check the interface findings "
        "(kimi_k3_socket_ifname) and allow all TCP between the nodes (gloo and NCCL open random ports)")
