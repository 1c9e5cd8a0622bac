"""The zoo's training jobs and the worker processes that run them (:func:`tinyllm.train.build_zoo`).

A job is a JSON-native specification (``tinyllm.train`` writes one per recipe).
:func:`run_parallel` runs jobs on ``jobs`` worker processes, ``python -m tinyllm.train_jobs
--serve``, one per job slot, each training one model after the other (torch's ~3 s of import
paid once per slot, not once per model): each job's specification goes in as one JSON line on
stdin, its progress and result come back as JSON lines on stdout (nothing is pickled), its
stderr goes to its own ``logs/<name>.log``.

A module of its own because it is a concept of its own: the worker pool and its wire protocol
(scheduling by dependency, the JSON lines, killing the rest at the first failure), and the
worker's ``-m`` entry point. :mod:`tinyllm.train` says what the zoo trains (its recipes and
manifest) and knows nothing of pipes and processes.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path

import torch

from tinyllm.data import CORPORA
from tinyllm.models import FAMILIES

ProgressFn = Callable[[str, int, int, float], None]
_PROGRESS = "TLPROGRESS "  # a worker's stdout lines that carry progress (JSON after the marker)
_DONE = "TLDONE "


def train_job(spec: Mapping, progress: ProgressFn | None = None) -> dict:
    """Train and save one model from a job specification (the module docstring); returns its
    train_log entry (with ``path``). Runs in this process with whatever torch thread count is
    set."""
    name, fam = spec["name"], FAMILIES[spec["family"]]
    if spec.get("trainer"):  # a family trained by another module of tinyllm.models (hf)
        fam = importlib.import_module(spec["trainer"])
    data = CORPORA[spec["data"]].read_train(Path(spec["train_file"]))
    kwargs = dict(spec["train_config"])
    if spec["init"] is not None:
        kwargs["init"] = spec["init"]
    last = {"loss": float("nan")}

    def cb(step, total, loss):
        last["loss"] = float(loss)
        if progress is not None:
            progress(name, int(step), int(total), float(loss))

    t0, c0 = time.perf_counter(), time.process_time()
    model = fam.train(
        fam.Config(**spec["config"]),
        data,
        seed=spec["seed"],
        steps=spec["steps"],
        progress=cb,
        **kwargs,
    )
    path = fam.save(model, spec["out"])
    return {
        "path": str(path),
        "seconds": round(time.perf_counter() - t0, 2),
        "cpu_seconds": round(time.process_time() - c0, 2),
        "steps": spec["steps"],
        "last_loss": last["loss"],
        "seed": spec["seed"],
        "threads": spec["threads"],
        "pid": os.getpid(),  # the process that trained it (a worker trains several, in turn)
    }


def _serve() -> int:
    """``python -m tinyllm.train_jobs --serve``: train the jobs that come in on stdin, one JSON line
    each (a job specification with ``log``), one after the other on ``threads`` torch threads;
    progress and results go to stdout as JSON lines, each job's stderr to its ``log``. A failing
    job ends the process (its traceback in its log)."""

    def emit(name, step, total, loss):
        print(_PROGRESS + json.dumps({"step": step, "total": total, "loss": loss}), flush=True)

    for line in sys.stdin:
        spec = json.loads(line)
        log = os.open(spec["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(log, 2)  # this job's stderr, the traceback of a failure included
        os.close(log)
        torch.set_num_threads(spec["threads"])
        result = train_job(spec, emit)
        print(_DONE + json.dumps(result), flush=True)
    return 0


class _Worker:
    """One training subprocess (``--serve``), the job it runs and the thread that reads its
    progress lines; :meth:`submit` hands it the next job once :meth:`poll` says it is done."""

    def __init__(self, threads: int, progress: ProgressFn, log_dir: Path) -> None:
        self.spec, self.result, self.error = None, None, None
        self.log_dir = log_dir
        env = dict(os.environ)
        env.setdefault("OMP_WAIT_POLICY", "PASSIVE")
        env["OMP_NUM_THREADS"] = str(threads)
        self._done = threading.Event()
        # the worker's stderr until its first job (an import failure's message); removed if empty
        self._start_log = self.log_path = log_dir / f"worker-{os.getpid()}-{id(self):x}.log"
        self._log = open(self._start_log, "wb")  # noqa: SIM115 - closed in close()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tinyllm.train_jobs", "--serve"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
            env=env,
            text=True,
        )
        self._reader = threading.Thread(target=self._read, args=(progress,), daemon=True)
        self._reader.start()

    def submit(self, spec: dict) -> None:
        self.spec, self.result, self.error = spec, None, None
        self.log_path = self.log_dir / f"{spec['name']}.log"
        self._done.clear()
        with contextlib.suppress(BrokenPipeError):  # the worker has ended: poll() reports it
            self.proc.stdin.write(json.dumps({**spec, "log": str(self.log_path)}) + "\n")
            self.proc.stdin.flush()

    def _read(self, progress: ProgressFn) -> None:
        for line in self.proc.stdout:
            if line.startswith(_PROGRESS):
                p = json.loads(line[len(_PROGRESS) :])
                progress(self.spec["name"], p["step"], p["total"], p["loss"])
            elif line.startswith(_DONE):
                self.result = json.loads(line[len(_DONE) :])
                self._done.set()
        self._done.set()  # the process ended

    def poll(self) -> bool:
        """True once the job submitted last has ended (then ``result`` or ``error`` is set)."""
        if not self._done.is_set() and self._reader.is_alive():
            return False
        if self.result is None:
            self._reader.join()
            status = self.proc.wait()
            if not self.log_path.is_file():  # it ended before it read the job
                self.log_path = self._start_log
            lines = self.log_path.read_text(encoding="utf-8", errors="replace").splitlines()
            last = next((ln.strip() for ln in reversed(lines) if ln.strip()), "no output")
            self.error = (
                f"training {self.spec['name']!r} ({self.spec['family']}) failed with exit status "
                f"{status}: {last} (full log: {self.log_path})"
            )
        return True

    def close(self) -> None:
        """End the process: idle, it exits at the end of its stdin; busy, it is killed."""
        if self.spec is not None and not self._done.is_set():
            self.proc.kill()
        with contextlib.suppress(OSError):  # a killed worker's pipe is already broken
            self.proc.stdin.close()
        self.proc.wait()
        self._reader.join()
        self._log.close()
        if self._start_log.stat().st_size == 0:
            self._start_log.unlink()


def run_parallel(
    specs: list[dict],
    deps: Mapping[str, str | None],
    jobs: int,
    progress: ProgressFn,
    log_dir: Path,
) -> dict[str, dict]:
    """Run the jobs on ``jobs`` worker processes, each job after the job it depends on;
    ``specs`` are in start-priority order. Fails (killing the rest) at the first failure."""
    log_dir.mkdir(parents=True, exist_ok=True)
    pending, done = list(specs), {}
    threads = max((s["threads"] for s in specs), default=1)
    workers = [_Worker(threads, progress, log_dir) for _ in range(min(jobs, len(specs)))]
    idle, running = list(workers), []
    try:
        while pending or running:
            for w in [w for w in running if w.poll()]:
                running.remove(w)
                if w.error is not None:
                    raise RuntimeError(w.error)
                done[w.spec["name"]] = w.result
                idle.append(w)
            ready = [s for s in pending if deps[s["name"]] is None or deps[s["name"]] in done]
            while ready and idle:
                spec = ready.pop(0)
                pending.remove(spec)
                w = idle.pop(0)
                w.submit(spec)
                running.append(w)
            if not running and pending:  # cannot happen after _check_recipes; never spin
                raise RuntimeError(f"unschedulable recipes: {[s['name'] for s in pending]}")
            time.sleep(0.2)
    finally:
        for w in workers:
            w.close()
    return done


if __name__ == "__main__":
    if sys.argv[1:] != ["--serve"]:
        sys.exit(
            "usage: python -m tinyllm.train_jobs --serve  (a worker of build_zoo: jobs on stdin)"
        )
    sys.exit(_serve())
