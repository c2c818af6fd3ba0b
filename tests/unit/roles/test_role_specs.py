"""Every role in roles/ (found on disk, so a new role is covered the day it lands): it has meta/argument_specs.yml
and defaults/main.yml, every default carries the role prefix, has a comment above it and is documented in the
argument spec with the same default; every option has a description, every entry point a tasks file."""
import os

import pytest
import yaml

from tests.helpers.runner import REPO

ROLES = sorted(name for name in os.listdir(os.path.join(REPO, "roles"))
               if os.path.isdir(os.path.join(REPO, "roles", name)))

# Values a role derives for its own tasks and keeps in defaults/: not inputs, so not in the argument spec.
DERIVED = {"image": {"image_allow_unpinned", "image_lookup_names"}}


def _load(*parts):
    with open(os.path.join(REPO, *parts)) as handle:
        return yaml.safe_load(handle)


def _specs(role):
    return _load("roles", role, "meta", "argument_specs.yml")["argument_specs"]


def test_every_role_directory_is_covered():
    assert len(ROLES) >= 11 and {"plan", "launch", "router", "site"} <= set(ROLES), ROLES
    assert set(DERIVED) <= set(ROLES), set(DERIVED) - set(ROLES)


@pytest.mark.parametrize("role", ROLES)
def test_role_has_argument_spec_and_defaults(role):
    for parts in (("meta", "argument_specs.yml"), ("defaults", "main.yml")):
        assert os.path.isfile(os.path.join(REPO, "roles", role, *parts)), (role, parts)
    assert "main" in _specs(role)


@pytest.mark.parametrize("role", ROLES)
def test_every_entry_point_is_described_and_has_tasks(role):
    for entry, spec in _specs(role).items():
        assert spec.get("short_description") and spec.get("description"), (role, entry)
        assert os.path.isfile(os.path.join(REPO, "roles", role, "tasks", entry + ".yml")), (role, entry)
        undocumented = sorted(n for n, o in (spec.get("options") or {}).items() if not o.get("description"))
        assert undocumented == [], (role, entry, undocumented)


@pytest.mark.parametrize("role", ROLES)
def test_defaults_match_the_argument_spec(role):
    defaults = _load("roles", role, "defaults", "main.yml") or {}
    options = _specs(role)["main"]["options"]
    derived = DERIVED.get(role, set())
    assert derived <= set(defaults), "stale DERIVED entries: %s" % (derived - set(defaults))
    assert all(name.startswith(role + "_") for name in defaults), defaults
    assert not derived & set(options), derived & set(options)
    assert set(defaults) - derived <= set(options), set(defaults) - derived - set(options)
    # An option without a default in the spec is either left unset or templated in defaults/ (from the plan, a
    # lookup); an option with one has that same default in defaults/.
    for name, spec in options.items():
        if "default" in spec:
            assert name in defaults and spec["default"] == defaults[name], name


@pytest.mark.parametrize("role", ROLES)
def test_defaults_are_commented(role):
    with open(os.path.join(REPO, "roles", role, "defaults", "main.yml")) as handle:
        lines = handle.read().splitlines()
    for i, line in enumerate(lines):
        if line and not line.startswith((" ", "#", "-")) and ":" in line:
            assert lines[i - 1].startswith("#") or lines[i - 1].startswith(role + "_"), line
