# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The rollout state machine of an upgrade: which moves the deployment state record allows, as one table.

The state is read from the record (``<plan_dir>/state.json``, module_utils/deploy_state.py): ``idle`` when no
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

from ansible_collections.gpufleet.kimi_k3.plugins.module_utils import deploy_state

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
