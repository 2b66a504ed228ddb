"""Inductor C++ (CPU) vectorized codegen lowers torch.expm1(x) to `exp(x) - 1`
(torch/_inductor/codegen/cpp.py, CppVecOverrides.expm1), losing all precision for small |x|
(catastrophic cancellation); eager uses Sleef expm1 / std::expm1 and is correct."""
import sys
try:
    import torch
except Exception as e:  # pragma: no cover
    print("cannot import torch:", e); sys.exit(2)
print("torch", torch.__version__)
try:
    x = torch.tensor([-1.4156751e-05, 1e-8, -2e-36, 3e-4], dtype=torch.float32)
    fn = torch.compile(torch.expm1, backend="inductor", fullgraph=True)
    got = fn(x)
    eager = torch.expm1(x)
    ref = torch.expm1(x.double())
except Exception as e:
    print("cannot run:", type(e).__name__, e); sys.exit(2)
for i in range(x.numel()):
    print(f"x={x[i].item():.9g} eager={eager[i].item():.9g} compiled={got[i].item():.9g} float64={ref[i].item():.9g}")
if not torch.equal(got, eager):
    rel = ((got.double() - eager.double()).abs() / eager.double().abs()).max().item()
    print(f"REPRODUCES: compiled expm1 != eager expm1 (max relative error {rel:.3g}; eager matches float64)")
    sys.exit(1)
print("compiled matches eager")
sys.exit(0)
