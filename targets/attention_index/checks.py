"""Oracle and input validation for ``attention_index``.

The oracle judges an implementation's float32 result against the float64 reference without
demanding the reference's exact choices where rounding makes them ambiguous:

1. **Structure.**  Shapes; for AttentionIndex ``assignment`` equals the reference's exactly (the
   build is float64 model arithmetic) and ``group_sizes`` is its histogram -- every key in
   exactly one group (a partition; sizes sum to S).
2. **Valid ids.**  In range, -1 padding only at the end, unique, causal (``id <= pos(t)``) and
   sorted by the returned scores (score desc, id asc).
3. **Scores.**  Each returned score is within the derived float32 bound
   (:func:`model.score_bound`) of the float64 indexer score of its id.
4. **Tie-aware agreement with the reference.**  From the reference's float64 representative
   scores and their bounds, a group/block *must* be probed when fewer than ``top_g`` / ``top_m``
   others could outrank it within rounding, and *may* be probed when fewer than that certainly
   outrank it.  With C_must / C_may the causal members of those groups (plus sink / local):
   ``candidates`` lies in [|C_must|, |C_may|], every id lies in C_may, the row holds
   ``min(topk, candidates)`` ids, and no key of C_must that was left out beats the worst returned
   id by more than the two scores' bounds.  Dense (and probing every group) makes C_must = C_may
   = every causal key: exact tie-aware top-k.

The contract (:func:`validate`): ``q``, ``w``, ``k`` finite float32 of any magnitude -- zeros,
subnormals, huge values -- as long as no float32 score overflows
(:func:`model.overflow_factor` at most :data:`model.OVERFLOW_LIMIT`, a quarter of the float32
range): a float32 indexer cannot represent a score past ``3.4e38``, so such inputs are outside
what it computes, not a wrong answer.  The score bound is derived with gradual underflow, so
tiny and subnormal values are judged exactly as strictly as their rounding allows.
"""

from __future__ import annotations

from typing import Any, Mapping, Optional

import numpy as np

from fuzzkit.failure import Failure
from fuzzkit.targets.attention_index import model, reference

INPUT_KEYS = ("q", "w", "k", "topk", "method")


def _is_int(value: Any) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def validate(inputs: Mapping[str, Any]) -> Optional[str]:
    """One line saying what is wrong with a case's inputs, or None."""
    for key in INPUT_KEYS:
        if key not in inputs:
            return f"attention_index inputs need key {key!r}"
    q, w, k = (np.asarray(inputs[x]) for x in ("q", "w", "k"))
    if q.ndim != 3 or w.shape != q.shape[:2] or k.ndim != 2 or k.shape[1] != q.shape[2]:
        return f"shapes must be q (T,H,d), w (T,H), k (S,d); got {q.shape}, {w.shape}, {k.shape}"
    if q.shape[0] < 1 or q.shape[0] > k.shape[0]:
        return f"need 1 <= T <= S, got T={q.shape[0]}, S={k.shape[0]}"
    if q.shape[2] < 1 or q.shape[1] < 1:
        return "d and H must be >= 1"
    for arr, name in ((q, "q"), (w, "w"), (k, "k")):
        if not np.all(np.isfinite(arr)):
            return f"{name} must be finite"
    factor = model.overflow_factor(q, w, k)
    if not factor <= model.OVERFLOW_LIMIT:
        return (f"scores would overflow float32: model.overflow_factor = {factor:.3g} > 2^126 "
                f"(sum_i |q_i| max_s |k_s,i|, weighted by |w| over heads; a float32 indexer "
                f"cannot represent them)")
    if inputs["method"] not in model.METHODS:
        return f"method must be one of {model.METHODS}, got {inputs['method']!r}"
    for key, low in (("topk", 1), ("block", 1), ("top_m", 1), ("groups", 1), ("iters", 0),
                     ("chunk", 1), ("top_g", 1), ("sink", 0), ("local", 0), ("seed", 0)):
        if key in inputs and (not _is_int(inputs[key]) or inputs[key] < low):
            return f"{key} must be an integer >= {low}, got {inputs[key]!r}"
    return None


def _fail(check: str, message: str, **details: Any) -> Failure:
    return Failure("mismatch", f"attention_index {check}: {message}",
                   f"mismatch:attention_index:{check}", details)


def _selection(rep: np.ndarray, bound: np.ndarray, count: int) -> tuple[np.ndarray, np.ndarray]:
    """(must, may) bool (G,) for one query row of float64 representative scores."""
    eligible = rep > -np.inf
    lo = np.where(eligible, rep - bound, -np.inf)
    hi = np.where(eligible, rep + bound, -np.inf)
    g = rep.shape[0]
    could_beat = (hi[None, :] >= lo[:, None]) & eligible[None, :] & ~np.eye(g, dtype=bool)
    surely_beat = (lo[None, :] > hi[:, None]) & eligible[None, :] & ~np.eye(g, dtype=bool)
    must = eligible & (could_beat.sum(axis=1) < count)
    may = eligible & (surely_beat.sum(axis=1) < count)
    return must, may


def candidate_sets(inputs: Mapping[str, Any], expected: Mapping[str, Any]
                   ) -> tuple[np.ndarray, np.ndarray]:
    """(must, may) bool (T, S): the keys any correct float32 run must / may score exactly."""
    p = model.params(inputs)
    aux = expected["aux"]
    causal = aux["all_scores"] > -np.inf
    if p["method"] == "dense":
        return causal, causal
    count = p["top_m"] if p["method"] == "hisa" else p["top_g"]
    owner = np.asarray(aux["owner"])
    must = np.zeros_like(causal)
    may = np.zeros_like(causal)
    for t in range(causal.shape[0]):
        gm, gy = _selection(aux["rep_scores"][t], aux["rep_bound"][t], count)
        must[t] = gm[owner]
        may[t] = gy[owner]
    forced = np.asarray(aux["forced"])
    return (must & causal) | forced, (may & causal) | forced


def check_valid(inputs: Mapping[str, Any], ids: np.ndarray, scores: np.ndarray
                ) -> Optional[Failure]:
    s = np.asarray(inputs["k"]).shape[0]
    pos = model.positions(ids.shape[0], s)
    for t in range(ids.shape[0]):
        row = ids[t]
        real = row >= 0
        n = int(real.sum())
        if np.any(row < -1) or np.any(row >= s):
            return _fail("id-range", f"query {t}: id out of range", row=t)
        if not np.all(real[:n]):
            return _fail("padding", f"query {t}: -1 padding before a real id", row=t)
        if len(set(row[:n].tolist())) != n:
            return _fail("duplicate", f"query {t}: an id returned twice", row=t)
        if np.any(row[:n] > pos[t]):
            return _fail("causal", f"query {t} at position {int(pos[t])} returned a future key "
                         f"{int(row[:n].max())}", row=t)
        sc = scores[t, :n]
        for j in range(1, n):
            if sc[j] > sc[j - 1] or (sc[j] == sc[j - 1] and row[j] < row[j - 1]):
                return _fail("order", f"query {t}: not sorted by (score desc, id asc) at slot "
                             f"{j}", row=t)
    return None


def oracle(inputs: Mapping[str, Any], expected: Mapping[str, Any],
           actual: Mapping[str, Any]) -> Optional[Failure]:
    """Compare an implementation's outputs with the reference's (see the module docstring)."""
    p = model.params(inputs)
    t_count = np.asarray(inputs["q"]).shape[0]
    s = np.asarray(inputs["k"]).shape[0]
    for key, shape in (("ids", (t_count, p["topk"])), ("scores", (t_count, p["topk"])),
                       ("candidates", (t_count,))):
        if key not in actual:
            return _fail("missing-output", f"outputs lack {key!r}")
        if np.shape(actual[key]) != shape:
            return _fail("shape", f"{key} has shape {np.shape(actual[key])}, expected {shape}")
    if p["method"] == "attention_index":
        for key in ("assignment", "centroids", "group_sizes"):
            if key not in actual:
                return _fail("missing-output", f"outputs lack {key!r}")
        got = np.asarray(actual["assignment"])
        if got.shape != (s,) or not np.array_equal(got, expected["assignment"]):
            bad = (int(np.flatnonzero(got != expected["assignment"])[0])
                   if got.shape == (s,) else -1)
            return _fail("assignment", f"assignment differs from the reference's chunked "
                         f"k-means (first at key {bad})", key=bad)
        cent = np.asarray(actual.get("centroids"), dtype=np.float64)
        want = np.asarray(expected["centroids"], np.float64)
        if cent.shape != want.shape or np.any(np.abs(cent - want) > 2 * model.U32 * np.abs(want)
                                              + 1e-37):
            return _fail("centroids", "centroids differ from the running means of the "
                         "reference's groups by more than float32 rounding")
        sizes = np.asarray(actual["group_sizes"])
        if int(sizes.sum()) != s or not np.array_equal(sizes, expected["group_sizes"]):
            return _fail("partition", f"group member lists are not a partition of the {s} keys "
                         f"(sizes sum to {int(sizes.sum())})")
    ids = np.asarray(actual["ids"]).astype(np.int64)
    scores = np.asarray(actual["scores"]).astype(np.float64)
    failure = check_valid(inputs, ids, scores)
    if failure is not None:
        return failure
    aux = expected["aux"]
    exact, bound = aux["all_scores"], aux["all_bound"]
    must, may = candidate_sets(inputs, expected)
    cands = np.asarray(actual["candidates"]).astype(np.int64)
    for t in range(t_count):
        row = ids[t][ids[t] >= 0]
        n = row.size
        if np.any(np.isfinite(scores[t, n:])):
            return _fail("padding", f"query {t}: padded slots carry finite scores", row=t)
        err = np.abs(scores[t, :n] - exact[t, row])
        if np.any(~(err <= bound[t, row])):
            j = int(np.argmax(~(err <= bound[t, row])))
            return _fail("score", f"query {t}: score {scores[t, j]!r} of key {int(row[j])} is "
                         f"{float(err[j]):.3g} from the float64 indexer score "
                         f"{float(exact[t, row[j]])!r} (bound {float(bound[t, row[j]]):.3g})",
                         row=t, key=int(row[j]))
        lo, hi = int(must[t].sum()), int(may[t].sum())
        if not lo <= cands[t] <= hi:
            return _fail("candidates", f"query {t}: {int(cands[t])} keys scored, a correct run "
                         f"scores between {lo} and {hi}", row=t, lo=lo, hi=hi,
                         actual=int(cands[t]))
        if n != min(p["topk"], int(cands[t])):
            return _fail("count", f"query {t}: {n} ids for {int(cands[t])} candidates and "
                         f"topk={p['topk']}", row=t)
        outside = row[~may[t, row]]
        if outside.size:
            return _fail("not-candidate", f"query {t}: key {int(outside[0])} returned but no "
                         f"correct probe selects it", row=t, key=int(outside[0]))
        if n == p["topk"] and n:
            last = int(row[-1])
            left = np.flatnonzero(must[t])
            left = left[~np.isin(left, row)]
            beats = exact[t, left] > exact[t, last] + bound[t, left] + bound[t, last]
            if np.any(beats):
                x = int(left[np.argmax(beats)])
                return _fail("missed", f"query {t}: key {x} (score {float(exact[t, x])!r}) "
                             f"must be probed and beats returned key {last} (score "
                             f"{float(exact[t, last])!r})", row=t, key=x)
    return None


__all__ = ["oracle", "validate", "candidate_sets", "reference"]
