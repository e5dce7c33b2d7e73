"""Notebook 07 (remote storage): wrong answers and delegations (see ``__init__.py``)."""

from wrong_answers import wrong

DELEGATIONS = {
    "predicted_items_per_s": "from feedgpu.remote_model import predicted_items_per_s",
    "fetch_all": """
        import feedgpu.workloads.remote as remote

        fetch_all = remote.fetch_all
    """,
    "fetch_with_retries": "from feedgpu.workloads.remote import fetch_with_retries",
}

WRONG_ANSWERS = []
