#!/usr/bin/env bash
# What a GPU machine without network needs for scripts/gpu_check.sh: wheels downloaded here into
# .whl/ (git-ignored) for Python 3.12 on x86-64 Linux -- z3-solver (the compiler target's shape
# constraints), at the version this checkout pins -- and the pinned vLLM's kernel sources in
# .engines/. Carry both (run's carry: [".whl", ".engines"]); gpu_check.sh installs the wheels
# into a temporary site directory and points FUZZKIT_CACHE at .engines.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
version=$("$PY" -c "import importlib.metadata as m; print(m.version('z3-solver'))")
platforms=()
for p in manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64 \
         manylinux1_x86_64 manylinux_2_31_x86_64 manylinux_2_34_x86_64 manylinux_2_35_x86_64; do
  platforms+=(--platform "$p")
done
"$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  "${platforms[@]}" -d .whl "z3-solver==$version"
ls -la .whl
# The real-engine sources the kernel adapters import (vLLM's Triton kernels), extracted from the
# pinned, hash-checked wheels: copied into .engines/ (git-ignored) to carry alongside .whl.
"$PY" - <<'PYEOF'
from fuzzkit.targets.paged_kv.adapters import vllm_kernels
from fuzzkit.targets.scute.adapters import vllm_punica
for adapter in (vllm_kernels, vllm_punica):
    adapter.modules()  # extracts what each imports (fetching the wheel once if needed)
PYEOF
root=${FUZZKIT_CACHE:-$HOME/.cache/fuzzkit}
rm -rf .engines && mkdir -p .engines/src
cp -r "$root/src/vllm-0.33.0" .engines/src/
du -sh .engines
