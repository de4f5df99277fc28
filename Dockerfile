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

# ghostless itself is installed (one import name, `ghostless`) from a build copy that is then removed:
# /app holds no engine/ or web/ folder to shadow a user's modules of those names.
COPY pyproject.toml README.md /src/
COPY engine /src/engine
COPY lua /src/lua
COPY web /src/web
RUN pip install --no-deps /src \
    && rm -rf /src \
    && useradd --create-home --uid 10001 ghostless
# `python worker.py --app ...` works in the image too (it imports the installed ghostless).
COPY worker.py ./

USER ghostless
EXPOSE 8000
CMD ["ghostless", "--help"]
