# One image for every ghostless process: web, worker, sweeper, scheduler (docker-compose.yml).
# Your own task types: build FROM this image, COPY your package in and set GHOSTLESS_APP.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PYTHONPATH=/app \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /app

# Pinned runtime dependencies first (no test tools: those are in requirements-test.txt); this
# layer is rebuilt only when requirements.txt changes.
COPY requirements.txt ./
RUN pip install -r requirements.txt

COPY pyproject.toml README.md worker.py ./
COPY engine ./engine
COPY lua ./lua
COPY web ./web
# The `ghostless` command; the code itself runs from /app (PYTHONPATH).
RUN pip install --no-deps . \
    && useradd --create-home --uid 10001 ghostless

USER ghostless
EXPOSE 8000
CMD ["ghostless", "--help"]
