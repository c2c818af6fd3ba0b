"""The layouts of issue #40: every strategy, replica fleet and prefill/decode split the recipe data offers for
GB300 x 2 / 4 / 18 trays, B300 x 2, H200 x 2 / 4, MI355X x 1 / 2 - every row and every refusal reason.

The expected values are written here from the recipe data, not read from the function: which rule refuses a
layout (node count, GPU floor, hardware, weights fit, vendor) by reading strategies / deployment_kinds /
pd_cluster, and the figures of a rendered layout from an oracle that redoes docs/capacity.md's arithmetic with
the recipe's numbers (memory_mib, utilisation by layer order, 1,560 GB of weights, 84 GB replicated, the reserve,
24 MLA + 69 KDA layers). Anchors from docs/capacity.md's worked tables are checked on top."""
import math

import pytest

from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import layouts
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import recipe_data
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import topology

RECIPE = recipe_data.load_recipe()
# the plan renders each candidate (layouts takes the renderer as an argument: no import cycle)
BUILD = topology.build_cluster_plan
SNAPSHOTS = recipe_data.load_snapshots()
GIB, MIB, GB = 1024 ** 3, 1024 ** 2, 1000 ** 3
ARCH = {"mla": 24, "kda": 69, "latent": 512 + 64, "heads": 96, "dim": 128, "kernel": 4, "dtype": 2}
RESERVE_GIB = {"gb300": 8, "b300": 8, "h200": 6, "mi355x": 8}
MEMORY_MIB = {"gb300": 284208, "b300": 275040, "h200": 143771, "mi355x": 294896}
GPN = {"gb300": 4, "b300": 8, "h200": 8, "mi355x": 8}
LENGTHS = (32768, 131072, 262144, 1048576)

ONE_NODE = "%s runs on one node, but vllm_cluster has %d nodes."
MIN_NODES = "%s needs at least 2 nodes, vllm_cluster has 1."
MIN_GPUS = "%s needs at least %d GPUs, the cluster has %d (%d nodes x %d)."
UNSUPPORTED = "multi_node_dep is not supported on h200 by the recipe."
ONLY = "multi_node_tp_dp is only offered for h200, gb200, gb300, not %s."
NOT_FIT = "the weights do not fit"
PD_AMD = "prefill/decode deployments are not offered on amd nodes (mi355x)"


def oracle(acc, tp, pp, dp, ep, util, kv_bytes):
    """(weights GiB per GPU, KV budget GiB per GPU, budget bytes, bytes per token, bytes per sequence)."""
    weights = 1560 * GB
    per_gpu = (84 * GB / (tp * pp) + (weights - 84 * GB) / (tp * dp * pp)) if ep else weights / (tp * pp)
    budget = MEMORY_MIB[acc] * MIB * util - per_gpu - RESERVE_GIB[acc] * GIB
    token = math.ceil(ARCH["mla"] / pp) * ARCH["latent"] * kv_bytes
    heads, dim = ARCH["heads"], ARCH["dim"]
    state = math.ceil(ARCH["kda"] / pp) * (heads * dim * dim * 4 + 3 * (ARCH["kernel"] - 1) * heads * dim * 2) / tp
    return per_gpu / GIB, budget / GIB, budget, token, state


def ok(tp, pp=1, dp=1, ep=False, util=0.95, kv=1, seqs=None, replicas=1, a2a=None, moe=None):
    return {"tp": tp, "pp": pp, "dp": dp, "ep": ep, "util": util, "kv": kv, "seqs": seqs, "replicas": replicas,
            "a2a": a2a, "moe": moe}


# ----------------------------------------------------------------------------- expected tables, by reasoning

NV = "flashinfer_nvlink_one_sided"
MEGA = "deep_gemm_mega_moe"


def gb300(n):
    """GB300 trays of 4 GPUs over MNNVL. TP x DP holds a full copy on 4 GPUs (390 GB > 274.5 GB usable): never fits.
    TP+PP keeps its 0.90 (the Blackwell override sets no utilisation); DEP adds MegaMoE."""
    g = 4
    exp = {}
    for k in [1] + [k for k in range(2, n + 1) if n % k == 0]:
        m = n // k
        name = (lambda s: s) if k == 1 else (lambda s, k=k: "%d x %s" % (k, s))
        exp[name("single_node_tp")] = [ONE_NODE % ("single_node_tp", m)] if m > 1 else \
            [MIN_GPUS % ("single_node_tp", 8, g, 1, g)]
        for s, epf in (("multi_node_tp", False), ("multi_node_tep", True)):
            exp[name(s)] = ok(g * m, ep=epf, replicas=k) if m > 1 else [MIN_NODES % s]
        for s in ("multi_node_tp_pp", "multi_node_dep", "multi_node_tp_dp"):
            if m == 1:
                exp[name(s)] = [MIN_NODES % s]
            elif g * m < 16:
                exp[name(s)] = [MIN_GPUS % (s, 16, g * m, m, g)]
            elif s == "multi_node_tp_pp":
                exp[name(s)] = ok(g, pp=m, util=0.90, replicas=k)
            elif s == "multi_node_dep":
                exp[name(s)] = ok(1, dp=g * m, ep=True, replicas=k, a2a=NV, moe=MEGA)
            else:
                exp[name(s)] = [NOT_FIT]
    # Prefill TEP needs 2 trays, single_node_tp never fits a tray (4 GPUs) nor runs on several; the decode kind's
    # floor is 8 GPUs (2 trays) and it keeps --max-num-seqs 8 per engine.
    for p in range(1, n):
        d = n - p
        dec = [MIN_NODES % "multi_node_dep"] if d == 1 else []
        tep = ([MIN_NODES % "multi_node_tep"] if p == 1 else []) + dec
        exp["PD multi_node_tep x%d + multi_node_dep x%d" % (p, d)] = tep or ok(1, dp=g * d, ep=True, seqs=8, a2a=NV,
                                                                               moe=MEGA)
        exp["PD single_node_tp x%d + multi_node_dep x%d" % (p, d)] = \
            ([ONE_NODE % ("single_node_tp", p)] if p > 1 else [MIN_GPUS % ("single_node_tp", 8, g, 1, g)]) + dec
    return exp


def b300_2():
    exp = {"single_node_tp": [ONE_NODE % ("single_node_tp", 2)], "multi_node_tp": ok(16),
           "multi_node_tep": ok(16, ep=True), "multi_node_tp_pp": ok(8, pp=2, util=0.90),
           "multi_node_dep": ok(1, dp=16, ep=True, a2a="deepep_v2"), "multi_node_tp_dp": [ONLY % "b300"],
           "2 x single_node_tp": ok(8, replicas=2)}
    for s in ("multi_node_tp", "multi_node_tep", "multi_node_tp_pp", "multi_node_dep"):
        exp["2 x " + s] = [MIN_NODES % s]
    exp["PD multi_node_tep x1 + multi_node_dep x1"] = [MIN_NODES % "multi_node_tep", MIN_NODES % "multi_node_dep"]
    exp["PD single_node_tp x1 + multi_node_dep x1"] = [MIN_NODES % "multi_node_dep"]
    return exp


def h200(n):
    """8 x 141 GB: one copy needs 16 GPUs (TP8 is 195 GB a GPU against 139.8 GB usable); the Hopper override's 0.97
    comes after TP+PP's 0.90 and wins; bf16 KV (no --kv-cache-dtype); --max-num-seqs 5, Marlin MoE; DEP is not
    supported."""
    hop = dict(util=0.97, seqs=5, moe="marlin", kv=2)
    exp = {}
    for k in [1] + [k for k in range(2, n + 1) if n % k == 0]:
        m = n // k
        name = (lambda s: s) if k == 1 else (lambda s, k=k: "%d x %s" % (k, s))
        exp[name("single_node_tp")] = [ONE_NODE % ("single_node_tp", m)] if m > 1 else [NOT_FIT]
        for s, kw in (("multi_node_tp", dict(tp=8 * m)), ("multi_node_tep", dict(tp=8 * m, ep=True)),
                      ("multi_node_tp_pp", dict(tp=8, pp=m)), ("multi_node_tp_dp", None)):
            if m == 1:
                exp[name(s)] = [MIN_NODES % s]
            else:
                exp[name(s)] = [NOT_FIT] if kw is None else ok(replicas=k, **dict(hop, **kw))
        if k == 1:
            exp["multi_node_dep"] = [UNSUPPORTED]
    for p in range(1, n):
        d = n - p
        dec = [MIN_NODES % "multi_node_dep"] if d == 1 else [UNSUPPORTED]
        exp["PD multi_node_tep x%d + multi_node_dep x%d" % (p, d)] = ([MIN_NODES % "multi_node_tep"] if p == 1
                                                                      else []) + dec
        exp["PD single_node_tp x%d + multi_node_dep x%d" % (p, d)] = (
            [NOT_FIT] if p == 1 else [ONE_NODE % ("single_node_tp", p)]) + dec
    return exp


def mi355x(n):
    """8 x 288 GiB per node, RDMA (MoRI), bf16 KV (no --kv-cache-dtype), --max-num-seqs 128; the AMD override's
    0.95 comes after TP+PP's 0.90; no prefill/decode on AMD."""
    amd = dict(kv=2, seqs=128)
    if n == 1:
        exp = {"single_node_tp": ok(8, **amd)}
        exp.update((s, [MIN_NODES % s]) for s in RECIPE["strategies"] if s != "single_node_tp")
        return exp
    exp = {"single_node_tp": [ONE_NODE % ("single_node_tp", 2)], "multi_node_tp": ok(16, **amd),
           "multi_node_tep": ok(16, ep=True, **amd), "multi_node_tp_pp": ok(8, pp=2, **amd),
           "multi_node_dep": ok(1, dp=16, ep=True, a2a="mori_high_throughput", **amd),
           "multi_node_tp_dp": [ONLY % "mi355x"], "2 x single_node_tp": ok(8, replicas=2, **amd)}
    for s in ("multi_node_tp", "multi_node_tep", "multi_node_tp_pp", "multi_node_dep"):
        exp["2 x " + s] = [MIN_NODES % s]
    exp["PD multi_node_tep x1 + multi_node_dep x1"] = [MIN_NODES % "multi_node_tep", PD_AMD,
                                                       MIN_NODES % "multi_node_dep"]
    exp["PD single_node_tp x1 + multi_node_dep x1"] = [PD_AMD, MIN_NODES % "multi_node_dep"]
    return exp


CASES = [("gb300", 2, gb300(2)), ("gb300", 4, gb300(4)), ("gb300", 18, gb300(18)), ("b300", 2, b300_2()),
         ("h200", 2, h200(2)), ("h200", 4, h200(4)), ("mi355x", 1, mi355x(1)), ("mi355x", 2, mi355x(2))]


def _table(acc, n, target=None):
    report = layouts.enumerate_for_hardware({"accelerator": acc, "nodes": n}, RECIPE, SNAPSHOTS, target=target, build=BUILD)
    assert report["ok"], report["errors"]
    return report, dict((r["layout"], r) for r in report["layouts"])


def _check_ok(acc, n, row, want):
    assert row["status"] == "ok", row.get("refusal")
    dep = row["deployments"][-1]
    ep_size = want["tp"] * want["dp"] if want["ep"] else 1
    assert {k: dep["sizes"][k] for k in ("tp", "pp", "dp", "ep")} == \
        {"tp": want["tp"], "pp": want["pp"], "dp": want["dp"], "ep": ep_size}
    assert row["gpus"] == n * GPN[acc]
    assert (dep["all2all_backend"], dep["moe_backend"]) == (want["a2a"], want["moe"] or "auto (vLLM picks)")
    weights, budget_gib, budget, token, state = oracle(acc, want["tp"], want["pp"], want["dp"], want["ep"],
                                                       want["util"], want["kv"])
    cap = dep["capacity"]
    assert cap["weights_per_gpu_gib"] == round(weights, 2) and cap["kv_budget_gib"] == round(budget_gib, 2)
    assert cap["kv_tokens_per_engine"] == int(budget / token)
    for length in LENGTHS:
        # per deployment to 2 decimals (the plan's record), capped by --max-num-seqs x engines, summed over replicas
        held = round(budget / (length * token + state) * want["dp"], 2)
        if want["seqs"]:
            held = min(held, want["seqs"] * want["dp"])
        assert row["columns"][length] == pytest.approx(round(held * want["replicas"], 2), abs=1e-9), length


def _check_refused(row, want):
    assert row["status"] == "refused"
    messages = [p["message"] for p in row["problems"]]
    assert len(messages) == len(want), messages
    for got, expected in zip(messages, want):
        assert got.startswith(expected), (got, expected)


@pytest.mark.parametrize("acc,n,expected", CASES, ids=["%s-x%d" % (a, n) for a, n, _e in CASES])
def test_every_layout_and_every_refusal(acc, n, expected):
    _report, rows = _table(acc, n)
    assert sorted(rows) == sorted(expected)
    for name, want in expected.items():
        if isinstance(want, dict):
            _check_ok(acc, n, rows[name], want)
        else:
            _check_refused(rows[name], want)


def test_anchors_from_docs_capacity():
    """docs/capacity.md's worked predictions, read by the layouts."""
    _r, rows = _table("gb300", 2)
    assert rows["multi_node_tp"]["columns"] == {32768: 156.19, 131072: 42.57, 262144: 21.61, 1048576: 5.46}
    _r, rows = _table("gb300", 4)
    dep = rows["multi_node_dep"]
    assert dep["deployments"][0]["capacity"]["kv_budget_gib"] == 91.52
    assert dep["columns"][32768] == 1742.51 and dep["columns"][131072] == 695.34
    _r, rows = _table("mi355x", 2)
    assert rows["multi_node_dep"]["columns"][131072] == 427.84
    assert rows["2 x single_node_tp"]["columns"][32768] == 2 * 93.72


def test_refusal_is_the_fit_check_with_its_numbers():
    _r, rows = _table("gb300", 4)
    assert rows["multi_node_tp_dp"]["refusal"] == [
        "node-00: kimi_k3_strategy: the weights do not fit: 1,560 GB (recipe variant default (weights_gb)) against "
        "4 x 298 GB x 0.95 = 1,132 GB usable, because each data-parallel replica (TP 4 x PP 1) holds a full copy; "
        "that is 390.0 GB of weights + 8 GiB reserve per GPU, above its 283.1 GB usable. Fix: spread one copy over "
        "at least 2 gb300 nodes with multi_node_tp / multi_node_tep / multi_node_tp_pp / multi_node_dep, or serve "
        "kimi_k3_variant nvfp4 if it fits."]
