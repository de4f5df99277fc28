"""An app as the README writes one: the engine built from GHOSTLESS_REDIS_URL as it is imported."""

from ghostless import Engine

engine = Engine.from_url(namespace="fromurl")


@engine.task(queue="images")
def render(ctx, prompt=""):
    return {"prompt": prompt}
