# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What one deployment resolves to before anything is checked or rendered (pure; reports no problems).

``resolve(settings, facts, recipe)`` derives every value the checks (plugin_utils.plan.checks) and the renderer
(plugin_utils.plan.topology) read: the node order, the hardware, the vLLM release, the strategy and its sizes, the
load balancing, the interconnect's kernels, the features, the ports, the API's protection and the user's extra
arguments and environment. A value that is wrong still resolves (to what the plan would use); the checks say
what is wrong, and nothing is rendered while they find a problem.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import dataclasses

from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.image import reference as image_ref
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import addresses
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import extras
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import ranks
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import variables as plan_variables
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import vendors
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import vllm_flags
from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.common.coerce import to_bool, version_key

PORT_KEYS = ("api_port", "master_port", "dp_rpc_port")


@dataclasses.dataclass(frozen=True)
class Deployment:
    """One resolved deployment. Read-only: the renderer reads it as ``d["key"]`` (its modules predate the type),
    and what rendering derives (``env``, ``capacity``, ``timeouts``) comes as a new Deployment (``with_``)."""
    settings: dict
    invalid: frozenset
    given_nodes: list  # inventory order, as the variables were read
    nodes: list  # head first, each with "rank"
    nnodes: int
    head: object
    where: str
    recipe: dict
    snapshots: dict
    deployment: str
    several: bool  # the inventory holds several deployments
    kind: str
    role_spec: dict
    hw: dict
    accelerator: object
    vendor: object
    gpus_per_node: object
    total_gpus: int
    vllm_version: str
    snapshot: object
    strategy_name: object
    strategy: dict
    launch: object
    expert_parallel: bool
    sizes: dict
    dp_local: object
    lb_mode: object
    interconnect: object
    all2all_backend: object
    moe_backend_override: object
    features: dict
    ports: dict
    api_access: str
    extra_args: list
    extra_env: dict
    env: object = None
    capacity: object = None
    timeouts: object = None
    parallel: object = None  # the published layout (parallel()), once the argv is rendered
    version_from_image: bool = False  # kimi_k3_vllm_version: image (vllm_version is then the rules' release)
    image_build: object = None  # the recipe's development_builds entry for the pinned digest (image only)

    def __getitem__(self, key):
        try:
            return getattr(self, key)
        except AttributeError:
            raise KeyError(key)

    def __contains__(self, key):
        return hasattr(self, key)

    def get(self, key, default=None):
        return getattr(self, key, default)

    def with_(self, **changes):
        return dataclasses.replace(self, **changes)


def parallel(d, dcp):
    """What every node plan publishes as ``parallel``: TP, PP, DP, DP ranks per node (None: no data-parallel launch,
    one engine spans the nodes), the expert-parallel size (TP x DP, 1 without EP) and the decode context parallel
    size ``dcp`` (the argv's: a feature or kimi_k3_extra_args sets it)."""
    sizes = d.sizes
    return {"tp": sizes["tp"], "pp": sizes["pp"], "dp": sizes["dp"], "dp_local": d.dp_local if d.launch == "dp" else None,
            "ep": sizes["tp"] * sizes["dp"] if d.expert_parallel else 1, "dcp": dcp}


def eval_size(expr, gpus_per_node, nnodes):
    """Evaluate a recipe size expression such as ``G*N``, ``G``, ``N`` or ``1``."""
    value = 1
    for factor in str(expr).split("*"):
        factor = factor.strip()
        if factor == "G":
            value *= gpus_per_node
        elif factor == "N":
            value *= nnodes
        else:
            value *= int(factor)
    return value


def deployment_kind(settings, recipe, several):
    """(kind, its recipe layer): kimi_k3_deployment_kind, else single (one deployment) or replica (several)."""
    kind = settings["deployment_kind"] or ("replica" if several else "single")
    return kind, recipe.get("deployment_kinds", {}).get(kind, {})


def _hardware(settings, invalid, recipe, nnodes):
    name = settings["accelerator"]
    hw = recipe["hardware"].get(str(name).lower()) if name else None
    gpn = settings["gpus_per_node"]
    if gpn is None and "gpus_per_node" not in invalid:
        gpn = (hw or {}).get("gpus_per_node")
    return {"hw": hw or {}, "accelerator": str(name).lower() if hw else None, "vendor": (hw or {}).get("vendor"),
            "gpus_per_node": gpn, "total_gpus": (gpn or 0) * nnodes}


def refused_choices(settings, snapshot):
    """``[(declaration, value, choices)]``: values of a snapshot-choice variable the target vLLM does not accept."""
    out = []
    for decl in plan_variables.VARIABLES if snapshot is not None else ():
        value = settings.get(decl["key"])
        if decl["choices"] != "snapshot" or value is None:
            continue
        choices = (snapshot["flags"].get(decl["flag"]) or {}).get("choices")
        if choices and not vllm_flags.choice_ok(str(value), choices, decl["flag"]):
            out.append((decl, value, choices))
    return out


def _strategy(settings, recipe, role):
    name = settings["strategy"]
    if name is None and role.get("strategies"):
        name = role["strategies"][0]  # the deployment kind's default (decode runs DEP)
    strategy = (recipe["strategies"].get(name) if name else None) or {}
    return {"strategy_name": name, "strategy": strategy, "launch": strategy.get("launch"),
            "expert_parallel": bool(strategy.get("expert_parallel") or role.get("expert_parallel"))}


def _sizes(settings, strategy, gpn, nnodes):
    sizes = {}
    for key, var in (("tp", "tensor_parallel_size"), ("pp", "pipeline_parallel_size"), ("dp", "data_parallel_size")):
        if settings[var] is not None:
            sizes[key] = settings[var]
        elif strategy and gpn:
            sizes[key] = eval_size(strategy["sizes"][key], gpn, nnodes)
        else:
            sizes[key] = 1
    return sizes


def _lb_mode(settings, strategy, launch):
    if not strategy or launch != "dp":
        return None
    return settings["dp_lb_mode"] or strategy.get("default_lb_mode")


def _all2all(settings, recipe, facts):
    """The all2all kernel: kimi_k3_all2all_backend, else the vendor's over the interconnect when EP crosses nodes."""
    vendor, interconnect, expert_parallel, sizes, nnodes = facts
    if settings["all2all_backend"] is None and expert_parallel and nnodes > 1 and interconnect and \
            vendors.uses_all2all(sizes, settings["moe_backend"]):
        return vendors.all2all_kernel(recipe, vendor, interconnect)
    return settings["all2all_backend"]


def features(recipe, given):
    """The recipe's features with their defaults, turned on or off by kimi_k3_features (a refused entry keeps its
    default: plugin_utils.plan.checks names it)."""
    wanted = {name: spec.get("default", False) for name, spec in recipe["features"].items()}
    for name, value in (given or {}).items():
        try:
            if name in wanted:
                wanted[name] = to_bool(value)
        except (TypeError, ValueError):
            pass
    return wanted


def _ports(settings, role, defaults):
    return dict((key, settings[key] if settings[key] is not None else role.get(key, defaults[key])) for key in PORT_KEYS)


def api_access(secrets, nodes, layout):
    """How the API is protected: 'api_key', 'loopback' (no key, loopback only) or 'unauthenticated'."""
    if secrets["api_key"]:
        return "api_key"
    exposed = [n for n in nodes if addresses.serves_http(layout, n) and not addresses.is_loopback(addresses.api_host(n))]
    return "unauthenticated" if exposed else "loopback"


def clean_env(recipe, settings):
    """kimi_k3_extra_env as strings, without the entries plugin_utils.plan.extras refuses."""
    not_secret = settings["extra_env_not_secret"] or []
    return dict((name, extras.env_str(value)) for name, value in (settings["extra_env"] or {}).items()
                if not extras.env_problem(recipe, name, value, not_secret))


def _addressed(node):
    """The node with ansible_host dropped when it stands in for kimi_k3_internal_address but is no address."""
    return dict(node, vars=dict(node["vars"], ansible_host=None)) if addresses.fallback_refusal(node) else node


def _placement(facts):
    """The ordered nodes, the head and where cluster-wide problems are reported."""
    ordered = ranks.node_order([_addressed(n) for n in facts["nodes"]], facts["invalid"])[0]
    head = ordered[0] if ordered else None
    return {"given_nodes": list(facts["nodes"]), "nodes": ordered, "nnodes": len(ordered), "head": head,
            "where": head["host"] if head else "vllm_cluster"}


# kimi_k3_vllm_version's value for a development build: the image's own parser judges the argv (fabric step).
FROM_IMAGE = "image"


def known_build(recipe, image):
    """The recipe's development_builds.builds entry whose ``digest`` the image reference pins, or None."""
    digest = image_ref.image_reference_parse(image, allow_unpinned=True)["digest"] if image else None
    for entry in (recipe.get("development_builds") or {}).get("builds") or []:
        if digest and entry.get("digest") == digest:
            return entry
    return None


def image_rules_release(recipe, hw, image=None):
    """The release whose rules the plan renders by for ``image``: the rules of the recipe's development_builds entry
    for the pinned digest when it has one, else development_builds.plan_release; raised to the accelerator's
    min_vllm_version (a CPU node has no build older than that)."""
    build = known_build(recipe, image)
    release = str(build["rules"] if build else (recipe.get("development_builds") or {}).get("plan_release")
                  or recipe["defaults"]["vllm_version"])
    floor = (hw or {}).get("min_vllm_version")
    return max(release, str(floor), key=version_key) if floor else release


def _version(settings, recipe, snapshots, hw=None):
    version = str(settings["vllm_version"] or recipe["defaults"]["vllm_version"])
    from_image = version == FROM_IMAGE
    build = known_build(recipe, settings.get("image")) if from_image else None
    if from_image:
        version = image_rules_release(recipe, hw, settings.get("image"))
    return {"vllm_version": version, "snapshot": snapshots.get(version), "version_from_image": from_image,
            "image_build": build}


def resolve(settings, facts, recipe):
    """The Deployment of ``settings`` (plugin_utils.plan.variables.read_settings: the deployment-scope values)
    and ``facts``: ``{"nodes"`` (with their host-scope "settings", inventory order), ``"invalid"`` (the keys
    the variable table refused), ``"snapshots"`` ({vllm_version: flag snapshot}), ``"deployment"``
    (``{"name", "several"}``)``}``."""
    several = facts["deployment"]["several"]
    kind, role = deployment_kind(settings, recipe, several)
    strategy = _strategy(settings, recipe, role)
    settings = dict(settings, strategy=strategy["strategy_name"])  # a copy: the caller's settings stay as read
    d = dict(strategy, **_placement(facts))
    d.update(settings=settings, recipe=recipe, snapshots=facts["snapshots"],
             deployment=facts["deployment"]["name"], several=several, kind=kind, role_spec=role)
    d.update(_hardware(settings, facts["invalid"], recipe, d["nnodes"]))
    d.update(_version(settings, recipe, facts["snapshots"], d.get("hw")))
    refused = set(decl["key"] for decl, _value, _choices in refused_choices(settings, d["snapshot"]))
    d["invalid"] = frozenset(set(facts["invalid"]) | refused)
    d["sizes"] = _sizes(settings, d["strategy"], d["gpus_per_node"], d["nnodes"])
    launch, nnodes = d["launch"], d["nnodes"]
    d["dp_local"] = d["sizes"]["dp"] // nnodes if launch == "dp" and nnodes and d["sizes"]["dp"] % nnodes == 0 else None
    d["lb_mode"] = _lb_mode(settings, d["strategy"], launch)
    d["interconnect"] = settings["interconnect"]
    d["all2all_backend"] = _all2all(settings, recipe, (d["vendor"], d["interconnect"], d["expert_parallel"],
                                                       d["sizes"], nnodes))
    d.update(moe_backend_override=settings["moe_backend"], features=features(recipe, settings["features"]),
             ports=_ports(settings, role, recipe["defaults"]), extra_args=list(settings["extra_args"] or []),
             extra_env=clean_env(recipe, settings))
    d["api_access"] = api_access(settings["secrets"], d["nodes"], d)
    return Deployment(**d)
