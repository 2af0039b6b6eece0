"""workbench advise: the guide's checks computed on one plan, the OOM ladder, throughput remedies, and what a
training log shows (``--log FILE``)."""
from __future__ import annotations

import sys

from workbench.commands.common import add_spec_arguments, profile_from_args, specs_from_args
from workbench.commands.estimate import add_simulate_allocator_argument
from workbench.defaults import GiB

_MARK = {"pass": "ok  ", "warn": "WARN", "fail": "FAIL"}


def add_parser(sub) -> None:
    parser = sub.add_parser("advise", help="checks, OOM ladder and tuning advice for one plan", description=__doc__)
    add_spec_arguments(parser)
    add_simulate_allocator_argument(parser)
    parser.add_argument("--log", metavar="FILE",
                        help="DeepSpeed or Megatron training log to read ('-': standard input, e.g. a pasted CUDA "
                             "out-of-memory message)")
    parser.add_argument("--headroom", type=float, default=0.0,
                        help="fraction of GPU memory the OOM ladder keeps free (default 0)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.set_defaults(func=run)


def _finding_lines(findings) -> list[str]:
    out = []
    for f in findings:
        out.append(f"[{_MARK[f.status]}] {f.id}: {f.message}")
        if f.suggestion:
            out.append(f"       → {f.suggestion}")
    return out


def render(advice, log=None, replay=None) -> str:
    """The readable advice; ``replay``: the allocator replay's record of the plan's own estimate
    (:func:`workbench.commands.estimate.replay_line`)."""
    from workbench.commands.estimate import replay_line

    lines = ["checks"] + _finding_lines(advice.findings)
    if replay is not None:
        lines.append(replay_line(replay).strip() + " — this plan's checks and the ladder's steps marked 'replayed'; "
                     "the others take the constant")
    if advice.oom_ladder:
        lines += ["", "out of memory: the guide's ladder (stops at the first step that fits)"]
        for s in advice.oom_ladder:
            if s.plan is None:
                lines.append(f"  {s.step}. {s.action} (skipped)")
                continue
            shows_limit = not s.fits and (s.fits_point_estimate or s.limit.startswith("host"))
            verdict = s.verdict + (f" ({s.limit})" if shows_limit else "")
            lines.append(f"  {s.step}. {s.action}: peak {s.peak_bytes / GiB:.1f} GiB"
                         f"{' (replayed)' if s.replayed else ''}, {verdict}, "
                         f"{s.step_seconds:.3f} s/step "
                         f"({s.slowdown:+.1%} vs now)")
    if advice.throughput:
        lines += ["", "throughput: exposed time, largest first"]
        for s in advice.throughput:
            lines.append(f"  {s.term:<11} {s.exposed_seconds:8.3f} s ({s.fraction_of_step:5.1%})  {s.message}")
            if s.settings:
                lines.append(f"              try: {'; '.join(s.settings)}")
    lines += ["", "diagnose"] + [f"  {c}" for c in advice.commands]
    if log is not None:
        lines += ["", f"log ({log.kind}, {len(log.iterations)} progress lines)"] + _finding_lines(advice.log_findings)
    return "\n".join(lines)


def run(args) -> int:
    from workbench.advisor import advise
    from workbench.cli import print_json
    from workbench.commands.estimate import estimate_replayed_or_not
    from workbench.logreader import parse_log, read_log

    if not 0 <= args.headroom < 1:
        raise ValueError(f"--headroom {args.headroom} must be in [0, 1)")
    model, cluster, plan = specs_from_args(args)
    try:
        log = (None if not args.log else parse_log(sys.stdin.read()) if args.log == "-" else read_log(args.log))
    except OSError as exc:
        raise ValueError(f"--log {args.log}: cannot read it ({exc.strerror or exc})") from None
    # the plan priced as `workbench estimate` prices it (the allocator replayed where it can run), so both commands
    # judge its memory alike; a replayed plan's ladder replays its steps too (advisor.oom_ladder)
    profile = profile_from_args(args)
    record, replay = estimate_replayed_or_not(args, model, cluster, plan, profile)
    if record.replay_for is not None and not record.memory.fits:
        print("the plan does not fit: replaying the allocator for the OOM ladder's steps too (--no-simulate-allocator "
              "skips it)", file=sys.stderr, flush=True)
    advice = advise(model, cluster, plan, headroom=args.headroom, log=log, record=record, profile=profile)
    if args.json:
        out = advice.to_dict()
        out["allocator_replay"] = replay
        if log is not None:
            out["log"] = log.to_dict()
        print_json(out)
    else:
        print(render(advice, log, replay))
    return 0
