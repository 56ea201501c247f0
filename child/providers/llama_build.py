"""The installed llama.cpp (llama-cpp-python) on this CPU: does the build fit, and loading it safely.

Two ways the embedded model dies in native code on some x86-64 machines, and what
hermesd does about each (docs/operations.md, "The embedded model"):

* **Weight repacking.** llama.cpp's CPU backend repacks quantized weights into
  "extra buffer types" (AVX-512/AMX layouts) when it loads a model; on Intel
  Sapphire Rapids (AVX-512 + AMX) that path crashed (SIGSEGV) with SmolLM2 Q4_1.
  :func:`load_llama` loads every model with ``llama_model_params.use_extra_bufts =
  False``, which works with any build (the cost is measured by
  ``bench/bench_local_model.py``).
* **A build for another CPU.** pip compiles llama-cpp-python from source with
  ``-march=native`` (llama.cpp's default) and caches the wheel; a cache reused on a
  machine with fewer instruction-set extensions runs into SIGILL.
  :func:`mismatch` compares what the build was compiled with
  (``llama_print_system_info``) with what this CPU has (``/proc/cpuinfo`` flags), so
  the provider refuses with a clear error instead of crashing, and ``.ci/run`` /
  ``demo.sh`` (``python -m child.providers.llama_build``) rebuild portably.

``Llama`` (0.3.x) takes no ``use_extra_bufts`` argument and loads the model inside
its constructor from ``llama_cpp.llama_model_default_params()``, so the field is set
by wrapping that function for the duration of the constructor (under a lock).
"""

from __future__ import annotations

import re
import sys
import threading
from pathlib import Path
from typing import Any

CPU_FLAGS = {
    "SSE3": "pni", "SSSE3": "ssse3", "AVX": "avx", "AVX2": "avx2", "F16C": "f16c", "FMA": "fma",
    "BMI2": "bmi2", "AVX_VNNI": "avx_vnni", "AVX512": "avx512f", "AVX512_VBMI": "avx512vbmi",
    "AVX512_VNNI": "avx512_vnni", "AVX512_BF16": "avx512_bf16", "AMX_INT8": "amx_int8",
    "AMX_BF16": "amx_bf16",
}
"""llama.cpp's feature names (``llama_print_system_info``: compiled in) → Linux ``/proc/cpuinfo`` flags."""

PORTABLE_CMAKE_ARGS = "-DGGML_NATIVE=OFF"
"""CMake flags of the portable build: llama.cpp's x86-64 baseline without ``-march=native``
(SSE3, SSSE3, AVX, AVX2, FMA, F16C, BMI2: any x86-64 CPU since 2013–2015)."""

REBUILD_HINT = (f"rebuild it portably: pip cache remove llama_cpp_python; CMAKE_ARGS='{PORTABLE_CMAKE_ARGS}' "
                "pip install --force-reinstall --no-deps llama-cpp-python")

_LOAD_LOCK = threading.Lock()


def compiled_features(system_info: str) -> list[str]:
    """The CPU features a build uses, from ``llama_print_system_info()`` text
    (``"CPU : SSE3 = 1 | AVX = 1 | … | REPACK = 1 |"``), limited to :data:`CPU_FLAGS`."""
    return [name for name, on in re.findall(r"([A-Z0-9_]+) = (\d)", system_info)
            if on == "1" and name in CPU_FLAGS]


def cpu_flags(cpuinfo: str | None = None) -> set[str]:
    """The ``flags`` of the first processor in ``/proc/cpuinfo`` (or ``cpuinfo`` text)."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            return set()
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "flags":
            return set(value.split())
    return set()


def mismatch(system_info: str | None = None, flags: set[str] | None = None) -> list[str]:
    """Features the installed llama.cpp was compiled with that this CPU lacks (``[]``: it fits,
    or this is no x86 Linux with ``/proc/cpuinfo``).  Imports ``llama_cpp`` unless
    ``system_info`` is given."""
    if system_info is None:
        import llama_cpp

        system_info = llama_cpp.llama_print_system_info().decode("utf-8", "replace")
    flags = cpu_flags() if flags is None else flags
    if not flags:
        return []
    return [name for name in compiled_features(system_info) if CPU_FLAGS[name] not in flags]


def load_llama(model_path: str, *, extra_bufts: bool = False, **kwargs: Any) -> Any:
    """``llama_cpp.Llama(model_path, **kwargs)`` with ``use_extra_bufts`` set to
    ``extra_bufts`` (default off: no weight repacking; see the module doc).  A version
    of llama-cpp-python without the field loads as it would anyway."""
    import llama_cpp
    from llama_cpp import llama_cpp as low_level

    original = low_level.llama_model_default_params

    def default_params() -> Any:
        params = original()
        if hasattr(params, "use_extra_bufts"):
            params.use_extra_bufts = extra_bufts
        return params

    with _LOAD_LOCK:
        low_level.llama_model_default_params = default_params
        try:
            return llama_cpp.Llama(model_path=model_path, **kwargs)
        finally:
            low_level.llama_model_default_params = original


def main() -> int:
    """``python -m child.providers.llama_build``: exit 0 when the installed llama.cpp fits this
    CPU, 1 (one line on stderr naming the missing features) when it does not."""
    missing = mismatch()
    if missing:
        print(f"llama-cpp-python was built for another CPU: it uses {', '.join(missing)}, which this CPU "
              f"lacks; {REBUILD_HINT}", file=sys.stderr)
        return 1
    print("llama-cpp-python fits this CPU")
    return 0


if __name__ == "__main__":
    sys.exit(main())
