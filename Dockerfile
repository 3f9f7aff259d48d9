# mcp-task-gateway: docker build -t mcp-task-gateway . && docker run -p 8080:8080 mcp-task-gateway
FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY gateway ./gateway
RUN pip wheel --no-cache-dir --wheel-dir /wheels .

FROM python:3.11-slim
RUN useradd --create-home --uid 10001 gateway
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir /wheels/*.whl && rm -rf /wheels
WORKDIR /app
COPY config/ /app/config/
RUN mkdir -p /app/data && chown gateway:gateway /app/data
USER gateway
# The SQLite store (store.path: data/gateway.db, relative to /app).
VOLUME /app/data
EXPOSE 8080
HEALTHCHECK --interval=30s --timeout=5s \
  CMD python -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8080/healthz', timeout=4)"
ENTRYPOINT ["mcp-task-gateway"]
# Inside a container the gateway must listen on all interfaces to be reachable at all.
CMD ["--config", "/app/config/gateway.yaml", "--host", "0.0.0.0"]
