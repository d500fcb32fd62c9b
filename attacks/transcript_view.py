"""What one party observed, as aligned arrays: the only input of the transcript attacks.

A :class:`View` has one row per (step, record) message row a party saw: the record's embedding
sent up, for ZO methods the output differences its perturbed embeddings make (``directions``), and
the downlink row for that record: a per-sample gradient (first-order methods) or ZO scalars (the
batch's scalar repeated for DPZV and ZOO-VFL, one value per direction for VFL-CZOFO).
``records`` are the record ids the observer knows (sent on the wire with the embeddings); a
simulated observer without them has ``None``.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from privzv.errors import PrivzvError

FEEDBACK_KINDS = ("gradient", "scalar")
LIMIT = 1e30  # |values| are clipped here, so that squares and sums stay finite in float64


def _sanitised(values) -> tuple[np.ndarray, int]:
    """float64 copy with NaN -> 0, +-inf and |x| > LIMIT -> +-LIMIT; and how many were changed.

    A diverged run sends such values; they tell the attacker nothing beyond "large", and
    without this an attacker's standardisation or metric would fail on them.
    """
    x = np.asarray(values, dtype=float)
    bad = int(np.count_nonzero(~np.isfinite(x) | (np.abs(x) > LIMIT)))
    return np.clip(np.nan_to_num(x, nan=0.0, posinf=LIMIT, neginf=-LIMIT), -LIMIT, LIMIT), bad


@dataclasses.dataclass(frozen=True)
class View:
    """Aligned message rows seen by ``party`` (see the module docstring)."""

    party: str
    steps: np.ndarray  # (n,) step of each row
    feedback: np.ndarray  # (n, k) downlink row: gradient (k = e) or scalar (k = 1)
    feedback_kind: str  # "gradient" | "scalar"
    embeddings: np.ndarray | None = None  # (n, e) the record's (unperturbed) embedding
    directions: np.ndarray | None = None  # (n, k, e) ZO output differences, see gradient_rows
    records: np.ndarray | None = None  # (n,) record ids, None when the observer lacks them
    nonfinite: int = dataclasses.field(default=0, init=False)  # values sanitised (_sanitised)

    def __post_init__(self):
        if self.feedback_kind not in FEEDBACK_KINDS:
            raise PrivzvError(
                f"feedback_kind {self.feedback_kind!r}: allowed are {', '.join(FEEDBACK_KINDS)}"
            )
        steps = np.asarray(self.steps)
        object.__setattr__(self, "steps", steps)
        bad = 0
        for name in ("feedback", "embeddings", "directions"):
            if getattr(self, name) is not None:
                clean, changed = _sanitised(getattr(self, name))
                object.__setattr__(self, name, clean)
                bad += changed
        object.__setattr__(self, "nonfinite", bad)
        if self.feedback.ndim == 1:
            object.__setattr__(self, "feedback", self.feedback[:, None])
        n = steps.shape[0]
        for name in ("feedback", "embeddings", "directions", "records"):
            value = getattr(self, name)
            if value is not None and np.asarray(value).shape[0] != n:
                raise PrivzvError(f"view {name}: {np.asarray(value).shape[0]} rows, steps has {n}")
        if n == 0:
            raise PrivzvError(f"view of {self.party!r}: no message rows (an empty transcript)")

    def without_downlink(self) -> View:
        """The control: the same view with every downlink value replaced by 1.

        An attack's score on this view is what the party gets from its own uplinks alone (e.g.
        its ZO output differences, which follow its features): the downlink's share of a leak
        is the difference to it.
        """
        return dataclasses.replace(self, feedback=np.ones_like(self.feedback))

    def gradient_rows(self) -> np.ndarray:
        """Per-row gradient w.r.t. the party's embedding, as well as the party can tell.

        First-order methods send it. Under ZO the downlink holds scalars ``d_k = (L(h + D_k) -
        L(h)) / lam`` (one per direction, or one batch mean for DPZV / ZOO-VFL) and the party holds
        its output differences ``D_k`` (``directions``); the ZO estimate of arXiv:2306.16077, Sec. VI-B,
        ``sum_k d_k D_k`` (up to a positive scale, irrelevant to every attack here), stands in.
        For a batch-mean scalar this is ``Delta * (h+ - h-)``.
        """
        if self.feedback_kind == "gradient":
            return self.feedback
        if self.directions is None or self.directions.shape[1] != self.feedback.shape[1]:
            raise PrivzvError(
                f"view of {self.party!r}: scalar feedback without one output "
                "difference per scalar gives no per-sample gradient estimate"
            )
        return np.einsum("nk,nke->ne", self.feedback, self.directions)

    def last_per_record(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(record_ids, rows)`` keeping each record's last row (in step order)."""
        if self.records is None:
            raise PrivzvError(f"view of {self.party!r}: has no record ids")
        order = np.lexsort((np.arange(len(self.steps)), self.steps))[::-1]
        ids, first = np.unique(np.asarray(self.records)[order], return_index=True)
        return ids.astype(np.int64), np.asarray(rows)[order[first]]

    def sum_per_record(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(record_ids, rows)`` with each record's rows summed over every step it appears in."""
        if self.records is None:
            raise PrivzvError(f"view of {self.party!r}: has no record ids")
        ids, where = np.unique(np.asarray(self.records), return_inverse=True)
        rows = np.asarray(rows, dtype=float)
        total = np.zeros((len(ids),) + rows.shape[1:])
        np.add.at(total, where, rows)
        return ids.astype(np.int64), total


def _uplink(fields: dict) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """``(ids, h, directions)`` of an uplink, by the protocols' field names (training.methods).

    DPZV sends ``h_plus``, ``h_minus`` (Delta = L(h+) - L(h-)): h = their mean, D = h+ - h-.
    ZOO-VFL sends ``h`` and ``h_perturbed`` [B, e] (Delta = L(h) - L(h_perturbed)): D = h - h~.
    VFL-CZOFO sends ``h`` and ``h_perturbed`` [n, B, e] (or batch first, [B, n, e]) with
    d_k = L(h~_k) - L(h): D_k = h~_k - h.
    First-order methods send one embedding [B, e] beside ``ids``: no directions.
    """
    if "ids" not in fields:
        raise PrivzvError(f"uplink fields {sorted(fields)}: no 'ids' (not a transcript uplink)")
    ids = np.asarray(fields["ids"]).reshape(-1)
    if "h_plus" in fields and "h_minus" in fields:
        plus, minus = (np.asarray(fields[k], float) for k in ("h_plus", "h_minus"))
        return ids, (plus + minus) / 2, (plus - minus)[:, None]
    if "h" in fields and "h_perturbed" in fields:
        h, other = np.asarray(fields["h"], float), np.asarray(fields["h_perturbed"], float)
        if other.ndim == 2:
            return ids, h, (h - other)[:, None]
        batch_first = other.shape[1] != len(ids)
        return ids, h, (other - h[:, None]) if batch_first else (other - h[None]).transpose(1, 0, 2)
    rows = [k for k, v in fields.items() if k != "ids" and np.ndim(v) == 2 and len(v) == len(ids)]
    if len(rows) != 1:
        raise PrivzvError(f"uplink fields {sorted(fields)}: expected one embedding [B, e] beside 'ids'")
    return ids, np.asarray(fields[rows[0]], float), None


def _downlink(fields: dict, rows: int, directions: int | None) -> tuple[np.ndarray, str]:
    """The downlink per row: a [B, e] gradient, or ZO scalars [B, k] (a batch scalar repeated)."""
    if len(fields) != 1:
        raise PrivzvError(f"downlink fields {sorted(fields)}: expected exactly one")
    value = np.asarray(next(iter(fields.values())), float)
    if directions is None:
        if value.ndim == 2 and len(value) == rows:
            return value, "gradient"
    elif value.size == 1:
        return np.full((rows, 1), float(value.reshape(-1)[0])), "scalar"
    elif value.shape == (directions, rows):
        return value.T, "scalar"
    elif value.shape == (rows, directions):
        return value, "scalar"
    raise PrivzvError(f"downlink of shape {value.shape} does not match its uplink (B={rows})")


def wire_view(transcript, device: int | None = None, party: str | None = None) -> View:
    """The messages between the server and device ``device`` (``None``: all) in ``transcript``.

    Works on a device's transcript (its own messages) and on the server's (all the wire traffic:
    the eavesdropper's view). Local facts (u seeds, secret masks) are not read. Each uplink is
    paired with the downlink of the same round; the batch ids are those sent on the wire.
    """
    from privzv.training.messages import SERVER, device_name

    me = transcript.party
    pairs: dict[tuple[int, str], list] = {}
    for e in transcript.entries:
        if e.direction == "local":
            continue
        end = me if e.peer == SERVER else e.peer
        if device is not None and end != device_name(device):
            continue
        sender = me if e.direction == "sent" else e.peer
        pairs.setdefault((e.round, end), [None, None])[0 if sender != SERVER else 1] = e.fields
    complete = [
        (key, up, down) for key, (up, down) in sorted(pairs.items()) if up is not None and down is not None
    ]
    if not complete:
        raise PrivzvError(
            f"transcript of {me!r}: no uplink/downlink pair"
            + (f" with device{device}" if device is not None else "")
        )
    steps, ids, emb, dirs, feedback, kinds = [], [], [], [], [], set()
    for (round_, _), up, down in complete:
        with np.errstate(invalid="ignore", over="ignore"):  # a diverged run: View sanitises
            rec, h, d = _uplink(up)
        fb, kind = _downlink(down, len(rec), None if d is None else d.shape[1])
        steps.append(np.full(len(rec), round_))
        ids.append(rec)
        emb.append(h)
        dirs.append(d)
        feedback.append(fb)
        kinds.add(kind)
    if len(kinds) != 1:
        raise PrivzvError(f"transcript of {me!r}: mixed message formats across rounds")
    return View(
        party or me,
        np.concatenate(steps),
        np.concatenate(feedback),
        kinds.pop(),
        embeddings=np.concatenate(emb),
        directions=None if dirs[0] is None else np.concatenate(dirs),
        records=np.concatenate(ids),
    )


def record_embeddings(view: View) -> tuple[np.ndarray, np.ndarray]:
    """``(record_ids, embedding)``: each record's last embedding in the view."""
    if view.embeddings is None:
        raise PrivzvError(f"view of {view.party!r}: holds no embeddings")
    return view.last_per_record(view.embeddings)
