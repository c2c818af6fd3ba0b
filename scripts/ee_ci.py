#!/usr/bin/env python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Build the execution environment offline and run the plan and smoke playbooks inside it (scripts/test.sh --stage
ee; docs/awx.md). Needs the rehearsal cluster up (its control Docker engine builds and runs the image).

    scripts/ee_ci.py build     ansible-builder build of execution-environment.yml with the CI substitutions below
    scripts/ee_ci.py run       ansible-runner, inside the built image: plan.yml and smoke.yml of an operator site
                               (gpufleet.kimi_k3.site_init) against inventories/sim-gb300 (deploys first if the
                               head does not answer)
    scripts/ee_ci.py all       both

The shipped execution-environment.yml is built as written except (CI has no Galaxy and no registry):
  * base image: the rehearsal cluster's Debian bookworm image kimi-sim/base:<hash> (sim/simctl, debootstrap),
    package manager apt-get (lists fetched in the first step), python3-pip from Debian (its python3 has no
    ensurepip, so ansible-builder's pip bootstrap is skipped), package cache kept (apt-get has no `clean all`);
  * collections: community.docker and community.library_inventory_filtering_v1 as local tarballs repacked from the
    venv's `ansible` package (scripts/repack_collection.py), ansible-galaxy --offline;
  * the build machine's local CA certificates (/usr/local/share/ca-certificates/*.crt, e.g. a TLS-intercepting
    egress proxy's) are added to the image, so pip inside the build trusts the same chain as pip on the host;
  * ansible-core: the dev venv's pin for Python < 3.12 (requirements-dev.txt, 2.19.5), since bookworm's python3 is
    3.11 and the shipped pin (2.21.5) needs 3.12;
  * the image tag kimi-k3-ee:ci; docker build --network host (pip reaches PyPI, apt the Debian mirror).
Timings go to build/ee/timings.json. KIMI_SIM_CONTROL_SOCK points at another Docker engine (default: the sim's control
engine; it needs a kimi-sim/base image - `docker import` of the sim's cached rootfs tarball does), KIMI_EE_WORK at
another work directory.
"""
import copy
import glob
import json
import os
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request

import yaml

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
WORK = os.environ.get("KIMI_EE_WORK", os.path.join(REPO, "build", "ee"))
TAG = "kimi-k3-ee:ci"
SIM_SOCK = os.environ.get("KIMI_SIM_CONTROL_SOCK", "/run/kimi-sim/control/docker.sock")
BIN = os.path.dirname(sys.executable)
HEAD_URL = "http://127.0.0.11:8000"
LOCAL_CA_DIR = "/usr/local/share/ca-certificates"


def log(msg):
    sys.stdout.write("[ee] %s\n" % msg)
    sys.stdout.flush()


def run(cmd, **kw):
    log("$ " + " ".join(cmd))
    return subprocess.run(cmd, check=True, **kw)


def docker_env():
    env = dict(os.environ, DOCKER_HOST="unix://" + SIM_SOCK, DOCKER_BUILDKIT="0")
    env.pop("DOCKER_CONTEXT", None)
    return env


def base_image():
    out = subprocess.run(["docker", "images", "kimi-sim/base", "--format", "{{.Repository}}:{{.Tag}}"],
                         env=docker_env(), capture_output=True, text=True, check=True).stdout.split()
    if not out:
        raise SystemExit("no kimi-sim/base image in the control engine: run sim/simctl up first")
    return out[0]


def _installed(ns, name):
    import ansible_collections

    for root in ansible_collections.__path__:
        if os.path.isfile(os.path.join(root, ns, name, "MANIFEST.json")):
            return os.path.join(root, ns, name)
    raise SystemExit("%s.%s is not installed next to %s" % (ns, name, sys.executable))


def collection_tarballs(dest):
    """Our tarball (ansible-galaxy build) + the two dependencies repacked; {short name: file name}."""
    from scripts.repack_collection import repack

    for old in glob.glob(os.path.join(dest, "*.tar.gz")):
        os.unlink(old)
    run([os.path.join(BIN, "ansible-galaxy"), "collection", "build", "--output-path", dest, REPO],
        stdout=subprocess.DEVNULL)
    names = {"gpufleet.kimi_k3": os.path.basename(glob.glob(os.path.join(dest, "gpufleet-kimi_k3-*.tar.gz"))[0])}
    for dep in ("docker", "library_inventory_filtering_v1"):
        names["community." + dep] = os.path.basename(repack(_installed("community", dep), dest))
    return names


def core_pin_before_312():
    """requirements-dev.txt's ansible-core pin for Python < 3.12, as a pip requirement (ansible-core==X.Y.Z)."""
    with open(os.path.join(REPO, "requirements-dev.txt")) as f:
        for line in f:
            req, _sep, marker = line.partition(";")
            if req.strip().startswith("ansible-core==") and marker.strip() == 'python_version < "3.12"':
                return req.strip()
    raise SystemExit("requirements-dev.txt has no ansible-core pin for python_version < \"3.12\"")


def ci_definition(shipped, base, tarballs):
    """The shipped definition with the substitutions the module docstring lists."""
    ee = copy.deepcopy(shipped)
    ee["images"]["base_image"]["name"] = base
    deps = ee["dependencies"]
    deps["ansible_core"]["package_pip"] = core_pin_before_312()
    deps["python_interpreter"]["package_system"] = "python3-pip"
    deps["python"] = os.path.join(REPO, deps["python"])
    ours = [c for c in deps["galaxy"]["collections"] if c.get("type") == "file"]
    assert [os.path.basename(c["name"]) for c in ours] == [tarballs["gpufleet.kimi_k3"]], \
        "execution-environment.yml names %s, the build made %s" % (ours, tarballs["gpufleet.kimi_k3"])
    deps["galaxy"]["collections"] = [{"name": "collections/" + f, "type": "file"} for f in sorted(tarballs.values())]
    ee["additional_build_files"] = [{"src": os.path.join(WORK, "src", f), "dest": "collections"}
                                    for f in sorted(tarballs.values())]
    steps = ee.setdefault("additional_build_steps", {})
    prepend = ["RUN apt-get update -qq"]
    local_cas = sorted(glob.glob(os.path.join(LOCAL_CA_DIR, "*.crt")))
    if local_cas:
        ee["additional_build_files"] += [{"src": ca, "dest": "ca"} for ca in local_cas]
        prepend += ["COPY _build/ca/ /usr/local/share/ca-certificates/", "RUN update-ca-certificates",
                    "ENV PIP_CERT=/etc/ssl/certs/ca-certificates.crt"]
    steps["prepend_base"] = prepend + list(steps.get("prepend_base", []))
    ee.setdefault("build_arg_defaults", {}).update(PKGMGR_PRESERVE_CACHE="always",
                                                   ANSIBLE_GALAXY_CLI_COLLECTION_OPTS="--offline")
    ee["options"].update(package_manager_path="/usr/bin/apt-get", skip_pip_install=True, tags=[TAG])
    return ee


def build():
    os.makedirs(os.path.join(WORK, "src"), exist_ok=True)
    with open(os.path.join(REPO, "execution-environment.yml")) as f:
        shipped = yaml.safe_load(f)
    tarballs = collection_tarballs(os.path.join(WORK, "src"))
    ee = ci_definition(shipped, base_image(), tarballs)
    path = os.path.join(WORK, "execution-environment.yml")
    with open(path, "w") as f:
        f.write("# Generated by scripts/ee_ci.py from execution-environment.yml - CI substitutions only.\n")
        yaml.safe_dump(ee, f, sort_keys=False)
    shutil.rmtree(os.path.join(WORK, "context"), ignore_errors=True)
    t0 = time.time()
    run([os.path.join(BIN, "ansible-builder"), "build", "-f", path, "-c", os.path.join(WORK, "context"),
         "--container-runtime", "docker", "-t", TAG, "--extra-build-cli-args=--network=host", "-v", "2"],
        env=docker_env())
    seconds = round(time.time() - t0, 1)
    size = subprocess.run(["docker", "image", "inspect", TAG, "--format", "{{.Size}}"], env=docker_env(),
                          capture_output=True, text=True, check=True).stdout.strip()
    log("built %s in %.1f s (%.0f MB, base %s)" % (TAG, seconds, int(size) / 1e6, ee["images"]["base_image"]["name"]))
    return {"build_s": seconds, "image_bytes": int(size), "base_image": ee["images"]["base_image"]["name"]}


def _healthy():
    try:
        with urllib.request.urlopen(HEAD_URL + "/health", timeout=5) as r:  # noqa: S310 - 127.0.0.11 (sim)
            return r.status == 200
    except (urllib.error.URLError, OSError):
        return False


def ensure_deployed():
    """The smoke playbook needs a running deployment: deploy from the host venv when the head does not answer."""
    if _healthy():
        return
    from tests.helpers.runner import failed_tasks, run_playbook

    log("deploying inventories/sim-gb300 from the host venv (the smoke playbook needs a running endpoint)")
    r = run_playbook("deploy.yml", "inventories/sim-gb300", timeout=900,
                     extravars={"kimi_k3_artifacts_dir": os.path.join(WORK, "deploy-artifacts"),
                                "launch_poll_interval_s": 2})
    if r.rc != 0:
        raise SystemExit("deploy failed: %s" % failed_tasks(r))


def private_data_dir(ssh_key=os.path.join(REPO, "sim", ".state", "ssh", "id_ed25519")):
    """An AWX-like run: project = an operator site (site_init), inventory = its sim-gb300 copy, the SSH key as the
    machine credential (env/ssh_key -> ssh-agent inside the EE), host keys in the project's known_hosts."""
    pdd = os.path.join(WORK, "runner")
    shutil.rmtree(pdd, ignore_errors=True)
    project = os.path.join(pdd, "project")
    run([os.path.join(BIN, "ansible-playbook"), os.path.join(REPO, "playbooks", "site_init.yml"),
         "-e", "site_dir=%s" % project, "-e", json.dumps({"site_inventories": ["sim-gb300"]})],
        stdout=subprocess.DEVNULL, env=dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg")))
    shutil.copytree(os.path.join(project, "inventories", "sim-gb300"), os.path.join(pdd, "inventory"))
    gv = os.path.join(pdd, "inventory", "group_vars", "vllm_cluster.yml")
    with open(gv) as f:
        lines = [ln for ln in f if not ln.startswith("ansible_ssh_private_key_file:")]
    with open(gv, "w") as f:
        f.writelines(lines)
    os.makedirs(os.path.join(pdd, "inventory", "group_vars", "all"), exist_ok=True)
    shutil.copy(os.path.join(REPO, "inventories", "sim-gb300", "group_vars", "all", "sim_image.yml"),
                os.path.join(pdd, "inventory", "group_vars", "all", "sim_image.yml"))
    os.makedirs(os.path.join(pdd, "env"))
    shutil.copy(ssh_key, os.path.join(pdd, "env", "ssh_key"))
    os.chmod(os.path.join(pdd, "env", "ssh_key"), 0o600)
    keys = subprocess.run(["ssh-keyscan", "-T", "10", "127.0.0.11", "127.0.0.12"], capture_output=True, text=True,
                          timeout=60, check=False).stdout
    with open(os.path.join(project, "known_hosts"), "w") as f:
        f.write(keys)
    return pdd


def run_in_ee(pdd, playbook):
    import ansible_runner

    os.environ.update(DOCKER_HOST=docker_env()["DOCKER_HOST"])  # the docker CLI ansible-runner starts
    os.environ.pop("DOCKER_CONTEXT", None)
    t0 = time.time()
    r = ansible_runner.run(
        private_data_dir=pdd, playbook=playbook, process_isolation=True, process_isolation_executable="docker",
        container_image=TAG, container_options=["--network=host"], quiet=True,
        envvars={"ANSIBLE_NOCOLOR": "1", "ANSIBLE_SSH_EXTRA_ARGS": "-o UserKnownHostsFile=/runner/project/known_hosts"})
    seconds = round(time.time() - t0, 1)
    log("%s in the EE: %s (rc %s) in %.1f s" % (playbook, r.status, r.rc, seconds))
    if r.status != "successful":
        sys.stdout.write(r.stdout.read()[-6000:])
        raise SystemExit("%s failed inside %s" % (playbook, TAG))
    return seconds


def run_stage():
    ensure_deployed()
    pdd = private_data_dir()
    out = {"plan_s": run_in_ee(pdd, "plan.yml")}
    art = os.path.join(pdd, "project", "artifacts")
    plans = sorted(os.path.basename(p) for p in glob.glob(os.path.join(art, "plan", "*.json")))
    if plans != ["gb300-tray01.json", "gb300-tray02.json"]:
        raise SystemExit("plan.yml in the EE wrote %s under %s" % (plans, art))
    out["smoke_s"] = run_in_ee(pdd, "smoke.yml")
    report = os.path.join(art, "smoke", "smoke-gb300-tray01.json")
    if not os.path.isfile(report):
        raise SystemExit("smoke.yml in the EE wrote no %s" % report)
    out["ee_ansible"] = subprocess.run(["docker", "run", "--rm", TAG, "ansible", "--version"], env=docker_env(),
                                       capture_output=True, text=True, check=True).stdout.splitlines()[0]
    log("plan files %s and %s written from inside %s (%s)" % (plans, report, TAG, out["ee_ansible"]))
    return out


def main(argv):
    what = argv[0] if argv else "all"
    if what not in ("build", "run", "all"):
        sys.stderr.write(__doc__)
        return 2
    os.makedirs(WORK, exist_ok=True)
    timings = {}
    if what == "run" and os.path.exists(os.path.join(WORK, "timings.json")):
        with open(os.path.join(WORK, "timings.json")) as f:
            timings = json.load(f)  # keep the build's numbers
    if what in ("build", "all"):
        timings.update(build())
    if what in ("run", "all"):
        timings.update(run_stage())
    with open(os.path.join(WORK, "timings.json"), "w") as f:
        json.dump(timings, f, indent=2)
    log("timings: %s" % json.dumps(timings))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
