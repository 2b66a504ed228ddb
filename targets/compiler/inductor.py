"""torch.compile (backend Inductor) as a compiler under test.

On CPU Inductor emits C++ (compiled with the system g++); on a GPU, Triton.  Each process gets
its own Inductor cache directory (``TORCHINDUCTOR_CACHE_DIR`` under the temp dir, keyed by pid,
set before the first compile), so parallel workers never share or race on cache files.

Inductor at its real speed (issue 22): a fuzzing process compiles hundreds of small graphs one
after the other, so what a single compile costs *around* the graph matters as much as the graph.

* **Compiled graphs are reused** (:class:`CompiledGraphs`): cases that differ only in their
  input values (Hypothesis mutates values of an earlier case often) share one compiled callable,
  looked up by :func:`structure_key` -- the whole graph (ops, attributes, shapes, names,
  outputs), the dtype, the dynamic mode, the inputs' layouts and the variants' input shapes (a
  variant run recompiles or hits a guard: a reused callable must have seen the same sequence),
  the device, and the Inductor and Dynamo configuration hashes; nothing but the input tensors'
  values is left out, so a hit runs exactly the graph a fresh compile would build. Dynamo's
  caches are reset (``torch._dynamo.reset()``, and the table emptied) every :data:`CACHE_SIZE`
  compiles, not before every compile: each built ``GraphModule`` has its own ``forward`` code
  object (fx names its source uniquely), so different graphs never count against one frame's
  recompile limit, and the periodic reset keeps the accumulated limit and memory bounded.
* **No compile-worker pool**: ``compile_threads = 1`` (unless ``TORCHINDUCTOR_COMPILE_THREADS``
  says otherwise) -- a fuzz case compiles a few kernels, and starting the subprocess pool
  (another interpreter importing torch) costs more than it saves, on a shared machine above all.
* **The vector-ISA probe is made once per machine** (:func:`probe_vector_isas`): Inductor checks
  every SIMD extension the CPU lists by compiling and loading a test program with g++ (about
  three compiles of the ATen vector headers, 5 to 20 s) in each new process, into the cache
  directory; that probe alone runs in a directory shared by this user's processes, where its
  products are keyed by compiler version, ISA flags and torch version (Inductor's own
  fingerprint), so later processes only re-load them.  The answer is still Inductor's own.
* **A C++ compiler driver** (:func:`cpp_driver`): Inductor compiles with whatever ``CXX`` names.
  A C driver there (``CXX=gcc``, ``cc``, ``clang``: set by some CI images) compiles the C++ but
  links without libstdc++, and the kernels whose Python bindings build an error message then
  fail to load (``undefined symbol: _ZTTNSt7__cxx1119basic_ostringstream...``) -- on such a
  machine every integer-division or indexing graph was an ``error-class:ImportError`` false
  alarm.  The same toolchain's C++ driver is used instead where it exists.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from typing import Any, Callable, Hashable, Mapping, Sequence

_PREPARED: list[str] = []
_CONFIGURED: list[int] = []
#: Compiles since Dynamo's caches were last reset.
_SINCE_RESET = [0]

#: Compiles between two resets of Dynamo's caches (and the most compiled graphs kept).
CACHE_SIZE = 64


def cache_dir() -> str:
    """This process's Inductor cache directory (created and exported on first use)."""
    if not _PREPARED or _PREPARED[0] != f"{os.getpid()}":
        path = os.path.join(tempfile.gettempdir(), f"fuzzkit_inductor_{os.getpid()}")
        os.makedirs(path, exist_ok=True)
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = path
        _PREPARED[:] = [f"{os.getpid()}", path]
    return _PREPARED[1]


def shared_probe_dir() -> str:
    """Where the vector-ISA probe's build products live: one directory per user, shared by
    processes (Inductor names them by their inputs' hash and writes them atomically)."""
    user = os.getuid() if hasattr(os, "getuid") else "user"
    return os.path.join(tempfile.gettempdir(), f"fuzzkit_inductor_isa_{user}")


def _private_dir(path: str) -> bool:
    """Whether ``path`` is (now) a directory of this user that nobody else may write to: the
    probe loads the shared objects it finds there."""
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
        info = os.lstat(path)
    except OSError:
        return False
    import stat

    mine = not hasattr(os, "getuid") or info.st_uid == os.getuid()
    return stat.S_ISDIR(info.st_mode) and mine and not info.st_mode & 0o022


def probe_vector_isas() -> None:
    """Run Inductor's vector-ISA probe (``cpu_vec_isa.valid_vec_isa_list``, cached for the
    process) with ``TORCHINDUCTOR_CACHE_DIR`` pointing at :func:`shared_probe_dir`, then point it
    back at this process's directory (a shared directory that is not privately ours is not used:
    the probe then runs in this process's own)."""
    from torch._inductor import cpu_vec_isa

    own = cache_dir()
    shared = shared_probe_dir()
    if not _private_dir(shared):
        cpu_vec_isa.valid_vec_isa_list()
        return
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = shared
    try:
        cpu_vec_isa.valid_vec_isa_list()
    finally:
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = own


#: A C compiler driver's name (with a target prefix and a version suffix, as Debian installs
#: them: ``x86_64-linux-gnu-gcc-12``) and the C++ driver of the same toolchain.
_C_DRIVER = re.compile(r"(?P<prefix>.*?)(?P<driver>gcc|clang|cc)(?P<suffix>-[0-9.]+)?")
_CPP_OF_C = {"gcc": "g++", "clang": "clang++", "cc": "c++"}


def cpp_driver(compiler: str) -> str:
    """The C++ driver to use for ``compiler``: itself, unless it is a C driver whose C++
    sibling (same directory, target prefix and version) is installed."""
    directory, name = os.path.split(compiler)
    match = _C_DRIVER.fullmatch(name)
    if match is None:
        return compiler
    sibling = match["prefix"] + _CPP_OF_C[match["driver"]] + (match["suffix"] or "")
    candidate = os.path.join(directory, sibling)
    return candidate if shutil.which(candidate) else compiler


def configure() -> None:
    """Once per process: the cache directory, a single compile thread (no worker pool) unless
    the environment asks for more, a C++ compiler driver, and the vector-ISA probe."""
    if _CONFIGURED == [os.getpid()]:
        return
    cache_dir()
    import torch._inductor.config as inductor_config

    if "TORCHINDUCTOR_COMPILE_THREADS" not in os.environ:
        inductor_config.compile_threads = 1
    compilers = inductor_config.cpp.cxx
    if isinstance(compilers, (tuple, list)):
        inductor_config.cpp.cxx = tuple(c and cpp_driver(c) for c in compilers)  # type: ignore[assignment]
    elif isinstance(compilers, str):
        inductor_config.cpp.cxx = cpp_driver(compilers)  # type: ignore[assignment]
    probe_vector_isas()
    _CONFIGURED[:] = [os.getpid()]


def structure_key(graph: Mapping[str, Any], dtype: str, device: str, **options: Any) -> Hashable:
    """Everything a compile of ``graph`` depends on except the input values: the graph itself,
    the dtype and device the inputs have, the compile options, and the Inductor and Dynamo
    configuration (their hashes of every option that is not marked compile-ignored)."""
    import torch._dynamo.config as dynamo_config
    import torch._inductor.config as inductor_config

    from fuzzkit.targets.compiler.graphs.build import frozen

    return (
        frozen(graph),
        str(dtype),
        str(device),
        frozen(options),
        inductor_config.get_hash(),
        dynamo_config.get_hash(),
    )


class CompiledGraphs:
    """Compiled callables by :func:`structure_key`.  Never more than :data:`CACHE_SIZE`: every
    entry is a compile, and every :data:`CACHE_SIZE` compiles :func:`compile_fx` resets Dynamo
    and empties the table."""

    def __init__(self) -> None:
        self.table: dict[Hashable, Callable[..., tuple[Any, ...]]] = {}
        self.hits = 0
        self.misses = 0

    def get(self, key: Hashable) -> Callable[..., tuple[Any, ...]] | None:
        found = self.table.get(key)
        if found is None:
            self.misses += 1
        else:
            self.hits += 1
        return found

    def put(self, key: Hashable, compiled: Callable[..., tuple[Any, ...]]) -> None:
        self.table[key] = compiled


COMPILED = CompiledGraphs()


def fresh_dynamo() -> None:
    """Every :data:`CACHE_SIZE` compiles: ``torch._dynamo.reset()`` (bounded memory, and far
    from Dynamo's accumulated recompile limit), and the compiled graphs dropped with it."""
    if _SINCE_RESET[0] < CACHE_SIZE:
        return
    import torch._dynamo

    torch._dynamo.reset()
    COMPILED.table.clear()
    _SINCE_RESET[0] = 0


def compile_fx(
    gm: Any, example_inputs: Sequence[Any], dynamic: bool | str | None = False
) -> Callable[..., tuple[Any, ...]]:
    """``torch.compile(gm, backend="inductor", dynamic=dynamic, fullgraph=True)``, compiled now
    (the first call runs on ``example_inputs``, so compile errors surface here); one call = one
    compile (counted).  ``dynamic``: False (static: a new shape recompiles), True (every dim a
    symbol, except Dynamo's 0/1 specialisation) or ``"marked"`` (``dynamic=None``: the dims the
    caller marked on ``example_inputs`` with ``torch._dynamo.maybe_mark_dynamic`` are symbols,
    the rest static until Dynamo's automatic dynamic shapes make them so)."""
    configure()
    import torch

    from fuzzkit.targets.compiler import count_compile

    count_compile()
    fresh_dynamo()
    _SINCE_RESET[0] += 1
    mode = None if dynamic == "marked" or dynamic is None else bool(dynamic)
    compiled = torch.compile(gm, backend="inductor", dynamic=mode, fullgraph=True)

    def run(*tensors: Any) -> tuple[Any, ...]:
        out = compiled(*tensors)
        return tuple(out) if isinstance(out, (tuple, list)) else (out,)

    run(*example_inputs)
    return run
