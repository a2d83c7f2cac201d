"""zephyr.executors: where tasks run — in-process, local spawned processes, dask.distributed."""
