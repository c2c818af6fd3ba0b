"""vLLM's own parser as the judge: the optional `realparser` test stage (scripts/realparser.sh runs this).

For every supported vLLM release (the shipped snapshots data/vllm_flags/vllm-<v>.json):
1. ensure a cached venv with that release from PyPI (<venv dir>/<v>; installed once, reused afterwards);
2. regenerate the snapshot from the real parser (scripts/dump_vllm_flags.py) and diff it against the shipped one
   (only ordering may differ);
3. parse every plan the project renders for that release (tests/realparser/collect_plans.py) with the real
   `vllm serve` parser (tests/realparser/parse_plans.py), plus negative controls that must be refused.
Exit status 0 only when every step of every release passed. Writes build/realparser/report.{json,md}.

Run as `python -m tests.realparser.run` from the repository root with build/collections on PYTHONPATH (the
collection's plan code, ansible_collections.gpufleet.kimi_k3): scripts/realparser.sh does both.

Environment: KIMI_K3_VLLM_VENVS (venv directory; default $XDG_CACHE_HOME/kimi-k3/vllm-venvs, outside the repo),
KIMI_K3_VLLM_PYTHON (interpreter for new venvs; default python3.11, else python3), KIMI_K3_VLLM_PIP_ARGS (extra
pip install arguments).
"""
import argparse
import glob
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time

from tests.realparser import collect_plans, probe_checker, snapshot_diff

REPO = collect_plans.REPO
MARKER = ".kimi-k3-realparser.json"
OUT = os.path.join(REPO, "build", "realparser")


def supported_versions(repo=REPO):
    names = glob.glob(os.path.join(repo, "data", "vllm_flags", "vllm-*.json"))
    versions = [os.path.basename(n)[len("vllm-"):-len(".json")] for n in names]
    return sorted(versions, key=lambda v: tuple(int(p) if p.isdigit() else 0 for p in v.split(".")))


def default_venv_dir():
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.environ.get("KIMI_K3_VLLM_VENVS") or os.path.join(cache, "kimi-k3", "vllm-venvs")


def default_python():
    return os.environ.get("KIMI_K3_VLLM_PYTHON") or shutil.which("python3.11") or shutil.which("python3")


def say(text):
    print("[realparser] %s" % text, flush=True)


def installed_vllm(venv):
    python = os.path.join(venv, "bin", "python")
    if not os.path.exists(python):
        return None
    proc = subprocess.run([python, "-c", "import importlib.metadata as m; print(m.version('vllm'))"],
                          stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, universal_newlines=True,
                          check=False)
    return proc.stdout.strip() or None


def pip_env(venv):
    """pip's environment for a venv install: find-links pointed at an empty directory.

    A local wheel of a different build of a pinned package (this machine keeps a CPU build of torch 2.13.0 under
    its find-links) would be taken instead of the index's: PyPI's torchvision/torchaudio, which vLLM pins too,
    then fail to import and with them vLLM's parser. The index's builds are what `pip install vllm` gets elsewhere.
    """
    empty = os.path.join(venv, ".no-find-links")
    os.makedirs(empty, exist_ok=True)
    return dict(os.environ, PIP_FIND_LINKS=empty, PIP_DISABLE_PIP_VERSION_CHECK="1")


def ensure_venv(version, venv_dir, python, install=True):
    """{"status": cached|installed|failed|missing, "venv", "install_s", ...} for one release."""
    venv = os.path.join(venv_dir, version)
    marker = os.path.join(venv, MARKER)
    if os.path.exists(marker) and installed_vllm(venv) == version:
        with open(marker) as handle:
            info = json.load(handle)
        return dict(info, status="cached", venv=venv)
    if not install:
        return {"status": "missing", "venv": venv,
                "error": "no venv with vllm==%s (run without --no-install)" % version}
    os.makedirs(OUT, exist_ok=True)
    log = os.path.join(OUT, "install-%s.log" % version)
    started = time.monotonic()
    steps = [[python, "-m", "venv", venv],
             [os.path.join(venv, "bin", "pip"), "install", "vllm==%s" % version]
             + shlex.split(os.environ.get("KIMI_K3_VLLM_PIP_ARGS", ""))]
    with open(log, "w") as handle:
        for cmd in steps:
            say("installing vllm %s: %s (log %s)" % (version, " ".join(cmd), os.path.relpath(log, REPO)))
            env = pip_env(venv) if cmd[0].endswith("pip") else None
            rc = subprocess.call(cmd, stdout=handle, stderr=subprocess.STDOUT, env=env)
            if rc != 0:
                return {"status": "failed", "venv": venv, "error": "%s: rc %d; %s" % (
                    " ".join(cmd), rc, " | ".join(_tail(log, 8)))}
    info = {"vllm": installed_vllm(venv), "install_s": round(time.monotonic() - started, 1), "python": python,
            "installed_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    if info["vllm"] != version:
        return {"status": "failed", "venv": venv, "error": "pip installed vllm %s, not %s" % (info["vllm"], version)}
    with open(marker, "w") as handle:
        json.dump(info, handle)
    return dict(info, status="installed", venv=venv)


def _tail(path, n):
    with open(path, errors="replace") as handle:
        return [line.rstrip() for line in handle.readlines()[-n:]]


def run_in_venv(venv, args, log):
    """Run a script of this repo with the venv's Python; (rc, seconds). Output goes to ``log``.

    VLLM_TARGET_DEVICE=cpu: the platform switch of vLLM >= 0.28 (dump_vllm_flags.force_cpu_platform).
    """
    started = time.monotonic()
    with open(log, "w") as handle:
        rc = subprocess.call([os.path.join(venv, "bin", "python")] + args, cwd=REPO, stdout=handle,
                             stderr=subprocess.STDOUT, env=dict(os.environ, VLLM_TARGET_DEVICE="cpu"))
    return rc, round(time.monotonic() - started, 1)


def judge(version, venv, plans_path, workdir):
    """One run of the release's parser: regenerated snapshot + parse results, or an error."""
    out = os.path.join(workdir, "snapshots")
    os.makedirs(out, exist_ok=True)
    log = os.path.join(OUT, "parse-%s.log" % version)
    results = os.path.join(OUT, "parse-%s.json" % version)
    rc, seconds = run_in_venv(venv, [os.path.join(REPO, "tests", "realparser", "parse_plans.py"), plans_path,
                                     results, out], log)
    fresh = os.path.join(out, "vllm-%s.json" % version)
    if rc != 0 or not os.path.exists(results) or not os.path.exists(fresh):
        error = "parse_plans.py rc %d: %s" % (rc, " | ".join(_tail(log, 6)))
        return {"ok": False, "error": error, "seconds": seconds}, {"ok": False, "error": error}, []
    shutil.copy(fresh, os.path.join(OUT, "vllm-%s.regenerated.json" % version))
    with open(results) as handle:
        data = json.load(handle)
    return check_snapshot(version, fresh), check_plans(data, seconds), data.get("probes", [])


def check_snapshot(version, fresh):
    """The regenerated snapshot against the shipped data/vllm_flags/vllm-<v>.json."""
    with open(os.path.join(REPO, "data", "vllm_flags", "vllm-%s.json" % version)) as a, open(fresh) as b:
        shipped_text, fresh_text = a.read(), b.read()
    result = snapshot_diff.compare(json.loads(shipped_text), json.loads(fresh_text))
    return dict(result, ok=result["same"], byte_identical=shipped_text == fresh_text)


def check_plans(data, seconds):
    rejected = [r for r in data["results"] if not r["accepted"]]
    controls_accepted = [c for c in data["controls"] if not c["refused"]]
    return {"ok": bool(data["results"]) and not rejected and not controls_accepted, "seconds": seconds,
            "parsed": len(data["results"]), "accepted": len(data["results"]) - len(rejected), "rejected": rejected,
            "controls": "%d/%d refused" % (len(data["controls"]) - len(controls_accepted), len(data["controls"])),
            "controls_accepted": controls_accepted, "parser_build_s": round(data["parser_build_s"], 1)}


def disk_usage(path):
    proc = subprocess.run(["du", "-sk", path], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                          universal_newlines=True, check=False)
    try:
        return round(int(proc.stdout.split()[0]) / 1024.0 / 1024.0, 1)
    except (IndexError, ValueError):
        return None


def check_version(version, args, plans_path, workdir):
    """Every step for one release: venv, snapshot diff, plan parsing."""
    row = {"version": version}
    started = time.monotonic()
    row["venv"] = ensure_venv(version, args.venv_dir, args.python, install=not args.no_install)
    say("vllm %s: venv %s (%s)" % (version, row["venv"]["status"], row["venv"]["venv"]))
    if row["venv"]["status"] in ("failed", "missing"):
        say("vllm %s: %s" % (version, row["venv"]["error"]))
        row["ok"] = False
        return row
    row["venv"]["disk_gb"] = disk_usage(row["venv"]["venv"])
    row["snapshot"], row["plans"], parsed_probes = judge(version, row["venv"]["venv"], plans_path, workdir)
    _say_snapshot(version, row["snapshot"])
    _say_plans(version, row["plans"])
    row["probes"] = check_probes(version, args.judged_probes.get(version, []), parsed_probes)
    row["ok"] = row["snapshot"]["ok"] and row["plans"]["ok"]
    row["check_s"] = round(time.monotonic() - started, 1)
    return row


def check_probes(version, judged, parsed):
    """The checker-versus-real-parser probes of one release (informational, see probe_checker.py)."""
    found = probe_checker.disagreements(judged, parsed)
    lax = [d for d in found if d["checker"] and not d["real"]]
    strict = [d for d in found if not d["checker"] and d["real"]]
    say("vllm %s: checker vs real parser on %d one-flag probes: %d agree, %d the checker accepts and vLLM refuses, "
        "%d the checker refuses and vLLM accepts" % (version, len(parsed), len(parsed) - len(found), len(lax),
                                                     len(strict)))
    for kind, items in (("LAX", lax), ("STRICT", strict)):
        labels = sorted(set(d["label"] for d in items))
        for label in labels:
            group = [d for d in items if d["label"] == label]
            print("    %s [%s] x%d, e.g. %s" % (kind, label, len(group), "; ".join(
                "%s: %s" % (" ".join(d["argv"][1:]), _short(d["message"], 110)) for d in group[:2])))
    return {"probes": len(parsed), "lax": lax, "strict": strict}


def _short(text, limit):
    text = text or ""
    return text if len(text) <= limit else text[:limit - 3] + "..."


def judge_probes(versions):
    """{version: probes judged by the plan's checker} for the shipped snapshots."""
    from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import vllm_flags
    out = {}
    for version in versions:
        path = os.path.join(REPO, "data", "vllm_flags", "vllm-%s.json" % version)
        if os.path.exists(path):
            with open(path) as handle:
                out[version] = probe_checker.judged_probes(json.load(handle), vllm_flags.check_argv)
    return out


def _say_snapshot(version, snap):
    if "error" in snap:
        say("vllm %s: snapshot NOT regenerated: %s" % (version, snap["error"]))
    elif snap["same"]:
        say("vllm %s: snapshot matches the real parser (%s)%s" % (
            version, ", ".join("%d %s" % (n, k.replace("_", " ")) for k, n in snap["counts"].items()),
            "" if snap["byte_identical"] else "; only ordering/layout differs"))
    else:
        say("vllm %s: snapshot DIFFERS from the real parser (%d difference(s)); regenerated file: "
            "build/realparser/vllm-%s.regenerated.json" % (version, len(snap["differences"]), version))
        for line in snap["differences"]:
            print("    " + line)


def _say_plans(version, plans):
    if "error" in plans:
        say("vllm %s: plans NOT parsed: %s" % (version, plans["error"]))
        return
    say("vllm %s: %d plan(s) parsed, %d accepted, %d rejected; negative controls %s" % (
        version, plans["parsed"], plans["accepted"], len(plans["rejected"]), plans["controls"]))
    for r in plans["rejected"]:
        print("    REJECTED %s %s: %s" % (r["source"], r["host"], r["message"]))
        print("      argv: %s" % " ".join(shlex.quote(a) for a in r["vllm_args"]))
    for c in plans["controls_accepted"]:
        print("    CONTROL ACCEPTED (the harness does not see the parser's checks): %s" % c["control"])
    if not plans["parsed"]:
        print("    no plan targets vllm %s: nothing was checked for it" % version)


def markdown(report):
    lines = ["| vLLM | venv | install s (this run) | disk GB | snapshot vs real parser | plans parsed | accepted "
             "| rejected | controls refused | checker probes: agree / lax / strict | stage s |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for row in report["versions"]:
        venv, snap, plans = row["venv"], row.get("snapshot", {}), row.get("plans", {})
        snap_text = ("same" if snap.get("same") else "%d difference(s)" % len(snap.get("differences", []))
                     if "differences" in snap else "error (build/realparser/parse-<v>.log)")
        lines.append("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
            row["version"], venv["status"], venv.get("install_s", "-") if venv["status"] == "installed" else "-",
            venv.get("disk_gb", "-"), snap_text,
            plans.get("parsed", "-"), plans.get("accepted", "-"), len(plans.get("rejected", [])) if plans else "-",
            plans.get("controls", "-"), _probe_cell(row.get("probes")), row.get("check_s", "-")))
    return "\n".join(lines) + "\n"


def summary(report):
    """One line: per release, snapshot verdict and accepted/parsed plans."""
    parts = []
    for row in report["versions"]:
        snap, plans = row.get("snapshot", {}), row.get("plans", {})
        if row["venv"]["status"] in ("failed", "missing"):
            parts.append("%s venv %s" % (row["version"], row["venv"]["status"]))
            continue
        parts.append("%s snapshot %s, plans %s/%s accepted, checker probes %d lax/%d strict" % (
            row["version"], "same" if snap.get("same") else "DIFFERS" if "differences" in snap else "error",
            plans.get("accepted", "?"), plans.get("parsed", "?"), len(row.get("probes", {}).get("lax", [])),
            len(row.get("probes", {}).get("strict", []))))
    if report["refused_inventories"]:
        parts.append("%d example inventories refused by the plan" % len(report["refused_inventories"]))
    if report.get("tests_failed"):
        parts.append("unit tests failed while collecting plans")
    return "; ".join(parts)


def _probe_cell(probes):
    if not probes:
        return "-"
    lax, strict = len(probes["lax"]), len(probes["strict"])
    return "%d / %d / %d" % (probes["probes"] - lax - strict, lax, strict)


def parse_args(argv):
    ap = argparse.ArgumentParser(description="vLLM's own parser as the judge (optional test stage)")
    ap.add_argument("--versions",
                    help="comma list (default: every shipped snapshot: %s)" % ",".join(supported_versions()))
    ap.add_argument("--venv-dir", default=default_venv_dir(),
                    help="cached venvs, one per release (default %(default)s)")
    ap.add_argument("--python", default=default_python(), help="interpreter for new venvs (default %(default)s)")
    ap.add_argument("--no-install", action="store_true", help="fail instead of installing a missing venv")
    ap.add_argument("--tests", nargs="*", default=list(collect_plans.DEFAULT_TESTS),
                    help="unit tests whose rendered plans are parsed (default: %(default)s)")
    args = ap.parse_args(argv)
    args.versions = args.versions.split(",") if args.versions else supported_versions()
    return args


def collect_step(args, plans_path):
    """Collect the plans, print what was found; (collected, tests_failed)."""
    collected = collect_plans.collect(tuple(args.tests), versions=args.versions)
    args.judged_probes = judge_probes(args.versions)
    collected["probes"] = dict((v, [{"argv": p["argv"]} for p in judged]) for v, judged in args.judged_probes.items())
    with open(plans_path, "w") as handle:
        json.dump(collected, handle, indent=1)
    say("collected %d plan(s): %d inventories rendered (%d refused), unit tests %s: %s" % (
        len(collected["records"]), len(collected["inventories"]), len(collected["refused"]),
        " ".join(collected["tests"].get("paths", [])), collected["tests"].get("pytest_summary")))
    for inventory, message in sorted(collected["refused"].items()):
        say("REFUSED by the plan: %s: %s" % (inventory, message))
    for note in collected["notes"]:
        say("note: %s" % note)
    tests_failed = collected["tests"].get("pytest_exit") not in (0, None)
    if tests_failed:
        say("FAILED: the unit tests that render plans did not pass (%s): plans after a failing assertion were not "
            "collected" % collected["tests"].get("pytest_summary"))
    return collected, tests_failed


def write_report(report):
    with open(os.path.join(OUT, "report.json"), "w") as handle:
        json.dump(report, handle, indent=1)
    with open(os.path.join(OUT, "report.md"), "w") as handle:
        handle.write(markdown(report))
    print(markdown(report))
    say("summary: %s" % summary(report))
    say("%s in %.1f s (report: build/realparser/report.md)" % ("PASS" if report["ok"] else "FAIL", report["stage_s"]))


def main(argv=None):
    args = parse_args(argv)
    started = time.monotonic()
    os.makedirs(OUT, exist_ok=True)
    plans_path = os.path.join(OUT, "plans.json")
    collected, tests_failed = collect_step(args, plans_path)
    workdir = tempfile.mkdtemp(prefix="realparser-", dir=OUT)
    try:
        rows = [check_version(v, args, plans_path, workdir) for v in args.versions]
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    report = {"versions": rows, "refused_inventories": collected["refused"], "plans": len(collected["records"]),
              "notes": collected["notes"], "tests": collected["tests"], "tests_failed": tests_failed,
              "stage_s": round(time.monotonic() - started, 1)}
    report["ok"] = bool(rows) and all(r["ok"] for r in rows) and not collected["refused"] and not tests_failed
    write_report(report)
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
