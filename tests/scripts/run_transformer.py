"""A small transformer in graph mode under Model.train: a self-attention encoder (2 layers, batched matmuls for
Q.K^T and A.V) and a Dense classifier head (issue 37, item 8: MindSpore names the encoder's backward MatMuls
after the head; perfkit places them by their shapes). Made for tests/runs/cpu_2_10_transformer:

    perfkit profile --output OUT -- python tests/scripts/run_transformer.py
"""

import mindspore as ms
import mindspore.dataset as ds
import numpy as np
from mindspore import nn, ops
from mindspore.train import Model

BATCH, STEPS, SEQ, DIM, FFN, CLASSES, LAYERS = 8, 6, 16, 32, 64, 4, 2


class SelfAttention(nn.Cell):
    def __init__(self):
        super().__init__()
        self.query, self.key, self.value = nn.Dense(DIM, DIM), nn.Dense(DIM, DIM), nn.Dense(DIM, DIM)
        self.out = nn.Dense(DIM, DIM)
        self.scores = ops.BatchMatMul(transpose_b=True)
        self.mix = ops.BatchMatMul()
        self.softmax = nn.Softmax(axis=-1)
        self.scale = 1.0 / np.sqrt(DIM)

    def construct(self, x):
        flat = x.reshape(-1, DIM)
        q = self.query(flat).reshape(BATCH, SEQ, DIM)
        k = self.key(flat).reshape(BATCH, SEQ, DIM)
        v = self.value(flat).reshape(BATCH, SEQ, DIM)
        weights = self.softmax(self.scores(q, k) * self.scale)
        return self.out(self.mix(weights, v).reshape(-1, DIM)).reshape(BATCH, SEQ, DIM)


class EncoderLayer(nn.Cell):
    def __init__(self):
        super().__init__()
        self.attention = SelfAttention()
        self.norm1, self.norm2 = nn.LayerNorm((DIM,)), nn.LayerNorm((DIM,))
        self.ffn = nn.SequentialCell([nn.Dense(DIM, FFN), nn.ReLU(), nn.Dense(FFN, DIM)])

    def construct(self, x):
        x = self.norm1(x + self.attention(x))
        return self.norm2(x + self.ffn(x.reshape(-1, DIM)).reshape(BATCH, SEQ, DIM))


class Classifier(nn.Cell):
    def __init__(self):
        super().__init__()
        self.encoder = nn.SequentialCell([EncoderLayer() for _ in range(LAYERS)])
        self.head = nn.Dense(DIM, CLASSES)

    def construct(self, x):
        return self.head(self.encoder(x).mean(axis=1))


class Samples:
    def __init__(self, count: int):
        rng = np.random.default_rng(0)
        self.x = rng.standard_normal((count, SEQ, DIM), dtype=np.float32)
        self.y = rng.integers(0, CLASSES, size=count).astype(np.int32)

    def __getitem__(self, index):
        return self.x[index], np.array(self.y[index])

    def __len__(self):
        return len(self.y)


ms.set_context(mode=ms.GRAPH_MODE, device_target="CPU")
data = ds.GeneratorDataset(Samples(BATCH * STEPS), ["x", "y"], shuffle=False).batch(BATCH)
net = Classifier()
loss = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
model = Model(net, loss_fn=loss, optimizer=nn.Adam(net.trainable_params(), 1e-3))
model.train(1, data, dataset_sink_mode=False)
