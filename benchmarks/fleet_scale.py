#!/usr/bin/env python3
"""Benchmark: controller cost of plan.yml and preflight at fleet scale, side by side in one run.

Plan table, per size N (default 64 / 144 / 576 / 1,152 GB300 trays, one multi-node DEP inventory generated the way
benchmarks/plan_64_nodes.py does):

- renderer: plugin_utils.plan.topology.build_cluster_plan in process (the floor),
- renderer + files: the renderer plus what the cluster_plan action adds (plan JSON + launch script per node,
  written with plugin_utils.plan.files.write_plan into a fresh directory, i.e. 2 x N files + the kept copy),
- plan.yml wall: `ansible-playbook playbooks/plan.yml` writing the plan files (fresh plan_dir per run),
- the goal: plan.yml <= max(3 x (renderer + files), 5 s), and < 2 s at 64 nodes.

Preflight table, per size N (default 8 / 32 / 64) on the LIGHTWEIGHT sim nodes (`sim/simctl up --cluster light
--nodes N`: host sshds on 127.0.3.0/24 with the faked GPU tools, no Docker engine; no sim lock needed), plus a
1-node run as the fixed-cost reference:

- controller CPU: every process ansible-playbook starts (workers, ssh clients, ControlPersist masters), read from
  a cpuacct cgroup of its own, so nothing the nodes do is counted;
- nodes' CPU: the light nodes' cgroup (their sshds, sessions, the module and the faked tools), separately;
- controller CPU per node = (controller CPU(N) - controller CPU(1)) / (N - 1): the cost each further node adds
  beyond Ansible's fixed start-up (the goal: <= 0.08 s), and the plain controller CPU / N next to it;
- probe calls (one per node).

Each figure is the median over --repeat runs (the machine is shared: also printed is the 1-minute load average).
Usage: .venv/bin/python benchmarks/fleet_scale.py [--plan-sizes 64,144,576,1152] [--preflight-sizes 8,32,64]
       [--repeat 3] [--no-plan] [--no-preflight] [--keep-light] [--variants cold,warm,curve25519] [--floor]
       [--ssh-floor]

Preflight connection variants (--variants): cold (default: one new SSH connection per node and run), warm (the
ControlPersist masters of a warm-up run reused, as an operator's rerun within the site's ControlPersist), curve25519
(new connections, curve25519-sha256 key exchange first), cold-poll-default (cold, with ansible-core's default
internal_poll_interval of 0.001 s instead of the 0.01 s of the repo's and the site's ansible.cfg). --floor adds a
one-ping-per-node play in each variant: what Ansible itself costs per node, the floor under any preflight.
--ssh-floor adds one plain ssh per node in each variant, without Ansible (a payload the size of the probe's in, a
reply the size of its result out): what the connection itself costs per node, the floor under any controller.
"""
import argparse
import concurrent.futures
import configparser
import contextlib
import json
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "build", "collections"))
sys.path.insert(0, os.path.join(REPO, "benchmarks"))
sys.path.insert(0, os.path.join(REPO, "sim"))

import lightnodes  # noqa: E402  sim/lightnodes.py
from plan_64_nodes import cluster_vars  # noqa: E402
from preflight_fanout import EXTRA, PROBE_TASK, task_seconds  # noqa: E402
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import render as plan_render  # noqa: E402
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import topology  # noqa: E402
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import files as plan_files  # noqa: E402
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import recipe_data  # noqa: E402

VENV_BIN = os.path.join(REPO, ".venv", "bin")
CGROUP_ROOT = "/sys/fs/cgroup/cpuacct"


def median(xs):
    return statistics.median(xs) if xs else float("nan")


def node_vars():
    return cluster_vars()


def address(i):
    return "10.50.%d.%d" % (i // 200, i % 200 + 1)


def write_inventory(folder, n):
    os.makedirs(os.path.join(folder, "group_vars"))
    with open(os.path.join(folder, "hosts.yml"), "w") as f:
        f.write("vllm_cluster:\n  children:\n    vllm_head:\n      hosts:\n        tray0000: {ansible_host: %s}\n"
                % address(0))
        f.write("    vllm_workers:\n      hosts:\n")
        for i in range(1, n):
            f.write("        tray%04d: {ansible_host: %s}\n" % (i, address(i)))
    with open(os.path.join(folder, "group_vars", "vllm_cluster.yml"), "w") as f:
        for k, v in node_vars().items():
            f.write("%s: %s\n" % (k, json.dumps(v)))


def render(n, recipe, snaps):
    nodes = [{"host": "tray%04d" % i, "head": i == 0, "vars": dict(node_vars(), ansible_host=address(i))}
             for i in range(n)]
    plan = topology.build_cluster_plan(nodes, recipe, snaps)
    if not plan["ok"]:
        sys.exit("the %d-node plan is refused: %s" % (n, plan["errors"][:2]))
    return plan


def render_and_write(n, recipe, snaps, dest):
    """What the cluster_plan action does after reading hostvars: render, format both files per node, write."""
    plan = render(n, recipe, snaps)
    files = {}
    for host, node_plan in plan["plans"].items():
        files["%s.json" % host] = (plan_render.plan_json(node_plan), 0o644)
        files["%s.sh" % host] = (plan_render.docker_run_command(node_plan), 0o755)
    plan_render.summary_table(plan)
    plan_files.write_plan(dest, files, plan["plans"])


def timed(fn, *args):
    t0 = time.perf_counter()
    fn(*args)
    return time.perf_counter() - t0


def plan_playbook(inv, dest):
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"))
    t0 = time.perf_counter()
    p = subprocess.run([os.path.join(VENV_BIN, "ansible-playbook"), "playbooks/plan.yml", "-i", inv,
                        "-e", "plan_dir=%s" % dest], cwd=REPO, env=env, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - t0
    if p.returncode:
        sys.exit("plan.yml failed (rc %d):\n%s" % (p.returncode, (p.stdout + p.stderr)[-3000:]))
    return wall


def plan_row(n, repeat, recipe, snaps):
    tmp = tempfile.mkdtemp(prefix="fleet-plan-")
    try:
        inv = os.path.join(tmp, "inv")
        write_inventory(inv, n)
        rend = [timed(render, n, recipe, snaps) for _run in range(repeat)]
        files = [timed(render_and_write, n, recipe, snaps, os.path.join(tmp, "direct-%d" % k)) for k in range(repeat)]
        wall = [plan_playbook(inv, os.path.join(tmp, "plan-%d" % k)) for k in range(repeat)]
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    goal = max(3 * median(files), 5.0) if n != 64 else 2.0
    return {"n": n, "renderer": median(rend), "files": median(files), "wall": median(wall), "walls": wall,
            "goal": goal, "ratio": median(wall) / median(files)}


def print_plan(rows):
    print("| nodes | renderer (s) | renderer + files (s) | `plan.yml` wall (s) | wall / (renderer + files) | goal (s) "
          "| met |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | --- |")
    for r in rows:
        print("| %d | %.3f | %.3f | %.2f | %.1fx | %.1f | %s |" % (
            r["n"], r["renderer"], r["files"], r["wall"], r["ratio"], r["goal"], "yes" if r["wall"] <= r["goal"]
            else "NO"))
    walls = ["%d: %s" % (r["n"], ", ".join("%.2f" % w for w in r["walls"])) for r in rows]
    print("plan.yml walls per run: " + "; ".join(walls))


# ---------------------------------------------------------------------------------------------- preflight
def cg_usage(path):
    with open(os.path.join(path, "cpuacct.usage")) as f:
        return int(f.read()) / 1e9


def _close_masters(cpdir):
    for name in os.listdir(cpdir):
        subprocess.run(["ssh", "-o", "ControlPath=" + os.path.join(cpdir, name), "-O", "exit", "x"],
                       capture_output=True, check=False, timeout=20)


@contextlib.contextmanager
def measured(control_dir=None):
    """A cpuacct cgroup of its own for the ``with`` block: yields ``(join, cpdir, figures)``. Processes started with
    ``preexec_fn=join`` are counted (with their ssh ControlPersist masters); ``figures`` gets wall, ctrl (their CPU)
    and node (the light nodes' CPU) at the end. With ``control_dir`` the SSH ControlPersist masters live there and
    stay up after the block (the next run reuses them, as an operator's rerun within the site's ControlPersist
    does); without, the block gets a new directory and its masters are closed, and counted, at the end."""
    cg = os.path.join(CGROUP_ROOT, "fleet-bench-%d" % os.getpid())
    os.makedirs(cg, exist_ok=True)
    cpdir = control_dir or tempfile.mkdtemp(prefix="fb-cp-")

    def join():
        with open(os.path.join(cg, "cgroup.procs"), "w") as f:
            f.write(str(os.getpid()))
    figures = {}
    try:
        c0, n0, t0 = cg_usage(cg), lightnodes.cpu_seconds(), time.perf_counter()
        yield join, cpdir, figures
        figures["wall"] = time.perf_counter() - t0
        if not control_dir:
            _close_masters(cpdir)
        figures.update(ctrl=cg_usage(cg) - c0, node=lightnodes.cpu_seconds() - n0)
    finally:
        if not control_dir:
            shutil.rmtree(cpdir, ignore_errors=True)
        _remove_cgroup(cg)


def _remove_cgroup(cg, timeout=5.0):
    """rmdir the cgroup once its last process (a ControlPersist master told to exit) has gone."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            os.rmdir(cg)
            return
        except OSError:
            if time.monotonic() > deadline:
                return
            time.sleep(0.05)


def preflight_run(n, env_extra=None, playbook="playbooks/preflight.yml", forks=None, control_dir=None):
    """One playbook run (preflight.yml) on the first n light nodes; controller CPU from a cgroup of its own (every
    process ansible-playbook starts, ssh ControlPersist masters included), nodes' CPU from theirs (``measured``)."""
    art = tempfile.mkdtemp(prefix="fb-pf-")
    try:
        with measured(control_dir) as (join, cpdir, figures):
            env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"),
                       ANSIBLE_STDOUT_CALLBACK="ansible.posix.json", ANSIBLE_SSH_CONTROL_PATH_DIR=cpdir,
                       PATH=VENV_BIN + os.pathsep + os.environ.get("PATH", ""))
            env.update(env_extra or {})
            cmd = [os.path.join(VENV_BIN, "ansible-playbook"), playbook, "-i", "inventories/sim-light",
                   "--limit", ",".join(w["name"] for w in lightnodes.nodes(n)), "--forks", str(forks or max(n, 5)),
                   "-e", json.dumps(dict(EXTRA, preflight_artifacts_dir=art))]
            p = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, check=False, preexec_fn=join)
        result = json.loads(p.stdout)
        report = None
        if os.path.exists(os.path.join(art, "preflight-report.json")):
            with open(os.path.join(art, "preflight-report.json")) as f:
                report = json.load(f)
    finally:
        shutil.rmtree(art, ignore_errors=True)
    _span, hosts = task_seconds(result, PROBE_TASK)
    return dict(figures, calls=len(hosts), rc=p.returncode, report=report)


# --ssh-floor: no Ansible at all - one plain ssh client per node, all at once (threads), sending a payload the size of
# node_probe's AnsiballZ payload (196,845 bytes: module_common.modify_module, ZIP_DEFLATED, 2026-12-02) to python3
# on the node and reading a reply the size of a probe result (about 9 KB per node). The cost of the connection itself:
# the floor under any controller, Ansible or not, that reaches the nodes over OpenSSH with these settings.
PROBE_PAYLOAD = b"A" * 196845
PROBE_REPLY_BYTES = 9000


def ssh_command(node, ssh_args, cpdir):
    """The ssh client command for one node: the variant's ssh_args (the repo's ansible.cfg unless the variant sets
    ANSIBLE_SSH_ARGS) and a ControlPath in ``cpdir``, on the light cluster's own login (lightnodes.ssh_command)."""
    remote = "/usr/bin/python3 -c 'import sys; sys.stdin.buffer.read(); sys.stdout.write(\"x\" * %d)'" % (
        PROBE_REPLY_BYTES)
    return lightnodes.ssh_command(node, remote, shlex.split(ssh_args) + ["-o", "ControlPath=%s/%%C" % cpdir])


def ssh_run(n, env_extra=None, control_dir=None):
    """One plain ssh per node on the first n light nodes at once, measured as preflight_run measures a playbook."""
    ssh_args = (env_extra or {}).get("ANSIBLE_SSH_ARGS", SSH_ARGS)
    with measured(control_dir) as (join, cpdir, figures):
        def one(node):
            p = subprocess.run(ssh_command(node, ssh_args, cpdir), input=PROBE_PAYLOAD, capture_output=True,
                               check=False, preexec_fn=join)
            return p.returncode == 0 and len(p.stdout) == PROBE_REPLY_BYTES
        with concurrent.futures.ThreadPoolExecutor(max_workers=n) as pool:
            replies = list(pool.map(one, lightnodes.nodes(n)))
    return dict(figures, calls=sum(replies), rc=0 if all(replies) else 1, report=None)


@contextlib.contextmanager
def config_env(defaults):
    """{"ANSIBLE_CONFIG": a temporary ansible.cfg with ``defaults`` (config_with)} for the ``with`` block; {} when
    ``defaults`` is empty (the repo's ansible.cfg stays)."""
    if not defaults:
        yield {}
        return
    folder = tempfile.mkdtemp(prefix="fb-cfg-")
    try:
        yield {"ANSIBLE_CONFIG": config_with(defaults, folder)}
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def config_with(defaults, folder):
    """An ansible.cfg in ``folder``: the repo's, with the ``[defaults]`` keys of ``defaults`` replaced - for settings
    ansible-core reads from ansible.cfg only (internal_poll_interval has no environment variable)."""
    cfg = configparser.ConfigParser(interpolation=None)
    cfg.read(os.path.join(REPO, "ansible.cfg"))
    cfg.set("defaults", "collections_path", os.path.join(REPO, "build", "collections"))
    for key, value in defaults.items():
        cfg.set("defaults", key, str(value))
    path = os.path.join(folder, "ansible.cfg")
    with open(path, "w") as f:
        cfg.write(f)
    return path


# The connection variants of the preflight table (--variants): how the controller reaches the nodes.
SSH_ARGS = "-o ControlMaster=auto -o ControlPersist=120s"  # the repo's ansible.cfg
VARIANTS = {
    # every run opens one new SSH connection per node (OpenSSH's default key exchange: sntrup761x25519 here)
    "cold": {},
    # the site's ControlPersist across runs: a warm-up run (not counted) leaves one master per node, the measured
    # runs reuse them - an operator's preflight rerun while fixing a cluster
    "warm": {"warm": True},
    # new connections with curve25519-sha256 first (site_ssh_kex_algorithms of the site template)
    "curve25519": {"env": {"ANSIBLE_SSH_ARGS": SSH_ARGS + " -o KexAlgorithms=curve25519-sha256"}},
    # cold, with ansible-core's default internal_poll_interval (0.001 s) instead of the repo's and the site's 0.01:
    # the main process checks every worker 1,000 times a second while the nodes run the probe
    "cold-poll-default": {"ini": {"internal_poll_interval": "0.001"}},
}
PING = "benchmarks/playbooks/settings_probe.yml"  # one ping per node: Ansible's own floor per node
SSH_FLOOR = "plain-ssh"  # --ssh-floor: ssh_run instead of a playbook (no Ansible)


def _one_run(n, env, playbook, control_dir=None):
    if playbook == SSH_FLOOR:
        return ssh_run(n, env, control_dir)
    return preflight_run(n, env, playbook, control_dir=control_dir)


def _variant_runs(n, repeat, variant, playbook):
    spec = VARIANTS[variant]
    # the ping play leaves fact gathering to the setting: none, like the collection's playbooks
    env = dict(spec.get("env") or {}, **({"ANSIBLE_GATHERING": "explicit"} if playbook == PING else {}))
    with config_env(spec.get("ini")) as cfg_env:
        env.update(cfg_env)
        if not spec.get("warm"):
            return [_one_run(n, env, playbook) for _run in range(repeat)]
        cpdir = tempfile.mkdtemp(prefix="fb-warm-")
        try:
            _one_run(n, env, playbook, control_dir=cpdir)  # opens the masters
            return [_one_run(n, env, playbook, control_dir=cpdir) for _run in range(repeat)]
        finally:
            _close_masters(cpdir)
            shutil.rmtree(cpdir, ignore_errors=True)


def preflight_rows(sizes, repeat, variant="cold", playbook="playbooks/preflight.yml"):
    lightnodes.up(max(sizes))
    runs = {}
    for n in [1] + sizes:
        runs[n] = _variant_runs(n, repeat, variant, playbook)
        print("%s %s %d node(s): controller CPU %s s, nodes' CPU %s s, calls %s" % (
            os.path.basename(playbook), variant, n, ", ".join("%.2f" % r["ctrl"] for r in runs[n]),
            ", ".join("%.2f" % r["node"] for r in runs[n]), ", ".join(str(r["calls"]) for r in runs[n])), flush=True)
    base = median([r["ctrl"] for r in runs[1]])
    rows = []
    for n in sizes:
        ctrl = median([r["ctrl"] for r in runs[n]])
        rows.append({"n": n, "wall": median([r["wall"] for r in runs[n]]), "ctrl": ctrl,
                     "node": median([r["node"] for r in runs[n]]), "calls": runs[n][0]["calls"],
                     "per_node": (ctrl - base) / (n - 1), "plain": ctrl / n})
    return base, rows, runs


def print_preflight(base, rows, title="preflight.yml, cold connections"):
    print("%s - fixed cost (1 node): controller CPU %.2f s" % (title, base))
    print("| nodes | wall (s) | controller CPU (s) | nodes' CPU (s) | controller CPU per further node (s) "
          "| controller CPU / nodes (s) | probe calls | goal <= 0.08 s |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
    for r in rows:
        print("| %d | %.2f | %.2f | %.2f | %.3f | %.3f | %d | %s |" % (
            r["n"], r["wall"], r["ctrl"], r["node"], r["per_node"], r["plain"], r["calls"],
            "yes" if r["per_node"] <= 0.08 else "NO"))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--plan-sizes", default="64,144,576,1152")
    ap.add_argument("--preflight-sizes", default="8,32,64")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--no-plan", action="store_true")
    ap.add_argument("--no-preflight", action="store_true")
    ap.add_argument("--keep-light", action="store_true", help="leave the light cluster up afterwards")
    ap.add_argument("--save", help="write every figure (and the preflight reports) to this JSON file")
    ap.add_argument("--variants", default="cold",
                    help="preflight connection variants, comma-separated: %s" % ", ".join(sorted(VARIANTS)))
    ap.add_argument("--floor", action="store_true",
                    help="also a one-ping-per-node play in every variant: Ansible's own cost per node")
    ap.add_argument("--ssh-floor", action="store_true",
                    help="also one plain ssh per node in every variant, no Ansible: the connection's own cost")
    args = ap.parse_args()
    print("load average at start: %s" % " ".join(open("/proc/loadavg").read().split()[:3]), flush=True)
    out = {}
    if not args.no_plan:
        recipe, snaps = recipe_data.load_recipe(), recipe_data.load_snapshots()
        out["plan"] = [plan_row(int(n), args.repeat, recipe, snaps) for n in args.plan_sizes.split(",")]
    if not args.no_preflight:
        sizes = [int(n) for n in args.preflight_sizes.split(",")]
        playbooks = (["playbooks/preflight.yml"] + ([PING] if args.floor else [])
                     + ([SSH_FLOOR] if args.ssh_floor else []))
        out["preflight"] = {}
        try:
            for variant in args.variants.split(","):
                for playbook in playbooks:
                    base, rows, runs = preflight_rows(sizes, args.repeat, variant, playbook)
                    out["preflight"]["%s %s" % (os.path.basename(playbook), variant)] = {
                        "base": base, "rows": rows, "reports": dict((n, v[0]["report"]) for n, v in runs.items())}
        finally:
            if not args.keep_light:
                lightnodes.down()
    print("load average at end: %s" % " ".join(open("/proc/loadavg").read().split()[:3]))
    if "plan" in out:
        print_plan(out["plan"])
    for title, table in out.get("preflight", {}).items():
        print_preflight(table["base"], table["rows"], title)
    if args.save:
        with open(args.save, "w") as f:
            json.dump(out, f, indent=1, sort_keys=True, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
