"""Each compile as an OpenTelemetry span, sent to an OTLP/HTTP collector.

    OTEL_EXPORTER_OTLP_ENDPOINT=http://collector:4318 python train.py   # the standard variable
    CACHEWATCH_OTEL_ENDPOINT=http://collector:4318 python train.py      # or cachewatch's setting
    cachewatch.configure(otel_endpoint="http://collector:4318")         # or from the program

With the OpenTelemetry SDK and its OTLP/HTTP exporter installed (``cachewatch[otel]``),
every recorded compile becomes a span named after its function, from the compile's
start, with one child span per phase (``trace``, ``lower``, then ``XLA compile`` or
``persistent cache read``) and the ``cachewatch.*`` attributes of ``_attributes``. A
compile made while a span of the program's is current on the compiling thread is that
span's child.

Where spans go: cachewatch's ``otel_endpoint`` setting names a collector (its
``/v1/traces``), and then cachewatch keeps its own tracer provider for it (resource
``service.name`` ``cachewatch`` unless ``OTEL_SERVICE_NAME`` says otherwise), exported
by the SDK's ``BatchSpanProcessor``. Without the setting, ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``
or ``OTEL_EXPORTER_OTLP_ENDPOINT`` turn spans on: into the program's own tracer provider
when it has set one as the global provider before its first compile (its resource,
sampler and exporters, none of them touched), else into cachewatch's own provider, as
above. ``otel_endpoint=off`` or ``OTEL_SDK_DISABLED=true`` turn spans off.

Cost: when nothing names an endpoint, nothing of OpenTelemetry is imported and nothing
listens to the recorder. When one does, the compiling thread only notes the current
context (a few microseconds); the span is made in the writer's thread, once the
compile's figures (flops) are read, and sent by the SDK's exporter thread. Nothing here
raises into the program: a missing SDK or an endpoint that cannot be reached is told
once on the ``cachewatch`` logger, and the exporter's own complaints about it are kept
off the program's log.
"""

from __future__ import annotations

import atexit
import collections
import dataclasses
import logging
import os
import threading
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, cast

from ..core import _guard, process
from ..core import config as configmod
from ..core.events import VERSION, CompileEvent, Kind, short_name
from ..record import current, recorder
from .perfetto import CACHE_READ, XLA_COMPILE

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.sdk.trace import ReadableSpan
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
    from opentelemetry.trace import Tracer, TracerProvider

logger = logging.getLogger("cachewatch")

SCOPE = "cachewatch"  # the instrumentation scope of the spans
SERVICE_NAME = "cachewatch"  # the resource's service.name of cachewatch's own provider
TRACES_PATH = "/v1/traces"
OFF = "off"
SETTING = "CACHEWATCH_OTEL_ENDPOINT"
TRACES_ENDPOINT = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
BASE_ENDPOINT = "OTEL_EXPORTER_OTLP_ENDPOINT"
# Contexts noted for compiles whose spans are not made yet, at most (a compile dropped
# before the writer, a full queue, leaves its entry; the oldest go first).
_MAX_WAITING = 10_000


@dataclasses.dataclass(frozen=True)
class Target:
    """Where spans go: ``endpoint`` (the collector's traces URL) as ``named_by`` names it;
    ``own`` when cachewatch's setting names it (always cachewatch's own provider)."""

    endpoint: str
    named_by: str
    own: bool


def target(cfg: configmod.Config, environ: Mapping[str, str] | None = None) -> Target | None:
    """Where this configuration sends spans, or None: off.

    >>> target(configmod.resolve({"otel_endpoint": "http://c:4318"}), environ={})
    Target(endpoint='http://c:4318/v1/traces', named_by='CACHEWATCH_OTEL_ENDPOINT', own=True)
    """
    env = os.environ if environ is None else environ
    setting = cfg.otel_endpoint.strip()
    if setting.lower() == OFF or env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return None
    if setting:
        return Target(_traces_url(setting), SETTING, own=True)
    if env.get(TRACES_ENDPOINT, "").strip():
        return Target(env[TRACES_ENDPOINT].strip(), TRACES_ENDPOINT, own=False)
    if env.get(BASE_ENDPOINT, "").strip():
        return Target(_traces_url(env[BASE_ENDPOINT]), BASE_ENDPOINT, own=False)
    return None


def _traces_url(base: str) -> str:
    """A collector's base URL as the standard reads it: its traces go to ``/v1/traces``."""
    base = base.strip()
    return base if base.rstrip("/").endswith(TRACES_PATH) else base.rstrip("/") + TRACES_PATH


def _named_in_environment() -> bool:
    return any(os.environ.get(name, "").strip() for name in (SETTING, TRACES_ENDPOINT, BASE_ENDPOINT))


def spanned(event: CompileEvent) -> bool:
    """Whether an event becomes a span: a compile, or a trace of its own that compiled
    nothing (a trace nested in another's is inside that one's ``trace`` phase); the
    compiles a Perfetto trace of the run shows."""
    if event.kind == Kind.STALE_CAPTURE:
        return False
    return event.compiled or (not event.nested and event.trace_seconds is not None)


def _attributes(event: CompileEvent) -> dict[str, str | bool | int | float]:
    """The span's attributes: what is known of the compile (unknown values left out)."""
    found: dict[str, str | bool | int | float | None] = {
        "cachewatch.function": event.function.qualname or event.function.name,
        "cachewatch.module": event.function.module,
        "cachewatch.function_hash": event.function.function_hash,
        "cachewatch.event_id": event.event_id,
        "cachewatch.run_id": event.run_id,
        "cachewatch.kind": event.kind,
        "cachewatch.cause": event.cause,
        "cachewatch.explanation": event.explanation,
        "cachewatch.signature_hash": event.signature_hash,
        "cachewatch.compiled": event.compiled,
        "cachewatch.warmup": event.warmup,
        "cachewatch.device": event.device,
        "cachewatch.backend": event.backend,
        "cachewatch.seconds": event.seconds,
        "cachewatch.trace_seconds": event.trace_seconds,
        "cachewatch.lower_seconds": event.lower_seconds,
        "cachewatch.compile_seconds": event.compile_seconds,
        "cachewatch.flops": event.flops,
        "cachewatch.persistent_cache": event.persistent_cache,
        "cachewatch.persistent_cache_reason": event.persistent_cache_reason,
        "cachewatch.call_site": event.call_site,
        "cachewatch.error": event.error,
        "thread.name": event.thread,
    }
    return {key: value for key, value in found.items() if value is not None and value != ""}


def _phases(event: CompileEvent) -> list[tuple[str, int]]:
    """The compile's phases in order, in whole nanoseconds."""
    compiled_by = CACHE_READ if event.persistent_cache == "hit" or event.persistent_cache_hit else XLA_COMPILE
    known = (("trace", event.trace_seconds), ("lower", event.lower_seconds), (compiled_by, event.compile_seconds))
    return [(name, max(0, round(seconds * 1e9))) for name, seconds in known if seconds is not None]


class _Delivery:
    """cachewatch's exporter (an SDK ``SpanExporter`` by its methods): the OTLP/HTTP one,
    with its failures told once on the ``cachewatch`` logger instead of on its own, and
    with no retries waited for at exit once the collector is known to be unreachable."""

    def __init__(self, exporter: SpanExporter, endpoint: str, success: SpanExportResult, failure: SpanExportResult):
        self._exporter = exporter
        self.endpoint = endpoint
        self._success, self._failure = success, failure
        self.failing = False  # the last export failed
        self.closing = False  # closing down (at exit, or moving elsewhere)
        self.closed = False
        self._told = False
        # The exporter's HTTP client logs each failed attempt and retry (SDK 1.3x and later,
        # through this attribute); for this exporter, which is cachewatch's alone, that
        # becomes the one warning below. An SDK without it keeps its own messages.
        client = getattr(exporter, "_client", None)
        if client is not None and hasattr(client, "_logger"):
            client._logger = _Complaints(self)

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        if self.closed:
            _totals["not_sent"] += len(spans)
            return self._failure
        try:
            result = self._exporter.export(spans)
        except Exception as exc:  # an exporter of an older SDK raises what its HTTP client raised
            self.failed(f"{type(exc).__name__}: {exc}")
            result = self._failure
        if result == self._success:
            self.failing = False
            _totals["sent"] += len(spans)
        else:
            self.failed("the collector did not take them")
            _totals["not_sent"] += len(spans)
        return result

    def failed(self, reason: str) -> None:
        """An export failed, for ``reason``: said once; at exit, no retry waited for."""
        self.failing = True
        if not self._told and not self.closed:
            self._told = True
            logger.warning(
                "cachewatch: compile spans cannot be sent to %s: %s; the program goes on, and spans are dropped "
                "while the collector cannot be reached (said once)",
                self.endpoint,
                reason[:500],
            )
        if self.closing:
            self.abandon()  # closing: no backoff waited for, the retries stop now

    def abandon(self) -> None:
        """Stop sending (and retrying): what is left is dropped."""
        if not self.closed:
            self.closed = True
            self._exporter.shutdown()

    def shutdown(self) -> None:
        self.abandon()

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return True


class _Complaints:
    """Stands in for the logger of cachewatch's own OTLP exporter: a complaint (a failed
    attempt, a retry, a refusal) goes to :meth:`_Delivery.failed`, never to the program's
    log; the exporter's debug and info lines go nowhere."""

    def __init__(self, delivery: _Delivery):
        self._delivery = delivery

    def log(self, level: int, msg: object, *args: object, **kwargs: object) -> None:
        if level < logging.WARNING:
            return
        text = str(msg)
        if text.startswith("Transient error ") and args:
            reason = str(args[0])  # "Transient error X encountered while exporting ..., retrying in 1s"
        else:
            try:
                reason = text % args if args else text
            except (TypeError, ValueError):
                reason = text
        self._delivery.failed(reason)

    def debug(self, msg: object, *args: object, **kwargs: object) -> None:
        pass

    def info(self, msg: object, *args: object, **kwargs: object) -> None:
        pass

    def warning(self, msg: object, *args: object, **kwargs: object) -> None:
        self.log(logging.WARNING, msg, *args)

    def error(self, msg: object, *args: object, **kwargs: object) -> None:
        self.log(logging.ERROR, msg, *args)

    def exception(self, msg: object, *args: object, **kwargs: object) -> None:
        self.log(logging.ERROR, msg, *args)

    def critical(self, msg: object, *args: object, **kwargs: object) -> None:
        self.log(logging.CRITICAL, msg, *args)

    def isEnabledFor(self, level: int) -> bool:
        return level >= logging.WARNING


class _Spans:
    """Compiles into spans of one tracer: the context current at each compile, noted in
    the compiling thread, and the span made from the completed event in the writer's."""

    def __init__(
        self,
        goes_to: Target,
        tracer: Tracer,
        processor: BatchSpanProcessor | None = None,
        delivery: _Delivery | None = None,
    ):
        from opentelemetry import context, trace

        self.target = goes_to
        self._tracer = tracer
        self._processor = processor  # None: the program's provider, not cachewatch's to close
        self.delivery = delivery
        self._context, self._trace = context, trace
        self._lock = threading.Lock()
        self._parents: collections.OrderedDict[str, Context] = collections.OrderedDict()

    def heard(self, event: CompileEvent) -> None:
        """In the compiling thread: note the program's current span, if it has one."""
        now = self._context.get_current()
        if not self._trace.get_current_span(now).get_span_context().is_valid:
            return
        with self._lock:
            self._parents[event.event_id] = now
            if len(self._parents) > _MAX_WAITING:
                self._parents.popitem(last=False)

    def completed(self, event: CompileEvent) -> None:
        """In the writer's thread: the compile's span and its phases, at their real times."""
        with self._lock:
            parent = self._parents.pop(event.event_id, None)
        if not spanned(event):
            return
        trace = self._trace
        start = round(event.timestamp * 1e9)
        name = short_name(event.function.qualname or event.function.name) or event.function.function_hash[:12]
        span = self._tracer.start_span(
            name,
            context=parent if parent is not None else self._context.Context(),
            kind=trace.SpanKind.INTERNAL,
            attributes=_attributes(event),
            start_time=start,
        )
        inside = trace.set_span_in_context(span, self._context.Context())
        at = start
        for phase, nanoseconds in _phases(event):
            child = self._tracer.start_span(
                phase, context=inside, attributes={"cachewatch.event_id": event.event_id}, start_time=at
            )
            at += nanoseconds
            child.end(end_time=at)
        if event.error:
            span.set_status(trace.Status(trace.StatusCode.ERROR, event.error))
        span.end(end_time=at)
        _totals["made"] += 1

    def forget_parents(self) -> None:
        self._lock = threading.Lock()  # a parent's thread may have held it
        self._parents.clear()

    def close(self, timeout: float) -> None:
        """Send what is left within ``timeout`` seconds, then stop (cachewatch's provider
        only: the program's own is the program's to shut down)."""
        processor, delivery = self._processor, self.delivery
        if processor is None or delivery is None:
            return
        delivery.closing = True
        if delivery.failing:
            delivery.abandon()  # unreachable: no retries to wait for
        # The processor's shutdown sends what it holds and waits for no deadline of ours:
        # past the timeout, the exporter is stopped (its retries with it) and the rest dropped.
        closing = threading.Thread(target=processor.shutdown, name="cachewatch-otel-close", daemon=True)
        closing.start()
        closing.join(timeout)
        if closing.is_alive():
            delivery.abandon()
            closing.join(1.0)


_lock = threading.RLock()
_spans: _Spans | None = None
_decided: Target | None = None  # what the spans were last set up for (also when that failed)
_exit_registered = False
# This process's compile spans so far: made (handed to a provider), and sent or not by
# cachewatch's own exporter (phases included; the program's provider sends its own, uncounted).
_totals: collections.Counter[str] = collections.Counter()


def active() -> bool:
    """Whether compiles are being sent as spans now."""
    return _spans is not None


def spans_made() -> int:
    """Compile spans made in this process so far (each with its phases)."""
    return _totals["made"]


def spans_sent() -> int:
    """Spans cachewatch's own exporter delivered to a collector in this process so far
    (phases included; none counted for the program's own provider)."""
    return _totals["sent"]


def spans_not_sent() -> int:
    """Spans cachewatch's own exporter could not deliver (the collector unreachable, or
    refusing them) in this process so far; those its batch processor dropped are not here."""
    return _totals["not_sent"]


def apply(cfg: configmod.Config) -> None:
    """Start, move or stop the spans as ``cfg`` and the environment say (after every
    configure(), and at the first compile when the environment names an endpoint)."""
    global _spans, _decided
    goes_to = target(cfg)
    with _lock:
        if goes_to == _decided:
            return  # a start that failed is not tried (nor said) again for the same target
        old, _spans, _decided = _spans, None, goes_to
        if old is not None:
            recorder.remove_listener(old.heard)
            recorder.remove_listener(old.completed)
            old.close(cfg.exit_timeout)
        if goes_to is None:
            return
        spans = _start(goes_to)
        if spans is None:
            return
        recorder.add_listener(spans.heard, at_once=True)
        recorder.add_listener(spans.completed)
        _spans = spans
        _register_exit()


def _start(goes_to: Target) -> _Spans | None:
    """The spans' tracer: the program's global provider, or cachewatch's own (None: the
    SDK is missing, or will not take the settings; said once)."""
    try:
        from opentelemetry import trace
    except ImportError:
        _missing(goes_to, "the OpenTelemetry API")
        return None
    if not goes_to.own:
        provider = trace.get_tracer_provider()
        if not isinstance(provider, trace.ProxyTracerProvider | trace.NoOpTracerProvider):
            return _Spans(goes_to, provider.get_tracer(SCOPE, VERSION))
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider as SdkTracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExportResult
    except ImportError as exc:
        _missing(goes_to, f"the OpenTelemetry SDK or its OTLP/HTTP exporter ({exc})")
        return None
    try:
        resource = Resource.create({})
        if str(resource.attributes.get("service.name", "")).startswith("unknown_service"):
            resource = resource.merge(Resource({"service.name": SERVICE_NAME}))
        exporter = OTLPSpanExporter(endpoint=goes_to.endpoint)
        delivery = _Delivery(exporter, goes_to.endpoint, SpanExportResult.SUCCESS, SpanExportResult.FAILURE)
        processor = BatchSpanProcessor(cast("SpanExporter", delivery))
        provider = SdkTracerProvider(resource=resource, shutdown_on_exit=False)
        provider.add_span_processor(processor)
    except Exception as exc:  # a setting of the SDK's it refuses (a bad certificate path, a bad number)
        logger.warning(
            "cachewatch: compiles are not sent as spans to %s (set by %s): the OpenTelemetry SDK refused its "
            "settings: %s: %s",
            goes_to.endpoint,
            goes_to.named_by,
            type(exc).__name__,
            exc,
        )
        return None
    return _Spans(goes_to, cast("TracerProvider", provider).get_tracer(SCOPE, VERSION), processor, delivery)


def _missing(goes_to: Target, what: str) -> None:
    logger.warning(
        "cachewatch: %s names an OpenTelemetry collector (%s), but %s is not installed: compiles are not sent "
        "as spans (pip install 'cachewatch[otel]', or set %s=off)",
        goes_to.named_by,
        goes_to.endpoint,
        what,
        SETTING,
    )


def _register_exit() -> None:
    # Registered at the first start, after the recorder's own exit handler, so it runs
    # before that one: it flushes the recorder itself, then the spans that made.
    global _exit_registered
    if not _exit_registered:
        _exit_registered = True
        atexit.register(_at_exit)


def _at_exit() -> None:
    spans = _spans
    if spans is None:
        return
    with _guard.guard("otel.exit"):
        timeout = current.config().exit_timeout
        recorder.flush(timeout)  # the compiles still queued become spans now
        spans.close(timeout)


def _first_compile(event: CompileEvent) -> None:
    """At the first recorded event of a process whose environment names an endpoint:
    start, then listen no more (a later configure() decides again)."""
    recorder.remove_listener(_first_compile)
    apply(current.config())
    spans = _spans
    if spans is not None:
        spans.heard(event)  # this one was recorded before the spans' listener was added


@_guard.guarded(where="otel.configure")
def _configured(cfg: configmod.Config) -> None:
    apply(cfg)


def _after_fork_in_child() -> None:
    global _lock
    _lock = threading.RLock()
    _totals.clear()  # the child's spans are its own
    spans = _spans
    if spans is not None:
        spans.forget_parents()  # the SDK's processor restarts its own thread in the child


current.on_configure(_configured)
process.on_fork_in_child(process.Concern.REPORTS, _after_fork_in_child)
if _named_in_environment():
    recorder.add_listener(_first_compile, at_once=True)
