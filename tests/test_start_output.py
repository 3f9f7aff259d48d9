"""What the command says as it starts and stops, for a person reading the log: the
configuration file, every route's full URL and upstream, where health and metrics are, and the
beginning and end of the shutdown; never an upstream's credentials."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from .conftest import free_port
from .helpers import start_process, write_config


def test_the_log_says_where_everything_is_and_when_the_stop_begins_and_ends(
    tmp_path: Path,
) -> None:
    port = free_port()
    secret_url = "http://user:s3cret@127.0.0.1:9/mcp?token=s3cret"
    upstream = f"{{transport: streamable_http, url: {json.dumps(secret_url)}}}"
    command = "[python, -m, gateway.demo, --key, s3cret]"
    routes = (
        "routes:\n"
        f"  - {{name: demo, upstream: {{transport: stdio, command: {command}}}}}\n"
        f"  - {{name: remote, upstream: {upstream}}}\n"
    )
    config = write_config(tmp_path, port, routes=routes)
    log = tmp_path / "gateway.log"
    proc = start_process(config, port, log=log)
    proc.terminate()
    assert proc.wait(15) == 0
    said = log.read_text()
    base = f"http://127.0.0.1:{port}"
    assert f"configuration: {config}" in said
    assert f"listening on {base}" in said
    # "python" is the gateway's own interpreter; the arguments are not shown.
    assert f"route demo: {base}/demo/mcp -> stdio {sys.executable}\n" in said
    assert f"route remote: {base}/remote/mcp -> streamable_http http://127.0.0.1:9/mcp" in said
    assert f"health: {base}/healthz (and /livez, /readyz)" in said
    assert f"metrics: {base}/metrics" in said
    assert said.index("shutting down") < said.index("stopped")
    assert "s3cret" not in said  # neither the URL's credentials nor the command's arguments
