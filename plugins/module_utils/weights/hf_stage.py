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

Every file is hashed while its bytes arrive (a resumed partial file is read once first) and compared with the hash
the listing gives (integrity.py); a mismatch deletes the bytes and never links them. Verified blobs are recorded in
the manifest beside the cache, which the peer server (peer.py) serves from: with ``peers``, each file is pulled
from the endpoint by one node (its origin, integrity.assign_origins) and copied by the others from that node, and
checked again on arrival.

The token goes only into the Authorization header (never in a URL, argv or message), only over https or to a
loopback endpoint, never to a peer, and is dropped when a redirect leaves the endpoint's scheme, host or port.
Unit tests: tests/unit/plugins/module_utils/weights/.
"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import re
import threading
import time

try:  # Python 3
    from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
    from urllib import request as urlrequest
    from urllib.error import HTTPError, URLError
    from urllib.parse import quote, urlparse
except ImportError:  # pragma: no cover - Python 2 is not supported on nodes
    urlrequest = None

from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.weights import integrity

REPO_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*\Z")
COMMIT_RE = re.compile(r"^[0-9a-f]{40}\Z")
LINK_NEXT_RE = re.compile(r'<([^>]+)>\s*;\s*rel="?next"?')
CHUNK = 1024 * 1024
PEER_POLL_S = 1.0
PEER_TIMEOUT_S = 5.0


def _clock():
    return time.monotonic()


class StageError(Exception):
    """A failure with the message to show (host added by the caller)."""


# ------------------------------------------------------------------------------------------------ planning
def validate_request(repo, revision, endpoint, token=None):
    """None, or what is wrong with repo/revision/endpoint (naming the variable to fix)."""
    if not REPO_RE.match(str(repo or "")):
        return "model %r is not a Hugging Face repo id (org/name)" % (repo,)
    if not COMMIT_RE.match(str(revision or "")):
        return ("model revision %r is not a 40-hex commit hash: weight staging downloads the pinned revision only; "
                "set kimi_k3_model_revision to the commit (the model page's 'Files and versions' history)" % (revision,))
    u = urlparse(str(endpoint or ""))
    if u.scheme not in ("http", "https") or not u.netloc:
        return "weights_hf_endpoint %r is not an http(s) URL (HF_ENDPOINT of the site mirror)" % (endpoint,)
    if token:
        return integrity.token_transport_problem(endpoint)
    return None


def repo_cache_dir(cache_dir, repo):
    return os.path.join(cache_dir, "hub", "models--" + repo.replace("/", "--"))


def parse_tree(entries):
    """Files of a tree listing: [{path, size, etag, lfs, algo}] sorted by path; directories dropped. ``etag`` is the
    hash the file is verified against (LFS sha256, else git blob id) and its blob's name."""
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
        try:
            algo, etag = integrity.expected_hash(e)
        except integrity.IntegrityError as exc:
            raise StageError("%s: no usable blob id to verify it against" % exc)
        files.append({"path": path, "size": size, "etag": etag, "lfs": bool(lfs), "algo": algo})
    if not files:
        raise StageError("the file list of the revision is empty")
    return sorted(files, key=lambda f: f["path"])


def listing_of(files):
    """Parsed files as tree entries again (the action hands them to the next round instead of listing again)."""
    return [dict({"type": "file", "path": f["path"], "size": f["size"], "oid": f["etag"]},
                 **({"lfs": {"oid": f["etag"], "size": f["size"]}} if f["lfs"] else {})) for f in files]


def _snapshot_link_ok(repo_dir, revision, f):
    link = os.path.join(repo_dir, "snapshots", revision, f["path"])
    target = os.path.relpath(os.path.join(repo_dir, "blobs", f["etag"]), os.path.dirname(link))
    return os.path.islink(link) and os.readlink(link) == target


def file_state(repo_dir, revision, f, manifest=None, verify="changed", run=None):
    """(state, bytes on disk): 'present' (blob verified, snapshot linked), 'blob' (blob verified, link missing or
    wrong), 'unverified' (blob of the right size the manifest does not vouch for: hashed before use), 'partial'
    (N bytes of .incomplete) or 'missing'."""
    manifest = manifest or integrity.empty_manifest()
    blob = os.path.join(repo_dir, "blobs", f["etag"])
    key = integrity.stat_key(blob)
    if key is not None and key[0] == f["size"]:
        if not integrity.trusted(manifest, f["etag"], f["algo"], key, verify, run):
            return "unverified", f["size"]
        return ("present" if _snapshot_link_ok(repo_dir, revision, f) else "blob"), f["size"]
    part = blob + ".incomplete"
    if os.path.isfile(part):
        return "partial", min(os.path.getsize(part), f["size"])
    return "missing", 0


def plan_staging(repo_dir, revision, files, manifest=None, verify="changed", run=None):
    """{files: [f + state, have], bytes_total, bytes_present, bytes_needed, files_present, files_to_rehash,
    bytes_to_rehash}."""
    out, present_bytes, present_files = [], 0, 0
    for f in files:
        state, have = file_state(repo_dir, revision, f, manifest, verify, run)
        out.append(dict(f, state=state, have=have))
        if state in ("present", "blob"):
            present_bytes += f["size"]
            present_files += 1
    total = sum(f["size"] for f in files)
    needed = sum(f["size"] - f["have"] for f in out if f["state"] in ("missing", "partial"))
    rehash = [f for f in out if f["state"] == "unverified"]
    return {"files": out, "bytes_total": total, "bytes_present": present_bytes, "bytes_needed": needed,
            "files_present": present_files, "files_to_rehash": len(rehash),
            "bytes_to_rehash": sum(f["size"] for f in rehash)}


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


def verify_snapshot(repo_dir, revision, files, manifest=None):
    """The snapshot against the file list: {ok, problems, extra}. Names and sizes; with ``manifest``, also that
    every file's blob is recorded there as verified by its content hash."""
    problems = []
    snap_root = os.path.join(repo_dir, "snapshots", revision)
    for f in files:
        p = os.path.join(snap_root, f["path"])
        if not os.path.isfile(p):
            problems.append("%s is missing" % f["path"])
        elif os.path.getsize(p) != f["size"]:
            problems.append("%s has %d bytes, the repository lists %d" % (f["path"], os.path.getsize(p), f["size"]))
        elif manifest is not None and not (
                _snapshot_link_ok(repo_dir, revision, f) and integrity.trusted(
                    manifest, f["etag"], f["algo"], integrity.stat_key(os.path.join(repo_dir, "blobs", f["etag"])))):
            problems.append("%s is not a link to a blob verified against %s %s" % (f["path"], f["algo"], f["etag"]))
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


def choose_source(f, origin, me, view, run, silent_s, peer_wait_s, endpoint_only=False):
    """Where ``f`` comes from now: 'endpoint', 'peer' (its origin node holds a verified copy) or None (wait for the
    origin). ``view``: the origin's manifest as its peer server answered ({verified, refused, state, run}), None
    when it did not answer; ``silent_s``: seconds since it last answered. The endpoint serves the file when the
    origin refused the endpoint's copy (this node fetches and checks it itself), when the origin's staging of this
    run ended without it, or when the origin has been silent for ``peer_wait_s`` (a dead node)."""
    if endpoint_only or origin is None or origin == me:
        return "endpoint"
    if view is None:
        return "endpoint" if silent_s >= peer_wait_s else None
    if f["etag"] in view.get("verified", ()):
        return "peer"
    if f["etag"] in view.get("refused", ()):
        return "endpoint"
    if view.get("run") == run and view.get("state") in ("done", "failed"):
        return "endpoint"
    return None


def refusal_message(node, r, endpoint):
    """One refused file, for the operator: node, path, both hashes, where the bytes came from, the endpoint."""
    return ("%s: %s refused: %s sent content whose %s is %s, but %s lists %s for it at this revision; the "
            "bytes were deleted and never linked" % (node, r["path"], r["source"], r["algo"], r["actual"],
                                                     _redact(endpoint), r["expected"]))


# ---------------------------------------------------------------------------------------------------- HTTP
def _origin(url):
    u = urlparse(url)
    return u.scheme, (u.hostname or "").lower(), u.port


class _SameHostRedirect(urlrequest.HTTPRedirectHandler if urlrequest else object):
    """Follow redirects; drop the Authorization header when the redirect leaves the original scheme, host or port
    (CDN URLs are pre-signed), or goes where a token may not travel (plain http off loopback)."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        new = urlrequest.HTTPRedirectHandler.redirect_request(self, req, fp, code, msg, headers, newurl)
        if new is not None and (_origin(newurl) != _origin(req.full_url) or not integrity.token_allowed(newurl)):
            new.headers.pop("Authorization", None)
            new.unredirected_hdrs.pop("Authorization", None)
        return new


def _open(url, token=None, headers=None, timeout=60, what="weights_hf_endpoint / HF_ENDPOINT"):
    hdrs = dict(headers or {}, **{"User-Agent": "gpufleet.kimi_k3-hf_stage"})
    if token and integrity.token_allowed(url):
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
        raise StageError("cannot reach %s: %s (check %s)" % (_redact(url), e, what))


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


def download_file(url, part, f, token=None, timeout=60, on_bytes=None, what="weights_hf_endpoint / HF_ENDPOINT"):
    """Append the missing bytes of one file to ``part`` (resume with Range), hashing as they arrive.

    Returns {got, restarted, actual}: ``actual`` is the content hash of the whole part (the bytes already there are
    read once, before the request). A file is always finished in one call: stopping inside it would make the next
    round read the partial bytes again to rebuild the hash.
    """
    size = f["size"]
    have = os.path.getsize(part) if os.path.exists(part) else 0
    if have > size:
        os.unlink(part)
        have = 0
    hasher = integrity.ContentHash(f["algo"], size)
    if have:
        integrity.hash_path(part, f["algo"], size, hasher)
    if have == size:
        return {"got": 0, "restarted": False, "actual": hasher.hexdigest()}
    headers = {"Range": "bytes=%d-" % have} if have else {}
    got, restarted = 0, False
    r = _open(url, token, headers, timeout, what)
    with r:
        mode = "ab"
        if have and r.status != 206:
            mode, have, restarted = "wb", 0, True
            hasher = integrity.ContentHash(f["algo"], size)
        with open(part, mode) as out:
            while have + got < size:
                chunk = r.read(min(CHUNK, size - have - got))
                if not chunk:
                    break
                out.write(chunk)
                hasher.update(chunk)
                got += len(chunk)
                if on_bytes:
                    on_bytes(len(chunk))
    if have + got != size:
        raise StageError("%s ended after %d of %d bytes" % (_redact(url), have + got, size))
    return {"got": got, "restarted": restarted, "actual": hasher.hexdigest()}


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


def unlink_snapshot(repo_dir, revision, f):
    link = os.path.join(repo_dir, "snapshots", revision, f["path"])
    if os.path.islink(link) or os.path.exists(link):
        os.unlink(link)


def peer_view(peer, timeout=PEER_TIMEOUT_S):
    """A peer's manifest ({verified, refused}), or None when its server does not answer."""
    try:
        with _open(integrity.peer_url(peer["address"], peer["port"]), None, {"Accept": "application/json"},
                   timeout, "weights_peer_port and the node's kimi_k3_internal_address") as r:
            body = json.loads(r.read().decode("utf-8"))
    except (StageError, ValueError, OSError):
        return None
    if not isinstance(body, dict):
        return None
    return {"verified": set(body.get("verified") or []), "refused": set(body.get("refused") or []),
            "state": body.get("state"), "run": body.get("run")}


# ------------------------------------------------------------------------------------------------- driver
class _Stager(object):
    """One staging round's state: the manifest (shared by the transfer threads under a lock) and the counters."""

    def __init__(self, repo, revision, repo_dir, endpoint, token, timeout, node, run):
        self.repo, self.revision, self.repo_dir, self.endpoint = repo, revision, repo_dir, endpoint
        self.token, self.timeout, self.node, self.run = token, timeout, node, run
        self.lock = threading.Lock()
        self.manifest = integrity.load_manifest(repo_dir)
        self.refused = []

    def set_state(self, state):
        """What this node's peer server tells the others: staging, done or failed (for run ``run``)."""
        with self.lock:
            self.manifest["state"] = {"state": state, "run": self.run}
            integrity.save_manifest(self.repo_dir, self.manifest)

    def _refuse(self, f, actual, source):
        r = {"node": self.node, "path": f["path"], "algo": f["algo"], "expected": f["etag"], "actual": actual,
             "source": source}
        r["msg"] = refusal_message(self.node, r, self.endpoint)
        with self.lock:
            self.refused.append(r)
            if not source.startswith("peer "):
                # what peers read: this node refused the endpoint's copy, so they fetch (and check) it themselves
                self.manifest["refused"][f["etag"]] = {"path": f["path"], "actual": actual, "run": self.run}
                integrity.save_manifest(self.repo_dir, self.manifest)
        return r

    def _accept(self, f, path):
        key = integrity.stat_key(path)
        with self.lock:
            integrity.record(self.manifest, f["etag"], f["algo"], key[0], key[1], self.run)
            integrity.save_manifest(self.repo_dir, self.manifest)

    def rehash(self, f, on_bytes=None):
        """Hash a blob already on disk; True when it matches (recorded), else it is deleted with its link."""
        blob = os.path.join(self.repo_dir, "blobs", f["etag"])
        actual = integrity.hash_path(blob, f["algo"], f["size"], on_bytes=on_bytes).hexdigest()
        if actual == f["etag"]:
            self._accept(f, blob)
            return True
        os.unlink(blob)
        unlink_snapshot(self.repo_dir, self.revision, f)
        self._refuse(f, actual, "the blob on disk (%s)" % blob)
        return False

    def fetch(self, f, source, peer=None):
        """Download ``f`` from the endpoint or ``peer``, verify, move in place and link. Returns
        {got, restarted, ok}; a mismatch deletes the bytes (the part file) and is recorded as a refusal."""
        blobs = os.path.join(self.repo_dir, "blobs")
        blob = os.path.join(blobs, f["etag"])
        part = blob + ".incomplete"
        if source == "peer":
            url, token = integrity.peer_url(peer["address"], peer["port"], f["etag"]), None
            label, what = "peer %s (%s)" % (peer["name"], _redact(url)), "weights_peer_port / the peer node"
        else:
            url, token = resolve_url(self.endpoint, self.repo, self.revision, f["path"]), self.token
            label, what = "endpoint %s" % _redact(url), "weights_hf_endpoint / HF_ENDPOINT"
        res = download_file(url, part, f, token=token, timeout=self.timeout, what=what)
        if res["actual"] != f["etag"]:
            os.unlink(part)
            self._refuse(f, res["actual"], label)
            return dict(res, ok=False)
        os.replace(part, blob)
        self._accept(f, blob)
        link_snapshot(self.repo_dir, self.revision, f)
        return dict(res, ok=True)


def _new_result(repo, revision, repo_dir, plan, node):
    return {"repo": repo, "revision": revision, "node": node,
            "snapshot_dir": os.path.join(repo_dir, "snapshots", revision),
            "files_total": len(plan["files"]), "bytes_total": plan["bytes_total"],
            "files_present": plan["files_present"], "bytes_present": plan["bytes_present"],
            "bytes_needed": plan["bytes_needed"], "files_to_rehash": plan["files_to_rehash"],
            "bytes_to_rehash": plan["bytes_to_rehash"], "bytes_transferred": 0, "bytes_from_endpoint": 0,
            "bytes_from_peers": 0, "files_transferred": 0, "files_from_endpoint": 0, "files_from_peers": 0,
            "files_linked": 0, "files_verified": 0, "files_rehashed": 0, "bytes_rehashed": 0, "refused": [],
            "peer_fallbacks": [], "waiting": 0, "restarted": [], "current": None, "done": False, "changed": False,
            "verified": None}


def _peers_by_name(peers):
    return dict((p["name"], p) for p in peers or [])


def stage(repo, revision, cache_dir, endpoint, token=None, max_seconds=None, margin_bytes=0, files=None,
          check_mode=False, timeout=60, verify="changed", run=None, node=None, peers=None, concurrency=4,
          peer_wait_s=600.0, elapsed_s=0.0, peer_seen=None):
    """One staging round: list (unless ``files`` is given), plan, check the disk, verify what is on disk, transfer
    until done or ``max_seconds`` (checked between files), verify the snapshot when done. Raises StageError with the
    message to show.

    ``peers``: [{name, address, port}] of every node staging this revision (this one included, ``node`` names it),
    each running the peer server; None: everything from the endpoint. ``elapsed_s``: seconds the staging has run
    before this round; ``peer_seen``: {peer: elapsed seconds when it last answered} from the previous round (a
    peer silent for ``peer_wait_s`` is given up). ``run``: id of this staging run, the same on every node
    (``verify=full`` reads every blob once per run; a peer's end of staging counts only for this run).
    """
    problem = validate_request(repo, revision, endpoint, token)
    if problem:
        raise StageError(problem)
    if verify not in integrity.VERIFY_MODES:
        raise StageError("weights_verify %r is not one of %s" % (verify, ", ".join(integrity.VERIFY_MODES)))
    started = _clock()
    files = parse_tree(files) if files else list_files(endpoint, repo, revision, token, timeout)
    repo_dir = repo_cache_dir(cache_dir, repo)
    st = _Stager(repo, revision, repo_dir, endpoint, token, timeout, node, run)
    plan = plan_staging(repo_dir, revision, files, st.manifest, verify, run)
    result = _new_result(repo, revision, repo_dir, plan, node)
    result["free_bytes"], _where = free_bytes(cache_dir)
    refusal = disk_problem(plan["bytes_needed"], result["free_bytes"], margin_bytes, cache_dir)
    if refusal:
        raise StageError(refusal)
    result["files"] = listing_of(files)
    if check_mode:
        # a blob to hash again may pass (no change) or not (fetched again): only what surely changes is claimed
        result.update(changed=any(f["state"] in ("missing", "partial", "blob") for f in plan["files"]), done=True)
        return result
    deadline = started + max_seconds if max_seconds else None
    os.makedirs(os.path.join(repo_dir, "blobs"), exist_ok=True)
    refused_this_run = set(e for e, r in st.manifest["refused"].items() if run is not None and r.get("run") == run)
    st.set_state("staging")
    try:
        return _transfer(result, st, files, plan, deadline, refused_this_run, started, node, peers, concurrency,
                         peer_wait_s, elapsed_s, peer_seen)
    except BaseException:
        st.set_state("failed")
        raise


def _reverify(result, st, plan, deadline, refused_this_run):
    """Step 1 of ``stage``: read once each blob on disk the manifest does not vouch for (new, changed since, or
    verify=full), relink verified blobs. Returns the files still to transfer, or None when the deadline came first."""
    pending = []
    for f in plan["files"]:
        if f["state"] == "unverified":
            if deadline is not None and _clock() >= deadline:
                result.update(current=f["path"])
                return None
            ok = st.rehash(f)
            result["files_rehashed"] += 1
            result["bytes_rehashed"] += f["size"]
            if ok:
                result["files_verified"] += 1
                result["files_linked"] += int(link_snapshot(st.repo_dir, st.revision, f))
                result["changed"] = result["changed"] or result["files_linked"] > 0
            else:
                result["changed"] = True
                pending.append(dict(f, state="missing", have=0))
        elif f["state"] == "blob":
            result["files_linked"] += int(link_snapshot(st.repo_dir, st.revision, f))
            result["changed"] = True
        elif f["state"] in ("missing", "partial") and f["etag"] not in refused_this_run:
            pending.append(f)
    return pending


class _Transfers(object):
    """Step 2 of ``stage``: this node's share from the endpoint, the rest from the peers that pulled it, at most
    ``concurrency`` files at a time; a file whose peer copy failed or was refused comes from the endpoint."""

    def __init__(self, result, st, files, node, peers, concurrency, peer_wait_s, waited_before, peer_seen):
        names = [p["name"] for p in peers or []]
        # over the whole listing, not what this node misses: every node must compute the same origins
        self.origins = integrity.assign_origins(files, names) if len(names) > 1 and node in names else {}
        self.by_name = _peers_by_name(peers)
        self.result, self.st, self.node, self.peer_wait_s = result, st, node, peer_wait_s
        self.concurrency, self.waited_before = max(1, int(concurrency)), float(waited_before)
        self.views, self.polled, self.endpoint_only, self.running, self.error = {}, None, set(), {}, None
        self.seen = dict((n, float((peer_seen or {}).get(n, 0.0))) for n in names)
        result["peer_seen"] = self.seen

    def _poll(self, pending, now, waited):
        needed = set(self.origins.get(f["path"]) for f in pending) - set([self.node, None])
        if needed and (self.polled is None or now - self.polled >= PEER_POLL_S):
            self.views = dict((n, peer_view(self.by_name[n])) for n in needed)
            self.seen.update((n, waited) for n, v in self.views.items() if v is not None)
            self.polled = now

    def _dispatch(self, pending, pool, waited):
        """Start what can start now; returns the files that wait."""
        waiting = []
        for f in pending:
            origin = self.origins.get(f["path"])
            src = choose_source(f, origin, self.node, self.views.get(origin), self.st.run,
                                waited - self.seen.get(origin, 0.0), self.peer_wait_s, f["path"] in self.endpoint_only)
            if src is None or len(self.running) >= self.concurrency:
                waiting.append(f)
                continue
            if src == "endpoint" and origin not in (None, self.node):
                self.result["peer_fallbacks"].append(f["path"])
            peer = self.by_name.get(origin) if src == "peer" else None
            self.running[pool.submit(self.st.fetch, f, src, peer)] = (f, src)
        return waiting

    def _collect(self, fut, pending):
        f, src = self.running.pop(fut)
        try:
            res = fut.result()
        except StageError as exc:
            if src == "peer":  # a peer gone mid-copy: its part stays, and the endpoint finishes it
                self.endpoint_only.add(f["path"])
                pending.append(dict(f, state="partial"))
            else:
                self.error = self.error or exc
            return
        result, key = self.result, "peers" if src == "peer" else "endpoint"
        result["changed"] = True
        result["bytes_from_" + key] += res["got"]
        result["bytes_transferred"] += res["got"]
        if res["restarted"]:
            result["restarted"].append(f["path"])
        if res["ok"]:
            result["files_from_" + key] += 1
            result["files_transferred"] += 1
            result["files_verified"] += 1
        elif src == "peer":  # the peer's copy is refused; the endpoint's is fetched and checked here
            self.endpoint_only.add(f["path"])
            pending.append(dict(f, state="missing", have=0))

    def run(self, pending, started, deadline):
        """Transfer until nothing is pending or the deadline passed (files in flight are finished). Returns the
        files left; raises the first endpoint error once the transfers in flight ended."""
        pool = ThreadPoolExecutor(max_workers=self.concurrency)
        try:
            while pending or self.running:
                now = _clock()
                waited = self.waited_before + (now - started)
                self._poll(pending, now, waited)
                open_round = self.error is None and (deadline is None or now < deadline)
                pending = self._dispatch(pending, pool, waited) if open_round else pending
                self.result["waiting"] = len(pending)
                if not self.running:
                    if not pending or not open_round:
                        break
                    time.sleep(min(PEER_POLL_S, max(0.05, (deadline - now) if deadline else PEER_POLL_S)))
                    continue
                finished, _rest = wait(list(self.running), timeout=PEER_POLL_S, return_when=FIRST_COMPLETED)
                for fut in finished:
                    self._collect(fut, pending)
        finally:
            pool.shutdown(wait=True)
        if self.error is not None:
            raise self.error
        return pending


def _transfer(result, st, files, plan, deadline, refused_this_run, started, node, peers, concurrency, peer_wait_s,
              elapsed_s, peer_seen):
    """Steps 1 and 2 of ``stage``: hash again what is on disk unvouched for, then transfer what is missing."""
    pending = _reverify(result, st, plan, deadline, refused_this_run)
    if pending is None:
        return _finish(result, st, files, plan, done=False)
    transfers = _Transfers(result, st, files, node, peers, concurrency, peer_wait_s, elapsed_s, peer_seen)
    pending = transfers.run(pending, started, deadline)
    result["current"] = pending[0]["path"] if pending else None
    return _finish(result, st, files, plan, done=not pending)


def _finish(result, st, files, plan, done):
    result["refused"] = [dict((k, r[k]) for k in ("node", "path", "algo", "expected", "actual", "source", "msg"))
                         for r in st.refused]
    result["done"] = done
    if done:
        st.set_state("done")
        result["verified"] = verify_snapshot(st.repo_dir, st.revision, files, st.manifest)
    return result
