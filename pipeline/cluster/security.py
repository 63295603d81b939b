"""Mutual TLS between client, scheduler and workers from the config's ``security`` block: one CA,
and one certificate and key that every role presents."""

from __future__ import annotations

from distributed.security import Security

from pipeline.config import Config


def dask_security(config: Config) -> Security | None:
    s = config.security
    if not s.enabled:
        return None
    return Security(
        require_encryption=True,
        tls_ca_file=s.tls_ca_file,
        tls_client_cert=s.tls_cert,
        tls_client_key=s.tls_key,
        tls_scheduler_cert=s.tls_cert,
        tls_scheduler_key=s.tls_key,
        tls_worker_cert=s.tls_cert,
        tls_worker_key=s.tls_key,
    )


def protocol(config: Config) -> str:
    return "tls://" if config.security.enabled else "tcp://"


def tls_args(config: Config) -> list[str]:
    """The same settings as options of ``dask scheduler`` and ``dask worker``."""
    s = config.security
    if not s.enabled:
        return []
    options = {"--protocol": "tls", "--tls-ca-file": s.tls_ca_file, "--tls-cert": s.tls_cert, "--tls-key": s.tls_key}
    return [str(part) for option in options.items() for part in option]
