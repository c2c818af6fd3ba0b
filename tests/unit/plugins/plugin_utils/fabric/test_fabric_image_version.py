"""kimi_k3_vllm_version: image (#35): development builds' versions, the release rules they follow, the flag an
argparse refusal names, the fabric findings of the image's own judgement, and the plan and spec that lead there."""
import argparse

import pytest
from hypothesis import given, settings, strategies as st

from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.fabric import image_version as IV
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.fabric import report as R
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.fabric import specs as fabric
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import recipe_data
from tests.unit.plugins.plugin_utils.fabric.test_fabric import good, spec
from tests.unit.roles.test_fabric_job import job_module

RECIPE = recipe_data.load_recipe()
BUILDS = RECIPE["development_builds"]["builds"]
RELEASES = sorted(recipe_data.load_snapshots())
IMAGE = "reg/vllm-openai-rocm@sha256:" + "5a" * 32


@pytest.mark.parametrize("text, release, dev, local", [
    ("0.28.0", (0, 28, 0), False, None),
    ("0.32.0+cpu", (0, 32, 0), False, "cpu"),
    ("v0.33.0", (0, 33, 0), False, None),
    ("0.1.dev19253+g5f76ae224", (0, 1), True, "g5f76ae224"),
    ("0.33.1.dev42+g5f76ae224.d20261201", (0, 33, 1), True, "g5f76ae224.d20261201"),
    ("0.29.0rc1", (0, 29, 0), True, None),
])
def test_parse(text, release, dev, local):
    got = IV.parse(text)
    assert (got["release"], got["dev"], got["local"]) == (release, dev, local)


@pytest.mark.parametrize("text", ["", "dev", "kimi-k3", "0.28.0 extra", None, 28, "0..1"])
def test_parse_refuses_what_is_no_version(text):
    assert IV.parse(text) is None


@given(st.one_of(st.text(max_size=40), st.none(), st.integers()))
@settings(max_examples=200, deadline=None)
def test_parse_never_raises(text):
    got = IV.parse(text)
    assert got is None or (isinstance(got["release"], tuple) and got["base"].split(".")[0].isdigit())


@pytest.mark.parametrize("version, rules, how", [
    ("0.1.dev19253+g5f76ae224", "0.27.1", "the recipe's development_builds entry for 0.1.dev19253+g5f76ae224"),
    ("0.33.1.dev42+g5f76ae224", "0.33.0", "the nearest release at or below its base version 0.33.1"),
    ("0.32.1.dev7+g5f76ae224.cpu", "0.32.0", "the nearest release at or below its base version 0.32.1"),
    ("0.29.0rc1", "0.28.0", "the nearest release at or below its base version 0.29.0"),
    ("0.28.0.dev3", "0.28.0", "the nearest release at or below its base version 0.28.0"),
    ("0.32.0+cpu", "0.32.0", "its own release"),
    ("0.40.0", "0.33.0", "the nearest release at or below its base version 0.40.0"),
])
def test_rules_release(version, rules, how):
    got, why = IV.rules_release(version, RELEASES, BUILDS)
    assert got == rules and why.startswith(how)


def test_rules_release_without_an_entry_or_a_version_says_why():
    assert IV.rules_release("0.1.dev19253+g5f76ae224", RELEASES, []) == (
        None, "no release with a flag snapshot (0.27.1, 0.28.0, 0.32.0, 0.33.0) lies at or below its base version 0.1")
    assert IV.rules_release("nightly", RELEASES, BUILDS)[0] is None
    # An entry without the +local part holds for every local build of that version.
    assert IV.rules_release("0.1.dev7+gabc", RELEASES, [{"version": "0.1.dev7", "rules": "0.28.0"}])[0] == "0.28.0"


@given(st.text(max_size=30), st.lists(st.sampled_from(["0.27.1", "0.28.0", "x", "0.33.0.dev1"]), max_size=4))
@settings(max_examples=200, deadline=None)
def test_rules_release_never_raises_and_picks_a_known_release(version, releases):
    got, why = IV.rules_release(version, releases, BUILDS)
    assert isinstance(why, str) and (got is None or got in releases or got in ("0.27.1",))


@pytest.mark.parametrize("message, flag", [
    ("vllm serve: error: unrecognized arguments: --no-such-flag-k3 1", "--no-such-flag-k3"),
    ("vllm: error: unrecognized arguments: 1 --x-y", "--x-y"),
    ("vllm serve: error: argument --max-num-seqs: invalid int value: 'lots'", "--max-num-seqs"),
    ("vllm serve: error: argument --all2all-backend: invalid choice: 'x' (choose from 'naive')", "--all2all-backend"),
    ("error: argument --tensor-parallel-size/-tp: invalid int value: 'eight'", "--tensor-parallel-size"),
    ("TypeError: Error: --enable-auto-tool-choice requires --tool-call-parser", None),
    ("exit 2", None), (None, None),
])
def test_flag_of(message, flag):
    assert IV.flag_of(message) == flag


@given(st.one_of(st.text(max_size=80), st.none()))
@settings(max_examples=300, deadline=None)
def test_flag_of_never_raises_and_names_a_flag_or_nothing(message):
    got = IV.flag_of(message)
    assert got is None or (got.startswith("-") and got in message)


# ----------------------------------------------------------------------------- the fabric findings


def image_spec(host, rank, argv=("m", "--no-such-flag-k3", "1"), version="0.28.0"):
    out = spec(host, rank, vendor="amd", version=version, build="hip")
    out["expect"].update(image=IMAGE, version_from_image=True)
    out["image_check"] = {"argv": list(argv), "env_names": ["VLLM_HOST_IP"], "timeout_s": 180.0}
    return out


def image_result(host, rank, **check):
    res = good(host, rank)
    res["provenance"].update(vllm="0.1.dev19253+g5f76ae224", torch="2.11.0", torch_hip="7.2")
    res["image_check"] = dict({"status": "ok", "version": "0.1.dev19253+g5f76ae224", "accepted": True,
                               "error": None, "parser": "vllm.entrypoints.cli.serve.ServeSubcommand",
                               "env_known": 312, "unknown_env": []}, **check)
    return res


def judge(check, version="0.28.0"):
    return IV.check_image("n0", image_spec("n0", 0, version=version), image_result("n0", 0, **check), RELEASES, BUILDS)


def test_an_unknown_flag_is_refused_naming_node_flag_digest_and_version():
    found = judge({"accepted": False, "error": "vllm serve: error: unrecognized arguments: --no-such-flag-k3 1"},
                  version="0.27.1")
    assert [(f["check"], f["status"]) for f in found] == [("image_version", "pass"), ("image_argv", "fail"),
                                                          ("image_env", "pass")]
    assert found[0]["observed"] == (
        "image sha256:%s reports vLLM 0.1.dev19253+g5f76ae224 (a development build); it follows vLLM 0.27.1's "
        "rules: the recipe's development_builds entry for 0.1.dev19253+g5f76ae224 (%s)" % ("5a" * 32, BUILDS[0]["why"]))
    assert found[1]["observed"] == (
        "n0: image sha256:%s (vLLM 0.1.dev19253+g5f76ae224) refuses the flag --no-such-flag-k3: vllm serve: error: "
        "unrecognized arguments: --no-such-flag-k3 1" % ("5a" * 32))
    assert found[1]["fix"].startswith("remove --no-such-flag-k3 from kimi_k3_extra_args")
    assert found[1]["variable"] == "kimi_k3_extra_args"


def test_an_image_whose_envs_lists_no_names_warns_that_the_env_names_were_not_judged():
    found = judge({"env_known": 0}, version="0.27.1")
    assert [(f["check"], f["status"]) for f in found] == [("image_version", "pass"), ("image_argv", "pass"),
                                                          ("image_env", "warn")]
    assert found[2]["observed"] == ("n0: image sha256:%s (vLLM 0.1.dev19253+g5f76ae224): its vllm/envs.py lists no "
                                    "environment variables, so the plan's VLLM_* names were not judged" % ("5a" * 32))
    assert found[2]["variable"] == "kimi_k3_extra_env"
    # a check that did not run says so in image_argv; no second finding about the env names
    assert [f["check"] for f in judge({"status": "failed", "env_known": 0, "error": "ImportError: x"})] == [
        "image_version", "image_argv"]


def test_rules_other_than_the_plans_warn_and_unknown_env_names_fail():
    found = judge({"unknown_env": ["VLLM_NO_SUCH"]})
    assert [(f["check"], f["status"]) for f in found] == [("image_version", "warn"), ("image_argv", "pass"),
                                                          ("image_env", "fail")]
    assert found[0]["observed"].endswith("; the plan rendered by vLLM 0.28.0's rules")
    assert found[2]["fix"] == "remove VLLM_NO_SUCH from kimi_k3_extra_env: this image's vLLM ignores it"


def test_a_parser_that_could_not_be_built_or_no_rules_fail_with_the_fix():
    found = judge({"status": "timeout", "error": "the image's parser gave no verdict within 180s", "env_known": 0})
    assert [(f["check"], f["status"]) for f in found] == [("image_version", "warn"), ("image_argv", "fail")]
    assert "the argv was not judged (timeout: the image's parser gave no verdict within 180s)" in found[1]["observed"]
    found = judge({"version": "0.0.dev1+gabc"})
    assert found[0]["status"] == "fail" and "development_builds.builds" in found[0]["fix"]


def test_the_report_with_image_mode_accepts_the_dev_build_and_fails_the_flag():
    specs = {"n0": image_spec("n0", 0, version="0.27.1"), "n1": image_spec("n1", 1, version="0.27.1")}
    bad = {"accepted": False, "error": "vllm serve: error: unrecognized arguments: --no-such-flag-k3 1"}
    report = R.build_report(specs, {"n0": image_result("n0", 0), "n1": image_result("n1", 1, **bad)},
                            image_rules={"releases": RELEASES, "builds": BUILDS})
    assert [(f["host"], f["check"]) for f in report["findings"] if f["status"] == "fail"] == [("n1", "image_argv")]
    prov = [f for f in report["findings"] if f["check"] == "vllm_version"]
    assert [f["status"] for f in prov] == ["pass", "pass"]
    assert "--no-such-flag-k3" in R.failure_message(report) and "sha256:" + "5a" * 32 in R.failure_message(report)


def test_a_release_plan_on_a_dev_build_offers_image_not_the_dev_version():
    specs = {"n0": spec("n0", 0, version="0.28.0")}
    res = good("n0", 0)
    res["provenance"]["vllm"] = "0.1.dev19253+g5f76ae224"
    (f,) = [f for f in R.build_report(specs, {"n0": res})["findings"] if f["check"] == "vllm_version"]
    assert f["status"] == "fail"
    assert f["fix"].startswith("the image is a development build of vLLM: set kimi_k3_vllm_version: image")
    assert "0.1.dev19253" not in f["fix"]


def test_a_release_plan_has_no_image_check():
    assert IV.check_image("n0", spec("n0", 0), good("n0", 0), RELEASES, BUILDS) == []


# ----------------------------------------------------------------------------- plan and spec


def test_the_spec_carries_the_final_argv_and_vllm_env_names_only_in_image_mode():
    plan = {"vllm_version_from_image": True, "vllm_args": ["m", "--x"], "env": {"VLLM_A": "1", "NCCL_B": "0"},
            "secret_env": ["VLLM_API_KEY"]}
    want = {"argv": ["m", "--x"], "env_names": ["VLLM_A", "VLLM_API_KEY"], "timeout_s": 180.0}
    assert fabric.image_check(plan, fabric.DEFAULT_OPTIONS) == want
    assert fabric.image_check(dict(plan, vllm_version_from_image=False), fabric.DEFAULT_OPTIONS) is None


def test_plan_with_image_renders_by_the_rules_release_and_says_so():
    from tests.unit.plugins.plugin_utils.plan.test_topology import ROCM_IMAGE, make_nodes, plan
    r = plan(make_nodes(2, kimi_k3_accelerator="mi355x", kimi_k3_image=ROCM_IMAGE, kimi_k3_vllm_version="image",
                        kimi_k3_strategy="multi_node_tp", kimi_k3_interconnect="rdma", kimi_k3_socket_ifname="eth0",
                        kimi_k3_extra_args=["--no-such-flag-k3", "1"]))
    assert r["ok"], r["errors"]
    node = r["plans"]["node0"]
    assert (node["vllm_version"], node["vllm_version_from_image"]) == ("0.28.0", True)
    assert node["vllm_args"][-2:] == ["--no-such-flag-k3", "1"]
    assert r["cluster"]["vllm_version_from_image"] is True
    says = [(w["variable"], w["message"]) for w in r["warnings"] if w["variable"] in (
        "kimi_k3_vllm_version", "kimi_k3_extra_args")]
    assert says == [("kimi_k3_vllm_version", "image: the plan cannot know the vLLM version of %s; it renders flags "
                     "and env by vLLM 0.28.0's rules (the recipe's development_builds.plan_release) and judges "
                     "kimi_k3_extra_args' flags only as far as that release knows them." % ROCM_IMAGE),
                    ("kimi_k3_extra_args", "--no-such-flag-k3 is not accepted by vllm serve 0.28.0 (unrecognized "
                     "argument) (vLLM 0.28.0's rules).")]


def test_a_release_plan_still_refuses_the_unknown_flag():
    from tests.unit.plugins.plugin_utils.plan.test_topology import ROCM_IMAGE, make_nodes, plan
    r = plan(make_nodes(2, kimi_k3_accelerator="mi355x", kimi_k3_image=ROCM_IMAGE, kimi_k3_socket_ifname="eth0",
                        kimi_k3_strategy="multi_node_tp", kimi_k3_interconnect="rdma",
                        kimi_k3_extra_args=["--no-such-flag-k3", "1"]))
    assert not r["ok"] and [e["variable"] for e in r["errors"]] == ["kimi_k3_extra_args"]


# ----------------------------------------------------------------------------- the job's side (no vLLM here)


@pytest.fixture(name="job", scope="module")
def fixture_job():
    return job_module()


class FakeServe(object):
    """argparse stands in for vLLM's parser: what the job does with its refusals and validate() is the same."""

    def validate(self, args):
        if args.enable_auto_tool_choice and not args.tool_call_parser:
            raise TypeError("Error: --enable-auto-tool-choice requires --tool-call-parser")


def fake_cli():
    top = argparse.ArgumentParser(prog="vllm")
    serve = top.add_subparsers(dest="subparser").add_parser("serve")
    serve.add_argument("model_tag")
    serve.add_argument("--max-num-seqs", type=int)
    serve.add_argument("--enable-auto-tool-choice", action="store_true")
    serve.add_argument("--tool-call-parser")
    return top, FakeServe()


@pytest.mark.parametrize("argv, accepted, message", [
    (["m", "--max-num-seqs", "8"], True, None),
    (["m", "--no-such-flag-k3", "1"], False, "vllm: error: unrecognized arguments: --no-such-flag-k3 1"),
    (["m", "--max-num-seqs", "lots"], False, "vllm serve: error: argument --max-num-seqs: invalid int value: 'lots'"),
    (["m", "--enable-auto-tool-choice"], False, "TypeError: Error: --enable-auto-tool-choice requires "
                                                "--tool-call-parser"),
])
def test_parse_argv_gives_the_parsers_own_refusal(job, argv, accepted, message):
    top, command = fake_cli()
    assert job.parse_argv(top, command, argv) == (accepted, message)


def test_image_check_command_env_and_output(job):
    spec_ = {"image_check": {"argv": ["m"], "env_names": [], "timeout_s": 5}}
    argv, env = job.image_check_command(spec_, {"VLLM_HOST_IP": "10.0.0.1"}, executable="/usr/bin/python3")
    assert argv[0] == "/usr/bin/python3" and argv[1].endswith("fabric_job.py") and argv[2:] == ["--image-check"]
    assert env["VLLM_HOST_IP"] == "10.0.0.1" and '"image_check"' in env["KIMI_FABRIC_SPEC"]
    assert job.unknown_env(["VLLM_B", "NCCL_X", "VLLM_A"], {"VLLM_A"}) == ["VLLM_B"]
    assert job.parse_image_check('INFO x\nFABRIC_RESULT {"status": "ok", "version": "0.1.dev1"}\n', 0) == {
        "status": "ok", "version": "0.1.dev1"}
    assert job.parse_image_check("Traceback\nImportError: no vllm\n", 1) == {
        "status": "failed", "error": "exited 1 without a report: Traceback\nImportError: no vllm"}
    assert job.parse_image_check("importing", None, 5)["status"] == "timeout"
    assert job.image_check_phase({}) is None
    calls = []
    got = job.image_check_phase(spec_, runner=lambda a, e, t: calls.append(t) or (0, 'FABRIC_RESULT {"status": "ok"}'))
    assert got == {"status": "ok"} and calls == [5.0]


def test_a_digest_the_recipe_records_renders_by_that_builds_rules_at_plan_time():
    """The ROCm kimi-k3 image the mi355x examples pin: the recipe knows its digest as 0.1.dev19253 (0.27.1's rules),
    so the plan renders 0.27.1's env names (the AITER SiTU switch) instead of plan_release's, and says why."""
    from tests.unit.plugins.plugin_utils.plan.test_topology import make_nodes, plan
    image = "vllm/vllm-openai-rocm@" + BUILDS[0]["digest"]
    r = plan(make_nodes(2, kimi_k3_accelerator="mi355x", kimi_k3_image=image, kimi_k3_vllm_version="image",
                        kimi_k3_strategy="multi_node_tp", kimi_k3_interconnect="rdma", kimi_k3_socket_ifname="eth0"))
    assert r["ok"], r["errors"]
    node = r["plans"]["node0"]
    assert (node["vllm_version"], node["vllm_version_from_image"]) == ("0.27.1", True)
    assert "AITER_SITUV2_A8W4" in node["env"] and "VLLM_ROCM_USE_AITER_MOE_SITUV2_A8W4" not in node["env"]
    (said,) = [w["message"] for w in r["warnings"] if w["variable"] == "kimi_k3_vllm_version"]
    assert said.startswith("image: the recipe records %s as vLLM 0.1.dev19253+g5f76ae224, a development build that "
                           "follows vLLM 0.27.1's rules (the ROCm kimi-k3 image" % image)
    assert said.endswith("the plan renders flags and env by vLLM 0.27.1's rules and judges kimi_k3_extra_args' flags "
                         "only as far as that release knows them.")
    # another digest of the same repository is unknown: plan_release's rules, as before
    other = plan(make_nodes(2, kimi_k3_accelerator="mi355x", kimi_k3_image="vllm/vllm-openai-rocm@sha256:" + "c" * 64,
                            kimi_k3_vllm_version="image", kimi_k3_strategy="multi_node_tp",
                            kimi_k3_interconnect="rdma", kimi_k3_socket_ifname="eth0"))
    assert other["plans"]["node0"]["vllm_version"] == "0.28.0"


def test_with_image_an_unknown_flag_named_like_a_secret_is_still_refused_at_plan_time():
    """Left to the image, its value would be written into the plan files and the container's argv first."""
    from tests.unit.plugins.plugin_utils.plan.test_topology import ROCM_IMAGE, make_nodes, plan
    r = plan(make_nodes(2, kimi_k3_accelerator="mi355x", kimi_k3_image=ROCM_IMAGE, kimi_k3_vllm_version="image",
                        kimi_k3_strategy="multi_node_tp", kimi_k3_interconnect="rdma", kimi_k3_socket_ifname="eth0",
                        kimi_k3_extra_args=["--my-api-token", "zQcanary"]))
    assert not r["ok"]
    assert {(e["variable"], e["message"]) for e in r["errors"]} == {
        ("kimi_k3_extra_args", "--my-api-token is not accepted by vllm serve 0.28.0 (unrecognized argument).")}
    assert "zQcanary" not in str(r["errors"]) + str(r["warnings"])
