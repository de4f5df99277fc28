"""An asyncio app: its AsyncEngine made from GHOSTLESS_REDIS_URL as it is imported, its task types
registered through it (on its Engine, which ``--app tests.apps.aio:aengine`` loads)."""

from ghostless import AsyncEngine

aengine = AsyncEngine.from_url(namespace="aio", dispatcher=None)


@aengine.task(queue="images")
def render(ctx, prompt=""):
    return {"prompt": prompt}
