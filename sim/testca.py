"""A throw-away test CA for the https rehearsal (docs/sim.md "TLS"): one CA, one server certificate per node
address, and a second, unrelated CA that must be refused.

    python3 sim/testca.py OUTDIR 127.0.0.11 127.0.0.12 ...

writes OUTDIR/ca.pem (the CA certificate), OUTDIR/wrong-ca.pem (another CA's certificate), and per address
OUTDIR/<address>.pem / OUTDIR/<address>.key (the key mode 0600). The CA's own key is never written: nothing signs
later. Uses python `cryptography` (a dependency of ansible-core). Certificates are valid for 7 days, name the
address as an IP subject alternative name (and ``localhost`` for loopback addresses) and are for TLS servers only.
"""
import datetime
import ipaddress
import os
import sys

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALID_DAYS = 7


def _name(common_name):
    return x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "gpufleet kimi_k3 rehearsal"),
                      x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _builder(subject, issuer, public_key, now):
    return (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer).public_key(public_key)
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=VALID_DAYS)))


def make_ca(common_name="kimi-k3 rehearsal CA"):
    """(certificate, private key) of a self-signed CA."""
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (_builder(_name(common_name), _name(common_name), key.public_key(), now)
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=False, content_commitment=False, key_encipherment=False,
                                         data_encipherment=False, key_agreement=False, key_cert_sign=True,
                                         crl_sign=True, encipher_only=False, decipher_only=False), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .sign(key, hashes.SHA256()))
    return cert, key


def _alt_names(address):
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return [x509.DNSName(address)]
    names = [x509.IPAddress(ip)]
    return names + [x509.DNSName("localhost")] if ip.is_loopback else names


def make_server_cert(ca_cert, ca_key, address):
    """(certificate, private key) of a TLS server at ``address`` (IP or DNS name), signed by the CA."""
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (_builder(_name(address), ca_cert.subject, key.public_key(), now)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.SubjectAlternativeName(_alt_names(address)), critical=False)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
            .sign(ca_key, hashes.SHA256()))
    return cert, key


def cert_pem(cert):
    return cert.public_bytes(serialization.Encoding.PEM)


def key_pem(key):
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _write(path, data, mode):
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.chmod(path, mode)


def write_all(outdir, addresses):
    """Write the CA, the wrong CA and a certificate + key per address into ``outdir``; returns the paths."""
    os.makedirs(outdir, exist_ok=True)
    ca_cert, ca_key = make_ca()
    wrong_cert, _wrong_key = make_ca("unrelated CA (must be refused)")
    paths = {"ca": os.path.join(outdir, "ca.pem"), "wrong_ca": os.path.join(outdir, "wrong-ca.pem"), "servers": {}}
    _write(paths["ca"], cert_pem(ca_cert), 0o644)
    _write(paths["wrong_ca"], cert_pem(wrong_cert), 0o644)
    for address in addresses:
        cert, key = make_server_cert(ca_cert, ca_key, address)
        cert_path, key_path = os.path.join(outdir, address + ".pem"), os.path.join(outdir, address + ".key")
        _write(cert_path, cert_pem(cert), 0o644)
        _write(key_path, key_pem(key), 0o600)
        paths["servers"][address] = {"cert": cert_path, "key": key_path}
    return paths


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) < 2:
        sys.stderr.write("usage: python3 sim/testca.py OUTDIR ADDRESS...\n")
        return 2
    paths = write_all(argv[0], argv[1:])
    print("CA %s, wrong CA %s, %d server certificate(s)" % (paths["ca"], paths["wrong_ca"], len(paths["servers"])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
