"""Ansible command-line tools of the interpreter that runs the tests."""
import os
import subprocess
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


def run(cmd, cwd=None, env=None, timeout=300, check=True):
    """Run a tool and keep its streams apart: ``.stdout`` is the tool's output (what a test parses: JSON, YAML,
    tables, recaps), ``.stderr`` its diagnostics. A dependency's warning on stderr (e.g. cryptography's
    deprecation warning at ansible-core's import) must never reach a parser. With ``check`` a non-zero exit fails
    the test with the command, its exit status and the tails of both streams."""
    proc = subprocess.run([str(c) for c in cmd], cwd=None if cwd is None else str(cwd), env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=timeout, check=False)
    if check:
        assert proc.returncode == 0, failure(proc)
    return proc


def failure(proc):
    """Assertion text for a finished tool run: command, exit status, both streams' tails, each labelled."""
    cmd = proc.args if isinstance(proc.args, str) else " ".join(proc.args)
    return "%s\n(rc %s)\n--- stdout ---\n%s\n--- stderr ---\n%s" % (
        cmd, proc.returncode, (proc.stdout or "")[-6000:], (proc.stderr or "")[-3000:])
