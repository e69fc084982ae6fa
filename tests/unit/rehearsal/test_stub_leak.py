"""The SGLang DSA indexer scratch model: ratchets with the longest prompt without the
budget, bounded (~240 MB) and given back after each request with it (field report)."""

import pytest

from sparkrack.rehearsal.stub import leak

GB10 = 127600748 * 1024  # MemTotal of the simulated GB10 (121.7 GiB)
GiB = 1 << 30
MiB = 1 << 20


def scratch(value, mem_fraction=0.80, chunk=4096, scale=1.0):
    fraction = leak.budget_fraction(value)
    return leak.IndexerScratch(fraction, chunk, leak.budget_bytes(fraction, mem_fraction, GB10),
                               scale)


def test_budget_from_the_env_var():
    assert leak.budget_fraction(None) == leak.DEFAULT_FRACTION == 0.2
    assert leak.budget_fraction("") == 0.2
    assert leak.budget_fraction("0.01") == 0.01
    with pytest.raises(ValueError):
        leak.budget_fraction("lots")
    with pytest.raises(ValueError):
        leak.budget_fraction("1.5")
    assert leak.ratchets(0.2) and leak.ratchets(0.1) and not leak.ratchets(0.09)


def test_the_budget_of_001_is_about_240_mb():
    assert 240 * MiB < leak.budget_bytes(0.01, 0.80, GB10) < 250 * MiB  # "about 240 MB"
    assert leak.budget_bytes(0.2, 0.80, GB10) == pytest.approx(0.04 * GB10, rel=1e-6)


def test_blocks_follow_the_prefill_chunks():
    cap = 10 ** 12
    assert leak.block_sizes(1000, 4096, cap) == [1000 * 1000 * 4]
    assert leak.block_sizes(5000, 4096, cap) == [4096 * 4096 * 4, 904 * 5000 * 4]
    assert leak.block_sizes(0, 4096, cap) == []
    assert leak.block_sizes(5000, 4096, 10 * MiB) == [10 * MiB, 10 * MiB]
    assert leak.block_sizes(1000, 4096, cap, scale=2.5) == [10 ** 7]


def test_without_the_budget_the_footprint_ratchets_with_the_longest_prompt():
    rank = scratch(None)
    held = []
    for prompt in (2000, 50_000, 30_000, 50_000, 80_000, 10_000):
        _, transient = rank.begin(prompt)
        assert transient == 0  # nothing is given back after the request
        held.append(rank.held)
    assert held == sorted(held)  # never comes back
    assert held[1] == held[2] == held[3]  # a shorter or equal prompt adds nothing
    assert held[4] > held[3]
    assert rank.held == rank.kept_for(80_000)
    assert 4.9 * GiB < rank.kept_for(50_000) < 5.1 * GiB
    # ~100K tokens exceeds what a 0.80 static pool leaves on the node (~15.7 GiB): the
    # report's "every long prompt above roughly 100K tokens took the whole group down".
    left = GB10 - 9034380 * 1024 - 0.80 * GB10
    assert rank.kept_for(80_000) < left < rank.kept_for(100_000)


def test_the_same_with_an_explicit_high_budget():
    assert scratch("0.2").begin(50_000) == scratch(None).begin(50_000)
    assert scratch("0.1").ratchets


def test_with_the_budget_the_scratch_is_bounded_and_transient():
    rank = scratch("0.01")
    cap = leak.budget_bytes(0.01, 0.80, GB10)
    for prompt in (2000, 50_000, 514_000, 50_000):
        kept, transient = rank.begin(prompt)
        assert kept == 0 and rank.held == 0  # flat: nothing kept between requests
        assert transient == min(cap, max(leak.block_sizes(prompt, 4096, cap)))
    assert rank.begin(514_000) == (0, cap)  # ~240 MB through a 514K prompt


def test_scale_makes_small_prompts_visible():
    assert scratch(None, scale=10).kept_for(4000) == 10 * scratch(None).kept_for(4000)
