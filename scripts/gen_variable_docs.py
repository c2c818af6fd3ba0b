"""python scripts/gen_variable_docs.py [--check]

Render docs/variables.md, the README variable table and the plan_variables doc fragment from the variable table
(plugins/plugin_utils/plan/variables.py). --check: exit 1 and name the files that are out of date."""
import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "build", "collections"))

from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import recipe_data  # noqa: E402
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import variable_docs  # noqa: E402


def main(argv):
    check = "--check" in argv
    with open(os.path.join(REPO, "README.md")) as handle:
        readme = handle.read()
    files = variable_docs.rendered_files(recipe_data.load_recipe(), recipe_data.load_snapshots(), readme)
    stale = []
    for rel, content in sorted(files.items()):
        path = os.path.join(REPO, rel)
        current = open(path).read() if os.path.exists(path) else None
        if current == content:
            continue
        stale.append(rel)
        if not check:
            with open(path, "w") as handle:
                handle.write(content)
    for rel in stale:
        print(("out of date: %s" if check else "wrote %s") % rel)
    return 1 if (check and stale) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
