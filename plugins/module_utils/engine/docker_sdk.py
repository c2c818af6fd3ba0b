# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The only module of this collection that imports community.docker's Python code: the Docker SDK it vendors under
``plugins/module_utils/_api``.

community.docker 5 declared all its module utils private ("They can change at any time, and have breaking changes
even in bugfix releases"), and it has no public Python API for a low-level engine request: its documented surface is
its modules and their options, which this collection uses by name (engine/api.py ``CLIENT_OPTIONS``). The engine
reads of this collection's own modules (container state, logs, engine version) need the client itself, so the names
below are taken from the private package, checked here in one place:

* ``SUPPORTED_RANGE`` is the dependency range of galaxy.yml and requirements.yml (a unit test holds the three
  together); it ends before the first release nobody has checked.
* ``USED_NAMES`` lists every private name this collection touches; tests/unit/.../engine/test_docker_sdk.py imports
  each of them from the installed community.docker and checks the keyword arguments engine/api.py passes, so a
  release that renames or drops one fails the unit stage before it fails on a node.
* When the import fails at run time, ``refusal()`` says which community.docker changed and which releases work.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import importlib
import json
import os
import re

# community.docker releases whose private names and call signatures this collection was checked against: the
# source of every release tag from 4.0.0 to 5.2.2 and of 5.3.0 (development branch), and the unit tests run with
# 4.8.5 (the ansible-core 2.17 matrix) and 5.4.0 (the development venv). galaxy.yml and requirements.yml carry
# the same range; raise the upper bound only after the unit tests have passed with the new release.
SUPPORTED_MIN = (4, 0, 0)
SUPPORTED_BELOW = (5, 5, 0)
SUPPORTED_RANGE = ">=%s,<%s" % (".".join(map(str, SUPPORTED_MIN)), ".".join(map(str, SUPPORTED_BELOW)))

_PRIVATE = "ansible_collections.community.docker.plugins.module_utils._api"

# module (below _PRIVATE) -> the names imported from it; the keyword arguments engine/api.py passes are in
# USED_KEYWORDS. Both are read by the unit test against the installed community.docker.
USED_NAMES = {
    "api.client": ("APIClient",),
    "constants": ("MINIMUM_DOCKER_API_VERSION",),
    "errors": ("DockerException", "MissingRequirementException"),
    "tls": ("TLSConfig",),
    "utils.utils": ("parse_host",),
}
USED_KEYWORDS = {
    "APIClient": ("base_url", "version", "timeout", "tls", "use_ssh_client"),
    "TLSConfig": ("verify", "client_cert", "ca_cert"),
}

# What engine/api.py takes from here (re-exported, hence listed).
__all__ = ["APIClient", "MINIMUM_DOCKER_API_VERSION", "DockerException", "MissingRequirementException", "TLSConfig",
           "parse_host", "IMPORT_ERROR", "SUPPORTED_RANGE", "installed_version", "refusal", "supported"]

# The imports are spelled out (not built from USED_NAMES) so ansible-core's module packer sees them and ships
# community.docker's files with the modules; inside try, a name it cannot find is left out instead of failing the
# packing, and the node then gets the refusal below.
try:
    from ansible_collections.community.docker.plugins.module_utils._api.api.client import APIClient
    from ansible_collections.community.docker.plugins.module_utils._api.constants import \
        MINIMUM_DOCKER_API_VERSION
    from ansible_collections.community.docker.plugins.module_utils._api.errors import \
        DockerException, MissingRequirementException
    from ansible_collections.community.docker.plugins.module_utils._api.tls import TLSConfig
    from ansible_collections.community.docker.plugins.module_utils._api.utils.utils import parse_host
    IMPORT_ERROR = None
except ImportError as exc:
    APIClient = TLSConfig = parse_host = None
    MINIMUM_DOCKER_API_VERSION = "1.21"
    IMPORT_ERROR = str(exc)

    class DockerException(Exception):
        pass

    class MissingRequirementException(DockerException):
        pass


def parse_version(text):
    """``(major, minor, patch)`` of a release string such as ``5.4.0`` or ``5.0.0-a1``; None when it has none."""
    found = re.match(r"\s*(\d+)\.(\d+)\.(\d+)", str(text or ""))
    return tuple(int(part) for part in found.groups()) if found else None


def supported(version):
    """Whether the release ``version`` (a string) is in SUPPORTED_RANGE."""
    parsed = parse_version(version)
    return parsed is not None and SUPPORTED_MIN <= parsed < SUPPORTED_BELOW


def installed_version():
    """The version in the MANIFEST.json of the community.docker that Python imports, or None where there is no
    such file: on a node the modules run from ansible-core's packed copy, which carries the Python files only."""
    try:
        # Looked up by name, not imported: the module packer must not try to ship the collection's top package.
        package = importlib.import_module("ansible_collections.community.docker")
        for root in getattr(package, "__path__", None) or ():
            path = os.path.join(root, "MANIFEST.json")
            if os.path.isfile(path):
                with open(path) as handle:
                    return json.load(handle)["collection_info"]["version"]
    except Exception:  # pylint: disable=broad-except  # no package, unreadable or unexpected manifest: unknown
        return None
    return None


def refusal(error=None, version=None):
    """The message for a community.docker whose private names this collection cannot import (``error``: the
    ImportError's text; ``version``: the release, when known)."""
    error = IMPORT_ERROR if error is None else error
    version = installed_version() if version is None else version
    who = ("community.docker %s" % version) if version else "the community.docker installed on the controller"
    if version and supported(version):
        what = "%s is incomplete: its Docker client does not import (%s)" % (who, error)
    else:
        what = "%s changed its private API (%s)" % (who, error)
    return ("%s; gpufleet.kimi_k3 asks the engine through community.docker's private Docker SDK and supports "
            "community.docker %s: install a release in that range on the controller (requirements.yml)"
            % (what, SUPPORTED_RANGE))
