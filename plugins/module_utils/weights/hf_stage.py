# -*- coding: utf-8 -*-
# Copyright: gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Stage a pinned Hugging Face model revision into a node's HF cache, with the standard library only.

Runs on the node (module gpufleet.kimi_k3.hf_stage); huggingface_hub is not needed there. It speaks the Hub's
public HTTP API, which site mirrors (HF_ENDPOINT: olah, Artifactory, Nexus) serve as well:

- file list: ``GET {endpoint}/api/models/{repo}/tree/{revision}?recursive=true`` (paginated by ``Link: rel=next``;
  entries ``{type, path, size, oid, lfs: {oid, size}}``), the list huggingface_hub's ``list_repo_tree`` reads;
- file: ``GET {endpoint}/{repo}/resolve/{revision}/{path}``, resumed with ``Range: bytes=N-``; a server that
  answers 200 instead of 206 is restarted from byte 0 (counted in ``restarted``);
- cache layout of huggingface_hub: ``{cache}/hub/models--{org}--{name}/blobs/{etag}`` (etag = the LFS sha256, else
  the git blob id), ``snapshots/{revision}/{path}`` a relative symlink to the blob; partial downloads are
  ``blobs/{etag}.incomplete``. vLLM started with ``--revision {revision}`` finds the snapshot offline.

The token goes only into the Authorization header (never in a URL, argv or message) and is dropped when a redirect
leaves the endpoint's host (CDN URLs are pre-signed). Pure planning functions are separated from the I/O ones;
unit tests: tests/unit/plugins/module_utils/weights/test_hf_stage.py.
"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import re
import time

try:  # Python 3
    from urllib import request as urlrequest
    from urllib.error import HTTPError, URLError
    from urllib.parse import quote, urlparse
except ImportError:  # pragma: no cover - Python 2 is not supported on nodes
    urlrequest = None

REPO_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*\Z")
COMMIT_RE = re.compile(r"^[0-9a-f]{40}\Z")
LINK_NEXT_RE = re.compile(r'<([^>]+)>\s*;\s*rel="?next"?')
CHUNK = 1024 * 1024


class StageError(Exception):
    """A failure with the message to show (host added by the caller)."""


# ------------------------------------------------------------------------------------------------ planning
def validate_request(repo, revision, endpoint):
    """None, or what is wrong with repo/revision/endpoint (naming the variable to fix)."""
    if not REPO_RE.match(str(repo or "")):
        return "model %r is not a Hugging Face repo id (org/name)" % (repo,)
    if not COMMIT_RE.match(str(revision or "")):
        return ("model revision %r is not a 40-hex commit hash: weight staging downloads the pinned revision only; "
                "set kimi_k3_model_revision to the commit (the model page's 'Files and versions' history)" % (revision,))
    u = urlparse(str(endpoint or ""))
    if u.scheme not in ("http", "https") or not u.netloc:
        return "weights_hf_endpoint %r is not an http(s) URL (HF_ENDPOINT of the site mirror)" % (endpoint,)
    return None


def repo_cache_dir(cache_dir, repo):
    return os.path.join(cache_dir, "hub", "models--" + repo.replace("/", "--"))


def parse_tree(entries):
    """Files of a tree listing: [{path, size, etag, lfs}] sorted by path; directories dropped."""
    files = []
    for e in entries or []:
        if not isinstance(e, dict) or e.get("type") != "file":
            continue
        path, lfs = str(e.get("path") or ""), e.get("lfs") if isinstance(e.get("lfs"), dict) else None
        if not path or path.startswith("/") or ".." in path.split("/"):
            raise StageError("the file list names an unsafe path %r" % path)
        try:
            size = int((lfs or {}).get("size", e.get("size")) or 0)
        except (TypeError, ValueError, OverflowError):
            raise StageError("the file list gives %s no integer size" % path)
        if size < 0:
            raise StageError("the file list gives %s a negative size" % path)
        etag = str((lfs or {}).get("oid") or (lfs or {}).get("sha256") or e.get("oid") or "")
        if not re.match(r"^[0-9a-f]{40}([0-9a-f]{24})?\Z", etag):
            raise StageError("the file list gives %s no usable blob id (oid %r)" % (path, etag))
        files.append({"path": path, "size": size, "etag": etag, "lfs": bool(lfs)})
    if not files:
        raise StageError("the file list of the revision is empty")
    return sorted(files, key=lambda f: f["path"])


def file_state(repo_dir, revision, f):
    """'present' (snapshot entry of the right size), 'blob' (blob complete, link missing), 'partial' (N bytes of
    .incomplete), or 'missing'. Returns (state, bytes_on_disk)."""
    snap = os.path.join(repo_dir, "snapshots", revision, f["path"])
    if os.path.isfile(snap) and os.path.getsize(snap) == f["size"]:
        return "present", f["size"]
    blob = os.path.join(repo_dir, "blobs", f["etag"])
    if os.path.isfile(blob) and os.path.getsize(blob) == f["size"]:
        return "blob", f["size"]
    part = blob + ".incomplete"
    if os.path.isfile(part):
        return "partial", min(os.path.getsize(part), f["size"])
    return "missing", 0


def plan_staging(repo_dir, revision, files):
    """{files: [f + state, have], bytes_total, bytes_present, bytes_needed, files_present}."""
    out, present_bytes, present_files = [], 0, 0
    for f in files:
        state, have = file_state(repo_dir, revision, f)
        out.append(dict(f, state=state, have=have))
        if state in ("present", "blob"):
            present_bytes += f["size"]
            present_files += 1
    total = sum(f["size"] for f in files)
    needed = sum(f["size"] - f["have"] for f in out if f["state"] in ("missing", "partial"))
    return {"files": out, "bytes_total": total, "bytes_present": present_bytes, "bytes_needed": needed,
            "files_present": present_files}


def free_bytes(path):
    p = os.path.abspath(path)
    while not os.path.exists(p) and p != os.path.dirname(p):
        p = os.path.dirname(p)
    st = os.statvfs(p)
    return st.f_bavail * st.f_frsize, p


def disk_problem(needed, free, margin, cache_dir):
    """None, or the refusal when ``needed`` + ``margin`` bytes do not fit in ``free``."""
    if needed + margin <= free:
        return None
    gb = 1e9
    return ("staging needs %.1f GB more in %s (plus a %.1f GB margin) but %.1f GB are free: free space there or "
            "point kimi_k3_model_cache_dir at a larger volume" % (needed / gb, cache_dir, margin / gb, free / gb))


def verify_snapshot(repo_dir, revision, files):
    """Names and sizes of the snapshot against the file list: {ok, problems, extra}."""
    problems = []
    snap_root = os.path.join(repo_dir, "snapshots", revision)
    for f in files:
        p = os.path.join(snap_root, f["path"])
        if not os.path.isfile(p):
            problems.append("%s is missing" % f["path"])
        elif os.path.getsize(p) != f["size"]:
            problems.append("%s has %d bytes, the repository lists %d" % (f["path"], os.path.getsize(p), f["size"]))
    listed = set(f["path"] for f in files)
    extra = []
    for root, _dirs, names in os.walk(snap_root):
        for n in names:
            rel = os.path.relpath(os.path.join(root, n), snap_root)
            if rel not in listed:
                extra.append(rel)
    return {"ok": not problems, "problems": problems, "extra": sorted(extra)}


def progress_line(done, total, rate, current=None):
    pct = 100.0 * done / total if total else 100.0
    eta = (total - done) / rate if rate > 0 else None
    text = "%.2f / %.2f GB (%.1f %%), %.1f MB/s" % (done / 1e9, total / 1e9, pct, rate / 1e6)
    if eta is not None and done < total:
        text += ", ETA %dm%02ds" % (int(eta) // 60, int(eta) % 60)
    if current:
        text += ", at %s" % current
    return text


# ---------------------------------------------------------------------------------------------------- HTTP
class _SameHostRedirect(urlrequest.HTTPRedirectHandler if urlrequest else object):
    """Follow redirects; drop the Authorization header when the redirect leaves the original host."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        new = urlrequest.HTTPRedirectHandler.redirect_request(self, req, fp, code, msg, headers, newurl)
        if new is not None and urlparse(newurl).netloc != urlparse(req.full_url).netloc:
            new.headers.pop("Authorization", None)
            new.unredirected_hdrs.pop("Authorization", None)
        return new


def _open(url, token=None, headers=None, timeout=60):
    hdrs = dict(headers or {}, **{"User-Agent": "gpufleet.kimi_k3-hf_stage"})
    if token:
        hdrs["Authorization"] = "Bearer " + token
    opener = urlrequest.build_opener(_SameHostRedirect())
    try:
        return opener.open(urlrequest.Request(url, headers=hdrs), timeout=timeout)
    except HTTPError as e:
        hint = {401: "the token is missing or wrong (weights_hf_token, from the vault)",
                403: "the token has no access to this repository (gated model: accept its terms)",
                404: "the repository, revision or file does not exist on this endpoint"}.get(e.code, "")
        raise StageError("%s answered %d %s%s" % (_redact(url), e.code, e.reason, (": " + hint) if hint else ""))
    except (URLError, OSError) as e:
        raise StageError("cannot reach %s: %s (check weights_hf_endpoint / HF_ENDPOINT)" % (_redact(url), e))


def _redact(url):
    u = urlparse(url)
    return "%s://%s%s" % (u.scheme, u.hostname or "", (":%d" % u.port) if u.port else "") + u.path


def list_files(endpoint, repo, revision, token=None, timeout=60):
    """The revision's file list, following ``Link: rel=next`` pages."""
    url = "%s/api/models/%s/tree/%s?recursive=true" % (endpoint.rstrip("/"), repo, quote(revision, safe=""))
    entries = []
    while url:
        with _open(url, token, {"Accept": "application/json"}, timeout) as r:
            body = json.loads(r.read().decode("utf-8"))
            m = LINK_NEXT_RE.search(r.headers.get("Link") or "")
        if not isinstance(body, list):
            raise StageError("%s did not return a file list" % _redact(url))
        entries.extend(body)
        url = m.group(1) if m else None
    return parse_tree(entries)


def resolve_url(endpoint, repo, revision, path):
    return "%s/%s/resolve/%s/%s" % (endpoint.rstrip("/"), repo, quote(revision, safe=""), quote(path))


def download_file(url, part, size, token=None, deadline=None, timeout=60, on_bytes=None):
    """Append the missing bytes of one file to ``part`` (resume with Range). Returns {got, restarted, done}.

    Stops at ``deadline`` (monotonic seconds) between chunks when the server can resume (206, or
    ``Accept-Ranges: bytes``); the .incomplete file keeps what was received. A server that cannot resume gets
    the file read to the end in this round (stopping would throw the bytes away on the next round).
    """
    have = os.path.getsize(part) if os.path.exists(part) else 0
    if have > size:
        os.unlink(part)
        have = 0
    if have == size:
        return {"got": 0, "restarted": False, "done": True}
    headers = {"Range": "bytes=%d-" % have} if have else {}
    got, restarted = 0, False
    r = _open(url, token, headers, timeout)
    with r:
        mode = "ab"
        if have and r.status != 206:
            mode, have, restarted = "wb", 0, True
        # Pause at the deadline only where the next round can resume; otherwise finish this file in this round.
        if r.status != 206 and (r.headers.get("Accept-Ranges") or "").lower() != "bytes":
            deadline = None
        with open(part, mode) as out:
            while have + got < size:
                chunk = r.read(min(CHUNK, size - have - got))
                if not chunk:
                    break
                out.write(chunk)
                got += len(chunk)
                if on_bytes:
                    on_bytes(len(chunk))
                if deadline is not None and time.monotonic() >= deadline:
                    break
    done = have + got == size
    if not done and (deadline is None or time.monotonic() < deadline):
        raise StageError("%s ended after %d of %d bytes" % (_redact(url), have + got, size))
    return {"got": got, "restarted": restarted, "done": done}


def link_snapshot(repo_dir, revision, f):
    """snapshots/{revision}/{path} -> ../../blobs/{etag} (relative, as huggingface_hub makes it)."""
    link = os.path.join(repo_dir, "snapshots", revision, f["path"])
    os.makedirs(os.path.dirname(link), exist_ok=True)
    target = os.path.relpath(os.path.join(repo_dir, "blobs", f["etag"]), os.path.dirname(link))
    if os.path.islink(link) or os.path.exists(link):
        if os.path.islink(link) and os.readlink(link) == target:
            return False
        os.unlink(link)
    os.symlink(target, link)
    return True


# ------------------------------------------------------------------------------------------------- driver
def _fetch_one(endpoint, repo, revision, repo_dir, f, token, deadline, timeout):
    """Download (or resume) one file and link it. Returns {got, restarted, done}."""
    blobs = os.path.join(repo_dir, "blobs")
    os.makedirs(blobs, exist_ok=True)
    blob = os.path.join(blobs, f["etag"])
    part = blob + ".incomplete"
    if f["size"] == 0:
        open(part, "wb").close()
        res = {"got": 0, "restarted": False, "done": True}
    else:
        res = download_file(resolve_url(endpoint, repo, revision, f["path"]), part, f["size"], token=token,
                            deadline=deadline, timeout=timeout)
    if res["done"]:
        got = os.path.getsize(part)
        if got != f["size"]:
            raise StageError("%s: received %d bytes, the repository lists %d" % (f["path"], got, f["size"]))
        os.replace(part, blob)
        link_snapshot(repo_dir, revision, f)
    return res


def _new_result(repo, revision, repo_dir, plan):
    return {"repo": repo, "revision": revision, "snapshot_dir": os.path.join(repo_dir, "snapshots", revision),
            "files_total": len(plan["files"]), "bytes_total": plan["bytes_total"],
            "files_present": plan["files_present"], "bytes_present": plan["bytes_present"],
            "bytes_needed": plan["bytes_needed"], "bytes_transferred": 0, "files_transferred": 0, "files_linked": 0,
            "restarted": [], "current": None, "done": False, "changed": False, "verified": None}


def stage(repo, revision, cache_dir, endpoint, token=None, max_seconds=None, margin_bytes=0, files=None,
          check_mode=False, timeout=60):
    """One staging round: list (unless ``files`` is given), plan, check the disk, transfer until done or
    ``max_seconds``, verify when done. Raises StageError with the message to show."""
    problem = validate_request(repo, revision, endpoint)
    if problem:
        raise StageError(problem)
    files = parse_tree(files) if files else list_files(endpoint, repo, revision, token, timeout)
    repo_dir = repo_cache_dir(cache_dir, repo)
    plan = plan_staging(repo_dir, revision, files)
    result = _new_result(repo, revision, repo_dir, plan)
    result["free_bytes"], _where = free_bytes(cache_dir)
    refusal = disk_problem(plan["bytes_needed"], result["free_bytes"], margin_bytes, cache_dir)
    if refusal:
        raise StageError(refusal)
    result["files"] = [{"type": "file", "path": f["path"], "size": f["size"],
                        "oid": f["etag"]} for f in files]
    if check_mode:
        result.update(changed=plan["bytes_needed"] > 0 or plan["files_present"] < len(files), done=True)
        return result
    deadline = time.monotonic() + max_seconds if max_seconds else None
    for f in plan["files"]:
        if f["state"] == "present":
            continue
        if f["state"] == "blob":
            result["files_linked"] += int(link_snapshot(repo_dir, revision, f))
            result["changed"] = True
            continue
        result["current"] = f["path"]
        if deadline is not None and time.monotonic() >= deadline:
            return result
        res = _fetch_one(endpoint, repo, revision, repo_dir, f, token, deadline, timeout)
        result["bytes_transferred"] += res["got"]
        result["changed"] = True
        if res["restarted"]:
            result["restarted"].append(f["path"])
        if not res["done"]:
            return result
        result["files_transferred"] += 1
    result.update(current=None, done=True, verified=verify_snapshot(repo_dir, revision, files))
    return result
