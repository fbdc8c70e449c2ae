"""The app's own start-up, run as uvicorn runs it (the lifespan), against the test database."""

from __future__ import annotations

import gc

import httpx
from conftest import make_settings

from haki_context.app import GC_YOUNG_THRESHOLD, create_app


async def test_startup_objects_are_left_out_of_garbage_collection(migrated: str) -> None:
    before_threshold = gc.get_threshold()
    app = create_app(make_settings(migrated, scope_index_interval_s=0))
    try:
        async with app.router.lifespan_context(app):
            assert gc.get_freeze_count() > 10_000  # the schema, the pool, the embedder...
            assert gc.get_threshold()[0] == GC_YOUNG_THRESHOLD
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
                assert (await client.get("/readyz")).json()["status"] == "ready"
    finally:
        gc.unfreeze()  # the rest of the suite runs with the interpreter's defaults
        gc.set_threshold(*before_threshold)
