"""The alert rules in grafana/alerts.yml: they pass promtool, name only metrics the gateway
exports, and evaluate on a real Prometheus scraping a gateway after real traffic, where the one
meant to catch it sees an upstream that cannot be reached.

Needs the `prometheus` and `promtool` binaries (`bash .ci/prometheus.sh` installs Debian's
package): without them the tests skip locally, and fail when the CI variable is set.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml

from .conftest import DEMO, StartGateway, free_port
from .helpers import INIT, headers
from .test_dashboards import (
    GRAFANA,
    JOB,
    api_keys,
    exported_names,
    poll,
    prometheus,
    wait_for_scrapes,
    workload,
)

RULES = GRAFANA / "alerts.yml"
METRIC_NAME = re.compile(r"\bmcp_gateway_\w+")


def binary(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        if os.environ.get("CI"):
            pytest.fail(f"{name} is not on PATH; CI must run `bash .ci/prometheus.sh` first")
        pytest.skip(f"{name} is not on PATH (`bash .ci/prometheus.sh` installs it)")
    return found


def rules() -> list[dict[str, Any]]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return [rule for group in groups for rule in group["rules"]]


def test_the_alert_rules_pass_promtool() -> None:
    checked = subprocess.run(
        [binary("promtool"), "check", "rules", str(RULES)], capture_output=True, text=True
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"SUCCESS: {len(rules())} rules found" in checked.stdout


async def test_every_metric_an_alert_names_is_exported(start_gateway: StartGateway) -> None:
    base = await start_gateway()
    async with aiohttp.ClientSession() as http, http.get(f"{base}/metrics") as response:
        exported = exported_names(await response.text())
    named = {name for rule in rules() for name in METRIC_NAME.findall(rule["expr"])}
    assert named and named <= exported, sorted(named - exported)


@pytest.mark.timeout(60)
async def test_every_alert_evaluates_and_an_unreachable_upstream_is_caught(
    start_gateway: StartGateway, tmp_path: Path
) -> None:
    dead = {"transport": "streamable_http", "url": f"http://127.0.0.1:{free_port()}/mcp"}
    base = await start_gateway(
        [
            {"name": "demo", "upstream": DEMO},
            {"name": "keys", "upstream": DEMO, "auth": api_keys()},
            {"name": "dead", "upstream": dead},
            {"name": "pair", "upstreams": [{"name": "live", **DEMO}, {"name": "gone", **dead}]},
        ]
    )
    async with (
        prometheus(binary("prometheus"), base, tmp_path, RULES) as api,
        aiohttp.ClientSession() as http,
    ):
        await wait_for_scrapes(http, api, 1)
        async with asyncio.timeout(20):
            await workload(base)
        async with http.post(f"{base}/dead/mcp", json=INIT, headers=headers()) as refused:
            assert refused.status == 200 and "error" in await refused.json()
        # The live member answers the handshake; the gone one is counted down.
        async with http.post(f"{base}/pair/mcp", json=INIT, headers=headers()) as opened:
            assert opened.status == 200 and "result" in await opened.json()
        await wait_for_scrapes(http, api, 2)

        async def evaluated() -> bool:
            groups = await rule_groups(http, api)
            return all(r.get("lastEvaluation", "").startswith("2") for r in groups)

        async with asyncio.timeout(10):
            await poll(evaluated)
            await poll(lambda: down_alerts_for(http, api, "dead"))
            await poll(lambda: down_alerts_for(http, api, "pair"))
        evaluated_rules = await rule_groups(http, api)
    assert {r["name"] for r in evaluated_rules} == {r["alert"] for r in rules()}
    broken = [(r["name"], r.get("lastError")) for r in evaluated_rules if r["health"] != "ok"]
    assert not broken, broken
    (down,) = [r for r in evaluated_rules if r["name"] == "McpGatewayUpstreamDown"]
    # Pending (its `for:` is minutes), for the dead route and the gone member only: the others
    # answered. The summary names the upstream: the member, or the route's own.
    summaries = {
        (a["labels"]["route"], a["labels"]["upstream"]): a["annotations"]["summary"]
        for a in down["alerts"]
    }
    assert summaries == {
        ("dead", "dead"): "Upstream dead of route dead cannot be reached",
        ("pair", "gone"): "Upstream gone of route pair cannot be reached",
    }
    assert all(a["labels"]["job"] == JOB for a in down["alerts"])


async def rule_groups(http: aiohttp.ClientSession, api: str) -> list[dict[str, Any]]:
    async with http.get(f"{api}/api/v1/rules") as response:
        body = await response.json()
    assert body["status"] == "success", body
    return [rule for group in body["data"]["groups"] for rule in group["rules"]]


async def down_alerts_for(http: aiohttp.ClientSession, api: str, route: str) -> bool:
    for rule in await rule_groups(http, api):
        if rule["name"] == "McpGatewayUpstreamDown":
            return any(alert["labels"].get("route") == route for alert in rule["alerts"])
    return False
