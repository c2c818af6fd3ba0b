#!/usr/bin/env python3
"""Mutation score per file from mutmut 3's state (``mutants/**/*.py.meta``), with every survivor listed.

usage: mutation_report.py MUTANTS_DIR [MUTANT_GLOB ...]   (globs as given to ``mutmut run``; none = every mutant)

Score = killed / (total - skipped); "killed" includes timeouts (the mutant made the tests hang) and mutants caught
before the tests ran. Survivors are printed as ``mutmut show NAME`` would name them.
"""
import fnmatch
import json
import os
import sys

from mutmut.stats import status_by_exit_code

PREFIX = "ansible_collections/gpufleet/kimi_k3/"  # where scripts/mutation.sh puts the copy
KILLED = ("killed", "timeout", "caught by type check", "segfault")


def load(mutants_dir):
    """{source path: {mutant name: status}} from the .meta files."""
    out = {}
    for root, _dirs, files in os.walk(mutants_dir):
        for name in files:
            if name.endswith(".py.meta"):
                path = os.path.join(root, name)
                with open(path) as fh:
                    meta = json.load(fh)
                src = os.path.relpath(path, mutants_dir)[:-len(".meta")]
                src = src[len(PREFIX):] if src.startswith(PREFIX) else src
                out[src] = {k: status_by_exit_code[v] for k, v in meta.get("exit_code_by_key", {}).items()}
    return out


def main(argv):
    data = load(argv[1])
    globs = argv[2:]
    rows, survivors, totals = [], [], [0, 0]
    for src in sorted(data):
        muts = {k: v for k, v in data[src].items() if not globs or any(fnmatch.fnmatch(k, g) for g in globs)}
        if not muts:
            continue
        counted = {k: v for k, v in muts.items() if v != "skipped"}
        killed = sum(1 for v in counted.values() if v in KILLED)
        rows.append((src, killed, len(counted)))
        totals[0] += killed
        totals[1] += len(counted)
        survivors += sorted("%s  %s" % (k, v) for k, v in counted.items() if v not in KILLED)
    print("| file | killed | total | score |")
    print("| --- | --- | --- | --- |")
    for src, killed, total in rows + [("**all**", totals[0], totals[1])]:
        print("| %s | %d | %d | %s |" % (src, killed, total, "%.1f %%" % (100.0 * killed / total) if total else "-"))
    print("\nnot killed (%d):" % len(survivors))
    for s in survivors:
        print("  " + s)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
