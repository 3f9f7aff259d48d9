"""The Dockerfile and docker-compose.yml, read as files: no container engine runs in CI.

Each test pins one promise the image makes (non-root, the shipped config, the store on a volume,
a health check that asks the gateway) against the code and config it promises it about, so an
edit to one side that the other does not follow fails here instead of in a user's container.
"""

from __future__ import annotations

import importlib
import json
import re
import shlex
import tomllib
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any

import aiohttp
import yaml

from gateway.config import Settings, load_settings

from .conftest import ROOT, StartGateway

SHIPPED_CONFIG = "/app/config/gateway.yaml"


@dataclass(frozen=True)
class Instruction:
    keyword: str
    args: str


def instructions() -> list[Instruction]:
    """The Dockerfile's instructions, comments dropped and continuation lines joined."""
    joined: list[str] = []
    pending = ""
    for raw in (ROOT / "Dockerfile").read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue  # Docker drops comment lines, also inside a continued instruction
        if line.endswith("\\"):
            pending += line[:-1].strip() + " "
            continue
        joined.append(pending + line)
        pending = ""
    assert not pending, "the Dockerfile ends inside a continued instruction"
    parsed = []
    for line in joined:
        keyword, _, args = line.partition(" ")
        parsed.append(Instruction(keyword.upper(), args.strip()))
    return parsed


def final_stage() -> list[Instruction]:
    steps = instructions()
    last_from = max(i for i, step in enumerate(steps) if step.keyword == "FROM")
    return steps[last_from:]


def only(stage: list[Instruction], keyword: str) -> Instruction:
    found = [step for step in stage if step.keyword == keyword]
    assert len(found) == 1, f"expected one {keyword} in the final stage, found {len(found)}"
    return found[0]


def exec_form(step: Instruction) -> list[str]:
    """ENTRYPOINT/CMD in exec form (a JSON array): shell form would hide signals from PID 1."""
    value = json.loads(step.args)
    assert isinstance(value, list) and all(isinstance(item, str) for item in value), step
    return value


def option(args: list[str], name: str) -> str:
    assert name in args, f"{name} missing from {args}"
    return args[args.index(name) + 1]


def shipped_settings() -> Settings:
    return load_settings(ROOT / "config" / "gateway.yaml")


def workdir() -> PurePosixPath:
    return PurePosixPath(only(final_stage(), "WORKDIR").args)


def volumes() -> list[PurePosixPath]:
    args = only(final_stage(), "VOLUME").args
    paths = json.loads(args) if args.startswith("[") else args.split()
    return [PurePosixPath(path) for path in paths]


def compose() -> dict[str, Any]:
    data = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    assert isinstance(data, dict)
    return data


def service(name: str) -> dict[str, Any]:
    services = compose()["services"]
    assert name in services, f"docker-compose.yml has no service {name!r}"
    value = services[name]
    assert isinstance(value, dict)
    return value


def mounts(name: str) -> dict[str, str]:
    """A service's short-syntax volumes: container path -> source (host path or volume name)."""
    result = {}
    for entry in service(name).get("volumes", []):
        source, target, *_mode = str(entry).split(":")
        result[target] = source
    return result


def container_ports(name: str) -> list[int]:
    return [int(str(entry).rsplit(":", 1)[-1]) for entry in service(name).get("ports", [])]


def published(name: str) -> dict[int, int]:
    """Container port -> host port, for "HOST:CONTAINER" entries."""
    result = {}
    for entry in service(name).get("ports", []):
        host, container = str(entry).rsplit(":", 1)
        result[int(container)] = int(host.rsplit(":", 1)[-1])
    return result


def test_dockerfile_builds_in_one_stage_and_runs_in_another() -> None:
    froms = [step for step in instructions() if step.keyword == "FROM"]
    assert len(froms) >= 2
    assert any("--from=" in step.args for step in final_stage() if step.keyword == "COPY")


def test_final_stage_runs_on_a_slim_python_that_the_project_supports() -> None:
    image = only(final_stage(), "FROM").args.split()[0]
    match = re.fullmatch(r"python:(\d+)\.(\d+)(?:\.\d+)?-slim(?:-\w+)?", image)
    assert match, f"final base {image!r} is not a slim Python image"
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    low = re.fullmatch(r">=\s*(\d+)\.(\d+)", project["requires-python"])
    assert low is not None
    assert (int(match[1]), int(match[2])) >= (int(low[1]), int(low[2]))


def test_a_non_root_user_is_created_and_set_before_the_command_runs() -> None:
    stage = final_stage()
    user_at = next(i for i, step in enumerate(stage) if step.keyword == "USER")
    user = stage[user_at].args.split(":")[0]
    assert user not in ("root", "0", "")
    creates = [s for s in stage[:user_at] if s.keyword == "RUN" and "useradd" in s.args]
    assert any(user in shlex.split(step.args) for step in creates), f"no useradd for {user!r}"
    assert all(step.keyword != "USER" for step in stage[user_at + 1 :]), "a later USER overrides"
    for keyword in ("ENTRYPOINT", "CMD"):
        assert user_at < next(i for i, step in enumerate(stage) if step.keyword == keyword)


def test_entrypoint_is_the_projects_console_script_and_its_target_imports() -> None:
    command = exec_form(only(final_stage(), "ENTRYPOINT"))
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert command[0] in scripts, f"{command[0]!r} is not in [project.scripts]"
    module_name, _, attribute = scripts[command[0]].partition(":")
    target = importlib.import_module(module_name)
    for part in attribute.split("."):
        target = getattr(target, part)
    assert callable(target)


def test_command_loads_the_shipped_config_that_is_copied_into_the_image() -> None:
    stage = final_stage()
    command = exec_form(only(stage, "CMD"))
    assert option(command, "--config") == SHIPPED_CONFIG
    assert option(command, "--host") == "0.0.0.0"
    config_dir = str(PurePosixPath(SHIPPED_CONFIG).parent)
    copies = [
        [word for word in step.args.split() if not word.startswith("--")]
        for step in stage
        if step.keyword == "COPY" and "--from=" not in step.args
    ]
    assert any(
        [src.rstrip("/") for src in words[:-1]] == ["config"]
        and words[-1].rstrip("/") == config_dir
        for words in copies
    ), f"no COPY config/ {config_dir}/ from the build context in the final stage"
    assert (ROOT / "config" / PurePosixPath(SHIPPED_CONFIG).name).is_file()


def test_exposed_port_is_the_listen_port_of_the_shipped_config() -> None:
    exposed = [int(port.split("/")[0]) for port in only(final_stage(), "EXPOSE").args.split()]
    assert exposed == [shipped_settings().listen.port]


def test_a_volume_holds_the_default_store_and_the_user_may_write_it() -> None:
    store = PurePosixPath(shipped_settings().store.path)
    store_dir = (store if store.is_absolute() else workdir() / store).parent
    assert any(store_dir == vol or vol in store_dir.parents for vol in volumes()), (
        f"the store directory {store_dir} is on no VOLUME {volumes()}"
    )
    stage = final_stage()
    user = only(stage, "USER").args.split(":")[0]
    chowned = [s.args for s in stage if s.keyword == "RUN" and "chown" in s.args]
    assert any(f"{user}:" in args and str(store_dir) in args for args in chowned), (
        f"{store_dir} is not made writable for {user!r} before the volume is declared"
    )


def test_healthcheck_asks_healthz_on_the_listen_port() -> None:
    check = only(final_stage(), "HEALTHCHECK").args
    match = re.search(r"http://(?:127\.0\.0\.1|localhost):(\d+)/healthz\b", check)
    assert match, f"the HEALTHCHECK does not ask /healthz: {check}"
    assert int(match[1]) == shipped_settings().listen.port


async def test_healthz_answers_200_with_status_ok_on_a_running_gateway(
    start_gateway: StartGateway,
) -> None:
    base = await start_gateway()
    async with aiohttp.ClientSession() as http, http.get(f"{base}/healthz") as response:
        assert response.status == 200
        assert await response.json() == {"status": "ok"}


def test_compose_runs_the_gateway_prometheus_and_grafana() -> None:
    assert set(compose()["services"]) == {"gateway", "prometheus", "grafana"}
    assert service("gateway")["build"] == "."
    assert str(service("prometheus")["image"]).startswith("prom/prometheus")
    assert str(service("grafana")["image"]).startswith("grafana/grafana")


def test_compose_gateway_listens_beyond_loopback_on_the_exposed_port() -> None:
    command = service("gateway")["command"]
    assert isinstance(command, list)
    assert option(command, "--config") == option(exec_form(only(final_stage(), "CMD")), "--config")
    assert option(command, "--host") == "0.0.0.0"
    assert "--port" not in command  # the healthcheck and EXPOSE assume the config's port
    port = shipped_settings().listen.port
    assert published("gateway") == {port: port}


def test_compose_keeps_the_store_on_a_named_volume_at_the_image_volume() -> None:
    data = compose()
    by_target = mounts("gateway")
    image_volumes = [str(vol) for vol in volumes()]
    named = [by_target[target] for target in image_volumes if target in by_target]
    assert named, f"no mount at {image_volumes}"
    for name in named:
        assert not name.startswith((".", "/")), f"{name} is a bind mount, not a named volume"
        assert name in (data.get("volumes") or {}), f"volume {name!r} is not declared"


def test_compose_host_names_match_the_scrape_target_and_the_data_source() -> None:
    scrape = yaml.safe_load((ROOT / "grafana" / "prometheus.yml").read_text())
    targets = [
        target
        for job in scrape["scrape_configs"]
        for static in job["static_configs"]
        for target in static["targets"]
    ]
    assert targets
    settings = shipped_settings()
    assert settings.metrics.enabled and settings.metrics.listen is None  # /metrics on listen.port
    assert targets == [f"gateway:{settings.listen.port}"]
    sources = yaml.safe_load(
        (ROOT / "grafana" / "provisioning" / "datasources" / "prometheus.yaml").read_text()
    )
    for source in sources["datasources"]:
        match = re.fullmatch(r"http://([\w.-]+):(\d+)/?", source["url"])
        assert match, source["url"]
        assert match[1] in compose()["services"]
        assert int(match[2]) in container_ports(match[1])


def test_compose_mounts_repo_files_where_the_images_and_provisioning_read_them() -> None:
    expected = {
        "prometheus": {"/etc/prometheus/prometheus.yml": "grafana/prometheus.yml"},
        "grafana": {
            "/etc/grafana/provisioning": "grafana/provisioning",
            "/var/lib/grafana/dashboards": "grafana/dashboards",
        },
    }
    for name, wanted in expected.items():
        actual = {target: str(PurePosixPath(source)) for target, source in mounts(name).items()}
        assert actual == wanted, name
        for source in actual.values():
            assert (ROOT / source).exists(), f"{name} mounts {source}, which is not in the repo"
    providers = yaml.safe_load(
        (ROOT / "grafana" / "provisioning" / "dashboards" / "dashboards.yaml").read_text()
    )
    for provider in providers["providers"]:
        assert provider["options"]["path"] in mounts("grafana")
    assert list((ROOT / "grafana" / "dashboards").glob("*.json"))
