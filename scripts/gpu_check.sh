#!/usr/bin/env bash
# The one GPU check: every Triton kernel against its float64 reference, then the kernel benchmarks.
# With an NVIDIA GPU the kernels compile and run natively; without one the same checks run under
# Triton's interpreter (TRITON_INTERPRET=1), so this script is exercised on every machine.
# The paged-KV kernels are checked in every storage dtype, float64 included (float64 tl.dot and
# float64 accumulation: tests/test_paged_kv_kernels.py, the Penelope exactness oracle), and their
# benchmark checks its outputs at realistic shapes -- once in the default dtype, once in float64.
# vLLM's own kernels -- Punica LoRA shrink/expand (tests/test_scute_vllm_punica.py) and the
# paged-attention and reshape-and-cache kernels (tests/test_paged_kv_vllm_kernels.py; natively with
# IEEE float32 dots) -- are in the -m kernel list and run from the pinned wheel's sources:
# scripts/gpu_wheels.sh copies the extracted sources into .engines/ (about 1.5 MB, git-ignored);
# carry it, and they are required here (a missing engine fails instead of skipping).
#   scripts/gpu_check.sh            # uses python3 (or $PYTHON)
#   scripts/gpu_check.sh --quick    # kernels + kernel benchmarks only, in under 8 minutes on a GPU
#
# A GPU machine's Python differs from ours (other torch/triton versions, no z3-solver, fuzzkit not
# installed, no network): wheels put in .whl/ by scripts/gpu_wheels.sh are installed into a
# temporary site directory, and fuzzkit's entry points (targets come only from them) are declared
# from pyproject.toml in a temporary dist-info, so the checkout runs as it is.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
export OMP_NUM_THREADS=1
QUICK=0
for arg in "$@"; do
  case "$arg" in
    --quick) QUICK=1 ;;
    *) echo "gpu_check: unknown argument $arg (use --quick or nothing)" >&2; exit 2 ;;
  esac
done
SECONDS=0
step() { echo "== [$SECONDS s] $*"; }

if ls .whl/*.whl >/dev/null 2>&1; then
  site=$(mktemp -d)
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target "$site" .whl/*.whl
  export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
fi
if ! "$PY" -c "import importlib.metadata as m; m.distribution('fuzzkit')" 2>/dev/null; then
  meta=$(mktemp -d)
  "$PY" - "$meta" <<'PYEOF'
import pathlib, sys, tomllib
info = pathlib.Path(sys.argv[1]) / "fuzzkit-0+checkout.dist-info"
info.mkdir()
project = tomllib.loads(pathlib.Path("pyproject.toml").read_text())["project"]
info.joinpath("METADATA").write_text("Metadata-Version: 2.1\nName: fuzzkit\nVersion: 0+checkout\n")
lines = []
for group, points in project.get("entry-points", {}).items():
    lines.append(f"[{group}]")
    lines += [f"{name} = {value}" for name, value in points.items()]
info.joinpath("entry_points.txt").write_text("\n".join(lines) + "\n")
PYEOF
  export PYTHONPATH="$PWD:$meta${PYTHONPATH:+:$PYTHONPATH}"
fi
if [ -d .engines/src ]; then
  export FUZZKIT_CACHE="$PWD/.engines" FUZZKIT_REQUIRE_ENGINES=1
else
  echo "gpu_check: no .engines/ (run scripts/gpu_wheels.sh here and carry .engines): vLLM's kernels will be skipped" >&2
fi
"$PY" -c "import z3" 2>/dev/null || echo "gpu_check: z3-solver missing (compiler kernels need it): run scripts/gpu_wheels.sh here and carry .whl" >&2

if "$PY" -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
  mode=cuda
  unset TRITON_INTERPRET
  "$PY" -c "import torch, triton; print('gpu_check: native CUDA on', torch.cuda.get_device_name(0), '| torch', torch.__version__, '| triton', triton.__version__)"
else
  mode=interpreter
  export TRITON_INTERPRET=1
  "$PY" -c "import torch, triton; print('gpu_check: no GPU; Triton interpreter | torch', torch.__version__, '| triton', triton.__version__)"
fi

step "kernels against their references (pytest -m kernel, mode=$mode)"
parallel=()
if [ "$mode" = cuda ] && "$PY" -c "import xdist" 2>/dev/null; then parallel=(-n 4); fi
set +e
"$PY" -m pytest -m kernel -q -p no:cacheprovider -p no:randomly "${parallel[@]}" tests
rc=$?
set -e
if [ "$rc" -eq 5 ]; then echo "gpu_check: no kernel tests were collected" >&2; exit 1; fi
if [ "$rc" -ne 0 ]; then echo "gpu_check: kernel tests failed (rc=$rc)" >&2; exit "$rc"; fi

for bench in benchmarks/kernel_*.py; do
  [ -e "$bench" ] || continue
  step "$bench (mode=$mode)"
  "$PY" "$bench"
done
if [ "$QUICK" = 1 ]; then
  for bench in benchmarks/ann_kernels.py benchmarks/attention_index_kernels.py benchmarks/scute.py; do
    step "$bench (mode=$mode)"
    "$PY" "$bench"
  done
  echo "gpu_check: done --quick in $SECONDS s (mode=$mode)"
  exit 0
fi
echo "== benchmarks/kernel_paged_kv.py --dtype fp64 (mode=$mode)"
"$PY" benchmarks/kernel_paged_kv.py --dtype fp64
# ann: the OctEx query-path kernels (candidate distances, expansion) at benchmark shapes against
# float64 / the NumPy hooks, then the Triton search's queries/s vs the NumPy search's.
echo "== benchmarks/ann_kernels.py (mode=$mode)"
"$PY" benchmarks/ann_kernels.py
echo "== benchmarks/ann_kernels.py --storage turbo8 --metric ip (mode=$mode)"
"$PY" benchmarks/ann_kernels.py --storage turbo8 --metric ip
# attention_index: the lightning-indexer kernels (representative scoring, member scoring with the
# in-kernel causal mask, top-k) at benchmark shapes against float64 / the NumPy hooks, with timings,
# then a whole HiSA search through the Triton hooks vs the NumPy search.
echo "== benchmarks/attention_index_kernels.py (mode=$mode)"
"$PY" benchmarks/attention_index_kernels.py
# scute: one scute_kernel launch over a decode batch mixing every adapter method vs lora_kernel with
# the same number of pure-LoRA adapters (ms, overhead %), each configuration checked against a
# float64 slot-form reference first; interpreter mode: small shapes, correctness only.
echo "== benchmarks/scute.py (mode=$mode)"
"$PY" benchmarks/scute.py
echo "== benchmarks/kvguard_overhead.py (mode=$mode)"
"$PY" benchmarks/kvguard_overhead.py --programs 200 --rounds 3 --kernels off
# compiler: the fusing compiler's generated Triton kernels (native on a GPU) fuzzed until each of
# its miscompile mutants is caught against the eager float64 reference.
echo "== fuzzkit mutants compiler (mode=$mode)"
"$PY" -m fuzzkit.cli mutants compiler --budget 60
echo "gpu_check: done in $SECONDS s (mode=$mode)"
