"""The Grafana dashboards in grafana/: every panel query names metrics the gateway exports, and
returns numbers (not no series, not only NaN) from a real Prometheus that scraped a gateway
after real MCP traffic.

The end-to-end test needs the `prometheus` binary (`bash .ci/prometheus.sh` installs Debian's
package): without it the test is skipped locally, and fails when the CI variable is set.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
import os
import re
import shutil
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml
from mcp import types
from mcp.shared.context import RequestContext
from mcp.shared.exceptions import McpError

from .conftest import DEMO, ROOT, StartGateway, free_port, mcp_client
from .helpers import INIT, client_as, headers

GRAFANA = ROOT / "grafana"
DASHBOARDS = sorted((GRAFANA / "dashboards").glob("*.json"))
METRIC_NAME = re.compile(r"\bmcp_gateway_\w+")
ROUTE_VARIABLE = "label_values(mcp_gateway_requests_total, route)"
#: The upstreams board's second variable: the upstreams (members) of the routes chosen.
UPSTREAM_VARIABLE = 'label_values(mcp_gateway_upstream_up{route=~"$route"}, upstream)'
LABEL_VALUES = re.compile(r"label_values\((?P<match>.+), (?P<label>\w+)\)")
JOB = "mcp-task-gateway"
KEY = "dashboards-key-0123456789"
#: What Grafana would put in place of the variables: every configured route (and upstream: a
#: route of one upstream is named by the route), a 1m window.
SUBSTITUTIONS = {
    "$__rate_interval": "1m",
    "$__interval": "1m",
    "$route": "demo|keys",
    "$upstream": "demo|keys",
}


@dataclass(frozen=True)
class PanelQuery:
    dashboard: str
    panel: str
    expr: str

    def promql(self) -> str:
        return substituted(self.expr)

    def __str__(self) -> str:
        return f"{self.dashboard} / {self.panel}: {self.promql()}"


def substituted(expr: str) -> str:
    for variable, value in SUBSTITUTIONS.items():
        expr = expr.replace(variable, value)
    return expr


def load(path: Path) -> dict[str, Any]:
    board: dict[str, Any] = json.loads(path.read_text())
    return board


def panels(items: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    """Every panel, including those inside collapsed rows."""
    for panel in items:
        yield panel
        yield from panels(panel.get("panels", []))


def panel_queries() -> list[PanelQuery]:
    return [
        PanelQuery(board["title"], panel["title"], target["expr"])
        for board in map(load, DASHBOARDS)
        for panel in panels(board["panels"])
        for target in panel.get("targets", [])
    ]


def exported_names(exposition: str) -> set[str]:
    """The sample names a scrape can hold, from the `# TYPE` line of every family (a family
    without samples yet still has one)."""
    names: set[str] = set()
    for line in exposition.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ", 3)
            if kind == "histogram":
                names |= {f"{name}_bucket", f"{name}_sum", f"{name}_count"}
            elif kind == "counter":
                names.add(name if name.endswith("_total") else f"{name}_total")
            else:
                names.add(name)
    return names


def test_dashboards_have_stable_uids_a_route_variable_and_the_provisioned_datasource() -> None:
    datasources = yaml.safe_load((GRAFANA / "provisioning/datasources/prometheus.yaml").read_text())
    (datasource,) = datasources["datasources"]
    providers = yaml.safe_load((GRAFANA / "provisioning/dashboards/dashboards.yaml").read_text())
    assert providers["providers"][0]["options"]["path"] == "/var/lib/grafana/dashboards"
    boards = [load(path) for path in DASHBOARDS]
    assert [path.stem for path in DASHBOARDS] == ["overview", "security", "tasks", "upstreams"]
    assert len({b["uid"] for b in boards}) == len({b["title"] for b in boards}) == 4
    for board in boards:
        route, *more = board["templating"]["list"]
        assert route["name"] == "route" and route["definition"] == ROUTE_VARIABLE
        assert [v["name"] for v in more] == (["upstream"] if board is boards[-1] else [])
        for variable in (route, *more):
            assert variable["multi"] and variable["includeAll"], variable["name"]
            assert variable["datasource"]["uid"] == datasource["uid"], variable["name"]
        assert board["schemaVersion"] >= 36
        for panel in panels(board["panels"]):
            if panel["type"] != "row":
                assert panel["datasource"]["uid"] == datasource["uid"], panel["title"]
                assert panel["targets"], panel["title"]


def test_the_upstreams_board_filters_by_upstream_and_shows_each_ones_up() -> None:
    board = load(GRAFANA / "dashboards/upstreams.json")
    (upstream,) = board["templating"]["list"][1:]
    assert upstream["definition"] == upstream["query"]["query"] == UPSTREAM_VARIABLE
    assert upstream["allValue"] == ".*" and upstream["refresh"] == 2
    up = [
        (panel, target["expr"])
        for panel in panels(board["panels"])
        for target in panel.get("targets", [])
        if "mcp_gateway_upstream_up" in target["expr"]
    ]
    assert len(up) == 1
    panel, expr = up[0]
    assert "by (route, upstream)" in expr
    assert 'route=~"$route"' in expr and 'upstream=~"$upstream"' in expr
    assert panel["targets"][0]["legendFormat"] == "{{route}} / {{upstream}}"
    # The panel every upstream's state is read from comes first.
    assert panel["gridPos"]["y"] == 1 and panel["gridPos"]["w"] == 24


async def test_every_metric_a_dashboard_queries_is_exported_by_the_gateway(
    start_gateway: StartGateway,
) -> None:
    base = await start_gateway()
    async with asyncio.timeout(10), aiohttp.ClientSession() as http:
        async with http.get(f"{base}/metrics") as response:
            assert response.status == 200
            exported = exported_names(await response.text())
    exprs = [q.expr for q in panel_queries()] + [ROUTE_VARIABLE, UPSTREAM_VARIABLE]
    used = {name for expr in exprs for name in METRIC_NAME.findall(expr)}
    assert used and sorted(used - exported) == []


@pytest.mark.timeout(60)
@pytest.mark.slow
async def test_every_panel_query_returns_values_from_prometheus_after_real_traffic(
    start_gateway: StartGateway, tmp_path: Path
) -> None:
    binary = shutil.which("prometheus")
    if binary is None:
        if os.environ.get("CI"):
            pytest.fail("prometheus is not on PATH; CI must run `bash .ci/prometheus.sh` first")
        pytest.skip("prometheus is not on PATH (`bash .ci/prometheus.sh` installs it)")
    base = await start_gateway(
        [
            {"name": "demo", "upstream": DEMO},
            {"name": "keys", "upstream": DEMO, "auth": api_keys()},
        ]
    )
    async with prometheus(binary, base, tmp_path) as api, aiohttp.ClientSession() as http:
        # Two rounds with a scrape before each: every series then has a sample before an
        # increase, so rates are positive and quantiles are numbers, not NaN.
        for _ in range(2):
            await wait_for_scrapes(http, api, 1)
            async with asyncio.timeout(20):
                await workload(base)
        await wait_for_scrapes(http, api, 2)
        empty = [str(q) for q in panel_queries() if not numbers(await query(http, api, q.promql()))]
        routes = await label_values(http, api, ROUTE_VARIABLE)
        upstreams = await label_values(http, api, UPSTREAM_VARIABLE)
    assert not empty, "panel queries without series (or only NaN):\n" + "\n".join(empty)
    assert {"demo", "keys"} <= set(routes)
    assert sorted(upstreams) == ["demo", "keys"]  # a route of one upstream names it by itself


async def label_values(http: aiohttp.ClientSession, api: str, definition: str) -> list[str]:
    """What Grafana offers for a `label_values(SELECTOR, LABEL)` variable (the route chosen
    as in `SUBSTITUTIONS`): Prometheus's values of LABEL among the series SELECTOR matches."""
    parsed = LABEL_VALUES.fullmatch(definition)
    assert parsed is not None, definition
    url = f"{api}/api/v1/label/{parsed['label']}/values"
    async with http.get(url, params={"match[]": substituted(parsed["match"])}) as response:
        body = await response.json()
    assert body["status"] == "success", f"{definition}: {body}"
    values: list[str] = body["data"]
    return values


def numbers(result: list[dict[str, Any]]) -> list[float]:
    """The values of an instant vector that a panel would draw (NaN draws nothing)."""
    values = [float(series["value"][1]) for series in result]
    return [value for value in values if not math.isnan(value)]


def api_keys() -> dict[str, Any]:
    digest = hashlib.sha256(KEY.encode()).hexdigest()
    return {"mode": "api_keys", "api_keys": [{"principal": "alice", "sha256": digest}]}


async def answer(
    context: RequestContext[Any, Any], params: types.ElicitRequestParams
) -> types.ElicitResult:
    return types.ElicitResult(action="accept", content={"name": "Grafana"})


async def workload(base: str) -> None:
    """Plain calls, tasks that complete, fail and get cancelled, an input_required task, calls
    with an API key and one refused key: something for every panel."""
    async with mcp_client(f"{base}/demo/mcp", elicitation_callback=answer) as demo:
        await demo.list_tools()
        for n in range(5):
            await demo.call_tool("echo", {"text": str(n)})
        assert (await demo.call_tool("fail", {})).isError
        with pytest.raises(McpError):
            await demo.call_tool("error", {})
        for tool, arguments in [("echo", {"text": "task"}), ("fail", {}), ("ask", {})]:
            created = await demo.experimental.call_tool_as_task(tool, arguments)
            await demo.experimental.get_task_result(created.task.taskId, types.CallToolResult)
        created = await demo.experimental.call_tool_as_task("error", {})
        with pytest.raises(McpError):
            await demo.experimental.get_task_result(created.task.taskId, types.CallToolResult)
        slow = await demo.experimental.call_tool_as_task("slow", {"seconds": 30, "steps": 1})
        await demo.experimental.cancel_task(slow.task.taskId)
    async with client_as(f"{base}/keys/mcp", KEY) as keys:
        await keys.list_tools()
        await keys.call_tool("echo", {"text": "with a key"})
        created = await keys.experimental.call_tool_as_task("echo", {"text": "task with a key"})
        await keys.experimental.get_task_result(created.task.taskId, types.CallToolResult)
    async with aiohttp.ClientSession() as http:
        wrong = headers(Authorization="Bearer not-the-key")
        async with http.post(f"{base}/keys/mcp", json=INIT, headers=wrong) as refused:
            assert refused.status == 401


@asynccontextmanager
async def prometheus(
    binary: str, gateway: str, tmp_path: Path, rules: Path | None = None
) -> AsyncIterator[str]:
    """A Prometheus scraping the gateway every second (and evaluating `rules` as often);
    yields its base URL once it is ready."""
    config = tmp_path / "prometheus.yml"
    target = gateway.removeprefix("http://")
    scrape = {
        "job_name": JOB,
        "metrics_path": "/metrics",
        "static_configs": [{"targets": [target]}],
    }
    settings: dict[str, Any] = {
        "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"}
    }
    if rules is not None:
        settings["rule_files"] = [str(rules)]
    config.write_text(yaml.safe_dump({**settings, "scrape_configs": [scrape]}))
    listen = f"127.0.0.1:{free_port()}"
    process = await asyncio.create_subprocess_exec(
        binary,
        f"--config.file={config}",
        f"--storage.tsdb.path={tmp_path / 'tsdb'}",
        f"--web.listen-address={listen}",
        "--log.level=warn",
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,  # a few lines at level warn: the pipe never fills
    )
    try:
        await wait_until_ready(f"http://{listen}", process)
        yield f"http://{listen}"
    finally:
        if process.returncode is None:
            process.terminate()
        async with asyncio.timeout(10):
            await process.communicate()


async def wait_until_ready(api: str, process: asyncio.subprocess.Process) -> None:
    async with asyncio.timeout(15), aiohttp.ClientSession() as http:
        while process.returncode is None:
            try:
                async with http.get(f"{api}/-/ready") as response:
                    if response.status == 200:
                        return
            except aiohttp.ClientConnectionError:
                pass
            await asyncio.sleep(0.1)  # bounded polling of Prometheus's own API
    _, log = await process.communicate()
    raise RuntimeError(f"prometheus exited with {process.returncode}: {log.decode()}")


async def query(http: aiohttp.ClientSession, api: str, promql: str) -> list[dict[str, Any]]:
    """An instant query's result vector; a query Prometheus refuses fails the test."""
    async with http.get(f"{api}/api/v1/query", params={"query": promql}) as response:
        body = await response.json()
    assert body["status"] == "success", f"{promql}: {body}"
    result: list[dict[str, Any]] = body["data"]["result"]
    return result


async def wait_for_scrapes(http: aiohttp.ClientSession, api: str, count: int) -> None:
    """Until Prometheus saw no task active any more, then `count` more scrapes: the series made
    before then have a sample (two, for rate()) with everything done so far."""
    up = f'up{{job="{JOB}"}} == 1'
    active = f'sum(mcp_gateway_tasks_active{{job="{JOB}"}}) > 0'
    last_scrape = f'timestamp(up{{job="{JOB}"}})'

    async def settled() -> bool:
        return bool(await query(http, api, up)) and not await query(http, api, active)

    async def scraped_since(moment: float) -> bool:
        # Scrapes start exactly a second apart: the last one at or after moment + count - 1
        # means `count` of them started after `moment`.
        return float((await query(http, api, last_scrape))[0]["value"][1]) >= moment + count - 1

    try:
        async with asyncio.timeout(10):
            await poll(settled)
            now = time.time()
            await poll(lambda: scraped_since(now))
    except TimeoutError:
        async with http.get(f"{api}/api/v1/targets") as response:
            targets = (await response.json())["data"]["activeTargets"]
        pytest.fail(f"Prometheus did not get good scrapes of the gateway: {targets}")


async def poll(check: Callable[[], Awaitable[bool]]) -> None:
    """Asks Prometheus again until `check` holds; callers bound the wait."""
    while not await check():  # noqa: ASYNC110 - Prometheus's API has no event to wait on
        await asyncio.sleep(0.2)
