"""Logging sinks: TensorBoard event files and Weights & Biases (offline) receive every row a
job logs, read back here from their own files; a resumed run's TensorBoard log hides what
the killed run logged past its checkpoint."""

import csv
import glob
import json
import os
import re
import struct

import numpy as np
import pytest

from eqx_qd import jobs
from eqx_qd.cli import main


ME = dict(
    task="sphere", genotype_dim=3, cells=16, cvt_samples=500, batch_size=8, iterations=12,
    log_every=2, checkpoint_every=4,
)  # fmt: skip


def _progress(folder) -> dict[str, np.ndarray]:
    with open(os.path.join(folder, "progress.csv"), newline="") as f:
        rows = list(csv.DictReader(f))
    return {k: np.asarray([float(r[k]) for r in rows]) for k in rows[0]}


def _events(folder):
    """Every event of the TensorBoard files in `folder`, file by file in the order written
    (TFRecord framing: length, its CRC, the Event proto, its CRC)."""
    from tensorboardX.proto import event_pb2

    out = []
    for path in sorted(glob.glob(os.path.join(folder, "events.out.tfevents.*"))):
        with open(path, "rb") as f:
            data = f.read()
        pos = 0
        while pos < len(data):
            (length,) = struct.unpack("<Q", data[pos : pos + 8])
            event = event_pb2.Event()
            event.ParseFromString(data[pos + 12 : pos + 12 + length])
            out.append(event)
            pos += 12 + length + 4
    return out


def _scalars(events, tag: str) -> dict[int, float]:
    """Step -> value of `tag` as TensorBoard shows it: a session start at step S (a purge)
    hides what came before from S on."""
    series: dict[int, float] = {}
    for e in events:
        if e.HasField("session_log") and e.session_log.status == e.session_log.START:
            series = {s: v for s, v in series.items() if s < e.step}
        for value in e.summary.value:
            if value.tag == tag:
                series[e.step] = value.simple_value
    return series


class _Stop(Exception):
    pass


TAG = "map-elites/qd_score"


@pytest.mark.e2e
def test_tensorboard_gets_every_row_and_a_resume_hides_the_killed_runs_tail(tmp_path):
    whole = jobs.run(
        jobs.MAPElitesConfig(**ME), tmp_path / "whole", progress=False, plots=False,
        log=["tensorboard"],
    )  # fmt: skip
    series = _scalars(_events(tmp_path / "whole" / "tensorboard"), TAG)
    table = _progress(tmp_path / "whole")
    assert list(series) == table["iteration"].astype(int).tolist() == [0, 2, 4, 6, 8, 10, 12]
    assert np.array_equal(np.float32(list(series.values())), np.float32(table["qd_score"]))
    assert whole.last["qd_score"] == table["qd_score"][-1]

    # Killed past its checkpoint at 6 (row 8 logged), then resumed: TensorBoard shows each
    # step once, with the values the resumed run wrote.
    seen = []

    # A process killed (kill -9: nothing closes) loses no row of a finished chunk: the event
    # file on disk, read while the run is alive, holds every row up to the one logging now,
    # so at least what the checkpoint at 6 covers (issue 76, item 3: it had held nothing).
    on_disk = {}

    def stop_at_10(row):
        seen.append(row["iteration"])
        on_disk[row["iteration"]] = _scalars(_events(tmp_path / "cut" / "tensorboard"), TAG)
        if row["iteration"] >= 10:
            raise _Stop

    config = jobs.MAPElitesConfig(**{**ME, "checkpoint_every": 6})
    with pytest.raises(_Stop):
        jobs.run(
            config, tmp_path / "cut", progress=False, plots=False, on_log=stop_at_10,
            log=["tensorboard"],
        )  # fmt: skip
    assert [c.step for c in jobs.list_checkpoints(tmp_path / "cut")] == [6]
    for step, logged in on_disk.items():
        assert list(logged) == [s for s in series if s < step], step
    # Resumed without naming the sink again (`--resume FOLDER`): it logs on into the folder's.
    jobs.resume(tmp_path / "cut", progress=False, plots=False)
    events = _events(tmp_path / "cut" / "tensorboard")
    starts = [e.step for e in events if e.HasField("session_log")]
    assert 7 in starts  # the purge marker: the first step logged again
    resumed = _scalars(events, TAG)
    assert resumed == series


def _made_order(path: str) -> tuple[str, int]:
    """The order W&B made its run folders in: by their second, then by the "-N" it appends to
    a name taken within the same second. (Sorting the paths as text put "<id>-1/" before
    "<id>/", and a resume started within the run's second was read first.)"""
    name = os.path.basename(os.path.dirname(path))
    stamp, _, rest = name.removeprefix("offline-run-").partition("-")
    suffix = re.fullmatch(r"[^-]+-(\d+)", rest)
    return stamp, int(suffix.group(1)) if suffix else 0


def _wandb_rows(folder) -> list[dict]:
    """The history rows of the offline W&B runs in `folder` (its records: LevelDB log
    framing of `Record` protos)."""
    from wandb.proto import wandb_internal_pb2

    rows = []
    paths = glob.glob(os.path.join(folder, "wandb", "offline-run-*", "run-*.wandb"))
    for path in sorted(paths, key=_made_order):
        with open(path, "rb") as f:
            data, pos, buffer = f.read(), 7, b""
        while pos + 7 <= len(data):
            if 32768 - pos % 32768 < 7:  # a block's padding
                pos += 32768 - pos % 32768
                continue
            _, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
            buffer += data[pos + 7 : pos + 7 + length]
            pos += 7 + length
            if kind in (1, 4):  # a whole record, or its last piece
                record = wandb_internal_pb2.Record()
                record.ParseFromString(buffer)
                buffer = b""
                if record.HasField("history"):
                    items = record.history.item
                    rows.append(
                        {i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in items}
                    )
    return rows


def test_wandb_run_folders_are_read_in_the_order_they_were_made():
    first = "wandb/offline-run-20261128_120101-abc123de/run-abc123de.wandb"
    same_second = "wandb/offline-run-20261128_120101-abc123de-1/run-abc123de.wandb"
    later = "wandb/offline-run-20261128_120102-abc123de/run-abc123de.wandb"
    assert sorted([later, same_second, first], key=_made_order) == [first, same_second, later]


@pytest.mark.e2e
def test_wandb_offline_gets_every_row_and_a_resume_continues_its_run(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    config = jobs.MAPElitesConfig(**{**ME, "iterations": 6})
    jobs.run(config, tmp_path / "run", progress=False, plots=False, log=["wandb"])
    rows = _wandb_rows(tmp_path / "run")
    table = _progress(tmp_path / "run")
    assert [r["iteration"] for r in rows] == table["iteration"].tolist()
    assert [r["qd_score"] for r in rows] == table["qd_score"].tolist()
    run_id = (tmp_path / "run" / "wandb_id.txt").read_text().strip()
    jobs.resume(tmp_path / "run", iterations=10, progress=False, plots=False)  # (its own sink)
    assert (tmp_path / "run" / "wandb_id.txt").read_text().strip() == run_id
    runs = glob.glob(str(tmp_path / "run" / "wandb" / "offline-run-*"))
    # Both folders hold the one run id; W&B appends "-1" to the second folder's name when the
    # resume starts within the same second as the run (a name taken already).
    named = re.compile(rf"offline-run-\d{{8}}_\d{{6}}-{re.escape(run_id)}(-\d+)?")
    assert len(runs) == 2 and all(named.fullmatch(os.path.basename(r)) for r in runs), runs
    assert [r["iteration"] for r in _wandb_rows(tmp_path / "run")][-2:] == [8, 10]


def test_a_bad_sink_is_refused_before_anything_runs(tmp_path, capsys):
    with pytest.raises(ValueError, match="unknown sink 'csv'; known: tensorboard, wandb"):
        jobs.run(jobs.MAPElitesConfig(**ME), tmp_path / "a", progress=False, log=["csv"])
    with pytest.raises(ValueError, match="tensorboard writes into the run folder"):
        jobs.run(jobs.MAPElitesConfig(**ME), None, progress=False, log=["tensorboard"])
    assert not (tmp_path / "a").exists()
    with pytest.raises(SystemExit) as e:
        main(["run", "map-elites", "--log", "csv", "--out", str(tmp_path / "b")])
    assert e.value.code == 2 and "invalid choice: 'csv'" in capsys.readouterr().err
    assert not (tmp_path / "b").exists()
