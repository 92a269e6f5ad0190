"""The epoch file (RocketMQ's epochFileCheckpoint) and where two logs stop agreeing."""

from __future__ import annotations

from rocketq.broker.replication.epochs import EpochFile, consistent_point


def test_epoch_file_round_trips_and_falls_back_to_its_backup(tmp_path):
    path = str(tmp_path / "epochFileCheckpoint")
    epochs = EpochFile(path)
    assert epochs.last_epoch == -1
    epochs.append(1, 0)
    epochs.append(2, 500)
    assert (tmp_path / "epochFileCheckpoint").read_text().splitlines()[0] == "2"
    assert EpochFile(path).entries == [(1, 0), (2, 500)]
    # The epoch held again (its master restarted within it): it keeps where it began.
    epochs.append(2, 700)
    assert EpochFile(path).entries == [(1, 0), (2, 500)]
    epochs.append(3, 900)
    (tmp_path / "epochFileCheckpoint").write_text("3\n12345\n1-0\n2-9\n3-9\n")  # bad CRC
    assert EpochFile(path).entries == [(1, 0), (2, 500)]  # the .bak


def test_consistent_point_follows_the_newest_shared_epoch():
    # Both were slaves of epoch 1's master; the new master (theirs) took over at 900.
    assert consistent_point([(1, 0)], 1000, [(1, 0), (2, 900)], 1500) == 900
    # A slave that trails: it keeps all it has.
    assert consistent_point([(1, 0)], 400, [(1, 0), (2, 900)], 1500) == 400
    # They disagree on where epoch 2 began: only epoch 1's shared part is kept.
    assert consistent_point([(1, 0), (2, 950)], 1200, [(1, 0), (2, 900), (3, 1000)],
                            2000) == 900
    # An old master of epoch 2 whose tail the epoch-3 master never got.
    assert consistent_point([(1, 0), (2, 900)], 1300, [(1, 0), (2, 900), (3, 1000)],
                            2000) == 1000
    # Nothing shared.
    assert consistent_point([(5, 0)], 10, [(1, 0)], 20) == 0
