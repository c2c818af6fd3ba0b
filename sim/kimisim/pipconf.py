"""pip's configuration as uv's options: the package sources (index, extra indexes, find-links), pip's own
constraints and its certificate, so that `uv pip install` takes what `pip install` would on this machine.

Used by sim/kimisim/engine_image.py (the engine site) and scripts/setup.sh (the venvs), which runs this file:

    pip config list | python sim/kimisim/pipconf.py args   one uv option or value per line
    pip config list | python sim/kimisim/pipconf.py cert   pip's certificate bundle, if it has one
"""
import ast
import sys


def pip_settings(listing, command="install"):
    """pip's effective settings for `pip <command>` from the output of `pip config list`: {key: value}, the
    environment (PIP_*, listed as `:env:`) over the command's section over [global], as pip ranks them."""
    rank = {"global": 0, command: 1, ":env:": 2}
    found = {}
    for line in listing.splitlines():
        name, sep, value = line.strip().partition("=")
        section, dot, key = name.rpartition(".")
        if not sep or not dot or section not in rank:
            continue
        try:
            value = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            continue
        if key not in found or rank[section] >= found[key][0]:
            found[key] = (rank[section], str(value))
    return {k: ranked[1] for k, ranked in found.items()}


def uv_source_args(settings):
    """uv's options for the package sources pip is configured with; pip's list settings are whitespace-separated."""
    args = []
    if settings.get("index-url"):
        args += ["--index-url", settings["index-url"]]
    for opt, key in (("--extra-index-url", "extra-index-url"), ("--find-links", "find-links"),
                     ("--constraint", "constraint")):
        for value in settings.get(key, "").split():
            args += [opt, value]
    if settings.get("no-index", "").lower() in ("1", "true", "yes", "on"):
        args.append("--no-index")
    return args


def main(argv=None, stdin=None):
    argv = sys.argv[1:] if argv is None else argv
    settings = pip_settings((stdin or sys.stdin).read())
    if argv[:1] == ["cert"]:
        out = [settings["cert"]] if settings.get("cert") else []
    elif argv[:1] == ["args"]:
        out = uv_source_args(settings)
    else:
        sys.stderr.write("usage: pip config list | pipconf.py args|cert\n")
        return 2
    for line in out:
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
