"""The one-group pool in runs (simulate/runs.py): vLLM's LRU free queue, hashes kept while free, hits reviving
free blocks, duplicates staying anonymous, on small hand-checked pools."""
from vram_detective.simulate.runs import RunPool


def held(pool, owner):
    chain = pool.cached.get(owner)
    return [] if chain is None else [i for i, ref in enumerate(chain.ref) if ref >= 0]


def test_freed_blocks_keep_their_hashes_and_are_evicted_last_block_first():
    pool = RunPool(10, 1, True)  # block 0 is the null block: 9 free
    table = []
    pool.take(5)  # four full blocks and a partial one
    pool.cache(table, "a", 0, 4)
    assert pool.num_free == 4 and held(pool, "a") == [0, 1, 2, 3]
    pool.release(table, 1)  # the anonymous tail block, then the 4 cached ones, which keep their hashes
    assert pool.num_free == 9 and held(pool, "a") == [0, 1, 2, 3]
    pool.take(6)  # the 5 anonymous blocks first, then "a"'s from its last: position 3
    assert pool.num_free == 3 and held(pool, "a") == [0, 1, 2]
    pool.take(3)  # then the rest: the chain is dropped
    assert pool.num_free == 0 and "a" not in pool.cached


def test_a_hit_revives_free_blocks_and_takes_skip_them():
    pool = RunPool(10, 1, True)
    table = []
    pool.take(4)
    pool.cache(table, "a", 0, 4)
    pool.release(table, 0)
    hits = pool.hits([("a", 0, 3)])
    assert [(lo, hi) for _, lo, hi in hits] == [(0, 3)]
    assert pool.revived(hits) == 3
    pool.touch(hits)
    assert pool.num_free == 6  # 5 never used + position 3
    pool.take(6)  # position 3 is evicted; 0..2 are held, their queue entries skipped
    assert held(pool, "a") == [0, 1, 2] and pool.num_free == 0
    pool.release(hits, 0)  # back to the end of the queue, tail first
    assert pool.num_free == 3
    pool.take(1)
    assert held(pool, "a") == [0, 1]


def test_a_shared_block_is_freed_by_its_last_holder_and_a_duplicate_stays_anonymous():
    pool = RunPool(20, 0, True)
    first, second = [], []
    pool.take(4)
    pool.cache(first, "p", 0, 4)
    hits = pool.hits([("p", 0, 2)])
    pool.touch(hits)
    second += hits
    pool.take(2)
    pool.cache(second, "p", 2, 4)  # positions 2 and 3 are cached by the first request's blocks already
    assert [(c is not None, lo, hi) for c, lo, hi in second] == [(True, 0, 2), (False, 0, 2)]
    assert pool.num_free == 14
    pool.release(first, 0)  # positions 2, 3 go free; 0, 1 are still held by the second request
    assert pool.num_free == 16 and pool.cached["p"].ref[:4] == [1, 1, 0, 0]
    pool.release(second, 0)
    assert pool.num_free == 20 and pool.cached["p"].ref[:4] == [0, 0, 0, 0]


def test_from_0_28_a_freed_block_without_a_hash_goes_to_the_front_of_the_queue():
    """vLLM 0.28.0 block_pool.py free_blocks: hashless blocks prepend_n (reused first), cached ones append_n;
    before, every freed block went to the back."""
    for front, evicted in ((False, []), (True, [0, 1])):
        pool = RunPool(10, 1, True, uncached_first=front)
        old, new = [], []
        pool.take(4)
        pool.cache(old, "a", 0, 4)
        pool.release(old, 0)  # "a"'s four cached blocks: at the back, behind the 5 never used
        pool.take(7)  # the 5 never used, then "a"'s positions 3 and 2
        assert held(pool, "a") == [0, 1] and pool.num_free == 2
        pool.release(new, 3)  # a request's 3 hashless blocks: to the back before 0.28, the front from it
        pool.take(3)
        assert held(pool, "a") == evicted, front


def test_a_duplicate_is_a_cached_copy_and_its_hash_outlives_the_first_block():
    """vLLM V1 block_pool.py (0.8.5-0.33.0) keeps every block of a hash: when the first block of a position is
    evicted, a lookup still hits the copy."""
    for keep, hit in ((False, [(0, 2)]), (True, [(0, 2), (2, 4)])):
        pool = RunPool(20, 0, True, keep_duplicates=keep)
        first, second = [], []
        pool.take(4)
        pool.cache(first, "p", 0, 4)
        pool.take(4)  # a second request computed the same four blocks (it missed them when it was admitted)
        pool.cache(second, "p", 0, 4)
        assert [(c is None, lo, hi) for c, lo, hi in second] == [(not keep, 0, 4)]
        pool.release(first, 0)  # the first request's blocks go to the back of the queue, its last first
        pool.take(14)  # the 12 never used, then the first request's positions 3 and 2
        assert held(pool, "p") == [0, 1]
        assert [(lo, hi) for _, lo, hi in pool.hits([("p", 0, 4)])] == hit, keep
        pool.release(second, 0)
        pool.take(2)  # the first's positions 1 and 0: with copies kept the second's chain becomes the first
        assert ("p" in pool.cached) == keep
        assert held(pool, "p") == ([0, 1, 2, 3] if keep else [])


def test_the_occupancy_histogram_holds_the_levels_reached_not_the_pool():
    """A llama.cpp pool of 10,485,760 one-token cells (Llama-4-Scout's context) made a list of that many levels and
    a 400 MB running sum for the 99th percentile (found by benchmarks/fuzz.py: simulate at 513 MB, now 21 MB); the
    levels kept follow the peak, and the figures are those of the full list."""
    from vram_detective.simulate.series import Histogram

    hist = Histogram(10_485_760)
    steps = [(1.0, 300), (2.5, 17_000), (4.0, 9_000), (7.0, 0), (8.0, 120)]
    for t, level in steps:
        hist.set(t, level)
    hist.set(10.0, hist.level)
    assert hist.peak == 17_000 and len(hist.seconds) <= 2 * (hist.peak + 1)
    full = [0.0] * 10_485_761
    last_t, last_level = 0.0, 0
    for t, level in steps + [(10.0, 120)]:
        full[last_level] += t - last_t
        last_t, last_level = t, level
    assert sum(hist.seconds) == sum(full) == 10.0
    for fraction in (0.0, 0.5, 0.99, 1.0):
        running, total = 0.0, sum(full)
        expected = next(level for level, seconds in enumerate(full) if (running := running + seconds) >= fraction * total)
        assert hist.percentile(fraction) == expected
