"""docs/dev/architecture.md "The plan contract" names exactly the keys the code publishes: the keys `require`
checks (plan_contract.CONTRACT_KEYS), every other key of a host plan, and every key of plan_result.cluster, over
the example inventories (one deployment, a replica fleet, prefill/decode)."""
import os
import re

import pytest

from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import contract as plan_contract

from tests.unit.plugins.action.test_plan_golden import REPO, plan_inventory

INVENTORIES = ("gb300-cluster", "gb300-dep16", "mi355x-rdma-2node", "gb300-fleet", "gb300-pd")


def _bullet(prefix):
    with open(os.path.join(REPO, "docs", "dev", "architecture.md")) as handle:
        text = handle.read()
    start = text.index("- " + prefix)
    end = text.find("\n- ", start + 1)
    return text[start:end]


def _names(text):
    """Backticked identifiers, without the ones inside a parenthesis (sub-keys and values)."""
    text = re.sub(r"\([^)]*\)", "", text)
    return set(re.findall(r"`([a-z][a-z0-9_]*)`", text))


@pytest.fixture(scope="module")
def rendered():
    results = [plan_inventory(name) for name in INVENTORIES]
    assert all(r["ok"] for r in results)
    return results


def test_contract_keys_named_are_the_checked_ones():
    bullet = _bullet("`plan_result.plans[inventory_hostname]`")
    checked = bullet.split("The plan also carries")[0]
    assert _names(checked) == set(plan_contract.CONTRACT_KEYS)


def test_host_plan_keys_named_are_the_published_ones(rendered):
    published = set()
    for r in rendered:
        for plan in r["plans"].values():
            published |= set(plan)
    assert _names(_bullet("`plan_result.plans[inventory_hostname]`")) == published


def test_cluster_keys_named_are_the_published_ones(rendered):
    published = set()
    for r in rendered:
        published |= set(r["cluster"])
    assert _names(_bullet("`plan_result.cluster`")) == published
