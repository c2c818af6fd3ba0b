"""The faked node tools print exactly what they printed when the digests in fixtures/nodetools_golden.json were
taken: every tool x command line x base profile x fault (nodetools_golden.py). The collection's parsers read
this output and the shared fixtures pin its format, so any change to it must be deliberate: regenerate with
`PYTHONPATH=sim/nodetools python tests/unit/sim/nodetools_golden.py . /tmp > tests/unit/sim/fixtures/nodetools_golden.json`
and say why (PYTHONPATH: the tools import `profile`, their sibling, by plain name, ahead of the standard library's)."""
import json
import os
import subprocess
import sys

from tests.unit.sim.test_simctl_router import REPO

HERE = os.path.dirname(os.path.abspath(__file__))


def test_every_tool_prints_what_it_printed(tmp_path):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [os.path.join(REPO, "sim", "nodetools")] + [p for p in [os.environ.get("PYTHONPATH")] if p]))
    p = subprocess.run([sys.executable, os.path.join(HERE, "nodetools_golden.py"), REPO, str(tmp_path)], env=env,
                       capture_output=True, text=True, timeout=300, check=False)
    assert p.returncode == 0, p.stderr[-2000:]
    got = json.loads(p.stdout)
    with open(os.path.join(HERE, "fixtures", "nodetools_golden.json")) as f:
        want = json.load(f)
    assert len(want) == 125
    assert {k: v for k, v in got.items() if want.get(k) != v} == {}
    assert got == want
