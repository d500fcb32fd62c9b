"""The ledger across a resume (privzv.ledger, "Resume"): releases made after the last checkpoint
stay counted, a pooled head's windows follow the head's own step count, a bit-identical seeded
replay is counted once, a fresh (secure) draw twice. Each case is checked per record against the
K_i = (1 - w) k_i + w sum c^2 of the head processes that really ran."""

from __future__ import annotations

import numpy as np
import pytest

from privzv import threats
from privzv.errors import PrivzvError
from privzv.ledger import PrivacyLedger
from privzv.release import HeadUpdate, Release, Schedule

DELTA, M, B, D, Q = 1e-5, 4, 4, 40, 1  # s = 10 batches per epoch; a window is q M = 4 releases
PER_EPOCH = -(-D // B)


def _release() -> Release:
    head = HeadUpdate(clip=0.1, batch_size=B * M * Q, window=Q)
    return Release(clip=1.0, batch_size=B, head=head, head_share=0.5).with_noise_multiplier(3.0)


def _ledger() -> PrivacyLedger:
    return PrivacyLedger(
        release=_release(),
        schedule=Schedule(steps=200, dataset_size=D, devices=M),
        delta=DELTA,
        epsilon_budget=1e9,
    )


def _walk(rng, n):
    return [(r % M, rng.choice(D, B, replace=False)) for r in range(n)]


def _head(releases, start, window, counted_from=0):
    """A head process from position ``start`` with ``window`` open: the sum of c^2 of the windows
    it closes at positions >= ``counted_from``, and its open window."""
    squares, window = np.zeros(D), window.copy()
    for position, (_, ids) in enumerate(releases, start):
        window[ids] += 1
        if threats.window_closes(position, M, PER_EPOCH, Q):
            if position >= counted_from:
                squares += window**2
            window[:] = 0
    return squares, window


def _real_k(first, checkpoint, second, same):
    """Per record K of a process that made ``first`` and was killed, and one resumed from
    position ``checkpoint`` that made ``second``, whose first ``same`` releases (and head steps)
    were bit-identical to the killed one's (counted once); its open window counts as released."""
    w = _release().head_weight
    k = np.zeros(D)
    for _, ids in first + second[same:]:
        k[ids] += 1
    killed, _ = _head(first, 0, np.zeros(D))
    _, at_checkpoint = _head(first[:checkpoint], 0, np.zeros(D))
    resumed, open_ = _head(second, checkpoint, at_checkpoint, counted_from=checkpoint + same)
    return (1 - w) * k + w * (killed + resumed + open_**2)


def _ledger_k(ledger):
    s, w = ledger.state_dict(), ledger.release.head_weight
    k = np.array(s["counts"]).sum(axis=0)
    return (1 - w) * k + w * (np.array(s["window_squares"]) + np.array(s["window_counts"]) ** 2)


def _killed_and_resumed(first, checkpoint, second, replayed):
    ledger = _ledger()
    for i, (m, ids) in enumerate(first):
        if i == checkpoint:
            ledger.mark()
        ledger.record(m, ids)
    assert ledger.rewind(replayed) == len(first) - checkpoint
    for m, ids in second:
        ledger.record(m, ids)
    return ledger


@pytest.mark.parametrize("discarded", [5, 6, 7, 9, 10, 11])  # discarded mod M in {1, 2, 3}
@pytest.mark.parametrize("checkpoint", [8, 10, 13])
def test_seeded_replay_is_counted_once_and_windows_stay_the_heads(checkpoint, discarded):
    """Seeded noise: the resumed run re-makes the discarded releases; the ledger ends equal to an
    unkilled run's ledger, per record, and so does its epsilon."""
    walk = _walk(np.random.default_rng(checkpoint * 100 + discarded), 40)
    ledger = _killed_and_resumed(walk[: checkpoint + discarded], checkpoint, walk[checkpoint:], True)
    unkilled = _ledger()
    for m, ids in walk:
        unkilled.record(m, ids)
    assert ledger.state_dict() == unkilled.state_dict()
    assert np.allclose(
        _ledger_k(ledger),
        _real_k(walk[: checkpoint + discarded], checkpoint, walk[checkpoint:], same=discarded),
    )
    assert ledger.epsilon_spent() == unkilled.epsilon_spent()


@pytest.mark.parametrize("discarded", [1, 2, 3, 5, 6, 7])
@pytest.mark.parametrize("checkpoint", [8, 13])
def test_secure_noise_replay_is_charged_again_with_the_heads_windows(checkpoint, discarded):
    """Secure noise: every re-made release is a fresh one; per record the ledger's K is the K of
    both head processes (the killed one's closed windows, the resumed one's from the checkpoint's
    open window), never less."""
    walk = _walk(np.random.default_rng(checkpoint * 7 + discarded), 40)
    first = walk[: checkpoint + discarded]
    ledger = _killed_and_resumed(first, checkpoint, walk[checkpoint:], False)
    assert np.allclose(_ledger_k(ledger), _real_k(first, checkpoint, walk[checkpoint:], same=0))
    assert ledger.releases == len(first) + len(walk) - checkpoint
    unkilled = _ledger()
    for m, ids in walk:
        unkilled.record(m, ids)
    assert (_ledger_k(ledger) >= _ledger_k(unkilled)).all()
    assert _ledger_k(ledger).sum() > _ledger_k(unkilled).sum()
    assert ledger.epsilon_spent() >= unkilled.epsilon_spent()


@pytest.mark.parametrize("same", [0, 1, 3, 6])
def test_a_seeded_replay_that_differs_ends_the_replay_and_keeps_the_rest_counted(same):
    """A re-made release that is not the journal's next one (another batch) is a fresh release;
    the discarded ones after it stay counted as made, windows where the killed head closed them."""
    rng = np.random.default_rng(same)
    walk = _walk(rng, 40)
    first = walk[: 8 + 7]
    second = walk[8 : 8 + same] + [(p % M, rng.choice(D, B, replace=False)) for p in range(8 + same, 40)]
    ledger = _killed_and_resumed(first, 8, second, True)
    assert np.allclose(_ledger_k(ledger), _real_k(first, 8, second, same=same))


def test_a_checkpoint_during_the_replay_and_a_second_kill():
    """Killed, resumed, checkpointed half-way through the replay, killed again and resumed: the
    ledger still ends equal to the unkilled run's (seeded)."""
    walk = _walk(np.random.default_rng(3), 40)
    ledger = _ledger()
    for i, (m, ids) in enumerate(walk[:19]):
        if i == 8:
            ledger.mark()
        ledger.record(m, ids)
    ledger.rewind(True)
    for i, (m, ids) in enumerate(walk[8:22], 8):
        if i == 12:
            ledger.mark()
        ledger.record(m, ids)
    assert ledger.rewind(True) == 10
    for m, ids in walk[12:]:
        ledger.record(m, ids)
    unkilled = _ledger()
    for m, ids in walk:
        unkilled.record(m, ids)
    assert ledger.state_dict() == unkilled.state_dict()


def test_rewind_needs_a_mark_and_the_position_round_trips():
    ledger = _ledger()
    with pytest.raises(PrivzvError, match="mark"):
        ledger.rewind(True)
    for m, ids in _walk(np.random.default_rng(0), 6):
        ledger.record(m, ids)
    state = ledger.state_dict()
    assert state["head_position"] == 6
    assert PrivacyLedger.from_state_dict(state).state_dict() == state
    with pytest.raises(PrivzvError, match="head_position"):
        PrivacyLedger.from_state_dict({**state, "head_position": 7})
