#!/usr/bin/env python3
"""Benchmark: what each controller setting of the site's ansible.cfg (roles/site/templates/ansible.cfg.j2)
is worth, measured on the lightweight sim nodes (`simctl up --cluster light`, no lock needed).

Every variant changes ONE setting of the site template's values (environment variables override ansible.cfg; the
internal_poll_interval variants, a setting with no environment variable, get an ansible.cfg of their own) and
runs `playbooks/preflight.yml` (one probe per node) on N nodes; the fact-gathering and strategy variants run
benchmarks/playbooks/settings_probe.yml (one ping per node, the play leaves gathering to the setting), because the
collection's playbooks never gather facts and must not run `strategy: free` (their run_once judgements need every
node's result). Printed per variant: wall, controller CPU, nodes' CPU (median of --repeat), as in fleet_scale.py.

Usage: .venv/bin/python benchmarks/controller_settings.py [--nodes 32] [--repeat 3] [--keep-light]
"""
import argparse
import statistics
import sys

import fleet_scale  # noqa: E402  (benchmarks/ is on sys.path when run as a script)
from fleet_scale import lightnodes  # noqa: E402

SITE_SSH = "-C -o ControlMaster=auto -o ControlPersist=30m"
FAST_KEX = "-o KexAlgorithms=curve25519-sha256,curve25519-sha256@libssh.org,sntrup761x25519-sha512@openssh.com"
SITE = {"ANSIBLE_PIPELINING": "True", "ANSIBLE_SSH_ARGS": SITE_SSH, "ANSIBLE_GATHERING": "explicit"}
PREFLIGHT, PING = "playbooks/preflight.yml", "benchmarks/playbooks/settings_probe.yml"
# (name, playbook, environment on top of SITE, forks or None = nodes[, ansible.cfg [defaults] keys])
# internal_poll_interval has no environment variable: its variants get an ansible.cfg of their own (the repo's, and
# the site template's, say 0.01).
VARIANTS = [
    ("site template (pipelining, ControlPersist 30m, -C, forks >= nodes, internal_poll_interval 0.01)", PREFLIGHT,
     {}, None),
    ("internal_poll_interval 0.001 (ansible-core's default)", PREFLIGHT, {}, None, {"internal_poll_interval": 0.001}),
    ("internal_poll_interval 0.05", PREFLIGHT, {}, None, {"internal_poll_interval": 0.05}),
    ("pipelining off", PREFLIGHT, {"ANSIBLE_PIPELINING": "False"}, None),
    ("no ControlPersist (ControlMaster=no)", PREFLIGHT, {"ANSIBLE_SSH_ARGS": "-C -o ControlMaster=no"}, None),
    ("no ssh compression (-C dropped)", PREFLIGHT, {"ANSIBLE_SSH_ARGS": "-o ControlMaster=auto -o ControlPersist=30m"},
     None),
    ("curve25519 key exchange first", PREFLIGHT, {"ANSIBLE_SSH_ARGS": SITE_SSH + " " + FAST_KEX}, None),
    ("forks 8", PREFLIGHT, {}, 8),
    ("ping play, gathering explicit", PING, {}, None),
    ("ping play, gathering implicit (facts per node)", PING, {"ANSIBLE_GATHERING": "implicit"}, None),
    ("ping play, strategy free", PING, {"ANSIBLE_STRATEGY": "free"}, None),
]


def variant_runs(variant, nodes, repeat):
    playbook, env, forks = variant[1:4]
    with fleet_scale.config_env(variant[4] if len(variant) > 4 else None) as cfg_env:
        env = dict(SITE, **env, **cfg_env)
        return [fleet_scale.preflight_run(nodes, env, playbook, forks) for _run in range(repeat)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=32)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--only", help="comma list of variant numbers (1-based)")
    ap.add_argument("--keep-light", action="store_true")
    args = ap.parse_args()
    print("load average at start: %s" % " ".join(open("/proc/loadavg").read().split()[:3]), flush=True)
    pick = [int(i) - 1 for i in args.only.split(",")] if args.only else range(len(VARIANTS))
    lightnodes.up(args.nodes)
    rows = []
    try:
        for i in pick:
            runs = variant_runs(VARIANTS[i], args.nodes, args.repeat)
            name = VARIANTS[i][0]
            row = [name] + [statistics.median(r[k] for r in runs) for k in ("wall", "ctrl", "node")]
            rows.append(row)
            print("%-60s wall %s ctrl %s nodes %s rc %s" % (name, *(["/".join("%.2f" % r[k] for r in runs)
                                                                     for k in ("wall", "ctrl", "node", "rc")])),
                  flush=True)
    finally:
        if not args.keep_light:
            lightnodes.down()
    print("load average at end: %s" % " ".join(open("/proc/loadavg").read().split()[:3]))
    print("| setting (%d light nodes) | wall (s) | controller CPU (s) | controller CPU per node (s) | nodes' CPU (s) |"
          % args.nodes)
    print("| --- | ---: | ---: | ---: | ---: |")
    for name, wall, ctrl, node in rows:
        print("| %s | %.2f | %.2f | %.3f | %.2f |" % (name, wall, ctrl, ctrl / args.nodes, node))
    return 0


if __name__ == "__main__":
    sys.exit(main())
