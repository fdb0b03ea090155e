"""Stand-in for tensorflow_datasets (not installed; ``tfds.load`` downloads): random arrays of
the real datasets' shapes, dtypes and split sizes, no download, no TensorFlow.

Only what Haiku's examples use (haiku_vae.py here): ``load(name, split=..., with_info=...)`` for "mnist"
(image uint8 [28, 28, 1] in 0..255, label int64 in 0..9; train 60000, test 10000 rows) and
"binarized_mnist" (image uint8 [28, 28, 1] in {0, 1}; train 50000, validation 10000, test 10000
rows), a dataset with ``cache``, ``shuffle``, ``repeat``, ``batch``, ``map``, ``prefetch`` and
``as_numpy_iterator``, and ``as_numpy``. As in tf.data, ``batch`` keeps the last, smaller batch of
an epoch (no drop_remainder) unless ``repeat`` came first, and ``cache``/``prefetch`` change
nothing. ``shuffle`` is a full permutation each epoch (tf.data's buffer shuffles less); the data
are random anyway."""

from typing import Any

import numpy as np

_SPECS: dict[str, dict[str, Any]] = {
    "mnist": {"splits": {"train": 60000, "test": 10000}, "label": True, "binary": False},
    "binarized_mnist": {
        "splits": {"train": 50000, "validation": 10000, "test": 10000},
        "label": False,
        "binary": True,
    },
}
_CACHE: dict[tuple[str, str], dict[str, np.ndarray]] = {}


def _arrays(name, split):
    if (name, split) not in _CACHE:
        spec = _SPECS[name]
        n = spec["splits"][split]
        rng = np.random.default_rng(sorted(spec["splits"]).index(split))
        high = 2 if spec["binary"] else 256
        arrays = {"image": rng.integers(0, high, size=(n, 28, 28, 1), dtype=np.uint8)}
        if spec["label"]:
            arrays["label"] = rng.integers(0, 10, size=n, dtype=np.int64)
        _CACHE[name, split] = arrays
    return _CACHE[name, split]


class _Split:
    def __init__(self, num_examples):
        self.num_examples = num_examples


class _Info:
    def __init__(self, name):
        self.name = name
        self.splits = {s: _Split(n) for s, n in _SPECS[name]["splits"].items()}


class _Dataset:
    """A pipeline over in-memory arrays: shuffle? -> (repeat, batch in either order)? -> maps."""

    def __init__(self, arrays, ops=()):
        self._arrays = arrays
        self._ops = tuple(ops)

    def _with(self, op):
        kinds = [o[0] for o in self._ops]
        if op[0] == "shuffle" and kinds:
            raise NotImplementedError("stand-in: shuffle only first")
        if op[0] in kinds and op[0] != "map":
            raise NotImplementedError(f"stand-in: {op[0]} only once")
        if op[0] in ("repeat", "batch") and "map" in kinds:
            raise NotImplementedError("stand-in: map only last")
        return _Dataset(self._arrays, self._ops + (op,))

    def cache(self, *args, **kwargs):
        return self

    def prefetch(self, *args, **kwargs):
        return self

    def shuffle(self, buffer_size, seed=None, reshuffle_each_iteration=True):
        return self._with(("shuffle", seed))

    def repeat(self, count=None):
        if count is not None:
            raise NotImplementedError("stand-in: repeat() forever only")
        return self._with(("repeat",))

    def batch(self, batch_size, drop_remainder=False):
        if drop_remainder:
            raise NotImplementedError("stand-in: drop_remainder=False only")
        return self._with(("batch", int(batch_size)))

    def map(self, fn, *args, **kwargs):
        return self._with(("map", fn))

    def _epochs(self):
        n = len(next(iter(self._arrays.values())))
        shuffle = [o for o in self._ops if o[0] == "shuffle"]
        rng = np.random.default_rng(shuffle[0][1]) if shuffle else None
        while True:
            yield rng.permutation(n) if rng is not None else np.arange(n)

    def _indices(self):
        kinds = [o[0] for o in self._ops]
        repeat = "repeat" in kinds
        batch = [o[1] for o in self._ops if o[0] == "batch"]
        epochs = self._epochs() if repeat else iter([next(self._epochs())])
        if not batch:  # single elements
            for idx in epochs:
                yield from idx
        elif repeat and kinds.index("repeat") < kinds.index("batch"):  # batches span epochs
            size, pending = batch[0], np.zeros(0, np.int64)
            for idx in epochs:
                pending = np.concatenate([pending, idx])
                while len(pending) >= size:
                    yield pending[:size]
                    pending = pending[size:]
        else:  # batch within each epoch, the last one smaller
            size = batch[0]
            for idx in epochs:
                for start in range(0, len(idx), size):
                    yield idx[start : start + size]

    def as_numpy_iterator(self):
        maps = [o[1] for o in self._ops if o[0] == "map"]
        for idx in self._indices():
            element = {k: v[idx] for k, v in self._arrays.items()}
            for fn in maps:
                element = fn(element)
            yield element

    def __iter__(self):
        return self.as_numpy_iterator()


def load(name, split, with_info=False, **kwargs):
    name = name.split(":")[0]
    ds = _Dataset(_arrays(name, split))
    return (ds, _Info(name)) if with_info else ds


def as_numpy(dataset):
    return dataset.as_numpy_iterator()
