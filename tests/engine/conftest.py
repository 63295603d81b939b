"""Real vLLM on CPU: the embedded cluster from cluster.yaml, started once per test session."""

import pytest

from pipeline import Pipeline, load_config


@pytest.fixture(scope="session")
def pipeline():
    # The repository's default config; only the dashboard moves to a free port.
    config = load_config().replace(scheduler={"dashboard_address": "127.0.0.1:0"})
    with Pipeline(config) as p:
        yield p


def pytest_collection_modifyitems(items):
    # Tests that start their own cluster run first, before the session cluster exists.
    items.sort(key=lambda item: item.get_closest_marker("own_cluster") is None)
