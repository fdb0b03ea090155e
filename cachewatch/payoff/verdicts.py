"""Is jit worth it: each function's compile seconds against what its compiled calls save
over running eagerly, per signature and in all, with the calls it would take to break even."""

from __future__ import annotations

import collections
import dataclasses
import logging
import math
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa

from ..core.events import OP_BY_OP_MODULE
from ..core.figures import compile_share, seconds_text, share_text
from ..store import queries
from ..store.columns import Filters, FunctionReport
from . import cost_reads
from .cost_reads import SignatureCost
from .results import SignatureVerdict, Verdict

logger = logging.getLogger("cachewatch")


def jit_verdict(
    compile_seconds: float,
    compiles: int,
    calls: int,
    run_mean: float | None,
    eager_mean: float | None,
    few_calls: int = 5,
    run_note: str | None = None,
    signatures: Sequence[SignatureVerdict] | None = None,
) -> Verdict:
    """Whether compiling paid for itself, from the numbers the report shows.

    ``run_mean`` is the report's run time of one call, so the compile share here is the
    report's. With an eager baseline (op-by-op run time per call), ``break_even_calls``
    is the calls after which the time saved per call has repaid one compile (the mean
    compile), and ``repaid`` whether this view's calls repaid all its compiles.

        jit_verdict(compile_seconds=0.5, compiles=1, calls=1000, run_mean=0.001, eager_mean=0.004)
    """
    run_est = calls * run_mean if run_mean is not None else None
    share = compile_share(compile_seconds, run_est)  # the report's, from the same numbers
    per_compile = compile_seconds / compiles if compiles else None
    few = compiles > 0 and calls <= few_calls * compiles
    text = []
    if compiles and few:
        text.append(f"compiled {compiles} time(s) for {calls} call(s)")
    if run_mean is None:
        text.append(f"no run time ({run_note or 'no call timed'}), so no compile share")
    else:
        heavier = (
            "compiling costs more than running"
            if share is not None and share >= 0.5
            else "running costs more than compiling"
        )
        text.append(
            f"{heavier}: compile share {share_text(share)} ({compile_seconds:.3g} s compiling, {run_est:.3g} s running)"
        )
    found = _against_eager(compile_seconds, calls, run_mean, eager_mean, per_compile)
    return Verdict(
        compiles=compiles,
        calls=calls,
        compile_seconds=compile_seconds,
        run_seconds_mean=run_mean,
        run_seconds_est=run_est,
        compile_share=share,
        eager_seconds_mean=eager_mean,
        compile_seconds_per_compile=per_compile,
        break_even_calls=found.break_even_calls,
        break_even_calls_total=found.break_even_calls_total,
        jit_saves_seconds=found.jit_saves_seconds,
        repaid=found.repaid,
        signatures=tuple(signatures or ()),
        few_calls=few,
        text="; ".join([*text, *found.text]),
        worth_it=found.repaid,
    )


@dataclasses.dataclass(frozen=True)
class _AgainstEager:
    """The verdict's fields that say whether the compiles were repaid against running
    eagerly, and their sentences."""

    break_even_calls: int | None = None
    break_even_calls_total: int | None = None
    jit_saves_seconds: float | None = None
    repaid: bool | None = None
    text: tuple[str, ...] = ()


def _against_eager(
    compile_seconds: float, calls: int, run_mean: float | None, eager_mean: float | None, per_compile: float | None
) -> _AgainstEager:
    """Whether the compiles were repaid against running eagerly: break-even calls, seconds
    jit saves, repaid, and the sentences that say so."""
    if run_mean is not None and eager_mean is not None:
        saved_per_call = eager_mean - run_mean
        saves = calls * saved_per_call - compile_seconds
        repaid = saves >= 0
        one = total = None
        text: list[str] = []
        if saved_per_call > 0 and per_compile is not None:
            one = math.ceil(per_compile / saved_per_call)
            total = math.ceil(compile_seconds / saved_per_call)
            text.append(
                f"one compile is repaid after {one} calls ({seconds_text(saved_per_call)} saved per call against eager)"
            )
        elif saved_per_call <= 0:
            text.append("eager is as fast per call, so compiling never pays off")
        if repaid:
            text.append(f"this run repaid its compiles: jit saves {saves:.3g} s over running eagerly")
        else:
            text.append(
                f"this run did not repay its compiles: jit costs {-saves:.3g} s more than running eagerly"
                + (f" (it would pay off after {total} calls)" if total is not None else "")
            )
        return _AgainstEager(one, total, saves, repaid, tuple(text))
    if eager_mean is not None and calls * eager_mean < compile_seconds:
        # No jit run time, but even a free run could not have saved the compile time.
        return _AgainstEager(
            repaid=False,
            text=(
                f"this run did not repay its compiles: {calls} call(s) save at most "
                f"{calls * eager_mean:.3g} s against eager, for {compile_seconds:.3g} s compiling",
            ),
        )
    if run_mean is not None:
        return _AgainstEager(text=("eager baseline off, so no break-even",))
    return _AgainstEager()


# The most functions whose verdicts read their signatures by name; more read every function's.
VERDICTS_NAME_FUNCTIONS = 100


def verdicts(
    conn: sa.Connection, report_rows: Sequence[FunctionReport], filters: Filters = Filters(), few_calls: int = 5
) -> dict[str, Verdict]:
    """The jit verdict per function of a report, from the row's own numbers, with eager
    baselines and a break-even per signature where measured."""
    hashes = [row["function_hash"] for row in report_rows if row.get("module") != OP_BY_OP_MODULE]
    if not hashes:
        return {}
    # A verdict of most of the store's functions reads every function's signatures: a
    # list of hundreds of hashes costs more to send and plan than the few rows it saves.
    asked = hashes if len(hashes) <= VERDICTS_NAME_FUNCTIONS else None
    # Only a signature with an eager baseline has a break-even (and needs its run time).
    per_signature: dict[str, list[SignatureCost]] = collections.defaultdict(list)
    for r in cost_reads.signature_costs(conn, filters, asked, eager_only=True):
        per_signature[r.function_hash].append(r)
    run_times = queries.signature_run_times(conn, filters, asked) if per_signature else {}
    out = {}
    for row in report_rows:
        if row.get("module") == OP_BY_OP_MODULE or not row["calls"] or not row["compiles"]:
            # JAX's own eager compiles, a jit whose calls are not counted (one cachewatch
            # did not wrap, seen through JAX's compile events), or one that never ran on
            # its own (only traced inside other jits): no evidence to weigh.
            continue
        function_hash = row["function_hash"]
        timed = run_times.get(function_hash, {})
        signatures, eager = _signature_break_evens(per_signature.get(function_hash, []), timed)
        out[function_hash] = jit_verdict(
            row["compile_seconds"],
            row["compiles"],
            row["calls"],
            row.get("run_seconds_mean"),
            eager,
            few_calls,
            run_note=row.get("run_time_note"),
            signatures=signatures,
        )
    return out


def _signature_break_evens(
    costs: list[SignatureCost], timed: dict[str, Any]
) -> tuple[list[SignatureVerdict], float | None]:
    """Per signature with an eager baseline, its compiles, run and eager time and
    break-even; and the function's eager run time per call (weighted by the calls timed
    per signature, a plain mean where none was)."""
    signatures = []
    eager_weighted, eager_weight, eager_plain = 0.0, 0, []
    for sig in costs:
        if sig.eager_seconds is None:
            continue
        run = timed.get(sig.signature_hash)
        run_s, weight = (run["run_seconds"], run["weight"]) if run is not None else (None, 0)
        eager_plain.append(sig.eager_seconds)
        eager_weighted += weight * sig.eager_seconds
        eager_weight += weight
        compiles = sig.compiles
        per_compile = sig.seconds / compiles if compiles else None
        saved = sig.eager_seconds - run_s if run_s is not None else None
        signatures.append(
            SignatureVerdict(
                signature_hash=sig.signature_hash,
                compiles=compiles,
                compile_seconds_per_compile=per_compile,
                run_seconds=run_s,
                eager_seconds=sig.eager_seconds,
                break_even_calls=(
                    math.ceil(per_compile / saved) if saved is not None and saved > 0 and per_compile else None
                ),
            )
        )
    eager = (
        eager_weighted / eager_weight
        if eager_weight
        else (sum(eager_plain) / len(eager_plain) if eager_plain else None)
    )
    return signatures, eager


def verdicts_or_none(conn: sa.Connection, rows: Sequence[FunctionReport], filters: Filters) -> dict[str, Verdict]:
    """:func:`verdicts`, or none when a stored row it cannot weigh (a run time measured
    op by op without its compiled twin, written before the store refused such rows) would
    fail the whole page: the page shows what is there, without the verdicts."""
    try:
        return verdicts(conn, rows, filters)
    except (TypeError, ValueError, ZeroDivisionError, OverflowError) as exc:
        logger.warning("verdicts left out: a stored row cannot be weighed: %s: %s", type(exc).__name__, exc)
        return {}
