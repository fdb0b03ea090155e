"""A real Prometheus, with the shipped alert rules, scraping a real cachewatch service
that a real training script feeds: the storm alert goes pending, then fires."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
import yaml
from serverkit import free_port, serve_process

ROOT = Path(__file__).resolve().parent.parent
RULES = ROOT / "deploy" / "prometheus" / "alerts.yml"


def _get(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=5) as response:
        return json.loads(response.read())


def _wait_http(url: str, proc: subprocess.Popen, log: Path, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, log.read_text()
        try:
            urllib.request.urlopen(url, timeout=2).read()
            return
        except OSError:
            time.sleep(0.3)
    raise AssertionError(f"{url} did not answer within {timeout}s:\n{log.read_text()}")


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def _first_seen(prom: str, alertname: str, function: str) -> dict[str, float]:
    """Per state of the alert, the first evaluation that recorded it in that state
    (Prometheus's time stamps, from its ALERTS series)."""
    selector = f'ALERTS{{alertname="{alertname}",function="{function}"}}[1h]'
    result = _get(f"{prom}/api/v1/query?{urllib.parse.urlencode({'query': selector})}")["data"]["result"]
    return {series["metric"]["alertstate"]: min(float(t) for t, _ in series["values"]) for series in result}


@pytest.fixture(scope="module")
def prometheus_binary() -> str:
    if shutil.which("prometheus") is None:
        subprocess.run(["bash", str(ROOT / "scripts" / "ensure-ops-tools.sh")], check=True)
    path = shutil.which("prometheus")
    assert path, "the prometheus binary is needed (Debian package prometheus)"
    return path


def test_storm_alert_goes_pending_then_firing(tmp_path, prometheus_binary):
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    env.pop("CACHEWATCH_RAISE_INTERNAL_ERRORS", None)
    prometheus = None
    with contextlib.ExitStack() as stack:
        service = stack.enter_context(serve_process(f"sqlite:///{tmp_path / 'store.db'}", tmp_path, env))
        stack.callback(lambda: prometheus is not None and _stop(prometheus))
        target = service.removeprefix("http://")

        # The shipped rules, with only the `for:` durations shortened to fit a test.
        rules = yaml.safe_load(RULES.read_text())
        for group in rules["groups"]:
            for rule in group["rules"]:
                if "for" in rule:
                    rule["for"] = "3s"
        (tmp_path / "alerts.yml").write_text(yaml.safe_dump(rules))
        config = {
            "global": {
                "scrape_interval": "1s",
                "evaluation_interval": "1s",
                "external_labels": {"cachewatch_url": service},
            },
            "rule_files": [str(tmp_path / "alerts.yml")],
            "scrape_configs": [{"job_name": "cachewatch", "static_configs": [{"targets": [target]}]}],
        }
        (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
        prom_port = free_port()
        prom_log = tmp_path / "prometheus.log"
        prometheus = subprocess.Popen(
            [
                prometheus_binary,
                f"--config.file={tmp_path / 'prometheus.yml'}",
                f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{prom_port}",
            ],
            stdout=prom_log.open("w"),
            stderr=subprocess.STDOUT,
        )
        prom = f"http://127.0.0.1:{prom_port}"
        _wait_http(f"{prom}/-/ready", prometheus, prom_log)
        deadline = time.monotonic() + 30
        while not _get(f"{prom}/api/v1/query?query=up%7Bjob%3D%22cachewatch%22%7D%3D%3D1")["data"]["result"]:
            assert time.monotonic() < deadline, "Prometheus never scraped the service"
            time.sleep(0.5)

        # The storm, sent over HTTP while Prometheus watches the counters grow.
        training = subprocess.Popen(
            [sys.executable, str(ROOT / "examples" / "storm_demo.py"), "--steps", "16", "--pause", "0.4"],
            env={
                **env,
                "CACHEWATCH_STORE": service,
                "CACHEWATCH_FLUSH_INTERVAL": "0.2",
                "CACHEWATCH_SPOOL_DIR": str(tmp_path / "spool"),
            },
        )

        firing = None
        deadline = time.monotonic() + 120  # a bound on a stuck run, not a timing assumption
        while firing is None and time.monotonic() < deadline:
            for alert in _get(f"{prom}/api/v1/alerts")["data"]["alerts"]:
                if (
                    alert["labels"].get("alertname") == "CachewatchRecompileStorm"
                    and alert["labels"].get("function") == "train_step"
                    and alert["state"] == "firing"
                ):
                    firing = alert
            if firing is None:
                time.sleep(0.5)
        assert training.wait(120) == 0
        # Pending, then firing, as Prometheus recorded the alert at each evaluation (its
        # ALERTS series), not as this loop happened to see it: a pending spell of 3 s can
        # fall between two polls of a busy machine.
        seen = _first_seen(prom, "CachewatchRecompileStorm", "train_step")
        assert "pending" in seen, (seen, prom_log.read_text()[-2000:])
        assert "firing" in seen, (seen, prom_log.read_text()[-2000:])
        assert firing is not None
        assert seen["pending"] <= seen["firing"]
        assert firing["annotations"]["dashboard"] == f"{service}/functions?q=train_step"
        # The link leads to the function in the service's own dashboard.
        page = urllib.request.urlopen(firing["annotations"]["dashboard"], timeout=10).read().decode()
        assert "train_step" in page
