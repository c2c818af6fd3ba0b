"""vLLM-style log lines: `INFO 11-30 04:00:00 [file.py:123] message`, unbuffered."""
import sys
import threading
import time

_lock = threading.Lock()
PREFIX = ""  # e.g. "(APIServer pid=1) " -- left empty by default


def _emit(stream, level, where, msg):
    now = time.time()
    stamp = time.strftime("%m-%d %H:%M:%S", time.localtime(now))
    line = "%s%s %s [%s] %s\n" % (PREFIX, level, stamp, where, msg)
    with _lock:
        try:
            stream.write(line)
            stream.flush()
        except (OSError, ValueError):
            pass


def info(where, msg):
    _emit(sys.stdout, "INFO", where, msg)


def warning(where, msg):
    _emit(sys.stdout, "WARNING", where, msg)


def error(where, msg):
    _emit(sys.stdout, "ERROR", where, msg)


def raw(line, stream=None):
    """Lines that vLLM does not print through its logger (tqdm bars on stderr, uvicorn lines)."""
    stream = stream or sys.stdout
    with _lock:
        try:
            stream.write(line + "\n")
            stream.flush()
        except (OSError, ValueError):
            pass
