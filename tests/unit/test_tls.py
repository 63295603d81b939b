"""TLS between client, scheduler and workers on loopback, with certificates made here."""

import psutil
import pytest
from distributed import Client

from helpers.certs import write_certs
from pipeline import Pipeline, load_config
from pipeline.bench.workloads import document_questions
from pipeline.jobs.recovery import current_workers


def test_tls_cluster_answers_and_refuses_plain_clients(tmp_path):
    config = load_config().replace(
        scheduler={"dashboard_address": None}, engine={"kind": "fake"}, security=write_certs(tmp_path)
    )
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
