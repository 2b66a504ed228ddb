"""Target ``quant``: turbo8 / turbo16 rotated quantization (Qdrant 1.20's TurboQuant family).

A vector is rotated by a fixed orthogonal matrix (seeded permutations, sign flips and
block Walsh--Hadamard transforms), rescaled to unit per-coordinate variance, quantized per
coordinate with a N(0, 1) codebook (8 or 16 bits) and stored with one float32 scale; queries are
rotated but not quantized.  :mod:`fuzzkit.targets.quant.reference` documents the codec.

Inputs (JSON scalars and NumPy arrays)::

    bits           8 | 16                      turbo8 / turbo16
    codebook       "lloyd_max" | "uniform"
    rotation_seed  int in [0, 2**64)           seeds the rotation's permutations and signs
    precision      "float32" | "float64"       optional, default float32: encode/rotate dtype
    vectors        float32 (n, D)              stored vectors (rows independent: reducible)
    queries        float32 (m, D)              queries (rows independent: reducible)

Outputs::

    codes             uint8 | uint16 (n, D)    stored codes
    scales            float32 (n,)             stored scale ||v|| / ||centroids[codes]||
    rotated_vectors   (n, D)                   R v in the working precision (diagnostic)
    rotated_queries   (m, D)                   R q in the working precision
    scores            (m, n)                   asymmetric: scale_j <R q_i, c_j>
    symmetric_scores  (n, n)                   scale_j scale_k <c_j, c_k>
    encoded_bytes     int                      bytes per stored vector: D*bits/8 + 4

The reference additionally returns ``"aux"`` (float64 ``z``, rounding bands, magnitudes) for the
oracle; implementations need not.

Implementations: ``numpy`` (vectorized float32, :mod:`.numpy_impl`) and ``triton`` (NumPy
encoder + a Triton scoring kernel with the codebook gather inside, :mod:`.kernels`).

Reach: the shared encoder declares its Walsh--Hadamard block edge (``numpy_impl.ENCODER_
THRESHOLDS``, on the target), the Triton implementation the kernel's tiles as launched in this
mode (:mod:`.tiles`: 16 x 16 x 64 under the interpreter, 64 x 64 x 32 on a GPU); the strategy
(:mod:`.strategies`) draws ``n``, ``m`` and ``D`` at and past them, and every float from the
shared :mod:`fuzzkit.values` domain clamped into the validator's ``[1e-12, 1e12]``.
"""

from __future__ import annotations

from fuzzkit import reach, relations, triton_support
from fuzzkit.target import Implementation, Property, Target, lazy
from fuzzkit.targets.quant import checks, numpy_impl, reference, sizes, tiles, triton_impl


def _numpy_run(inputs):  # type: ignore[no-untyped-def]
    return numpy_impl.run(inputs)


def _triton_run(inputs):  # type: ignore[no-untyped-def]
    return triton_impl.run(inputs)


def _triton_unavailable():  # type: ignore[no-untyped-def]
    """``triton_support.unavailable`` imports triton; choose interpreter mode *first*, or every
    kernel launched later in this process would mix compiled and interpreted JIT functions."""
    triton_support.prepare()
    return triton_support.unavailable()


def _strategy(thresholds: tuple[reach.Threshold, ...] = ()):  # type: ignore[no-untyped-def]
    from fuzzkit.targets.quant import strategies

    return strategies.inputs(thresholds)


PROPERTIES = (
    Property("rotation-orthogonal", checks.rotation_orthogonal,
             "R preserves norms and inner products to 1e-12 (float64 run)"),
    Property("deterministic", relations.deterministic, "the same case twice gives identical outputs"),
    Property("scale-equivariant", checks.scale_equivariant,
             "codes(4v) == codes(v), scale(4v) == 4 scale(v)", uses_output=True),
    Property("self-score", checks.self_score, "symmetric self-score == ||v||^2 within bound",
             uses_output=True),
    Property("zero-vector", checks.zero_vector,
             "a zero vector: no NaN, the zero code, scale 0, scores 0"),
    Property("encoded-size", checks.encoded_size, "D*bits/8 + 4 bytes, bits-wide codes",
             uses_output=True),
)


def target() -> Target:
    """The ``quant`` target (the registry's entry point ``fuzzkit.targets.quant:target``)."""
    from fuzzkit.targets.quant.limits import LIMITS
    from fuzzkit.targets.quant.mutants import DEVICE_MUTANTS, MUTANTS

    return Target(
        name="quant",
        description="turbo8/turbo16 rotated quantization (Qdrant TurboQuant family): "
                    "rotation, Lloyd-Max/uniform codes, asymmetric and symmetric scores",
        strategy=_strategy,
        reference=reference.run,
        implementations={
            "numpy": Implementation(
                "numpy", _numpy_run, backend="numpy",
                description="vectorized NumPy: fast Walsh-Hadamard, searchsorted codes",
                sources=("fuzzkit.targets.quant.numpy_impl",),
            ),
            "triton": Implementation(
                "triton", _triton_run, backend="triton",
                description="NumPy encoder + Triton scoring kernel (codebook gather in-kernel)",
                unavailable=_triton_unavailable,
                # the kernel's tiles as launched in this mode (small under the interpreter)
                thresholds=tiles.thresholds,
                sources=("fuzzkit.targets.quant.triton_impl", "fuzzkit.targets.quant.kernels",
                         "fuzzkit.targets.quant.tiles"),
            ),
        },
        oracle=checks.oracle,
        properties=PROPERTIES,
        mutants=(*MUTANTS, *DEVICE_MUTANTS),
        reducible=("vectors", "queries"),
        validate=checks.validate,
        thresholds=numpy_impl.ENCODER_THRESHOLDS,  # the shared encoder's Hadamard blocks
        sizes=sizes.SIZES,
        sources=("fuzzkit.targets.quant.numpy_impl",),  # the shared encoder every implementation runs
        limits=LIMITS,
        schema=lazy("fuzzkit.targets.quant.schema:schema"),  # what describe shows
    )
