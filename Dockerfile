# Baton: one image for the API, the director and stand-alone schedulers (the args choose).
# The base is any image with Python 3.11+ and its venv module: the official python image by
# default; scripts/containers.sh passes --build-arg PYTHON_IMAGE=<an image built from Debian's
# packages> where no registry can be reached. Baton lives in a virtualenv at /opt/baton either way.
ARG PYTHON_IMAGE=python:3.11-slim

FROM ${PYTHON_IMAGE} AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
RUN python3 -m venv /opt/baton
WORKDIR /src
COPY pyproject.toml README.md ./
COPY src ./src
RUN /opt/baton/bin/pip install . \
    && /opt/baton/bin/python -m compileall -q /opt/baton/lib

# `runtime`: the image itself (named so OpenKAT's compose, whose scheduler builds `target: dev`, can be
# told which stage: deploy/openkat/docker-compose.baton.yml).
FROM ${PYTHON_IMAGE} AS runtime
# OpenKAT's compose passes ENVIRONMENT=dev to its scheduler's build; Baton's image is the same either way.
ARG ENVIRONMENT
ENV PATH=/opt/baton/bin:$PATH PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
COPY --from=build /opt/baton /opt/baton
# The default database (sqlite:///baton.db) lands in the working directory: writable for uid 10001.
# Replicas need PostgreSQL (BATON_DATABASE_URL); a read-only root filesystem needs it too.
RUN useradd --uid 10001 --no-create-home --home-dir /var/lib/baton --shell /usr/sbin/nologin baton \
    && mkdir -p /var/lib/baton && chown 10001:10001 /var/lib/baton
WORKDIR /var/lib/baton
USER 10001
EXPOSE 8000
ENTRYPOINT ["baton"]
CMD ["serve", "--host", "0.0.0.0"]
