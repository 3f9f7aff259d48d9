"""The Dockerfile and docker-compose.yml, read as files: what building and running the image
cannot show.

`.ci/image.sh` builds the Dockerfile and runs it (as built, read-only, replaced on its volume,
stopped mid-task, with a mounted config), so the promises a run proves are checked there: the
build succeeds, the processes are non-root under the image's init, the shipped config's demo
route is served beyond loopback, the health check passes, the store lives on the volume. It builds
FROM a stand-in for the official base image, though, and never starts Prometheus or Grafana: the
pinned base, the port the image advertises, and the compose file's wiring are pinned here. The
same goes for the `replicas` profile (PostgreSQL, two gateways, nginx), which CI cannot pull the
images of: its wiring, config/replicas.yaml and deploy/nginx-replicas.conf are read as files.
"""

from __future__ import annotations

import json
import re
import tomllib
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any
from urllib.parse import urlsplit

import yaml

from gateway.config import Settings, load_settings, parse_settings

from .conftest import ROOT

SHIPPED_CONFIG = "/app/config/gateway.yaml"
#: An official Python image pinned by digest: python:X.Y-slim[-suite]@sha256:<64 hex digits>.
PINNED_PYTHON = re.compile(r"python:(\d+)\.(\d+)(?:\.\d+)?-slim(?:-\w+)?@sha256:[0-9a-f]{64}")
DEFAULT_SERVICES = {"gateway", "prometheus", "grafana"}
REPLICA_GATEWAYS = ("gateway-a", "gateway-b")
REPLICA_SERVICES = {"postgres", *REPLICA_GATEWAYS, "lb"}
LB_CONFIG = ROOT / "deploy" / "nginx-replicas.conf"
#: A compose `${NAME}` reference, with an optional default (`:-local-value`) for a local run.
ENV_REFERENCE = re.compile(r"\$\{[A-Za-z_]\w*(?::?-[^}]*)?\}")
#: Keys whose values would be credentials; `*_env` keys name a variable instead.
SECRET_KEY = re.compile(r"password|secret|token|key", re.IGNORECASE)
#: A URL with a password in it: scheme://user:password@host.
URL_PASSWORD = re.compile(r"[a-z][a-z0-9+.-]*://[^/\s:@]+:[^/\s@]+@", re.IGNORECASE)


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


def profiles(name: str) -> list[str]:
    value = service(name).get("profiles", [])
    assert isinstance(value, list)
    return [str(profile) for profile in value]


def environment(name: str) -> dict[str, str]:
    value = service(name).get("environment", {})
    assert isinstance(value, dict), f"{name}: write its environment as a mapping"
    return {str(key): str(item) for key, item in value.items()}


def replica_settings(name: str) -> Settings:
    """The configuration a replica service runs, loaded as the gateway loads it, with stand-in
    values for exactly the variables the compose file gives the service."""
    source = mounts(name).get(option(service(name)["command"], "--config"))
    assert source is not None, f"{name}: its --config file is not mounted"
    path = ROOT / source
    stand_ins = dict.fromkeys(environment(name), "stand-in")
    return parse_settings(yaml.safe_load(path.read_text()), str(path), env=stand_ins)


def nginx_directives(name: str) -> list[list[str]]:
    """The arguments of every `name` directive in deploy/nginx-replicas.conf (a block's own
    line, like `server {`, counts as one without arguments)."""
    text = re.sub(r"#[^\n]*", "", LB_CONFIG.read_text())
    statements = [part.split() for part in re.split(r"[;{}]", text) if part.strip()]
    return [words[1:] for words in statements if words[0] == name]


def nginx_size(value: str) -> int:
    """Bytes in an nginx size such as `4m`."""
    match = re.fullmatch(r"(\d+)([kKmMgG]?)", value)
    assert match, value
    return int(match[1]) * {"": 1, "k": 1024, "m": 1024**2, "g": 1024**3}[match[2].lower()]


def literal_secrets(node: object, where: str) -> list[str]:
    """Where a credential-named key holds a value that is not a `${NAME}` reference."""
    found = []
    if isinstance(node, dict):
        for key, value in node.items():
            if isinstance(value, str) and SECRET_KEY.search(str(key)):
                if not str(key).endswith("_env") and not ENV_REFERENCE.fullmatch(value):
                    found.append(f"{where}: {key}")
            found += literal_secrets(value, f"{where}.{key}")
    elif isinstance(node, list):
        for index, item in enumerate(node):
            found += literal_secrets(item, f"{where}[{index}]")
    return found


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
    # What a plain `docker compose up` starts: the services outside every profile.
    assert {name for name in compose()["services"] if not profiles(name)} == DEFAULT_SERVICES
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


def test_compose_replicas_profile_runs_postgres_two_gateways_and_a_load_balancer() -> None:
    in_profiles = {name: profiles(name) for name in compose()["services"] if profiles(name)}
    assert in_profiles == dict.fromkeys(REPLICA_SERVICES, ["replicas"])
    assert str(service("postgres")["image"]).startswith("postgres:")
    assert str(service("lb")["image"]).startswith("nginx:")
    for name in REPLICA_GATEWAYS:
        replica = service(name)
        assert replica["build"] == service("gateway")["build"], name
        assert replica["image"] == service("gateway")["image"], name
        assert option(replica["command"], "--host") == "0.0.0.0", name
        assert "--port" not in replica["command"]  # the image's healthcheck assumes the port
        # Reached only through the load balancer, which keeps each caller on one replica.
        assert "ports" not in replica, name
        assert replica["depends_on"]["postgres"]["condition"] == "service_healthy", name


def test_compose_replicas_stop_grace_outlasts_their_drain_and_shutdown_grace() -> None:
    for name in REPLICA_GATEWAYS:
        grace = re.fullmatch(r"(\d+)s", str(service(name).get("stop_grace_period")))
        assert grace, f"{name}: no stop_grace_period in whole seconds"
        settings = replica_settings(name)
        drain = settings.shutdown.drain_seconds + settings.http.shutdown_grace_seconds
        assert int(grace[1]) > drain, name


def test_every_replica_stores_in_the_profiles_postgres_with_its_password() -> None:
    postgres = environment("postgres")
    for name in REPLICA_GATEWAYS:
        store = replica_settings(name).store
        assert store.backend == "postgres" and store.url is not None, name
        url = urlsplit(store.url)
        assert (url.hostname, url.port or 5432) == ("postgres", 5432), name
        assert url.username == postgres["POSTGRES_USER"], name
        assert url.path == "/" + postgres["POSTGRES_DB"], name
        # The replicas log in with the password the database was initialised with.
        assert environment(name)["PGPASSWORD"] == postgres["POSTGRES_PASSWORD"], name


def test_postgres_keeps_its_data_on_a_named_volume_and_is_checked_with_pg_isready() -> None:
    assert "pg_isready" in service("postgres")["healthcheck"]["test"]
    source = mounts("postgres")["/var/lib/postgresql/data"]
    assert source in (compose().get("volumes") or {}), f"volume {source!r} is not declared"


def test_no_password_in_the_configs_or_the_compose_file_but_environment_references() -> None:
    yaml_files = [ROOT / "docker-compose.yml", *sorted((ROOT / "config").glob("*.yaml"))]
    found = []
    for path in yaml_files:
        found += literal_secrets(yaml.safe_load(path.read_text()), path.name)
    for path in [*yaml_files, LB_CONFIG]:
        if URL_PASSWORD.search(path.read_text()):
            found.append(f"{path.name}: a URL with a password")
    assert found == []


def test_compose_pins_postgres_and_nginx_to_a_release() -> None:
    postgres, nginx = str(service("postgres")["image"]), str(service("lb")["image"])
    assert re.fullmatch(r"postgres:1[56]\.\d+(?:-\w+)?", postgres), f"{postgres} is not pinned"
    assert re.fullmatch(r"nginx:\d+\.\d+\.\d+(?:-\w+)?", nginx), f"{nginx} is not pinned"


def test_load_balancer_hashes_on_authorization_and_streams_unbuffered() -> None:
    # A stdio upstream's child lives on one replica: a caller must keep reaching it.
    assert nginx_directives("hash") == [["$http_authorization", "consistent"]]
    assert nginx_directives("proxy_buffering") == [["off"]]  # SSE events as they are written
    assert nginx_directives("proxy_http_version") == [["1.1"]]
    assert nginx_directives("keepalive")
    headers = {args[0].lower(): args[1] for args in nginx_directives("proxy_set_header")}
    assert headers["connection"] == '""'  # else nginx closes every upstream connection
    assert headers["x-forwarded-for"] == "$proxy_add_x_forwarded_for"
    # The MCP headers go through as the client sent them.
    assert not {"mcp-session-id", "mcp-protocol-version"} & set(headers)
    assert not nginx_directives("proxy_hide_header")
    assert not nginx_directives("proxy_pass_request_headers")


def test_load_balancer_fronts_every_replica_within_the_gateways_limits() -> None:
    upstreams = {args[0] for args in nginx_directives("server") if args}
    replicas = {f"{name}:{replica_settings(name).listen.port}" for name in REPLICA_GATEWAYS}
    assert upstreams == replicas
    assert [int(args[0]) for args in nginx_directives("listen")] == container_ports("lb")
    source = mounts("lb")["/etc/nginx/conf.d/default.conf"]
    assert (ROOT / source).resolve() == LB_CONFIG
    settings = replica_settings(REPLICA_GATEWAYS[0])
    [[size]] = nginx_directives("client_max_body_size")
    assert nginx_size(size) >= settings.limits.max_body_bytes  # the gateway's 413, not nginx's
    [[timeout]] = nginx_directives("proxy_read_timeout")
    # A long tasks/result stream is cut unless the timeout outlasts the keepalive comments.
    assert int(timeout.removesuffix("s")) > settings.http.keepalive_seconds
