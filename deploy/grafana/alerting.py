"""Grafana-managed alert rules for cachewatch, built with grafana-foundation-sdk.

    python deploy/grafana/alerting.py    # rewrites provisioning/alerting/*.yaml

Each rule evaluates the same PromQL condition as the Prometheus rule of the same name in
deploy/prometheus/alerts.yml (query A, the series that breach the threshold), keeps the
last value (B) and fires while it is above zero (C), for as long as the Prometheus rule
waits. So Grafana and Prometheus alert on the same thresholds, and the tests hold them
to it. The contact point's address is left for the operator: set CACHEWATCH_ALERT_EMAIL
in Grafana's environment (docker-compose.yml passes it through).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import yaml
from grafana_foundation_sdk.builders import alerting, expr, prometheus
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models.dashboard import DataSourceRef

HERE = Path(__file__).resolve().parent
ALERTS = HERE.parent / "prometheus" / "alerts.yml"
OUT = HERE / "provisioning" / "alerting"
DATASOURCE_UID = "cachewatch-prometheus"  # provisioning/datasources/prometheus.yml
FOLDER = "cachewatch"
GROUP = "cachewatch"
CONTACT_POINT = "cachewatch-oncall"
EXPRESSIONS = "__expr__"  # Grafana's server-side expressions (reduce, threshold)
_EXPRESSIONS_REF = DataSourceRef(type_val=EXPRESSIONS, uid=EXPRESSIONS)

# Grafana rule title -> the Prometheus rule it mirrors, and the annotation link's path.
RULES: dict[str, str] = {
    "Recompile rate": "CachewatchRecompileStorm",
    "Active recompilation storm": "CachewatchStormActive",
    "Compile share high": "CachewatchCompileShareHigh",
    "Rank divergence": "CachewatchRankDivergence",
}


def prometheus_rules() -> dict[str, dict[str, Any]]:
    doc = yaml.safe_load(ALERTS.read_text())
    return {rule["alert"]: rule for group in doc["groups"] for rule in group["rules"] if "alert" in rule}


# Prometheus' template words and Grafana's: Grafana's $value is every query's value as
# text, the condition's number is $values.B.Value; it has no $externalLabels, so links
# go to the dashboard's default address (change it here with the rest of the file).
_TEMPLATE_WORDS = {
    '{{ $value | printf "%.0f" }}': '{{ printf "%.0f" $values.B.Value }}',
    "{{ $value | humanizePercentage }}": "{{ humanizePercentage $values.B.Value }}",
    "{{ $externalLabels.cachewatch_url }}": "http://localhost:8000",
}


def _grafana_template(text: str) -> str:
    for prometheus_word, grafana_word in _TEMPLATE_WORDS.items():
        text = text.replace(prometheus_word, grafana_word)
    return text


def build_rule(title: str, source: dict[str, Any]) -> alerting.Rule:
    condition = " ".join(source["expr"].split())
    query = (
        alerting.Query("A")
        .datasource_uid(DATASOURCE_UID)
        .relative_time_range({"from": 600, "to": 0})
        .model(
            prometheus.Dataquery()
            .expr(condition)
            .instant()
            .ref_id("A")
            .datasource(DataSourceRef(type_val="prometheus", uid=DATASOURCE_UID))
        )
    )
    last = (
        alerting.Query("B")
        .datasource_uid(EXPRESSIONS)
        .model(expr.TypeReduce().ref_id("B").expression("A").reducer("last").datasource(_EXPRESSIONS_REF))
    )
    above_zero = (
        alerting.Query("C")
        .datasource_uid(EXPRESSIONS)
        .model(
            expr.TypeThreshold()
            .ref_id("C")
            .expression("B")
            .datasource(_EXPRESSIONS_REF)
            .conditions(
                [
                    expr.ExprTypeThresholdConditions().evaluator(
                        expr.ExprTypeThresholdConditionsEvaluator().type("gt").params([0])
                    )
                ]
            )
        )
    )
    annotations = {key: _grafana_template(value.strip()) for key, value in source["annotations"].items()}
    return (
        alerting.Rule(title)
        .uid("cw-" + source["alert"].removeprefix("Cachewatch").lower())
        .queries([query, last, above_zero])
        .condition("C")
        .for_val(source.get("for", "0m"))
        .labels({**source.get("labels", {}), "service": "cachewatch"})
        .annotations(annotations)
        # A condition that selects no series means nothing breaches: not an alert.
        .no_data_state("OK")
        .exec_err_state("Error")
    )


def _plain(built: Any) -> Any:
    return json.loads(json.dumps(built, cls=JSONEncoder))


def rule_group() -> dict[str, Any]:
    """The rule group as Grafana's file provisioning reads it."""
    sources = prometheus_rules()
    group = alerting.RuleGroup(GROUP).interval(60)
    for title, name in RULES.items():
        group = group.with_rule(build_rule(title, sources[name]))
    built = _plain(group.build())
    rules = []
    for rule in built["rules"]:
        # The API's per-rule folder, group and org are the group's in a provisioning file.
        rules.append({k: v for k, v in rule.items() if k not in ("folderUID", "ruleGroup", "orgID")})
    return {"orgId": 1, "name": built["title"], "folder": FOLDER, "interval": "1m", "rules": rules}


def contact_point() -> dict[str, Any]:
    built = _plain(
        alerting.ContactPoint()
        .name(CONTACT_POINT)
        .uid(CONTACT_POINT)
        .type("email")
        .settings({"addresses": "$CACHEWATCH_ALERT_EMAIL"})
        .build()
    )
    receiver = {k: v for k, v in built.items() if k in ("uid", "type", "settings", "disableResolveMessage")}
    return {"orgId": 1, "name": built["name"], "receivers": [receiver]}


def policy() -> dict[str, Any]:
    built = _plain(
        alerting.NotificationPolicy().receiver(CONTACT_POINT).group_by(["alertname", "function", "job"]).build()
    )
    return {"orgId": 1, **built}


HEADER = "# Generated by deploy/grafana/alerting.py with grafana-foundation-sdk; edit that file and run it.\n# {what}\n"


def documents() -> dict[str, str]:
    """File name -> YAML text of the provisioning files."""
    dump = lambda doc: yaml.safe_dump(doc, sort_keys=False, width=120)  # noqa: E731
    return {
        "rules.yaml": HEADER.format(what="The same conditions and durations as deploy/prometheus/alerts.yml.")
        + dump({"apiVersion": 1, "groups": [rule_group()]}),
        "contact-points.yaml": HEADER.format(
            what="Set CACHEWATCH_ALERT_EMAIL in Grafana's environment (or change the type) to be notified."
        )
        + dump({"apiVersion": 1, "contactPoints": [contact_point()]}),
        "policies.yaml": HEADER.format(
            what="Routes every alert of this Grafana to the cachewatch contact point; leave this file out "
            "when provisioning into a Grafana that has its own policies."
        )
        + dump({"apiVersion": 1, "policies": [policy()]}),
    }


def main() -> int:
    OUT.mkdir(parents=True, exist_ok=True)
    for name, text in documents().items():
        (OUT / name).write_text(text)
        print(f"wrote {OUT / name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
