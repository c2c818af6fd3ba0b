#!/usr/bin/env bash
# Group the findings of the last lint/sanity/units runs by file, for handing them to the files' owners.
#   scripts/gate_findings.sh            reads build/test-logs/{ansible-lint.out,sanity.log,units.log}
# Run `scripts/test.sh --stage lint,sanity,units` first.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
py="$here/.venv/bin/python"
[ -x "$py" ] || py=python3
exec "$py" - "$here/build/test-logs" <<'EOF'
import collections
import os
import re
import sys

logs = sys.argv[1]
found = collections.defaultdict(list)


def read(name):
    path = os.path.join(logs, name)
    if not os.path.exists(path):
        return []
    with open(path, errors="replace") as f:
        return [re.sub(r"\x1b\[[0-9;]*m|\x1b\]8;;[^\x1b]*\x1b\\\\", "", line.rstrip("\n")) for line in f]


# ansible-lint: "rule[tag]: message" followed by "path:line[:col] ..."
lines = read("ansible-lint.out")
for i, line in enumerate(lines[:-1]):
    m = re.match(r"^([a-z0-9-]+(?:\[[^\]]+\])?): (.*)$", line)
    n = re.match(r"^([^\s:]+\.[a-z]+):(\d+)", lines[i + 1])
    if m and n:
        found[n.group(1)].append("ansible-lint %s line %s: %s" % (m.group(1), n.group(2), m.group(2)))

# ansible-test sanity: the test name comes from the preceding 'Running sanity test "x"'
test = None
for line in read("sanity.log"):
    m = re.match(r'^Running sanity test "([^"]+)"', line)
    if m:
        test = m.group(1)
        continue
    m = re.match(r"^ERROR: ([^\s:]+):(\d+):(\d+): (.*)$", line)
    if m:
        found[m.group(1)].append("sanity %s line %s: %s" % (test, m.group(2), m.group(4)))
    elif test == "ansible-doc" and line.startswith("[ERROR]: module "):
        found["(ansible-doc)"].append("sanity ansible-doc: " + line[len("[ERROR]: "):][:300])

# ansible-test units: collection errors and failed tests
for line in read("units.log"):
    m = re.match(r"^(ERROR|FAILED) (tests/[^\s:]+)(::\S+)?(?: - (.*))?$", line)
    if m:
        found[m.group(2)].append("units %s%s%s" % (m.group(1), m.group(3) or "", (" - " + m.group(4)) if m.group(4) else ""))

if not found:
    print("no findings in %s" % logs)
for path in sorted(found):
    print(path)
    for item in found[path]:
        print("    " + item)
EOF
