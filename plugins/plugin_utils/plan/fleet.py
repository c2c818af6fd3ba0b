# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Several deployments in one inventory and the router in front of them (pure functions, no I/O).

An inventory holds one deployment (today's), N replicas of one strategy, or a prefill/decode (PD) cluster.
``partition`` splits the vllm_cluster hosts by ``kimi_k3_deployment``; plugin_utils.plan.topology plans each
deployment on its own (each has its own head in vllm_head), ``validate_fleet`` checks what spans deployments
(kinds that belong together, identical replicas, cluster-wide variables, addresses, the router host and its
ports), ``router_plan`` renders the vllm-router host's plan and ``fleet_summary`` / ``router_summary`` the
cluster summary keys (docs/deployments.md). Recipe knowledge (kinds, router flags) is in the recipe document.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import render as plan_render
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import tls as plan_tls
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import variables as plan_variables
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan.addresses import is_loopback, node_address
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan.checks import DIGEST_RE
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan.variables import problem

PREFIX = plan_variables.PREFIX
ROUTER_GROUP = "vllm_router"
WILDCARD = ("0.0.0.0", "::", "")


# ----------------------------------------------------------------------------- deployments


def partition(nodes, recipe, snapshots):
    """``([(deployment, nodes)], errors)``: the hosts of each deployment, deployments in inventory order.
    ``deployment`` is ``{"name", "several"}`` (several: the inventory holds more than one)."""
    decl = plan_variables.declared(PREFIX + "deployment")
    default = recipe["defaults"].get("deployment", "main")
    order, groups, errors = [], {}, []
    for node in nodes:
        raw = node["vars"].get(decl["name"])
        name, refusal = plan_variables.check_value(decl, raw, recipe, snapshots) if raw is not None \
            else (default, None)
        if refusal:
            if not any(e["message"] == refusal[0] for e in errors):  # one bad name, one problem
                errors.append(problem(node["host"], decl["name"], refusal[0], refusal[1]))
            continue
        if name not in groups:
            order.append(name)
            groups[name] = []
        groups[name].append(node)
    several = len(order) > 1
    return [({"name": name, "several": several}, groups[name]) for name in order], errors


def _free_name(taken, like):
    """A deployment name not in ``taken``, shaped like ``like`` (replica-1 -> replica-2)."""
    stem = like.rstrip("0123456789").rstrip("-") or "deployment"
    return next("%s-%d" % (stem, i) for i in range(2, len(taken) + 3) if "%s-%d" % (stem, i) not in taken)


def _in_two_groups(nodes):
    out = []
    for node in nodes:
        groups = node.get("deployment_groups") or []
        if len(groups) > 1:
            out.append(problem(node["host"], PREFIX + "deployment", "the host is in %d deployment groups (%s); Ansible "
                               "takes kimi_k3_deployment from one of them, so it joins deployment %s only."
                               % (len(groups), ", ".join(groups), node["vars"].get(PREFIX + "deployment") or "main"),
                               "list %s under one deployment group in hosts.yml (a node runs one deployment)."
                               % node["host"]))
    return out


def _name_used_twice(nodes, default):
    """Two deployment groups whose hosts carry one kimi_k3_deployment: Ansible merges them into one deployment."""
    by_name, members = {}, {}
    for node in nodes:
        groups = node.get("deployment_groups") or []
        if len(groups) == 1:
            members.setdefault(groups[0], []).append(node["host"])
            name = node["vars"].get(PREFIX + "deployment") or default
            by_name.setdefault(str(name), [])
            if groups[0] not in by_name[str(name)]:
                by_name[str(name)].append(groups[0])
    out = []
    for name, groups in by_name.items():
        if len(groups) > 1:
            out.append(problem(members[groups[1]][0], PREFIX + "deployment", "%s is the name of %d deployment groups "
                               "(%s), so their hosts (%s) would run as one deployment."
                               % (name, len(groups), ", ".join(groups), ", ".join(h for g in groups for h in members[g])),
                               "give group %s its own kimi_k3_deployment in its group_vars (e.g. %s)."
                               % (groups[1], _free_name(by_name, name))))
    return out


def _outside_groups(nodes, default):
    """A node in none of the deployment groups gets another deployment's name only by host variables."""
    groups = sorted(set(g for n in nodes for g in (n.get("deployment_groups") or [])))
    named = set(str(n["vars"].get(PREFIX + "deployment") or default) for n in nodes if n.get("deployment_groups"))
    out = []
    for node in nodes:
        name = str(node["vars"].get(PREFIX + "deployment") or default)
        if groups and not node.get("deployment_groups") and name not in named:
            out.append(problem(node["host"], PREFIX + "deployment", "the host is in no deployment group (%s), so its "
                               "kimi_k3_deployment is %s, a deployment of its own." % (", ".join(groups), name),
                               "list %s in hosts.yml under the group of its deployment (one of %s), next to its head."
                               % (node["host"], ", ".join(groups))))
    return out


def grouping_problems(nodes, recipe):
    """Mistakes in how the hosts are grouped into deployments, each naming kimi_k3_deployment.

    ``node["deployment_groups"]``: the child groups of vllm_cluster (other than vllm_head / vllm_workers) that
    hold the host, as the inventory lists them (docs/deployments.md: one group per deployment); absent when the
    caller does not know them (then nothing is checked here)."""
    default = recipe["defaults"].get("deployment", "main")
    return _in_two_groups(nodes) or _name_used_twice(nodes, default) or _outside_groups(nodes, default)


def _router_scope_problems(nodes, routers):
    """Router variables set on a vLLM node (and not merely shared with the router host, e.g. by group_vars/all).
    Without a router host nothing tells a node's own value from one every host shares: nothing is judged."""
    for decl in (d for d in plan_variables.VARIABLES if d["scope"] == plan_variables.ROUTER):
        wanted = [r["vars"].get(decl["name"]) for r in routers]
        for node in nodes if routers else []:
            value = node["vars"].get(decl["name"])
            if value is not None and value not in wanted:
                return [problem(node["host"], decl["name"], "is a router variable (scope router: read on the %s "
                                "host only); set on a vllm_cluster host it does nothing." % ROUTER_GROUP,
                                "move %s to group_vars/%s.yml (or the router host's variables)."
                                % (decl["name"], ROUTER_GROUP))]
    return []


# The vLLM engine's own arguments and environment: no plan override reaches them (upgrade and capacity steps
# override the image and max-model-len only), so one set on the router host alone was put there by hand, for
# vllm-router - which takes neither. Refused; the other vLLM-node variables there are warnings (scope_warnings).
REFUSED_ON_ROUTER = (PREFIX + "extra_args", PREFIX + "extra_env", PREFIX + "extra_env_not_secret")


def _serving_scope_problems(nodes, routers, refused):
    """vLLM-node variables set on the router host (and not merely shared with the nodes): those of
    REFUSED_ON_ROUTER when ``refused``, the others otherwise."""
    for decl in (d for d in plan_variables.VARIABLES if not d["on_router"] and d["plan"]
                 and (d["name"] in REFUSED_ON_ROUTER) == refused):
        wanted = [n["vars"].get(decl["name"]) for n in nodes]
        for router in routers:
            value = router["vars"].get(decl["name"])
            if value is not None and value not in wanted:
                where = "group_vars/vllm_cluster.yml" if decl["scope"] == plan_variables.CLUSTER else \
                    "the vllm_cluster hosts or their deployment's group_vars"
                why = " vllm-router takes no extra arguments or environment." if refused else ""
                return [problem(router["host"], decl["name"], "is a %s variable (scope %s: read on the vllm_cluster "
                                "hosts); set on the router host it does nothing.%s" % (decl["scope"], decl["scope"], why),
                                "move %s to %s, or remove it from the router host." % (decl["name"], where))]
    return []


def scope_problems(nodes, routers):
    """A router variable set on a vLLM node, or the engine's arguments or environment on the router host, where
    nothing reads them (refused); the declaration's scope says so."""
    return _router_scope_problems(nodes, routers) or _serving_scope_problems(nodes, routers, refused=True)


def scope_warnings(nodes, routers):
    """Another vLLM-node variable on the router host, where nothing reads it: warned, not refused - extra vars reach
    every host (``upgrade.yml -e kimi_k3_image=...``) and a rolling upgrade plans the deployments with different
    values while the router keeps the one given. A value both kinds share (group_vars/all) is no mistake."""
    return _serving_scope_problems(nodes, routers, refused=False)


def _mode(ctxs):
    return "pd" if any(c["role_spec"].get("pd") for c in ctxs) else ("replicas" if len(ctxs) > 1 else "single")


def _kind_problems(ctxs):
    """Kinds that belong together: several deployments are replicas or a PD cluster, never a mix."""
    names = ", ".join(c["deployment"] for c in ctxs)
    kinds = [c["kind"] for c in ctxs]
    first = ctxs[0]["where"]
    if len(ctxs) > 1 and "single" in kinds:
        single = ctxs[kinds.index("single")]
        return [problem(single["where"], PREFIX + "deployment_kind", "deployment %s is single, but the inventory "
                        "holds %d deployments (%s)." % (single["deployment"], len(ctxs), names),
                        "set kimi_k3_deployment_kind: replica (identical copies) or prefill/decode on each.")]
    pd = [c for c in ctxs if c["role_spec"].get("pd")]
    if pd and len(pd) != len(ctxs):
        return [problem(first, PREFIX + "deployment_kind", "the deployments mix prefill/decode with %s (%s)."
                        % (", ".join(sorted(set(k for k in kinds if k not in ("prefill", "decode")))), names),
                        "one inventory is either a PD cluster or a replica fleet: move the others to their own "
                        "inventory.")]
    missing = [k for k in ("prefill", "decode") if pd and k not in kinds]
    if missing:
        return [problem(first, PREFIX + "deployment_kind", "a PD cluster needs prefill and decode deployments, "
                        "this one has no %s (%s)." % (missing[0], names),
                        "add a deployment with kimi_k3_deployment_kind: %s." % missing[0])]
    return []


def _shape(ctx):
    sizes = ctx["sizes"]
    return (ctx["strategy_name"], ctx["nnodes"], ctx["gpus_per_node"], sizes["tp"], sizes["pp"], sizes["dp"])


def _replica_problems(ctxs):
    """Replicas are interchangeable: same strategy, node count and parallel sizes (recipe ``identical``)."""
    replicas = [c for c in ctxs if c["role_spec"].get("identical")]
    errors = []
    for ctx in replicas[1:]:
        if _shape(ctx) != _shape(replicas[0]):
            want, got = replicas[0], ctx
            errors.append(problem(got["where"], PREFIX + "strategy", "replica %s runs %s on %d nodes (TP %d x PP %d x "
                                  "DP %d), replica %s runs %s on %d nodes (TP %d x PP %d x DP %d)."
                                  % ((got["deployment"], got["strategy_name"], got["nnodes"]) + _shape(got)[3:]
                                     + (want["deployment"], want["strategy_name"], want["nnodes"]) + _shape(want)[3:]),
                                  "replicas are identical copies behind one router: give %s the strategy, sizes and "
                                  "node count of %s." % (got["deployment"], want["deployment"])))
    return errors


def _shown(decl, value):
    if decl["secret"]:
        return "set, value hidden" if value else "unset"
    return plan_variables.show(value)


def _cluster_value_problems(ctxs):
    """Cluster-wide variables agree between deployments (within one, the variable table checked them)."""
    errors = []
    for decl in plan_variables.VARIABLES:
        if decl["scope"] != plan_variables.CLUSTER or not decl["plan"]:
            continue
        # Secrets are compared by digest: two deployments with different keys are as wrong as one without.
        read = (lambda c: c["settings"]["secret_digests"][decl["key"]]) if decl["secret"] \
            else (lambda c: c["settings"][decl["key"]])
        for ctx in ctxs[1:]:
            if read(ctx) != read(ctxs[0]):
                errors.append(problem(ctx["where"], decl["name"], "differs between deployment %s (%s) and "
                                      "deployment %s (%s); it is cluster-wide."
                                      % (ctxs[0]["deployment"], _shown(decl, read(ctxs[0])), ctx["deployment"],
                                         _shown(decl, read(ctx))),
                                      "set %s once in group_vars/vllm_cluster%s." % (
                                          decl["name"], " (one vault value for every deployment)"
                                          if decl["secret"] else "")))
                break
    return errors


def _address_problems(ctxs):
    seen, errors = {}, []
    for ctx in ctxs:
        for node in ctx["nodes"]:
            addr = node_address(node)
            other = seen.get(addr)
            if other and other[1] != ctx["deployment"]:
                errors.append(problem(node["host"], PREFIX + "internal_address", "%s is also the address of %s "
                                      "(deployment %s); a node runs one deployment." % (addr, other[0], other[1]),
                                      "give each deployment its own nodes."))
            seen.setdefault(addr, (node["host"], ctx["deployment"]))
    return errors


def validate_fleet(built, routers, recipe, snapshots):
    """Problems spanning deployments and the router host; ``built`` = [(ctx, plans, errors, warnings)]."""
    ctxs = [b[0] for b in built]
    errors = _kind_problems(ctxs) + _replica_problems(ctxs) + _cluster_value_problems(ctxs) + _address_problems(ctxs)
    if errors:
        return errors
    return _router_problems(ctxs, routers, recipe, snapshots)


# ----------------------------------------------------------------------------- router host


def _router_presence(ctxs, routers, backend_hosts):
    if not routers:
        if len(ctxs) > 1 or _mode(ctxs) == "pd":
            names = ", ".join(c["deployment"] for c in ctxs)
            return [problem(ctxs[0]["where"], ROUTER_GROUP, "the inventory holds %d deployments (%s) but no router "
                            "host, so no single endpoint serves them." % (len(ctxs), names),
                            "add one host to group vllm_router (it runs vllm-router in front of the deployments).")]
        return []
    if len(routers) > 1:
        return [problem(", ".join(r["host"] for r in routers), ROUTER_GROUP, "holds %d hosts; the plan runs one "
                        "router." % len(routers), "keep one host in vllm_router.")]
    if routers[0]["host"] in backend_hosts:
        return [problem(routers[0]["host"], ROUTER_GROUP, "the host is also a vLLM node in vllm_cluster; each "
                        "inventory host has one plan.",
                        "add the router as its own inventory host (it may have the same ansible_host).")]
    return []


def _router_image_problems(router, settings):
    image = settings["router_image"]
    if not image:
        return [problem(router["host"], PREFIX + "router_image", "is not set.",
                        "set the vllm-router image by digest, e.g. registry/vllm-router@sha256:<64 hex>.")]
    if DIGEST_RE.match(str(image)) or (settings["allow_unpinned_image"] and "@sha256:" not in str(image)):
        return []
    if "@sha256:" in str(image):
        return [problem(router["host"], PREFIX + "router_image", "%r has a malformed digest." % (image,),
                        "use repo@sha256:<64 lowercase hex> as printed by `docker buildx imagetools inspect`.")]
    return [problem(router["host"], PREFIX + "router_image", "%r is not pinned by digest." % (image,),
                    "use repo@sha256:<digest> (a tag can move under a running cluster), or set "
                    "kimi_k3_allow_unpinned_image: true on the router host to accept the risk.")]


def _node_ports(ctx):
    """{port: what uses it} on a backend node of ``ctx``."""
    ports, launch = ctx["ports"], ctx["launch"]
    used = {ports["api_port"]: PREFIX + "api_port"}
    if launch == "mp":
        used[ports["master_port"]] = PREFIX + "master_port"
    if launch == "dp":
        used[ports["dp_rpc_port"]] = PREFIX + "dp_rpc_port"
    side = ctx["role_spec"].get("kv_side_channel_port")
    if side:
        used[side] = "VLLM_NIXL_SIDE_CHANNEL_PORT"
    return used


def _router_port_problems(router, settings, ctxs, recipe):
    defaults, host, errors = recipe["defaults"], router["host"], []
    port = settings["router_port"] or defaults["router_port"]
    prom = settings["router_prometheus_port"] or defaults["router_prometheus_port"]
    if port == prom:
        errors.append(problem(host, PREFIX + "router_prometheus_port", "port %d is also kimi_k3_router_port." % port,
                              "give the router's API and metrics distinct ports."))
    addr, name = node_address(router), settings["router_container_name"] or defaults["router_container_name"]
    for ctx in ctxs:
        for node in (n for n in ctx["nodes"] if node_address(n) == addr):
            used = _node_ports(ctx)
            for key, value in (("router_port", port), ("router_prometheus_port", prom)):
                if value in used:
                    errors.append(problem(host, PREFIX + key, "port %d on %s is also %s of %s (deployment %s, same "
                                          "node)." % (value, addr, used[value], node["host"], ctx["deployment"]),
                                          "pick a %s that no vLLM process on %s uses." % (PREFIX + key, addr)))
            if name == (ctx["settings"]["container_name"] or defaults["container_name"]):
                errors.append(problem(host, PREFIX + "router_container_name", "%s is also the vLLM container on %s "
                                      "(same node)." % (name, node["host"]), "give the router container its own name."))
    return errors


def _router_access_problems(router, ctxs):
    """vllm-router 0.1.17 checks no client key; in PD mode it calls the backends with its own key, so a
    non-loopback PD router serves without authentication."""
    s = ctxs[0]["settings"]
    bind = router["settings"].get("api_host") or "0.0.0.0"
    if _mode(ctxs) != "pd" or is_loopback(bind) or not s["secrets"]["api_key"] or s["allow_unauthenticated_api"]:
        return []
    return [problem(router["host"], PREFIX + "api_host", "the PD router would serve on %s without authentication: "
                    "vllm-router 0.1.17 checks no client key and calls the backends with kimi_k3_api_key itself."
                    % bind, "bind kimi_k3_api_host of the router to a loopback address behind an authenticating "
                    "proxy, or set kimi_k3_allow_unauthenticated_api: true if a proxy already guards the port.")]


def _router_key_problems(router, ctxs):
    """The router host's kimi_k3_api_key (its own variables: it is outside vllm_cluster) is the deployments' key,
    compared by digest: in PD mode vllm-router sends it to every backend; a different key fails every request."""
    wanted = ctxs[0]["settings"]["secret_digests"]["api_key"]
    own = plan_variables.secret_digest(router["vars"].get(PREFIX + "api_key"))
    fix = ("give the router host the deployments' kimi_k3_api_key (group_vars/vllm_router.yml, from the same vault "
           "variable as group_vars/vllm_cluster.yml).")
    if _mode(ctxs) == "pd" and wanted and own is None:
        return [problem(router["host"], PREFIX + "api_key", "is not set on the router host, but the PD router calls "
                        "the backends with it (OPENAI_API_KEY) and they check it.", fix)]
    if own is not None and own != wanted:
        return [problem(router["host"], PREFIX + "api_key", "differs between the router host (%s) and the deployments "
                        "(%s)." % ("set, value hidden", "set, value hidden" if wanted else "unset"), fix)]
    return []


def _router_problems(ctxs, routers, recipe, snapshots):
    backend_hosts = set(n["host"] for c in ctxs for n in c["nodes"])
    errors = _router_presence(ctxs, routers, backend_hosts)
    if errors or not routers:
        return errors
    router = routers[0]
    settings, errors = plan_variables.read_router_settings(routers, recipe, snapshots)
    router["router_settings"] = settings
    if errors:
        return errors
    return (_router_image_problems(router, settings) + _router_port_problems(router, settings, ctxs, recipe)
            + _router_key_problems(router, ctxs) + _router_access_problems(router, ctxs))


def _backends(built):
    """[{deployment, kind, url, host}] of every HTTP endpoint, deployments in order, nodes by rank."""
    out = []
    for ctx, plans, _errors, _warnings in built:
        for plan in sorted(plans.values(), key=lambda p: p["node_rank"]):
            if plan["serves_http"]:
                out.append({"deployment": ctx["deployment"], "kind": ctx["role_spec"].get("router", "worker"),
                            "url": plan["api_url"], "host": plan["host"]})
    return out


def _router_argv(recipe, settings, bind, backends, mode):
    spec, defaults = recipe["router"], recipe["defaults"]
    port = settings["router_port"] or defaults["router_port"]
    argv = [spec["executable"], "--host", bind, "--port", str(port),
            "--policy", settings["router_policy"] or defaults["router_policy"]]
    if mode == "pd":
        argv.append("--vllm-pd-disaggregation")
        for kind in ("prefill", "decode"):
            for b in (b for b in backends if b["kind"] == kind):
                argv += ["--" + kind, b["url"]]
        argv += list(spec.get("pd_args", []))
    else:
        argv += ["--worker-urls"] + [b["url"] for b in backends]
    prom = settings["router_prometheus_port"] or defaults["router_prometheus_port"]
    return argv + ["--prometheus-host", bind, "--prometheus-port", str(prom)]


def _url(bind, router, port):
    host = node_address(router) if bind in WILDCARD else bind
    return "http://%s:%d" % (host, port)


def _router_section(router, built, recipe):
    settings, defaults, ctxs = router["router_settings"], recipe["defaults"], [b[0] for b in built]
    bind = router["settings"].get("api_host") or "0.0.0.0"
    mode = "pd" if _mode(ctxs) == "pd" else "replicas"
    backends = _backends(built)
    port = settings["router_port"] or defaults["router_port"]
    prom = settings["router_prometheus_port"] or defaults["router_prometheus_port"]
    key = ctxs[0]["settings"]["secrets"]["api_key"] and mode == "pd"
    return {"argv": _router_argv(recipe, settings, bind, backends, mode), "env": {},
            "secret_env": [recipe["router"]["key_env"]] if key else [],
            "secret_sources": {recipe["router"]["key_env"]: PREFIX + "api_key"} if key else {},
            "port": port, "prometheus_port": prom, "metrics_url": _url(bind, router, prom) + "/metrics",
            "mode": mode, "policy": settings["router_policy"] or defaults["router_policy"], "backends": backends}


def router_plan(router, built, recipe, tls=None):
    """The vllm_router host's plan (the GUIDE's router contract); ``tls``: the cluster's (https backends)."""
    section = _router_section(router, built, recipe)
    tls_env, tls_volumes = plan_tls.router_fields(router["router_settings"], tls)
    section["env"].update(tls_env)
    if tls_env:  # the CA the router's client verifies the backends with; its health waits use the same file
        section["backend_ca_file"] = tls_env[plan_tls.ROUTER_CA_ENV]
    first = next(iter(built[0][1].values()))
    settings, defaults = router["router_settings"], recipe["defaults"]
    container = {"name": settings["router_container_name"] or defaults["router_container_name"],
                 "network_mode": "host", "restart_policy": built[0][0]["settings"]["restart_policy"] or "no",
                 "labels": {"io.gpufleet.kimi_k3.role": "router", "io.gpufleet.kimi_k3.deployment": "router"}}
    if tls_volumes:
        container["volumes"] = tls_volumes
    phase = 1 + max(p["start_phase"] for b in built for p in b[1].values())
    plan = {"host": router["host"], "role": "router", "deployment": "router", "deployment_kind": "router",
            "node_rank": 0, "nnodes": 1, "strategy": None, "accelerator": None, "vendor": None, "interconnect": None,
            "vllm_version": None, "image": str(settings["router_image"]), "internal_address": node_address(router),
            "serves_http": True, "start_phase": phase, "api_url": _url(section["argv"][2], router, section["port"]),
            "env": dict(section["env"]), "secret_env": list(section["secret_env"]), "container": container,
            "vllm_args": [], "docker_host": router["settings"]["docker_host"],
            "docker_client": plan_variables.docker_client(router["settings"]),
            "engine_client": plan_variables.engine_client(router["settings"]), "model": first["model"],
            "model_revision": first["model_revision"], "model_cache_dir": None,
            "served_model_name": first["served_model_name"], "api_host": section["argv"][2],
            "api_port": section["port"], "master_port": None, "dp_rpc_port": None, "router": section}
    if all(p.get("judge_accuracy") is False for b in built for p in b[1].values()):
        plan["judge_accuracy"] = False  # the backends serve a model without knowledge: the smoke through it judges none
    hashed = dict(plan, vllm_args=section["argv"])
    container["labels"]["io.gpufleet.kimi_k3.plan_hash"] = plan_render.plan_hash(hashed)
    return plan


# ----------------------------------------------------------------------------- cluster summary


def sizes_summary(ctx):
    """A deployment's parallel sizes under the names of the cluster section (the same values as its ``parallel``)."""
    sizes = ctx["sizes"]
    return {"tensor_parallel_size": sizes["tp"], "pipeline_parallel_size": sizes["pp"], "data_parallel_size": sizes["dp"]}


def _deployment_entry(ctx, plans):
    """One deployment of the cluster section: its hosts, head, endpoints and layout (``parallel`` as its plans)."""
    ranked = sorted(plans.values(), key=lambda p: p["node_rank"])
    entry = {"name": ctx["deployment"], "kind": ctx["kind"], "head": ranked[0]["host"],
             "hosts": [p["host"] for p in ranked], "api_url": ranked[0]["api_url"],
             "start_phase": min(p["start_phase"] for p in ranked), "strategy": ctx["strategy_name"], "nnodes": ctx["nnodes"]}
    entry.update(sizes_summary(ctx))
    entry.update(dp_lb_mode=ctx["lb_mode"], endpoints=[p["api_url"] for p in ranked if p["serves_http"]],
                 parallel=dict(ctx["parallel"]))
    return entry


def fleet_summary(built):
    """``mode``, ``deployments``, ``router`` (None) and, for several deployments, every endpoint and host."""
    ctxs = [b[0] for b in built]
    deployments = [_deployment_entry(ctx, plans) for ctx, plans, _errors, _warnings in built]
    out = {"mode": _mode(ctxs), "deployments": deployments, "router": None}
    if len(built) > 1:
        out["endpoints"] = [u for d in deployments for u in d["endpoints"]]
        out["order"] = [h for d in deployments for h in d["hosts"]]
    return out


def router_summary(router, endpoints, built):
    """``router`` ({host, api_url, metrics_url}); the router's URL first in ``endpoints``; the host last in
    ``order`` (it starts after every backend)."""
    order = [h for b in built for h in sorted(b[1], key=lambda h: b[1][h]["node_rank"])]
    return {"router": {"host": router["host"], "api_url": router["api_url"],
                       "metrics_url": router["router"]["metrics_url"]},
            "endpoints": [router["api_url"]] + list(endpoints), "order": order + [router["host"]]}
