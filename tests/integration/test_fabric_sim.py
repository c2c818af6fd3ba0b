"""The fabric step (playbooks/fabric.yml) on the rehearsal cluster.

- GPU stand-in profile (gb300, images without torch): the step passes with real port / name / interface checks and
  the collective reported "not run: no torch in image"; a second run changes nothing; check mode starts nothing;
  no job container is left on any node.
- Real-engine cpu profile (`sim/simctl up --cluster cpu`, inventories/sim-cpu: two nodes, gloo over the nodes'
  addresses): three faults that break exactly this step, each named
  with node (and pair), setting and fix within the timeout plus container start, nothing left running:
  an interface that exists but does not carry the node's address (kimi_k3_socket_ifname set to the machine's first
  interface other than lo: the nodes share the host's network namespace and their 127.x addresses are on lo; the
  collective is not started on it, so no traffic leaves loopback), the master port blocked by a packet filter (sim
  fault `fabric_port_blocked`: an iptables REJECT for the head's address and master port, 29601 on this cluster), and an image whose vLLM
  release differs from the plan's (-e kimi_k3_vllm_version=0.33.0 against the 0.32.0 image); and (#35) the
  engine-dev variant, a development build, accepted with kimi_k3_vllm_version: image while an extra arg its own
  parser does not know is refused in this step, naming flag and digest. The healthy step (real gloo bandwidth and
  latency per pair) is asserted on the fabric report of test_real_engine.py (a)'s deploy, the same step.

Needs the cluster up (KIMI_SIM_AUTO_UP=1 brings it up).
"""
import json
import os
import tempfile
import time

import pytest

from tests.helpers.runner import failed_tasks, run_playbook
from tests.integration.test_preflight_sim import fault

pytestmark = pytest.mark.sim

JOB_CONTAINER = "vllm-kimi-k3-fabric"
FAULT_PORT_BLOCKED = "fabric_port_blocked"
TIMEOUT_S = 60
# What the job may take past its timeout once started: stopping the rank processes and merging their reports.
START_S = 30


def fabric(sim, extra=None, check=False):
    art = tempfile.mkdtemp(prefix="fabric-art-")
    started = time.monotonic()
    r = run_playbook("fabric.yml", sim.inventory, extravars=dict({"fabric_artifacts_dir": art}, **(extra or {})),
                     check=check, timeout=900)
    took = time.monotonic() - started
    path = os.path.join(art, "fabric-report.json")
    report = json.load(open(path)) if os.path.exists(path) else None
    return r, report, took


def failing(report):
    return sorted((f["host"], f["check"]) for f in report["findings"] if f["status"] == "fail")


def within_bound(report, took):
    """The job on each node decides within the step's timeout once it has started (its start: the container and the
    provenance phase, which imports torch and asks the vLLM CLI; the playbook's plan, pull and report steps around
    it are not the step's detection time, and all of these grow with the machine's load)."""
    nodes = report["nodes"]
    print("fabric step: playbook %.1f s, per node job / start %s" % (
        took, {h: (n["duration_s"], n["provenance_s"]) for h, n in nodes.items()}))
    assert all(n["duration_s"] - n["provenance_s"] < TIMEOUT_S + START_S for n in nodes.values()), nodes


def nothing_left(sim):
    for n in sim.nodes:
        out = sim.docker(n["name"], "ps", "-a", "--filter", "name=%s" % JOB_CONTAINER, "--format", "{{.Names}}")
        assert out.stdout.strip() == "", (n["name"], out.stdout)


def test_stand_in_profile_passes_without_torch_and_changes_nothing(sim_cluster):
    sim = sim_cluster("gb300")
    r, report, _took = fabric(sim)
    assert r.status == "successful", (failed_tasks(r), report and failing(report))
    assert report["summary"]["ok"] and failing(report) == []
    cols = [f["observed"] for f in report["findings"] if f["check"] == "collective"]
    assert cols == ["not run: no torch in image"] * len(sim.nodes)
    head, worker = sim.nodes[0]["name"], sim.nodes[1]["name"]
    assert [(p["from"], p["to"], p["name"], p["status"]) for p in report["pairs"]] == [
        (worker, head, "master", "ok")]
    nothing_left(sim)
    r2, _report, _took = fabric(sim)
    assert r2.status == "successful" and not any((r2.stats or {}).get("changed", {}).values())
    r3, report3, _took = fabric(sim, check=True)
    assert r3.status == "successful" and report3 is None
    nothing_left(sim)


def by_check(report, check):
    return {f["host"]: f for f in report["findings"] if f["check"] == check}


def test_stand_in_dev_builds_are_judged_by_their_own_parser(sim_cluster):
    """#35 on the GPU profiles: the stand-in's development builds (sim/kimisim/images.py DEV_SPEC) carry the
    stand-in's `vllm` package, so kimi_k3_vllm_version: image runs the fabric job's image check in them. The ROCm
    one reports the recipe's kimi-k3 version, which follows 0.27.1's rules: the 0.28.0-rendered argv is judged by
    its parser (a warning says the rules differ; its envs.py lists no names, also a warning), and the step passes.
    On GB300 an extra arg its parser does not know is refused on every node, naming the flag and the digest."""
    sim = sim_cluster("mi355x")
    image = sim.images["standin-dev"]
    r, report, _took = fabric(sim, extra={"kimi_k3_image": image, "kimi_k3_vllm_version": "image"})
    assert r.status == "successful", (failed_tasks(r), report and failing(report))
    names = [n["name"] for n in sim.nodes]
    version, argv, env = (by_check(report, c) for c in ("image_version", "image_argv", "image_env"))
    assert sorted(version) == sorted(argv) == sorted(env) == sorted(names)
    for host in names:
        assert version[host]["status"] == "warn" and "reports vLLM 0.1.dev19253+g5f76ae224 (a development build); " \
            "it follows vLLM 0.27.1's rules" in version[host]["observed"], version[host]
        assert argv[host]["status"] == "pass" and env[host]["status"] == "warn"
    nothing_left(sim)
    gb = sim_cluster("gb300")
    image = gb.images["standin-dev"]
    r, report, _took = fabric(gb, extra={"kimi_k3_image": image, "kimi_k3_vllm_version": "image",
                                         "kimi_k3_extra_args": ["--no-such-flag-k3", "1"]})
    assert r.status == "failed"
    assert sorted(failing(report)) == sorted((n["name"], "image_argv") for n in gb.nodes)
    for finding in by_check(report, "image_argv").values():
        assert "refuses the flag --no-such-flag-k3" in finding["observed"] and image.split("@")[1] in finding["observed"]
        assert "0.28.1.dev12+g5f76ae224" in finding["observed"] and finding["variable"] == "kimi_k3_extra_args"
    assert [f["status"] for f in by_check(report, "image_version").values()] == ["pass"] * len(gb.nodes)
    nothing_left(gb)


@pytest.fixture
def cpu(sim_cluster):
    return sim_cluster("cpu")


def other_interface():
    """An interface of this machine besides lo (it carries none of the nodes' 127.x addresses), or None."""
    names = sorted(n for n in os.listdir("/sys/class/net") if n != "lo")
    return names[0] if names else None


@pytest.mark.sim_group("cpu")
def test_cpu_interface_without_the_address_fails_with_the_interface_that_has_it(cpu):
    wrong = other_interface()
    if wrong is None:
        pytest.skip("this machine has no network interface besides lo")
    r, report, took = fabric(cpu, extra={"kimi_k3_socket_ifname": wrong})
    assert r.status == "failed"
    # every pinned interface variable (GLOO_SOCKET_IFNAME and its siblings) fails on every node, and nothing else
    assert {c for _h, c in failing(report)} == {"interface"}
    assert {h for h, _c in failing(report)} == {n["name"] for n in cpu.nodes}
    for f in report["findings"]:
        if f["check"] == "interface":
            assert "does not carry" in f["observed"] and f["fix"].startswith("set kimi_k3_socket_ifname to lo ")
    within_bound(report, took)
    nothing_left(cpu)


@pytest.mark.sim_group("cpu")
def test_cpu_blocked_master_port_names_the_pair(cpu):
    head, worker = cpu.nodes[0]["name"], cpu.nodes[1]["name"]
    # the blocked port holds the job to its deadline: half the default is enough to see it, and half the wait
    with fault(head, FAULT_PORT_BLOCKED):
        r, report, took = fabric(cpu, extra={"fabric_timeout_s": TIMEOUT_S // 2})
    assert r.status == "failed"
    assert (worker, "port") in failing(report)
    port = [f for f in report["findings"] if f["check"] == "port"][0]
    assert port["pair"][:2] == [worker, head] and port["variable"] == "kimi_k3_master_port"
    assert "Allow TCP" in port["fix"]
    col = [f for f in report["findings"] if f["check"] == "collective" and f["host"] == worker][0]
    assert col["status"] == "fail" and "%s -> %s" % (worker, head) in col["fix"]
    within_bound(report, took)
    nothing_left(cpu)


@pytest.mark.sim_group("cpu")
def test_cpu_image_of_another_vllm_release_is_refused(cpu):
    r, report, _took = fabric(cpu, extra={"kimi_k3_vllm_version": "0.33.0"})
    assert r.status == "failed"
    assert [c for _h, c in failing(report)] == ["vllm_version"] * len(cpu.nodes)
    f = [x for x in report["findings"] if x["check"] == "vllm_version"][0]
    assert "carries vLLM 0.32.0" in f["observed"] and f["variable"] == "kimi_k3_vllm_version"
    nothing_left(cpu)


@pytest.mark.sim_group("cpu")
def test_cpu_dev_build_with_image_passes_and_an_unknown_extra_arg_is_refused_by_its_own_parser(cpu):
    """#35: the engine-dev variant reports 0.32.1.dev7+g5f76ae224.cpu. With kimi_k3_vllm_version: image the fabric step
    accepts the development build (it follows 0.32.0's rules, the nearest release at or below 0.32.1), and the image's
    own vllm serve parser refuses an extra arg it does not know, naming the flag and the digest, in this step (no vLLM
    container has started). One fabric.yml run, no deploy."""
    image = cpu.images["engine-dev"]
    r, report, _took = fabric(cpu, extra={"kimi_k3_image": image, "kimi_k3_vllm_version": "image",
                                          "kimi_k3_extra_args": ["--no-such-flag-k3", "1"]})
    assert r.status == "failed"
    assert failing(report) == sorted((n["name"], "image_argv") for n in cpu.nodes)
    by = dict(((f["host"], f["check"]), f) for f in report["findings"])
    for n in cpu.nodes:
        assert by[(n["name"], "vllm_version")]["status"] == "pass"
        version = by[(n["name"], "image_version")]
        assert version["status"] == "pass" and "reports vLLM 0.32.1.dev7+g5f76ae224.cpu" in version["observed"]
        assert "follows vLLM 0.32.0's rules" in version["observed"]
        argv = by[(n["name"], "image_argv")]["observed"]
        assert "--no-such-flag-k3" in argv and image.split("@", 1)[1] in argv and n["name"] in argv
    for n in cpu.nodes:
        out = cpu.docker(n["name"], "ps", "-a", "--filter", "name=vllm-kimi-k3", "--format", "{{.Names}}")
        assert "vllm-kimi-k3\n" not in out.stdout + "\n", out.stdout
    nothing_left(cpu)
