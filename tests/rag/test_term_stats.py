"""BM25 term statistics: counted from chunks, cached per bot, refreshed in the background once stale."""

from __future__ import annotations

import asyncio

from rag.term_stats import TERM_STATS_TTL_S, TermStats, TermStatsCache


def test_term_stats_count_document_frequencies_and_idf():
    stats = TermStats.count([[1, 2], [2], [2, 3]])
    assert (stats.chunks, stats.df) == (3, {1: 1, 2: 3, 3: 1})
    assert stats.idf(1) > stats.idf(2) and stats.idf(99) > stats.idf(1)  # a term the collection lacks weighs most


async def test_term_stats_cache_rescans_after_a_write_and_refreshes_in_the_background_after_its_ttl():
    scans: list[int] = []
    release = asyncio.Event()

    async def scan() -> TermStats:
        scans.append(1)
        if len(scans) >= 3:
            await release.wait()  # a slow scan of a large collection
        return TermStats.count([[1, 2], [2]] * len(scans))

    clock = [1000.0]
    cache = TermStatsCache(clock=lambda: clock[0])
    first = await cache.get("acme", scan)
    assert (first.chunks, first.df) == (2, {1: 1, 2: 2})
    await cache.get("acme", scan)
    assert len(scans) == 1  # cached
    cache.invalidate("acme")  # this process wrote to the bot: the next query scans at once
    assert (await cache.get("acme", scan)).chunks == 4 and len(scans) == 2

    clock[0] += TERM_STATS_TTL_S + 1  # another process may have written
    stale = await asyncio.wait_for(cache.get("acme", scan), 1)  # answered without waiting for the scan
    assert stale.chunks == 4
    await asyncio.sleep(0)
    assert len(scans) == 3
    assert (await cache.get("acme", scan)).chunks == 4 and len(scans) == 3  # one refresh at a time
    release.set()
    for _ in range(5):
        await asyncio.sleep(0)
    assert (await cache.get("acme", scan)).chunks == 6  # refreshed

    # A write during a refresh drops it: the refresh may have read the collection before the write.
    clock[0] += TERM_STATS_TTL_S + 1
    release.clear()
    await cache.get("acme", scan)
    await asyncio.sleep(0)
    cache.invalidate("acme")
    release.set()
    await asyncio.sleep(0)
    assert (await cache.get("acme", scan)).chunks == 10 and len(scans) == 5
    await cache.close()


async def test_term_stats_cache_keeps_serving_when_a_refresh_fails():
    calls: list[int] = []

    async def scan() -> TermStats:
        calls.append(1)
        if len(calls) > 1:
            raise RuntimeError("Qdrant unavailable")
        return TermStats.count([[7]])

    clock = [0.0]
    cache = TermStatsCache(clock=lambda: clock[0])
    await cache.get("acme", scan)
    clock[0] += TERM_STATS_TTL_S + 1
    assert (await cache.get("acme", scan)).df == {7: 1}
    for _ in range(3):
        await asyncio.sleep(0)
    assert len(calls) == 2  # the refresh ran and failed
    assert (await cache.get("acme", scan)).df == {7: 1}  # still the old statistics
    for _ in range(3):
        await asyncio.sleep(0)
    assert len(calls) == 3  # and the next query tried again
    await cache.close()


async def test_term_stats_cache_first_queries_of_a_bot_share_one_scan():
    scans: list[int] = []
    release = asyncio.Event()

    async def scan() -> TermStats:
        scans.append(1)
        await release.wait()  # the scan of a large collection, while a burst of first queries comes in
        return TermStats.count([[1, 2]])

    cache = TermStatsCache()
    waiting = [asyncio.create_task(cache.get("acme", scan)) for _ in range(10)]
    await asyncio.sleep(0)
    waiting[0].cancel()  # one caller gone (its turn's deadline) does not stop the scan for the others
    release.set()
    got = await asyncio.gather(*waiting[1:])
    assert len(scans) == 1 and all(stats.chunks == 1 for stats in got)
    assert (await cache.get("acme", scan)).chunks == 1 and len(scans) == 1  # and it is kept
    await cache.close()


async def test_local_index_counts_term_statistics_off_the_event_loop(tmp_path, monkeypatch):
    import threading

    from gateway.settings import QdrantSettings
    from rag import index as index_module

    threads: list[int] = []
    count = TermStats.count
    monkeypatch.setattr(index_module.TermStats, "count",
                        classmethod(lambda cls, chunks: threads.append(threading.get_ident()) or count(chunks)))
    index = index_module.QdrantIndex.from_settings(QdrantSettings(path=str(tmp_path / "q")))
    await index.ensure_collection("acme", 8)
    assert (await index.term_stats("acme")).chunks == 0
    assert threads and threading.get_ident() not in threads  # a 10k-chunk count held the loop about a second
    await index.close()
