"""Notebook 07 (remote storage): wrong answers and delegations (see ``__init__.py``)."""

from wrong_answers import wrong

DELEGATIONS = {
    "predicted_items_per_s": "from feedgpu.models.remote_storage import predicted_items_per_s",
    "fetch_all": """
        import feedgpu.workloads.remote as remote

        fetch_all = remote.fetch_all
    """,
    "fetch_with_retries": "from feedgpu.workloads.remote import fetch_with_retries",
}

_CHECKS = """
    if workers < 0 or threads_per_worker < 1 or not latency_s > 0:
        raise ValueError("bad loader or latency")
    if max_concurrent is not None and max_concurrent < 1:
        raise ValueError("bad max_concurrent")"""


def _predicted(body: str, checks: str = _CHECKS) -> str:
    return ("def predicted_items_per_s(workers, threads_per_worker, latency_s, max_concurrent=None):"
            + checks + "\n" + body)


_LIMITED = """
    in_flight = max(workers, 1) * threads_per_worker
    if max_concurrent is not None:
        in_flight = min(in_flight, max_concurrent)
    return in_flight / latency_s
"""

_FETCH_ALL = """
    from concurrent.futures import ThreadPoolExecutor


    def fetch_all(keys, fetch_one, threads):
"""

_RETRIES = """
    def fetch_with_retries(fetch_one, key, max_attempts=4, base_delay_s=0.05, sleep=time.sleep):
"""

WRONG_ANSWERS = [
    # predicted_items_per_s
    wrong("predicted_items_per_s", "0 workers keep 0 requests in flight", _predicted("""
    in_flight = workers * threads_per_worker
    if max_concurrent is not None:
        in_flight = min(in_flight, max_concurrent)
    return in_flight / latency_s
    """), "test_predicted_matches_the_simulated_store"),
    wrong("predicted_items_per_s", "ignores the threads in each worker", _predicted("""
    in_flight = max(workers, 1)
    if max_concurrent is not None:
        in_flight = min(in_flight, max_concurrent)
    return in_flight / latency_s
    """), "test_predicted_matches_the_simulated_store"),
    wrong("predicted_items_per_s", "multiplies by the latency instead of dividing", _predicted("""
    in_flight = max(workers, 1) * threads_per_worker
    if max_concurrent is not None:
        in_flight = min(in_flight, max_concurrent)
    return in_flight * latency_s
    """), "test_predicted_matches_the_simulated_store"),
    wrong("predicted_items_per_s", "one request per latency, whatever is in flight (not Little's law)", _predicted("""
    return 1 / latency_s
    """), "test_predicted_matches_the_simulated_store"),
    wrong("predicted_items_per_s", "ignores the store's limit", _predicted("""
    return max(workers, 1) * threads_per_worker / latency_s
    """), "test_predicted_respects_the_store_limit"),
    wrong("predicted_items_per_s", "the limit replaces what is in flight whenever one is given", _predicted("""
    in_flight = max(workers, 1) * threads_per_worker
    if max_concurrent is not None:
        in_flight = max_concurrent
    return in_flight / latency_s
    """), "test_predicted_respects_the_store_limit"),
    wrong("predicted_items_per_s", "a limit of 0 requests at once is accepted", _predicted(_LIMITED, """
    if workers < 0 or threads_per_worker < 1 or not latency_s > 0:
        raise ValueError("bad loader or latency")"""), "test_predicted_rejects_bad_input"),
    wrong("predicted_items_per_s", "a latency of 0 is accepted (a division by zero, not a ValueError)",
          _predicted(_LIMITED, """
    if workers < 0 or threads_per_worker < 1 or latency_s < 0:
        raise ValueError("bad loader or latency")
    if max_concurrent is not None and max_concurrent < 1:
        raise ValueError("bad max_concurrent")"""), "test_predicted_rejects_bad_input"),
    wrong("predicted_items_per_s", "checks only the number of workers", _predicted(_LIMITED, """
    if workers < 0:
        raise ValueError("negative workers")"""), "test_predicted_rejects_bad_input"),
    # fetch_all
    wrong("fetch_all", "results in the order they finished (as_completed)", _FETCH_ALL + """
        if threads < 1:
            raise ValueError(threads)
        from concurrent.futures import as_completed

        with ThreadPoolExecutor(max_workers=threads) as pool:
            futures = [pool.submit(fetch_one, key) for key in keys]
            return [future.result() for future in as_completed(futures)]
    """, "test_fetch_all_order_and_once", "test_fetch_all_from_the_store"),
    wrong("fetch_all", "returns pool.map's iterator, not a list", _FETCH_ALL + """
        if threads < 1:
            raise ValueError(threads)
        with ThreadPoolExecutor(max_workers=threads) as pool:
            return pool.map(fetch_one, keys)
    """, "test_fetch_all_order_and_once", "test_fetch_all_from_the_store"),
    wrong("fetch_all", "fetches every key twice (a pool, then a loop for the results)", _FETCH_ALL + """
        if threads < 1:
            raise ValueError(threads)
        keys = list(keys)
        with ThreadPoolExecutor(max_workers=threads) as pool:
            list(pool.map(fetch_one, keys))
        return [fetch_one(key) for key in keys]
    """, "test_fetch_all_order_and_once"),
    wrong("fetch_all", "no keys: a pool of 0 threads raises", _FETCH_ALL + """
        if threads < 1:
            raise ValueError(threads)
        keys = list(keys)
        with ThreadPoolExecutor(max_workers=min(threads, len(keys))) as pool:
            return list(pool.map(fetch_one, keys))
    """, "test_fetch_all_order_and_once"),
    wrong("fetch_all", "threads=0 quietly becomes 1 thread", _FETCH_ALL + """
        with ThreadPoolExecutor(max_workers=max(threads, 1)) as pool:
            return list(pool.map(fetch_one, keys))
    """, "test_fetch_all_order_and_once"),
    wrong("fetch_all", "a thread per key, whatever threads says", _FETCH_ALL + """
        if threads < 1:
            raise ValueError(threads)
        keys = list(keys)
        if not keys:
            return []
        with ThreadPoolExecutor(max_workers=len(keys)) as pool:
            return list(pool.map(fetch_one, keys))
    """, "test_fetch_all_order_and_once"),
    wrong("fetch_all", "a plain loop: the threads are never used", _FETCH_ALL + """
        if threads < 1:
            raise ValueError(threads)
        return [fetch_one(key) for key in keys]
    """, "test_fetch_all_overlaps_the_waiting"),
    wrong("fetch_all", "waits for each future right after submitting it", _FETCH_ALL + """
        if threads < 1:
            raise ValueError(threads)
        with ThreadPoolExecutor(max_workers=threads) as pool:
            return [pool.submit(fetch_one, key).result() for key in keys]
    """, "test_fetch_all_overlaps_the_waiting"),
    # fetch_with_retries
    wrong("fetch_with_retries", "no retry: the first error escapes", _RETRIES + """
        return fetch_one(key)
    """, "test_retries_until_success", "test_retries_lose_and_duplicate_nothing"),
    wrong("fetch_with_retries", "retries forever, never giving up", _RETRIES + """
        attempt = 0
        while True:
            attempt += 1
            try:
                return fetch_one(key)
            except Exception as error:
                if not is_retryable(error):
                    raise
                sleep(base_delay_s * 2 ** (attempt - 1))
    """, "test_retries_give_up"),
    wrong("fetch_with_retries", "one attempt too many", _RETRIES + """
        for attempt in range(1, max_attempts + 2):
            try:
                return fetch_one(key)
            except Exception as error:
                if attempt == max_attempts + 1 or not is_retryable(error):
                    raise
                sleep(base_delay_s * 2 ** (attempt - 1))
    """, "test_retries_give_up"),
    wrong("fetch_with_retries", "waits after the last attempt too", _RETRIES + """
        for attempt in range(1, max_attempts + 1):
            try:
                return fetch_one(key)
            except Exception as error:
                if not is_retryable(error):
                    raise
                sleep(base_delay_s * 2 ** (attempt - 1))
                if attempt == max_attempts:
                    raise
    """, "test_retries_give_up"),
    wrong("fetch_with_retries", "returns None when every attempt failed", _RETRIES + """
        for attempt in range(1, max_attempts + 1):
            try:
                return fetch_one(key)
            except Exception as error:
                if not is_retryable(error):
                    raise
                if attempt < max_attempts:
                    sleep(base_delay_s * 2 ** (attempt - 1))
        return None
    """, "test_retries_give_up"),
    wrong("fetch_with_retries", "retries every error, a missing key too", _RETRIES + """
        for attempt in range(1, max_attempts + 1):
            try:
                return fetch_one(key)
            except Exception:
                if attempt == max_attempts:
                    raise
                sleep(base_delay_s * 2 ** (attempt - 1))
    """, "test_no_retry_for_missing_keys"),
    wrong("fetch_with_retries", "the same wait before every retry", _RETRIES + """
        for attempt in range(1, max_attempts + 1):
            try:
                return fetch_one(key)
            except Exception as error:
                if attempt == max_attempts or not is_retryable(error):
                    raise
                sleep(base_delay_s)
    """, "test_retries_until_success"),
    wrong("fetch_with_retries", "waits that grow by the base, not double (linear backoff)", _RETRIES + """
        for attempt in range(1, max_attempts + 1):
            try:
                return fetch_one(key)
            except Exception as error:
                if attempt == max_attempts or not is_retryable(error):
                    raise
                sleep(base_delay_s * attempt)
    """, "test_retries_until_success"),
    wrong("fetch_with_retries", "the first wait is already doubled (base * 2 ** k)", _RETRIES + """
        for attempt in range(1, max_attempts + 1):
            try:
                return fetch_one(key)
            except Exception as error:
                if attempt == max_attempts or not is_retryable(error):
                    raise
                sleep(base_delay_s * 2 ** attempt)
    """, "test_retries_until_success"),
    wrong("fetch_with_retries", "fetches once more after the attempt that worked", _RETRIES + """
        for attempt in range(1, max_attempts + 1):
            try:
                fetch_one(key)
                break
            except Exception as error:
                if attempt == max_attempts or not is_retryable(error):
                    raise
                sleep(base_delay_s * 2 ** (attempt - 1))
        return fetch_one(key)
    """, "test_retries_until_success", "test_retries_lose_and_duplicate_nothing"),
    wrong("fetch_with_retries", "retries S3's answers only: a dropped connection or a cut body escapes", _RETRIES + """
        for attempt in range(1, max_attempts + 1):
            try:
                return fetch_one(key)
            except ClientError as error:
                if attempt == max_attempts or not is_retryable(error):
                    raise
                sleep(base_delay_s * 2 ** (attempt - 1))
    """, "test_retries_lose_and_duplicate_nothing"),
]
