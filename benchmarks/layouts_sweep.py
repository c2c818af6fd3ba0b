#!/usr/bin/env python3
"""Benchmark: prove the layouts table by measuring (issue #40, item 4) - every layout a sweep can launch, one after
another: launched, its KV capacity and goodput measured at the target, torn down; predicted against measured.

Steps: playbooks/layouts.yml with the target (the table, ranked); playbooks/plan.yml of --auto-inventory with
kimi_k3_strategy: auto (the layout auto picks: the deployments its plan renders); then for each of the top
rows (a single deployment over the nodes by its strategy; a fleet or a PD split by the --layout-inventory that
lays the nodes out so, with a router host; the others listed as skipped with the reason): launch.yml with the
target's max-model-len, capacity.yml at that length (no relaunch: the running value matches; a concurrency sweep
up to the target concurrency, through the router for a fleet), teardown.yml.
Writes layouts-sweep.json / .md / .png to --out (plugins/plugin_utils/plan/layouts_sweep.py judges).

Needs the rehearsal cluster with the real engine: `sim/simctl up --cluster cpu` (two nodes: TP across both
renders, PP is withdrawn on the CPU build) and, for the two-replica fleet, `sim/simctl up --cluster cpufleet` (its
router node) with `--layout-inventory inventories/sim-cpu-auto --auto-inventory inventories/sim-cpu-auto` (the
pair with a router host and the layout left to auto: the fleet is launched as auto lays it out).

Usage: .venv/bin/python benchmarks/layouts_sweep.py [-i inventories/sim-cpu] [--max-model-len 4096]
       [--concurrency 4] [--top 3] [--layout-inventory inventories/sim-cpu-auto]
       [--auto-inventory inventories/sim-cpu-auto] [--out build/layouts-sweep]
"""
import argparse
import json
import os
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
sys.path.insert(0, os.path.join(REPO, "build", "collections"))
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import layouts_sweep  # noqa: E402

from tests.helpers.runner import failed_tasks, run_playbook  # noqa: E402

PLAN_TASK = "Validate the inventory and render every node's launch plan"


def _run(playbook, inventory, extra, timeout=3600):
    t0 = time.monotonic()
    r = run_playbook(playbook, inventory, extravars=extra, timeout=timeout)
    took = round(time.monotonic() - t0, 1)
    print("  %s: %s in %.1f s" % (playbook, r.status, took), flush=True)
    return r, took


def _planned(inventory, extra):
    """The plan's cluster section for ``inventory`` (plan.yml contacts no host)."""
    r = _run("plan.yml", inventory, extra)[0]
    if r.status != "successful":
        sys.exit("plan.yml -i %s failed: %s" % (inventory, failed_tasks(r)))
    for ev in r.events:
        data = ev.get("event_data", {})
        if ev.get("event") == "runner_on_ok" and data.get("task") == PLAN_TASK:
            return (data.get("res") or {}).get("cluster") or {}
    sys.exit("plan.yml -i %s gave no plan result" % inventory)


def _auto_pick(inventory, base):
    """The layout the plan renders for kimi_k3_strategy: auto: the table's name of the deployments it lays out."""
    cluster = _planned(inventory, dict(base, kimi_k3_strategy="auto"))
    if not cluster.get("strategy_choice"):
        sys.exit("the plan's result named no strategy_choice for kimi_k3_strategy: auto")
    return layouts_sweep.layout_of(cluster.get("deployments"))


def _laid_out(inventories, base):
    """``{layout: inventory}``: the layout each --layout-inventory's plan renders (a fleet, a PD split)."""
    out = {}
    for inventory in inventories:
        layout = layouts_sweep.layout_of(_planned(inventory, base).get("deployments"))
        if layout is None:
            sys.exit("%s lays the nodes out in no layout of the table" % inventory)
        out[layout] = inventory
    return out


def _png(report, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    done = [r for r in report["results"] if r.get("measured")]
    names = [r["layout"] for r in done]
    x = range(len(done))
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(9, 4), dpi=100)
    ax1.bar([i - 0.2 for i in x], [r["predicted_concurrency"] or 0 for r in done], 0.4, label="predicted")
    ax1.bar([i + 0.2 for i in x], [r["engine_concurrency"] or 0 for r in done], 0.4, label="engine")
    ax1.set_title("concurrency at max-model-len %d" % report["max_model_len"])
    ax2.bar(list(x), [r["goodput_tok_s"] for r in done], 0.5, color="tab:green")
    ax2.set_title("goodput (output tok/s within the SLO)")
    for ax in (ax1, ax2):
        ax.set_xticks(list(x))
        ax.set_xticklabels(names, rotation=15, fontsize=8)
        ax.grid(True, axis="y", alpha=0.3)
    ax1.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, format="png", metadata={"Software": None})
    plt.close(fig)


def _measure(row, args, base, out, inventory):
    extra = dict(base, **layouts_sweep.extra_vars(row, args.max_model_len))
    art = os.path.join(out, "runs", row["layout"].replace(" ", "_"))
    extra["kimi_k3_artifacts_dir"] = art
    print("%s:" % row["layout"], flush=True)
    launched, launch_s = _run("launch.yml", inventory, extra)
    timings = {"launch_s": launch_s}
    if launched.status != "successful":
        result = {"layout": row["layout"], "rank": row.get("rank"), "measured": False,
                  "error": "launch failed: %s" % failed_tasks(launched)[:2]}
    else:
        sweep = dict(extra, capacity_max_model_lens=[args.max_model_len], capacity_max_concurrency=args.concurrency,
                     capacity_requests_per_level=args.requests_per_level, capacity_output_tokens=args.output_tokens,
                     capacity_prompt_fraction=args.prompt_fraction, capacity_ttft_limit_s=args.ttft_limit_s,
                     capacity_restore=False)
        measured, timings["capacity_s"] = _run("capacity.yml", inventory, sweep)
        path = os.path.join(art, "capacity", "capacity.json")
        if measured.status == "successful" and os.path.exists(path):
            with open(path) as handle:
                result = layouts_sweep.measured(row, json.load(handle), _slo(args))
        else:
            result = {"layout": row["layout"], "rank": row.get("rank"), "measured": False,
                      "error": "capacity failed: %s" % failed_tasks(measured)[:2]}
    _down, timings["teardown_s"] = _run("teardown.yml", inventory, extra)
    result["timings"] = timings
    return result


def _slo(args):
    return {"ttft_s": args.slo_ttft_s, "tpot_s": args.slo_tpot_s}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-i", "--inventory", default="inventories/sim-cpu")
    ap.add_argument("--max-model-len", type=int, default=4096)
    ap.add_argument("--concurrency", type=int, default=4, help="the target's concurrency (the load's top step)")
    ap.add_argument("--objective", choices=["throughput", "latency"], default="throughput")
    ap.add_argument("--top", type=int, default=3)
    ap.add_argument("--layout-inventory", action="append", default=[],
                    help="an inventory over the same nodes laid out as a fleet or a PD split, with a router host "
                         "(repeatable; e.g. inventories/sim-cpu-fleet, or sim-cpu-auto: laid out by auto)")
    ap.add_argument("--auto-inventory", help="the inventory whose kimi_k3_strategy: auto is judged (default: -i; "
                    "with a router host and no deployment named, auto may lay the nodes out as a fleet)")
    ap.add_argument("--slo-ttft-s", type=float, default=10.0)
    ap.add_argument("--slo-tpot-s", type=float, default=0.5)
    ap.add_argument("--requests-per-level", type=int, default=2)
    ap.add_argument("--output-tokens", type=int, default=64)
    ap.add_argument("--prompt-fraction", type=float, default=0.25)
    ap.add_argument("--ttft-limit-s", type=float, default=120.0)
    ap.add_argument("--out", default=os.path.join(REPO, "build", "layouts-sweep"))
    args = ap.parse_args(argv)
    out = os.path.abspath(args.out)
    os.makedirs(out, exist_ok=True)
    target = {"max_model_len": args.max_model_len, "concurrency": args.concurrency, "objective": args.objective}
    base = {"kimi_k3_target": target, "kimi_k3_artifacts_dir": out}
    listed = _run("layouts.yml", args.inventory, base, timeout=600)[0]
    if listed.status != "successful":
        sys.exit("layouts.yml failed: %s" % failed_tasks(listed))
    with open(os.path.join(out, "layouts.json")) as handle:
        table = json.load(handle)
    auto = _auto_pick(args.auto_inventory or args.inventory, base)
    laid_out = _laid_out(args.layout_inventory, base)
    runs, skipped = layouts_sweep.choose(table, args.top, laid_out)
    for inventory in [args.inventory] + sorted(set(laid_out.values())):
        _run("teardown.yml", inventory, base)  # each layout starts from nothing, the first one too
    results = [_measure(row, args, base, out, laid_out.get(row["layout"], args.inventory)) for row in runs]
    report = {"max_model_len": args.max_model_len, "target": target, "slo": _slo(args), "auto_layout": auto,
              "results": results, "skipped": skipped, "verdict": layouts_sweep.verdict(results, auto)}
    with open(os.path.join(out, "layouts-sweep.json"), "w") as handle:
        json.dump(report, handle, indent=2, sort_keys=True)
    with open(os.path.join(out, "layouts-sweep.md"), "w") as handle:
        handle.write(layouts_sweep.markdown(report))
    _png(report, os.path.join(out, "layouts-sweep.png"))
    print(layouts_sweep.markdown(report))
    return 0 if report["verdict"]["predictions_hold"] and report["verdict"]["auto_holds"] else 1


if __name__ == "__main__":
    sys.exit(main())
