"""The locks scripts/setup.sh installs the venvs with (requirements-lock.txt, requirements-lock-oldest.txt) are
current: made from the requirement files as they are now, by scripts/lock.sh with the uv that requirements-dev.txt
pins, and nothing but ``name==version`` pins. A requirement file changed without ``scripts/lock.sh`` fails here
(docs/dev/testing.md "The lock").
"""
import hashlib
import os
import re

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _oldest_core():
    with open(os.path.join(REPO, "scripts", "setup.sh")) as f:
        m = re.search(r"^OLDEST_CORE=([0-9.]+)", f.read(), re.M)
    assert m, "scripts/setup.sh sets no OLDEST_CORE"
    return m.group(1)


# lock -> its inputs as scripts/lock.sh hashes them: files (with the files their -r lines include) and literals
LOCKS = {
    "requirements-lock.txt": lambda: ["requirements-dev.txt", "requirements.txt", "requirements-test.txt"],
    "requirements-lock-oldest.txt": lambda: ["requirements.txt", "requirements-test.txt",
                                             "ansible-core==%s" % _oldest_core()],
}
PIN = re.compile(r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)==(?P<version>[^\s;]+)(?: ; (?P<marker>.+))?$")


def _read(name):
    with open(os.path.join(REPO, name), "rb") as f:
        return f.read()


def _input_sha(inputs):
    h = hashlib.sha256()
    for i in inputs:
        h.update(_read(i) if os.path.isfile(os.path.join(REPO, i)) else (i + "\n").encode())
    return h.hexdigest()


def _header(lock):
    m = re.search(r"^# input-sha256: ([0-9a-f]{64}) \((.*)\)$", _read(lock).decode(), re.M)
    assert m, "%s has no '# input-sha256: <hex> (<inputs>)' header line: run scripts/lock.sh" % lock
    return m.group(1), m.group(2).split()


def _requirements(inputs):
    """(name, Requirement) of every requirement line of the input files and literals, -r lines followed."""
    out = []
    for i in inputs:
        lines = _read(i).decode().splitlines() if os.path.isfile(os.path.join(REPO, i)) else [i]
        for line in lines:
            line = line.split(" #")[0].strip()
            if line and not line.startswith(("#", "-")):
                out.append((i, Requirement(line)))
    return out


def _pins(lock):
    """{canonical name: [(version, marker or None)]} of the lock; every non-comment line must be a pin."""
    pins = {}
    for n, line in enumerate(_read(lock).decode().splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        m = PIN.match(line)
        assert m, "%s:%d is not a name==version pin: %r" % (lock, n, line)
        pins.setdefault(canonicalize_name(m.group("name")), []).append((m.group("version"), m.group("marker")))
    return pins


@pytest.mark.parametrize("lock", sorted(LOCKS))
def test_lock_inputs_unchanged(lock):
    sha, listed = _header(lock)
    assert listed == LOCKS[lock](), "%s was made from other inputs: run scripts/lock.sh" % lock
    assert sha == _input_sha(listed), \
        "%s is stale: %s changed since it was made. Run scripts/lock.sh and commit the lock" % (lock, " / ".join(listed))


@pytest.mark.parametrize("lock", sorted(LOCKS))
def test_lock_pins_every_requirement(lock):
    pins = _pins(lock)
    for src, req in _requirements(LOCKS[lock]()):
        name = canonicalize_name(req.name)
        assert name in pins, "%s (%s) is not pinned in %s: run scripts/lock.sh" % (req.name, src, lock)
        # a requirement with a marker (ansible-core on Python < 3.12) is met by one of the lock's pins
        assert any(req.specifier.contains(Version(v), prereleases=True) for v, _marker in pins[name]), \
            "%s: %s allows none of %s's pins %s" % (src, req, lock, pins[name])


@pytest.mark.parametrize("lock", sorted(LOCKS))
def test_lock_made_by_the_pinned_uv(lock):
    uv = [str(r.specifier) for _src, r in _requirements(["requirements-dev.txt"]) if r.name == "uv"]
    assert uv and uv[0].startswith("=="), "requirements-dev.txt must pin uv==<version> (scripts/lock.sh uses it)"
    assert "# Made by scripts/lock.sh with uv %s: uv pip compile " % uv[0][2:] in _read(lock).decode()


def test_setup_installs_with_the_locks():
    with open(os.path.join(REPO, "scripts", "setup.sh")) as f:
        setup = f.read()
    assert 'lock="requirements-lock.txt"' in setup and 'OLDEST_LOCK="requirements-lock-oldest.txt"' in setup
    # both venvs through venv_install (uv with the lock as constraints, pip with it when uv cannot)
    assert setup.count('-c "$lock"') == 2 and 'venv_install .venv "$lock"' in setup
    assert 'venv_install "$OLDEST_VENV" "$OLDEST_LOCK"' in setup
