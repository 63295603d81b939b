"""A shard's LoRA adapters: a row's ``adapter``, a name in ``model.adapters``, a local folder or an fsspec URL, as a
local PEFT folder the engine can load. An adapter at a URL is fetched once into the cache folder. Each adapter is
checked before any request uses it, so a broken one is the row's error: vLLM stops its engine core on an adapter it
cannot load."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import shutil
import threading
import uuid
from pathlib import Path

from pipeline.data.storage import LOCAL_PREFIXES, filesystem, is_url, local_path


class AdapterError(ValueError):
    """A row's adapter that cannot be used; the message says which and why."""


class Adapters:
    def __init__(self, named: dict[str, str], cache_dir: Path, max_rank: int, storage_options: dict | None = None):
        self.named, self.cache_dir, self.max_rank = dict(named), Path(cache_dir), max_rank
        self.storage_options = storage_options or {}
        self._ready: dict[str, str] = {}  # adapter -> its checked local folder
        self._failed: dict[str, str] = {}  # adapter -> why it cannot be used
        self._fetching: dict[str, asyncio.Future] = {}
        self.ids: dict[str, int] = {}  # adapter -> a number of its own (vLLM's lora_int_id)
        self._fetch_lock = threading.Lock()

    async def folder(self, adapter: str) -> str:
        """``adapter``'s checked local folder, fetched first if it is at a URL."""
        if adapter in self._ready:
            return self._ready[adapter]
        if adapter in self._failed:
            raise AdapterError(self._failed[adapter])
        pending = self._fetching.get(adapter)
        if pending is None:
            pending = self._fetching[adapter] = asyncio.get_running_loop().run_in_executor(None, self._prepare, adapter)
        try:
            folder = await asyncio.shield(pending)
        except AdapterError as exc:
            self._failed[adapter] = str(exc)
            raise
        finally:
            self._fetching.pop(adapter, None)
        self._ready[adapter] = folder
        self.ids.setdefault(adapter, len(self.ids) + 1)
        return folder

    def _prepare(self, adapter: str) -> str:
        where = self.named.get(adapter, adapter)
        if is_url(where):
            folder = self._fetch(adapter, where)
        else:
            folder = local_path(where) if where.startswith(LOCAL_PREFIXES) else os.path.expanduser(where)
            if adapter not in self.named and not os.path.isabs(folder) and not os.path.isdir(folder):
                names = ", ".join(sorted(self.named)) or "none"
                raise AdapterError(f"adapter {adapter!r} is not a name in model.adapters ({names}) nor a folder")
        return check_adapter(adapter, folder, self.max_rank)

    def _fetch(self, adapter: str, url: str) -> str:
        with self._fetch_lock:  # two names for one URL fetch it once
            folder = self.cache_dir / "adapters" / hashlib.sha256(url.encode()).hexdigest()[:16]
            if (folder / "adapter_config.json").is_file():
                return str(folder)
            fs, path = filesystem(url, self.storage_options)
            partial = folder.with_name(f"{folder.name}.{uuid.uuid4().hex}.partial")
            try:
                fs.get(path.rstrip("/") + "/", str(partial) + "/", recursive=True)
            except FileNotFoundError:
                raise AdapterError(f"adapter {adapter!r}: nothing at {url}") from None
            except (OSError, ValueError) as exc:
                raise AdapterError(f"adapter {adapter!r}: cannot fetch {url}: {type(exc).__name__}: {exc}") from None
            if not (partial / "adapter_config.json").is_file():
                raise AdapterError(f"adapter {adapter!r}: {url} has no adapter_config.json (a PEFT adapter's folder)")
            try:
                os.replace(partial, folder)
            except OSError:  # another worker on this machine fetched it meanwhile
                if not (folder / "adapter_config.json").is_file():
                    raise
                shutil.rmtree(partial, ignore_errors=True)
            return str(folder)


def check_adapter(adapter: str, folder: str, max_rank: int) -> str:
    """``folder`` if the engine can load it, else an ``AdapterError`` saying why."""
    config = Path(folder) / "adapter_config.json"
    try:
        settings = json.loads(config.read_text())
    except FileNotFoundError:
        raise AdapterError(
            f"adapter {adapter!r}: {folder} has no adapter_config.json (a PEFT adapter's folder)"
        ) from None
    except (OSError, ValueError) as exc:
        raise AdapterError(f"adapter {adapter!r}: {config} cannot be read: {exc}") from None
    rank = settings.get("r") if isinstance(settings, dict) else None
    if not isinstance(rank, int) or settings.get("peft_type", "LORA") != "LORA":
        raise AdapterError(f"adapter {adapter!r}: {config} is not a LoRA adapter's (no rank r)")
    if rank > max_rank:
        raise AdapterError(f"adapter {adapter!r} has rank {rank}, more than engine.max_lora_rank ({max_rank})")
    weights = Path(folder) / "adapter_model.safetensors"
    if weights.is_file():
        try:  # read the header: a file vLLM cannot read would stop the engine, not fail the row
            from safetensors import safe_open

            with safe_open(str(weights), "numpy") as f:
                names = list(f.keys())
        except Exception as exc:  # noqa: BLE001 - safetensors raises its own error types
            raise AdapterError(f"adapter {adapter!r}: {weights} cannot be read: {exc}") from None
        if not any("lora_A" in k for k in names):
            raise AdapterError(f"adapter {adapter!r}: {weights} holds no LoRA weights (lora_A)")
    elif not (Path(folder) / "adapter_model.bin").is_file():
        raise AdapterError(f"adapter {adapter!r}: {folder} has no adapter_model.safetensors")
    return str(Path(folder).resolve())
