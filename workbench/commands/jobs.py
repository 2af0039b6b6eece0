"""``workbench jobs list | run NAME | run-due | serve``: notebooks on a schedule (see workbench.jobs.schedule)."""
from __future__ import annotations

import logging
import signal
import sys
import threading

from workbench.jobs.nbrun import EXIT_CODES
from workbench.jobs.schedule import cron_trigger, due, find_job, load_jobs, next_fire_time, run_due, run_job, serve
from workbench.jobs.store import JobStore, iso, parse_time, utc_now


def add_parser(sub) -> None:
    parser = sub.add_parser("jobs", help="scheduled notebook jobs from a jobs file (cron, retries, timeouts)")
    jobs_sub = parser.add_subparsers(dest="jobs_command", metavar="ACTION")
    jobs_sub.required = True

    def with_file(p):
        p.add_argument("--jobs", default="jobs.yaml", metavar="FILE", help="jobs file (default ./jobs.yaml)")
        return p

    with_file(jobs_sub.add_parser("list", help="jobs, their next fire time and last run")).set_defaults(func=run_list)
    run_p = with_file(jobs_sub.add_parser("run", help="run one job now (with its retries)"))
    run_p.add_argument("name")
    run_p.set_defaults(func=run_now)
    due_p = with_file(jobs_sub.add_parser("run-due", help="run every job whose cron has fired since its last run"))
    due_p.add_argument("--at", metavar="ISO_TIME", help="evaluate at this time instead of now (UTC unless zoned)")
    due_p.add_argument("--dry-run", action="store_true", help="only say which jobs are due")
    due_p.set_defaults(func=run_due_cmd)
    serve_p = with_file(jobs_sub.add_parser("serve", help="run the jobs on their crons until stopped"))
    serve_p.add_argument("--workers", type=int, default=2, metavar="N", help="notebooks at once (default 2)")
    serve_p.set_defaults(func=run_serve)


def _short(t) -> str:
    return iso(t)[:19] + "Z" if t is not None else "-"


def run_list(args) -> int:
    jobs = load_jobs(args.jobs)
    store = JobStore()
    store.recover_interrupted()
    now = utc_now()
    print(f"{'name':<20} {'cron':<16} {'next fire (UTC)':<21} {'last run':<32} notebook")
    for job in jobs:
        runs = store.job_runs(job.name)
        last = f"{runs[-1].status} {runs[-1].scheduled_for[:19]}Z" if runs else "-"
        upcoming = next_fire_time(cron_trigger(job.cron, job.timezone), now)
        print(f"{job.name:<20} {job.cron:<16} {_short(upcoming):<21} {last:<32} {job.notebook}")
    return 0


def _print_outcome(outcome) -> None:
    for run in outcome.attempts:
        err = f"  {run.error.summary()}" if run.error else ""
        print(f"  attempt: {run.status}  {run.duration_seconds:.1f} s  report {run.html_path or run.output_dir}{err}")


def run_now(args) -> int:
    jobs = load_jobs(args.jobs)
    job = find_job(jobs, args.name)
    store = JobStore()
    store.recover_interrupted()
    outcome = run_job(job, store, scheduled_for=utc_now(), trigger="manual", guard=False)
    print(f"{job.name}: {outcome.status}")
    _print_outcome(outcome)
    return EXIT_CODES.get(outcome.status, 1)


def run_due_cmd(args) -> int:
    jobs = load_jobs(args.jobs)
    at = parse_time(args.at) if args.at else utc_now()
    store = JobStore()
    if args.dry_run:
        store.recover_interrupted()
        results = [(d, None) for d in due(jobs, store, at)]
    else:
        results = run_due(jobs, store, at)
    worst = 0
    for decision, outcome in results:
        if decision.action == "wait":
            print(f"{'wait':<7} {decision.job:<20} next fire {_short(decision.next_fire_time)}")
            continue
        status = outcome.status if outcome else ("due" if decision.action == "run" else "missed")
        print(f"{status:<7} {decision.job:<20} fire time {_short(decision.fire_time)}"
              f"  (last settled {_short(decision.last_settled)})")
        if outcome is not None:
            _print_outcome(outcome)
            if outcome.status not in ("ok", "skipped"):
                worst = 1
    return worst


def run_serve(args) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s", stream=sys.stderr)
    logging.getLogger("apscheduler").setLevel(logging.WARNING)
    logging.getLogger("papermill").setLevel(logging.WARNING)
    stop = threading.Event()

    def handle(signum, frame):
        stop.set()

    signal.signal(signal.SIGTERM, handle)
    signal.signal(signal.SIGINT, handle)
    serve(args.jobs, workers=args.workers, stop_event=stop)
    return 0
