"""A Dask cluster on 127.0.0.1 for the tests and the benchmark: `dask scheduler` and `dask worker` processes
(free ports, no nanny, so each worker is the process started), each stopped by its PID; every wait bounded."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DASK = Path(sys.executable).parent / "dask"
START_S = 60  # for the scheduler and the workers to be up, on a loaded machine


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class LocalCluster:
    """A scheduler and `workers` one-thread worker processes on 127.0.0.1, each worker started through `wrap`
    (a command prefix, e.g. a mount namespace) with perfkit imported from `code` (default this checkout) and the
    Dask preload script `preload` run in each worker as it starts; logs under `folder`/logs."""

    def __init__(self, folder: Path, workers: int = 2, wrap: list[str] | None = None, code: Path = REPO,
                 preload: Path | None = None):
        self.address = f"tcp://127.0.0.1:{free_port()}"
        env = dict(os.environ, PYTHONPATH=str(code))
        logs = folder / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        self.scheduler = subprocess.Popen(
            [str(DASK), "scheduler", "--host", "127.0.0.1", "--port", self.address.rpartition(":")[2],
             "--no-dashboard"], env=env, stdout=subprocess.DEVNULL, stderr=open(logs / "scheduler.log", "w"))
        self.workers = [subprocess.Popen(
            [*(wrap or []), str(DASK), "worker", self.address, "--no-nanny", "--nthreads", "1", "--host",
             "127.0.0.1", "--no-dashboard", "--local-directory", str(folder / f"worker{index}"),
             *(["--preload", str(preload)] if preload else [])],
            env=env, stdout=subprocess.DEVNULL, stderr=open(logs / f"worker{index}.log", "w"))
            for index in range(workers)]
        try:
            self._wait_for_workers(workers)
        except BaseException:
            self.stop()
            raise

    def _wait_for_workers(self, count: int) -> None:
        from distributed import Client

        deadline = time.monotonic() + START_S
        while time.monotonic() < deadline:
            try:
                with Client(self.address, timeout=5, set_as_default=False) as client:
                    client.wait_for_workers(count, timeout=max(1.0, deadline - time.monotonic()))
                    return
            except (OSError, TimeoutError):
                time.sleep(0.5)
        raise RuntimeError(f"the local Dask cluster did not start within {START_S} s")

    @property
    def pids(self) -> list[int]:
        return [process.pid for process in (self.scheduler, *self.workers)]

    def kill_worker(self, index: int) -> None:
        os.kill(self.workers[index].pid, signal.SIGKILL)
        self.workers[index].wait(timeout=30)

    def stop(self) -> None:
        processes = [*self.workers, self.scheduler]
        for process in processes:
            if process.poll() is None:
                os.kill(process.pid, signal.SIGTERM)
        for process in processes:
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.kill(process.pid, signal.SIGKILL)
                process.wait(timeout=20)
