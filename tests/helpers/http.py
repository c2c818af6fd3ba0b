"""HTTP status of a URL for the rehearsal tests (the API key as a bearer token when given)."""
import urllib.error
import urllib.request


def status(url, key=None, timeout=5):
    """The HTTP status code of GET ``url``, or None when nothing answers."""
    return request_status(urllib.request.Request(url, headers={"Authorization": "Bearer " + key} if key else {}),
                          timeout)


def request_status(req, timeout=5):
    """The HTTP status code of a prepared ``urllib.request.Request``, or None when nothing answers."""
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code
    except OSError:
        return None
