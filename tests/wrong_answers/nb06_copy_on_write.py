"""Notebook 06 (copy-on-write memory growth): wrong answers and delegations (see ``__init__.py``)."""

from wrong_answers import wrong

DELEGATIONS = {
    "true_peak_mb": """
        from feedgpu.measure.memory import peak_total_mb


        def true_peak_mb(table):
            peak = peak_total_mb(table, "pss")
            if peak == 0.0:
                raise ValueError("no PSS values")
            return peak
    """,
    "deserialize": """
        def deserialize(buffer, offsets, i):
            return SerializedRecordDataset(buffer, offsets)[i]
    """,
    "serialize": "from feedgpu.workloads.records import serialize_records as serialize",
}


def _true_peak(column: str, roles: str = '["main", "worker"]', result: str = "") -> str:
    return f"""
        def true_peak_mb(table):
            rows = table[table["role"].isin({roles})].dropna(subset=["{column}"])
            if rows.empty:
                raise ValueError("no values")
            return {result or f'float(rows.groupby("time_s")["{column}"].sum().max())'}
    """


def _deserialize(body: str) -> str:
    return """
        def deserialize(buffer, offsets, i):
    """ + body


def _serialize(body: str, check: bool = True) -> str:
    guard = """
            if not isinstance(records, (list, tuple)):
                raise TypeError(type(records).__name__)""" if check else ""
    return """
        def serialize(records):""" + guard + """
            parts = [pickle.dumps(r, protocol=pickle.HIGHEST_PROTOCOL) for r in records]
    """ + body


_BUFFER = 'np.frombuffer(b"".join(parts), dtype=np.uint8).copy()'

WRONG_ANSWERS = [
    # true_peak_mb: the number to add up, then how to add it up
    wrong("true_peak_mb", "adds up RSS (shared pages once per process)", _true_peak("rss_mb"),
          "test_true_peak_counts_each_page_once", "test_true_peak_values", "test_true_peak_without_values"),
    wrong("true_peak_mb", "adds up USS (shared pages counted nowhere)", _true_peak("uss_mb"),
          "test_true_peak_counts_each_page_once", "test_true_peak_values", "test_true_peak_without_values"),
    wrong("true_peak_mb", "adds up the workers only, not the main process",
          _true_peak("pss_mb", roles='["worker"]'), "test_true_peak_counts_each_page_once", "test_true_peak_values"),
    wrong("true_peak_mb", "counts the forkserver (role 'other') too", _true_peak("pss_mb", roles='["main", "worker", "other"]'),
          "test_true_peak_counts_each_page_once", "test_true_peak_values", "test_true_peak_without_values"),
    wrong("true_peak_mb", "adds up each process's own peak", _true_peak(
        "pss_mb", result='float(rows.groupby("process")["pss_mb"].max().sum())'), "test_true_peak_values"),
    wrong("true_peak_mb", "the first sample's sum, not the largest", _true_peak(
        "pss_mb", result='float(rows.groupby("time_s")["pss_mb"].sum().iloc[0])'), "test_true_peak_values"),
    wrong("true_peak_mb", "the last sample's sum, not the largest", _true_peak(
        "pss_mb", result='float(rows.groupby("time_s")["pss_mb"].sum().iloc[-1])'), "test_true_peak_values"),
    wrong("true_peak_mb", "returns 0.0 when there is nothing to add up", """
        def true_peak_mb(table):
            rows = table[table["role"].isin(["main", "worker"])].dropna(subset=["pss_mb"])
            if rows.empty:
                return 0.0
            return float(rows.groupby("time_s")["pss_mb"].sum().max())
    """, "test_true_peak_without_values"),
    wrong("true_peak_mb", "falls back to RSS where PSS is missing", """
        def true_peak_mb(table):
            rows = table[table["role"].isin(["main", "worker"])]
            column = "pss_mb" if rows["pss_mb"].notna().any() else "rss_mb"
            rows = rows.dropna(subset=[column])
            if rows.empty:
                raise ValueError("no values")
            return float(rows.groupby("time_s")[column].sum().max())
    """, "test_true_peak_without_values"),
    wrong("true_peak_mb", "checks for values before leaving the helpers out", """
        def true_peak_mb(table):
            if table["pss_mb"].isna().all():
                raise ValueError("no PSS values")
            rows = table[table["role"].isin(["main", "worker"])]
            return float(rows.groupby("time_s")["pss_mb"].sum().max())
    """, "test_true_peak_without_values"),
    # deserialize
    wrong("deserialize", "slices one record too far (offsets[i + 1]:offsets[i + 2])", _deserialize("""
            n = len(offsets) - 1
            if not -n <= i < n:
                raise IndexError(i)
            i = i + n if i < 0 else i
            return pickle.loads(buffer[offsets[i + 1]:offsets[i + 2]])
    """), "test_deserialize_records"),
    wrong("deserialize", "slices with a negative i as it is", _deserialize("""
            n = len(offsets) - 1
            if not -n <= i < n:
                raise IndexError(i)
            return pickle.loads(buffer[offsets[i]:offsets[i + 1]])
    """), "test_deserialize_records"),
    wrong("deserialize", "no range check (-n - 1 wraps round)", _deserialize("""
            if i < 0:
                i += len(offsets) - 1
            return pickle.loads(buffer[offsets[i]:offsets[i + 1]])
    """), "test_deserialize_out_of_range"),
    wrong("deserialize", "checks only the upper end of the range", _deserialize("""
            n = len(offsets) - 1
            if i >= n:
                raise IndexError(i)
            if i < 0:
                i += n
            return pickle.loads(buffer[offsets[i]:offsets[i + 1]])
    """), "test_deserialize_out_of_range"),
    wrong("deserialize", "raises ValueError instead of IndexError", _deserialize("""
            n = len(offsets) - 1
            if not -n <= i < n:
                raise ValueError(f"no record {i}")
            i = i + n if i < 0 else i
            return pickle.loads(buffer[offsets[i]:offsets[i + 1]])
    """), "test_deserialize_out_of_range"),
    # serialize
    wrong("serialize", "keeps a list of pickles (one Python object per record)", _serialize("""
            offsets = np.zeros(len(parts) + 1, dtype=np.int64)
            np.cumsum([len(p) for p in parts], out=offsets[1:])
            return parts, offsets
    """), "test_serialize_layout", "test_serialize_same_records", "test_fix_stops_the_copying",
          "test_fix_pss_near_data_size"),
    wrong("serialize", "an object array of pickles", _serialize("""
            offsets = np.zeros(len(parts) + 1, dtype=np.int64)
            np.cumsum([len(p) for p in parts], out=offsets[1:])
            buffer = np.empty(len(parts), dtype=object)
            buffer[:] = parts
            return buffer, offsets
    """), "test_serialize_layout", "test_fix_stops_the_copying", "test_fix_pss_near_data_size"),
    wrong("serialize", "one bytes object instead of a uint8 array", _serialize("""
            offsets = np.zeros(len(parts) + 1, dtype=np.int64)
            np.cumsum([len(p) for p in parts], out=offsets[1:])
            return b"".join(parts), offsets
    """), "test_serialize_layout", "test_serialize_same_records"),
    wrong("serialize", "n offsets: where each record starts, not where the last ends", _serialize(f"""
            offsets = np.zeros(len(parts), dtype=np.int64)
            np.cumsum([len(p) for p in parts[:-1]], out=offsets[1:])
            return {_BUFFER}, offsets
    """), "test_serialize_layout", "test_serialize_same_records"),
    wrong("serialize", "lengths instead of positions", _serialize(f"""
            return {_BUFFER}, np.array([0] + [len(p) for p in parts], dtype=np.int64)
    """), "test_serialize_layout", "test_serialize_same_records"),
    wrong("serialize", "serialises any iterable (no TypeError)", _serialize(f"""
            offsets = np.zeros(len(parts) + 1, dtype=np.int64)
            np.cumsum([len(p) for p in parts], out=offsets[1:])
            return {_BUFFER}, offsets
    """, check=False), "test_serialize_layout"),
    wrong("serialize", "lengths summed in uint16 (wraps past 64 KB)", _serialize(f"""
            offsets = np.zeros(len(parts) + 1, dtype=np.int64)
            offsets[1:] = np.cumsum(np.array([len(p) for p in parts], dtype=np.uint16), dtype=np.uint16)
            return {_BUFFER}, offsets
    """), "test_serialize_same_records"),
]
