"""The run page's Progress region (admin/run_page.py): published values, the streams' counts and last chunks, live."""

from __future__ import annotations

from typing import Any

import pytest

from django_openworkflow.testing import drain
from tests.admin.helpers import run_url
from tests.fixtures.progress_workflows import progress_chunks, progress_steps

pytestmark = pytest.mark.django_db(transaction=True)
POLL = {"HTTP_X_OPENWORKFLOW_LIVE": "1"}


def test_the_run_page_shows_what_the_run_published_and_streamed(admin_client: Any) -> None:
    handle = progress_chunks.run({"chunks": 12, "every": 5})
    drain()
    page = admin_client.get(run_url(handle.id)).content.decode()
    region = page.split('data-owf-live-region="progress"')[1].split('data-owf-live-region="error"')[0]
    assert "Progress" in region
    assert "<code>written</code>" in region and '<pre class="owf-pre">10</pre>' in region
    assert "stream, 12 chunks" in region
    # The last five chunks, by offset; the first ones are left out.
    assert "11: {&quot;i&quot;:11}" in region and "7: {&quot;i&quot;:7}" in region
    assert "6: {" not in region


def test_a_run_that_published_nothing_has_an_empty_region_live_polling_can_fill(admin_client: Any) -> None:
    handle = progress_steps.run()
    page = admin_client.get(run_url(handle.id), **POLL).content.decode()
    region = page.split('data-owf-live-region="progress"')[1].split('data-owf-live-region="error"')[0]
    assert "Progress" not in region
    drain()
    page = admin_client.get(run_url(handle.id), **POLL).content.decode()
    assert "<code>percent</code>" in page and "stream, 3 chunks" in page


def test_a_run_with_many_keys_and_streams_shows_the_first_and_counts_the_rest(admin_client: Any) -> None:
    from django.utils import timezone

    from django_openworkflow.admin.run_page import KEYS_SHOWN, STREAMS_SHOWN
    from django_openworkflow.models import PublishedValue, StreamChunk

    handle = progress_steps.run()
    drain()
    now = timezone.now()
    PublishedValue.objects.bulk_create(
        PublishedValue(workflow_run_id=handle.id, key=f"k{i:03}", value=i, position=0, updated_at=now)
        for i in range(KEYS_SHOWN + 10)
    )
    StreamChunk.objects.bulk_create(
        StreamChunk(workflow_run_id=handle.id, stream=f"s{i:03}", offset=0, data=i, created_at=now)
        for i in range(STREAMS_SHOWN + 5)
    )
    page = admin_client.get(run_url(handle.id)).content.decode()
    region = page.split('data-owf-live-region="progress"')[1].split('data-owf-live-region="error"')[0]
    assert region.count('<tr class="owf-stream-row">') == STREAMS_SHOWN
    assert "<code>k000</code>" in region and f"<code>k{KEYS_SHOWN + 9:03}</code>" not in region
    # 50 of 61 keys (the run's own "percent" among them) and 20 of 26 streams ("log" among them) are shown.
    assert "… and 17 more keys and streams." in region
