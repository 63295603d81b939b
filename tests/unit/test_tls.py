"""TLS between client, scheduler and workers on loopback, with certificates made here."""
import datetime
import ipaddress

import psutil
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from distributed import Client

from pipeline import Pipeline, load_config
from pipeline.jobs.recovery import current_workers
from pipeline.bench.workloads import document_questions


def _write_certs(folder):
    """A CA, and one certificate for 127.0.0.1 signed by it (every role presents it)."""
    now = datetime.datetime.now(datetime.timezone.utc)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "pipeline test CA")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
          .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
          .not_valid_after(now + datetime.timedelta(days=1))
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
          .sign(ca_key, hashes.SHA256()))
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")]))
            .issuer_name(ca_name).public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                                                        x509.DNSName("localhost")]), critical=False)
            .sign(ca_key, hashes.SHA256()))
    pem = serialization.Encoding.PEM
    paths = {"tls_ca_file": folder / "ca.pem", "tls_cert": folder / "cert.pem", "tls_key": folder / "key.pem"}
    paths["tls_ca_file"].write_bytes(ca.public_bytes(pem))
    paths["tls_cert"].write_bytes(cert.public_bytes(pem))
    paths["tls_key"].write_bytes(key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    return {k: str(v) for k, v in paths.items()}


def test_tls_cluster_answers_and_refuses_plain_clients(tmp_path):
    config = load_config().replace(scheduler={"dashboard_address": None}, engine={"kind": "fake"},
                                   security=_write_certs(tmp_path))
    rows = document_questions(6, 2, seed=3)
    with Pipeline(config) as p:
        address = p.client.scheduler.address
        assert address.startswith("tls://127.0.0.1:")
        workers = current_workers(p.client)
        assert len(workers) == 2 and all(a.startswith("tls://127.0.0.1:") for a in workers)
        results = p.run(rows)
        assert [r.id for r in results] == [row["id"] for row in rows] and all(r.error is None for r in results)
        # with the dashboard off, Dask's HTTP server (/metrics, /health) still runs: on loopback too
        here = psutil.Process().net_connections(kind="inet")
        assert {c.laddr.ip for c in here if c.status == psutil.CONN_LISTEN} == {"127.0.0.1"}
        with pytest.raises(Exception):  # no certificate, no connection
            Client(address.replace("tls://", "tcp://"), timeout="3s")
