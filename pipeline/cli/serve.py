"""``python -m pipeline serve``: the batch service on the resident cluster, or on an embedded one
that lives as long as the service. It listens beyond loopback only with an API key."""

from __future__ import annotations

import contextlib
import ipaddress
import os
import signal
from pathlib import Path
from typing import TYPE_CHECKING

from pipeline import console

if TYPE_CHECKING:
    from pipeline.config import Config

API_KEY_ENV = "PIPELINE_API_KEY"
DEFAULT_PORT = 8000
MAX_FILE_BYTES = 200 * 1024 * 1024  # OpenAI's limits on a batch's input file
MAX_REQUESTS = 50_000


def add_serve_parser(sub) -> None:
    serve = sub.add_parser(
        "serve", help="serve OpenAI's Files and Batches API over HTTP on the local cluster (docs/service.md)"
    )
    serve.add_argument("--config", help="cluster.yaml (default: the repository's)")
    serve.add_argument(
        "--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1; any other needs an API key)"
    )
    serve.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"port (default {DEFAULT_PORT})")
    serve.add_argument(
        "--store",
        metavar="DIR",
        help="folder of the files and batches (default: model.cache_dir/service)",
    )
    serve.add_argument(
        "--api-key",
        help=f"the key every request must carry (Authorization: Bearer KEY); default: ${API_KEY_ENV}",
    )
    serve.add_argument(
        "--max-file-bytes",
        type=int,
        default=MAX_FILE_BYTES,
        help=f"largest file accepted (default {MAX_FILE_BYTES}, OpenAI's 200 MB)",
    )
    serve.add_argument(
        "--max-requests",
        type=int,
        default=MAX_REQUESTS,
        help=f"most requests in a batch's input file (default {MAX_REQUESTS}, OpenAI's)",
    )
    serve.add_argument(
        "--part-rows",
        type=int,
        default=10_000,
        help="a batch's answers per committed file (default 10000; also committed every 30 s): "
        "what a service stopped midway keeps",
    )
    serve.add_argument(
        "--max-window-s",
        type=int,
        metavar="SECONDS",
        help="every batch expires at most this long after it is created, whatever its "
        "completion_window (default: its completion_window alone)",
    )


def loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:  # a host name: it may resolve to any interface
        return False


def serve(args, config: "Config") -> int:
    import uvicorn  # (start time: only when serving)

    from pipeline.client.pipeline import Pipeline
    from pipeline.config import ConfigError
    from pipeline.service.app import create_app
    from pipeline.service.runner import Runner
    from pipeline.service.store import Store, default_root

    api_key = args.api_key or os.environ.get(API_KEY_ENV) or None
    if args.part_rows < 1:  # (main answers a ConfigError on stderr, with exit code 2)
        raise ConfigError(f"--part-rows must be at least 1 (got {args.part_rows})")
    if args.max_window_s is not None and args.max_window_s < 1:
        raise ConfigError(f"--max-window-s must be at least 1 (got {args.max_window_s})")
    if not loopback(args.host) and api_key is None:
        raise ConfigError(f"serving on {args.host} (beyond this machine) needs an API key: --api-key or ${API_KEY_ENV}")

    class Server(uvicorn.Server):
        """uvicorn's server, except that Ctrl-C or SIGTERM is not raised again once it has stopped
        serving, so the service can hand its batches' jobs to the next service and close cleanly."""

        @contextlib.contextmanager
        def capture_signals(self):
            previous = {sig: signal.signal(sig, self.handle_exit) for sig in (signal.SIGINT, signal.SIGTERM)}
            try:
                yield
            finally:
                for sig, handler in previous.items():
                    signal.signal(sig, handler)

    store = Store(Path(args.store) if args.store else default_root(config), args.max_file_bytes, args.max_requests)
    with Pipeline(config) as pipeline:
        runner = Runner(pipeline, store, args.part_rows, max_window_s=args.max_window_s)
        resumed = runner.resume()
        if resumed:
            console.notify(f"resuming {len(resumed)} batch(es): {', '.join(resumed)}")
        console.notify(
            f"serving OpenAI's Files and Batches API at http://{args.host}:{args.port}/v1 (store: {store.root})"
        )
        try:
            Server(
                uvicorn.Config(create_app(runner, store, api_key), host=args.host, port=args.port, log_level="warning")
            ).run()
        finally:
            runner.close()
    return 0
