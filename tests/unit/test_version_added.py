"""Every plugin's version_added names a release of the collection: one in changelogs/changelog.yaml or the version
galaxy.yml is about to release. antsibull-changelog lists a plugin as new in the release whose version its
version_added names, so a later number hides it from the release that ships it."""
import glob
import os
import re

import yaml

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _load(*parts):
    with open(os.path.join(REPO, *parts)) as f:
        return yaml.safe_load(f)


def plugin_versions():
    """{relative path: version_added} of every module, action, lookup and filter doc."""
    out = {}
    for path in glob.glob(os.path.join(REPO, "plugins", "*", "*.py")):
        with open(path) as f:
            m = re.search(r'^DOCUMENTATION = r?"""(.*?)"""', f.read(), re.S | re.M)
        if m and "version_added" in m.group(1):
            out[os.path.relpath(path, REPO)] = str(yaml.safe_load(m.group(1))["version_added"])
    for path in glob.glob(os.path.join(REPO, "plugins", "filter", "*.yml")):
        with open(path) as f:
            out[os.path.relpath(path, REPO)] = str(yaml.safe_load(f)["DOCUMENTATION"]["version_added"])
    return out


def test_every_version_added_is_a_release_of_this_collection():
    released = set((_load("changelogs", "changelog.yaml").get("releases") or {}).keys())
    allowed = released | {str(_load("galaxy.yml")["version"])}
    versions = plugin_versions()
    assert len([p for p in versions if p.startswith("plugins/modules/")]) == len(
        glob.glob(os.path.join(REPO, "plugins", "modules", "*.py")))
    assert len([p for p in versions if p.endswith(".yml")]) == len(
        glob.glob(os.path.join(REPO, "plugins", "filter", "*.yml")))
    assert {p: v for p, v in versions.items() if v not in allowed} == {}
