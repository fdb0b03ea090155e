# cachewatch service image.
#   docker build -t cachewatch .
#   docker run --rm -v cachewatch-data:/var/lib/cachewatch cachewatch cachewatch db upgrade
#   docker run -p 8000:8000 -v cachewatch-data:/var/lib/cachewatch cachewatch
# Migrations are a separate, explicit step (`cachewatch db upgrade`) so that a schema
# change to a shared database happens once and on purpose, not at every replica's start.

# --- build: install the package and its dependencies into a venv ------------------------
FROM python:3.11-slim AS build

ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    PYTHONDONTWRITEBYTECODE=1

RUN python -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH

WORKDIR /src
# Copy only what the package build needs, so local venvs, databases and .git never
# reach an image layer. README.md* matches nothing harmlessly if the file is absent.
COPY pyproject.toml setup.py README.md* ./
COPY cachewatch ./cachewatch
COPY server ./server
COPY migrations ./migrations
# No compiler here: pip skips the optional C hot path of cachewatch.jit, which the
# service never calls.
RUN pip install --no-cache-dir ".[server]"

# --- runtime: the venv only, no compilers, no pip cache, no sources ---------------------
FROM python:3.11-slim

# JAX_PLATFORMS: the service only stores and serves records, so keep JAX from probing
# for accelerators. CACHEWATCH_STORE: SQLite on the data volume by default; compose
# points it at PostgreSQL.
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    JAX_PLATFORMS=cpu \
    CACHEWATCH_STORE=sqlite:////var/lib/cachewatch/cachewatch.db

RUN useradd --system --create-home --home-dir /home/cachewatch --shell /usr/sbin/nologin cachewatch \
    && mkdir -p /var/lib/cachewatch \
    && chown cachewatch:cachewatch /var/lib/cachewatch

COPY --from=build /opt/venv /opt/venv

USER cachewatch
WORKDIR /home/cachewatch
VOLUME ["/var/lib/cachewatch"]
EXPOSE 8000

# slim has no curl; the interpreter is already there. urlopen raises on non-2xx, which
# exits non-zero and marks the container unhealthy.
HEALTHCHECK --interval=30s --timeout=5s --start-period=20s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/healthz', timeout=4)"]

CMD ["cachewatch", "serve", "--host", "0.0.0.0", "--port", "8000"]
