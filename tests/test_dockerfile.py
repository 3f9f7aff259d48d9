"""The Dockerfile and docker-compose.yml, read as files: what building and running the image
cannot show.

`.ci/image.sh` builds the Dockerfile and runs it (as built, read-only, replaced on its volume,
stopped mid-task, with a mounted config), so the promises a run proves are checked there: the
build succeeds, the processes are non-root under the image's init, the shipped config's demo
route is served beyond loopback, the health check passes, the store lives on the volume. It builds
FROM a stand-in for the official base image, though, and never starts Prometheus or Grafana: the
pinned base, the port the image advertises, and the compose file's wiring are pinned here.
"""

from __future__ import annotations

import json
import re
import tomllib
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any

import yaml

from gateway.config import Settings, load_settings

from .conftest import ROOT

SHIPPED_CONFIG = "/app/config/gateway.yaml"
#: An official Python image pinned by digest: python:X.Y-slim[-suite]@sha256:<64 hex digits>.
PINNED_PYTHON = re.compile(r"python:(\d+)\.(\d+)(?:\.\d+)?-slim(?:-\w+)?@sha256:[0-9a-f]{64}")


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


def build_args() -> dict[str, str]:
    """The defaults of the ARGs declared before the first FROM (the ones FROM may use)."""
    defaults = {}
    for step in instructions():
        if step.keyword == "FROM":
            break
        if step.keyword == "ARG":
            name, _, value = step.args.partition("=")
            defaults[name] = value
    return defaults


def base_images() -> list[str]:
    """Each stage's base image, ${ARG}s replaced by their defaults."""
    images = []
    for step in instructions():
        if step.keyword == "FROM":
            image = step.args.split()[0]
            for name, value in build_args().items():
                image = image.replace(f"${{{name}}}", value).replace(f"${name}", value)
            images.append(image)
    return images


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


def test_every_stage_builds_on_one_official_python_pinned_by_digest() -> None:
    # One base for both stages: the virtual environment built in the first runs in the second.
    images = base_images()
    assert len(images) >= 2 and len(set(images)) == 1, images
    assert PINNED_PYTHON.fullmatch(images[0]), f"{images[0]!r} is not python:X.Y-slim@sha256:..."


def test_the_pinned_python_is_one_the_project_supports() -> None:
    match = PINNED_PYTHON.fullmatch(base_images()[0])
    assert match
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    low = re.fullmatch(r">=\s*(\d+)\.(\d+)", project["requires-python"])
    assert low is not None
    assert (int(match[1]), int(match[2])) >= (int(low[1]), int(low[2]))


def test_the_image_installs_every_optional_extra_but_the_test_tools() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = set(project.get("optional-dependencies", {})) - {"test"}
    installs = " ".join(
        s.args for s in instructions() if s.keyword == "RUN" and "pip install" in s.args
    )
    named = {
        extra.strip()
        for group in re.findall(r"\.\[([\w,\s-]+)\]", installs)
        for extra in group.split(",")
    }
    assert wanted <= named, f"extras the image does not install: {sorted(wanted - named)}"


def test_exposed_port_is_the_listen_port_of_the_shipped_config() -> None:
    exposed = [int(port.split("/")[0]) for port in only(final_stage(), "EXPOSE").args.split()]
    assert exposed == [shipped_settings().listen.port]


def test_compose_runs_the_gateway_prometheus_and_grafana() -> None:
    assert set(compose()["services"]) == {"gateway", "prometheus", "grafana"}
    assert service("gateway")["build"] == "."
    assert str(service("prometheus")["image"]).startswith("prom/prometheus:")
    assert str(service("grafana")["image"]).startswith("grafana/grafana:")


def test_compose_pins_prometheus_and_grafana_to_a_release() -> None:
    for name in ("prometheus", "grafana"):
        image = str(service(name)["image"])
        assert re.fullmatch(r"[\w./-]+:v?\d+\.\d+\.\d+", image), f"{name}: {image} is not pinned"


def test_compose_stop_grace_outlasts_the_gateways_drain_and_shutdown_grace() -> None:
    grace = service("gateway").get("stop_grace_period")
    assert grace is not None, "no stop_grace_period: compose would SIGKILL after 10 s"
    match = re.fullmatch(r"(\d+)s", str(grace))
    assert match, f"stop_grace_period {grace!r}: write it in whole seconds, like 60s"
    settings = shipped_settings()
    assert int(match[1]) > settings.shutdown.drain_seconds + settings.http.shutdown_grace_seconds


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
