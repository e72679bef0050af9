"""``Runtime``: compile, cache (memory and disk), load and launch kernels for one library."""
from __future__ import annotations

import json
import os
import threading
import time
import warnings
from collections.abc import Callable
from typing import Generic, TypeVar, Union

from .backends import Backend, get_backend
from .config import Config
from .disk_cache import DIGESTS_KEY, CacheEntry, DiskCache, artifact_digests, verify, write_file_sync
from .env import Env
from .errors import DeepJITError
from .hashing import FNV1a
from .include_parser import IncludeParser
from .mem_cache import MemCache
from .options import Options


class Runtime:
    """One per library (and backend). Construction reads the environment once, in upstream order:
    config, env, device (lazy), default options, cache roots, toolchain discovery, include parser."""

    def __init__(self, config: Config, backend: Union[str, type] = "host"):
        if not isinstance(config, Config):
            raise TypeError(f"config: expected a deepjit.Config, got {type(config).__name__}")
        self.env = Env(config.env_prefix)
        backend_cls = get_backend(backend) if isinstance(backend, str) else backend
        self.backend: Backend = backend_cls(self.env, config)
        self.config = self.backend.effective_config(config)
        self.default_compiler_options = self.backend.default_compiler_options()
        self.default_launch_options = self.backend.default_launch_options()
        self.disk_cache = DiskCache.from_env(self.env)
        self.backend.discover()
        self.parser = IncludeParser(self.config.include_dirs, self.config.include_prefixes)
        self.hash_base = FNV1a().update(self.config.extra_signature).update(self.backend.compiler_hash())
        self.mem_cache: MemCache = MemCache()
        self._key_memo: dict = {}

    @property
    def device(self):
        return self.backend.device

    # ---- keys -----------------------------------------------------------------------------------
    def _options(self, override):
        return self.default_compiler_options.override_with(override)

    def _key(self, source: str, options) -> str:
        h = self.hash_base.copy()
        for component in options.hash_components():
            h.update(component)
        h.update(self.backend.post_hook_hash(options, self.config))
        h.update(self.parser.parse_into_hash(source))
        return h.hexdigest()

    def cache_key(self, source: str, options=None) -> str:
        """32 hex digits: extra signature, compiler, effective flags, post hook, source + tracked includes."""
        return self._key(source, self._options(options))

    def _memo_key(self, source: str, options) -> tuple[str, object]:
        # The parser memoises headers for the runtime's life, so a key never changes in-process;
        # the memo makes a repeated compile() call one dict lookup instead of a source hash. It is keyed
        # by the options' current values, defaults included: both may be edited in place.
        try:
            override = options.memo_token() if isinstance(options, Options) else options
            memo = (source, override, self.default_compiler_options.memo_token())
            found = self._key_memo.get(memo)
        except TypeError:  # unhashable options: no memo
            merged = self._options(options)
            return self._key(source, merged), merged
        if found is None:
            merged = self._options(options)
            found = self._key_memo[memo] = (self._key(source, merged), merged)
        return found

    # ---- compile --------------------------------------------------------------------------------
    def compile(self, name: str, source: str, options=None):
        """The loaded kernel; the same key gives the same kernel object within this runtime."""
        key, merged = self._memo_key(source, options)
        kernel = self.mem_cache.get(key)
        if kernel is not None:
            return kernel
        return self.mem_cache.get_or_create(key, lambda: self._compile_and_load(name, source, key, merged))

    def compile_without_load(self, name: str, source: str, options=None) -> str:
        """The published artifact directory (no load, no kernel-count check, no memory-cache entry)."""
        key, merged = self._memo_key(source, options)
        return self._compile_to_dir(name, source, key, merged)[0]

    def _compile_and_load(self, name: str, source: str, key: str, options):
        path, hit = self._compile_to_dir(name, source, key, options)
        if not hit:
            return self._load(path)
        try:
            return self._load(path)
        except Exception as exc:  # noqa: BLE001 - a damaged binary fails in many ways; a fresh build decides
            self._set_aside(path, f"failed to load ({type(exc).__name__}: {exc})")
        return self._load(self._build(self.disk_cache.entry(name, key, rebuild=True), source, options))

    def _compile_to_dir(self, name: str, source: str, key: str, options) -> tuple[str, bool]:
        """(published dir, whether it was a verified hit); a hit whose digests fail is rebuilt once."""
        entry = self.disk_cache.entry(name, key)
        if entry.is_hit:
            problem = verify(entry.final_path)
            if problem is None:
                return entry.final_path, True
            self._set_aside(entry.final_path, problem)
            entry = self.disk_cache.entry(name, key, rebuild=True)
        return self._build(entry, source, options), False

    def _build(self, entry: CacheEntry, source: str, options) -> str:
        try:
            command = self.backend.compile(source, entry.tmp_path, options)
            meta = {"command": command, "config": self.config.to_json(),
                    "compiler_info": self.backend.compiler_info(), "compiler_options": options.to_json(),
                    DIGESTS_KEY: artifact_digests(entry.tmp_path)}
            write_file_sync(os.path.join(entry.tmp_path, "meta.json"), json.dumps(meta, separators=(",", ":")))
            return entry.commit()
        finally:
            entry.abandon()

    def _set_aside(self, path: str, problem: str) -> None:
        aside = self.disk_cache.set_aside(path)
        where = f"moved it to {aside}" if aside else "it could not be moved (read-only root), so it stays"
        warnings.warn(f"deepjit: cached kernel {path} {problem}; {where} and rebuilding it once", RuntimeWarning,
                      stacklevel=4)

    def _load(self, path: str):
        debug = self.env.get_bool("JIT_DEBUG")
        if debug:
            print(f"Loading {path}", flush=True)
        start = time.perf_counter()
        kernel = self.backend.load(path)
        if debug or self.env.get_bool("JIT_PRINT_LOAD_TIME"):
            print(f"Load time ({path}): {(time.perf_counter() - start) * 1e3:.2f} ms", flush=True)
        return kernel

    # ---- launch ---------------------------------------------------------------------------------
    def launch(self, kernel, launch_options=None, *args):
        if kernel is None:
            raise DeepJITError("kernel must not be null")
        options = self.default_launch_options.override_with(launch_options)
        return kernel.launch(options, *args)


T = TypeVar("T")


class LazyInit(Generic[T]):
    """Holds a factory; the object is created on first ``get()``. A failing factory leaves it empty."""

    def __init__(self, factory: Callable[[], T] | None):
        self._factory = factory
        self._value: T | None = None
        self._lock = threading.Lock()

    def get(self) -> T:
        value = self._value
        if value is not None:
            return value
        if self._factory is None:
            raise DeepJITError("lazy object must be initialized before use")
        with self._lock:
            if self._value is None:
                value = self._factory()
                if value is None:
                    raise DeepJITError("lazy factory must not return nullptr")
                self._value = value
            return self._value

    def reset(self, factory: Callable[[], T] | None) -> None:
        """Reassigns the holder (C++ ``holder = LazyInit(...)``): the next ``get()`` builds from
        ``factory``; objects handed out before stay valid for whoever holds them."""
        with self._lock:
            self._factory, self._value = factory, None

    @property
    def initialized(self) -> bool:
        return self._value is not None

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self.get(), name)


def create_lazy_jit(config: Config, backend: Union[str, type] = "host") -> LazyInit[Runtime]:
    """Nothing (toolkit, cache dir, device) is touched until the first use."""
    return LazyInit(lambda: Runtime(config, backend))


def register_python_api(module, lazy_jit: LazyInit[Runtime]) -> None:
    """Gives ``module`` the runtime class as ``Runtime`` and ``get_jit()``, which initialises the
    holder on first call and returns its shared runtime. ``get_jit`` reads the holder at each call,
    so it follows a later ``lazy_jit.reset(...)``; an initialisation error (a missing toolkit, say)
    surfaces from the first ``get_jit()``, not from the import that registered it."""
    if not isinstance(lazy_jit, LazyInit):
        raise TypeError(f"lazy_jit: expected a deepjit.LazyInit (see create_lazy_jit), got {type(lazy_jit).__name__}")

    def get_jit() -> Runtime:
        return lazy_jit.get()

    module.Runtime = Runtime
    module.get_jit = get_jit
