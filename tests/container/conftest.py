"""Fixtures of the container suite: the engine check and the images, built
once per session on the local base (layers cached between runs)."""

import time

import pytest

import engine

VERSION = "0.1.0"


@pytest.fixture(scope="session")
def engine_ready():
    why = engine.why_no_engine()
    if why:
        pytest.skip("no container can run here: " + why)
    yield
    engine.remove_all()


@pytest.fixture(scope="session")
def image(engine_ready):
    t0 = time.monotonic()
    engine.build(engine.REPO / "docker" / "Dockerfile", engine.IMAGE,
                 args=("VERSION=" + VERSION, "REVISION=test"))
    print("redlockd image built in %.0fs" % (time.monotonic() - t0))
    return engine.IMAGE


@pytest.fixture(scope="session")
def compose_images(image):
    t0 = time.monotonic()
    engine.build(engine.REPO / "docker" / "example-bot" / "Dockerfile",
                 engine.BOT_IMAGE)
    engine.build(engine.HERE / "redis.Dockerfile", engine.REDIS_IMAGE,
                 context=engine.HERE)
    print("bot and redis images built in %.0fs" % (time.monotonic() - t0))
    return image
