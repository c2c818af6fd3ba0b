"""The full smoke profile against stand-in serving faults (sim/standin/README.md, "Serving faults"), shared by the
rehearsal tests that run it (test_smoke_gates_sim.py on gb300 and on a fleet of its own, test_pd.py on its gb300pd
deployment).

A fault is put on the hosts it belongs to by relaunching only them (`launch.yml --limit`) with the fault in
`kimi_k3_extra_env`; that relaunch replaces the hosts' whole extra env, so a relaunch with `{}` removes it."""
import json
import os

from tests.helpers import routed
from tests.helpers.runner import run_playbook

GATES = ("correctness", "api", "pd", "tool_verifier")
# Wrong answers from 2 requests in flight: the client's send gate and the stand-in's quick answers keep fewer than
# 8 in flight at once on a backend (a PD decode instance sees even fewer), so a higher threshold never trips.
WRONG_ABOVE = "2"
SIM = dict(routed.SIM)


def smoke(sim, art, extra=None):
    """smoke.yml with smoke_profile=full."""
    ev = dict(SIM, kimi_k3_artifacts_dir=art, smoke_profile="full", **(extra or {}))
    return run_playbook("smoke.yml", sim.inventory, extravars=ev, timeout=1200)


def launch(sim, art, limit, env):
    """Relaunch ``limit`` with exactly ``env`` as kimi_k3_extra_env (must succeed)."""
    ev = dict(SIM, kimi_k3_artifacts_dir=art, kimi_k3_extra_env=env)
    return routed.must(run_playbook("launch.yml", sim.inventory, extravars=ev, limit=limit, skip_tags="preflight",
                                    timeout=1200))


def facts(art, host):
    with open(os.path.join(art, "smoke", "smoke-%s.json" % host)) as f:
        return json.load(f)


def gates(report):
    """The gates among GATES that the report's policy names as violated, sorted."""
    return sorted({v.split(":", 1)[0] for v in report["policy"]["violations"] if v.split(":", 1)[0] in GATES})
