"""Ansible command-line tools of the interpreter that runs the tests."""
import os
import sys

import pytest


def tool(name):
    """Path of ``name`` (ansible-playbook, ansible-galaxy, ...) next to this Python, or skip the test.

    ansible-test units runs the plugin tests in a venv of its own that has ansible-core's library but not its
    command-line entry points; the `unit` stage of scripts/test.sh runs the same tests with the tools present."""
    path = os.path.join(os.path.dirname(sys.executable), name)
    if not os.access(path, os.X_OK):
        pytest.skip("%s is not installed next to %s" % (name, sys.executable))
    return path
