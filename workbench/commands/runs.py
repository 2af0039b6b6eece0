"""``workbench runs list|show ID``: the run store."""
from __future__ import annotations


def add_parser(sub):
    p = sub.add_parser("runs", help="list or show launched runs (the run store)")
    p.add_argument("action", choices=["list", "show"], metavar="ACTION",
                   help="list: the newest runs; show RUN_ID: one run's record")
    p.add_argument("run_id", nargs="?", help="run id (for show)")
    p.add_argument("--limit", type=int, default=50, help="newest runs to list")
    p.add_argument("--all", action="store_true",
                   help="list also the runs refused by validation before anything started (status invalid)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=run)
    return p


def run(args) -> int:
    from workbench.cli import UsageError, print_json
    from workbench.commands.run import print_summary, summary
    from workbench.runs import RunStore

    if args.limit < 1:
        raise UsageError(f"--limit {args.limit} must be >= 1")
    store = RunStore()
    store.reconcile()
    if args.action == "list":
        rows = store.list(limit=args.limit, invalid=args.all)
        if args.json:
            print_json([{k: r[k] for k in ("run_id", "status", "engine", "steps", "started", "ended", "reason")}
                        for r in rows])
            return 0
        print(f"{'run_id':26}{'status':11}{'engine':20}{'steps':>6}  reason")
        for r in rows:
            print(f"{r['run_id']:26}{r['status']:11}{(r['engine'] or ''):20}{r['steps'] or 0:>6}  "
                  f"{(r['reason'] or '')[:70]}")
        hidden = 0 if args.all else store.count("invalid")
        if hidden:
            print(f"({hidden} run{'s' if hidden > 1 else ''} refused before starting not listed; --all lists them)")
        return 0
    if not args.run_id:
        raise UsageError("runs show needs a run id (see: workbench runs list)")
    rec = store.get(args.run_id)
    rec["losses"] = (rec.get("measured") or {}).get("losses", [])
    if args.json:
        out = summary(rec)
        out.update(specs=rec["specs"], command=rec["command"], started=rec["started"], ended=rec["ended"],
                   metrics=store.metrics(args.run_id))
        print_json(out)
    else:
        print_summary(summary(rec))
    return 0
