"""An engine whose engine core has died: every request fails as vLLM's then do. ``kill_engine``,
run on a worker with ``client.run``, puts one in place of its engine (this module is pickled by
value, so the workers need not import the tests)."""

import sys

import cloudpickle

from pipeline.worker.engine import EngineDead
from pipeline.worker.fake_engine import FakeEngine
from pipeline.worker.plugin import PLUGIN_NAME

cloudpickle.register_pickle_by_value(sys.modules[__name__])


class DeadEngine(FakeEngine):
    async def generate(self, prompt_ids, request_id, sampling, priority=0):
        raise EngineDead("vLLM engine core died: EngineDeadError")


def kill_engine(dask_worker) -> None:
    dask_worker.plugins[PLUGIN_NAME].engine = DeadEngine()
