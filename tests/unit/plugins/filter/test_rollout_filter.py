"""filter/rollout.py: upgrade_outcome is registered under its documented name, wraps
plugin_utils.rollout.transitions.outcome
and refuses input that is not the hosts' variables."""
import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.kimi_k3.plugins.filter import rollout as F


def test_registered_and_wraps_the_plugin_utils_answer():
    assert F.FilterModule().filters()["upgrade_outcome"] is F.upgrade_outcome
    assert F.upgrade_outcome([{}, {"upgrade_rolling_done": "replica-1"}], "img@b", "img@a") == {
        "rollback": False, "rolling_failed": False, "passed": True, "replaced": ["replica-1"],
        "rollback_message": "", "rolling_message": ""}
    assert F.upgrade_outcome(None, "img@b", "img@a")["passed"] is True


@pytest.mark.parametrize("hosts", [["tray01"], [None], [[1]]])
def test_refuses_what_is_not_the_hosts_variables(hosts):
    with pytest.raises(AnsibleFilterError) as err:
        F.upgrade_outcome(hosts, "img@b", "img@a")
    assert str(err.value) == ("upgrade_outcome expects the cluster hosts' variables "
                              "(groups['vllm_cluster'] | map('extract', hostvars))")


def test_rollback_target_filter():
    assert F.FilterModule().filters()["upgrade_rollback_target"] is F.upgrade_rollback_target
    assert F.upgrade_rollback_target({"deployed": {"plan_id": "p1", "image": "img@a"}}, "img@x") == {
        "image": "img@a", "plan_id": "p1"}
    assert F.upgrade_rollback_target(None, "img@x") == {"image": "img@x", "plan_id": ""}
    with pytest.raises(AnsibleFilterError) as err:
        F.upgrade_rollback_target("state.json", "img@x")
    assert str(err.value) == ("upgrade_rollback_target expects the deployment state record (deployment_state's "
                              "state) or none")
