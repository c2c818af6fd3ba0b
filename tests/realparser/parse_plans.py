"""Parse recorded plans with the installed vLLM's own `vllm serve` parser (run with the Python of a vLLM venv).

    <venv>/bin/python tests/realparser/parse_plans.py PLANS.json RESULTS.json [SNAPSHOT_DIR]

With SNAPSHOT_DIR, first writes the release's snapshot from the same parser there (scripts/dump_vllm_flags.py's
snapshot() and layout: one vLLM import serves both steps).

PLANS.json: {"records": [{"source", "host", "vllm_version", "vllm_args", "env"}, ...]} (collect_plans.py). Only the
records of the installed release are parsed. Each argv goes through the parser exactly as `vllm serve ARGV` would:
the top-level `vllm` parser with the serve subcommand parses ["serve", *vllm_args] with the plan's env set (some
checks read VLLM_* variables), then ServeSubcommand.validate(args), the checks `vllm` runs before it dispatches
(vllm/entrypoints/cli/main.py). The engine is never started. Needs only the standard library and vLLM.
"""
import contextlib
import importlib.util
import io
import json
import os
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _load_dump_vllm_flags():
    """scripts/dump_vllm_flags.py, loaded by path: scripts/ is no package, and this file runs as a script in a vLLM
    venv, where a top-level name such as `scripts` may well belong to something installed."""
    spec = importlib.util.spec_from_file_location("dump_vllm_flags", os.path.join(REPO, "scripts", "dump_vllm_flags.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


dump_vllm_flags = _load_dump_vllm_flags()

# Negative controls: argvs every supported release refuses. If the parser accepts one, the harness is not
# looking at the real checks (a parser that accepts everything would pass every plan), and the run fails.
CONTROLS = (
    ("unknown flag", ["moonshotai/Kimi-K3", "--no-such-flag-kimi-k3", "1"]),
    ("value outside choices", ["moonshotai/Kimi-K3", "--all2all-backend", "no_such_kernel"]),
    ("value of the wrong type", ["moonshotai/Kimi-K3", "--tensor-parallel-size", "eight"]),
    ("serve validation", ["moonshotai/Kimi-K3", "--enable-auto-tool-choice"]),
)


@contextlib.contextmanager
def plan_environment(env):
    """The plan's container env for the duration of one parse (restored afterwards)."""
    saved = dict((k, os.environ.get(k)) for k in env)
    os.environ.update(dict((k, str(v)) for k, v in env.items()))
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def parse_one(top, command, argv, env):
    """(accepted, message): the parser's own error text when it refuses the argv."""
    err = io.StringIO()
    try:
        with plan_environment(env), contextlib.redirect_stderr(err):
            args = top.parse_args(["serve"] + list(argv))
            if command is not None:
                command.validate(args)
    except SystemExit as exc:
        lines = [line for line in err.getvalue().splitlines() if "error:" in line] or err.getvalue().splitlines()
        return False, (lines[-1].strip() if lines else "exit %s" % exc.code)
    except Exception as exc:  # validate() raises TypeError/ValueError with the message vllm prints
        return False, "%s: %s" % (type(exc).__name__, exc)
    return True, None


def write_snapshot(serve, directory):
    doc = dump_vllm_flags.snapshot(serve)
    with open(os.path.join(directory, "vllm-%s.json" % doc["version"]), "w") as handle:
        handle.write(dump_vllm_flags.render(doc))


def main(argv):
    plans_path, out_path = argv[1], argv[2]
    with open(plans_path) as handle:
        collected = json.load(handle)
    records = collected["records"]
    started = time.monotonic()
    top, serve, command = dump_vllm_flags.build_serve_cli()
    import vllm
    version = vllm.__version__.split("+")[0]
    if len(argv) > 3:
        write_snapshot(serve, argv[3])
    build_s = time.monotonic() - started
    results = []
    for rec in records:
        if rec.get("vllm_version") != version:
            continue
        ok, message = parse_one(top, command, rec["vllm_args"], rec.get("env") or {})
        results.append({"source": rec["source"], "host": rec["host"], "accepted": ok, "message": message,
                        "vllm_args": rec["vllm_args"]})
    parse_s = time.monotonic() - started - build_s
    controls = []
    for name, control in CONTROLS:
        ok, message = parse_one(top, command, control, {})
        controls.append({"control": name, "vllm_args": control, "refused": not ok, "message": message})
    probes = []
    for probe in collected.get("probes", {}).get(version, []):  # parse only: see probe_checker.py
        ok, message = parse_one(top, None, probe["argv"], {})
        probes.append({"vllm_args": probe["argv"], "accepted": ok, "message": message})
    with open(out_path, "w") as handle:
        json.dump({"version": version, "platform": dump_vllm_flags.force_cpu_platform(), "parser_build_s": build_s,
                   "parse_s": parse_s, "results": results, "controls": controls, "probes": probes}, handle, indent=1)
    print("vllm %s: %d plan(s) parsed, %d rejected; %d/%d negative controls refused"
          % (version, len(results), sum(not r["accepted"] for r in results), sum(c["refused"] for c in controls),
             len(controls)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
