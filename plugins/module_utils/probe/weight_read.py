# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A bounded sample read of the weight files: the node's read throughput for the plan's launch timeouts.

``sample(paths, max_bytes, max_seconds)`` reads the files in order, in aligned chunks, with ``O_DIRECT`` where the
filesystem allows it (the page cache would otherwise report memory speed for weights read before), until
``max_bytes`` or ``max_seconds``; it returns ``{"bytes", "seconds", "mib_s", "direct", "files", "error"}``.
Without direct I/O the pages read are dropped from the cache first (``posix_fadvise DONTNEED``) where possible.
Node-side, standard library only.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import errno
import mmap
import os
import time

MIB = 1024 * 1024
CHUNK = 8 * MIB  # a multiple of every block size O_DIRECT asks for


def _open(path, direct):
    """(fd, direct used): O_DIRECT first when asked and available; a filesystem that refuses it (tmpfs) reads
    through the cache, with the file's cached pages dropped first."""
    flag = getattr(os, "O_DIRECT", 0)
    if direct and flag:
        try:
            return os.open(path, os.O_RDONLY | flag), True
        except OSError as exc:
            if exc.errno not in (errno.EINVAL, errno.EOPNOTSUPP):
                raise
    fd = os.open(path, os.O_RDONLY)
    if hasattr(os, "posix_fadvise"):
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        except OSError:
            pass
    return fd, False


def _read_file(fd, buf, budget, deadline, clock):
    """Bytes read from ``fd`` in ``buf``-sized chunks until EOF, ``budget`` or ``deadline``."""
    done = 0
    while done < budget and clock() < deadline:
        try:
            got = os.readv(fd, [buf])
        except OSError as exc:
            if exc.errno == errno.EINVAL and done == 0:
                raise
            break
        if got <= 0:
            break
        done += got
    return done


def sample(paths, max_bytes=512 * MIB, max_seconds=5.0, direct=True, clock=time.monotonic):
    """Read at most ``max_bytes`` of ``paths`` within about ``max_seconds``; the throughput in MiB/s."""
    out = {"bytes": 0, "seconds": 0.0, "mib_s": None, "direct": None, "files": 0, "error": None}
    buf = mmap.mmap(-1, CHUNK)  # page-aligned, as O_DIRECT needs
    start = clock()
    deadline = start + max_seconds
    try:
        for path in paths:
            if out["bytes"] >= max_bytes or clock() >= deadline:
                break
            out["bytes"] += _sample_one(path, buf, max_bytes - out["bytes"], deadline, clock, direct, out)
    except (IOError, OSError) as exc:
        out["error"] = "%s: %s" % (getattr(exc, "filename", None) or "read", exc.strerror or exc)
    finally:
        buf.close()
    out["seconds"] = round(clock() - start, 3)
    if out["bytes"] and out["seconds"] > 0:
        out["mib_s"] = round(out["bytes"] / float(MIB) / out["seconds"], 1)
    return out


def _sample_one(path, buf, budget, deadline, clock, direct, out):
    fd, used = _open(path, direct)
    try:
        try:
            got = _read_file(fd, buf, budget, deadline, clock)
        except OSError:
            if not used:
                raise
            os.close(fd)  # a filesystem that accepts O_DIRECT at open but not the read
            fd, used = _open(path, False)
            got = _read_file(fd, buf, budget, deadline, clock)
    finally:
        os.close(fd)
    out["files"] += 1
    out["direct"] = used if out["direct"] is None else (out["direct"] and used)
    return got
