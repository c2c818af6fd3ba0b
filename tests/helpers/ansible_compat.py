"""Test-only shims so the unit tests run unchanged on the oldest supported ansible-core (2.17, version matrix).

``ansible.module_utils.testing.patch_module_args`` (the public helper the module tests use) exists from
ansible-core 2.19 on. On older cores ``install()`` registers a module of that name whose ``patch_module_args``
has the same contract: expose the args to ``AnsibleModule`` instances created inside the context.
"""
import contextlib
import json
import sys
import types
from unittest import mock


@contextlib.contextmanager
def patch_module_args(args=None):
    from ansible.module_utils import basic

    if not isinstance(args, (dict, type(None))):
        raise TypeError("The `args` arg must be a dict or None.")
    data = json.dumps({"ANSIBLE_MODULE_ARGS": dict(args or {})}).encode()
    with mock.patch.object(basic, "_ANSIBLE_ARGS", data):
        yield


def install():
    """Register the shim when this ansible-core lacks ansible.module_utils.testing; True when it did."""
    try:
        import ansible.module_utils.testing  # noqa: F401  pylint: disable=unused-import
        return False
    except ImportError:
        pass
    import ansible.module_utils

    mod = types.ModuleType("ansible.module_utils.testing")
    mod.patch_module_args = patch_module_args
    sys.modules[mod.__name__] = mod
    ansible.module_utils.testing = mod
    return True
