"""HTTP status of a URL for the rehearsal tests (the API key as a bearer token when given)."""
import urllib.error
import urllib.request


def status(url, key=None, timeout=5):
    """The HTTP status code of GET ``url``, or None when nothing answers."""
    req = urllib.request.Request(url, headers={"Authorization": "Bearer " + key} if key else {})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code
    except OSError:
        return None
