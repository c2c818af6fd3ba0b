"""Test bootstrap: make `ansible_collections.gpufleet.kimi_k3` importable from the working tree."""
import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COLLECTIONS = os.path.join(REPO, "build", "collections")
if os.path.isdir(os.path.join(COLLECTIONS, "ansible_collections")) and COLLECTIONS not in sys.path:
    sys.path.insert(0, COLLECTIONS)

SHARED_FIXTURES = os.environ.get(
    "KIMI_K3_SHARED_FIXTURES", os.path.join(os.path.dirname(REPO), "shared", "fixtures")
)

# ansible-core < 2.19 (the 2.17 leg of the version matrix) lacks ansible.module_utils.testing: same-contract shim
from tests.helpers import ansible_compat  # noqa: E402

ansible_compat.install()
