"""torch.nn modules through functional_call: forward under jit, gradients vs torch.func, and
per-example gradients vs a loop of torch.func gradients."""

import pytest
import torch
import torch.func as tf
import torch.nn as nn

import thunderx as tx


class MHA(nn.Module):
    def __init__(self):
        super().__init__()
        self.m = nn.MultiheadAttention(16, 2, batch_first=True)

    def forward(self, x):
        out, weights = self.m(x, x, x, need_weights=True)
        return out + weights.sum()


class LSTMCellOut(nn.Module):
    def __init__(self):
        super().__init__()
        self.cell = nn.LSTMCell(6, 5)

    def forward(self, x):
        h, c = self.cell(x)
        return h + c


class SequenceOut(nn.Module):
    """nn.LSTM / nn.GRU / nn.RNN return (output, state): keep the output sequence."""

    def __init__(self, rnn):
        super().__init__()
        self.rnn = rnn

    def forward(self, x):
        return self.rnn(x)[0]


MODELS = {
    "lstm_batch_first": (lambda: SequenceOut(nn.LSTM(6, 5, batch_first=True)), (3, 4, 6), {}),
    "lstm_two_layers_bidirectional": (
        lambda: SequenceOut(nn.LSTM(6, 5, num_layers=2, bidirectional=True)),
        (4, 3, 6),
        {},
    ),
    "gru_sequence": (lambda: SequenceOut(nn.GRU(6, 5, batch_first=True)), (3, 4, 6), {}),
    "rnn_two_layers": (lambda: SequenceOut(nn.RNN(6, 5, num_layers=2)), (4, 3, 6), {}),
    "mlp_layernorm_gelu": (
        lambda: nn.Sequential(nn.Linear(8, 16), nn.LayerNorm(16), nn.GELU(), nn.Linear(16, 4)),
        (5, 8),
        {},
    ),
    "transformer_encoder_layer": (
        lambda: nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True),
        (3, 4, 16),
        {},
    ),
    "transformer_causal_pre_norm": (
        lambda: nn.TransformerEncoderLayer(
            16, 4, 32, dropout=0.0, batch_first=True, norm_first=True
        ),
        (3, 5, 16),
        {"src_mask": nn.Transformer.generate_square_subsequent_mask(5), "is_causal": True},
    ),
    "multihead_attention_with_weights": (MHA, (3, 4, 16), {}),
    "conv_batchnorm_pool": (
        lambda: nn.Sequential(
            nn.Conv2d(3, 4, 3),
            nn.BatchNorm2d(4),
            nn.ReLU(),
            nn.AdaptiveAvgPool2d(1),
            nn.Flatten(),
            nn.Linear(4, 2),
        ),
        (4, 3, 8, 8),
        {},
    ),
    "gru_cell": (lambda: nn.GRUCell(6, 5), (3, 6), {}),
    "lstm_cell": (LSTMCellOut, (3, 6), {}),
    "rnn_cell": (lambda: nn.RNNCell(6, 5, nonlinearity="relu"), (3, 6), {}),
}


@pytest.mark.parametrize("name", sorted(MODELS))
def test_module_forward_grad_and_per_example_grad(name):
    torch.manual_seed(0)
    make, shape, kwargs = MODELS[name]
    model = make().double().eval()
    params = {k: v.detach() for k, v in model.named_parameters()}
    x = torch.randn(*shape, dtype=torch.float64)

    def loss(p, xb):
        return tx.functional_call(model, p, (xb,), kwargs).pow(2).mean()

    def loss_ref(p, xb):
        return tf.functional_call(model, p, (xb,), kwargs).pow(2).mean()

    out = tx.jit(lambda p, xb: tx.functional_call(model, p, (xb,), kwargs))(params, x)
    torch.testing.assert_close(out, model(x, **kwargs))
    grads = tx.jit(tx.grad(loss))(params, x)
    want = tf.grad(loss_ref)(params, x)
    for k in want:
        torch.testing.assert_close(grads[k], want[k])
    per_example = tx.vmap(tx.grad(loss), in_axes=(None, 0))(params, x[:, None])
    for k in params:
        loop = torch.stack([tf.grad(loss_ref)(params, x[i : i + 1])[k] for i in range(shape[0])])
        torch.testing.assert_close(per_example[k], loop)
