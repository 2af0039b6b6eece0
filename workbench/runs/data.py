"""Training data for launched runs: token sequences addressed by a global sample index.

Sources (the ``data`` argument of :func:`workbench.runs.launch`):

* ``"synthetic"`` — uniformly random tokens (default; the loss stays near ln V: a throughput/memory run).
* ``"learnable"`` — a small generated task whose loss visibly falls in a few dozen steps: each sequence is an
  arithmetic progression ``x_{t+1} = (x_t + k) mod V`` with a start ``x_0`` and a stride ``k`` drawn from 8 strides,
  so after two tokens the rest is predictable.
* ``"text:PATH"`` — a user's text file, tokenized as UTF-8 bytes (vocabulary 256; needs ``vocab_size >= 256``).
* ``"indexed:PREFIX"`` — a Megatron indexed dataset (``PREFIX.bin`` / ``PREFIX.idx``, as ``preprocess_data.py``
  writes), read with megatron-core's ``IndexedDataset``; documents are concatenated into one token stream.

Sample ``j`` is the same tensor whatever the layout, so runs with different parallel layouts see the same data:
in step ``i`` data-parallel rank ``r`` takes, for micro-batch ``m``, the samples
``i·B + m·(b·dp) + r·b + [0, b)`` (B global batch, b micro-batch size, dp data parallel).
"""
from __future__ import annotations

import os
from dataclasses import dataclass

KINDS = ("synthetic", "learnable", "text", "indexed")
LEARNABLE_STRIDES = 8


@dataclass(frozen=True, kw_only=True, slots=True)
class DataSource:
    kind: str
    """One of :data:`KINDS`."""
    path: str = ""
    """File (text) or path prefix (indexed)."""


INDEX_HEADER = b"MMIDIDX\x00\x00"
"""The first bytes of a megatron-core indexed dataset's ``.idx`` file (``megatron/core/datasets/indexed_dataset.py``
``_INDEX_HEADER``)."""


def parse_source(data) -> DataSource:
    """``"synthetic"``, ``"learnable"``, ``"text:PATH"``, ``"indexed:PREFIX"`` (or a DataSource) → DataSource."""
    if isinstance(data, DataSource):
        source = data
    else:
        text = str(data or "synthetic")
        kind, _, path = text.partition(":")
        source = DataSource(kind=kind.strip().lower(), path=os.path.expanduser(path.strip()))
    if source.kind not in KINDS:
        raise ValueError(f"data={data!r} is not one of: synthetic, learnable, text:PATH, indexed:PREFIX")
    if source.kind == "text":
        if not source.path or not os.path.isfile(source.path):
            what = "is a directory, not a text file" if source.path and os.path.isdir(source.path) else "does not exist"
            raise ValueError(f"data={data!r}: text file {source.path!r} {what}")
    if source.kind == "indexed":
        for ext in (".bin", ".idx"):
            if not os.path.isfile(source.path + ext):
                raise ValueError(f"data={data!r}: indexed dataset file {source.path + ext!r} does not exist")
        with open(source.path + ".idx", "rb") as fh:  # what megatron-core's IndexedDataset asserts at rank 0
            head = fh.read(len(INDEX_HEADER))
        if head != INDEX_HEADER:
            raise ValueError(f"data={data!r}: {source.path + '.idx'!r} is not a megatron-core indexed dataset index "
                             f"(its header is {head[:9]!r}, not {INDEX_HEADER!r}; write it with Megatron's "
                             f"tools/preprocess_data.py)")
    return source


def check_vocab(source: DataSource, vocab_size: int) -> None:
    if source.kind == "text" and vocab_size < 256:
        raise ValueError(f"data=text needs vocab_size >= 256 (byte tokens), got vocab_size={vocab_size}")


class TokenSamples:
    """``samples[j]`` → int64 tensor of ``seq_length + 1`` tokens (inputs are ``[:-1]``, labels ``[1:]``)."""

    def __init__(self, source: DataSource, *, vocab_size: int, seq_length: int, seed: int = 1234):
        import torch

        self.source, self.vocab_size, self.seq_length, self.seed = source, vocab_size, seq_length, seed
        self._stream = None
        if source.kind == "text":
            with open(source.path, "rb") as f:
                raw = f.read()
            self._stream = torch.frombuffer(bytearray(raw), dtype=torch.uint8).to(torch.int64)
        elif source.kind == "indexed":
            from megatron.core.datasets.indexed_dataset import IndexedDataset

            ds = IndexedDataset(source.path)
            parts = [torch.as_tensor(ds[i].astype("int64")) for i in range(len(ds))]
            self._stream = torch.cat(parts) if parts else torch.zeros(0, dtype=torch.int64)
            if int(self._stream.max()) >= vocab_size:
                raise ValueError(f"indexed dataset {source.path!r} holds token id {int(self._stream.max())} >= "
                                 f"vocab_size={vocab_size}")
        if self._stream is not None and self._stream.numel() < seq_length + 2:
            raise ValueError(f"data {source.path!r} has {self._stream.numel()} tokens; need > seq_length+1 = "
                             f"{seq_length + 1}")

    def _generator(self, index: int):
        import torch

        g = torch.Generator()
        g.manual_seed(self.seed * 1_000_003 + index)
        return g

    def __getitem__(self, index: int):
        import torch

        n = self.seq_length + 1
        g = self._generator(index)
        if self.source.kind == "synthetic":
            return torch.randint(0, self.vocab_size, (n,), generator=g, dtype=torch.int64)
        if self.source.kind == "learnable":
            start = int(torch.randint(0, self.vocab_size, (1,), generator=g))
            stride = 1 + int(torch.randint(0, LEARNABLE_STRIDES, (1,), generator=g))
            return (start + stride * torch.arange(n, dtype=torch.int64)) % self.vocab_size
        offset = int(torch.randint(0, self._stream.numel() - n, (1,), generator=g))
        return self._stream[offset:offset + n].clone()


def sample_indices(step: int, microbatch: int, *, dp_rank: int, data_parallel: int, micro_batch_size: int,
                   global_batch_size: int) -> range:
    """Global sample indices of one micro-batch of one data-parallel rank (see the module docstring)."""
    first = step * global_batch_size + microbatch * micro_batch_size * data_parallel + dp_rank * micro_batch_size
    return range(first, first + micro_batch_size)


def microbatch(samples: TokenSamples, indices) -> dict:
    """``{"tokens", "labels", "position_ids"}`` for a list of sample indices."""
    import torch

    seqs = torch.stack([samples[j] for j in indices])
    tokens, labels = seqs[:, :-1].contiguous(), seqs[:, 1:].contiguous()
    positions = torch.arange(tokens.shape[1], dtype=torch.int64).unsqueeze(0).expand_as(tokens).contiguous()
    return {"tokens": tokens, "labels": labels, "position_ids": positions}
