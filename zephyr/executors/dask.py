"""Runs tasks on a dask.distributed cluster: a scheduler address, a ``Client`` you pass in, or a LocalCluster.

Contract (the same as every executor, see ``executors/base.py``):

- Only task specs (paths and indices) go to the cluster and only markers (small dicts) come back; rows are
  read and written by the tasks themselves under the work directory, which must therefore be storage every
  worker can reach (a local directory when all workers share this machine, ``s3://``, ``gs://``, NFS ...).
- A batch's ``Shared`` value (the stage) is scattered once, as cloudpickle bytes, to every worker
  (``client.scatter(..., broadcast=True)``), and each task is submitted with its future: a task carries no
  stage bytes, and a worker unpickles the stage once (``executors.base.shared_value``). Nothing a task runs
  is read from the work directory.
- Each task is ``client.submit(fn, task, pure=False, retries=0)``: dask never retries on its own, the zephyr
  driver owns retries and counts them. A worker that dies while running a task (SIGKILL, the nanny's memory
  limit, a lost machine) surfaces as ``distributed.KilledWorker`` and is reported as
  ``Outcome(ok=False, worker_died=True)``; the driver reruns the task elsewhere. Task outputs are published by
  rename and markers are written last, so a rerun gives the same bytes.
- At most as many tasks are in flight as the cluster has threads (``run``), so a worker death costs only the
  tasks it was running: one per thread.
- A cluster zephyr starts itself (no address given, ``start_local_cluster``) binds 127.0.0.1 only, dashboard
  off unless asked for (and then on 127.0.0.1), the scheduler in this process and ``workers`` processes with
  one thread each, started as ``dask worker`` with this process's ``sys.path`` (never by re-running the
  user's main module: it works from a script without a ``__main__`` guard, stdin or ``-c``), and the scheduler's
  ``allowed_failures`` set to 0, so a worker death fails the task at once instead of being retried silently by
  dask up to ``distributed.scheduler.allowed-failures`` (default 3) times per task.
- ``close()`` closes what this executor started (client, cluster) and nothing else: a ``Client`` passed in
  stays open, and a scheduler reached by address keeps running.

One task holds up to ``memory_budget`` bytes of Arrow data, so a dask worker with ``nthreads`` threads needs
about ``nthreads × memory_budget`` plus overhead; run workers with ``--nthreads 1`` (a warning says so
otherwise).
"""

from __future__ import annotations

import ipaddress
import logging
import os
import signal
import socket
import subprocess
import uuid
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

from zephyr.errors import ConfigError
from zephyr.executors.base import Executor, Outcome, Shared, call, failure, fix_mmap_threshold, shared_value
from zephyr.executors.worker import command

if TYPE_CHECKING:
    from distributed import Client, Future, LocalCluster

    from zephyr.options import ExecutionOptions


log = logging.getLogger(__name__)

CONNECT_TIMEOUT_S = 30


def start_local_cluster(workers: int, *, dashboard: bool = False) -> LocalDaskCluster:
    """A scheduler in this process and ``workers`` worker processes × 1 thread on 127.0.0.1, dask retries
    off (``LocalDaskCluster``).

    ``dashboard=True`` serves the dashboard on 127.0.0.1 (a free port); it is never bound to other interfaces.
    """
    from distributed import LocalCluster

    # The scheduler alone: dask's LocalCluster would start its nannies with multiprocessing's spawn, which
    # runs the user's main module again in each (a script without a __main__ guard, or stdin, fails).
    scheduler = LocalCluster(
        n_workers=0,
        processes=True,
        host="127.0.0.1",
        dashboard_address="127.0.0.1:0" if dashboard else None,
        # The scheduler serves HTTP (health, metrics) even without the dashboard; without an address it takes
        # port 8787 and warns when another cluster holds it. A free loopback port avoids both.
        scheduler_kwargs={"allowed_failures": 0, "dashboard": dashboard, "dashboard_address": "127.0.0.1:0"},
    )
    try:
        return LocalDaskCluster(scheduler, _start_workers(scheduler.scheduler_address, workers), workers)
    except BaseException:
        scheduler.close()
        raise


WORKERS_START_TIMEOUT_S = 120

_WORKER_MAIN = (
    "import sys, json; sys.path[:] = json.loads(sys.argv.pop(1)); "
    "from distributed.cli.dask_worker import main; main()"
)
"""What the workers' process runs (``executors.worker.command``): ``dask worker`` with the driver's ``sys.path``
installed first (``-P`` keeps the current directory out until then), as local workers do."""


def _start_workers(address: str, workers: int) -> subprocess.Popen:
    """``dask worker ADDRESS --nworkers N --nthreads 1`` as a new process of its own (its nannies start the
    workers, and restart one that dies). Its own session: a terminal's Ctrl-C is the driver's to handle (it
    closes the cluster); ``--death-timeout`` ends workers whose driver died without closing them."""
    verbose = logging.getLogger().getEffectiveLevel() <= logging.INFO
    env = dict(os.environ)
    # Each worker's polars pool sized to its share of the cores, as the local executor does.
    env["POLARS_MAX_THREADS"] = str(max(1, (os.cpu_count() or 1) // max(1, workers)))
    # What goes wrong is the driver's to report (one line, the traceback in its log), not every worker's
    # log records. Shown with -v (INFO logging).
    env["DASK_LOGGING__DISTRIBUTED"] = "warning" if verbose else "critical"
    argv = command(_WORKER_MAIN, address, "--nworkers", str(workers))
    argv += ["--nthreads", "1", "--host", "127.0.0.1", "--no-dashboard", "--death-timeout", "60"]
    argv += ["--dashboard-address", "127.0.0.1:0"]  # its HTTP server (health, metrics) runs even without one
    argv += ["--preload", __name__]  # dask_setup below, in each worker
    return subprocess.Popen(
        argv,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=None if verbose else subprocess.DEVNULL,
        start_new_session=True,
    )


class LocalDaskCluster:
    """The cluster ``start_local_cluster`` started: a ``LocalCluster`` holding the scheduler, and the
    process of its workers. ``Client(cluster.scheduler_address)`` connects to it; ``close()`` ends both."""

    def __init__(self, scheduler: LocalCluster, workers: subprocess.Popen, count: int) -> None:
        self.scheduler = scheduler
        self.workers = workers
        self.count = count

    @property
    def scheduler_address(self) -> str:
        return self.scheduler.scheduler_address

    def wait(self, client: Client) -> None:
        """Return once all ``count`` workers have joined; one line if their process ended first."""
        import time

        deadline = time.monotonic() + WORKERS_START_TIMEOUT_S
        while len(client.nthreads()) < self.count:
            if self.workers.poll() is not None:
                raise ConfigError(
                    f"dask: the worker process exited with status {self.workers.returncode} before its "
                    f"{self.count} workers joined; rerun with -v to see its log"
                )
            if time.monotonic() > deadline:
                raise ConfigError(
                    f"dask: {len(client.nthreads())} of {self.count} workers joined in "
                    f"{WORKERS_START_TIMEOUT_S} s; rerun with -v to see their log"
                )
            time.sleep(0.05)

    def close(self) -> None:
        """Stop the workers (SIGTERM: the nannies close their workers), then the scheduler."""
        try:
            if self.workers.poll() is None:
                self.workers.terminate()
                try:
                    self.workers.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    os.killpg(self.workers.pid, signal.SIGKILL)
                    self.workers.wait()
        finally:
            self.scheduler.close()


def on_worker(fn: Callable[[Any, Any], Any], key: str, blob: bytes, task: Any) -> Outcome:
    """``fn(shared value, task)`` on a dask worker (``executors.base.shared_value``) as its ``Outcome``, with the
    heap rules of the local executor's workers (``zephyr.executors.base``): glibc's mmap threshold fixed before
    the first task of the process, and what a task freed handed back when it ends (``call``). A dask worker runs
    every task of a job in one long-lived process, where freed arrays left in glibc's arenas and Arrow's pool
    add to the next task's peak; without these rules the scale benchmark's dask workers peaked at 1.1-1.8 GiB
    under the default 1 GiB budget where local workers stayed at 0.4-0.6 GiB, and a tokenize worker was
    OOM-killed in a 3 GiB cap (benchmarks/RESULTS.md)."""
    fix_mmap_threshold()
    return call(lambda: fn(shared_value(key, blob), task))


def dask_setup(worker: object) -> None:
    """Run by each worker of a cluster started here, as it starts (dask's ``preload``): Ctrl-C is the
    driver's to handle, and it closes the cluster. A terminal sends it to every process of the command, and a
    worker that took it would stop on its own with a traceback of its event loop."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


class DaskExecutor(Executor):
    """Runs tasks through ``client``; closes ``client``/``cluster`` on ``close()`` only when it owns them."""

    def __init__(self, client: Client, *, cluster: LocalDaskCluster | None = None, owns_client: bool = False):
        self.client = client
        self.cluster = cluster
        self._owns_client = owns_client
        self._closed = False
        self._scattered: tuple[str, Future] | None = None
        """The shared value of the current stage on the cluster: (key, future of its bytes)."""

    @classmethod
    def from_options(cls, options: ExecutionOptions) -> DaskExecutor:
        """The executor ``options`` ask for: the ``Client`` given as ``executor``, a client connected to
        ``options.cluster``, or a LocalCluster of ``options.num_workers`` workers started here."""
        from distributed import Client

        if isinstance(options.executor, Client):
            executor = cls(options.executor)
        elif options.cluster:
            try:
                client = Client(options.cluster, set_as_default=False, timeout=CONNECT_TIMEOUT_S)
            except OSError as exc:
                raise ConfigError(
                    f"cannot reach the dask scheduler at {options.cluster!r} ({exc}); start one with "
                    "`dask scheduler --host HOST` and pass its tcp://HOST:PORT as cluster= / --cluster"
                ) from exc
            executor = cls(client, owns_client=True)
        else:
            cluster = start_local_cluster(options.num_workers)
            try:
                client = Client(cluster.scheduler_address, set_as_default=False)
                cluster.wait(client)
            except BaseException:
                cluster.close()
                raise
            executor = cls(client, cluster=cluster, owns_client=True)
            log.info(
                "dask: started a LocalCluster of %d workers at %s", cluster.count, cluster.scheduler_address
            )
        try:
            executor._check_cluster(options.work_dir)
        except BaseException:
            executor.close()
            raise
        return executor

    def _check_cluster(self, work_dir: str | None) -> None:
        """Refuse a work directory the workers cannot see; warn about settings that break the memory budget."""
        nthreads = self.client.nthreads()
        if not nthreads:
            log.warning(
                "dask: the scheduler at %s has no workers yet; tasks wait for some",
                self.client.scheduler.address,
            )
        crowded = sorted(addr for addr, n in nthreads.items() if n > 1)
        if crowded:
            log.warning(
                "dask: %d worker(s) run more than one thread (%s ...): each thread runs a task holding up to "
                "memory_budget bytes; start workers with `--nthreads 1` or lower memory_budget",
                len(crowded),
                crowded[0],
            )
        remote = sorted(addr for addr in nthreads if not _is_this_machine(addr))
        if remote and work_dir is None:
            raise ConfigError(
                f"dask workers on other machines ({remote[0]} ...) cannot see a temporary work directory on this "
                "one; pass work_dir= (--work-dir) on shared storage, e.g. s3://bucket/zephyr-work"
            )
        if remote and ("://" not in work_dir or work_dir.startswith("file://")):
            log.warning(
                "dask: work_dir %r is a local path but workers run on other machines (%s ...); it must be a "
                "shared mount there, or use object storage (s3://, gs://)",
                work_dir,
                remote[0],
            )

    def _scatter(self, shared: Shared) -> Future:
        """The future of ``shared``'s bytes on every worker: scattered once per stage (again only if the
        workers that held it are gone); the previous stage's is released."""
        if self._scattered is not None:
            key, future = self._scattered
            if key == shared.key and future.status == "finished":
                return future
            future.release()
        [future] = self.client.scatter([shared.blob], broadcast=True, hash=False)
        self._scattered = (shared.key, future)
        return future

    def _run(self, fn: Callable, tasks: Sequence, shared: Shared) -> Iterator[tuple[int, Outcome]]:
        """Submit tasks as threads free up, never more at once than the cluster has threads.

        Why not all at once: the scheduler hands a worker more tasks than it has threads (``worker-saturation``
        defaults to 1.1, so a 1-thread worker holds 2; tasks of small groups are all assigned at once), and
        when a worker dies the scheduler fails every task assigned to it, started or not. With at most
        ``sum(nthreads)`` tasks in flight and the scheduler placing each on a worker with a free thread, a
        death costs the tasks that worker was running: one per thread. The price is one round trip to the
        scheduler between one task's end and the next task's start on that thread.
        """
        from distributed import as_completed

        if self._closed:
            raise ConfigError("this DaskExecutor is closed; create a new one")
        batch = uuid.uuid4().hex[:8]
        name = getattr(fn, "__name__", "task")
        queue = deque(enumerate(tasks))
        positions: dict[str, int] = {}
        pending: dict[str, Future] = {}
        finished = as_completed(loop=self.client.loop)
        stage = self._scatter(shared) if tasks else None

        def submit_while_threads_free() -> None:
            # Threads of the workers alive now (asked at every completion, so a restarted or added worker
            # counts). At least one task stays in flight so that a cluster with no workers yet starts when one
            # joins; more follow as tasks complete.
            slots = max(1, sum(self.client.nthreads().values())) if queue else 0
            while queue and len(pending) < slots:
                position, task = queue.popleft()
                key = f"zephyr-{name}-{batch}-{position:05d}"
                future = self.client.submit(
                    on_worker, fn, shared.key, stage, task, pure=False, retries=0, key=key
                )
                positions[future.key] = position
                pending[future.key] = future
                finished.add(future)

        try:
            submit_while_threads_free()
            for future in finished:
                outcome = _outcome(future)
                del pending[future.key]
                future.release()  # the marker is ours now: nothing may recompute it behind our back
                submit_while_threads_free()
                yield positions[future.key], outcome
        finally:
            if pending:
                # The driver gave up (a task exhausted its retries, Ctrl-C). Tasks already running on a
                # worker finish there (dask cannot interrupt a thread); their outputs are never published
                # to this job's markers because nobody collects them.
                self.client.cancel(list(pending.values()), force=True)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._scattered is not None:
            self._scattered[1].release()
            self._scattered = None
        if self._owns_client:
            self.client.close()
        if self.cluster is not None:
            # A worker still running a task (Ctrl-C, a job that failed) is killed after a grace period, which
            # its nanny reports as a warning: that kill is what closing asks for.
            nanny = logging.getLogger("distributed.nanny")
            level = nanny.level
            nanny.setLevel(max(level, logging.ERROR))
            try:
                self.cluster.close()
            finally:
                nanny.setLevel(level)


def _outcome(future: Future) -> Outcome:
    """The ``Outcome`` of a finished, erred or cancelled future."""
    from distributed import KilledWorker
    from distributed.comm.core import CommClosedError

    if future.status == "finished":
        try:
            return future.result()  # the task's own (``on_worker``)
        except (KilledWorker, CommClosedError) as exc:  # the result's holder died before we fetched it
            return Outcome(
                False, error=f"dask worker lost before its result was fetched: {exc}", worker_died=True
            )
    if future.status == "error":
        exc = future.exception()
        if isinstance(exc, KilledWorker):
            return Outcome(False, error=f"dask worker died while running the task: {exc}", worker_died=True)
        return failure(exc, future.traceback())
    # cancelled or lost: the scheduler dropped the task (scheduler restart, someone cancelled it)
    return Outcome(False, error=f"dask task {future.key} ended as {future.status!r}", worker_died=True)


def _is_this_machine(address: str) -> bool:
    """Whether a worker address (``tcp://host:port``) is on loopback or one of this machine's addresses."""
    if address.startswith("inproc://"):  # a LocalCluster(processes=False) in this very process
        return True
    host = urlparse(address).hostname or ""
    try:
        if ipaddress.ip_address(host).is_loopback:
            return True
    except ValueError:
        if host in ("localhost", socket.gethostname()):
            return True
    import psutil

    return host in {a.address for addrs in psutil.net_if_addrs().values() for a in addrs}
