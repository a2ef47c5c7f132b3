"""``train_side_by_side``: train independent models at once on a CPU's idle
cores.

A chapter's ablation trains several small models that share nothing. One of
them keeps only one or two cores busy (its matrices are small), so on a CPU
with more cores the models train in worker processes, each with its share of
PyTorch's threads. Each model's numbers are the ones ``train_lm`` gives it
alone with the same number of threads, bit for bit.
"""

from __future__ import annotations

import concurrent.futures
import multiprocessing
import pickle
import sys
import time
from collections.abc import Mapping
from pathlib import Path

import torch
import torch.nn as nn
from torch import Tensor

from .train import default_device, train_lm

__all__ = [
    "train_side_by_side",
    "train_for_comparison",
    "plan_workers",
    "cpu_budget",
    "cgroup_cpus",
]


def cgroup_cpus(root: Path = Path("/sys/fs/cgroup")) -> int | None:
    """Whole CPUs that a container's cgroup quota allows (v2 or v1), or None
    without a quota."""
    try:
        quota, period = (root / "cpu.max").read_text().split()
    except (OSError, ValueError):
        try:
            quota = (root / "cpu" / "cpu.cfs_quota_us").read_text().strip()
            period = (
                (root / "cpu" / "cpu.cfs_period_us").read_text().strip()
            )
        except OSError:
            return None
    if quota in ("max", "-1"):
        return None
    return max(1, int(quota) // int(period))


def cpu_budget() -> int:
    """PyTorch's thread count, capped by the container's CPU quota where one
    is set.

    Binder and Docker limit a process's CPU time without hiding the host's
    cores, so ``torch.get_num_threads()`` alone would start one worker per
    core of the host.
    """
    threads, quota = torch.get_num_threads(), cgroup_cpus()
    return threads if quota is None else min(threads, quota)


def plan_workers(n_models: int, threads: int) -> tuple[int, int]:
    """How many worker processes, and PyTorch threads in each, for
    ``n_models`` on ``threads``.

    One worker per thread up to one per model; leftover threads are shared
    out evenly.
    """
    workers = max(1, min(n_models, threads))
    return workers, max(1, threads // workers)


def _train_one(pickled_model: bytes, threads: int, kwargs: dict):
    """Worker body: train a model with ``threads`` threads; return its
    history and weights."""
    torch.set_num_threads(threads)
    model = pickle.loads(pickled_model)
    history = train_lm(model, **kwargs)
    return history, model.state_dict()


def _sendable(obj) -> bytes | None:
    """``obj`` as bytes a spawned worker can load, or None if it cannot go:
    a lambda, or a class or function defined in a notebook (pickle names
    it as ``__main__``'s; a spawned worker re-imports a script's
    ``__main__`` but has no notebook's)."""
    try:
        data = pickle.dumps(obj)
    except (pickle.PicklingError, AttributeError, TypeError):
        return None
    interactive = not hasattr(sys.modules["__main__"], "__file__")
    return None if interactive and b"__main__" in data else data


def train_side_by_side(
    models: dict[str, nn.Module],
    train_ids: Tensor | Mapping[str, Tensor],
    val_ids: Tensor | Mapping[str, Tensor],
    steps: int | Mapping[str, int],
    block_size: int,
    batch_size: int | Mapping[str, int] | None = None,
    **train_kwargs,
) -> dict[str, dict[str, list]]:
    """Train each model with ``train_lm`` and return their histories under
    the same names.

    Every argument of ``train_lm`` is one value for all models or a
    mapping from each model's name to its own: the split (models that read
    the text through different tokenizers), ``steps`` and ``batch_size``
    (models compared at equal text read rather than equal steps), and the
    recipe a Part II chapter varies (``objective``, ``optimizer``,
    ``schedule``, ``init``, ``start``, ...).

    On a CPU, the models train in worker processes, as many at a time as
    PyTorch has threads (see ``cpu_budget``), each worker with ``threads //
    workers`` of them; the trained weights are copied back into ``models``.
    Each worker holds its own PyTorch, about 0.6 GB while it trains a
    6-block model of Chapter 1. On a GPU, with one thread, or when a model
    cannot be sent to another process, the models train one after another in
    this process; so do runs with anything a spawned worker cannot load (a
    lambda or a class defined in the notebook: pass the recipe's parts from
    ``mlexp`` to train side by side).
    """
    per_run = dict(train_kwargs, block_size=block_size, steps=steps)
    if batch_size is not None:  # else train_lm's own default
        per_run["batch_size"] = batch_size
    for key, value in [("train_ids", train_ids), ("val_ids", val_ids)]:
        per_run[key] = value
    for key, value in per_run.items():
        missing = (
            models.keys() - value if isinstance(value, Mapping) else ()
        )
        if missing:
            raise ValueError(
                f"{key} is given per model but not for {sorted(missing)}: "
                "give every model its own value, or one value for all"
            )

    # Each model's own arguments to train_lm, the split included.
    runs = {
        name: {
            key: value[name] if isinstance(value, Mapping) else value
            for key, value in per_run.items()
        }
        for name in models
    }

    workers, threads = plan_workers(len(models), cpu_budget())
    on_cpu = all(
        default_device(run.get("device")).type == "cpu"
        for run in runs.values()
    )
    pickled = None
    if on_cpu and workers > 1:
        pickled = {name: _sendable(model) for name, model in models.items()}
        sendable = all(pickled.values()) and all(
            _sendable(run) for run in runs.values()
        )
        pickled = pickled if sendable else None

    if pickled is None:
        return {
            name: train_lm(model, **runs[name])
            for name, model in models.items()
        }

    # spawn, not fork: a forked child of a process that has used OpenMP's
    # threads can hang.
    context = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(
        workers, mp_context=context
    ) as pool:
        futures = {
            name: pool.submit(_train_one, data, threads, runs[name])
            for name, data in pickled.items()
        }
        histories = {}
        for name, future in futures.items():
            histories[name], weights = future.result()
            models[name].load_state_dict(weights)
            # as train_lm sets it
            models[name].context_length = runs[name]["block_size"]
    return histories


def train_for_comparison(
    models: dict[str, nn.Module],
    train_ids: Tensor | Mapping[str, Tensor],
    val_ids: Tensor | Mapping[str, Tensor],
    steps: int,
    block_size: int,
    **train_kwargs,
) -> float:
    """Train ``models`` side by side for ``steps`` and return the wall time
    it took, in seconds.

    For a chapter that scores its trained models itself (over the whole
    validation text, position by position): the runs then evaluate only
    at their start and end, on a few windows, so that no training time goes
    into numbers nobody reads.
    """
    start = time.perf_counter()
    train_side_by_side(
        models,
        train_ids,
        val_ids,
        steps=steps,
        block_size=block_size,
        eval_every=steps,
        eval_batches=4,
        log=False,
        **train_kwargs,
    )
    return time.perf_counter() - start
