# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The rollout state machine of an upgrade: which moves the deployment state record allows, as one table.

The state is read from the record (``<plan_dir>/state.json``, plugin_utils/rollout/state.py): ``idle`` when no
upgrade is recorded, else the recorded upgrade's stage. Every write of the upgrade (roles/upgrade, through the
deployment_state action) is an event of this table; a move the table does not hold is refused with a message that
names the state, the move and the moves allowed from there, and the record is left as it was. Two runs upgrading
the same deployment at once, or a hand-edited record, are what such a refusal catches::

    idle --begin--> pull --launch--> launch --smoke--> smoke --end--> idle
                                       |  \\--end--> idle    (rolling: each deployment gated and rolled back alone)
                                       +--rollback--> rollback --end--> idle   (smoke --rollback--> rollback too)
    any upgrade state --recover--> idle      (recover.yml relaunched the digest the upgrade started from)
    any upgrade state --supersede--> pull    (recover_interrupted_upgrade=ignore, and a new upgrade is noted)
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.rollout import state as deploy_state

IDLE = "idle"
# a recorded upgrade whose stage is none of the stages (a hand-edited record): it can only be closed
UNKNOWN = "unknown"

# state -> what it means, for messages
STATES = {
    IDLE: "no upgrade is in progress",
    "pull": "an upgrade was noted and the new digest is being pulled; nothing was stopped yet",
    "launch": "the new digest is being launched",
    "smoke": "the new digest is launched and being smoke-tested",
    "rollback": "the new digest failed and the previous one is being relaunched",
    UNKNOWN: "an upgrade is recorded at a stage this collection does not know",
}

# event -> what it does, for messages
EVENTS = {
    "begin": "note a new upgrade",
    "supersede": "note a new upgrade over an interrupted one the operator chose to ignore",
    "launch": "note the launch stage",
    "smoke": "note the smoke stage",
    "rollback": "note the rollback stage",
    "end": "close the upgrade",
    "recover": "close an interrupted upgrade after relaunching the digest it started from",
}

_IN_PROGRESS = ("pull", "launch", "smoke", "rollback", UNKNOWN)

# (state, event) -> next state; every pair not listed is an illegal move
TRANSITIONS = dict(
    [((IDLE, "begin"), "pull"),
     (("pull", "launch"), "launch"),
     (("launch", "smoke"), "smoke"),
     (("launch", "rollback"), "rollback"),
     (("smoke", "rollback"), "rollback"),
     (("launch", "end"), IDLE),
     (("smoke", "end"), IDLE),
     (("rollback", "end"), IDLE)]
    + [((state, "recover"), IDLE) for state in _IN_PROGRESS]
    + [((state, "supersede"), "pull") for state in _IN_PROGRESS])


class RolloutError(ValueError):
    """An illegal move of the rollout state machine (the message says which, and what is allowed)."""


def state_of(record):
    """The rollout state of a state record (any value: an unusable record is an empty one)."""
    upgrade = deploy_state.normalise(record)["upgrade"]
    if upgrade is None:
        return IDLE
    stage = upgrade.get("stage")
    return stage if stage in STATES and stage not in (IDLE, UNKNOWN) else UNKNOWN


def allowed(state):
    """The events allowed from ``state``, in the order of EVENTS."""
    return [event for event in EVENTS if (state, event) in TRANSITIONS]


def transition(state, event):
    """The state after ``event`` from ``state``; RolloutError for a move the table does not hold."""
    if event not in EVENTS:
        raise RolloutError("unknown rollout event %r (one of %s)" % (event, ", ".join(EVENTS)))
    if state not in STATES:
        raise RolloutError("unknown rollout state %r (one of %s)" % (state, ", ".join(STATES)))
    if (state, event) not in TRANSITIONS:
        raise RolloutError(
            "Refused to %s (%s) in rollout state %s: %s. Allowed from %s: %s. Another run may be changing this "
            "deployment, or the state record was edited: playbooks/status.yml shows the record and every node."
            % (EVENTS[event], event, state, STATES[state], state, ", ".join(allowed(state))))
    return TRANSITIONS[(state, event)]


def event_of(op, stage=None):
    """The event a deployment_state operation is (``upgrade_stage`` names its stage); None for the operations that
    are no rollout moves (read, ready, failed)."""
    if op == "upgrade_stage":
        return stage
    return {"upgrade_begin": "begin", "upgrade_end": "end", "upgrade_recover": "recover",
            "upgrade_supersede": "supersede"}.get(op)


def apply(record, event, upgrade=None, at=None):
    """The record after ``event``; RolloutError (record untouched) for an illegal move.

    ``upgrade``: for ``begin`` and ``supersede``, the dict of from_image, to_image, from_plan_id, to_plan_id;
    ``at``: the time."""
    target = transition(state_of(record), event)
    if event in ("begin", "supersede"):
        up = upgrade or {}
        return deploy_state.begin_upgrade(record, up.get("from_image"), up.get("to_image"),
                                          up.get("from_plan_id"), up.get("to_plan_id"), at)
    if target == IDLE:
        return deploy_state.end_upgrade(record)
    return deploy_state.upgrade_stage(record, target)


def rollback_target(record, head_image):
    """``{image, plan_id}`` an upgrade rolls back to: the record's deployed plan, else the image the head runs
    (plan id empty); image None when there is neither."""
    deployed = deploy_state.normalise(record)["deployed"] or {}
    if deployed.get("image"):
        return {"image": deployed["image"], "plan_id": deployed.get("plan_id") or ""}
    return {"image": head_image or None, "plan_id": deployed.get("plan_id") or ""}


def _first_line(text):
    lines = str(text or "").splitlines()
    return lines[0] if lines else ""


def _facts(hosts):
    """(failed, rolling failures, replaced) from the cluster hosts' facts, in group order."""
    failed, rolling, replaced = [], [], []
    for facts in hosts or []:
        if "upgrade_failed_stage" in facts:
            failed.append({"stage": facts["upgrade_failed_stage"], "failure": facts.get("upgrade_failure", "")})
        if "upgrade_rolling_failure" in facts:
            rolling.append(facts["upgrade_rolling_failure"])
        if "upgrade_rolling_done" in facts and facts["upgrade_rolling_done"] not in replaced:
            replaced.append(facts["upgrade_rolling_done"])
    return failed, rolling, replaced


def rollback_message(failed, target, previous):
    """Why the upgrade failed after the rollback to ``previous`` serves again (the first host that noted a failure)."""
    return ("Upgrade to %s failed at the %s stage; the cluster was rolled back to %s and is serving again. Cause: %s "
            "(the failure summary above has the log tail; every node's is in the artifacts directory)"
            % (target, failed["stage"], previous, _first_line(failed["failure"])))


def rolling_message(failure, replaced, target, previous):
    """Where a rolling upgrade behind a router stopped, and what runs where."""
    back = " and serves again" if failure.get("rolled_back") else " (the rollback failed too: see above)"
    return ("Rolling upgrade to %s stopped at deployment %s (%s, task \"%s\"): %s. %s was rolled back to %s%s; "
            "replaced with the new digest: %s; the later deployments were not touched. The router serves from every "
            "healthy deployment. Fix the cause and run upgrade.yml again (replaced deployments stay as they are), "
            "or deploy.yml to put every deployment back on the inventory's digest."
            % (target, failure.get("deployment"), failure.get("host"), failure.get("task"),
               _first_line(failure.get("msg")), failure.get("deployment"), previous, back,
               ", ".join(replaced) or "none"))


def outcome(hosts, target, previous):
    """What the finish phase does, from the facts the launch and smoke phases left on the cluster's hosts.

    ``rollback``: the launch or the smoke gate failed somewhere (roll every deployment back, then fail with
    ``rollback_message``); ``rolling_failed``: a rolling step failed and rolled its deployment back (fail with
    ``rolling_message``); ``passed``: neither."""
    failed, rolling, replaced = _facts(hosts)
    return {
        "rollback": bool(failed), "rolling_failed": bool(rolling), "passed": not failed and not rolling,
        "replaced": replaced,
        "rollback_message": rollback_message(failed[0], target, previous) if failed else "",
        "rolling_message": rolling_message(rolling[0], replaced, target, previous) if rolling else "",
    }
