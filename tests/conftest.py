"""Test bootstrap: make `ansible_collections.gpufleet.kimi_k3` importable from the working tree."""
import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COLLECTIONS = os.path.join(REPO, "build", "collections")
if os.path.isdir(os.path.join(COLLECTIONS, "ansible_collections")) and COLLECTIONS not in sys.path:
    sys.path.insert(0, COLLECTIONS)
# The rehearsal cluster's import roots, put on the path here, once, instead of in each test file: sim/standin (the
# stand-in server's package vllm_standin, which unit tests drive in-process and the smoke tests' fake server takes
# its solver from) and sim/ (the kimisim package behind sim/simctl, and sim/lightnodes.py, which imports it).
# Appended, so they shadow nothing. The standalone scripts the tests run in a process of their own get their import
# roots from how they are started (tests/unit/sim/standin_golden.py: `python -m`; nodetools_golden.py: PYTHONPATH).
for _root in (os.path.join(REPO, "sim", "standin"), os.path.join(REPO, "sim")):
    if _root not in sys.path:
        sys.path.append(_root)

SHARED_FIXTURES = os.environ.get(
    "KIMI_K3_SHARED_FIXTURES", os.path.join(os.path.dirname(REPO), "shared", "fixtures")
)

# ansible-core < 2.19 (the 2.17 leg of the version matrix) lacks ansible.module_utils.testing: same-contract shim
from tests.helpers import ansible_compat  # noqa: E402

ansible_compat.install()

try:
    from hypothesis import settings as _hypothesis_settings
except ImportError:  # the rehearsal's own Python runs integration tests without hypothesis
    _hypothesis_settings = None
if _hypothesis_settings is not None:
    # No per-example deadline: speed is measured by benchmarks, and on a shared two-core machine a deadline fails
    # a correct example that merely waited for the CPU.
    _hypothesis_settings.register_profile("gpufleet", deadline=None)
    _hypothesis_settings.load_profile("gpufleet")


def pytest_addoption(parser):
    parser.addoption("--sim-group", default=None, metavar="NAME",
                     help="run only the tests/integration files of this rehearsal cluster group (sim_group mark; "
                          "unmarked files are 'nodes'); scripts/test.sh runs the groups side by side")


def pytest_configure(config):
    """Register pytest.ini's markers when another config file is in charge (ansible-test units passes its own -c,
    with --strict-markers): pytest.ini stays the one place the markers are declared."""
    import configparser

    known = {line.split(":", 1)[0].strip() for line in config.getini("markers")}
    ini = configparser.ConfigParser()
    ini.read(os.path.join(REPO, "pytest.ini"))
    for line in ini.get("pytest", "markers", fallback="").strip().splitlines():
        if line.split(":", 1)[0].strip() not in known:
            config.addinivalue_line("markers", line.strip())
