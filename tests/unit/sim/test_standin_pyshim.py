"""The stand-in image's `vllm` package (sim/standin/pyshim): the collection's fabric job runs its image check
(kimi_k3_vllm_version: image) against it as it does against the real vLLM, here as the image runs it: the job's
own file as a child process with the image's PYTHONPATH and flag snapshots."""
import json
import os
import subprocess
import sys

import pytest

from tests.unit.sim.test_simctl_router import REPO
from tests.unit.plugins.plugin_utils.plan.test_topology import make_nodes, plan

from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.fabric import image_version as IV
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan.recipe_data import load_recipe

JOB = os.path.join(REPO, "roles", "fabric", "files", "fabric_job.py")
DEV = "0.1.dev19253+g5f76ae224"


def image_check(argv, rules, reported=None):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.join(REPO, "sim", "standin", "pyshim"),
                                                       os.path.join(REPO, "sim", "standin")]),
               VLLM_STANDIN_FLAGS_DIR=os.path.join(REPO, "data", "vllm_flags"), VLLM_STANDIN_VERSION=rules,
               KIMI_FABRIC_SPEC=json.dumps({"image_check": {"argv": argv, "env_names": [], "timeout_s": 60}}))
    env.pop("VLLM_STANDIN_REPORTED_VERSION", None)
    if reported:
        env["VLLM_STANDIN_REPORTED_VERSION"] = reported
    p = subprocess.run([sys.executable, JOB, "--image-check"], env=env, capture_output=True, text=True, timeout=60,
                       check=False)
    (line,) = [row for row in p.stdout.splitlines() if row.startswith("FABRIC_RESULT ")]
    return json.loads(line[len("FABRIC_RESULT "):])


@pytest.fixture(name="mi355x_plan", scope="module")
def fixture_mi355x_plan():
    recipe = load_recipe()
    image = "vllm/vllm-openai-rocm@" + recipe["development_builds"]["builds"][0]["digest"]
    r = plan(make_nodes(2, kimi_k3_accelerator="mi355x", kimi_k3_image=image, kimi_k3_vllm_version="image",
                        kimi_k3_strategy="multi_node_tp", kimi_k3_interconnect="rdma", kimi_k3_socket_ifname="eth0"))
    assert r["ok"], r["errors"]
    return r["plans"]["node1"]


def test_the_rendered_argv_of_a_dev_build_plan_is_accepted_by_the_rules_it_follows(mi355x_plan):
    got = image_check(mi355x_plan["vllm_args"], "0.27.1", reported=DEV)
    assert (got["status"], got["version"], got["accepted"], got["error"]) == ("ok", DEV, True, None)
    assert (got["parser"], got["platform"], got["env_known"]) == (
        "vllm.entrypoints.cli.serve.ServeSubcommand", "StandinPlatform", 0)


def test_an_unknown_flag_and_an_invalid_choice_are_refused_in_argparses_words(mi355x_plan):
    got = image_check(mi355x_plan["vllm_args"] + ["--no-such-flag-k3", "1"], "0.27.1", reported=DEV)
    assert (got["status"], got["accepted"]) == ("ok", False)
    assert got["error"] == "vllm serve: error: unrecognized arguments: --no-such-flag-k3 1"
    assert IV.flag_of(got["error"]) == "--no-such-flag-k3"
    got = image_check(["m", "--all2all-backend", "no_such_backend"], "0.28.0")
    assert got["accepted"] is False and "invalid choice: 'no_such_backend'" in got["error"]
    assert IV.flag_of(got["error"]) == "--all2all-backend"


def test_without_a_reported_version_the_package_says_the_release_of_its_rules():
    assert image_check(["m"], "0.28.0")["version"] == "0.28.0"
