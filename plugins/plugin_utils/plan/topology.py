# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Inventory topology -> validated per-node vLLM launch plans (pure functions, no I/O).

``build_cluster_plan(nodes, recipe, snapshots)`` takes

* ``nodes``: the inventory's cluster hosts in inventory order, each
  ``{"host": name, "head": bool, "vars": {variable: value}}`` (``vars`` holds the ``kimi_k3_*`` variables,
  ``ansible_host`` and ``inventory_hostname`` as Ansible resolves them for that host), and optionally
  ``"image_mirror"``: the host's image role variable of that name (the plan hands over the mirrored pull name);
* ``recipe``: the recipe document (``data/recipes/kimi_k3.yml``);
* ``snapshots``: ``{vllm_version: flag snapshot}`` (``data/vllm_flags/vllm-<version>.json``),

and returns ``{"ok", "errors", "warnings", "cluster", "plans"}``. Every problem is collected (not just the
first); each names the host, the variable and the fix. Recipe knowledge stays in the recipe document: this
module only knows how to layer it. The deployment is resolved by plugin_utils.plan.resolve and checked by
plugin_utils.plan.checks (a table, one check per concern), the output (``docker run`` script, summary table, JSON) in plugin_utils.plan.render.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import combos as plan_combos
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import derived as plan_derived
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import fleet as plan_fleet
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import tls as plan_tls
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.monitoring import targets as monitoring
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import handover as plan_handover
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import layouts
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import redaction
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import resolve as plan_resolve
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import transport as plan_transport
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import addresses
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import checks as plan_checks
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import extras
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import vendors
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import variables as plan_variables
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import vllm_flags
from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.common.coerce import pick_versioned, to_bool
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan.render import (  # noqa: F401 (re-exported)
    docker_run_command, format_problem, plan_hash, plan_json, summary_table)
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan.addresses import api_host, node_address, serves_http
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan.variables import PREFIX, SECRET_KEYS, problem

# Public names, including those re-exported for callers of the former single module (tests and plugins may use
# the output functions through topology).
__all__ = ["build_cluster_plan", "docker_run_command", "format_problem", "model_of", "plan_hash",
           "plan_json", "served_name", "start_phase", "summary_table", "PREFIX"]

SECRET_ENV = {"api_key": "VLLM_API_KEY", "hf_token": "HF_TOKEN"}  # where the launch hands each secret to vLLM


def _mp_layer(ctx, node, ports, defaults):
    sizes, rank = ctx["sizes"], node["rank"]
    layer = ["--tensor-parallel-size", str(sizes["tp"])]
    if sizes["pp"] > 1:
        layer += ["--pipeline-parallel-size", str(sizes["pp"])]
    if ctx["launch"] != "mp":
        return layer
    layer += ["--nnodes", str(ctx["nnodes"]), "--node-rank", str(rank), "--master-addr", node_address(ctx["head"])]
    if ports["master_port"] != defaults["master_port"]:
        layer += ["--master-port", str(ports["master_port"])]
    if rank > 0:
        layer.append("--headless")
    return layer


def _dp_layer(ctx, node, ports, defaults):
    sizes, rank, lb = ctx["sizes"], node["rank"], ctx["lb_mode"]
    layer = []
    if sizes["tp"] > 1:
        layer += ["--tensor-parallel-size", str(sizes["tp"])]
    if sizes["pp"] > 1:
        layer += ["--pipeline-parallel-size", str(sizes["pp"])]
    if lb == "hybrid":
        layer.append("--data-parallel-hybrid-lb")
    layer += ["--data-parallel-size", str(sizes["dp"])]
    if lb == "external":
        layer += ["--data-parallel-rank", str(rank)]
    else:
        layer += ["--data-parallel-size-local", str(ctx["dp_local"])]
    layer += ["--data-parallel-address", node_address(ctx["head"])]
    if ports["dp_rpc_port"] != defaults["dp_rpc_port"]:
        layer += ["--data-parallel-rpc-port", str(ports["dp_rpc_port"])]
    if rank > 0 and lb != "external":
        layer += ["--data-parallel-start-rank", str(rank * ctx["dp_local"])]
        if lb == "internal":
            layer.append("--headless")
    return layer


def _parallel_layer(ctx, node, recipe):
    """Expert, tensor, pipeline and data parallel flags of one node."""
    layer = ["--enable-expert-parallel"] if ctx["expert_parallel"] else []
    if ctx["launch"] in ("single", "mp"):
        layer += _mp_layer(ctx, node, ctx["ports"], recipe["defaults"])
    if ctx["launch"] == "dp":
        layer += _dp_layer(ctx, node, ctx["ports"], recipe["defaults"])
    return layer


def _recipe_layers(ctx, recipe):
    """Strategy, hardware override, strategy x hardware override and feature flags, each with the variable
    that chose it."""
    strategy = ctx["strategy"]
    override = recipe["hardware_overrides"].get(ctx["hw"].get("override"), {})
    layers = [(PREFIX + "strategy", list(strategy.get("args", []))),
              (PREFIX + "accelerator", list(override.get("args", []))),
              (PREFIX + "strategy",
               list(strategy.get("hardware_overrides", {}).get(ctx["accelerator"], {}).get("args", []))),
              (PREFIX + "deployment_kind", _kind_args(ctx, recipe))]
    for name, enabled in ctx["features"].items():
        if enabled:
            spec = recipe["features"][name]
            layers.append((PREFIX + "features", list(spec.get("args", []))
                           + list(spec.get("vendor_args", {}).get(ctx["vendor"], []))))
    return layers


def _kind_args(ctx, recipe):
    """The deployment kind's layer (recipe deployment_kinds; PD kinds add the shared pd_cluster flags)."""
    role = ctx["role_spec"]
    args = list(recipe.get("pd_cluster", {}).get("args", [])) if role.get("pd") else []
    args += list(role.get("args", []))
    return args + list(role.get("hardware_overrides", {}).get(ctx["accelerator"], {}).get("args", []))


def _kind_env(ctx, recipe):
    """The deployment kind's environment; NVL-only variables stay on GB200/GB300 trays (recipe pd_cluster)."""
    role, pd = ctx["role_spec"], recipe.get("pd_cluster", {})
    env = dict(pd.get("env", {})) if role.get("pd") else {}
    env.update(role.get("env", {}))
    if role.get("pd"):
        env.update(pd.get("hardware_env", {}).get(ctx["hw"].get("override"), {}))
    if role.get("kv_side_channel_port"):
        env["VLLM_NIXL_SIDE_CHANNEL_PORT"] = str(role["kv_side_channel_port"])
    if not ctx["hw"].get("gb_tray"):
        env = dict((k, v) for k, v in env.items() if k not in pd.get("nvl_only_env", []))
    return env


def node_env(env, node):
    """A node's environment: ``{internal_address}`` in a value is the node's own address (NIXL side channel);
    host-scope variables that render an environment variable set it on their node."""
    env = dict((k, v.replace("{internal_address}", node_address(node))) for k, v in env.items())
    for decl in plan_variables.ENV_VARIABLES:
        value = node["settings"].get(decl["key"])
        if decl["scope"] == plan_variables.HOST and value is not None:
            env[decl["env"]] = extras.env_str(value)
    return env


def _user_layer(ctx, node, recipe):
    """Flags from the inventory's own settings (backends, context length, names, API bind), with their variable."""
    s, ports, defaults = ctx["settings"], ctx["ports"], recipe["defaults"]
    layers = []
    if ctx["all2all_backend"]:
        source = "all2all_backend" if s["all2all_backend"] else "interconnect"
        layers.append((PREFIX + source, ["--all2all-backend", ctx["all2all_backend"]]))
    if ctx["moe_backend_override"]:
        layers.append((PREFIX + "moe_backend", ["--moe-backend", str(ctx["moe_backend_override"])]))
    if s["model_revision"]:
        # --tokenizer-revision defaults to --revision in vLLM (vllm/config/model.py ModelConfig.__post_init__);
        # --code-revision is given explicitly: it pins the code --trust-remote-code runs.
        layers.append((PREFIX + "model_revision", ["--revision", s["model_revision"],
                                                   "--code-revision", s["model_revision"]]))
    if s["max_model_len"] is not None:
        layers.append((PREFIX + "max_model_len", ["--max-model-len", str(s["max_model_len"])]))
    if s["kv_cache_dtype"] is not None:
        layers.append((PREFIX + "kv_cache_dtype", ["--kv-cache-dtype", str(s["kv_cache_dtype"])]))
    if s["served_model_name"]:
        names = s["served_model_name"]
        names = [str(n) for n in names] if isinstance(names, list) else [str(names)]
        layers.append((PREFIX + "served_model_name", ["--served-model-name"] + names))
    if serves_http(ctx, node):
        layers += plan_tls.server_layers(node)
        if api_host(node) not in ("0.0.0.0", "", None):
            layers.append((PREFIX + "api_host", ["--host", api_host(node)]))
        if ports["api_port"] != defaults["api_port"]:
            layers.append((PREFIX + "api_port", ["--port", str(ports["api_port"])]))
    return layers


def model_of(ctx, recipe):
    """The Hugging Face repository served: kimi_k3_model, else the variant's model."""
    s = ctx["settings"]
    variant = recipe["variants"][s["variant"]]  # a refused variant reads as the default (plan_variables)
    return s["model"] or variant["model"]


def _node_layers(ctx, node, recipe):
    """The argv layers of one node as (variable that chose them, tokens), in order (later layers win)."""
    layers = [(PREFIX + "model", [model_of(ctx, recipe)]), (PREFIX + "accelerator", list(recipe["base_args"])),
              (PREFIX + "strategy", _parallel_layer(ctx, node, recipe))]
    layers += _recipe_layers(ctx, recipe)
    layers += _user_layer(ctx, node, recipe)
    return layers + [(PREFIX + "extra_args", list(ctx["extra_args"]))]


def _node_args(ctx, node, recipe):
    """The argv of one node before de-duplication, and {flag: inventory variable that produced it}."""
    args, sources = [], {}
    for variable, tokens in _node_layers(ctx, node, recipe):
        args += tokens
        for option, _values in vllm_flags.split_units(tokens)[1]:
            name = vllm_flags.option_name(option)
            sources[vllm_flags.canonical_flag(name, ctx["snapshot"]) or name] = variable
    return args, sources


def _parallel(ctx, args):
    """The deployment's parallel layout from its resolution; DCP is read from the argv this module rendered (a
    feature or kimi_k3_extra_args passes --decode-context-parallel-size)."""
    values = vllm_flags.flag_value(args, "--decode-context-parallel-size", ctx["snapshot"])
    try:
        dcp = int(values[-1]) if values else 1
    except ValueError:
        dcp = 1  # not a number: the flag snapshot check refuses the argv
    return plan_resolve.parallel(ctx, dcp)


def start_phase(ctx, node):
    """0 = start first, 1 = start once phase 0 runs. Followers that dial the head start after it; hybrid-LB
    nodes (each with its own API server) start together."""
    if node["rank"] == 0 or (ctx["launch"] == "dp" and ctx["lb_mode"] in ("hybrid", "external")):
        return 0
    return 1


def _node_env(ctx, recipe):
    s = ctx["settings"]
    env = {}
    override = recipe["hardware_overrides"].get(ctx["hw"].get("override"), {})
    if ctx["nnodes"] > 1 and s["socket_ifname"]:
        for key, value in recipe.get("multi_node_env", {}).items():
            env[key] = value.replace("{socket_ifname}", str(s["socket_ifname"]))
    if ctx["nnodes"] > 1:
        env.update(recipe.get("multi_node_host_env", {}))
    env.update(override.get("env", {}))
    for item in override.get("versioned_env", []):
        name = pick_versioned(item["names"], ctx["vllm_version"])
        value = pick_versioned(item["values"], ctx["vllm_version"])
        if name is not None:
            env[name] = value
    env.update(ctx["strategy"].get("env", {}))
    env.update(_kind_env(ctx, recipe))
    if ctx["hw"].get("gb_tray") and ctx["nnodes"] > 1 and ctx["interconnect"] == "nvlink":
        env.update(recipe.get("mnnvl_env", {}))
    if "NCCL_NVLS_ENABLE" in env:
        env["NCCL_NVLS_ENABLE"] = "1" if to_bool(s["nccl_nvls_enable"]) else "0"
    if s["v2_model_runner"] is not None:
        env["VLLM_USE_V2_MODEL_RUNNER"] = "1" if to_bool(s["v2_model_runner"]) else "0"
    if s["rust_frontend"] is not None:
        env["VLLM_USE_RUST_FRONTEND"] = "1" if to_bool(s["rust_frontend"]) else "0"
    for decl in plan_variables.ENV_VARIABLES:
        if decl["scope"] != plan_variables.HOST and s.get(decl["key"]) is not None:
            env[decl["env"]] = s[decl["key"]]
    env.update(ctx["extra_env"])
    return {str(k): extras.env_str(v) for k, v in env.items()}


def _container(ctx, recipe, node):
    s = ctx["settings"]
    defaults = recipe["defaults"]
    memlock = s["memlock"] if s["memlock"] is not None else defaults["memlock"]
    cache = s["model_cache_dir"] or defaults["model_cache_dir"]
    c = {
        "name": s["container_name"] or defaults["container_name"],
        "network_mode": "host",
        "ipc_mode": "host",
        "shm_size": str(s["shm_size"] or defaults["shm_size"]),
        "ulimits": ["memlock:%s:%s" % (memlock, memlock), "stack:%d:%d" % (defaults["stack"], defaults["stack"])],
        "device_requests": [],
        "devices": [],
        "groups": [],
        "security_opts": [],
        "capabilities": ["IPC_LOCK"],
        "volumes": ["%s:%s" % (cache, defaults["container_cache_dir"])],
        "restart_policy": str(s["restart_policy"] or "no"),
        "labels": {
            "io.gpufleet.kimi_k3.role": "head" if node["rank"] == 0 else "worker",
            "io.gpufleet.kimi_k3.node_rank": str(node["rank"]),
            "io.gpufleet.kimi_k3.strategy": str(ctx["strategy_name"]),
        },
    }
    if ctx["kind"] != "single":
        c["labels"]["io.gpufleet.kimi_k3.deployment"] = str(ctx["deployment"])
    if ctx["vendor"] == "nvidia":
        c["device_requests"] = [{"driver": "nvidia", "count": -1, "capabilities": [["gpu"]]}]
        if ctx["hw"].get("gb_tray") and ctx["nnodes"] > 1 and ctx["interconnect"] == "nvlink":
            c["devices"].append("/dev/nvidia-caps-imex-channels/channel0:/dev/nvidia-caps-imex-channels/channel0:rwm")
    elif ctx["vendor"] == "amd":
        c["devices"] += ["/dev/kfd:/dev/kfd:rwm", "/dev/dri:/dev/dri:rwm"]
        c["groups"] = ["video"]
        c["security_opts"] = ["seccomp=unconfined"]
    if ctx["interconnect"] == "rdma" and ctx["nnodes"] > 1:
        c["devices"].append("/dev/infiniband:/dev/infiniband:rwm")
    c["devices"] += [d for d in plan_combos.container_devices(ctx, recipe) if d not in c["devices"]]
    return c


def _flag_fix(flag, variable, ctx):
    """What to do about a flag the target release refuses: the values it accepts, or where the flag came from."""
    version, snapshot = ctx["vllm_version"], ctx["snapshot"]
    canonical = vllm_flags.canonical_flag(flag, snapshot) if flag else None
    spec = snapshot["flags"].get(canonical) if canonical else None
    if spec and spec.get("choices"):
        return "set %s to a value vLLM %s accepts for %s: %s." % (
            variable, version, canonical, ", ".join(str(c) for c in spec["choices"]))
    if canonical == "--tool-call-parser" and snapshot.get("tool_parsers"):
        return "vLLM %s registers these tool parsers: %s." % (version, ", ".join(snapshot["tool_parsers"]))
    if canonical == "--reasoning-parser" and snapshot.get("reasoning_parsers"):
        return "vLLM %s registers these reasoning parsers: %s." % (version, ", ".join(snapshot["reasoning_parsers"]))
    if spec is None and flag:
        return "remove %s from %s, or set kimi_k3_vllm_version to a release whose parser has it." % (flag, variable)
    return "correct the value %s gives to %s (vLLM %s)." % (variable, flag or "the flag", version)


def _check_node_args(node, args, sources, ctx, recipe, errors, warnings=None):
    """Flag-snapshot and engine-rule problems of one node's argv, each naming the variable behind the flag. With
    kimi_k3_vllm_version: image an operator's own flag the rules' snapshot refuses is a warning: the image's own
    parser is its judge, in the fabric step (a development build may know flags no release has). Not a flag whose
    name says it takes a secret: its value would be written into the plan files and the container's argv."""
    snapshot = ctx["snapshot"]
    for issue in vllm_flags.check_argv(args, snapshot):
        flag = issue.split()[0] if issue.startswith("-") else None
        canonical = vllm_flags.canonical_flag(flag, snapshot) if flag else None
        variable = sources.get(canonical) or sources.get(flag) or PREFIX + "vllm_version"
        secret_named = bool(flag) and redaction.is_secret_name(recipe, flag)
        if ctx.get("version_from_image") and variable == PREFIX + "extra_args" and warnings is not None \
                and not secret_named:
            warnings.append(problem(node["host"], variable, "%s (vLLM %s's rules)." % (issue, ctx["vllm_version"]),
                                    "the fabric step parses it with the image's own parser and refuses it there if "
                                    "the image does not accept it."))
            continue
        errors.append(problem(node["host"], variable, issue + ".", _flag_fix(flag, variable, ctx)))
    _check_engine_rules(node, args, ctx, recipe, snapshot, errors)
    _check_vendor_choices(node, args, sources, ctx, recipe, errors)


VENDOR_NAMES = {"nvidia": "NVIDIA", "amd": "AMD", "cpu": "CPU"}
VENDOR_FLAGS = (("all2all_backend", "--all2all-backend"), ("moe_backend", "--moe-backend"),
                ("attention_backend", "--attention-backend"))


def _vendor_fix(ctx, recipe, setting, variable):
    if setting == "all2all_backend":
        kernels = vendors.vendor_choices(recipe, ctx["vendor"], ctx["interconnect"])
        if kernels:
            return "unset %s (the plan picks %s on %s over %s) or use one of %s." % (
                variable, kernels[0], ctx["vendor"], ctx["interconnect"], ", ".join(kernels))
    return "remove it from %s, or choose a value the %s nodes (%s) support." % (
        variable, ctx["vendor"], ctx["accelerator"])


def _check_vendor_choices(node, args, sources, ctx, recipe, errors):
    """Kernels and variables that exist for one vendor only, refused on the other vendor's nodes."""
    for setting, flag in VENDOR_FLAGS:
        for value in vllm_flags.flag_value(args, flag, ctx["snapshot"]) or []:
            vendor, source = vendors.exclusive_vendor(recipe, setting, value)
            if vendor and vendor != ctx["vendor"]:
                variable = sources.get(flag, PREFIX + "accelerator")
                errors.append(problem(node["host"], variable, "%s %s is an %s-only kernel, but the nodes are %s (%s); "
                                      "source: %s." % (flag, value, VENDOR_NAMES[vendor], VENDOR_NAMES[ctx["vendor"]],
                                                       ctx["accelerator"], source),
                                      _vendor_fix(ctx, recipe, setting, variable)))
    for name in sorted(node_env(ctx["env"], node)):
        vendor, source = vendors.exclusive_vendor(recipe, "env", name)
        if vendor and vendor != ctx["vendor"]:
            variable = _env_source(ctx, node, name)
            errors.append(problem(node["host"], variable, "%s is read by %s builds only, but the nodes are %s; "
                                  "source: %s." % (name, VENDOR_NAMES[vendor], VENDOR_NAMES[ctx["vendor"]], source),
                                  "remove %s from %s." % (name, variable)))


def _env_source(ctx, node, name):
    """The inventory variable behind a rendered environment variable (the accelerator's layer otherwise)."""
    if name in ctx["extra_env"]:
        return PREFIX + "extra_env"
    for decl in plan_variables.ENV_VARIABLES:
        settings = node["settings"] if decl["scope"] == plan_variables.HOST else ctx["settings"]
        if decl["env"] == name and settings.get(decl["key"]) is not None:
            return decl["name"]
    return PREFIX + "accelerator"


def served_name(ctx, recipe):
    """The model name clients send: the first kimi_k3_served_model_name, else the model id (vLLM's default)."""
    names = ctx["settings"]["served_model_name"]
    if isinstance(names, list):
        return str(names[0])
    return str(names) if names else model_of(ctx, recipe)


def _serving_keys(ctx, recipe, node):
    """What the other roles read from the plan instead of the raw inventory (GUIDE contracts)."""
    s = ctx["settings"]
    return {
        "docker_host": node["settings"]["docker_host"],
        "docker_client": plan_variables.docker_client(node["settings"]),
        "engine_client": plan_variables.engine_client(node["settings"]),
        "model": model_of(ctx, recipe),
        "model_revision": s["model_revision"],
        "model_cache_dir": s["model_cache_dir"] or recipe["defaults"]["model_cache_dir"],
        "served_model_name": served_name(ctx, recipe),
        "api_host": api_host(node),
        "api_port": ctx["ports"]["api_port"],
        "master_port": ctx["ports"]["master_port"],
        "dp_rpc_port": ctx["ports"]["dp_rpc_port"],
        "deployment": ctx["deployment"],
        "deployment_kind": ctx["kind"],
    }


def _node_plan(ctx, recipe, node, env, secret_env, args):
    plan = {
        "host": node["host"],
        "role": "head" if node["rank"] == 0 else "worker",
        "node_rank": node["rank"],
        "nnodes": ctx["nnodes"],
        "strategy": ctx["strategy_name"],
        "accelerator": ctx["accelerator"],
        "vendor": ctx["vendor"],
        "interconnect": ctx["interconnect"],
        "vllm_version": ctx["vllm_version"],
        "vllm_version_from_image": bool(ctx.get("version_from_image")),
        "image": str(ctx["settings"]["image"]),
        "internal_address": node_address(node),
        "serves_http": serves_http(ctx, node),
        "start_phase": start_phase(ctx, node),
        "api_url": None,
        "env": dict(env),
        "secret_env": list(secret_env),
        "container": _container(ctx, recipe, node),
        "vllm_args": args,
        "parallel": dict(ctx["parallel"]),
        "timeouts": dict(ctx.get("timeouts") or {}),
    }
    plan.update(_serving_keys(ctx, recipe, node))
    if ctx["hw"].get("judge_accuracy") is False:
        plan["judge_accuracy"] = False
    tls = plan_tls.plan_fields(ctx, node, [n for n in ctx["nodes"] if serves_http(ctx, n)])
    if tls:
        plan["tls"] = tls
        plan["container"]["volumes"] += plan_tls.volumes(tls)
    if plan["serves_http"]:
        host = api_host(node)
        host = node_address(node) if host in ("0.0.0.0", "::", "") else host
        plan["api_url"] = "%s://%s:%d" % (plan_tls.scheme(tls), host, ctx["ports"]["api_port"])
    plan["container"]["labels"]["io.gpufleet.kimi_k3.plan_hash"] = plan_hash(plan)
    return plan


def _once(problems):
    """The same cluster-wide mistake seen on every node is one problem (reported for the first node)."""
    seen, out = set(), []
    for p in problems:
        key = (p["variable"], p["message"], p["fix"])
        if key not in seen:
            seen.add(key)
            out.append(p)
    return out


def _auto_strategies(parts, recipe, snapshots, model_facts):
    """``(parts, choices, errors)``: every deployment whose kimi_k3_strategy is auto gets the strategy the layouts
    rank best on its nodes (plugin_utils.plan.layouts renders each candidate with build_cluster_plan)."""
    out, choices, errors = [], [], []
    for deployment, part in parts:
        # auto on some nodes only is left to the variable check (a deployment-scope value differing between nodes)
        if not all(n["vars"].get(PREFIX + "strategy") == layouts.AUTO for n in part):
            out.append((deployment, part))
            continue
        strategy, choice, refusal = layouts.choose_strategy(part, recipe, snapshots, model_facts, build_cluster_plan)
        if refusal:
            errors.append(refusal)
            continue
        choices.append(dict(choice, deployment=deployment["name"]))
        out.append((deployment, [dict(n, vars=dict(n["vars"], **{PREFIX + "strategy": strategy})) for n in part]))
    return out, choices, errors


def _build_deployment(nodes, recipe, snapshots, deployment=None, model_facts=None):
    """Validate and render one deployment: ``(ctx, plans, errors, warnings)``.

    ``model_facts``: ``f(model, revision, cache_dir)`` -> what the controller found in the model cache, or None."""
    ctx, errors, warnings = plan_checks.validate(nodes, recipe, snapshots, deployment)
    if not errors:
        errors.extend(plan_tls.deployment_problems(ctx, [n for n in ctx["nodes"] if serves_http(ctx, n)]))
        warnings.extend(plan_transport.warnings(ctx))
    plans = {}
    if not errors:
        ctx = ctx.with_(env=_node_env(ctx, recipe))
        secret_env = [SECRET_ENV[k] for k in SECRET_KEYS if ctx["settings"]["secrets"][k]]
        node_errors = []
        rendered = []
        for node in ctx["nodes"]:
            args, sources = _node_args(ctx, node, recipe)
            rendered.append((node, vllm_flags.dedupe_args(args, ctx["snapshot"]), sources))
        ctx = ctx.with_(parallel=_parallel(ctx, rendered[0][1]))
        rendered, derived = plan_derived.apply(ctx, recipe, rendered, model_facts, node_errors, warnings)
        ctx = ctx.with_(**derived)
        for node, args, sources in rendered:
            _check_node_args(node, args, sources, ctx, recipe, node_errors, warnings)
            plan = _node_plan(ctx, recipe, node, node_env(ctx["env"], node), secret_env, args)
            node_errors += plan_combos.check(node, args, sources, ctx, recipe, plan["container"])
            plans[node["host"]] = plan
        errors.extend(_once(node_errors))
    return ctx, plans, errors, warnings


def _refused(errors, warnings):
    return {"ok": False, "errors": errors, "warnings": warnings, "plans": {}, "cluster": {}}


def inventory_secrets(recipe, hosts):
    """The secret values of the inventory's kimi_k3_* variables (``hosts``: nodes and routers), for redaction."""
    return redaction.inventory_secrets(recipe, [h["vars"] for h in hosts], secret_names=[PREFIX + k for k in SECRET_KEYS],
                                       arg_lists=[PREFIX + "extra_args"])


def build_cluster_plan(nodes, recipe, snapshots, routers=None, model_facts=None):
    """Validate the inventory and render every node's plan (and the router's). See the module docstring.

    ``routers``: the hosts of group vllm_router, in the shape of ``nodes`` (plugin_utils.plan.fleet).
    ``model_facts``: what the controller finds in the model cache (plugin_utils.plan.model_facts), or None.
    Every problem and warning passes the redaction (plugin_utils.plan.redaction) before it is returned."""
    # first: every later step, the redaction's search for secrets included, walks the values (an alias bomb's 10^6)
    oversized = plan_variables.size_problems(list(nodes) + list(routers or []))
    if oversized:
        return _refused(oversized, [])
    plan = _cluster_plan(nodes, recipe, snapshots, routers or [], model_facts)
    secrets = inventory_secrets(recipe, list(nodes) + list(routers or []))
    return dict(plan, errors=redaction.redact_problems(plan["errors"], secrets),
                warnings=redaction.redact_problems(plan["warnings"], secrets))


def _cluster_plan(nodes, recipe, snapshots, routers, model_facts):
    if not nodes:
        what = " while vllm_router has %s: the router needs backends" % ", ".join(r["host"] for r in routers) \
            if routers else ""
        return _refused([problem("vllm_cluster", "vllm_cluster", "the group has no hosts%s." % what,
                                 "list the nodes under vllm_head and vllm_workers.")], [])
    parts, errors = plan_fleet.partition(nodes, recipe, snapshots)
    errors = errors or plan_fleet.grouping_problems(nodes, recipe) or plan_fleet.scope_problems(nodes, routers)
    if errors:
        return _refused(errors, [])
    nodes, layout_choice, refusal = layouts.choose_layout(nodes, routers, recipe, snapshots, model_facts,
                                                          build_cluster_plan)
    if refusal:
        return _refused([refusal], [])
    if layout_choice:  # the nodes now name their deployments
        parts, _errors = plan_fleet.partition(nodes, recipe, snapshots)
    parts, choices, errors = _auto_strategies(parts, recipe, snapshots, model_facts)
    if errors:
        return _refused(errors, [])
    choices = ([layout_choice] if layout_choice else []) + choices
    built = [_build_deployment(part, recipe, snapshots, deployment, model_facts) for deployment, part in parts]
    errors = _once([e for b in built for e in b[2]])
    warnings = _once([w for b in built for w in b[3]] + plan_fleet.scope_warnings(nodes, routers))
    if not errors:
        errors = plan_tls.mixed_problems([n for b in built for n in b[0]["nodes"] if serves_http(b[0], n)])
    if not errors:
        errors = plan_fleet.validate_fleet(built, routers, recipe, snapshots)
    if errors:
        return _refused(errors, warnings)
    plans = dict((host, p) for b in built for host, p in b[1].items())
    cluster = _cluster_summary(built[0][0], built[0][1])
    cluster.update(plan_fleet.fleet_summary(built))
    for entry, (ctx, _plans, _errors, _warnings) in zip(cluster["deployments"], built):
        entry.update(capacity=ctx.get("capacity"), timeouts=ctx.get("timeouts"))
    if len(built) > 1:
        cluster.update(capacity=None, timeouts=None)  # per deployment: cluster.deployments[].capacity
    if choices:
        cluster["strategy_choice"] = choices
    tls = plan_tls.cluster_fields(plans.values())
    if tls:
        cluster["tls"] = tls
    if routers:
        router = plan_fleet.router_plan(routers[0], built, recipe, tls)
        plans[router["host"]] = router
        cluster.update(plan_fleet.router_summary(router, cluster["endpoints"], built))
        warnings += plan_tls.router_warnings(router["host"], router["api_host"],
                                             addresses.is_loopback(router["api_host"]), tls)
    plan_handover.publish(plans, cluster, dict((n["host"], n.get("image_mirror")) for n in nodes + routers))
    cluster["monitoring"] = monitoring.plan_targets(plans)
    # the smoke role's verifier pass marks when the inventory sets none (recipe data, not role defaults)
    cluster["smoke_pass_marks"] = dict(recipe.get("smoke_pass_marks") or {})
    return {"ok": True, "errors": [], "warnings": warnings, "plans": plans, "cluster": cluster}


def _check_engine_rules(node, args, ctx, recipe, snapshot, errors):
    """Rules vLLM enforces after parsing (engine config) or that the recipe documents as limits."""
    host = node["host"]
    moe = vllm_flags.flag_value(args, "--moe-backend", snapshot)
    moe = moe[-1] if moe else None
    limits = recipe.get("moe_backends", {}).get(moe or "", {})
    if vendors.exclusive_vendor(recipe, "moe_backend", moe)[0] not in (None, ctx["vendor"]):
        limits = {}  # another vendor's kernel: _check_vendor_choices names that one problem
    if limits.get("requires_expert_parallel") and not ctx["expert_parallel"]:
        errors.append(problem(host, PREFIX + "moe_backend", "--moe-backend %s requires expert parallelism "
                              "(Kimi K3 MegaMoE requires expert parallel)." % moe,
                              "use multi_node_dep / multi_node_tep, or another --moe-backend."))
    if ctx["interconnect"] in limits.get("forbidden_interconnects", []) and ctx["nnodes"] > 1:
        errors.append(problem(host, PREFIX + "moe_backend", "--moe-backend %s does not work over cross-node %s."
                              % (moe, ctx["interconnect"]),
                              "keep the MoE backend on auto over RDMA (kimi_k3_moe_backend: auto)."))
    if vllm_flags.flag_value(args, "--enable-auto-tool-choice", snapshot) is not None and \
            vllm_flags.flag_value(args, "--tool-call-parser", snapshot) is None:
        errors.append(problem(host, PREFIX + "extra_args", "--enable-auto-tool-choice requires --tool-call-parser.",
                              "keep the tool_calling feature on (it adds both) or add --tool-call-parser kimi_k3."))


def _cluster_summary(ctx, plans):
    endpoints = [p["api_url"] for p in sorted(plans.values(), key=lambda p: p["node_rank"]) if p["serves_http"]]
    return {
        "strategy": ctx["strategy_name"],
        "accelerator": ctx["accelerator"],
        "vendor": ctx["vendor"],
        "nnodes": ctx["nnodes"],
        "gpus_per_node": ctx["gpus_per_node"],
        "total_gpus": ctx["total_gpus"],
        **plan_fleet.sizes_summary(ctx),
        "dp_lb_mode": ctx["lb_mode"],
        "interconnect": ctx["interconnect"],
        "all2all_backend": ctx["all2all_backend"],
        "vllm_version": ctx["vllm_version"],
        "vllm_version_from_image": bool(ctx.get("version_from_image")),
        "image": str(ctx["settings"]["image"]),
        "head": ctx["head"]["host"],
        "head_address": node_address(ctx["head"]),
        "endpoints": endpoints,
        "api_access": ctx["api_access"],
        "order": [n["host"] for n in ctx["nodes"]],
        "capacity": ctx.get("capacity"),
        "timeouts": ctx.get("timeouts"),
    }
