# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""How secret values reach the vLLM container without entering its configuration (pure functions).

Each secret the plan names (``secret_env``) is a file ``<node dir>/<NAME>`` (mode 0400) mounted read-only at
``/run/secrets/kimi-k3``. The container's configuration (``docker inspect``) then holds names and paths only:

- ``HF_TOKEN``: huggingface_hub reads the token from the file named by ``HF_TOKEN_PATH``;
- ``VLLM_API_KEY``: vLLM reads the key only from ``--api-key`` (argv, shown by ``ps``) or the ``VLLM_API_KEY``
  environment variable (``envs.VLLM_API_KEY``); a small ``/bin/sh`` entrypoint wrapper exports it from
  ``VLLM_API_KEY_FILE`` and then ``exec``\\ s ``vllm serve`` (the value lives only in the process environment).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

MOUNT = "/run/secrets/kimi-k3"
# Variables the software reads from a file natively: secret name -> variable naming the file.
NATIVE_FILE_VARS = {"HF_TOKEN": "HF_TOKEN_PATH"}
WRAPPER_NAME = "kimi-k3-secrets"
WRAPPER = ('for v in $KIMI_K3_SECRET_FILES; do f=$(printenv "${v}_FILE") && val=$(cat "$f") || '
           '{ echo "kimi-k3-secrets: cannot read ${v}_FILE" >&2; exit 1; }; export "$v=$val"; done; '
           'unset KIMI_K3_SECRET_FILES; exec "$@"')


def secret_names(plan):
    return sorted(set(plan.get("secret_env") or []))


def container_secrets(plan, node_dir, entrypoint):
    """``{env, volumes, entrypoint, files}`` for a node plan.

    ``env``: variables naming secret files (added to the plan's env); ``volumes``: the read-only mount (empty when
    there is no secret); ``entrypoint``: the wrapper argv (prefix ``entrypoint`` = the image's own, e.g.
    ``["vllm", "serve"]``) or None when no secret needs it; ``files``: ``{NAME: node path}``.
    """
    names = secret_names(plan)
    env, wrapped = {}, []
    for name in names:
        path = "%s/%s" % (MOUNT, name)
        if name in NATIVE_FILE_VARS:
            env[NATIVE_FILE_VARS[name]] = path
        else:
            env[name + "_FILE"] = path
            wrapped.append(name)
    if wrapped:
        env["KIMI_K3_SECRET_FILES"] = " ".join(wrapped)
    return {"env": env,
            "volumes": ["%s:%s:ro" % (node_dir, MOUNT)] if names else [],
            "entrypoint": ["/bin/sh", "-c", WRAPPER, WRAPPER_NAME] + list(entrypoint) if wrapped else None,
            "files": dict((n, "%s/%s" % (node_dir, n)) for n in names)}
