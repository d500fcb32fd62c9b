"""The server head's training step, one place for every method: plain, or a DP mechanism.

A private run whose head trains (finite epsilon or a sigma, no ``--freeze server``, a head with
parameters) makes the head update a DP release of its own, ``privzv.release.HeadUpdate``,
accounted with the downlink in one ledger (the round's noise multiplier combines both):

- first order (:class:`FirstOrderHead`): DP-SGD (Abadi et al. 2016, "Deep Learning with
  Differential Privacy", Alg. 1). Per-example gradients of the head's loss on the round's
  records (``torch.func``: ``vmap(grad(functional_call))``), each clipped to L2 norm C_h, summed,
  divided by the fixed divisor B, N(0, sigma_h^2) added to every coordinate from the server's
  generator; then the optimiser (SGD with momentum) steps on that noisy gradient. With a pooled
  window (``--head-window q``, the default for a first-order head under threat ``device`` with
  round-robin activation) the clipped rows of every round are summed and one noisy step is made
  per window (:func:`privzv.threats.window_closes`), divided by q M B; the head does not move
  inside a window. The pooled sum is secret until its window's noise is added (it is kept in
  the run folder's private area).
- zeroth order (:class:`ZerothOrderHead`, dpzv ``server_update: zo`` and zoo-vfl): the two-point
  step of arXiv:2502.20565v3, eq. (3) along a direction v drawn from the server's generator. Private:
  the per-example directional derivatives d_i = (l_i(theta + lam v) - l_i(theta - lam v)) / (2 lam)
  are clipped to [-C_h, C_h] (NaN -> 0, +-inf -> +-C_h), summed, divided by B, and one
  N(0, sigma_h^2) is added: a clipped mean of scalars, sensitivity 2C_h/B (replace-one) or C_h/B
  (add-remove), the HeadUpdate's; theta <- theta - lr * g * v is post-processing (v does not
  depend on the data).

Either way the rows are exactly the round's (kept) records: device m's fresh embedding and the
table's embeddings of the others (no labels but the server's own). An empty batch (Poisson)
still makes the noisy step.

The sampled head (``--head-sampling table``, the default for a private run whose head trains:
:class:`SampledHead`, first order; :class:`SampledZerothOrderHead`, zeroth order; what they
share, :class:`OnTable`) does not use the round's records: each round it draws a Poisson
sample of the server's table at q_h = B/D from the server's secret NoiseSource (``bernoulli``,
independent of the downlink's batch) and takes one DP step on it, DP-SGD or the private ZO step
above (one clipped derivative per sampled record), divisor q_h D = B. Either way it is a
Poisson-subsampled Gaussian of sensitivity 2C_h/B or C_h/B per record, accounted alike. A record
is eligible once every device's row of it has reached the table (a fact of the public schedule,
never of the sample); before that it is never in a step (the accounting's T_h steps at rate q_h
bound it). The sample, its size and its timing stay inside the server: the per-example gradients
are computed on a fixed number of rows (:func:`capacity`, padding masked out) so a step's time
does not depend on the sample's size, except when the sample exceeds it (probability below
1e-15), and nothing about the sample is noted in a transcript or written to a public file.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

import torch
from torch import nn
from torch.func import functional_call, grad, vmap

from privzv import threats
from privzv.errors import PrivzvError
from privzv.release import HeadUpdate, Release
from privzv.training import zo

# default share of each round's 1/z^2 on a sampled head (z_h / z_d = sqrt(0.01 / 0.99) = 0.1),
# chosen by the measurement in docs/results.md ("The head on a secret sample of the table")
TABLE_SHARE = 0.99
MAX_LR = 0.1  # default rate of a DP head on the round's batch: min(MAX_LR, 1 / z_h) (issue 7's prototype)
# default rate of a sampled head: NOISE_STEP / (sigma_h sqrt(P)), P its trainable parameters (a
# head may declare its own noise step: models.GAIN_NOISE_STEP): a step's noise moves the weights
# by about NOISE_STEP whatever z_h, C_h, B and P (1/z_h let the
# noise dominate: digits' head reached test losses of 168); chosen on seed 100 (docs/results.md,
# "The head on a secret sample of the table"; a cap on the rate lost accuracy at epsilon 5 and 20)
NOISE_STEP = 0.1
# default pooled window of a private first-order head, in batches of each device (q; a window
# is q M rounds under round-robin), tuned on seed 100 (docs/results.md)
WINDOW = 4


def _place(module: nn.Module) -> torch.device | None:
    """The device of ``module``'s parameters (None, torch's default, when it has none)."""
    return next((p.device for p in module.parameters()), None)


def losses(head: nn.Module, embeddings: Sequence[torch.Tensor], labels: torch.Tensor) -> torch.Tensor:
    """Per-record cross-entropy of the head on the M embeddings: shape [B]."""
    return nn.functional.cross_entropy(head(list(embeddings)), labels, reduction="none")


def first_order_step(optimizer: torch.optim.Optimizer | None, loss: torch.Tensor) -> None:
    """One first-order step on ``loss`` (no-op without an optimiser)."""
    if optimizer is None:
        return
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()


def trains_head(config) -> bool:
    """Whether the run updates the head (not frozen, and the head has parameters)."""
    return config.freeze != "server" and config.server_kind != "sum"


def zeroth_order(config) -> bool:
    """Whether the run's head takes zeroth-order steps (``Method.zeroth_order_head``)."""
    from privzv.training import methods

    return methods.get(config.method).zeroth_order_head(config)


def sampling(config) -> str:
    """``--head-sampling``, else "table" for a private run whose head trains, else "batch".
    PrivzvError for a table-sampled pooled head."""
    if config.head_sampling == "batch":
        return "batch"
    if config.head_sampling == "table":
        if config.head_window:
            raise PrivzvError(
                f"--head-window {config.head_window}: a head on a sample of the "
                "table steps every round; use --head-sampling batch to pool"
            )
        return "table"
    default = config.private and trains_head(config) and not config.head_window
    return "table" if default else "batch"


def share(config) -> float:
    """The head's share of each round's 1/z^2: ``--head-share``, else 1 with ``--freeze
    devices`` (the whole budget on the head: no downlink), else the method's
    ``HEAD_TABLE_SHARE`` or TABLE_SHARE for a sampled head, else 0.5."""
    if config.head_share is not None:
        return config.head_share
    if config.freeze == "devices":
        return 1.0
    if sampling(config) != "table":
        return 0.5
    from privzv.training import methods

    return methods.get(config.method).HEAD_TABLE_SHARE or TABLE_SHARE


def window(config) -> int:
    """The head's pooled window q (0: a DP step every round): ``--head-window``, else WINDOW for
    a first-order head on the round's batch under threat ``device`` with round-robin activation
    (where it is accounted, privzv.threats), else 0."""
    if sampling(config) == "table":
        return 0
    if config.head_window is not None:
        if config.head_window and zeroth_order(config):
            raise PrivzvError(
                f"--head-window {config.head_window}: a zeroth-order head "
                f"({config.method}) steps every round; use --head-window 0"
            )
        return config.head_window
    pooled = config.threat == "device" and config.activation is None and not zeroth_order(config)
    return WINDOW if pooled else 0


def head_update(config) -> HeadUpdate | None:
    """The head's DP update of a private run whose head trains (sigma unset), else None: per
    round (divisor B) or pooled over windows of q batches of each device (divisor q M B)."""
    if not (config.private and trains_head(config)):
        return None
    from privzv.training import defaults  # (defaults reads the method registry)

    q = window(config)
    divisor = config.batch_size * (q * config.devices if q else 1)
    return HeadUpdate(
        clip=defaults.with_clip(config).head_clip, batch_size=divisor, neighbors=config.neighbors, window=q
    )


def with_head(release: Release, config) -> Release:
    """``release`` plus the round's head update and the config's share of the noise (a sampled
    head's rate is set by :func:`on_table`, which knows D)."""
    return dataclasses.replace(release, head=head_update(config), head_share=share(config))


def on_table(release: Release | None, config, records: int) -> Release | None:
    """``release`` with its head's sampling rate q_h = B/D when the head samples the table."""
    if release is None or release.head is None or sampling(config) != "table":
        return release
    return dataclasses.replace(
        release, head=dataclasses.replace(release.head, sampling_rate=config.batch_size / records)
    )


def noise_step(module: nn.Module) -> float:
    """The sampled DP head's noise step for the head ``module``: its own ``noise_step``
    (``models.ConcatServer``; None or absent: NOISE_STEP)."""
    return getattr(module, "noise_step", None) or NOISE_STEP


def default_lr(dp: HeadUpdate | None, plain: float, size: int, step: float = NOISE_STEP) -> float:
    """The first-order head's rate: ``plain`` without DP; ``step`` / (sigma_h sqrt(size)) on a
    sample of the table (``size``: the head's trainable parameter count; ``step``: its
    :func:`noise_step`); else min(MAX_LR, 1/z_h)."""
    if dp is None:
        return plain
    if dp.sampled:
        return step / (dp.sigma * math.sqrt(size))
    return min(MAX_LR, dp.sensitivity / dp.sigma)


def first_order(config, server, dp: HeadUpdate | None, plain_lr: float) -> FirstOrderHead:
    """The first-order head step of a method: rate ``--lr-server``, else :func:`default_lr`."""
    size = sum(p.numel() for p in server.head.parameters() if p.requires_grad)
    step = noise_step(server.head)
    rate = default_lr(dp, plain_lr, size, step) if config.lr_server is None else float(config.lr_server)
    if dp is not None and dp.sampled:
        return SampledHead(server.head, rate, config.momentum, dp, server.noise.stream("head"), server=server)
    per_epoch = -(-len(server.labels) // config.batch_size)
    return FirstOrderHead(
        server.head, rate, config.momentum, dp, server.noise.stream("head"), walk=(config.devices, per_epoch)
    )


def per_example_gradients(
    head: nn.Module, rows: Sequence[torch.Tensor], labels: torch.Tensor
) -> torch.Tensor:
    """[n, P]: row i is the gradient of record i's loss w.r.t. the head's trainable parameters,
    flattened in ``parameters()`` order (``torch.func.vmap`` over ``grad``)."""
    params = {k: p.detach() for k, p in head.named_parameters() if p.requires_grad}

    def loss(p, row, label):
        logits = functional_call(head, p, ([r.unsqueeze(0) for r in row],))
        return nn.functional.cross_entropy(logits, label.unsqueeze(0))

    grads = vmap(grad(loss), in_dims=(None, 0, 0))(params, list(rows), labels)
    return torch.cat([g.reshape(len(labels), -1) for g in grads.values()], dim=1)


def linear_clipped_sum(
    head: nn.Module, rows: Sequence[torch.Tensor], labels: torch.Tensor, clip: float, weights: torch.Tensor
) -> torch.Tensor | None:
    """sum_i w_i clip_{C_h}(g_i), flat in ``parameters()`` order, without forming the per-example
    gradients g_i, for a head whose trainable parameters are all weights and biases of
    ``nn.Linear`` layers, each applied once to a [n, in] input (ghost clipping: Goodfellow 2015,
    "Efficient per-example gradient computations", arXiv:1510.01799; Li, Tramer, Liang &
    Hashimoto 2022, ICLR). For such a layer record i's gradient is delta_i a_i^T (weight) and
    delta_i (bias), delta_i = dl_i/dz_i of its output, a_i its input, so ||g_i||^2 = sum over
    layers of ||delta_i||^2 (||a_i||^2 + 1), and the clipped sum is one product (s delta)^T a
    with s_i = w_i min(1, C_h / ||g_i||). Non-finite entries of delta and a are zeroed, as
    :func:`privzv.training.zo.clip_rows` does. None where the head is not of that form (the
    caller uses :func:`per_example_gradients`)."""
    layers = [m for m in head.modules() if isinstance(m, nn.Linear)]
    owned = {id(p) for m in layers for p in m.parameters(recurse=False)}
    params = [p for p in head.parameters() if p.requires_grad]
    if not params or any(id(p) not in owned for p in params):
        return None
    seen: dict[nn.Linear, list] = {m: [] for m in layers}
    hooks = [m.register_forward_hook(lambda mod, args, out: seen[mod].append((args[0], out))) for m in layers]
    try:
        with torch.enable_grad():
            loss = nn.functional.cross_entropy(head(list(rows)), labels, reduction="sum")
            if any(len(v) != 1 or v[0][0].dim() != 2 for v in seen.values()):
                return None
            outs = [seen[m][0][1] for m in layers]
            deltas = torch.autograd.grad(loss, outs)
    finally:
        for h in hooks:
            h.remove()
    inputs = [torch.nan_to_num(seen[m][0][0].detach(), nan=0.0, posinf=0.0, neginf=0.0) for m in layers]
    deltas = [torch.nan_to_num(d, nan=0.0, posinf=0.0, neginf=0.0) for d in deltas]
    norm2 = sum(
        d.square().sum(1) * (a.square().sum(1) + (m.bias is not None))
        for m, d, a in zip(layers, deltas, inputs)
    )
    scale = weights * (clip / norm2.sqrt().clamp_min(1e-12)).clamp(max=1.0)
    grads = {}
    for m, d, a in zip(layers, deltas, inputs):
        scaled = d * scale[:, None]
        grads[id(m.weight)] = scaled.T @ a
        if m.bias is not None:
            grads[id(m.bias)] = scaled.sum(0)
    return torch.cat([grads[id(p)].reshape(-1) for p in params])


class FirstOrderHead:
    """SGD with momentum on the head: on the batch-mean loss, or DP-SGD when ``dp`` is given
    (a ``HeadUpdate`` with its sigma; noise from ``noise``, the server's generator). A pooled
    ``dp`` (window q >= 1) needs ``walk`` = (devices M, batches per epoch s) to find its windows'
    ends; its step calls count the served releases, as the ledger does."""

    def __init__(
        self,
        head: nn.Module,
        lr: float,
        momentum: float,
        dp: HeadUpdate | None = None,
        noise=None,
        walk: tuple[int, int] | None = None,
    ):
        self.module, self.dp, self.noise, self.walk = head, dp, noise, walk
        self.params = [p for p in head.parameters() if p.requires_grad]
        self.optimizer = torch.optim.SGD(self.params, lr=lr, momentum=momentum) if self.params else None
        self.pooled = dp is not None and dp.window > 0
        # the open window's sum, on the head's device
        self.pool = torch.zeros(sum(p.numel() for p in self.params), device=_place(head))
        self.calls = 0

    def clipped_sum(self, rows: Sequence[torch.Tensor], labels: torch.Tensor) -> torch.Tensor:
        """sum_i clip_{C_h}(g_i), flat [P] (zeros for an empty batch)."""
        if not len(labels):
            return torch.zeros_like(self.pool)
        return zo.clip_rows(per_example_gradients(self.module, rows, labels), self.dp.clip).sum(0)

    def private_gradient(self, rows: Sequence[torch.Tensor], labels: torch.Tensor) -> torch.Tensor:
        """sum_i clip_{C_h}(g_i) / B + N(0, sigma_h^2 I): the released gradient, flat [P]."""
        return self.noise.add_gaussian(self.clipped_sum(rows, labels) / self.dp.batch_size, self.dp.sigma)

    def pooled_gradient(self, rows: Sequence[torch.Tensor], labels: torch.Tensor):
        """Add the round's clipped rows to the window's sum; at the window's end, the released
        gradient (sum / (q M B) + N(0, sigma_h^2 I)) and an empty window, else None."""
        self.pool += self.clipped_sum(rows, labels)
        index, self.calls = self.calls, self.calls + 1
        if not threats.window_closes(index, *self.walk, self.dp.window):
            return None
        flat = self.noise.add_gaussian(self.pool / self.dp.batch_size, self.dp.sigma)
        self.pool.zero_()
        return flat

    def step(self, rows: Sequence[torch.Tensor], labels: torch.Tensor) -> None:
        if self.optimizer is None:
            return
        if self.dp is None:
            if len(labels):
                first_order_step(self.optimizer, losses(self.module, rows, labels).mean())
            return
        flat = self.pooled_gradient(rows, labels) if self.pooled else self.private_gradient(rows, labels)
        if flat is None:
            return
        for p, g in zip(self.params, flat.split([p.numel() for p in self.params])):
            p.grad = g.view_as(p).to(p.dtype)
        self.optimizer.step()

    def state_dict(self) -> dict | None:
        """The optimiser's state; a pooled head adds ``head_pool`` (its open window's sum, a
        secret: ``privzv.training.run_folder.SECRET_STATE``, and its step count)."""
        state = self.optimizer.state_dict() if self.optimizer else None
        if self.pooled:
            state = {**state, "head_pool": {"sum": self.pool.clone(), "calls": torch.tensor(self.calls)}}
        return state

    def load_state_dict(self, state: dict | None) -> None:
        if self.optimizer is not None and state is not None:
            state = dict(state)
            pool = state.pop("head_pool", None)
            if self.pooled:
                self.pool, self.calls = pool["sum"].to(self.pool.device, copy=True), int(pool["calls"])
            self.optimizer.load_state_dict(state)


def capacity(expected: float) -> int:
    """Rows a sampled head step computes on: the expected sample size q_h D plus 8 of its
    standard deviations plus 8 (a Poisson sample exceeds it with probability below 1e-15)."""
    return int(math.ceil(expected + 8.0 * math.sqrt(expected) + 8.0))


class OnTable:
    """What a head step on a secret Poisson sample of ``self.server``'s table shares, first or
    zeroth order (module docstring): each :meth:`padded_sample` draws keep decisions for every
    record at q_h = ``self.dp.sampling_rate`` from the server's ``head-sampling`` stream, keeps
    the eligible ones (every device's row reached the table: ``EmbeddingTable.filled``) and pads
    them with record 0 to :func:`capacity` rows, the padding masked out of the clipped sum
    (``self.mask``); the divisor stays ``dp.batch_size`` = q_h D."""

    server: object
    dp: HeadUpdate
    mask: torch.Tensor

    def on_table(self, server) -> None:
        """Sample ``server``'s table from now on."""
        self.server = server
        self.rows = capacity(self.dp.sampling_rate * len(server.labels))

    def sample(self) -> torch.Tensor:
        """The ids of this step's sample (secret: never noted, logged or sent)."""
        keep = self.server.noise.stream("head-sampling").bernoulli(
            len(self.server.labels), self.dp.sampling_rate
        )
        filled = self.server.table.filled.all(dim=0)
        return torch.nonzero(keep.to(filled.device) & filled).reshape(-1)

    def padded_sample(self) -> tuple[list[torch.Tensor], torch.Tensor]:
        """The M table rows and the labels of a fresh sample padded with record 0 to at least
        ``self.rows`` rows; ``self.mask`` is 1 on the sample, 0 on the padding."""
        ids = self.sample()
        padded = torch.cat((ids, ids.new_zeros(max(self.rows - len(ids), 0))))
        self.mask = (torch.arange(len(padded), device=padded.device) < len(ids)).to(torch.get_default_dtype())
        return self.server.table.gather(padded), self.server.labels[padded]


class SampledHead(OnTable, FirstOrderHead):
    """DP-SGD on a secret Poisson sample of ``server``'s table (:class:`OnTable`; its Gaussian
    noise from ``noise``, the ``head`` stream): one noisy step per :meth:`step`, the per-example
    gradients computed on :func:`capacity` rows."""

    def __init__(self, head: nn.Module, lr: float, momentum: float, dp: HeadUpdate, noise, server):
        super().__init__(head, lr, momentum, dp, noise)
        self.on_table(server)

    def clipped_sum(self, rows, labels) -> torch.Tensor:
        """sum_i clip_{C_h}(g_i) over the padded sample, the padding masked out, flat [P]
        (:func:`linear_clipped_sum` where the head allows, else per-example gradients)."""
        fast = linear_clipped_sum(self.module, rows, labels, self.dp.clip, self.mask)
        if fast is not None:
            return fast.detach()
        grads = per_example_gradients(self.module, rows, labels)
        return (zo.clip_rows(grads, self.dp.clip) * self.mask[:, None]).sum(0)

    def step(self, rows: Sequence[torch.Tensor], labels: torch.Tensor) -> None:
        """One DP-SGD step on a fresh padded sample (the round's ``rows`` and ``labels`` are
        not used)."""
        if self.optimizer is None:
            return
        super().step(*self.padded_sample())


class ZerothOrderHead:
    """The head's two-point ZO step (arXiv:2502.20565v3, eq. (3)), seeded from the server's generator;
    private (clipped per-example directional derivatives plus noise) when ``dp`` is given."""

    def __init__(self, head: nn.Module, lr: float, lam: float, noise, dp: HeadUpdate | None = None):
        self.module, self.lr, self.lam, self.noise, self.dp = head, lr, lam, noise, dp
        self.params = [p for p in head.parameters() if p.requires_grad]

    def clipped_sum(self, d: torch.Tensor) -> torch.Tensor:
        """sum_i clip_{C_h}(d_i) of the per-example directional derivatives ``d``."""
        return zo.clip_scalars(d, self.dp.clip).sum()

    def derivative(self, plus: torch.Tensor, minus: torch.Tensor) -> float:
        """g: the mean of (plus - minus) / (2 lam) (non-finite terms -> 0), or, private, the
        clipped sum / B plus N(0, sigma_h^2)."""
        d = (plus - minus) / (2.0 * self.lam)
        if self.dp is None:
            return float(zo.clip_scalars(d, None).mean())
        return float(self.noise.add_gaussian(self.clipped_sum(d) / self.dp.batch_size, self.dp.sigma))

    def step(self, rows: Sequence[torch.Tensor], labels: torch.Tensor) -> None:
        if not self.params or (self.dp is None and not len(labels)):
            return
        seed = self.noise.seed()
        with torch.no_grad():
            norm = zo.perturb_(self.params, seed, self.lam)
            plus = losses(self.module, rows, labels)
            zo.perturb_(self.params, seed, -2.0 * self.lam, norm)
            minus = losses(self.module, rows, labels)
            zo.perturb_(self.params, seed, self.lam - self.lr * self.derivative(plus, minus), norm)

    def state_dict(self) -> None:
        return None

    def load_state_dict(self, state) -> None:
        """Stateless (its direction seeds come from the server's generator)."""


class SampledZerothOrderHead(OnTable, ZerothOrderHead):
    """The private two-point ZO step on a secret Poisson sample of ``server``'s table
    (:class:`OnTable`): per :meth:`step`, the directional derivatives of the padded sample's
    rows, clipped to [-C_h, C_h], the padding masked out, summed, / B, plus one N(0, sigma_h^2)
    from ``noise`` (the ``head`` stream, which also seeds the direction)."""

    def __init__(self, head: nn.Module, lr: float, lam: float, noise, dp: HeadUpdate, server):
        super().__init__(head, lr, lam, noise, dp)
        self.on_table(server)

    def clipped_sum(self, d: torch.Tensor) -> torch.Tensor:
        return (zo.clip_scalars(d, self.dp.clip) * self.mask.to(d.device)).sum()

    def step(self, rows: Sequence[torch.Tensor], labels: torch.Tensor) -> None:
        """One noisy ZO step on a fresh padded sample (the round's ``rows`` and ``labels`` are
        not used)."""
        if self.params:
            super().step(*self.padded_sample())


def zeroth_order_step(config, server, dp: HeadUpdate | None, lr: float, lam: float) -> ZerothOrderHead:
    """The zeroth-order head step of a method (dpzv ``server_update: zo``, zoo-vfl): on a sample
    of the table when ``dp`` is sampled, else on the round's rows."""
    noise = server.noise.stream("head")
    if dp is not None and dp.sampled:
        return SampledZerothOrderHead(server.head, lr, lam, noise, dp, server=server)
    return ZerothOrderHead(server.head, lr, lam, noise, dp)
