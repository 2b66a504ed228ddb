"""What a paged_kv case may ask for (:mod:`fuzzkit.limits`), read off the unvalidated inputs.

Where a case's cost comes from:

* every step runs the structural check, which walks the pool and looks every block up in the
  free queue: about ``steps * num_blocks**2`` (``check_work``; 200 steps over 1 024 blocks take
  1.2 s per implementation);
* the guarded driver keeps K/V and the guard's shadow per token slot
  (``num_blocks * block_size``);
* a forward pass reads, for every token an ``allocate`` scheduled, every key of its window,
  each stamped with the request's prefix: up to ``L**2`` per scheduled token of a request of
  ``L`` tokens (``kv_reads``; one full prefill of 2 048 tokens takes 10 s per implementation).
  Only the tokens a program adds or appends make a request long (a fork copies one, ``allocate``
  schedules at most the request's own tokens -- the strategy asks for ``10**6`` -- so ``n`` is
  not a size by itself).

Request ids, adapters and salts are dictionary keys and hash inputs: their values cost nothing.

Defaults: 9x to 900x the largest values in 3 500 generated programs (seeds 0 and 7, the
strategy for each implementation): steps 223, blocks 70, block size 16, slots 592, tokens 925,
request tokens 275, kv reads 38 468 345, check work 730 592.  A program at the product limits
replays in about 5 s (``kv_reads``) and 3 s (``check_work``) per implementation on one core;
guarded replays run the Triton interpreter on top.
"""

from __future__ import annotations

from typing import Any, Iterator

from fuzzkit.limits import Limit, integer, length


def _config(inputs: dict[str, Any]) -> dict[str, Any]:
    config = inputs.get("config")
    return config if isinstance(config, dict) else {}


def _program(inputs: dict[str, Any]) -> list[Any]:
    program = inputs.get("program")
    return program if isinstance(program, list) else []






def steps(inputs: dict[str, Any]) -> int:
    return len(_program(inputs))


def blocks(inputs: dict[str, Any]) -> int:
    return integer(_config(inputs).get("num_blocks"))


def block_size(inputs: dict[str, Any]) -> int:
    return integer(_config(inputs).get("block_size"))


def slots(inputs: dict[str, Any]) -> int:
    return max(0, blocks(inputs)) * max(0, block_size(inputs))


def tokens(inputs: dict[str, Any]) -> int:
    """Tokens the program adds and appends, all requests together."""
    return sum(length(step.get("tokens")) for step in _program(inputs) if isinstance(step, dict))


def _lengths(inputs: dict[str, Any]) -> Iterator[tuple[dict[str, Any], int]]:
    """Each program step with an upper bound on the length of the request it names, as the
    program stands before it.  Per request id: the longest prompt ever added under it plus every
    token appended to it; a fork's destination at least as long as its source.  Ids are never
    forgotten, so a finished id added again counts at the longer of its prompts: the bound is
    never below the driver's length, whatever the manager refuses."""
    sizes: dict[Any, int] = {}
    for step in _program(inputs):
        if not isinstance(step, dict):
            continue
        op = step.get("op")
        rid = _key(step.get("rid"))
        if op == "add":
            sizes[rid] = max(sizes.get(rid, 0), length(step.get("tokens")))
        elif op == "append":
            sizes[rid] = sizes.get(rid, 0) + length(step.get("tokens"))
        elif op == "fork":
            src, dst = _key(step.get("src")), _key(step.get("dst"))
            sizes[dst] = max(sizes.get(dst, 0), sizes.get(src, 0))
        yield step, sizes.get(rid, 0)


def request_tokens(inputs: dict[str, Any]) -> int:
    """The longest request the program can build (see :func:`_lengths`)."""
    return max((size for _, size in _lengths(inputs)), default=0)


def kv_reads(inputs: dict[str, Any]) -> int:
    """An upper bound on the stamp elements forward passes compare: each token an ``allocate``
    schedules (at most its request's length) is written and then reads up to ``L`` keys, each
    stamped with a prefix of up to ``L`` tokens (``L`` the request's length)."""
    total = 0
    for step, size in _lengths(inputs):
        if step.get("op") == "allocate":
            total += min(max(0, integer(step.get("n"))), size) * size * size
    return total


def check_work(inputs: dict[str, Any]) -> int:
    """Steps times blocks squared: the structural check after every step walks the pool and
    looks each block up in the free queue."""
    return steps(inputs) * max(0, blocks(inputs)) ** 2


def _key(value: Any) -> Any:
    """A request id as a dictionary key (an unhashable id from a hostile file is one key)."""
    try:
        hash(value)
    except TypeError:
        return None
    return value


LIMITS = (
    Limit("steps", 5_000, "program steps (operations)", steps),
    Limit("blocks", 1_024, "KV pool blocks (config num_blocks)", blocks),
    Limit("block_size", 256, "tokens per block (config block_size)", block_size),
    Limit("slots", 16_384, "KV token slots (num_blocks * block_size)", slots),
    Limit("tokens", 20_000, "tokens added and appended by the program", tokens),
    Limit("request_tokens", 4_096, "tokens of the longest request (its add, appends and forks)",
          request_tokens),
    Limit("kv_reads", 4 * 10**9, "stamp elements the forward passes read (scheduled tokens * "
          "request length**2)", kv_reads),
    Limit("check_work", 5 * 10**8, "structure checks (steps * num_blocks**2)", check_work),
)
