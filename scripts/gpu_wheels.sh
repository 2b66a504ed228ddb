#!/usr/bin/env bash
# The wheels a GPU machine without network needs for scripts/gpu_check.sh, downloaded here into
# .whl/ (git-ignored) for Python 3.12 on x86-64 Linux: z3-solver (the compiler target's shape
# constraints), at the version this checkout pins. Carry .whl to the machine; gpu_check.sh installs
# what is there into a temporary site directory.
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
