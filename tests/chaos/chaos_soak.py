"""Chaos soak on the GB300 rehearsal pair: inject faults at chosen moments, run what an operator runs next, check.

    flock /tmp/kimi-sim.lock bash -c '. .venv/bin/activate; sim/simctl up --cluster gb300 && \
        python -m tests.chaos.chaos_soak --rounds 50 --seed 13; rc=$?; sim/simctl down; exit $rc'

Each round picks (seeded) one fault from FAULTS, injects it at its moment, runs the operator's command, and then
checks the invariant:

- a run that reports success leaves every node running one digest, /health 200, and its smoke gate passed;
- a failed run names the faulty node and the fault in its output; the next plain deploy (deploy.yml without the
  preflight tag, which the shared sim cannot pass) then succeeds and the cluster serves one digest;
- an interrupted run (SIGINT/SIGTERM to ansible-playbook) is followed by a plain deploy, which must say it found the
  interrupted upgrade (when one was interrupted) and end with one digest serving;
- no output (stdout of every run, artifacts, docker inspect of the containers) holds the API key or HF token.

Prints rounds, faults by kind, detection time percentiles (fault injected -> failure summary printed), recoveries,
invariant violations; exit code 1 when any invariant was violated. Bounded by --rounds and --max-minutes.
"""
import argparse
import json
import os
import random
import re
import secrets
import signal
import subprocess
import sys
import tempfile
import threading
import time

from tests.helpers import http  # run as a module from the repository root (python -m tests.chaos.chaos_soak)

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

NAME = "vllm-kimi-k3"


class Cluster(object):
    """A rehearsal cluster: inventory, nodes {name: address} (head first), nodes serving HTTP."""

    def __init__(self, name, nodes, serving, crash_culprit):
        self.name = name
        self.inventory = os.path.join(REPO, "inventories", "sim-" + name)
        self.nodes = nodes
        self.head, self.worker = list(nodes)
        self.serving = serving
        # who dies first with the crash-on-start image: the TP head (its follower waits in "joining"); with DP
        # hybrid LB every node loads and crashes on its own, so either may be first
        self.crash_culprit = crash_culprit


CLUSTERS = {
    "gb300": Cluster("gb300", {"gb300-tray01": "127.0.0.11", "gb300-tray02": "127.0.0.12"}, ["gb300-tray01"],
                     "gb300-tray01"),
    "mi355x": Cluster("mi355x", {"mi355x-node01": "127.0.0.21", "mi355x-node02": "127.0.0.22"},
                      ["mi355x-node01", "mi355x-node02"], None),
}

# fault -> (moment, operator command, which node a failed run must name first: head, worker, crash, None = any)
FAULTS = {
    "crash_image": ("upgrade", "upgrade broken", "crash"),
    "kill_head": ("launch", "deploy change", "head"),
    "kill_worker": ("launch", "deploy change", "worker"),
    "kill_worker_upgrade": ("upgrade", "upgrade alt", "worker"),
    "missing_digest": ("pull", "deploy missing", None),
    "stall": ("launch", "deploy hang", None),
    "container_gone": ("launch", "deploy", "worker"),
    "sigint_upgrade": ("upgrade", "upgrade alt", None),
    "sigterm_deploy": ("launch", "deploy change", None),
}
FAULT_WORDS = {"crash_image": "container stopped", "kill_head": "container stopped",
               "kill_worker": "container stopped", "kill_worker_upgrade": "container stopped",
               "missing_digest": "sha256:" + "0" * 64,
               "stall": "no start-up progress"}


def images(cluster):
    out = {}
    path = os.path.join(cluster.inventory, "group_vars", "all", "sim_image.yml")
    with open(path) as handle:
        for line in handle:
            if ":" in line and not line.startswith("#"):
                k, v = line.split(":", 1)
                out[k.strip()] = v.strip().strip('"')
    return out


def docker(node, *args, timeout=60):
    env = dict(os.environ, DOCKER_HOST="unix:///run/kimi-sim/%s/docker.sock" % node)
    return subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout, env=env, check=False)


def inspect(node):
    p = docker(node, "inspect", NAME)
    return json.loads(p.stdout)[0] if p.returncode == 0 else None


def health(addr):
    return http.status("http://%s:8000/health" % addr)


class Run(object):
    """ansible-playbook in the background; stdout lines with their arrival time."""

    def __init__(self, cluster, playbook, extra, art, skip_preflight=True):
        ev = dict(extra, kimi_k3_artifacts_dir=art)
        # extra vars (the secrets among them) go through a 0600 file, never argv (ps would show them)
        fd, self.vars_file = tempfile.mkstemp(prefix="vars-", suffix=".json", dir=art)
        with os.fdopen(fd, "w") as handle:
            json.dump(ev, handle)
        cmd = [os.path.join(REPO, ".venv", "bin", "ansible-playbook"), "-i", cluster.inventory,
               os.path.join(REPO, "playbooks", playbook), "-e", "@" + self.vars_file]
        if skip_preflight:
            cmd += ["--skip-tags", "preflight"]
        # unbuffered: every line arrives when ansible prints it (moments and detection times are read from them)
        env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"), ANSIBLE_NOCOLOR="1",
                   ANSIBLE_FORCE_COLOR="0", PYTHONUNBUFFERED="1")
        self.t0 = time.time()
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                                     cwd=REPO)
        self.lines = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        for line in self.proc.stdout:
            self.lines.append((time.time(), line.rstrip("\n")))

    def wait(self, timeout=600):
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rc = self.proc.wait()
        self.reader.join(10)
        os.unlink(self.vars_file)
        self.elapsed = time.time() - self.t0
        return rc

    def text(self):
        """The output with whitespace runs (YAML result line folding included) collapsed to one space."""
        return " ".join(" ".join(line for _t, line in self.lines).split())

    def first_time(self, pattern):
        rx = re.compile(pattern)
        for t, line in self.lines:
            if rx.search(line):
                return t
        return None


def kill_when_new(node, old_id, deadline_s=90):
    """Kill ``node``'s vLLM container once a new one (other than old_id) runs; return the kill time."""
    end = time.time() + deadline_s
    while time.time() < end:
        c = inspect(node)
        if c and c["Id"] != old_id and c["State"]["Running"]:
            time.sleep(0.5)
            if docker(node, "kill", c["Id"]).returncode == 0:
                return time.time()
        time.sleep(0.2)
    return None


def cluster_ok(cluster):
    """(ok, why): every node runs one digest and every node serving HTTP answers /health 200."""
    cs = {n: inspect(n) for n in cluster.nodes}
    if not all(c and c["State"]["Running"] for c in cs.values()):
        return False, "not running: %s" % [n for n, c in cs.items() if not (c and c["State"]["Running"])]
    imgs = {c["Config"]["Image"] for c in cs.values()}
    if len(imgs) != 1:
        return False, "mixed digests: %s" % sorted(imgs)
    bad = [n for n in cluster.serving if health(cluster.nodes[n]) != 200]
    if bad:
        return False, "/health is not 200 on %s" % bad
    return True, imgs.pop()


class Soak(object):
    def __init__(self, args, cluster, seed):
        self.args = args
        self.c = cluster
        self.rng = random.Random(seed)
        self.imgs = images(cluster)
        self.art = tempfile.mkdtemp(prefix="chaos-soak-%s-" % cluster.name)
        self.key, self.token = "sk-" + secrets.token_hex(16), "hf_" + secrets.token_hex(16)
        # a 1 s simulated weight load and the text smoke group keep a round short; the watch settings are defaults
        self.base = {"kimi_k3_api_key": self.key, "kimi_k3_hf_token": self.token,
                     "kimi_k3_extra_env": {"VLLM_STANDIN_LOAD_S": "1"}, "smoke_groups": ["text"]}
        self.rows, self.violations, self.detect = [], [], {}
        self.outputs = []

    def run(self, playbook, extra=None, **kw):
        r = Run(self.c, playbook, dict(self.base, **(extra or {})), self.art, **kw)
        self.outputs.append(r)
        return r

    def plain_deploy(self):
        r = self.run("deploy.yml")
        rc = r.wait()
        ok, why = cluster_ok(self.c)
        return rc == 0 and ok, r, why

    def operator(self, command):
        what, _sep, arg = command.partition(" ")
        if what == "upgrade":
            image = self.imgs["sim_image_alt" if arg == "alt" else "sim_image_broken"]
            return self.run("upgrade.yml", {"kimi_k3_image": image})
        if arg == "missing":
            repo = self.imgs["kimi_k3_image"].split("@", 1)[0]
            return self.run("deploy.yml", {"kimi_k3_image": repo + "@sha256:" + "0" * 64})
        if arg == "hang":
            return self.run("deploy.yml", {"kimi_k3_extra_env": {"VLLM_STANDIN_LOAD_S": "2",
                                                                 "VLLM_STANDIN_FAULT": "hang_on_load"},
                                           "launch_stall_timeout_s": 8})
        if arg == "change":
            return self.run("deploy.yml", {"kimi_k3_extra_env": {"VLLM_STANDIN_LOAD_S": "2"}})
        return self.run("deploy.yml")

    def inject(self, fault, run):
        """Inject the fault while ``run`` goes; return the injection time (None when it could not be injected)."""
        if fault.startswith("kill_"):
            node = self.c.head if fault == "kill_head" else self.c.worker
            return kill_when_new(node, self.before[node])
        if fault in ("sigint_upgrade", "sigterm_deploy"):
            sig = signal.SIGINT if fault == "sigint_upgrade" else signal.SIGTERM
            moment = self.rng.choice(["pull", "launch", "smoke"])
            marker = {"pull": "Pre-pull", "launch": "Start the vLLM container", "smoke": "gpufleet.kimi_k3.smoke"}
            end = time.time() + 120
            while time.time() < end and run.proc.poll() is None:
                if run.first_time(re.escape(marker[moment])):
                    time.sleep(self.rng.uniform(0.0, 2.0))
                    run.proc.send_signal(sig)
                    self.moment = moment
                    return time.time()
                time.sleep(0.1)
            return None
        return time.time()

    def round(self, index):
        fault = self.rng.choice(self.args.faults.split(",") if self.args.faults else sorted(FAULTS))
        moment, command, who = FAULTS[fault]
        culprit = {"head": self.c.head, "worker": self.c.worker, "crash": self.c.crash_culprit}.get(who)
        self.moment = moment
        self.before = {n: (inspect(n) or {}).get("Id") for n in self.c.nodes}
        if fault == "container_gone":
            docker(self.c.worker, "rm", "-f", NAME)
        t_round = time.time()
        run = self.operator(command)
        t_inject = self.inject(fault, run)
        rc = run.wait()
        text = run.text()
        row = {"cluster": self.c.name, "round": index, "fault": fault, "moment": self.moment, "rc": rc,
               "run_s": round(run.elapsed, 1)}
        interrupted = fault.startswith("sig")
        if interrupted:
            row["outcome"] = "interrupted" if t_inject else "not injected"
        elif rc == 0:
            row["outcome"] = "success"
            ok, why = cluster_ok(self.c)
            if not ok:
                self.violate(row, "the run reported success on a broken cluster: " + why)
            elif fault != "container_gone":
                self.violate(row, "the run reported success although %s was injected" % fault)
            elif "%s: no vLLM container" % self.c.worker not in text:
                self.violate(row, "the restart reason does not name the missing container")
        else:
            self.check_failure(row, fault, culprit, text, run, t_inject)
        if row["outcome"] != "success":
            pending = self.state().get("upgrade")
            recovered, r2, why = self.plain_deploy()
            row["recovery_s"] = round(r2.elapsed, 1)
            if pending and "was interrupted" not in r2.text():
                self.violate(row, "the next deploy did not report the interrupted upgrade")
            if not recovered:
                self.violate(row, "the next plain deploy did not recover: %s" % why)
            else:
                row["recovered"] = True
            row["found_interrupted_upgrade"] = bool(pending)
        if self.state().get("upgrade"):
            self.violate(row, "an upgrade is still recorded as in progress after a successful deploy")
        row["round_s"] = round(time.time() - t_round, 1)
        self.rows.append(row)
        print(json.dumps(row), flush=True)

    def check_failure(self, row, fault, culprit, text, run, t_inject):
        row["outcome"] = "failed"
        word = FAULT_WORDS.get(fault)
        if word and word not in text:
            self.violate(row, "the failure does not name the fault (%r)" % word)
        names = [culprit] if culprit else list(self.c.nodes)
        if fault in ("stall", "crash_image") and not culprit:
            names = [n for n in self.c.nodes if re.search(r"The vLLM group failed: %s" % n, text)]
            if not names:
                self.violate(row, "the failure summary names no node first")
        for n in names:
            if n not in text:
                self.violate(row, "the failure does not name %s" % n)
        if culprit and not re.search(r"The vLLM group failed: %s:" % re.escape(culprit), text):
            self.violate(row, "the failure summary does not put %s first" % culprit)
        if FAULTS[fault][1].startswith("upgrade"):
            ok, why = cluster_ok(self.c)
            if not ok:
                self.violate(row, "upgrade failed without rolling back: %s" % why)
        if fault in ("crash_image", "stall"):
            t_inject = run.first_time(r"start phase 0") or t_inject
        t_fail = run.first_time(r"The vLLM group failed|Task failed")
        if t_inject and t_fail:
            self.detect.setdefault(fault, []).append(max(0.0, t_fail - t_inject))
            row["detect_s"] = round(max(0.0, t_fail - t_inject), 1)

    def state(self):
        try:
            with open(os.path.join(self.art, "plan", "state.json")) as handle:
                return json.load(handle)
        except (OSError, ValueError):
            return {}

    def violate(self, row, why):
        row.setdefault("violations", []).append(why)
        self.violations.append(("%s round %d" % (self.c.name, row["round"]), row["fault"], why))

    def secrets_check(self):
        found = []
        for i, r in enumerate(self.outputs):
            text = r.text()
            raw = "\n".join(line for _t, line in r.lines)
            for s in (self.key, self.token):
                if s in text or s in raw:
                    found.append("run %d stdout" % i)
        for root, _dirs, files in os.walk(self.art):
            for f in files:
                with open(os.path.join(root, f), errors="replace") as handle:
                    body = handle.read()
                if self.key in body or self.token in body:
                    found.append(os.path.join(root, f))
        for n in self.c.nodes:
            p = docker(n, "inspect", NAME)
            if self.key in p.stdout or self.token in p.stdout:
                found.append("docker inspect on %s" % n)
        return found


def pct(values, q):
    if not values:
        return None
    values = sorted(values)
    k = (len(values) - 1) * q / 100.0
    lo, hi = int(k), min(int(k) + 1, len(values) - 1)
    return values[lo] + (values[hi] - values[lo]) * (k - lo)


def report(soaks, elapsed, seed):
    rows = [r for sk in soaks for r in sk.rows]
    detect = {}
    for sk in soaks:
        for k, v in sk.detect.items():
            detect.setdefault(k, []).extend(v)
    violations = [v for sk in soaks for v in sk.violations]
    leaks = [leak for sk in soaks for leak in sk.leaks]
    kinds = {}
    for r in rows:
        kinds.setdefault(r["fault"], []).append(r)
    per_cluster = ", ".join("%s %d" % (sk.c.name, len(sk.rows)) for sk in soaks)
    lines = ["rounds: %d (%s) in %.0f s wall, seed %d; clusters soaked in parallel"
             % (len(rows), per_cluster, elapsed, seed), "",
             "| fault | moment(s) | rounds | failed naming node + fault | interrupted | succeeded | "
             "recovered by next deploy | detection p50 / p90 / max (s) |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for fault in sorted(kinds):
        rs = kinds[fault]
        d = detect.get(fault, [])
        det = " / ".join("%.1f" % pct(d, q) for q in (50, 90, 100)) if d else "-"
        need = [r for r in rs if r.get("outcome") != "success"]
        lines.append("| %s | %s | %d | %d | %d | %d | %d of %d | %s |" % (
            fault, ",".join(sorted({r["moment"] for r in rs})), len(rs),
            sum(1 for r in rs if r.get("outcome") == "failed" and not r.get("violations")),
            sum(1 for r in rs if r.get("outcome") == "interrupted"),
            sum(1 for r in rs if r.get("outcome") == "success"),
            sum(1 for r in need if r.get("recovered")), len(need), det))
    alld = [v for vs in detect.values() for v in vs]
    lines += ["", "detection time, all faults (s): p50 %s, p90 %s, p99 %s, max %s (n=%d)" % tuple(
        ["%.1f" % pct(alld, q) if alld else "-" for q in (50, 90, 99, 100)] + [len(alld)]),
        "recoveries: %d of %d rounds that needed one (%d found an interrupted upgrade and rolled it back)" % (
            sum(1 for r in rows if r.get("recovered")), sum(1 for r in rows if r.get("outcome") != "success"),
            sum(1 for r in rows if r.get("found_interrupted_upgrade") and r.get("recovered"))),
        "not injected (the run ended before the moment): %d" % sum(1 for r in rows if r.get("outcome") == "not injected"),
        "round time per cluster (s): p50 %.1f, p90 %.1f, max %.1f" % (
            pct([r["round_s"] for r in rows], 50) or 0, pct([r["round_s"] for r in rows], 90) or 0,
            max([r["round_s"] for r in rows] or [0])),
        "secret values found in outputs: %d" % len(leaks),
        "invariant violations: %d" % (len(violations) + len(leaks))]
    for v in violations:
        lines.append("  - %s %s: %s" % v)
    for leak in leaks:
        lines.append("  - secret in %s" % leak)
    return "\n".join(lines)


def soak_cluster(soak, rounds, deadline, out):
    ok, r, why = soak.plain_deploy()
    if not ok:
        soak.violations.append(("%s start" % soak.c.name, "-", "initial deploy failed: %s" % why))
        out.append(r.text()[-3000:])
        soak.leaks = []
        return
    for i in range(1, rounds + 1):
        if time.time() > deadline:
            print("%s: stopping at --max-minutes after %d rounds" % (soak.c.name, i - 1), flush=True)
            break
        soak.round(i)
    soak.leaks = soak.secrets_check()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=50, help="total rounds, split over the clusters")
    ap.add_argument("--seed", type=int, default=13)
    ap.add_argument("--clusters", default="gb300", help="comma-separated: gb300, mi355x (soaked in parallel)")
    ap.add_argument("--max-minutes", type=float, default=34)
    ap.add_argument("--out", help="write the table (markdown) here too")
    ap.add_argument("--faults", help="comma-separated subset of: " + ", ".join(sorted(FAULTS)))
    args = ap.parse_args()
    names = [c for c in args.clusters.split(",") if c]
    soaks = [Soak(args, CLUSTERS[n], args.seed + i) for i, n in enumerate(names)]
    start = time.time()
    deadline = start + args.max_minutes * 60
    share = [args.rounds // len(soaks) + (1 if i < args.rounds % len(soaks) else 0) for i in range(len(soaks))]
    notes = []
    threads = [threading.Thread(target=soak_cluster, args=(sk, n, deadline, notes)) for sk, n in zip(soaks, share)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for note in notes:
        print(note)
    text = report(soaks, time.time() - start, args.seed)
    print(text)
    if args.out:
        with open(args.out, "w") as handle:
            handle.write(text + "\n")
    return 1 if any(sk.violations or sk.leaks for sk in soaks) else 0


if __name__ == "__main__":
    sys.exit(main())
