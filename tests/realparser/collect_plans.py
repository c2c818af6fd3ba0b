"""Collect every plan the project renders, for the real-parser stage (run with the project's .venv).

    python -m tests.realparser.collect_plans OUT.json [pytest paths...]

Sources, each record naming where it came from:
- every example inventory (inventories/*), rendered by playbooks/plan.yml exactly as an operator runs it;
- the valid base inventories of the mistake corpus (tests/unit/plan_mistakes/, when it exists): the inventories
  its case files name with ``base: <name>`` (inventories/<name>), and every directory or YAML inventory file there
  whose name contains "valid" or "base", rendered the same way;
- every accepted plan the unit tests render from the shipped recipe and snapshots (golden tests, property tests,
  the corpus test's bases), recorded by the pytest plugin tests/realparser/record_plans.py.
Environment variables an inventory reads with lookup('env', ...) (the examples' API key) get a stand-in value
when unset, as an operator exports them before running the plan. The sim inventories get their kimi_k3_image
from a file `sim/simctl up` writes (group_vars/all/sim_image.yml, gitignored); where it is absent, a stand-in
reference in the sim registry's repository of the nodes' vendor is passed instead (the image never enters
vllm_args) and the record's source says so.
An inventory the plan playbook refuses is itself a finding (every example must render): it is listed in
"refused", with the playbook's message.
"""
import glob
import json
import os
import re
import subprocess
import sys
import tempfile

import yaml

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MISTAKES = os.path.join("tests", "unit", "plan_mistakes")
DEFAULT_TESTS = ("tests/unit/plugins/plugin_utils/plan/test_topology*.py", MISTAKES)
INVENTORY_FILES = ("hosts.yml", "hosts.yaml", "hosts.ini", "hosts", "inventory.yml", "inventory.yaml")
BASE_NAME = re.compile(r"(?<!in)valid|base", re.IGNORECASE)
ENV_LOOKUP = re.compile(r"""lookup\(\s*['"](?:ansible\.builtin\.)?env['"]\s*,\s*['"]([A-Za-z_][A-Za-z0-9_]*)['"]""")
STAND_IN_SECRET = "realparser-stand-in-secret"
STAND_IN_ROUTER_IMAGE = "127.0.0.1:5000/vllm-router@sha256:" + "0" * 64
STAND_IN_IMAGE = {"nvidia": "127.0.0.1:5000/vllm/vllm-openai@sha256:" + "0" * 64,
                  "amd": "127.0.0.1:5000/vllm/vllm-openai-rocm@sha256:" + "0" * 64,
                  "cpu": "127.0.0.1:5000/vllm/vllm-openai-cpu@sha256:" + "0" * 64}


def example_inventories(repo=REPO):
    return sorted(os.path.relpath(p, repo) for p in glob.glob(os.path.join(repo, "inventories", "*"))
                  if os.path.isdir(p) and any(os.path.exists(os.path.join(p, f)) for f in INVENTORY_FILES))


def _yaml(path):
    try:
        with open(path, errors="replace") as handle:
            return yaml.safe_load(handle)
    except (OSError, yaml.YAMLError):
        return None


def _is_inventory_file(path):
    """A YAML inventory: a top-level vllm_cluster or all group (a mistake case has description/base/mistake)."""
    doc = _yaml(path) if path.endswith((".yml", ".yaml")) else None
    return isinstance(doc, dict) and any(isinstance(doc.get(g), dict) for g in ("vllm_cluster", "all"))


def valid_base_inventories(repo=REPO):
    """The mistake corpus's valid bases (none when the corpus is absent).

    A case file names its base with a top-level ``base: <name>`` of an inventory under inventories/; inventories
    kept inside the corpus count when their directory or file name says valid or base.
    """
    found = set()
    for root, dirs, files in os.walk(os.path.join(repo, MISTAKES)):
        for d in dirs:
            path = os.path.join(root, d)
            if BASE_NAME.search(d) and any(os.path.exists(os.path.join(path, f)) for f in INVENTORY_FILES):
                found.add(os.path.relpath(path, repo))
        for f in files:
            path = os.path.join(root, f)
            if not f.endswith((".yml", ".yaml")):
                continue
            if BASE_NAME.search(f) and f not in INVENTORY_FILES and _is_inventory_file(path):
                found.add(os.path.relpath(path, repo))
            doc = _yaml(path)
            base = doc.get("base") if isinstance(doc, dict) else None
            if isinstance(base, str) and os.path.isdir(os.path.join(repo, "inventories", base)):
                found.add(os.path.join("inventories", base))
    return sorted(found)


def _tool(name):
    """An Ansible command of the running venv (python -m works without the venv's bin/ on PATH)."""
    beside = os.path.join(os.path.dirname(sys.executable), name)
    return beside if os.path.exists(beside) else name


def env_lookups(inventory, repo=REPO):
    """Names of the environment variables an inventory reads with lookup('env', ...) (its vault stand-ins)."""
    names = set()
    path = os.path.join(repo, inventory)
    files = [path] if os.path.isfile(path) else [os.path.join(root, f) for root, _dirs, fs in os.walk(path) for f in fs]
    for name in files:
        with open(name, errors="replace") as handle:
            names.update(ENV_LOOKUP.findall(handle.read()))
    return sorted(names)


def _ansible_env(repo, inventory=None):
    """ansible-playbook's environment; variables the inventory looks up get a stand-in when they are unset
    (an operator exports the API key before running the plan; a secret never enters a plan file)."""
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(repo, "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_INJECT_FACT_VARS="false")
    for name in env_lookups(inventory, repo) if inventory else ():
        env.setdefault(name, STAND_IN_SECRET)
    return env


def stand_in_image(inventory, repo=REPO):
    """A sim-registry image reference for a sim inventory whose hosts have no kimi_k3_image yet, else None."""
    if not os.path.basename(inventory).startswith("sim-"):
        return None
    out = subprocess.run([_tool("ansible-inventory"), "-i", os.path.join(repo, inventory), "--list"], cwd=repo,
                         env=_ansible_env(repo), stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                         universal_newlines=True, check=False).stdout
    hostvars = json.loads(out or "{}").get("_meta", {}).get("hostvars", {})
    if not hostvars or all(hv.get("kimi_k3_image") for hv in hostvars.values()):
        return None
    with open(os.path.join(repo, "data", "recipes", "kimi_k3.yml")) as handle:
        hardware = yaml.safe_load(handle).get("hardware", {})
    vendors = set(hardware.get(hv.get("kimi_k3_accelerator"), {}).get("vendor") for hv in hostvars.values()
                  if hv.get("kimi_k3_accelerator"))  # the vllm_router host has none
    return STAND_IN_IMAGE.get(vendors.pop()) if len(vendors) == 1 else None


def render_inventory(inventory, repo=REPO, version=None):
    """(records, refusal message or None) of one inventory rendered by playbooks/plan.yml.

    ``version``: render it for that vLLM release instead (-e kimi_k3_vllm_version=...).
    """
    with tempfile.TemporaryDirectory(prefix="realparser-plan-") as plan_dir:
        return _render_into(inventory, plan_dir, repo, version)


def _render_into(inventory, plan_dir, repo, version):
    cmd = [_tool("ansible-playbook"), os.path.join(repo, "playbooks", "plan.yml"),
           "-i", os.path.join(repo, inventory), "-e", "plan_dir=%s" % plan_dir]
    image, source = stand_in_image(inventory, repo), inventory
    if version:
        cmd += ["-e", "kimi_k3_vllm_version=%s" % version]
        source += " @%s" % version
    if image:
        cmd += ["-e", "kimi_k3_image=%s" % image, "-e", "kimi_k3_router_image=%s" % STAND_IN_ROUTER_IMAGE]
        source += " (stand-in kimi_k3_image)"
    proc = subprocess.run(cmd, cwd=repo, env=_ansible_env(repo, inventory), stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, universal_newlines=True, check=False)
    records = []
    for path in sorted(glob.glob(os.path.join(plan_dir, "*.json"))):
        with open(path) as handle:
            plan = json.load(handle)
        if plan.get("role") == "router":  # vllm-router's argv, not vllm serve's (data/router_flags/)
            continue
        records.append({"source": source, "host": plan["host"], "vllm_version": plan["vllm_version"],
                        "vllm_args": plan["vllm_args"], "env": plan.get("env") or {}, "renders": 1})
    if proc.returncode != 0 or not records:
        return records, "ansible-playbook plan.yml rc %d: %s" % (proc.returncode, refusal_text(
            proc.stdout if "Plan refused" in proc.stdout else proc.stdout + "\n" + proc.stderr))
    if STAND_IN_SECRET in json.dumps(records):
        return records, "the stand-in value of %s reached a plan file (secrets belong in secret_env)" % (
            ", ".join(env_lookups(inventory, repo)))
    return records, None


def refusal_text(output):
    """The plan's problem lines from ansible-playbook's output (else its last lines), on one line."""
    lines = output.splitlines()
    start = next((i for i, line in enumerate(lines) if "Plan refused" in line), None)
    if start is None:
        picked = [line for line in lines if line.strip()][-12:]
    else:
        picked = [line for line in lines[start:] if line.strip()]
        end = next((i for i, line in enumerate(picked) if "warnings_list" in line or "PLAY RECAP" in line),
                   len(picked))
        picked = picked[:end]
    return " ".join(re.sub(r"^-\s*'|'$", "", line.strip()).strip() for line in picked)


def record_test_plans(paths, repo=REPO):
    """The plans the unit tests in ``paths`` render (pytest with the recording plugin)."""
    existing = [p for pattern in paths for p in sorted(glob.glob(os.path.join(repo, pattern)))]
    if not existing:
        return {"records": [], "calls": 0, "refused": 0, "fabricated": 0, "pytest_exit": None, "paths": []}
    fd, out = tempfile.mkstemp(prefix="realparser-recorded-", suffix=".json")
    os.close(fd)
    env = dict(os.environ, KIMI_K3_RECORD_PLANS=out)
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "tests.realparser.record_plans",
           "-m", "not sim and not vllm"] + [os.path.relpath(p, repo) for p in existing]
    # pytest's summary is the last line of its stdout; a warning on stderr must not take its place
    proc = subprocess.run(cmd, cwd=repo, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          universal_newlines=True, check=False)
    with open(out) as handle:
        data = json.load(handle)
    os.unlink(out)
    data["paths"] = [os.path.relpath(p, repo) for p in existing]
    data["pytest_summary"] = (proc.stdout.strip().splitlines() or [""])[-1]
    return data


def collect(test_paths=DEFAULT_TESTS, repo=REPO, versions=()):
    """{"records", "inventories", "refused": {inventory: message}, "notes", "tests"}.

    Each example inventory is rendered as written (a refusal fails the stage) and, for every other release in
    ``versions``, once more with kimi_k3_vllm_version set to it (a refusal there is a note: not every inventory
    has to support every release).
    """
    records, refused, notes = [], {}, []
    examples = example_inventories(repo)
    inventories = examples + [b for b in valid_base_inventories(repo) if b not in examples]
    for inventory in inventories:
        found, problem = render_inventory(inventory, repo)
        records += found
        if problem:
            refused[inventory] = problem
        for version in sorted(set(versions) - set(r["vllm_version"] for r in found)):
            more, problem = render_inventory(inventory, repo, version)
            records += more
            if problem:
                notes.append("%s @%s refused by the plan: %s" % (inventory, version, problem))
    tests = record_test_plans(test_paths, repo)
    records += tests.pop("records")
    return {"records": records, "inventories": inventories, "refused": refused, "notes": notes, "tests": tests}


def main(argv):
    data = collect(tuple(argv[2:]) or DEFAULT_TESTS)
    with open(argv[1], "w") as handle:
        json.dump(data, handle, indent=1)
    print("collected %d plan(s): %d inventories (%d refused), tests %s"
          % (len(data["records"]), len(data["inventories"]), len(data["refused"]), data["tests"].get("pytest_summary")))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
