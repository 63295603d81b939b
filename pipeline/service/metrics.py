"""The service's ``GET /metrics`` (Prometheus' text format, prometheus_client): its batches as
they are when scraped (``Runner.records``), in a registry of the app's own.

    pipeline_service_batches{status}                       batches in each state (every state listed)
    pipeline_service_batch_requests{batch_id}              a batch's requests (its input file's)
    pipeline_service_batch_requests_completed{batch_id}    answered so far
    pipeline_service_batch_requests_failed{batch_id}       failed so far (an expired or cancelled
                                                           batch's: with those left unanswered)
    pipeline_service_batch_info{batch_id, status, endpoint}  1, the batch's state
    pipeline_service_batch_created_seconds{batch_id}       its created_at (Unix time)

The per-batch figures are gauges, not counters: an expired or cancelled batch's counts become
those of its files (what its job committed), which may be fewer than it had counted.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily

STATES = ("validating", "in_progress", "finalizing", "completed", "failed", "expired", "cancelling", "cancelled")


class BatchCollector:
    """prometheus_client collector reading the batches at scrape time (``records()``: their objects)."""

    def __init__(self, records):
        self.records = records

    def describe(self):
        return []  # (no collect at registration: the batches change)

    def collect(self):
        batches = self.records()
        by_status = GaugeMetricFamily(
            "pipeline_service_batches", "Batches of the service in each state", labels=["status"]
        )
        for state in STATES:
            by_status.add_metric([state], sum(1 for b in batches if b["status"] == state))
        yield by_status
        families = {
            name: GaugeMetricFamily(f"pipeline_service_batch_{name}", doc, labels=["batch_id"])
            for name, doc in (
                ("requests", "Requests in the batch's input file"),
                ("requests_completed", "The batch's requests answered"),
                ("requests_failed", "The batch's requests failed (or left unanswered)"),
                ("created_seconds", "When the batch was created (Unix time)"),
            )
        }
        info = GaugeMetricFamily(
            "pipeline_service_batch_info", "A batch's state (1)", labels=["batch_id", "status", "endpoint"]
        )
        for b in batches:
            counts = b["request_counts"]
            families["requests"].add_metric([b["id"]], counts["total"])
            families["requests_completed"].add_metric([b["id"]], counts["completed"])
            families["requests_failed"].add_metric([b["id"]], counts["failed"])
            families["created_seconds"].add_metric([b["id"]], b["created_at"])
            info.add_metric([b["id"], b["status"], b["endpoint"]], 1)
        yield from families.values()
        yield info


def registry(records) -> CollectorRegistry:
    """A registry of the batches' metrics alone (not the process's default one)."""
    reg = CollectorRegistry(auto_describe=False)
    reg.register(BatchCollector(records))
    return reg


def exposition(reg: CollectorRegistry) -> bytes:
    return generate_latest(reg)
