"""Records: what the GPUs measured, kept in results/ and read back.

    store         the append-only JSON Lines store: Store, load, find, import_records
    schema        what one record holds (make_record), the table of many (to_frame), provenance
    timings       which records time a step cleanly, and how they group
    profiles      one profiled step, kernel by kernel
    routing       the tokens each expert received, as an MoE run recorded them

`megalab.records.provenance(...)`, `megalab.records.TRAINER_CHANGES`: the schema's names are handed
on here.
"""

from megalab.records.schema import (
    ENV_FIELDS,
    PROVENANCE,
    REPEAT_TAGS,
    SCHEMA,
    SERIES_FIELDS,
    SUMMARY_FIELDS,
    TRAINER_CHANGES,
    WARMUP_TAG,
    REUSED,
    is_repeat,
    is_reused,
    is_warmup,
    label_of,
    make_record,
    provenance,
    record_problems,
    to_frame,
    trained,
    trainer_revision,
    type_problems,
    utc_now,
)

__all__ = [
    "ENV_FIELDS",
    "REUSED",
    "is_reused",
    "PROVENANCE",
    "REPEAT_TAGS",
    "SCHEMA",
    "SERIES_FIELDS",
    "SUMMARY_FIELDS",
    "TRAINER_CHANGES",
    "WARMUP_TAG",
    "is_repeat",
    "is_warmup",
    "label_of",
    "make_record",
    "provenance",
    "record_problems",
    "to_frame",
    "trained",
    "trainer_revision",
    "type_problems",
    "utc_now",
]
