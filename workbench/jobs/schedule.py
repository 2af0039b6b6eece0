"""Scheduled notebook jobs: the jobs file, which runs are due, and a scheduler service.

Jobs file (YAML):

.. code-block:: yaml

    jobs:
      - name: nightly-check            # letters, digits, . _ -
        notebook: ../notebooks/x.ipynb # relative to the jobs file
        parameters: {model: llama3-8b} # checked against the notebook's parameters cell
        cron: "0 2 * * *"              # minute hour day month day-of-week; a 6th leading field = seconds
        timeout: 900                   # seconds a cell may run (the run is killed 10 s later); default 3600
        retries: 1                     # extra attempts after a failed or timed-out run; default 0
        max_concurrency: 1             # runs of this job at once; default 1
        misfire_grace_time: null       # seconds; see the misfire policy below; default null
        timezone: UTC                  # the cron's time zone; default UTC

Day-of-week must be written with names (``mon-fri``, ``sun``): numbers mean Sunday=0 in crontab but Monday=0 in
the scheduling library, so they are refused rather than guessed.

Fire times come from APScheduler's ``CronTrigger``; the run store's ``job_runs`` table is the record of what ran.
A fire time is *settled* once a row for it (or a later one) is running, ok, failed, timeout, missed or skipped;
``interrupted`` does not settle it.

Misfire policy (``run-due`` and ``serve`` alike): missed fire times are coalesced and **run once, late**: after
downtime only the latest fire time ≤ now is run, and earlier ones are covered by it. With ``misfire_grace_time: S``
a fire time more than S seconds old is instead recorded ``missed`` (not run). A run left ``running`` by a process
that died (a killed ``serve``) is marked ``interrupted`` at the next start and its fire time is run again once
(same grace rule) unless a later fire time has passed, which then covers it. No fire time runs twice: the check and
the ``running`` row are written in one transaction.
"""
from __future__ import annotations

import logging
import re
import threading
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path

from workbench.jobs.nbrun import NotebookRun, new_run_dir, reports_dir, run_notebook
from workbench.jobs.parameters import check_parameters
from workbench.jobs.store import JobStore, iso, parse_time, utc_now
from workbench.jobs.yamlfile import read_yaml

log = logging.getLogger("workbench.jobs")

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
_FIELDS = {"name", "notebook", "parameters", "cron", "timeout", "retries", "max_concurrency",
           "misfire_grace_time", "timezone"}
DEFAULT_TIMEOUT_SECONDS = 3600.0


@dataclass(frozen=True, kw_only=True, slots=True)
class JobSpec:
    name: str
    notebook: str
    """Absolute path of the notebook."""
    cron: str
    parameters: dict = field(default_factory=dict)
    timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS
    retries: int = 0
    max_concurrency: int = 1
    misfire_grace_seconds: int | None = None
    """None: a late fire time runs however late (once). S: later than S seconds → recorded ``missed``."""
    timezone: str = "UTC"

    def to_dict(self) -> dict:
        return asdict(self)


def cron_trigger(expr: str, tz: str = "UTC"):
    """APScheduler ``CronTrigger`` for a 5-field crontab line, or 6 fields with seconds first."""
    from apscheduler.triggers.cron import CronTrigger

    fields = expr.split()
    if len(fields) not in (5, 6):
        raise ValueError(f"cron {expr!r} has {len(fields)} fields; expected 5 (min hour day month dow) "
                         f"or 6 (sec min hour day month dow)")
    dow = fields[-1]
    if re.search(r"(^|[,\-])\d", dow):
        raise ValueError(f"cron {expr!r}: write day-of-week with names (mon-fri, sun), not numbers")
    second = fields[0] if len(fields) == 6 else "0"
    minute, hour, day, month = fields[-5:-1]
    try:
        trigger = CronTrigger(second=second, minute=minute, hour=hour, day=day, month=month, day_of_week=dow,
                              timezone=tz)
    except (ValueError, KeyError) as exc:
        raise ValueError(f"cron {expr!r}: {exc}") from None
    if next_fire_time(trigger, utc_now()) is None:  # a date no month has (day 31 of February), or no weekday
        raise ValueError(f"cron {expr!r} never fires (day {day} of month {month}, day-of-week {dow}: no such date)")
    return trigger


def next_fire_time(trigger, after: datetime) -> datetime | None:
    """First fire time strictly after ``after`` (UTC)."""
    t = trigger.get_next_fire_time(None, after + timedelta(microseconds=1))
    return t.astimezone(timezone.utc) if t is not None else None


def latest_fire_time(trigger, at: datetime) -> datetime | None:
    """Latest fire time ≤ ``at`` (UTC), looking back up to five years; None if there is none."""
    for window_seconds in (60, 3600, 86_400, 32 * 86_400, 367 * 86_400, 5 * 366 * 86_400):
        t = trigger.get_next_fire_time(None, at - timedelta(seconds=window_seconds))
        if t is None or t > at:
            continue
        while True:
            n = next_fire_time(trigger, t)
            if n is None or n > at:
                return t.astimezone(timezone.utc)
            t = n
    return None


def _job_from_mapping(item, base: Path, index: int) -> JobSpec:
    if not isinstance(item, dict):
        raise ValueError(f"jobs[{index}] must be a mapping, got {item!r}")
    unknown = set(item) - _FIELDS
    if unknown:
        raise ValueError(f"jobs[{index}]: unknown field(s) {', '.join(sorted(unknown))} "
                         f"(allowed: {', '.join(sorted(_FIELDS))})")
    for key in ("name", "notebook", "cron"):
        if not item.get(key):
            raise ValueError(f"jobs[{index}]: {key} is required")
    if not isinstance(item["name"], str):
        raise ValueError(f"jobs[{index}]: name={item['name']!r} must be a string (quote it in YAML)")
    name = item["name"]
    if not _NAME.match(name):
        raise ValueError(f"jobs[{index}]: name={name!r} may hold only letters, digits, '.', '_' and '-'")
    notebook = (base / str(item["notebook"])).resolve()
    if not notebook.is_file():
        raise ValueError(f"job {name}: notebook {item['notebook']} not found (looked at {notebook})")
    parameters = {} if item.get("parameters") is None else item["parameters"]
    if not isinstance(parameters, dict):
        raise ValueError(f"job {name}: parameters must be a mapping, got {parameters!r}")
    try:
        parameters = check_parameters(notebook, parameters)
    except ValueError as exc:
        raise ValueError(f"job {name}: {exc}") from None
    from workbench.specs import check_float, check_int

    try:  # numbers as numbers: a string, a list, null or true is refused, not converted
        timeout = check_float("timeout", item.get("timeout", DEFAULT_TIMEOUT_SECONDS))
        retries = check_int("retries", item.get("retries", 0), minimum=0, maximum=1000)
        max_concurrency = check_int("max_concurrency", item.get("max_concurrency", 1), maximum=1000)
    except ValueError as exc:
        raise ValueError(f"job {name}: {exc}") from None
    grace = item.get("misfire_grace_time")
    if grace is not None and (isinstance(grace, bool) or not isinstance(grace, int) or grace <= 0):
        raise ValueError(f"job {name}: misfire_grace_time={grace!r} must be a whole number of seconds > 0, or null")
    tz = str(item.get("timezone", "UTC"))
    spec = JobSpec(name=name, notebook=str(notebook), cron=str(item["cron"]), parameters=parameters,
                   timeout_seconds=timeout, retries=retries, max_concurrency=max_concurrency,
                   misfire_grace_seconds=grace, timezone=tz)
    try:
        cron_trigger(spec.cron, tz)
    except ValueError as exc:
        raise ValueError(f"job {name}: {exc}") from None
    return spec


def load_jobs(path) -> list[JobSpec]:
    """Read and check a jobs file; relative notebook paths resolve against the file's folder."""
    p = Path(path)
    doc = read_yaml(p, "jobs file")
    items = doc.get("jobs") if isinstance(doc, dict) else doc
    if not isinstance(items, list) or not items:
        raise ValueError(f"jobs file {path} must hold a non-empty list under 'jobs:'")
    jobs = [_job_from_mapping(item, p.resolve().parent, i) for i, item in enumerate(items)]
    seen = set()
    for job in jobs:
        if job.name in seen:
            raise ValueError(f"jobs file {path}: job name {job.name!r} appears twice")
        seen.add(job.name)
    return jobs


def find_job(jobs: list[JobSpec], name: str) -> JobSpec:
    for job in jobs:
        if job.name == name:
            return job
    raise ValueError(f"no job named {name!r} (jobs: {', '.join(j.name for j in jobs)})")


# -- what is due ---------------------------------------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True, slots=True)
class Decision:
    job: str
    action: str
    """``run`` (due), ``missed`` (due but later than misfire_grace_time) or ``wait``."""
    fire_time: datetime | None
    """The fire time to run or record (the latest one ≤ at, earlier missed ones coalesced into it)."""
    last_settled: datetime | None
    next_fire_time: datetime | None
    """First fire time after ``at``."""


def decide(job: JobSpec, last_settled: datetime | None, at: datetime) -> Decision:
    """Whether ``job`` is due at ``at`` given the latest settled fire time in the store."""
    trigger = cron_trigger(job.cron, job.timezone)
    fire = latest_fire_time(trigger, at)
    upcoming = next_fire_time(trigger, at)
    if fire is None or (last_settled is not None and last_settled >= fire):
        action, fire = "wait", None
    elif job.misfire_grace_seconds is not None and (at - fire).total_seconds() > job.misfire_grace_seconds:
        action = "missed"
    else:
        action = "run"
    return Decision(job=job.name, action=action, fire_time=fire, last_settled=last_settled, next_fire_time=upcoming)


def due(jobs: list[JobSpec], store: JobStore, at: datetime) -> list[Decision]:
    return [decide(job, store.last_accounted(job.name), at) for job in jobs]


# -- running a job -------------------------------------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True, slots=True)
class JobOutcome:
    job: str
    scheduled_for: str
    status: str
    """Status of the last attempt, or ``skipped`` when the fire time was already settled."""
    attempts: tuple[NotebookRun, ...] = ()


def run_job(job: JobSpec, store: JobStore, *, scheduled_for: datetime, trigger: str, guard: bool = True,
            out_dir=None, stop_event: threading.Event | None = None) -> JobOutcome:
    """Run ``job`` for one fire time, retrying failed or timed-out attempts ``job.retries`` times.

    ``guard``: claim the fire time first and do nothing when it is already settled (scheduled runs); manual runs
    pass False."""
    job_run_id = store.claim_fire_time(job.name, scheduled_for, trigger, only_if_after_last=guard)
    if job_run_id is None:
        log.info("job %s: fire time %s already settled; not run again", job.name, iso(scheduled_for))
        return JobOutcome(job=job.name, scheduled_for=iso(scheduled_for), status="skipped")
    attempts = []
    for attempt in range(1, job.retries + 2):
        if attempt > 1:
            job_run_id = store.add_attempt(job.name, iso(scheduled_for), trigger, attempt)
        log.info("job %s: attempt %d for %s started", job.name, attempt, iso(scheduled_for))
        try:
            base = Path(out_dir) if out_dir else reports_dir() / "jobs"
            run = run_notebook(job.notebook, job.parameters, run_dir=new_run_dir(base, job.name),
                               timeout_seconds=job.timeout_seconds, store=store, job_run_id=job_run_id,
                               stop_event=stop_event)
        except BaseException as exc:  # parameters no longer valid, disk full...: the row must not stay running
            store.finish_job_run(job_run_id, status="failed", notebook_run_id=None,
                                 error=f"{type(exc).__name__}: {exc}")
            raise
        attempts.append(run)
        store.finish_job_run(job_run_id, status=run.status, notebook_run_id=run.run_id,
                             error=run.error.summary() if run.error else None)
        log.info("job %s: attempt %d for %s %s (%.1f s)", job.name, attempt, iso(scheduled_for), run.status,
                 run.duration_seconds)
        if run.status in ("ok", "interrupted"):
            break
    return JobOutcome(job=job.name, scheduled_for=iso(scheduled_for), status=attempts[-1].status,
                      attempts=tuple(attempts))


def run_due(jobs: list[JobSpec], store: JobStore, at: datetime, *, out_dir=None) -> list[tuple[Decision, JobOutcome | None]]:
    """Run (one after another) every job due at ``at``; record ``missed`` ones. Dead owners' rows are marked
    ``interrupted`` first."""
    store.recover_interrupted()
    out = []
    for decision in due(jobs, store, at):
        outcome = None
        if decision.action == "missed":
            store.record_unrun(decision.job, decision.fire_time, "missed",
                               f"run-due at {iso(at)} is later than misfire_grace_time", "run-due")
        elif decision.action == "run":
            outcome = run_job(find_job(jobs, decision.job), store, scheduled_for=decision.fire_time,
                              trigger="run-due", out_dir=out_dir)
        out.append((decision, outcome))
    return out


# -- the scheduler service -----------------------------------------------------------------------------------------
class _ServeState:
    """What the scheduler's job function needs inside ``serve`` (one per process)."""

    def __init__(self, store: JobStore, workers: int, jobs: list[JobSpec], out_dir):
        self.store = store
        self.out_dir = out_dir
        self.stop = threading.Event()
        self.workers = threading.BoundedSemaphore(workers)
        self.per_job = {j.name: threading.BoundedSemaphore(j.max_concurrency) for j in jobs}


_STATE: _ServeState | None = None


def fire(spec: dict, scheduled_for: str | None = None, trigger: str = "schedule") -> str:
    """Entry point the scheduler calls (by reference, so it survives in the persistent job store).

    ``scheduled_for`` is given for recovery runs; scheduled runs take the cron's latest fire time ≤ now, which is
    the time being fired (coalesced when late)."""
    state = _STATE
    if state is None:
        raise RuntimeError("fire() runs only inside workbench.jobs.schedule.serve")
    job = JobSpec(**spec)
    now = utc_now()
    when = parse_time(scheduled_for) if scheduled_for else latest_fire_time(cron_trigger(job.cron, job.timezone), now)
    if when is None:
        return "skipped"
    limit = state.per_job.setdefault(job.name, threading.BoundedSemaphore(job.max_concurrency))
    if not limit.acquire(blocking=False):
        state.store.record_unrun(job.name, when, "skipped", f"max_concurrency={job.max_concurrency} reached",
                                 trigger)
        return "skipped"
    try:
        with state.workers:
            if state.stop.is_set():  # stopped while this fire waited for a worker: leave it for the next start
                row = state.store.claim_fire_time(job.name, when, trigger)
                if row is not None:
                    state.store.finish_job_run(row, status="interrupted", notebook_run_id=None,
                                               error="serve stopped before the run started")
                return "interrupted"
            if job.misfire_grace_seconds is not None and (utc_now() - when).total_seconds() > job.misfire_grace_seconds:
                state.store.record_unrun(job.name, when, "missed", "started later than misfire_grace_time", trigger)
                return "missed"
            return run_job(job, state.store, scheduled_for=when, trigger=trigger, out_dir=state.out_dir,
                           stop_event=state.stop).status
    finally:
        limit.release()


def _on_event(event) -> None:
    from apscheduler.events import EVENT_JOB_MAX_INSTANCES, EVENT_JOB_MISSED

    state = _STATE
    if state is None:
        return
    name = event.job_id.split(":", 1)[1] if event.job_id.startswith("recover:") else event.job_id
    if event.code == EVENT_JOB_MISSED:
        state.store.record_unrun(name, event.scheduled_run_time, "missed",
                                 "scheduler started it later than misfire_grace_time", "schedule")
        log.warning("job %s: fire time %s missed", name, iso(event.scheduled_run_time))
    elif event.code == EVENT_JOB_MAX_INSTANCES:
        when = event.scheduled_run_times[-1]
        state.store.record_unrun(name, when, "skipped", "max_concurrency reached", "schedule")
        log.warning("job %s: fire time %s skipped (max_concurrency reached)", name, iso(when))
    else:
        log.error("job %s: scheduler error %s", name, getattr(event, "exception", None))


def _sync(scheduler, jobs: list[JobSpec], now: datetime) -> None:
    """Make the persistent job store match the jobs file without losing pending (missed) fire times."""
    wanted = {job.name: job for job in jobs}
    for existing in scheduler.get_jobs():
        base = existing.id.split(":", 1)[1] if existing.id.startswith("recover:") else existing.id
        if base not in wanted:
            scheduler.remove_job(existing.id)
            log.info("job %s: removed (not in the jobs file)", existing.id)
    for job in jobs:
        trigger = cron_trigger(job.cron, job.timezone)
        options = dict(kwargs={"spec": job.to_dict()}, max_instances=job.max_concurrency, coalesce=True,
                       misfire_grace_time=job.misfire_grace_seconds, name=job.name)
        existing = scheduler.get_job(job.name)
        if existing is None:
            scheduler.add_job("workbench.jobs.schedule:fire", trigger=trigger, id=job.name, **options)
            log.info("job %s: added, next fire %s", job.name, next_fire_time(trigger, now))
            continue
        scheduler.modify_job(job.name, **options)  # keeps the stored next run time (pending catch-up)
        if str(existing.trigger) != str(trigger):
            scheduler.reschedule_job(job.name, trigger=trigger)  # a new cron starts from now
            log.info("job %s: cron changed to %s; fire times of the old cron are not caught up", job.name, job.cron)


def _recover(scheduler, jobs: list[JobSpec], store: JobStore, now: datetime) -> None:
    """Re-run (once) a fire time whose run was interrupted, unless the scheduler will fire a later one anyway."""
    interrupted = {(r.job, r.scheduled_for) for r in store.job_runs() if r.status == "interrupted"}
    for job in jobs:
        fire_time = latest_fire_time(cron_trigger(job.cron, job.timezone), now)
        if fire_time is None or (job.name, iso(fire_time)) not in interrupted:
            continue
        last = store.last_accounted(job.name)
        if last is not None and last >= fire_time:
            continue
        stored = scheduler.get_job(job.name)
        if stored is not None and stored.next_run_time is not None and stored.next_run_time <= now:
            continue  # a coalesced catch-up run is pending; it covers this fire time
        if job.misfire_grace_seconds is not None and (now - fire_time).total_seconds() > job.misfire_grace_seconds:
            store.record_unrun(job.name, fire_time, "missed", "interrupted, and restarted after misfire_grace_time",
                               "recovery")
            continue
        scheduler.add_job("workbench.jobs.schedule:fire", trigger="date", run_date=now, id=f"recover:{job.name}",
                          replace_existing=True, misfire_grace_time=None, coalesce=True,
                          kwargs={"spec": job.to_dict(), "scheduled_for": iso(fire_time), "trigger": "recovery"})
        log.info("job %s: interrupted run of %s will run again now", job.name, iso(fire_time))


def serve(jobs_file, *, workers: int = 2, store: JobStore | None = None, stop_event: threading.Event | None = None,
          out_dir=None, ready: threading.Event | None = None) -> None:
    """Run the jobs of ``jobs_file`` on their crons until ``stop_event`` is set.

    APScheduler 3 ``BackgroundScheduler`` with a ``SQLAlchemyJobStore`` (table ``apscheduler_jobs`` in the run
    store's SQLite file), ``coalesce=True`` and each job's ``misfire_grace_time``; ``max_instances`` is the job's
    ``max_concurrency``; at most ``workers`` notebooks run at once. On stop, running notebooks are killed and
    recorded ``interrupted`` (run again at the next start, per the misfire policy)."""
    global _STATE
    from apscheduler.events import EVENT_JOB_ERROR, EVENT_JOB_MAX_INSTANCES, EVENT_JOB_MISSED
    from apscheduler.executors.pool import ThreadPoolExecutor
    from apscheduler.jobstores.sqlalchemy import SQLAlchemyJobStore
    from apscheduler.schedulers.background import BackgroundScheduler

    if workers < 1:
        raise ValueError(f"workers={workers} must be >= 1")
    jobs = load_jobs(jobs_file)
    store = store or JobStore()
    for row in store.recover_interrupted():
        log.warning("job %s: run for %s was left running by a process that exited; marked interrupted",
                    row.job, row.scheduled_for)
    if _STATE is not None:
        raise RuntimeError("serve is already running in this process")
    _STATE = _ServeState(store, workers, jobs, out_dir)
    stop_event = stop_event or threading.Event()
    # Pool threads only wait or watch workers; enough that a fire never queues behind another job's run.
    pool_size = sum(j.max_concurrency for j in jobs) + len(jobs)
    scheduler = BackgroundScheduler(
        jobstores={"default": SQLAlchemyJobStore(url=f"sqlite:///{store.path}", tablename="apscheduler_jobs",
                                                 engine_options={"connect_args": {"timeout": 30}})},
        executors={"default": ThreadPoolExecutor(pool_size)},
        job_defaults={"coalesce": True}, timezone=timezone.utc)
    scheduler.add_listener(_on_event, EVENT_JOB_MISSED | EVENT_JOB_MAX_INSTANCES | EVENT_JOB_ERROR)
    try:
        scheduler.start(paused=True)
        now = utc_now()
        _sync(scheduler, jobs, now)
        _recover(scheduler, jobs, store, now)
        scheduler.resume()
        log.info("serving %d job(s) from %s with %d worker(s)", len(jobs), jobs_file, workers)
        if ready is not None:
            ready.set()
        while not stop_event.wait(0.5):  # a timed wait lets signal handlers in the main thread run promptly
            pass
    finally:
        _STATE.stop.set()
        if scheduler.running:
            scheduler.shutdown(wait=True)
        _STATE = None
