"""Worker processes of the data tools (`trainer convert`, `trainer datagen`)."""
from __future__ import annotations

import multiprocessing
from concurrent.futures import ProcessPoolExecutor


def run_tasks(function, tasks: list, workers: int, module: str, tensorflow: bool) -> list:
    """`function` over `tasks`, in this process when one worker suffices, else in `workers`
    processes forked from a server that has imported `module` (and TensorFlow, when the
    tasks write TFRecords with it) once: TensorFlow costs seconds of CPU to import, which
    spawned workers would each pay. Nothing of TensorFlow runs in that server (forking a
    process that has run TensorFlow is unsafe; one that has only imported it is not)."""
    if workers <= 1 or len(tasks) <= 1:
        return [function(task) for task in tasks]
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload([module] + (["tensorflow"] if tensorflow else []))
    with ProcessPoolExecutor(min(workers, len(tasks)), mp_context=context) as pool:
        return list(pool.map(function, tasks))
