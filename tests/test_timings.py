"""timings: which records time a step cleanly, by configuration and by the trainer that made them."""
from megalab import timings
from megalab.store import Store

from run_records import CFG
from run_records import record as _record


def test_repeats_group_by_configuration_and_trainer(tmp_path):
    """Runs of one configuration by two trainers (records.TRAINER_CHANGES between them) are not repeats;
    `timed` still answers the newest, whichever trainer made it."""
    from megalab.records import TRAINER_CHANGES, trainer_revision
    assert all(when.endswith("Z") and len(when) == 20 for when, *_ in TRAINER_CHANGES)  # as records write it
    store = Store(tmp_path)
    before = [store.append(_record(at=f"2025-0{m}-01T00:00:00Z")) for m in (1, 2)]
    after = store.append(_record(at="2030-01-01T00:00:00Z"))
    store.append(_record(tags=["t", "packed"], at="2099-01-01T00:00:00Z"))  # beside other jobs: not a timing
    assert [trainer_revision(r) for r in (*before, after)] == [0, 0, 1]
    groups = timings.repeats(store, "H200")
    assert sorted((k[1], [r["id"] for _, r in v]) for k, v in groups.items()) == \
        [(0, [before[0]["id"], before[1]["id"]]), (1, [after["id"]])]
    assert [r["id"] for _, r in timings.timed(store, "H200").values()] == [after["id"]]
    assert {rev: [r["id"] for r in v] for rev, v in timings.by_trainer(store, CFG.replace(iters=99), "H200").items()} == \
        {0: [before[0]["id"], before[1]["id"]], 1: [after["id"]]}
