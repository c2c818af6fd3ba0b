"""docs/dev/architecture.md names only paths that exist, apart from the ones the rehearsal cluster generates at
run time."""
import os
import re

from tests.helpers.runner import REPO

GENERATED = ("sim/.state", "inventories/sim-bench", "artifacts")


def test_every_path_named_in_the_architecture_page_exists():
    with open(os.path.join(REPO, "docs", "dev", "architecture.md")) as handle:
        text = handle.read()
    missing = []
    for token in re.findall(r"`([^`\s]+)`", text):
        path = token.split(":")[0].rstrip(",.")
        if "/" not in path or path.startswith(("/", "http", "127.", "unix")) or re.search(r"[<*{]", path):
            continue
        # the package table names the collection's packages as Ansible does, relative to plugins/
        if path.startswith(GENERATED) or os.path.exists(os.path.join(REPO, path)) or (
                path.startswith(("module_utils/", "plugin_utils/")) and os.path.exists(os.path.join(REPO, "plugins", path))):
            continue
        missing.append(path)
    assert missing == []
