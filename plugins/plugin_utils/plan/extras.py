# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What kimi_k3_extra_args and kimi_k3_extra_env may carry (pure functions).

Each function returns ``(message, fix)`` for an item that must not be passed, else None: plugin_utils.plan.checks
reports them, plugin_utils.plan.resolve keeps only the environment entries none refuses.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import redaction
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import variables as plan_variables
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import vllm_flags


def env_str(value):
    if isinstance(value, bool):
        return "1" if value else "0"
    return str(value)


def reserved_fix(recipe, canonical, name):
    """The fix for a flag the plan derives, or None when ``kimi_k3_extra_args`` may pass it."""
    reserved = recipe.get("reserved_args", {})
    for flag in (canonical, name):
        if flag in reserved:
            return reserved[flag]
    for prefix, fix in recipe.get("reserved_arg_prefixes", {}).items():
        if str(canonical).startswith(prefix) or name.startswith(prefix):
            return fix
    return None


def refused_arg(recipe, canonical, name):
    """``(why, fix)`` for a flag kimi_k3_extra_args never carries (a secret, --config), else None."""
    refused = recipe.get("refused_args", {})
    for flag in (canonical, name):
        if flag in refused:
            return refused[flag]["why"], refused[flag]["fix"]
    return None


def arg_problem(recipe, snap, option):
    """``(message, fix)`` for one option of kimi_k3_extra_args that must not be there, else None."""
    name = option.split("=", 1)[0]
    spelled = "--" + name[2:].replace("_", "-") if name.startswith("--") else name
    canonical = (vllm_flags.canonical_flag(name, snap) if snap else None) or spelled
    refused = refused_arg(recipe, canonical, spelled)
    if refused:
        return "%s %s." % (name, refused[0]), refused[1] + "."
    fix = reserved_fix(recipe, canonical, name)
    if fix:
        return "%s must not be passed by hand: the plan derives it." % name, fix + "."
    return None


# The fix of a credential found inside a value: the plan writes the value where anyone with the plan, the node or
# docker inspect reads it.
CREDENTIAL_FIX = ("remove the credential from the value: give it to the server outside the plan (docs/secrets.md, "
                  "\"Credentials the plan refuses\"), from a vault")


def item_problem(recipe, snap, index, token):
    """``(message, fix)`` for one item of kimi_k3_extra_args as a string, else None. The item is named by its
    position, never quoted: it may hold a secret."""
    where = "item %d" % (index + 1)
    if re.search(r"[\x00-\x1f\x7f]", token):
        return "%s contains a control character." % where, "remove the newline/tab from the item."
    name = token.split("=", 1)[0]
    if vllm_flags.is_flag(token) and re.search(r"\s", name):
        option = name.split()[0]
        return arg_problem(recipe, snap, option) or (
            "%s holds the option %s and its value in one string." % (where, option),
            "write %s and its value as two items of kimi_k3_extra_args." % option)
    if vllm_flags.is_flag(token) and any(redaction.is_secret_name(recipe, k) for k in name.split(".")[1:]):
        return ("%s sets %s, a key that names a secret: it would be in the launch script, the plan file and the "
                "container's argv." % (where, name), CREDENTIAL_FIX + ".")
    value = token.split("=", 1)[1] if vllm_flags.is_flag(token) and "=" in token else token
    why = redaction.value_secret_problem(recipe, value)
    if why:
        return ("%s %s: it would be in the launch script, the plan file and the container's argv." % (where, why),
                CREDENTIAL_FIX + ".")
    return None


def env_entry_problem(name, value):
    """``(message, fix)`` for an entry that is no NAME: scalar pair, else None."""
    if not isinstance(name, str) or not re.match(r"^[A-Za-z_][A-Za-z0-9_]*\Z", name):
        return ("key %s is not an environment variable name." % plan_variables.show(name),
                "use NAME: value with NAME matching [A-Za-z_][A-Za-z0-9_]*.")
    if not plan_variables.is_scalar(value) and not isinstance(value, bool):
        return ("%s must be a string or number, got %s." % (name, plan_variables.kind(value)),
                "write %s: \"<value>\" (a list or mapping cannot be an environment value)." % name)
    if re.search(r"[\x00-\x1f\x7f]", str(value)):
        return ("%s contains a control character (it would break the env file)." % name,
                "put the value on one line.")
    return None


def is_secret_env(recipe, name):
    """Whether an environment name looks like a secret's (recipe ``secret_env``; plugin_utils.plan.redaction)."""
    return redaction.is_secret_name(recipe, name)


def env_name_problem(recipe, name, not_secret=()):
    """``(message, fix)`` for a name kimi_k3_extra_env must not set (derived, secret, removed), else None.
    ``not_secret``: names the operator declared non-secret (kimi_k3_extra_env_not_secret)."""
    upper = name.upper()
    if upper in recipe.get("reserved_env", {}):
        return ("%s is derived by the plan (per node or from a variable); kimi_k3_extra_env would override it."
                % name, recipe["reserved_env"][upper] + " instead.")
    variable = recipe.get("secret_env", {}).get("variables", {}).get(upper)
    if is_secret_env(recipe, name) and (variable or name not in not_secret):
        if variable:
            return ("%s is a secret and would land in the plan file and the container's configuration." % name,
                    "remove it and set %s from a vault; the launch passes it through a mode-0400 file." % variable)
        return ("%s looks like a secret (data/recipes/kimi_k3.yml secret_env) and would land in the plan file and "
                "the container's configuration." % name,
                "remove it: kimi_k3_extra_env is not secret. If %s holds no secret, list it in "
                "kimi_k3_extra_env_not_secret (docs/secrets.md)." % name)
    if name in recipe.get("removed_env", {}):
        return "%s no longer exists in vLLM." % name, recipe["removed_env"][name] + "."
    return None


def env_value_problem(recipe, name, value, not_secret=()):
    """``(message, fix)`` for a value that carries a credential by its structure (URL userinfo, JSON key)."""
    why = None if name in not_secret else redaction.value_secret_problem(recipe, value)
    if why is None:
        return None
    return ("%s %s and would land in the plan file and the container's configuration." % (name, why),
            "%s. If %s holds no secret, list it in kimi_k3_extra_env_not_secret (docs/secrets.md)." % (CREDENTIAL_FIX, name))


def env_problem(recipe, name, value, not_secret=()):
    """``(message, fix)`` for one kimi_k3_extra_env entry that must not be set, else None."""
    return env_entry_problem(name, value) or env_name_problem(recipe, name, not_secret) or \
        env_value_problem(recipe, name, value, not_secret)
