"""The publication mark: how far a process's holds are done, written at most once per interval, never over a hold
whose outcome is unknown."""

from __future__ import annotations

from typing import Any

from shared.outbox.inflight import Background
from shared.outbox.marks import MARK_ROW, MARKS_TABLE, PublicationMarks
from shared.storage.memory import MemoryTables
from tests.turns import others_run


class Writes(MemoryTables):
    def __init__(self) -> None:
        super().__init__()
        self.marks: list[tuple[str, int]] = []

    async def upsert(self, table: str, entity: Any) -> Any:
        if table == MARKS_TABLE:
            self.marks.append((entity.partition_key, entity.data["upTo"]))
        return await super().upsert(table, entity)


def marks(interval: float = 0) -> tuple[PublicationMarks, Writes, Background]:
    tables, background = Writes(), Background()
    return PublicationMarks(tables, interval=interval, background=background), tables, background


async def test_the_mark_covers_holds_only_up_to_the_first_unfinished_one() -> None:
    mine, tables, background = marks()
    await tables.ensure_tables([MARKS_TABLE])
    one, two, three = mine.take(), mine.take(), mine.take()
    mine.finished(one)
    mine.finished(three)
    await background.settled()
    other, _, _ = marks()
    other.tables = tables
    assert await other.covers(one) and not await other.covers(two) and not await other.covers(three)
    assert mine.covers_here(one) and not mine.covers_here(three)
    mine.finished(two)
    await background.settled()
    stored = await tables.get(MARKS_TABLE, mine.holder, MARK_ROW)
    assert stored is not None and stored.data["upTo"] == 3
    other._read.clear()
    assert await other.covers(three)


async def test_a_hold_of_unknown_outcome_stops_its_mark_below_it_and_later_holds_take_a_new_id() -> None:
    mine, tables, background = marks()
    await tables.ensure_tables([MARKS_TABLE])
    one, lost, three = mine.take(), mine.take(), mine.take()
    mine.unknown(lost)
    renewed = mine.take()
    assert renewed.holder != one.holder and renewed.number == 1
    for hold in (three, one, renewed):
        mine.finished(hold)
    mine.finished(lost)  # cannot be told finished any more
    await background.settled()
    # The old id's bookkeeping is dropped once its mark is as far as it will go: read from storage then.
    assert mine.covers_here(one) is None
    assert await mine.covers(one) and not await mine.covers(lost) and not await mine.covers(three)
    assert sorted(tables.marks) == sorted([(one.holder, 1), (renewed.holder, 1)])


async def test_the_mark_is_written_at_most_once_per_interval() -> None:
    mine, tables, background = marks(interval=0.2)
    await tables.ensure_tables([MARKS_TABLE])
    mine.finished(mine.take())
    await others_run()  # the first write, at once
    for _ in range(49):
        mine.finished(mine.take())
    await background.settled()
    assert [up_to for _, up_to in tables.marks] == [1, 50]  # the first at once, the rest one interval later
