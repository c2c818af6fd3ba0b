"""A throw-away test CA for the https rehearsal (docs/sim.md "TLS"): one CA, one server certificate for every
node address, and a second, unrelated CA that must be refused.

    python3 sim/testca.py /var/lib/kimi-sim/models/.tls 127.0.0.11 127.0.0.12 ...

writes OUTDIR/ca.pem (the CA certificate), OUTDIR/wrong-ca.pem (another CA's certificate), OUTDIR/server.pem (a
server certificate naming every address as an IP subject alternative name, plus ``localhost`` when one is a loopback
address) and OUTDIR/server.key (mode 0600). One certificate for all nodes: the rehearsal nodes' engines run on the
host, so a path the plan mounts is the same file on every node (sim/tls-overlay.yml names these paths). The CA's own
key is never written: nothing signs later. Uses python ``cryptography`` (a dependency of ansible-core).
Certificates are valid for 7 days and are for TLS servers only.
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


def _alt_names(addresses):
    names, loopback = [], False
    for address in addresses:
        try:
            ip = ipaddress.ip_address(address)
        except ValueError:
            names.append(x509.DNSName(address))
            continue
        names.append(x509.IPAddress(ip))
        loopback = loopback or ip.is_loopback
    return names + ([x509.DNSName("localhost")] if loopback else [])


def make_server_cert(ca_cert, ca_key, addresses):
    """(certificate, private key) of a TLS server at every one of ``addresses`` (IPs or DNS names), signed by the
    CA."""
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (_builder(_name(addresses[0]), ca_cert.subject, key.public_key(), now)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.SubjectAlternativeName(_alt_names(addresses)), critical=False)
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
    """Write the CA, the wrong CA and the server certificate + key into ``outdir``; returns their paths."""
    os.makedirs(outdir, mode=0o755, exist_ok=True)
    ca_cert, ca_key = make_ca()
    wrong_cert, _wrong_key = make_ca("unrelated CA (must be refused)")
    cert, key = make_server_cert(ca_cert, ca_key, list(addresses))
    files = (("ca", "ca.pem"), ("wrong_ca", "wrong-ca.pem"), ("cert", "server.pem"), ("key", "server.key"))
    paths = dict((name, os.path.join(outdir, f)) for name, f in files)
    _write(paths["ca"], cert_pem(ca_cert), 0o644)
    _write(paths["wrong_ca"], cert_pem(wrong_cert), 0o644)
    _write(paths["cert"], cert_pem(cert), 0o644)
    _write(paths["key"], key_pem(key), 0o600)
    return paths


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) < 2:
        sys.stderr.write("usage: python3 sim/testca.py OUTDIR ADDRESS...\n")
        return 2
    paths = write_all(argv[0], argv[1:])
    print("CA %s, wrong CA %s, certificate %s for %s"
          % (paths["ca"], paths["wrong_ca"], paths["cert"], ", ".join(argv[1:])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
