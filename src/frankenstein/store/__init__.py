"""The campaign store, one job per module:

    core.py        the Store: opening, the one transaction helper, the head file, writes and typed reads
    migrations.py  the format version, the registered migrations, the record tables
    rows.py        typed rows and their encoding to and from SQLite rows and JSON columns
    verify.py      chain verification: records as stored and as meant, registered slots, the end-to-end check

The package is the only place that speaks SQL or decodes stored JSON. Import from here:
``from frankenstein.store import Store, StartRow``.
"""

from frankenstein.store.core import Store, busy_timeout_s, lock_wait_s, read_only_reason
from frankenstein.store.migrations import FORMAT_VERSION, MIGRATIONS, RECORD_TABLES
from frankenstein.store.rows import (
    EpisodeRow,
    LedgerEntry,
    ObservedDraw,
    Override,
    Refusal,
    RefusalWhat,
    RegistryRow,
    ServedRequest,
    StartRow,
    _link,
    now_iso,
)
from frankenstein.store.verify import _record, registered_slots

__all__ = [
    "FORMAT_VERSION",
    "MIGRATIONS",
    "RECORD_TABLES",
    "EpisodeRow",
    "LedgerEntry",
    "ObservedDraw",
    "Override",
    "Refusal",
    "RefusalWhat",
    "RegistryRow",
    "ServedRequest",
    "StartRow",
    "Store",
    "_link",
    "_record",
    "busy_timeout_s",
    "lock_wait_s",
    "now_iso",
    "read_only_reason",
    "registered_slots",
]
