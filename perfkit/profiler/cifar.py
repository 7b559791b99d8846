"""CIFAR-10 binary files: check a user's folder, or make a synthetic one in the same format.

The binary version of CIFAR-10 is data_batch_1..5.bin (training) and test_batch.bin, each 10,000
records of 1 label byte (0-9) followed by 3,072 pixel bytes (32x32, red then green then blue
planes), plus batches.meta.txt with the class names. MindSpore's Cifar10Dataset reads exactly that.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np

from ..core.errors import PerfkitError
from .runfolder import write_error

IMAGE_BYTES = 32 * 32 * 3
RECORD_BYTES = 1 + IMAGE_BYTES
RECORDS_PER_FILE = 10_000
NUM_CLASSES = 10
TRAIN_FILES = tuple(f"data_batch_{i}.bin" for i in range(1, 6))
TEST_FILE = "test_batch.bin"
CLASS_NAMES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck")
# CIFAR-10's own archive unpacks to this folder; accept its parent too.
ARCHIVE_FOLDER = "cifar-10-batches-bin"
# Labels checked per file: enough to reject a file that is not CIFAR-10 without reading 30 MB.
LABELS_CHECKED = 1000
SYNTHETIC_SEED = 0


def default_cache() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "perfkit" / "cifar10-synthetic"


def training_records(path: str | os.PathLike) -> tuple[Path, int]:
    """Check that `path` is a CIFAR-10 binary folder; return the folder to read and its training records."""
    folder = Path(path).expanduser()
    if not folder.exists():
        raise PerfkitError("does not exist (pass the CIFAR-10 binary folder holding data_batch_1.bin ...)", folder)
    if not folder.is_dir():
        raise PerfkitError("is not a folder (pass the CIFAR-10 binary folder holding data_batch_1.bin ...)", folder)
    if not (folder / TRAIN_FILES[0]).exists() and (folder / ARCHIVE_FOLDER).is_dir():
        folder = folder / ARCHIVE_FOLDER
    present = [name for name in TRAIN_FILES if (folder / name).is_file()]
    if not present:
        raise PerfkitError("is not a CIFAR-10 binary folder: no data_batch_*.bin files "
                           "(the python or matlab version of CIFAR-10 will not do)", folder)
    records = 0
    for name in present:
        file = folder / name
        size = file.stat().st_size
        if size == 0 or size % RECORD_BYTES:
            raise PerfkitError(f"is not a CIFAR-10 binary batch: {size} bytes is not a whole number of "
                               f"{RECORD_BYTES}-byte records", file)
        with open(file, "rb") as handle:
            head = np.frombuffer(handle.read(RECORD_BYTES * min(LABELS_CHECKED, size // RECORD_BYTES)),
                                 dtype=np.uint8)
        labels = head[::RECORD_BYTES]
        if labels.max() >= NUM_CLASSES:
            bad = int(np.argmax(labels >= NUM_CLASSES))
            raise PerfkitError(f"is not a CIFAR-10 binary batch: record {bad} has label {labels[bad]} "
                               f"(labels are 0-{NUM_CLASSES - 1})", file)
        records += size // RECORD_BYTES
    return folder, records


def synthetic_cached(cache: Path | None = None) -> bool:
    folder = cache or default_cache()
    return all((folder / name).is_file() for name in TRAIN_FILES + (TEST_FILE,))


def synthetic(cache: Path | None = None) -> Path:
    """A CIFAR-10 binary folder of random images (made once, then reused from the cache)."""
    folder = cache or default_cache()
    if synthetic_cached(folder):
        return folder
    staging = folder.with_name(folder.name + f".partial-{os.getpid()}")
    try:
        _generate(staging)
    except BaseException as exc:
        shutil.rmtree(staging, ignore_errors=True)  # a half-made cache of up to 184 MB helps no one
        if isinstance(exc, OSError):
            size_mb = RECORDS_PER_FILE * RECORD_BYTES * (len(TRAIN_FILES) + 1) // 10**6
            raise PerfkitError(f"cannot write synthetic CIFAR-10 ({size_mb} MB): {write_error(exc)}; "
                               "free some space there or pass --data-path", folder) from exc
        raise
    # Publish the whole folder at once so an interrupted generation is never mistaken for a cache.
    if folder.exists() and not synthetic_cached(folder):
        shutil.rmtree(folder)
    try:
        os.replace(staging, folder)
    except OSError:
        if not synthetic_cached(folder):  # not merely a concurrent run that published first
            raise
        shutil.rmtree(staging)
    return folder


def _generate(folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(SYNTHETIC_SEED)
    for name in TRAIN_FILES + (TEST_FILE,):
        records = np.empty((RECORDS_PER_FILE, RECORD_BYTES), dtype=np.uint8)
        records[:, 0] = rng.integers(0, NUM_CLASSES, RECORDS_PER_FILE, dtype=np.uint8)
        records[:, 1:] = rng.integers(0, 256, (RECORDS_PER_FILE, IMAGE_BYTES), dtype=np.uint8)
        records.tofile(folder / name)
    (folder / "batches.meta.txt").write_text("\n".join(CLASS_NAMES) + "\n")
