"""A run's event files damaged (a flipped byte) or cut short (a copy that stopped half-way):
TensorBoard's loader stops at the bad record and says so only at debug level, so `rltrain
plot` drew a third of a run's episodes as its whole curve (explore101). The curve says how
many of the episodes summary.json counts it read, and names the file."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from torch.utils.tensorboard import SummaryWriter

from rltrain.curves import PlotError, read_curve

EPISODES = 60


def make_run(run: Path) -> Path:
    writer = SummaryWriter(str(run / "tb"))
    for i in range(EPISODES):
        writer.add_scalar("episode/return", float(i), 10 * (i + 1))
    writer.close()
    (run / "summary.json").write_text(json.dumps({"episodes": EPISODES}))
    (run / "config.yaml").write_text("env:\n  id: CartPole-v1\n")
    (events,) = (run / "tb").glob("*tfevents*")
    return events


def test_an_intact_run_reads_every_episode_and_says_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    make_run(tmp_path)
    tb_log = logging.getLogger("tensorboard")
    level = tb_log.level
    assert len(read_curve(tmp_path).returns) == EPISODES
    assert capsys.readouterr().err == ""
    # TensorBoard's logger as it was (review 85: left enabled at debug for an API's caller)
    assert tb_log.level == level and not tb_log.isEnabledFor(logging.DEBUG)


@pytest.mark.parametrize("damage", ["flipped byte", "cut short"])
def test_a_damaged_event_file_is_said_with_what_was_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], damage: str
) -> None:
    events = make_run(tmp_path)
    data = bytearray(events.read_bytes())
    if damage == "flipped byte":
        data[2 * len(data) // 3] ^= 0xFF
    else:
        data = data[: 2 * len(data) // 3]
    events.write_bytes(bytes(data))
    read = len(read_curve(tmp_path).returns)
    assert 0 < read < EPISODES
    err = capsys.readouterr().err
    assert f"read {read} of the {EPISODES} episodes summary.json counts" in err
    why = "crc32 check" if damage == "flipped byte" else "truncated record"
    assert f"{events.name}: " in err and why in err


def test_a_run_damaged_before_its_first_episode_is_not_said_to_have_none(tmp_path: Path) -> None:
    events = make_run(tmp_path)
    data = bytearray(events.read_bytes())
    data[120] ^= 0xFF  # in the first records: the version event, then the first episodes
    events.write_bytes(bytes(data))
    with pytest.raises(PlotError, match=f"read 0 of the {EPISODES} episodes") as e:
        read_curve(tmp_path)
    assert "no episode has ended" not in str(e.value)
