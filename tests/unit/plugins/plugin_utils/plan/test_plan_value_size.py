"""Issue #39 finding 8: a YAML alias bomb (aliases of aliases: 10^6 leaves from a few lines) is refused by its size,
counted through the shared references without expanding it (plugin_utils.plan.variables.value_items)."""
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import variables as plan_variables
from tests.unit.plan_mistakes import test_corpus as corpus


def bomb(levels=6, width=10):
    """What a YAML loader makes of nested aliases: one list shared by reference at every level (cheap to build)."""
    node = ["--x"] * width
    for _level in range(levels - 1):
        node = [node] * width
    return node


def test_a_bomb_is_counted_past_the_cap_without_walking_every_leaf():
    memo = {}
    assert plan_variables.value_items(bomb(), memo=memo) > plan_variables.MAX_VALUE_ITEMS
    assert len(memo) <= 6  # one entry per distinct list: the 10^6 leaves were never visited one by one
    assert plan_variables.value_items(bomb(levels=12), limit=10 ** 15) == 10 ** 12  # exact, and still cheap


def test_ordinary_values_are_counted_exactly():
    assert plan_variables.value_items(["--max-num-seqs", "8", "--enable-prefix-caching"]) == 3
    assert plan_variables.value_items({"A": "1", "B": ["x", "y"], "C": {}}) == 3
    assert plan_variables.value_items("a string") == 1 and plan_variables.value_items([]) == 0
    assert not plan_variables.oversized(["--x"] * plan_variables.MAX_VALUE_ITEMS)
    assert plan_variables.oversized(["--x"] * (plan_variables.MAX_VALUE_ITEMS + 1))


def test_a_value_that_contains_itself_or_nests_past_the_recursion_limit_is_oversized():
    recursive = ["--max-num-seqs"]
    recursive.append(recursive)
    assert plan_variables.oversized(recursive)
    deep = "--x"
    for _level in range(50000):
        deep = [deep]
    assert plan_variables.oversized(deep)


def test_the_plan_refuses_a_bomb_first_naming_every_host_that_holds_it():
    nodes, routers = corpus.nodes_of(*corpus.apply({"cluster": {"kimi_k3_extra_args": bomb()}},
                                                   *corpus.base_inventory("gb300-fleet")))
    r = corpus.plan(nodes, routers)
    (p,) = r["errors"]
    assert not r["ok"] and p["variable"] == "kimi_k3_extra_args"
    assert p["host"] == "gb300-tray01, gb300-tray02, gb300-tray03 and 1 more"
    assert p["message"] == ("holds more than 10000 items (nested lists or mappings counted through their YAML aliases); "
                            "refused before it is expanded.")
    assert "kimi_k3_extra_args its items one by one" in p["fix"]
