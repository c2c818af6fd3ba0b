"""Drive the collection's playbooks through ansible-runner's Python API (integration tests, benchmarks).

Results are read from runner events, stats, artifacts and the fact cache, never by scraping stdout.
"""
import os
import tempfile
import time

import sys

import ansible_runner

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run_playbook(playbook, inventory, extravars=None, tags=None, skip_tags=None, limit=None, check=False,
                 verbosity=0, forks=None, envvars=None, ident=None, timeout=None, quiet=True, diff=False):
    """Run ``playbooks/<playbook>`` (or an absolute path) against ``inventory`` (path relative to the repo).

    Returns the ``ansible_runner.Runner``; ``runner.elapsed_s`` holds the wall time.
    """
    _venv_on_path()
    pdd = tempfile.mkdtemp(prefix="runner-", dir=_runner_root())
    pb = playbook if os.path.isabs(playbook) else os.path.join(REPO, "playbooks", playbook)
    inv = inventory if os.path.isabs(inventory) else os.path.join(REPO, inventory)
    env = {
        "ANSIBLE_CONFIG": os.path.join(REPO, "ansible.cfg"),
        "ANSIBLE_INJECT_FACT_VARS": "false",
        "ANSIBLE_FORCE_COLOR": "0",
        "ANSIBLE_NOCOLOR": "1",
        # The example inventories read kimi_k3_api_key from this variable and the plan refuses an API without a key
        # on a non-loopback address; a placeholder unless the caller (or the environment) sets one.
        "KIMI_K3_API_KEY": os.environ.get("KIMI_K3_API_KEY", "test-placeholder-api-key"),
    }
    env.update(envvars or {})
    cmdline = []
    if check:
        cmdline.append("--check")
    if diff:
        cmdline.append("--diff")
    if forks:
        cmdline += ["--forks", str(forks)]
    start = time.monotonic()
    r = ansible_runner.run(
        private_data_dir=pdd, playbook=pb, inventory=inv, extravars=extravars or {}, tags=tags,
        skip_tags=skip_tags, limit=limit, verbosity=verbosity, envvars=env, ident=ident, quiet=quiet,
        cmdline=" ".join(cmdline) or None, timeout=timeout, fact_cache_type="jsonfile",
        project_dir=REPO,
    )
    r.elapsed_s = time.monotonic() - start
    return r


def failed_tasks(runner):
    """[(host, task name, msg)] of every failed task event."""
    out = []
    for ev in runner.events:
        if ev.get("event") in ("runner_on_failed", "runner_on_unreachable"):
            data = ev.get("event_data", {})
            if data.get("ignore_errors"):
                continue
            res = data.get("res", {})
            out.append((data.get("host"), data.get("task"), res.get("msg") or res.get("stderr") or ""))
    return out


def task_results(runner, task_name):
    """{host: res} of the ok/changed/failed events of the task named ``task_name``."""
    out = {}
    for ev in runner.events:
        data = ev.get("event_data", {})
        if ev.get("event", "").startswith("runner_on_") and data.get("task") == task_name:
            out[data.get("host")] = data.get("res", {})
    return out


def _runner_root():
    root = os.path.join(REPO, "build", "runner")
    os.makedirs(root, exist_ok=True)
    return root


def _venv_on_path():
    """ansible-runner looks up ansible-playbook on PATH: put this interpreter's bin directory first."""
    bindir = os.path.dirname(sys.executable)
    path = os.environ.get("PATH", "")
    if bindir not in path.split(os.pathsep):
        os.environ["PATH"] = bindir + os.pathsep + path
