"""Checks for the operations artifacts: Prometheus config and alert rules, the Grafana
dashboard and provisioning, the Dockerfile and docker-compose.yml.

The real tools do the validating (promtool, docker-compose, a prometheus server on
loopback); when they are missing, scripts/ensure-ops-tools.sh installs them. A missing
tool fails the run rather than skipping it, so a green run always means the files were
checked by the tools that will read them.

    pytest tests/test_deploy.py
"""

from __future__ import annotations

import http.server
import json
import os
import re
import shlex
import shutil
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
DEPLOY = ROOT / "deploy"
PROM_DIR = DEPLOY / "prometheus"
PROM_CONFIG = PROM_DIR / "prometheus.yml"
ALERTS = PROM_DIR / "alerts.yml"
ALERTS_TEST = PROM_DIR / "tests" / "alerts_test.yml"
GRAFANA = DEPLOY / "grafana"
DASHBOARD = GRAFANA / "dashboards" / "cachewatch.json"
DATASOURCES = GRAFANA / "provisioning" / "datasources" / "prometheus.yml"
DASHBOARD_PROVIDER = GRAFANA / "provisioning" / "dashboards" / "cachewatch.yml"
DOCKERFILE = ROOT / "Dockerfile"
COMPOSE = ROOT / "docker-compose.yml"
ENSURE_TOOLS = ROOT / "scripts" / "ensure-ops-tools.sh"

# What the service exposes on /metrics (DESIGN.md, "Prometheus metrics"). The histogram
# is only queryable through its series suffixes.
SERVICE_METRICS = {
    "cachewatch_compiles_total",
    "cachewatch_compile_seconds_bucket",
    "cachewatch_compile_seconds_sum",
    "cachewatch_compile_seconds_count",
    "cachewatch_calls_total",
    "cachewatch_run_seconds_total",
    "cachewatch_compile_share_ratio",
    "cachewatch_storm_active",
    "cachewatch_events_ingested_total",
    "cachewatch_events_dropped_total",
    "cachewatch_ingest_rejected_events_total",
    "cachewatch_persistent_cache_requests_total",
    "cachewatch_persistent_cache_saved_seconds_total",
    "cachewatch_rank_divergence",
    "cachewatch_program_eqns",
    "cachewatch_identical_recompile_seconds_total",
    "cachewatch_live_executables",
    "cachewatch_executable_bytes",
    "cachewatch_persistent_cache_entries",
    "cachewatch_persistent_cache_bytes",
}
# Product definitions the alerts and dashboard must agree with.
STORM_THRESHOLD = 5
STORM_WINDOW = "10m"
SHARE_THRESHOLD = 0.5
ALERT_NAMES = {
    "CachewatchRecompileStorm",
    "CachewatchCompileShareHigh",
    "CachewatchEventsDropped",
    "CachewatchDown",
    "CachewatchStormActive",
    "CachewatchRankDivergence",
    "CachewatchCompileTimeJump",
    "CachewatchExecutablesAccumulating",
}
SERVICES = {"postgres", "migrate", "cachewatch", "prometheus", "grafana"}

# Values substituted for Grafana's variables so promtool can parse panel queries.
GRAFANA_VARS = {
    "$__rate_interval": "1m",
    "$__interval": "1m",
    "$__range": "1h",
    "$function": ".*",
}


# --- tools --------------------------------------------------------------------------


def _run(cmd: list[str], **kwargs) -> subprocess.CompletedProcess:
    kwargs.setdefault("cwd", ROOT)
    kwargs.setdefault("timeout", 300)
    return subprocess.run(cmd, capture_output=True, text=True, **kwargs)


def _assert_ok(proc: subprocess.CompletedProcess) -> None:
    assert proc.returncode == 0, (
        f"{shlex.join(proc.args)} exited {proc.returncode}\n"
        f"--- stdout ---\n{proc.stdout}\n--- stderr ---\n{proc.stderr}"
    )


@pytest.fixture(scope="session")
def ops_tools() -> dict[str, str]:
    """Paths of promtool, prometheus and docker-compose, installing them if needed."""
    names = ("promtool", "prometheus", "docker-compose")
    if not all(shutil.which(n) for n in names):
        proc = _run(["bash", str(ENSURE_TOOLS)], timeout=900)
        _assert_ok(proc)
    found = {n: shutil.which(n) for n in names}
    missing = [n for n, path in found.items() if not path]
    if missing:
        pytest.fail(f"still missing after {ENSURE_TOOLS.name}: {', '.join(missing)}")
    return {n: path for n, path in found.items() if path}


def promtool(tools: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    proc = _run([tools["promtool"], *args])
    _assert_ok(proc)
    return proc


# --- PromQL helpers -----------------------------------------------------------------

_PROMQL_KEYWORDS = {
    "and",
    "or",
    "unless",
    "bool",
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "offset",
    "inf",
    "nan",
    "atan2",
}


def metric_names(expr: str) -> set[str]:
    """Metric names a PromQL expression selects (not functions, labels or keywords)."""
    text = re.sub(r'"(?:\\.|[^"\\])*"|\'(?:\\.|[^\'\\])*\'', '""', expr)
    text = re.sub(r"\{[^}]*\}", " ", text)  # label matchers
    text = re.sub(r"\[[^\]]*\]", " ", text)  # ranges and subqueries
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", text)
    text = re.sub(r"\boffset\s+-?\S+", " ", text)
    names = set()
    for match in re.finditer(r"(?<![\w.$])[A-Za-z_:][A-Za-z0-9_:]*", text):
        name = match.group(0)
        called = text[match.end() :].lstrip().startswith("(")  # a function or aggregation
        if not called and name.lower() not in _PROMQL_KEYWORDS:
            names.add(name)
    return names


def grafana_to_promql(expr: str) -> str:
    for var in sorted(GRAFANA_VARS, key=len, reverse=True):
        expr = expr.replace(var, GRAFANA_VARS[var])
    assert "$" not in expr, f"unsubstituted Grafana variable in {expr!r}"
    return expr


def test_metric_names_helper():
    expr = (
        "histogram_quantile(0.95, sum by (function, le) "
        '(rate(cachewatch_compile_seconds_bucket{function=~"a|b",cause!="x"}[5m]))) '
        "> 1e3 and on (function) up offset 5m or vector(0)"
    )
    assert metric_names(expr) == {"cachewatch_compile_seconds_bucket", "up"}


# --- loaded artifacts ---------------------------------------------------------------


def _load_yaml(path: Path):
    with path.open() as f:
        return yaml.safe_load(f)


@pytest.fixture(scope="module")
def alert_rules() -> dict[str, dict]:
    doc = _load_yaml(ALERTS)
    groups = {g["name"]: g for g in doc["groups"]}
    assert "cachewatch" in groups, f"groups: {sorted(groups)}"
    return {r["alert"]: r for r in groups["cachewatch"]["rules"] if "alert" in r}


@pytest.fixture(scope="module")
def dashboard() -> dict:
    with DASHBOARD.open() as f:
        return json.load(f)


def _panels(panels: list[dict]):
    for panel in panels:
        yield panel
        yield from _panels(panel.get("panels", []))


def _panel_exprs(dash: dict) -> list[tuple[str, str]]:
    """(where, expr) for every PromQL query: panel targets and annotations."""
    found = []
    for panel in _panels(dash["panels"]):
        for target in panel.get("targets", []):
            if target.get("expr"):
                found.append((f"panel {panel['title']!r} {target['refId']}", target["expr"]))
    for ann in dash.get("annotations", {}).get("list", []):
        if ann.get("expr"):
            found.append((f"annotation {ann['name']!r}", ann["expr"]))
    return found


def _threshold_values(panel: dict) -> set[float]:
    steps = panel["fieldConfig"]["defaults"].get("thresholds", {}).get("steps", [])
    return {s["value"] for s in steps if s.get("value") is not None}


def _compose_config(tools: dict[str, str], home: Path, compose_file: Path) -> dict:
    """docker-compose's own rendering of a compose file (no engine needed)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CACHEWATCH_", "GRAFANA_"))}
    env.update(HOME=str(home), DOCKER_CONFIG=str(home / ".docker"))
    env.pop("DOCKER_HOST", None)
    env.pop("COMPOSE_FILE", None)
    cmd = [tools["docker-compose"], "--project-directory", str(ROOT), "-f", str(compose_file), "config"]
    proc = _run(cmd, env=env)
    _assert_ok(proc)
    return yaml.safe_load(proc.stdout)


@pytest.fixture(scope="module")
def compose_config(ops_tools, tmp_path_factory) -> dict:
    return _compose_config(ops_tools, tmp_path_factory.mktemp("home"), COMPOSE)


def _volumes(service: dict) -> list[tuple[str, str]]:
    """(source, target) of a service's volumes in either of the forms compose prints:
    "src:dst[:mode]" strings (docker-compose 1.x) or mappings (Compose v2)."""
    out = []
    for v in service.get("volumes", []):
        if isinstance(v, dict):
            out.append((v.get("source", ""), v["target"]))
        else:
            source, target = v.split(":")[:2]
            out.append((source, target))
    return out


def _volume_targets(service: dict) -> set[str]:
    return {target for _, target in _volumes(service)}


def _bind_mounts(service: dict) -> dict[str, Path]:
    """Container path -> host path for bind mounts (sources that are host paths)."""
    return {target: Path(source) for source, target in _volumes(service) if source.startswith("/")}


def _dockerfile_instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    instructions, pending = [], ""
    for raw in DOCKERFILE.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        line = pending + line
        pending = ""
        keyword, _, args = line.partition(" ")
        instructions.append((keyword.upper(), args.strip()))
    assert not pending, "Dockerfile ends inside a continued instruction"
    return instructions


def _exec_form(args: str) -> list[str]:
    value = json.loads(args)
    assert isinstance(value, list), args
    assert all(isinstance(v, str) for v in value), args
    return value


def _serve_args(argv: list[str]) -> dict[str, str]:
    """--host/--port of a `cachewatch serve` command line."""
    assert argv[:2] == ["cachewatch", "serve"], argv
    opts, rest = {}, argv[2:]
    while rest:
        flag = rest.pop(0)
        assert flag.startswith("--"), f"unexpected argument {flag!r} in {argv}"
        assert rest, f"unexpected argument {flag!r} in {argv}"
        opts[flag[2:]] = rest.pop(0)
    return opts


# --- Prometheus ---------------------------------------------------------------------


def test_prometheus_config_is_valid(ops_tools):
    promtool(ops_tools, "check", "config", str(PROM_CONFIG))


def test_alert_rules_are_valid(ops_tools):
    proc = promtool(ops_tools, "check", "rules", str(ALERTS))
    assert f"SUCCESS: {len(ALERT_NAMES)} rules found" in proc.stdout, proc.stdout


def test_alert_rule_unit_tests_pass(ops_tools):
    promtool(ops_tools, "test", "rules", str(ALERTS_TEST))


def test_prometheus_scrapes_cachewatch_and_loads_the_rules():
    config = _load_yaml(PROM_CONFIG)
    assert config["global"]["external_labels"]["cachewatch_url"] == "http://localhost:8000"
    assert [PROM_DIR / f for f in config["rule_files"]] == [ALERTS]
    jobs = {j["job_name"]: j for j in config["scrape_configs"]}
    job = jobs["cachewatch"]
    assert job.get("metrics_path", "/metrics") == "/metrics"
    assert job.get("scrape_interval", config["global"].get("scrape_interval")) == "15s"
    targets = [t for sc in job["static_configs"] for t in sc["targets"]]
    assert targets == ["cachewatch:8000"]


def test_alerts_match_the_product_definitions(alert_rules):
    assert set(alert_rules) >= ALERT_NAMES

    storm = alert_rules["CachewatchRecompileStorm"]
    expr = " ".join(storm["expr"].split())
    assert 'cachewatch_compiles_total{cause!="first_call"}' in expr
    assert re.search(r"sum by \(function\)", expr)
    assert f"[{STORM_WINDOW}]" in expr
    assert re.search(rf">=\s*{STORM_THRESHOLD}\b", expr)
    assert storm["for"] == "2m"
    assert storm["labels"]["severity"] == "warning"

    share = alert_rules["CachewatchCompileShareHigh"]
    expr = " ".join(share["expr"].split())
    assert re.search(rf"cachewatch_compile_share_ratio\)?\s*>\s*{SHARE_THRESHOLD}\b", expr)
    assert re.search(r"and on ?\(function\) increase\(cachewatch_calls_total\[30m\]\) > 0", expr)
    assert share["for"] == "15m"

    dropped = alert_rules["CachewatchEventsDropped"]
    assert " ".join(dropped["expr"].split()) == (
        "increase(cachewatch_events_dropped_total[10m]) > 0 "
        "or increase(cachewatch_ingest_rejected_events_total[10m]) > 0"
    )

    down = alert_rules["CachewatchDown"]
    assert " ".join(down["expr"].split()) == 'up{job="cachewatch"} == 0'
    assert down["for"] == "2m"
    assert down["labels"]["severity"] == "critical"


def test_alerts_use_only_service_metrics(alert_rules):
    for name, rule in alert_rules.items():
        unknown = metric_names(rule["expr"]) - SERVICE_METRICS - {"up"}
        assert not unknown, f"{name} uses metrics the service does not expose: {unknown}"


def test_alert_annotations_name_the_function_and_link_the_dashboard(alert_rules):
    for name, rule in alert_rules.items():
        ann = rule["annotations"]
        assert {"summary", "description", "dashboard"} <= set(ann), name
        link = ann["dashboard"]
        assert link.startswith("{{ $externalLabels.cachewatch_url }}/"), (name, link)
        if "by (function)" in rule["expr"]:
            for key in ("summary", "description"):
                assert "{{ $labels.function }}" in ann[key], (name, key)
            assert re.fullmatch(
                r"\{\{ \$externalLabels\.cachewatch_url \}\}/functions\?q="
                r"\{\{ \$labels\.function( \| urlquery)? \}\}",
                link,
            ), (name, link)
        elif "by (job)" in rule["expr"]:
            assert "{{ $labels.job }}" in ann["summary"], name
            assert "{{ $labels.job }}" in ann["description"], name
            assert link == "{{ $externalLabels.cachewatch_url }}/jobs/{{ $labels.job | urlquery }}", (name, link)
        else:
            assert link == "{{ $externalLabels.cachewatch_url }}/", (name, link)


def test_every_alert_has_firing_and_quiet_unit_tests(alert_rules):
    doc = _load_yaml(ALERTS_TEST)
    assert [(ALERTS_TEST.parent / f).resolve() for f in doc["rule_files"]] == [ALERTS.resolve()]
    firing, quiet = set(), set()
    for group in doc["tests"]:
        for case in group.get("alert_rule_test", []):
            if case.get("exp_alerts"):
                firing.add(case["alertname"])
                for alert in case["exp_alerts"]:
                    assert alert.get("exp_labels"), (group["name"], case)
                    assert {"summary", "description", "dashboard"} <= set(alert.get("exp_annotations", {})), (
                        group["name"],
                        case,
                    )
            else:
                quiet.add(case["alertname"])
    assert firing >= set(alert_rules), f"no firing test for {set(alert_rules) - firing}"
    assert quiet >= set(alert_rules), f"no not-firing test for {set(alert_rules) - quiet}"


# --- a real Prometheus against a stand-in /metrics ------------------------------------

_FAKE_METRICS = """\
# TYPE cachewatch_compiles_total counter
cachewatch_compiles_total{function="train_step",cause="first_call"} 1
cachewatch_compiles_total{function="train_step",cause="new_shape"} %(scrapes)d
cachewatch_compiles_total{function="<lambda>",cause="new_function_object"} 3
# TYPE cachewatch_compile_seconds histogram
cachewatch_compile_seconds_bucket{function="train_step",le="0.1"} 2
cachewatch_compile_seconds_bucket{function="train_step",le="1.0"} 7
cachewatch_compile_seconds_bucket{function="train_step",le="+Inf"} 8
cachewatch_compile_seconds_sum{function="train_step"} 4.5
cachewatch_compile_seconds_count{function="train_step"} 8
# TYPE cachewatch_calls_total counter
cachewatch_calls_total{function="train_step"} 1000
# TYPE cachewatch_run_seconds_total counter
cachewatch_run_seconds_total{function="train_step"} 12.5
# TYPE cachewatch_compile_share_ratio gauge
cachewatch_compile_share_ratio{function="train_step"} 0.26
# TYPE cachewatch_storm_active gauge
cachewatch_storm_active{function="train_step"} 1
cachewatch_storm_active{function="<lambda>"} 0
# TYPE cachewatch_events_ingested_total counter
cachewatch_events_ingested_total 42
# TYPE cachewatch_events_dropped_total counter
cachewatch_events_dropped_total{reason="queue_full"} 0
"""


class _MetricsHandler(http.server.BaseHTTPRequestHandler):
    scrapes = 0
    lock = threading.Lock()

    def do_GET(self):  # noqa: N802 (http.server's naming)
        if self.path != "/metrics":
            self.send_error(404)
            return
        with self.lock:
            type(self).scrapes += 1
            body = (_FAKE_METRICS % {"scrapes": type(self).scrapes}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get_json(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=5) as resp:
        return json.load(resp)


@pytest.fixture(scope="module")
def live_prometheus(ops_tools, tmp_path_factory):
    """Our prometheus.yml and alerts.yml in a real server, scraping a stand-in service.

    Only the target address and the intervals are changed (1s, so the test takes
    seconds); everything else, rule_files and external labels included, is as shipped.
    Binds loopback ports of its own, so a Prometheus already on :9090 does not matter.
    """
    metrics = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _MetricsHandler)
    threading.Thread(target=metrics.serve_forever, daemon=True).start()

    work = tmp_path_factory.mktemp("prometheus")
    config = _load_yaml(PROM_CONFIG)
    config["global"].update(scrape_interval="1s", evaluation_interval="1s")
    config["rule_files"] = [str(PROM_DIR / f) for f in config["rule_files"]]
    job = next(j for j in config["scrape_configs"] if j["job_name"] == "cachewatch")
    job.update(scrape_interval="1s", scrape_timeout="1s")
    job["static_configs"] = [{"targets": [f"127.0.0.1:{metrics.server_address[1]}"]}]
    (work / "prometheus.yml").write_text(yaml.safe_dump(config))

    port = _free_port()
    log = (work / "prometheus.log").open("w")
    proc = subprocess.Popen(
        [
            ops_tools["prometheus"],
            f"--config.file={work / 'prometheus.yml'}",
            f"--storage.tsdb.path={work / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, (work / "prometheus.log").read_text()
            try:
                result = _get_json(f"{base}/api/v1/query?query=up")["data"]["result"]
                if any(r["value"][1] == "1" for r in result):
                    break
            except OSError:
                pass
            assert time.monotonic() < deadline, (work / "prometheus.log").read_text()
            time.sleep(0.5)
        # A few scrapes, so rate() and increase() have two points: waited for, not slept.
        while True:
            result = _get_json(f"{base}/api/v1/query?query=count_over_time(up[5m])")["data"]["result"]
            if result and min(float(r["value"][1]) for r in result) >= 3:
                break
            assert time.monotonic() < deadline + 60, (work / "prometheus.log").read_text()
            time.sleep(0.5)
        yield base
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
        metrics.shutdown()
        metrics.server_close()


def test_prometheus_loads_and_evaluates_the_rules(live_prometheus, alert_rules):
    groups = _get_json(f"{live_prometheus}/api/v1/rules")["data"]["groups"]
    rules = {r["name"]: r for g in groups if g["name"] == "cachewatch" for r in g["rules"]}
    assert set(rules) == set(alert_rules)
    for name, rule in rules.items():
        assert rule["health"] == "ok", f"{name}: {rule.get('lastError')}"

    loaded = _get_json(f"{live_prometheus}/api/v1/status/config")["data"]["yaml"]
    assert "cachewatch_url: http://localhost:8000" in loaded


def test_recompile_storm_goes_pending_with_a_working_link(live_prometheus):
    """train_step's new_shape counter grows by one per scrape: a storm in seconds.

    `for: 2m` keeps it pending for the length of a test, which is enough to see the
    rule select the right series and the server expand the annotations, external
    label included.
    """
    deadline = time.monotonic() + 60
    while True:
        alerts = _get_json(f"{live_prometheus}/api/v1/alerts")["data"]["alerts"]
        storms = [a for a in alerts if a["labels"]["alertname"] == "CachewatchRecompileStorm"]
        if storms or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert [a["labels"]["function"] for a in storms] == ["train_step"], alerts
    (storm,) = storms
    assert storm["state"] == "pending"
    assert storm["labels"]["severity"] == "warning"
    assert storm["annotations"]["dashboard"] == "http://localhost:8000/functions?q=train_step"
    assert storm["annotations"]["summary"] == "Recompilation storm in train_step"
    assert not [a for a in alerts if a["labels"]["alertname"] == "CachewatchDown"]


def test_dashboard_queries_run_on_prometheus(live_prometheus, dashboard):
    end = time.time()
    for where, expr in _panel_exprs(dashboard):
        query = urllib.parse.urlencode({"query": grafana_to_promql(expr), "start": end - 60, "end": end, "step": "1"})
        try:
            body = _get_json(f"{live_prometheus}/api/v1/query_range?{query}")
        except urllib.error.HTTPError as err:
            pytest.fail(f"{where}: {err.read().decode()}")
        assert body["status"] == "success", (where, body)


# --- Grafana ------------------------------------------------------------------------


def test_grafana_provisioning_matches_compose_and_dashboard(dashboard, compose_config):
    datasources = _load_yaml(DATASOURCES)["datasources"]
    prometheus = [d for d in datasources if d["type"] == "prometheus"]
    assert len(prometheus) == 1
    ds = prometheus[0]
    assert urllib.parse.urlsplit(ds["url"]).netloc == "prometheus:9090"
    assert "prometheus" in compose_config["services"]

    providers = _load_yaml(DASHBOARD_PROVIDER)["providers"]
    assert [p["type"] for p in providers] == ["file"]
    mounts = _bind_mounts(compose_config["services"]["grafana"])
    provider_path = providers[0]["options"]["path"]
    assert mounts.get(provider_path) == DASHBOARD.parent, mounts
    assert mounts.get("/etc/grafana/provisioning") == GRAFANA / "provisioning", mounts

    # The dashboard selects the provisioned datasource by uid by default and lets an
    # imported copy pick another Prometheus from the same variable.
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    source = variables["datasource"]
    assert source["type"] == "datasource"
    assert source["query"] == "prometheus"
    assert source["current"]["value"] == ds["uid"]


def test_dashboard_structure(dashboard):
    assert dashboard["uid"] == "cachewatch"
    assert 36 <= dashboard["schemaVersion"] <= 41
    assert dashboard.get("id") is None  # importable without clashing with local ids

    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    fn = variables["function"]
    assert fn["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
    query = fn["query"]["query"] if isinstance(fn["query"], dict) else fn["query"]
    assert " ".join(query.split()) == "label_values(cachewatch_compiles_total, function)"
    assert fn["includeAll"]
    assert fn["multi"]

    ids = [p["id"] for p in _panels(dashboard["panels"])]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    for panel in _panels(dashboard["panels"]):
        if panel["type"] == "row":
            continue
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, panel["title"]
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            assert target["datasource"] == panel["datasource"], panel["title"]
            if "function" in target["expr"]:
                assert 'function=~"$function"' in target["expr"], (panel["title"], target["expr"])


def test_dashboard_covers_the_signals(dashboard):
    queried = set()
    for _, expr in _panel_exprs(dashboard):
        queried |= metric_names(expr)
    wanted = {
        "cachewatch_compiles_total",
        "cachewatch_compile_seconds_sum",
        "cachewatch_compile_seconds_bucket",
        "cachewatch_calls_total",
        "cachewatch_compile_share_ratio",
        "cachewatch_storm_active",
        "cachewatch_events_ingested_total",
        "cachewatch_events_dropped_total",
        "cachewatch_rank_divergence",
        "cachewatch_persistent_cache_requests_total",
    }
    assert wanted <= queried, f"no panel for {wanted - queried}"
    exprs = " ".join(e for _, e in _panel_exprs(dashboard))
    assert "histogram_quantile(0.95" in exprs
    assert re.search(r"rate\(cachewatch_compile_seconds_sum", exprs)


def test_dashboard_uses_only_service_metrics(dashboard):
    for where, expr in _panel_exprs(dashboard):
        unknown = metric_names(expr) - SERVICE_METRICS
        assert not unknown, f"{where} queries metrics the service does not expose: {unknown}"


def test_dashboard_expressions_parse(ops_tools, dashboard, tmp_path):
    """promtool has no bare expression parser, so each query becomes a recording rule."""
    exprs = _panel_exprs(dashboard)
    assert exprs
    rules = [
        {"record": f"cachewatch_dashboard:query_{i}", "expr": grafana_to_promql(expr)}
        for i, (_, expr) in enumerate(exprs)
    ]
    path = tmp_path / "dashboard_rules.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    proc = promtool(ops_tools, "check", "rules", str(path))
    assert f"SUCCESS: {len(rules)} rules found" in proc.stdout, proc.stdout


def test_alert_thresholds_are_drawn_on_the_dashboard(alert_rules, dashboard):
    storm_expr = " ".join(alert_rules["CachewatchRecompileStorm"]["expr"].split())
    storm_match = re.search(r"\[(\w+)\]\)\)\s*>=\s*([\d.]+)", storm_expr)
    assert storm_match, storm_expr
    window, threshold = storm_match.groups()
    share_expr = " ".join(alert_rules["CachewatchCompileShareHigh"]["expr"].split())
    share_match = re.search(r"cachewatch_compile_share_ratio\)?\s*>\s*([\d.]+)", share_expr)
    assert share_match, share_expr
    (share,) = share_match.groups()

    def drawn(panel: dict) -> bool:
        style = panel["fieldConfig"]["defaults"].get("custom", {}).get("thresholdsStyle", {})
        return style.get("mode", "off") != "off"

    timeseries = [p for p in _panels(dashboard["panels"]) if p["type"] == "timeseries"]

    storm_panels = [
        p
        for p in timeseries
        if any(
            "cachewatch_compiles_total" in t["expr"]
            and f"[{window}]" in t["expr"]
            and 'cause!="first_call"' in t["expr"]
            for t in p["targets"]
        )
    ]
    assert storm_panels, f"no panel shows recompiles per {window}"
    assert any(float(threshold) in _threshold_values(p) and drawn(p) for p in storm_panels), (
        f"storm threshold {threshold} per {window} is not drawn"
    )

    share_panels = [p for p in timeseries if any("cachewatch_compile_share_ratio" in t["expr"] for t in p["targets"])]
    assert share_panels
    assert any(float(share) in _threshold_values(p) and drawn(p) for p in share_panels), (
        f"compile share threshold {share} is not drawn"
    )
    assert float(threshold) == STORM_THRESHOLD
    assert window == STORM_WINDOW
    assert float(share) == SHARE_THRESHOLD


# --- Grafana-managed alerts and the dashboard, through grafana-foundation-sdk ---------

GRAFANA_ALERTING = GRAFANA / "provisioning" / "alerting"


def _grafana_alerting_module():
    import importlib.util

    spec = importlib.util.spec_from_file_location("cachewatch_grafana_alerting", GRAFANA / "alerting.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_grafana_alerting_files_are_what_the_sdk_builds():
    built = _grafana_alerting_module().documents()
    on_disk = {p.name: p.read_text() for p in GRAFANA_ALERTING.glob("*.yaml")}
    assert on_disk == built, "deploy/grafana/provisioning/alerting is stale: run python deploy/grafana/alerting.py"


def test_grafana_alerts_use_the_prometheus_thresholds(alert_rules):
    from grafana_foundation_sdk.cog.plugins import register_default_plugins
    from grafana_foundation_sdk.models import alerting as models
    from grafana_foundation_sdk.models import expr as exprmodels
    from grafana_foundation_sdk.models import prometheus as prommodels

    register_default_plugins()  # so query models read back as their own types
    groups = _load_yaml(GRAFANA_ALERTING / "rules.yaml")["groups"]
    assert [g["folder"] for g in groups] == ["cachewatch"]
    mirrored = {}
    for raw in groups[0]["rules"]:
        rule = models.Rule.from_json(raw)  # the SDK reads every rule back
        queries = {q.ref_id: q for q in rule.data}
        assert rule.condition == "C", rule.title
        assert set(queries) == {"A", "B", "C"}, rule.title
        promql = queries["A"].model
        assert isinstance(promql, prommodels.Dataquery), rule.title
        assert promql.instant, rule.title
        assert queries["A"].datasource_uid == "cachewatch-prometheus"
        reduce, threshold = queries["B"].model, queries["C"].model
        assert isinstance(reduce, exprmodels.TypeReduce)
        assert reduce.expression == "A"
        assert isinstance(threshold, exprmodels.TypeThreshold)
        assert threshold.expression == "B"
        (condition,) = threshold.conditions
        assert (condition.evaluator.type_val, condition.evaluator.params) == ("gt", [0])
        source = next(
            name for name, r in alert_rules.items() if " ".join(r["expr"].split()) == " ".join(promql.expr.split())
        )
        assert rule.for_val == alert_rules[source].get("for", "0m"), rule.title
        assert rule.labels is not None, rule.title
        assert rule.annotations is not None, rule.title
        assert rule.labels["severity"] == alert_rules[source]["labels"]["severity"]
        assert rule.no_data_state == "OK"
        assert rule.uid
        assert "$externalLabels" not in " ".join(rule.annotations.values())
        assert "$value |" not in " ".join(rule.annotations.values())  # Grafana's $value is text
        mirrored[rule.title] = source
    assert set(mirrored.values()) == {
        "CachewatchRecompileStorm",
        "CachewatchStormActive",
        "CachewatchCompileShareHigh",
        "CachewatchRankDivergence",
    }
    assert len(mirrored) == 4


def test_grafana_contact_point_is_left_to_the_operator(compose_config):
    from grafana_foundation_sdk.models import alerting as models

    (point,) = _load_yaml(GRAFANA_ALERTING / "contact-points.yaml")["contactPoints"]
    (receiver,) = point["receivers"]
    parsed = models.ContactPoint.from_json({"name": point["name"], **receiver})
    assert parsed.type_val == "email"
    assert parsed.settings == {"addresses": "$CACHEWATCH_ALERT_EMAIL"}
    (policy,) = _load_yaml(GRAFANA_ALERTING / "policies.yaml")["policies"]
    assert models.NotificationPolicy.from_json(policy).receiver == point["name"]
    grafana_env = compose_config["services"]["grafana"]["environment"]
    assert "CACHEWATCH_ALERT_EMAIL" in grafana_env


def test_dashboard_reads_back_through_the_sdk(dashboard):
    from grafana_foundation_sdk.cog.plugins import register_default_plugins
    from grafana_foundation_sdk.models import dashboard as models
    from grafana_foundation_sdk.models import prometheus as prommodels

    register_default_plugins()
    parsed = models.Dashboard.from_json(dashboard)
    assert parsed.uid == "cachewatch"
    assert parsed.title == dashboard["title"]
    assert parsed.panels is not None
    assert parsed.templating.list_val is not None
    panels = [p for p in parsed.panels if isinstance(p, models.Panel)]
    assert len(panels) == len(dashboard["panels"])
    for panel, raw in zip(panels, dashboard["panels"], strict=False):
        assert (panel.type_val, panel.title, panel.id_val) == (raw["type"], raw["title"], raw["id"])
        assert panel.targets is not None, raw["title"]
        # a target that is no Prometheus query is left out here, and the lists then differ
        queries = [t.expr for t in panel.targets if isinstance(t, prommodels.Dataquery)]
        assert queries == [t["expr"] for t in raw["targets"]], raw["title"]
        assert panel.grid_pos is not None
        assert panel.grid_pos.w > 0
        assert panel.grid_pos.h > 0
    assert {v.name for v in parsed.templating.list_val} >= {"datasource", "function"}


# --- Docker -------------------------------------------------------------------------


def test_compose_file_is_valid_and_wires_the_stack(compose_config):
    services = compose_config["services"]
    assert set(services) == SERVICES

    postgres = services["postgres"]
    assert postgres["image"].startswith("postgres:16")
    test = postgres["healthcheck"]["test"]
    assert "pg_isready" in (" ".join(test) if isinstance(test, list) else test)
    assert "/var/lib/postgresql/data" in _volume_targets(postgres)

    store = "postgresql+psycopg://cachewatch:cachewatch@postgres:5432/cachewatch"
    migrate = services["migrate"]
    assert migrate["build"]["context"] == str(ROOT)
    assert migrate["command"] in (["cachewatch", "db", "upgrade"], "cachewatch db upgrade")
    assert migrate["environment"]["CACHEWATCH_STORE"] == store
    assert migrate["depends_on"]["postgres"]["condition"] == "service_healthy"

    app = services["cachewatch"]
    assert app["image"] == migrate["image"], "migrate must run the service's own image"
    assert app["environment"]["CACHEWATCH_STORE"] == store
    for token in ("CACHEWATCH_WRITE_TOKEN", "CACHEWATCH_READ_TOKEN"):
        assert app["environment"][token] == "", token
    assert app["depends_on"]["migrate"]["condition"] == "service_completed_successfully"

    assert services["prometheus"]["image"].startswith("prom/prometheus")
    assert services["grafana"]["image"].startswith("grafana/grafana")
    grafana_env = services["grafana"]["environment"]
    assert grafana_env["GF_AUTH_ANONYMOUS_ENABLED"] == "true"
    assert grafana_env["GF_AUTH_ANONYMOUS_ORG_ROLE"] == "Viewer"

    published = {
        name: {(int(p["published"]), int(p["target"])) for p in svc.get("ports", [])} for name, svc in services.items()
    }
    assert published["cachewatch"] == {(8000, 8000)}
    assert published["prometheus"] == {(9090, 9090)}
    assert published["grafana"] == {(3000, 3000)}


def test_compose_file_follows_the_compose_specification(compose_config):
    """`docker compose` (v2) reads the Compose Specification and reports a top-level
    version key as obsolete. Without that key docker-compose 1.29 validates the file
    against the same specification schema, and the startup order must survive it."""
    assert not re.search(r"^version:", COMPOSE.read_text(), re.M)
    services = compose_config["services"]
    assert services["migrate"]["depends_on"] == {"postgres": {"condition": "service_healthy"}}
    assert services["cachewatch"]["depends_on"] == {"migrate": {"condition": "service_completed_successfully"}}


def test_compose_mounts_the_prometheus_config(compose_config):
    prom = compose_config["services"]["prometheus"]
    mounts = _bind_mounts(prom)
    config_flag = next(a for a in prom["command"] if a.startswith("--config.file="))
    config_path = Path(config_flag.split("=", 1)[1])
    assert mounts.get(str(config_path.parent)) == PROM_DIR, mounts
    assert (PROM_DIR / config_path.name).is_file()


def test_dockerfile(compose_config):
    instructions = _dockerfile_instructions()
    by_kind: dict[str, list[str]] = {}
    for kind, args in instructions:
        by_kind.setdefault(kind, []).append(args)

    for base in by_kind["FROM"]:
        assert base.split()[0] == "python:3.11-slim", base
    installs = [a for a in by_kind["RUN"] if "pip install" in a]
    assert installs, installs
    assert all("--no-cache-dir" in a for a in installs), installs
    assert any("[server]" in a for a in installs), "the image must install the service's extra"

    # The last USER is the one the container runs as.
    user = by_kind["USER"][-1].split(":")[0]
    assert user == "cachewatch"
    assert any("useradd" in a and "cachewatch" in a for a in by_kind["RUN"])

    envs = " ".join(by_kind["ENV"])
    assert re.search(r"\bCACHEWATCH_STORE=\S+", envs), envs

    (healthcheck,) = by_kind["HEALTHCHECK"]
    assert "curl" not in healthcheck
    assert "python" in healthcheck
    cmd = healthcheck.split(" CMD ", 1)[1]
    assert "http://127.0.0.1:8000/healthz" in cmd

    (cmd_args,) = by_kind["CMD"]
    argv = _exec_form(cmd_args)
    opts = _serve_args(argv)
    assert opts["host"] == "0.0.0.0"
    port = int(opts["port"])
    assert str(port) in " ".join(by_kind["EXPOSE"]).split()
    assert f"127.0.0.1:{port}/healthz" in healthcheck

    # The service in compose listens where the image says, and publishes that port.
    app = compose_config["services"]["cachewatch"]
    if "command" in app:
        assert app["command"] == argv
    assert port in {int(p["target"]) for p in app["ports"]}


def test_ensure_ops_tools_is_idempotent(ops_tools):
    proc = _run(["bash", str(ENSURE_TOOLS)])
    _assert_ok(proc)
    assert "already present" in proc.stdout, proc.stdout
