"""plugin_utils.rollout.transitions: the upgrade's state machine. Every legal move with its target, one exact-message
test per
illegal move (the record left as it was), the moves the upgrade role and recover make in their order, and random
move sequences against a model of the table."""
import pytest
import yaml
from ansible.parsing.dataloader import DataLoader
from hypothesis import given, settings
from hypothesis import strategies as st

from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.rollout import state as ds
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.rollout import transitions as R

# made at import: DataLoader reads the working directory, which a test run elsewhere may have removed by then
LOADER = DataLoader()
UP = {"from_image": "img@a", "to_image": "img@b", "from_plan_id": "p1", "to_plan_id": "p2"}

LEGAL = [
    ("idle", "begin", "pull"),
    ("pull", "launch", "launch"),
    ("launch", "smoke", "smoke"),
    ("launch", "rollback", "rollback"),
    ("smoke", "rollback", "rollback"),
    ("launch", "end", "idle"),
    ("smoke", "end", "idle"),
    ("rollback", "end", "idle"),
] + [(s, e, "idle") for s in ("pull", "launch", "smoke", "rollback", "unknown") for e in ("recover",)] + \
    [(s, "supersede", "pull") for s in ("pull", "launch", "smoke", "rollback", "unknown")]

MEANING = {
    "idle": "no upgrade is in progress",
    "pull": "an upgrade was noted and the new digest is being pulled; nothing was stopped yet",
    "launch": "the new digest is being launched",
    "smoke": "the new digest is launched and being smoke-tested",
    "rollback": "the new digest failed and the previous one is being relaunched",
    "unknown": "an upgrade is recorded at a stage this collection does not know",
}
DOING = {
    "begin": "note a new upgrade", "launch": "note the launch stage", "smoke": "note the smoke stage",
    "rollback": "note the rollback stage", "end": "close the upgrade",
}
ALLOWED = {
    "idle": "begin",
    "pull": "supersede, launch, recover",
    "launch": "supersede, smoke, rollback, end, recover",
    "smoke": "supersede, rollback, end, recover",
    "rollback": "supersede, end, recover",
    "unknown": "supersede, recover",
}
ILLEGAL = [
    ("idle", "supersede"), ("idle", "launch"), ("idle", "smoke"), ("idle", "rollback"), ("idle", "end"),
    ("idle", "recover"),
    ("pull", "begin"), ("pull", "smoke"), ("pull", "rollback"), ("pull", "end"),
    ("launch", "begin"), ("launch", "launch"),
    ("smoke", "begin"), ("smoke", "launch"), ("smoke", "smoke"),
    ("rollback", "begin"), ("rollback", "launch"), ("rollback", "smoke"), ("rollback", "rollback"),
    ("unknown", "begin"), ("unknown", "launch"), ("unknown", "smoke"), ("unknown", "rollback"), ("unknown", "end"),
]
TAIL = ("Another run may be changing this deployment, or the state record was edited: playbooks/status.yml shows "
        "the record and every node.")
WORDS = {"recover": "close an interrupted upgrade after relaunching the digest it started from",
         "supersede": "note a new upgrade over an interrupted one the operator chose to ignore"}


def record_in(state):
    """A state record whose rollout state is ``state``."""
    record = ds.mark_ready(None, "p1", "img@a", "T0")
    if state == "idle":
        return record
    record = ds.begin_upgrade(record, "img@a", "img@b", "p1", "p2", "T1")
    record["upgrade"]["stage"] = "dance" if state == "unknown" else state
    return record


def test_the_table_is_exactly_the_legal_moves_and_every_other_pair_is_illegal():
    assert sorted(R.TRANSITIONS.items()) == sorted(((s, e), t) for s, e, t in LEGAL)
    pairs = set((s, e) for s in R.STATES for e in R.EVENTS)
    assert pairs - set(R.TRANSITIONS) == set(ILLEGAL) and len(ILLEGAL) == 24


@pytest.mark.parametrize("state, event, target", LEGAL)
def test_legal_move(state, event, target):
    assert R.transition(state, event) == target
    out = R.apply(record_in(state), event, UP, "T2")
    assert R.state_of(out) == target
    assert out["deployed"] == {"plan_id": "p1", "image": "img@a", "at": "T0"}


@pytest.mark.parametrize("state, event", ILLEGAL)
def test_illegal_move_is_refused_with_what_is_allowed(state, event):
    want = "Refused to %s (%s) in rollout state %s: %s. Allowed from %s: %s. %s" % (
        dict(DOING, **WORDS)[event], event, state, MEANING[state], state, ALLOWED[state], TAIL)
    with pytest.raises(R.RolloutError) as err:
        R.transition(state, event)
    assert str(err.value) == want
    record = record_in(state)
    before = ds.normalise(record)
    with pytest.raises(R.RolloutError):
        R.apply(record, event, UP, "T2")
    assert record == before


def test_one_refusal_in_full():
    with pytest.raises(R.RolloutError) as err:
        R.apply(record_in("pull"), "smoke")
    assert str(err.value) == (
        "Refused to note the smoke stage (smoke) in rollout state pull: an upgrade was noted and the new digest is "
        "being pulled; nothing was stopped yet. Allowed from pull: supersede, launch, recover. Another run may be "
        "changing this deployment, or the state record was edited: playbooks/status.yml shows the record and "
        "every node.")


@pytest.mark.parametrize("state, event, want", [
    ("idle", "pull", "unknown rollout event 'pull' (one of begin, supersede, launch, smoke, rollback, end, recover)"),
    ("idle", None, "unknown rollout event None (one of begin, supersede, launch, smoke, rollback, end, recover)"),
    ("deployed", "begin", "unknown rollout state 'deployed' (one of idle, pull, launch, smoke, rollback, unknown)"),
])
def test_unknown_names_are_refused(state, event, want):
    with pytest.raises(R.RolloutError) as err:
        R.transition(state, event)
    assert str(err.value) == want


def test_begin_records_the_upgrade_and_the_paths_of_the_role():
    r = R.apply(record_in("idle"), "begin", UP, "T1")
    assert r["upgrade"] == {"from_image": "img@a", "to_image": "img@b", "from_plan_id": "p1", "to_plan_id": "p2",
                            "stage": "pull", "started_at": "T1"}
    passed = R.apply(R.apply(R.apply(r, "launch"), "smoke"), "end")
    rolled_back = R.apply(R.apply(R.apply(R.apply(r, "launch"), "smoke"), "rollback"), "end")
    rolling = R.apply(R.apply(r, "launch"), "end")
    assert [R.state_of(x) for x in (passed, rolled_back, rolling)] == ["idle"] * 3
    assert passed["upgrade"] is None and passed["deployed"] == r["deployed"]
    assert R.apply(R.apply(r, "launch"), "rollback")["upgrade"]["stage"] == "rollback"


def test_state_of_reads_any_record():
    assert [R.state_of(x) for x in (None, "junk", {}, {"upgrade": {"stage": "smoke"}}, {"upgrade": {}},
                                    {"upgrade": {"stage": "idle"}})] == \
        ["idle", "idle", "idle", "smoke", "unknown", "unknown"]


@pytest.mark.parametrize("op, stage, event", [
    ("upgrade_begin", None, "begin"), ("upgrade_stage", "smoke", "smoke"), ("upgrade_end", None, "end"),
    ("upgrade_recover", None, "recover"), ("upgrade_supersede", None, "supersede"), ("ready", None, None),
    ("failed", None, None), ("read", None, None),
])
def test_event_of_each_operation(op, stage, event):
    assert R.event_of(op, stage) == event


@settings(max_examples=500, deadline=None)
@given(st.sampled_from(sorted(R.STATES)), st.lists(st.sampled_from(sorted(R.EVENTS)), max_size=25))
def test_random_move_sequences_follow_the_table(start, events):
    record, state = record_in(start), start
    for event in events:
        legal = (state, event) in dict(((s, e), t) for s, e, t in LEGAL)
        before = ds.normalise(record)
        try:
            record = R.apply(record, event, UP, "T")
        except R.RolloutError:
            assert not legal and ds.normalise(record) == before
            continue
        assert legal
        state = dict(((s, e), t) for s, e, t in LEGAL)[(state, event)]
        assert R.state_of(record) == state
        assert (record["upgrade"] is None) == (state == "idle")
        assert record["deployed"] == {"plan_id": "p1", "image": "img@a", "at": "T0"}


def test_supersede_replaces_an_ignored_upgrade_with_the_new_one():
    old = record_in("launch")
    new = R.apply(old, "supersede", dict(UP, from_image="img@b", to_image="img@c", to_plan_id="p3"), "T3")
    assert new["upgrade"] == {"from_image": "img@b", "to_image": "img@c", "from_plan_id": "p1", "to_plan_id": "p3",
                              "stage": "pull", "started_at": "T3"}
    assert old["upgrade"]["stage"] == "launch"   # the record given is not changed


# The finish phase's messages as upgrade.yml rendered them in Jinja, verbatim: the Python that replaced them must
# say exactly the same (the integration drills and the chaos soak match them), but for one line break.
JINJA = """
upgrade_failed: "{{ groups['vllm_cluster'] | map('extract', hostvars) | selectattr('upgrade_failed_stage', 'defined') | list }}"
upgrade_rolling_failures: >-
  {{ groups['vllm_cluster'] | map('extract', hostvars) | selectattr('upgrade_rolling_failure', 'defined')
     | map(attribute='upgrade_rolling_failure') | list }}
upgrade_rolling_replaced: >-
  {{ groups['vllm_cluster'] | map('extract', hostvars) | selectattr('upgrade_rolling_done', 'defined')
     | map(attribute='upgrade_rolling_done') | unique | list }}
rollback: >-
  Upgrade to {{ upgrade_target_image }} failed at the {{ upgrade_failed[0].upgrade_failed_stage }} stage;
  the cluster was rolled back to {{ upgrade_rollback_image }} and is serving again.
  Cause: {{ upgrade_failed[0].upgrade_failure.splitlines()[0] | default('') }} (the failure summary above has the
  log tail; every node's is in the artifacts directory)
rolling: >-
  Rolling upgrade to {{ upgrade_target_image }} stopped at deployment
  {{ upgrade_rolling_failures[0].deployment }} ({{ upgrade_rolling_failures[0].host }}, task
  "{{ upgrade_rolling_failures[0].task }}"): {{ upgrade_rolling_failures[0].msg.splitlines()[0] | default('') }}.
  {{ upgrade_rolling_failures[0].deployment }} was rolled back to
  {{ upgrade_rollback_image ~ (' and serves again' if upgrade_rolling_failures[0].rolled_back | default(false)
     else ' (the rollback failed too: see above)') }};
  replaced with the new digest: {{ upgrade_rolling_replaced | join(', ') or 'none' }}; the later deployments
  were not touched. The router serves from every healthy deployment. Fix the cause and run upgrade.yml again
  (replaced deployments stay as they are), or deploy.yml to put every deployment back on the inventory's digest.
"""


def _jinja(hostvars, target, previous):
    """The old messages, rendered by Ansible's own templating from the old variables."""
    from ansible.template import Templar, trust_as_template

    text = dict((k, trust_as_template(v)) for k, v in yaml.safe_load(JINJA).items())
    variables = {"groups": {"vllm_cluster": sorted(hostvars)}, "hostvars": hostvars, "upgrade_target_image": target,
                 "upgrade_rollback_image": previous}
    variables.update((k, text[k]) for k in ("upgrade_failed", "upgrade_rolling_failures", "upgrade_rolling_replaced"))
    templar = Templar(loader=LOADER, variables=variables)
    out = {}
    if templar.template(text["upgrade_failed"]):
        out["rollback"] = templar.template(text["rollback"])
    if templar.template(text["upgrade_rolling_failures"]):
        out["rolling"] = templar.template(text["rolling"])
    return out


try:
    from ansible.template import trust_as_template as _TRUST  # noqa: F401  (ansible-core 2.19+)
except ImportError:
    _TRUST = None
FAILURE_TEXT = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=40)


NEEDS_TRUST = ("the old messages are rendered with ansible-core 2.19+'s templating (trust_as_template); the newest "
               "ansible-core leg runs this")


@pytest.mark.skipif(_TRUST is None, reason=NEEDS_TRUST)
@settings(max_examples=200, deadline=None)
@given(st.lists(st.fixed_dictionaries({}, optional={
    "upgrade_failed_stage": st.sampled_from(["launch", "smoke"]), "upgrade_failure": FAILURE_TEXT,
    "upgrade_rolling_done": st.sampled_from(["replica-1", "replica-2", "prefill"]),
    "upgrade_rolling_failure": st.fixed_dictionaries({
        "deployment": st.sampled_from(["replica-1", "decode"]), "host": st.sampled_from(["h1", "h2"]),
        "task": st.sampled_from(["Launch this deployment", "Smoke gate"]), "msg": FAILURE_TEXT,
        "rolled_back": st.booleans()})}), min_size=1, max_size=4))
def test_the_messages_are_the_ones_the_playbook_rendered(hosts):
    for facts in hosts:
        if "upgrade_failed_stage" in facts:
            facts.setdefault("upgrade_failure", "launch failed")
    hostvars = dict(("h%d" % i, facts) for i, facts in enumerate(hosts))
    want = _jinja(hostvars, "img@b", "img@a")
    got = R.outcome([hostvars[h] for h in sorted(hostvars)], "img@b", "img@a")
    assert (got["rollback"], got["rolling_failed"]) == ("rollback" in want, "rolling" in want)
    assert got["passed"] == (not want)
    assert got["rollback_message"] == want.get("rollback", "")
    # YAML folding kept the line break after the more-indented line of the old template: one line now
    assert got["rolling_message"] == want.get("rolling", "").replace(";\nreplaced with", "; replaced with")


def test_the_outcome_of_a_head_crash():
    got = R.outcome([{"upgrade_failed_stage": "launch", "upgrade_failure": "The vLLM group failed: tray01: its vLLM "
                      "container stopped (exit code 1)\nNode states:\n  ..."}, {}], "img@b", "img@a")
    assert got == {
        "rollback": True, "rolling_failed": False, "passed": False, "replaced": [], "rolling_message": "",
        "rollback_message": "Upgrade to img@b failed at the launch stage; the cluster was rolled back to img@a and is "
                            "serving again. Cause: The vLLM group failed: tray01: its vLLM container stopped (exit "
                            "code 1) (the failure summary above has the log tail; every node's is in the artifacts "
                            "directory)"}


@pytest.mark.parametrize("record, head, want", [
    ({"deployed": {"plan_id": "p1", "image": "img@a", "at": "T"}}, "img@x", {"image": "img@a", "plan_id": "p1"}),
    ({"deployed": None}, "img@x", {"image": "img@x", "plan_id": ""}),
    (None, "img@x", {"image": "img@x", "plan_id": ""}),
    ({"deployed": {"plan_id": "p1", "image": ""}}, "img@x", {"image": "img@x", "plan_id": "p1"}),
    ({"deployed": None}, None, {"image": None, "plan_id": ""}),
    ({"deployed": None}, "", {"image": None, "plan_id": ""}),
    ("junk", None, {"image": None, "plan_id": ""}),
])
def test_rollback_target(record, head, want):
    assert R.rollback_target(record, head) == want
