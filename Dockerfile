# mcp-task-gateway: docker build -t mcp-task-gateway . && docker run -p 8080:8080 mcp-task-gateway
#
# The official image, pinned by digest (python:3.11-slim-bookworm as docker-library/repo-info
# recorded it on 2026-08-25; Python 3.11.16). Refresh the digest, not just the tag, to take
# security updates. CI builds this file FROM a stand-in passed as --build-arg PYTHON_IMAGE,
# because it cannot pull images (README, "Running in Docker").
ARG PYTHON_IMAGE=python:3.11-slim-bookworm@sha256:0bee7276f83efd4a1ee05bbbf4281d95ed28e079220a9457f25a93e3f1e3c31b

FROM ${PYTHON_IMAGE} AS build
RUN python -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH
WORKDIR /src
# The dependencies first, in a layer of their own that only a change to pyproject.toml
# rebuilds: an empty package with the project's metadata pulls them in, and then goes.
# The `otel` extra is in: a `tracing` section must work without a rebuild of the image.
COPY pyproject.toml ./
RUN mkdir gateway && touch gateway/__init__.py README.md \
 && pip install --no-cache-dir ".[otel]" \
 && pip uninstall --yes mcp-task-gateway \
 && rm -r gateway build mcp_task_gateway.egg-info README.md
COPY README.md ./
COPY gateway ./gateway
RUN pip install --no-cache-dir --no-deps .

FROM ${PYTHON_IMAGE}
# tini as PID 1: it forwards SIGTERM to the gateway and reaps the orphans that stdio upstreams
# leave behind (a process that is PID 1 itself never reaps them), with or without `--init`.
RUN apt-get update \
 && apt-get install --yes --no-install-recommends tini \
 && apt-get clean \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --create-home --uid 10001 gateway
# Only the virtual environment crosses over: no wheels, sources or build files.
COPY --from=build /opt/venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH
WORKDIR /app
COPY config/ /app/config/
RUN mkdir -p /app/data && chown gateway:gateway /app/data
USER gateway
# The SQLite store (store.path: data/gateway.db, relative to /app).
VOLUME /app/data
EXPOSE 8080
HEALTHCHECK --interval=30s --timeout=5s \
  CMD python -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8080/healthz', timeout=4)"
ENTRYPOINT ["tini", "--", "mcp-task-gateway"]
# Inside a container the gateway must listen on all interfaces to be reachable at all.
CMD ["--config", "/app/config/gateway.yaml", "--host", "0.0.0.0"]
