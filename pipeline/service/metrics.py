"""The service's ``GET /metrics``. The per-batch figures are gauges, not counters, because an expired or cancelled
batch's counts become those of its files, which may be fewer."""

from __future__ import annotations

from prometheus_client import CollectorRegistry
from prometheus_client.core import GaugeMetricFamily

STATES = ("validating", "in_progress", "finalizing", "completed", "failed", "expired", "cancelling", "cancelled")


class BatchCollector:
    """Reads the batches at scrape time."""

    def __init__(self, records):
        self.records = records

    def collect(self):
        batches = self.records()
        by_status = GaugeMetricFamily(
            "pipeline_service_batches", "Batches of the service in each state", labels=["status"]
        )
        for state in STATES:
            by_status.add_metric([state], sum(1 for b in batches if b["status"] == state))
        yield by_status
        for name, doc, value in (
            ("requests", "Requests in the batch's input file", lambda b: b["request_counts"]["total"]),
            ("requests_completed", "The batch's requests answered", lambda b: b["request_counts"]["completed"]),
            (
                "requests_failed",
                "The batch's requests failed (or left unanswered)",
                lambda b: b["request_counts"]["failed"],
            ),
            ("created_seconds", "When the batch was created (Unix time)", lambda b: b["created_at"]),
        ):
            family = GaugeMetricFamily(f"pipeline_service_batch_{name}", doc, labels=["batch_id"])
            for b in batches:
                family.add_metric([b["id"]], value(b))
            yield family
        info = GaugeMetricFamily(
            "pipeline_service_batch_info", "A batch's state (1)", labels=["batch_id", "status", "endpoint"]
        )
        for b in batches:
            info.add_metric([b["id"], b["status"], b["endpoint"]], 1)
        yield info


def registry(records) -> CollectorRegistry:
    """A registry of the batches' metrics alone, not the process's default one. Without auto_describe,
    registering does not collect."""
    reg = CollectorRegistry(auto_describe=False)
    reg.register(BatchCollector(records))
    return reg
