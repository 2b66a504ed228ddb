"""The paged KV Triton kernels against the float64 reference, their mutants, and KVGuard's
device checks.  Natively on a GPU; under ``TRITON_INTERPRET=1`` without one.

Cases are small (every interpreted program costs milliseconds): 1-4 requests of 1-40 tokens,
``q_len`` 1..``seq_len`` (decode and chunked prefill), block sizes 1-16, 1-2 kv heads, GQA
groups 1/2/4, head dims 8/16/32, optional sliding window, block tables drawn as a random
permutation of the pool (with null-padded extra columns), the pool pre-filled with stale
garbage, writes in shuffled order with padding slots.  Queries are scaled to give near-uniform
softmax, ordinary scores, or large score ranges.  Outputs are compared with
``fuzzkit.oracles.close`` using the bound derived in :mod:`fuzzkit.targets.paged_kv.attention_reference`.

float64 storage (float64 accumulation end to end) has its own section: the same derivation
with float64 roundoff, doubled because the float64 reference's own error is no longer
negligible next to the kernel's -- under 5e-13 of ``sum_j p_j |v_j|`` at ordinary scores.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any, Callable, Optional

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
from hypothesis import HealthCheck, Phase, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from fuzzkit import triton_support  # noqa: E402

pytestmark = pytest.mark.kernel

# Before anything imports Triton: it decides at import time whether to interpret.
triton_support.prepare()
if triton_support.unavailable():
    pytest.skip(triton_support.unavailable(), allow_module_level=True)

import torch  # noqa: E402
import triton.language as tl  # noqa: E402

from fuzzkit.oracles.close import close, gamma  # noqa: E402
from fuzzkit.targets.paged_kv import attention_reference as ref_mod  # noqa: E402
from fuzzkit.targets.paged_kv import kernel_mutants  # noqa: E402
from fuzzkit.targets.paged_kv import kernels as K  # noqa: E402

SETTINGS = dict(deadline=None, database=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
#: Every storage dtype the kernels accept; float64 is checked with its own bound (FLOAT64 below),
#: so the generic strategies and the float32/16-bit bound tests keep to DTYPES.
STORAGE = {**DTYPES, "float64": torch.float64}
#: query scale: near-uniform softmax / ordinary / large score ranges
Q_SCALES = (0.01, 1.0, 4.0)
DEVICE = triton_support.device()


def ints(values: Any, dtype: Any = None) -> Any:
    """An integer tensor on the kernel device (int32 unless told)."""
    return torch.tensor(values, dtype=dtype or torch.int32, device=DEVICE)


# ============================================================================ cases


@dataclasses.dataclass(frozen=True)
class Case:
    dtype: str
    block_size: int
    kv_heads: int
    group: int
    head_dim: int
    seq_lens: tuple[int, ...]
    q_lens: tuple[int, ...]
    window: Optional[int]
    spare_blocks: int
    extra_cols: int
    q_scale: float
    seed: int
    #: launch tiles (None: the mode's defaults): tokens per write program, rows per attention
    #: program -- small ones put a few dozen tokens into several programs
    block_t: Optional[int] = None
    block_m: Optional[int] = None


@st.composite
def cases(draw: Any, dtypes: tuple[str, ...] = tuple(DTYPES), max_requests: int = 4,
          max_seq: int = 40, windows: bool = True, small_tiles: bool = False,
          q_scales: tuple[float, ...] = Q_SCALES) -> Case:
    n = draw(st.integers(1, max_requests))
    seq_lens = tuple(draw(st.integers(1, max_seq)) for _ in range(n))
    q_lens = tuple(draw(st.integers(1, s)) for s in seq_lens)
    window = draw(st.one_of(st.none(), st.integers(1, max_seq))) if windows else None
    return Case(
        dtype=draw(st.sampled_from(dtypes)),
        block_size=draw(st.sampled_from([1, 2, 4, 8, 16])),
        kv_heads=draw(st.sampled_from([1, 2])),
        group=draw(st.sampled_from([1, 2, 4])),
        head_dim=draw(st.sampled_from([8, 16, 32])),
        seq_lens=seq_lens, q_lens=q_lens, window=window,
        spare_blocks=draw(st.integers(0, 3)), extra_cols=draw(st.integers(0, 2)),
        q_scale=draw(st.sampled_from(q_scales)), seed=draw(st.integers(0, 2**31 - 1)),
        block_t=draw(st.sampled_from([4, 8])) if small_tiles else None,
        block_m=draw(st.sampled_from([16, 32])) if small_tiles else None,
    )


@dataclasses.dataclass
class Built:
    """Device tensors of one case plus the per-request K/V the reference uses."""

    case: Case
    key_cache: Any
    value_cache: Any
    block_tables: Any
    seq_lens: Any
    query_start_loc: Any
    query: Any
    keys: list  # per request, storage dtype (cpu)
    values: list
    tables: np.ndarray
    slot_mapping: Any  # shuffled, with padding
    token_request: Any
    token_pos: Any
    write_key: Any
    write_value: Any
    num_blocks: int


def build(case: Case) -> Built:
    rng = np.random.default_rng(case.seed)
    gen = torch.Generator().manual_seed(case.seed)
    dtype = STORAGE[case.dtype]
    device = K.triton_support.device()
    b, hkv, d = case.block_size, case.kv_heads, case.head_dim
    heads = hkv * case.group
    blocks_of = [-(-s // b) for s in case.seq_lens]
    num_blocks = 1 + sum(blocks_of) + case.spare_blocks
    pool = rng.permutation(np.arange(1, num_blocks))
    width = max(blocks_of) + case.extra_cols
    tables = np.zeros((len(case.seq_lens), width), dtype=np.int32)
    taken = 0
    for r, nb in enumerate(blocks_of):
        tables[r, :nb] = pool[taken:taken + nb]
        taken += nb

    def randn(*shape: int, scale: float = 1.0) -> Any:
        # float64 cases draw float64 values: float32-representable inputs would hide a float32
        # round trip in the kernels.
        wide = torch.float64 if dtype == torch.float64 else torch.float32
        return (torch.randn(*shape, generator=gen, dtype=wide) * scale).to(dtype)

    # The pool holds stale garbage; one spare block past the end absorbs off-by-one writes of
    # mutants (the cache tensors are views of the first num_blocks blocks).
    key_store = randn(num_blocks + 1, b, hkv, d, scale=3.0)
    value_store = randn(num_blocks + 1, b, hkv, d, scale=3.0)
    # A zero guard entry before the table: an off-by-one mutant's index -1 reads the null block.
    table_store = torch.zeros(tables.size + 2, dtype=torch.int32)
    table_store[1:1 + tables.size] = torch.from_numpy(tables.reshape(-1))
    keys = [randn(s, hkv, d) for s in case.seq_lens]
    values = [randn(s, hkv, d) for s in case.seq_lens]
    queries = [randn(q, heads, d, scale=case.q_scale) for q in case.q_lens]

    # Every position of every request is written, in shuffled order, with padding slots.
    rows = [(r, p) for r, s in enumerate(case.seq_lens) for p in range(s)]
    rows += [(-1, -1)] * int(rng.integers(0, 4))
    order = rng.permutation(len(rows))
    rows = [rows[i] for i in order]
    slots = [int(tables[r, p // b]) * b + p % b if r >= 0 else -1 for r, p in rows]
    zero_row = torch.zeros(hkv, d, dtype=dtype)
    write_key = torch.stack([keys[r][p] if r >= 0 else zero_row for r, p in rows])
    write_value = torch.stack([values[r][p] if r >= 0 else zero_row for r, p in rows])
    qsl = np.concatenate([[0], np.cumsum(case.q_lens)]).astype(np.int32)

    to = lambda x: x.to(device)  # noqa: E731
    return Built(
        case=case,
        key_cache=to(key_store)[:num_blocks], value_cache=to(value_store)[:num_blocks],
        block_tables=to(table_store)[1:1 + tables.size].view(tables.shape),
        seq_lens=to(torch.tensor(case.seq_lens, dtype=torch.int32)),
        query_start_loc=to(torch.from_numpy(qsl)), query=to(torch.cat(queries)),
        keys=keys, values=values, tables=tables,
        slot_mapping=to(torch.tensor(slots, dtype=torch.int64)),
        token_request=to(torch.tensor([max(r, 0) for r, _ in rows], dtype=torch.int32)),
        token_pos=to(torch.tensor([max(p, 0) for _, p in rows], dtype=torch.int32)),
        write_key=to(write_key), write_value=to(write_value), num_blocks=num_blocks,
    )


def reference(built: Built) -> ref_mod.Reference:
    f64 = lambda x: x.double().numpy()  # noqa: E731
    return ref_mod.reference_attention(
        [f64(k) for k in built.keys], [f64(v) for v in built.values],
        built.query.double().cpu().numpy(), built.query_start_loc.cpu().tolist(),
        sliding_window=built.case.window)


def shadow_for(built: Built, max_requests: int = 4, capacity: int = 256) -> K.GuardShadow:
    """The correct shadow: each request owns its table's blocks exclusively and reads them."""
    shadow = K.GuardShadow.create(built.num_blocks, built.case.block_size, max_requests,
                                  capacity, device=str(built.key_cache.device))
    for r, s in enumerate(built.case.seq_lens):
        for p in built.tables[r, :-(-s // built.case.block_size)]:
            shadow.block_owner[int(p)] = r
            shadow.readable[r, int(p)] = 1
    return shadow


def run(built: Built, guarded: bool = False, shadow: Optional[K.GuardShadow] = None,
        lowp_dot: Optional[bool] = None) -> Any:
    """Write every token through the write kernel, then attend; returns ``out``."""
    out = torch.full_like(built.query, float("nan"))
    window = built.case.window
    if guarded:
        assert shadow is not None
        K.write_kv_guarded(built.write_key, built.write_value, built.key_cache,
                           built.value_cache, built.slot_mapping,
                           token_request=built.token_request, token_pos=built.token_pos,
                           shadow=shadow, block_t=built.case.block_t)
        K.paged_attention_guarded(
            built.query, built.key_cache, built.value_cache, built.block_tables,
            built.seq_lens, built.query_start_loc, out, sliding_window=window,
            request_ids=torch.arange(len(built.case.seq_lens), dtype=torch.int32,
                                     device=out.device), shadow=shadow, lowp_dot=lowp_dot,
            block_m=built.case.block_m)
    else:
        K.write_kv(built.write_key, built.write_value, built.key_cache, built.value_cache,
                   built.slot_mapping, block_t=built.case.block_t)
        K.paged_attention(built.query, built.key_cache, built.value_cache, built.block_tables,
                          built.seq_lens, built.query_start_loc, out, sliding_window=window,
                          max_query_len=max(built.case.q_lens), lowp_dot=lowp_dot,
                          block_m=built.case.block_m)
    return out


def verdict(case: Case, guarded: bool = False, lowp_dot: Optional[bool] = None) -> Any:
    built = build(case)
    shadow = shadow_for(built) if guarded else None
    out = run(built, guarded, shadow, lowp_dot)
    failure = reference(built).check(out, case.dtype)
    return failure, shadow


# ============================================================================ correctness


@settings(max_examples=80, **SETTINGS)
@given(cases())
def test_attention_matches_float64_reference(case: Case) -> None:
    failure, _ = verdict(case)
    assert failure is None, f"{case}: {failure.message}"


@settings(max_examples=30, **SETTINGS)
@given(cases(small_tiles=True, max_seq=48))
def test_small_launch_tiles_match_the_reference(case: Case) -> None:
    """Tiles are launch parameters (the fuzzing driver launches small ones under the
    interpreter): several token and query tiles per launch give the same answers."""
    failure, _ = verdict(case)
    assert failure is None, f"{case}: {failure.message}"
    failure, shadow = verdict(case, guarded=True)
    assert failure is None and not shadow.violations(), case


def test_tile_parameters_are_checked() -> None:
    assert K.write_tiles(40, 16, block_t=8, block_e=8) == (8, 8)
    with pytest.raises(ValueError, match="powers of two"):
        K.write_tiles(40, 16, block_t=6)
    assert K.attention_config(8, 2, 40, torch.float32, block_m=16).block_q == 8
    with pytest.raises(ValueError, match="block_m"):
        K.attention_config(8, 4, 40, torch.float32, block_m=8)


@settings(max_examples=25, **SETTINGS)
@given(cases())
def test_guarded_kernels_agree_and_report_nothing_on_correct_inputs(case: Case) -> None:
    built = build(case)
    plain = run(built)
    built = build(case)
    shadow = shadow_for(built)
    guarded = run(built, guarded=True, shadow=shadow)
    assert shadow.violations() == [] and int(shadow.count.item()) == 0, shadow.violations()[:5]
    if triton_support.interpreted():  # same arithmetic; natively the compiler may reorder
        assert torch.equal(plain, guarded), "guarded output differs from the plain kernel's"
    failure = reference(built).check(guarded, case.dtype)
    assert failure is None, f"{case}: {failure.message}"
    # the shadow now says: every position written, in its own slot
    b = case.block_size
    for r, s in enumerate(case.seq_lens):
        slots = built.tables[r, np.arange(s) // b] * b + np.arange(s) % b
        assert shadow.slot_written[slots].eq(1).all()
        assert shadow.slot_pos[slots].cpu().numpy().tolist() == list(range(s))


@settings(max_examples=20, **SETTINGS)
@given(cases(dtypes=("float16",)))
def test_fp16_tensor_core_path_within_bound(case: Case) -> None:
    """``lowp_dot``: 16-bit operands with float32 accumulation, ``P`` rounded to float16 (the
    GPU default for 16-bit storage; fp16 ``tl.dot`` also runs under the interpreter)."""
    failure, _ = verdict(case, lowp_dot=True)
    assert failure is None, f"{case}: {failure.message}"


@settings(max_examples=20, **SETTINGS)
@given(cases(windows=False))
def test_write_kv_places_every_row_exactly(case: Case) -> None:
    built = build(case)
    before_k, before_v = built.key_cache.clone(), built.value_cache.clone()
    K.write_kv(built.write_key, built.write_value, built.key_cache, built.value_cache,
               built.slot_mapping)
    expected_k, expected_v = before_k.flatten(0, 1), before_v.flatten(0, 1)
    slots = built.slot_mapping
    keep = slots >= 0
    expected_k[slots[keep]] = built.write_key[keep]
    expected_v[slots[keep]] = built.write_value[keep]
    assert torch.equal(built.key_cache.flatten(0, 1), expected_k)
    assert torch.equal(built.value_cache.flatten(0, 1), expected_v)


def test_bound_dominates_and_is_tight_enough() -> None:
    """close's bound (with the arguments we pass) is never below the derived bound, and stays a
    small fraction of the output magnitude: a wrong key moves outputs by O(W)."""
    for seed in range(6):
        for dtype in DTYPES:
            case = Case(dtype, 4, 2, 2, 32, (40, 23), (40, 5), None, 1, 0, 4.0 if seed % 2
                        else 0.01, seed)
            ref = reference(build(case))
            assert (ref.close_bound(dtype) >= ref.bound(dtype) * (1 - 1e-12)).all()
            relative = float((ref.bound(dtype) / ref.weight).max())
            assert relative < {"float32": 1e-2, "float16": 1e-2, "bfloat16": 2e-2}[dtype]


@pytest.mark.parametrize("dtype", list(DTYPES))
def test_a_dropped_key_is_above_the_bound(dtype: str) -> None:
    """Near-uniform softmax over 40 keys: dropping one key is caught even in bfloat16."""
    case = Case(dtype, 8, 1, 1, 32, (40,), (1,), None, 0, 0, 0.01, 11)
    built = build(case)
    ref = reference(built)
    dropped = ref_mod.reference_attention(
        [built.keys[0][1:].double().numpy()], [built.values[0][1:].double().numpy()],
        built.query.double().cpu().numpy(), [0, 1])
    failure = ref.check(torch.from_numpy(dropped.out).to(DTYPES[dtype]), dtype)
    assert failure is not None and failure.details["worst"]["ratio"] > 2


def test_empty_and_decode_only_batches() -> None:
    case = Case("float32", 16, 2, 4, 16, (1, 17, 40), (1, 1, 1), 5, 0, 1, 1.0, 3)
    failure, _ = verdict(case)
    assert failure is None, failure.message
    built = build(case)
    empty = torch.zeros((0, 8, 16), device=DEVICE)
    K.paged_attention(empty, built.key_cache, built.value_cache, built.block_tables[:0],
                      built.seq_lens[:0], built.query_start_loc[:1], empty)
    K.write_kv(empty[:, :2], empty[:, :2], built.key_cache, built.value_cache,
               ints([], torch.int64))


def test_launchers_reject_bad_arguments() -> None:
    built = build(Case("float32", 4, 1, 1, 8, (5,), (2,), None, 0, 0, 1.0, 0))
    out = torch.zeros_like(built.query)
    with pytest.raises(ValueError, match="storage dtype"):
        K.paged_attention(built.query.half(), built.key_cache, built.value_cache,
                          built.block_tables, built.seq_lens, built.query_start_loc, out)
    with pytest.raises(ValueError, match="slot_mapping"):
        K.write_kv(built.write_key, built.write_value, built.key_cache, built.value_cache,
                   built.slot_mapping[:1])
    with pytest.raises(ValueError, match="shadow.block_owner"):
        K.write_kv_guarded(built.write_key, built.write_value, built.key_cache,
                           built.value_cache, built.slot_mapping,
                           token_request=built.token_request, token_pos=built.token_pos,
                           shadow=object())


# ============================================================================ float64 storage

U64 = 2.0**-53
#: Charge per float64 operation: round-to-nearest ``u``, doubled to cover libdevice's
#: ``__nv_exp2`` (the GPU's float64 ``exp2``; NumPy's under the interpreter), as V32 does for
#: float32 in attention_reference.
V64 = 2.0 * U64
#: float64 bound relative to ``W = sum_j p_j |v_j|``: the widest the cases below reach
#: (q scale 4, head_dim 32: score magnitudes ~60) and at ordinary scores (q scale <= 1).
FLOAT64_RELATIVE_MAX = 2e-12
FLOAT64_RELATIVE_ORDINARY = 5e-13


def kappa64(head_dim: int, keys_used: Any, sigma: Any) -> np.ndarray:
    """``kappa`` of attention_reference's derivation with every operation in float64: score
    error ``gamma_{D+2}``, exponent arguments and rescales ``4 v sigma~``, one ``exp2`` per key
    and rescale, sums ``gamma_{3n+1}`` / ``gamma_{3n}``, the division; no storage rounding (the
    output is stored in the accumulation dtype) and no ``P`` rounding."""
    n = np.asarray(keys_used, dtype=np.float64)
    s = np.asarray(sigma, dtype=np.float64)
    g = lambda k: (k * V64) / (1.0 - k * V64)  # noqa: E731
    g_score = g(head_dim + 2)
    e = g_score * s + 4.0 * V64 * s * (1.0 + g_score) + n * 2.0 * V64 / (1.0 - 2.0 * V64)
    g_a, g_l = g(3.0 * n + 1.0), g(3.0 * n)
    hi = np.expm1(2 * e + np.log1p(g_a) + np.log1p(2 * V64) - np.log1p(-g_l))
    lo = -np.expm1(-2 * e + np.log1p(-g_a) + np.log1p(-2 * V64) - np.log1p(g_l))
    return np.maximum(hi, lo)


def float64_close_arguments(ref: ref_mod.Reference) -> dict[str, Any]:
    """``close`` arguments for a float64 kernel output against the float64 reference.

    The reference's own error (scores from ``D`` products, ``exp``, two ``n``-term sums, a
    division) is bounded by the same ``kappa64`` -- it does fewer roundings per step -- so
    ``|kernel - reference| <= 2 kappa64 W + U`` with ``U = 2 n 2**-1022 max|v|`` for weights
    below the smallest normal.  Passed as in ``Reference.close_arguments``: ``reduction_length
    0``, ``factor = 2 kappa_max / gamma_3(u)``, ``magnitude = W + U / (2 kappa_max)``."""
    k_max = 2.0 * float(kappa64(ref.head_dim, ref.keys_used[:, None], ref.sigma).max())
    n = ref.keys_used.astype(np.float64)[:, None, None]
    underflow = 2.0 * n * 2.0**-1022 * ref.vmax
    return {"dtype": "float64", "reduction_length": 0,
            "magnitude": ref.weight + underflow / k_max, "factor": k_max / gamma(3, U64)}


def check64(built: Built, out: Any) -> Any:
    """None, or the ``close`` failure of a float64 output against the float64 reference."""
    assert out.dtype == torch.float64, out.dtype
    ref = reference(built)
    return close(ref.out, out.cpu().numpy(), name="attention", **float64_close_arguments(ref))


FLOAT64_CASES = cases(dtypes=("float64",))


@settings(max_examples=20, **SETTINGS)
@given(FLOAT64_CASES)
def test_float64_attention_matches_float64_reference(case: Case) -> None:
    built = build(case)
    out = run(built)
    failure = check64(built, out)
    assert failure is None, f"{case}: {failure.message}"


@settings(max_examples=8, **SETTINGS)
@given(FLOAT64_CASES)
def test_float64_guarded_kernels_agree_and_report_nothing(case: Case) -> None:
    plain = run(build(case))
    built = build(case)
    shadow = shadow_for(built)
    guarded = run(built, guarded=True, shadow=shadow)
    assert shadow.violations() == [] and int(shadow.count.item()) == 0, shadow.violations()[:5]
    if triton_support.interpreted():
        assert torch.equal(plain, guarded), "guarded float64 output differs from the plain one"
    failure = check64(built, guarded)
    assert failure is None, f"{case}: {failure.message}"


def test_float64_bound_is_about_1e_12_relative_or_tighter() -> None:
    """The float64 tolerance, relative to ``W``: <= 2e-12 at the widest score range the cases
    reach, <= 5e-13 at ordinary scores -- seven orders of magnitude below float32's."""
    widest = ordinary = 0.0
    for seed in range(4):
        for q_scale in Q_SCALES:
            case = Case("float64", 4, 2, 2, 32, (40, 23), (40, 5), None, 1, 0, q_scale, seed)
            args = float64_close_arguments(reference(build(case)))
            relative = args["factor"] * gamma(3, U64)
            widest = max(widest, relative)
            if q_scale <= 1.0:
                ordinary = max(ordinary, relative)
    assert widest <= FLOAT64_RELATIVE_MAX and ordinary <= FLOAT64_RELATIVE_ORDINARY, (
        widest, ordinary)


def _float64_decode_case() -> Case:
    """40 keys at ordinary scores, decode and chunked prefill, GQA; several key steps."""
    return Case("float64", 4, 2, 2, 16, (40, 23), (1, 7), None, 1, 0, 1.0, 7)


def test_float64_output_is_float64_accurate() -> None:
    """Not float32 accuracy passed off as float64: the error is a few float64 ulps of ``W``."""
    built = build(_float64_decode_case())
    out = run(built)
    ref = reference(built)
    relative = float((np.abs(out.numpy() - ref.out) / ref.weight).max())
    assert relative < 1e-14, relative
    assert check64(built, out) is None


def test_float64_write_kv_is_bitwise() -> None:
    """The write kernel copies float64 rows bit for bit (no float32 round trip: the rows are
    not float32-representable), skipping padding slots."""
    built = build(_float64_decode_case())
    assert not torch.equal(built.write_key.float().double(), built.write_key)
    before = built.key_cache.clone()
    K.write_kv(built.write_key, built.write_value, built.key_cache, built.value_cache,
               built.slot_mapping)
    expected = before.flatten(0, 1)
    keep = built.slot_mapping >= 0
    expected[built.slot_mapping[keep]] = built.write_key[keep]
    assert torch.equal(built.key_cache.flatten(0, 1).view(torch.int64),
                       expected.view(torch.int64))
    guarded = build(_float64_decode_case())
    shadow = shadow_for(guarded)
    K.write_kv_guarded(guarded.write_key, guarded.write_value, guarded.key_cache,
                       guarded.value_cache, guarded.slot_mapping,
                       token_request=guarded.token_request, token_pos=guarded.token_pos,
                       shadow=shadow)
    assert shadow.violations() == []
    assert torch.equal(guarded.key_cache, built.key_cache)
    assert torch.equal(guarded.value_cache, built.value_cache)


def _perturbed_key(built: Built, relative: float) -> None:
    """Scale one written key element of request 0 (position 5, kv head 0, dim 0) by
    ``1 + relative``, after the write kernel ran: a tiny corruption of the cache."""
    b = built.case.block_size
    block = int(built.tables[0, 5 // b])
    built.key_cache[block, 5 % b, 0, 0] *= 1.0 + relative


@pytest.mark.parametrize("relative", [1e-9, 1e-10])
def test_float64_check_catches_a_perturbed_cache_entry(relative: float) -> None:
    """Negative control: one key element off by 1e-9 / 1e-10 relative -- below a float32 ulp
    (6e-8), so no float32 comparison could see it -- fails the float64 comparison."""
    built = build(_float64_decode_case())
    K.write_kv(built.write_key, built.write_value, built.key_cache, built.value_cache,
               built.slot_mapping)
    _perturbed_key(built, relative)
    out = torch.full_like(built.query, float("nan"))
    K.paged_attention(built.query, built.key_cache, built.value_cache, built.block_tables,
                      built.seq_lens, built.query_start_loc, out, max_query_len=7)
    failure = check64(built, out)
    assert failure is not None and failure.details["worst"]["ratio"] > 2, failure


def test_float64_check_catches_float32_accumulation() -> None:
    """Mutant: float64 caches but the kernel compiled with a float32 accumulator (what the
    launchers did for every dtype before float64 storage) -- the comparison must fail."""
    real = K.attention_config

    def float32_accumulator(*args: Any, **kwargs: Any) -> K.AttentionConfig:
        return dataclasses.replace(real(*args, **kwargs), acc_dtype=tl.float32)

    built = build(_float64_decode_case())
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(K, "attention_config", float32_accumulator)
        out = run(built)
    failure = check64(built, out)
    assert failure is not None and failure.details["worst"]["ratio"] > 10, failure


def test_float64_check_catches_a_float32_scale() -> None:
    """Mutant: ``log2(e)`` rounded to float32 (a float32 constant or launch argument in the
    score scale; Triton passes a plain Python float argument as float32) -- caught."""
    built = build(_float64_decode_case())
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(K, "LOG2E", float(np.float32(K.LOG2E)))
        out = run(built)
    failure = check64(built, out)
    assert failure is not None, "a float32-rounded scale passed the float64 check"


def test_float64_guard_names_an_unreadable_block() -> None:
    """KVGuard's device checks are dtype-independent; one of them in float64."""
    built = build(_decode_case(dtype="float64"))
    shadow = shadow_for(built)
    _write(built, shadow)
    block = int(built.tables[1, 1])
    shadow.readable[1, block] = 0
    out = _attend(built, shadow)
    assert out.dtype == torch.float64
    assert {(v.code, v.request, v.block) for v in shadow.violations()} == {
        (K.READ_NOT_READABLE, 1, block)}


def test_float64_launchers_reject_mixed_dtypes_and_lowp_dot() -> None:
    built = build(Case("float64", 4, 1, 1, 8, (5,), (2,), None, 0, 0, 1.0, 0))
    out = torch.zeros_like(built.query)
    with pytest.raises(ValueError, match="storage dtype"):
        K.paged_attention(built.query.float(), built.key_cache, built.value_cache,
                          built.block_tables, built.seq_lens, built.query_start_loc,
                          out.float())
    with pytest.raises(ValueError, match="both alike"):
        K.write_kv(built.write_key, built.write_value, built.key_cache,
                   built.value_cache.float(), built.slot_mapping)
    with pytest.raises(ValueError, match="lowp_dot needs 16-bit storage"):
        K.paged_attention(built.query, built.key_cache, built.value_cache, built.block_tables,
                          built.seq_lens, built.query_start_loc, out, lowp_dot=True)
    with pytest.raises(ValueError, match="float32/float16/bfloat16/float64"):
        K.write_kv(built.write_key.int(), built.write_value.int(), built.key_cache.int(),
                   built.value_cache.int(), built.slot_mapping)


# ============================================================================ mutants


def first_failure(check: Callable[[Case], Any], strategy: Any, max_examples: int) -> Any:
    """Run ``check`` on up to ``max_examples`` generated cases (no shrinking); return
    ``(examples_run, failure)`` for the first failing case, or ``(max_examples, None)``."""
    seen: list[Any] = []

    @settings(max_examples=max_examples, phases=[Phase.generate], **SETTINGS)
    @given(strategy)
    def probe(case: Case) -> None:
        if seen and seen[-1] is not None:
            return
        failure = check(case)
        seen.append(failure)

    probe()
    for i, failure in enumerate(seen):
        if failure is not None:
            return i + 1, failure
    return len(seen), None


#: per mutant: where it can show (a strategy that includes those cases) and the guard codes
#: that name its bug class (empty: invisible to the guard -- only the output oracle sees it).
#: A mutant may trip further codes downstream (a misplaced write is later read at a wrong
#: position); at least one of the named codes must appear.
MUTANT_SETUP: dict[str, tuple[Any, set[int]]] = {
    "slot-off-by-one": (cases(), {K.WRITE_WRONG_OFFSET, K.WRITE_NOT_OWNER, K.WRITE_TWICE}),
    "offset-from-batch-index": (cases(), {K.WRITE_WRONG_OFFSET}),
    "table-ignored": (cases(), {K.READ_NOT_READABLE, K.READ_WRONG_POSITION}),
    "no-causal-mask": (cases(), {K.READ_FUTURE}),
    "reads-past-seq-len": (cases(), {K.READ_NOT_READABLE, K.READ_UNWRITTEN}),
    "gqa-wrong-kv-head": (cases(), set()),
    "previous-block-at-edge": (cases(), {K.READ_WRONG_POSITION, K.READ_NOT_READABLE}),
    "softmax-max-not-updated": (cases(), set()),
    "window-off-by-one": (cases(), set()),
    "wrong-output-row": (cases(), set()),
    # past a tile: only launches of several token / query tiles show these
    "write-tile-offset-dropped": (cases(small_tiles=True), set()),
    "query-tile-position-dropped": (cases(small_tiles=True, max_seq=48), set()),
    # an extreme value: rows whose scores all lie far below 0
    "running-max-zero-init": (cases(q_scales=(300.0,)), set()),
}
MAX_EXAMPLES_TO_CATCH = 25


def test_every_kernel_mutant_is_listed_with_a_citation() -> None:
    assert set(kernel_mutants.KERNEL_MUTANTS) == set(MUTANT_SETUP)
    assert len(kernel_mutants.KERNEL_MUTANTS) >= 8
    for name, (cm, bug_class, citation) in kernel_mutants.KERNEL_MUTANTS.items():
        assert callable(cm) and bug_class and citation and cm.__doc__, name


@pytest.mark.parametrize("name", sorted(MUTANT_SETUP))
def test_kernel_mutant_is_caught_by_the_oracle(name: str) -> None:
    cm = kernel_mutants.KERNEL_MUTANTS[name][0]
    strategy, codes = MUTANT_SETUP[name]
    with cm():
        count, failure = first_failure(lambda case: verdict(case)[0], strategy,
                                       MAX_EXAMPLES_TO_CATCH)
    assert failure is not None, f"{name} escaped {count} generated cases"


@pytest.mark.parametrize("name", sorted(n for n, (_, c) in MUTANT_SETUP.items() if c))
def test_kernel_mutant_trips_the_guard(name: str) -> None:
    """The guarded path launches the mutated kernel too, and KVGuard names the bug class."""
    cm = kernel_mutants.KERNEL_MUTANTS[name][0]
    strategy, codes = MUTANT_SETUP[name]

    def guard_codes(case: Case) -> Any:
        _, shadow = verdict(case, guarded=True)
        found = {v.code for v in shadow.violations()}
        return found if found else None

    with cm():
        count, found = first_failure(guard_codes, strategy, MAX_EXAMPLES_TO_CATCH)
    assert found, f"{name}: no guard record in {count} cases"
    assert found & codes, f"{name}: guard codes {found}, none of {codes}"


def test_mutants_restore_the_clean_kernels() -> None:
    for cm, _, _ in kernel_mutants.KERNEL_MUTANTS.values():
        with cm():
            pass
    assert K.attention_kernel is K.paged_attention_kernel
    assert K.write_kernel is K.write_kv_kernel


# ============================================================================ guard codes


def _decode_case(**overrides: Any) -> Case:
    base = dict(dtype="float32", block_size=4, kv_heads=1, group=2, head_dim=8,
                seq_lens=(6, 9), q_lens=(1, 3), window=None, spare_blocks=2, extra_cols=0,
                q_scale=1.0, seed=5)
    base.update(overrides)
    return Case(**base)


def _attend(built: Built, shadow: K.GuardShadow, **kwargs: Any) -> Any:
    out = torch.full_like(built.query, float("nan"))
    K.paged_attention_guarded(
        built.query, built.key_cache, built.value_cache, built.block_tables, built.seq_lens,
        built.query_start_loc, out, request_ids=ints([0, 1]), shadow=shadow, **kwargs)
    return out


def _write(built: Built, shadow: K.GuardShadow, slots: Any = None, requests: Any = None,
           positions: Any = None) -> None:
    K.write_kv_guarded(
        built.write_key, built.write_value, built.key_cache, built.value_cache,
        built.slot_mapping if slots is None else slots,
        token_request=built.token_request if requests is None else requests,
        token_pos=built.token_pos if positions is None else positions, shadow=shadow)


def _slot(built: Built, r: int, p: int) -> int:
    b = built.case.block_size
    return int(built.tables[r, p // b]) * b + p % b


def test_write_into_a_block_of_another_request_or_a_shared_block() -> None:
    built = build(_decode_case())
    shadow = shadow_for(built)
    victim = int(built.tables[1, 0])
    shadow.block_owner[victim] = 0  # request 1's block now belongs to request 0
    shared = int(built.tables[0, 1])
    shadow.block_owner[shared] = K.OWNER_SHARED  # a forked block, copy-on-write missing
    _write(built, shadow)
    found = shadow.violations()
    assert {v.code for v in found} == {K.WRITE_NOT_OWNER}
    assert {v.block for v in found} == {victim, shared}
    by_block = {v.block: v for v in found}
    assert by_block[victim].request == 1 and by_block[shared].request == 0
    v = by_block[victim]
    assert v.slot // 4 == victim and v.position % 4 == v.slot % 4 and v.query_position == -1
    # 4 slots of the victim are written by request 1, 2 of the shared block (positions 4, 5)
    assert sum(1 for v in found if v.block == victim) == 4
    assert sum(1 for v in found if v.block == shared) == 2


def test_write_twice_across_launches_and_within_one() -> None:
    built = build(_decode_case())
    shadow = shadow_for(built)
    _write(built, shadow)
    assert shadow.violations() == []
    one = slice(0, 3)
    _write(built.__class__(**{**built.__dict__, "write_key": built.write_key[one],
                              "write_value": built.write_value[one]}),
           shadow, built.slot_mapping[one], built.token_request[one], built.token_pos[one])
    again = [v for v in shadow.violations() if v.code == K.WRITE_TWICE]
    valid = int((built.slot_mapping[one] >= 0).sum())
    assert len(again) == valid and len(shadow.violations()) == valid
    # two tokens of one launch mapped to the same slot
    fresh = shadow_for(built)
    slot = _slot(built, 1, 2)
    dup = ints([slot, slot], torch.int64)
    pair = dict(requests=ints([1, 1]), positions=ints([2, 2]))
    two = built.__class__(**{**built.__dict__, "write_key": built.write_key[:2],
                             "write_value": built.write_value[:2]})
    _write(two, fresh, dup, **pair)
    assert [v.code for v in fresh.violations()] == [K.WRITE_TWICE]
    assert fresh.violations()[0].slot == slot


def test_write_at_the_wrong_offset() -> None:
    built = build(_decode_case())
    shadow = shadow_for(built)
    b = 4
    slot = int(built.tables[1, 1]) * b + 3  # position 5 belongs at offset 1
    _write(built.__class__(**{**built.__dict__, "write_key": built.write_key[:1],
                              "write_value": built.write_value[:1]}), shadow,
           ints([slot], torch.int64), ints([1]), ints([5]))
    assert [(v.code, v.request, v.slot, v.position) for v in shadow.violations()] == [
        (K.WRITE_WRONG_OFFSET, 1, slot, 5)]


def test_padding_and_out_of_pool_writes() -> None:
    built = build(_decode_case())
    shadow = shadow_for(built)
    two = built.__class__(**{**built.__dict__, "write_key": built.write_key[:2],
                             "write_value": built.write_value[:2]})
    before = built.key_cache.clone()
    outside = built.num_blocks * 4 + 1
    _write(two, shadow, ints([-1, outside], torch.int64), ints([0, 0]), ints([0, 1]))
    assert [(v.code, v.block) for v in shadow.violations()] == [(K.WRITE_NOT_OWNER,
                                                                 built.num_blocks)]
    assert torch.equal(before, built.key_cache)  # the guarded kernel skipped the store


def test_read_of_an_unreadable_block() -> None:
    built = build(_decode_case())
    shadow = shadow_for(built)
    _write(built, shadow)
    block = int(built.tables[1, 1])
    shadow.readable[1, block] = 0
    _attend(built, shadow)
    found = shadow.violations()
    assert {v.code for v in found} == {K.READ_NOT_READABLE}
    assert {(v.request, v.block) for v in found} == {(1, block)}
    # request 1 (9 tokens, queries at 6..8) uses keys 4..7 of that block; query 6 first
    assert sorted(v.position for v in found) == [4, 5, 6, 7]
    assert all(v.query_position == 6 for v in found if v.position <= 6)


def test_read_of_an_unwritten_slot() -> None:
    built = build(_decode_case())
    shadow = shadow_for(built)
    keep = built.slot_mapping != _slot(built, 0, 3)
    _write(built, shadow, torch.where(keep, built.slot_mapping, -1))
    _attend(built, shadow)
    found = shadow.violations()
    assert [(v.code, v.request, v.slot, v.position, v.query_position) for v in found] == [
        (K.READ_UNWRITTEN, 0, _slot(built, 0, 3), 3, 5)]


def test_read_of_a_future_position() -> None:
    """A chunked prefill under the missing-causal-mask kernel: query 6 of request 1 uses keys 7
    and 8 of its own chunk."""
    built = build(_decode_case())
    shadow = shadow_for(built)
    _write(built, shadow)
    with kernel_mutants.no_causal_mask():
        _attend(built, shadow)
    found = shadow.violations()
    assert {v.code for v in found} == {K.READ_FUTURE}
    assert sorted((v.position, v.query_position) for v in found) == [(7, 6), (8, 6)]


def test_read_of_a_wrong_position_from_a_stale_table() -> None:
    """The device table has request 1's first two entries swapped (a stale table): every key
    of those blocks holds another position than the kernel believes."""
    built = build(_decode_case())
    shadow = shadow_for(built)
    _write(built, shadow)
    built.block_tables[1, [0, 1]] = built.block_tables[1, [1, 0]].clone()
    _attend(built, shadow)
    found = shadow.violations()
    assert {v.code for v in found} == {K.READ_WRONG_POSITION, K.READ_FUTURE}
    wrong = sorted((v.slot, v.position) for v in found if v.code == K.READ_WRONG_POSITION)
    assert len(wrong) == 8
    future = {v.position for v in found if v.code == K.READ_FUTURE}
    assert future == {7}  # key 3 (believed) holds position 7 > query 6


def test_guarded_window_reads_only_inside_the_window() -> None:
    """With a sliding window, blocks wholly out of every query's window may be unreadable and
    unwritten (the manager nulled them): no record."""
    case = _decode_case(seq_lens=(3, 30), q_lens=(1, 2), window=5, block_size=4)
    built = build(case)
    shadow = shadow_for(built)
    _write(built, shadow)
    for index in range(5):  # keys 0..19 are outside the window of queries 28, 29
        block = int(built.tables[1, index])
        shadow.readable[1, block] = 0
        shadow.slot_written[block * 4:(block + 1) * 4] = 0
    out = _attend(built, shadow, sliding_window=5)
    assert shadow.violations() == []
    assert reference(built).check(out, "float32") is None


def test_record_capacity_and_count() -> None:
    built = build(_decode_case())
    shadow = shadow_for(built, capacity=3)
    shadow.block_owner.fill_(K.OWNER_FREE)  # nothing is owned: every write violates
    _write(built, shadow)
    valid = int((built.slot_mapping >= 0).sum())
    assert int(shadow.count.item()) == valid
    assert len(shadow.violations()) == 3
    assert all(v.code == K.WRITE_NOT_OWNER for v in shadow.violations())
