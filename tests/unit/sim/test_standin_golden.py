"""The stand-in handles requests exactly as it did when the digests in fixtures/standin_golden.json were taken:
`vllm serve` argv parsing, the tool-argument generator and chat request preparation (standin_golden.py). The
collection reads the stand-in's errors, plans and tool calls; a change to them must be deliberate: regenerate with
`python -m tests.unit.sim.standin_golden . > tests/unit/sim/fixtures/standin_golden.json` and say why."""
import json
import os
import subprocess
import sys

from tests.unit.sim.test_simctl_router import REPO

HERE = os.path.dirname(os.path.abspath(__file__))


def test_the_standin_answers_what_it_answered():
    p = subprocess.run([sys.executable, "-m", "tests.unit.sim.standin_golden", REPO], cwd=REPO,
                       capture_output=True, text=True, timeout=300, check=False)
    assert p.returncode == 0, p.stderr[-2000:]
    got = json.loads(p.stdout)
    with open(os.path.join(HERE, "fixtures", "standin_golden.json")) as f:
        want = json.load(f)
    assert len(want) == 4 + 4 * 3 * 2
    assert {k: v for k, v in got.items() if want.get(k) != v} == {}
    assert got == want
