"""The shipped alert rules (deploy/prometheus/alerts.yml) load, and fire as docs/operations.md says.

`promtool check rules` reads them as Prometheus would (and `promtool check config` the shipped
prometheus.yml that loads them); `promtool test rules` feeds each alert the
series of its failure and of health (deploy/prometheus/alerts_test.yml) and compares what fires,
when, with which labels and summary. promtool comes with Debian's `prometheus` package
(scripts/ensure-prometheus): without it these tests skip loudly, and fail under CI=true.
The metric names the rules read are checked against the app's own families, so renaming one in
orders/web/metrics.py without the rules fails here.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from orders.web import metrics

from .databases import unavailable

RULES = Path(__file__).resolve().parent.parent / "deploy" / "prometheus"


@pytest.fixture(scope="module")
def promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        unavailable("promtool", "install Debian's 'prometheus' package (scripts/ensure-prometheus)")
    return found


def run(promtool: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([promtool, *args], cwd=RULES, capture_output=True, text=True, timeout=60)


def test_the_rules_load(promtool: str) -> None:
    done = run(promtool, "check", "rules", "alerts.yml")
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_shipped_configuration_loads_the_rules(promtool: str) -> None:
    """prometheus.yml, as the cluster recipes run it (devtools/prometheus.py) and operators copy it;
    its target files are the operator's (promtool warns that they are missing, and passes)."""
    done = run(promtool, "check", "config", "prometheus.yml")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 rule files found" in done.stdout, done.stdout


def test_each_alert_fires_on_its_failure_and_stays_silent_in_health(promtool: str) -> None:
    done = run(promtool, "test", "rules", "alerts_test.yml")
    assert done.returncode == 0, done.stdout + done.stderr


def test_every_alert_is_tested_and_documented() -> None:
    alerts = {
        rule["alert"]
        for group in yaml.safe_load((RULES / "alerts.yml").read_text())["groups"]
        for rule in group["rules"]
    }
    tests = yaml.safe_load((RULES / "alerts_test.yml").read_text())["tests"]
    tested = {case["alertname"] for test in tests for case in test["alert_rule_test"]}
    assert alerts == tested
    operations = (RULES.parent.parent / "docs" / "operations.md").read_text()
    assert not [name for name in alerts if f"`{name}`" not in operations]


def test_the_rules_read_the_apps_own_metric_names() -> None:
    text = (RULES / "alerts.yml").read_text()
    read = {
        name.removesuffix("_bucket").removesuffix("_count") for name in re.findall(r"\borders_[a-z_]+", text)
    }
    # What /metrics shows for each family: a counter's samples end in _total.
    exposed = {
        f"{m._name}_total" if m._type == "counter" else m._name
        for m in vars(metrics).values()
        if isinstance(m, metrics.Counter | metrics.Gauge | metrics.Histogram)
    }
    assert read and read <= exposed, f"the rules read metrics the app does not have: {read - exposed}"
