"""Roles of this engineer's scope: every default is documented in meta/argument_specs.yml with the same default,
carries the role prefix and has a comment above it."""
import os

import pytest
import yaml

from tests.helpers.runner import REPO

ROLES = ["plan", "preflight", "smoke", "capacity", "teardown", "fabric"]


def _load(*parts):
    with open(os.path.join(REPO, *parts)) as handle:
        return yaml.safe_load(handle)


@pytest.mark.parametrize("role", ROLES)
def test_defaults_match_the_argument_spec(role):
    defaults = _load("roles", role, "defaults", "main.yml") or {}
    options = _load("roles", role, "meta", "argument_specs.yml")["argument_specs"]["main"]["options"]
    assert all(name.startswith(role + "_") for name in defaults), defaults
    assert set(defaults) == set(options), set(defaults) ^ set(options)
    for name, spec in options.items():
        if "default" in spec:
            assert spec["default"] == defaults[name], name


@pytest.mark.parametrize("role", ROLES)
def test_defaults_are_commented(role):
    with open(os.path.join(REPO, "roles", role, "defaults", "main.yml")) as handle:
        lines = handle.read().splitlines()
    for i, line in enumerate(lines):
        if line and not line.startswith((" ", "#", "-")) and ":" in line:
            assert lines[i - 1].startswith("#") or lines[i - 1].startswith(role + "_"), line
