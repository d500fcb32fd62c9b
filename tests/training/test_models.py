"""Party models: shapes, architecture per arXiv:2502.20565v3, App. C, server kinds, fp32, errors."""

import pytest
import torch
from torch import nn

from privzv.errors import PrivzvError
from privzv.training import data, models


def fake_dataset(name, shapes, num_classes=10, n=6):
    xs = [torch.randn(n, *shape) for shape in shapes]
    return data.VerticalDataset(
        name,
        xs,
        torch.zeros(n, dtype=torch.int64),
        xs,
        torch.zeros(n, dtype=torch.int64),
        num_classes,
        "test",
    )


def count(module, kind):
    return sum(isinstance(layer, kind) for layer in module.modules())


@pytest.mark.parametrize(
    "name, shapes, convs",
    [
        ("digits", [(1, 2, 8)] * 4, 0),
        ("breast-cancer", [(10,), (10,), (10,)], 0),
        ("mnist-5k", [(1, 4, 28)] * 7, 2),
        ("mnist", [(1, 1, 28)] * 28, 2),  # one-row bands still work (pooling rounds up)
        ("cifar10", [(3, 16, 16)] * 4, 4),
        ("cifar10", [(3, 32, 32)], 4),
    ],
)
def test_device_models_map_batches_to_embeddings(name, shapes, convs):
    ds = fake_dataset(name, shapes)
    for m in range(ds.devices):
        net = models.device_model(ds, m, embed_dim=12)
        out = net(ds.x_train[m])
        assert out.shape == (6, 12) and out.dtype == torch.float32
        assert count(net, nn.Conv2d) == convs
        assert all(p.dtype == torch.float32 for p in net.parameters())
        out.sum().backward()  # differentiable end to end (first-order baselines need it)
        assert all(p.grad is not None for p in net.parameters())


def test_mnist1d_devices_get_a_two_layer_1d_cnn():
    ds = fake_dataset("mnist1d", [(1, 10), (1, 10), (1, 9)])
    for m in range(ds.devices):
        net = models.device_model(ds, m, embed_dim=2)
        assert count(net, nn.Conv1d) == 2 and count(net, nn.Conv2d) == 0
        out = net(ds.x_train[m])
        assert out.shape == (6, 2)
        out.sum().backward()
        assert all(p.grad is not None for p in net.parameters())


def test_device_model_on_real_digits():
    ds = data.load("digits", 4)
    net = models.device_model(ds, 3, embed_dim=8)
    assert net(ds.x_test[3]).shape == (360, 8)


def test_mlp_server_is_two_linear_layers_with_relu_on_the_concatenation():
    server = models.server_model(3, 5, 10)
    linears = [layer for layer in server.modules() if isinstance(layer, nn.Linear)]
    assert len(linears) == 2 and linears[0].in_features == 15 and linears[1].out_features == 10
    assert count(server, nn.ReLU) == 1
    h = [torch.randn(4, 5) for _ in range(3)]
    assert server(h).shape == (4, 10)
    assert torch.allclose(server(tuple(h)), server.net(torch.cat(h, dim=1)))
    # the order of the embeddings matters: it is a concatenation, not a symmetric pooling
    assert not torch.allclose(server(h), server(h[::-1]))


def test_the_gain_head_is_the_mlp_head_on_its_input_times_the_public_gain():
    plain, gained = models.server_model(3, 5, 10), models.server_model(3, 5, 10, kind="mlp-gain")
    gained.load_state_dict(plain.state_dict())  # same parameters: the gain is no weight
    h = [torch.randn(4, 5) for _ in range(3)]
    assert torch.allclose(gained(h), plain([models.HEAD_GAIN * x for x in h]), atol=1e-6)
    assert not torch.allclose(gained(h), plain(h))


@pytest.mark.parametrize("kind", models.SERVER_KINDS)
def test_a_records_logits_depend_on_its_own_embeddings_alone(kind):
    """Every head's input transform is a function of one record (the gain is a public constant):
    record 0's logits do not move when the other records' embeddings change, nor when it is alone.
    A normalisation over records (the batch's or the table's statistics) would move them, and put
    every record into each record's clipped gradient (the head's per-example sensitivity)."""
    torch.manual_seed(0)
    server = models.server_model(3, 10, 10, kind=kind)
    h = [torch.randn(6, 10) for _ in range(3)]
    others = [torch.cat((x[:1], 100 * torch.randn(5, 10) + 7)) for x in h]
    alone = server([x[:1] for x in h])[0]
    for batch in (h, others):
        assert torch.allclose(server(batch)[0], alone, rtol=1e-5, atol=1e-6)


def test_sum_server_sums_device_outputs():
    server = models.server_model(3, 10, 10, kind="sum")
    h = [torch.randn(4, 10) for _ in range(3)]
    assert torch.allclose(server(h), h[0] + h[1] + h[2])
    assert list(server.parameters()) == []


@pytest.mark.parametrize(
    "args, match",
    [
        ((3, 5, 10, "sum"), "embed_dim == num_classes"),
        ((3, 5, 10, "attention"), "allowed are mlp, mlp-gain, sum"),
        ((0, 5, 10, "mlp"), "devices 0"),
        ((3, 0, 10, "mlp"), "embed_dim 0"),
    ],
)
def test_server_model_errors(args, match):
    with pytest.raises(PrivzvError, match=match):
        models.server_model(*args)


def test_wrong_number_of_embeddings_and_bad_device():
    with pytest.raises(PrivzvError, match="expected one per device"):
        models.server_model(3, 5, 10)([torch.randn(2, 5)] * 2)
    ds = fake_dataset("digits", [(1, 2, 8)] * 4)
    with pytest.raises(PrivzvError, match="allowed are 0..3"):
        models.device_model(ds, 4, 8)
